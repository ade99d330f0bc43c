/* options.h — a command's options as one table: its argv parsed against the table, usage errors that name
 * the option and what was wrong, and the --help page printed from it.
 *
 * Owns: the command-line grammar every `tower` subcommand shares. `--name VALUE`, `--name=VALUE` and
 * `-x VALUE` give a value; a flag takes none; `--` makes the rest arguments; "-" is an argument; `-h` and
 * `--help` print the page. Usage errors (exit status 2): an unknown option (with "did you mean"), an
 * option given twice (unless it collects a list), a missing or malformed value, a missing required
 * option, an option without the one it needs, too few or too many arguments. Values are checked by kind:
 * integers and numbers in a range, byte counts with K/M/G/T suffixes, one of a list of names, or the
 * command's own check. Does not own what the options mean (each command's table) nor exiting: every
 * function returns, the exit status is the caller's to return (cli/main.c exits).
 * Written by hand: getopt_long has no typed values, prints its own messages under argv[0], accepts
 * abbreviations, and knows nothing of a help text; one table gives every command the same messages and a
 * --help page that lists every option. */
#ifndef TW_OPTIONS_H
#define TW_OPTIONS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* What an option's value is, and what the field at its offset holds. */
typedef enum {
    TW_OPT_FLAG,   /* no value: the int is set to 1 */
    TW_OPT_CLEAR,  /* no value: the int is set to 0 (--no-demo) */
    TW_OPT_STRING, /* const char *: the value itself, borrowed from argv; min 1: it may not be empty */
    TW_OPT_INT,    /* int (an unsigned takes it as well: the range starts at 0 or more): decimal digits, in
                    * [min, max] */
    TW_OPT_U64,    /* uint64_t: decimal digits, in [min, max] */
    TW_OPT_DOUBLE, /* double: a decimal number (1.5, 2e-3), in [min, max] */
    TW_OPT_BYTES,  /* uint64_t: a decimal number of bytes with an optional K, M, G or T (powers of 1024:
                    * 512M, 1.5G, 1e9), in [min, max] */
    TW_OPT_CHOICE, /* int: the index in names of the value, which is one of them exactly */
    TW_OPT_CUSTOM, /* what parse(value, field) writes; it returns 0, or -1 for a value that is not `wants` */
} tw_opt_kind;

/* One row of a command's table. Rows are written with designated initializers; the table ends with a
 * row whose name is NULL. */
typedef struct {
    const char *name;    /* the long name, without "--" */
    char letter;         /* the short form -letter, or 0 */
    tw_opt_kind kind;
    size_t offset;       /* where the value goes: offsetof the field in the caller's struct */
    const char *arg;     /* the value's name on the help page ("N", "FILE"); NULL for the two flags */
    const char *help;    /* its help; '\n' starts a continuation line */
    double min, max;     /* INT, U64, DOUBLE, BYTES: the range (max INFINITY: none above); STRING: min */
    const char *const *names;                     /* CHOICE: the values, NULL-terminated */
    int (*parse)(const char *value, void *field); /* CUSTOM */
    const char *wants;   /* CUSTOM: what a value must be, for the message ("none, gzip or zlib") */
    int repeat;          /* > 0: a list of up to `repeat` values, an array at offset, their count an int at
                          * `count`; 0: the option is given at most once */
    size_t count;
    int required;        /* a usage error when it is not given */
    const char *needs;   /* the name of an option that must be given with this one, or NULL */
    const char *section; /* the help page's heading above this row, or NULL */
} tw_opt;

/* How a malformed value is said: "--towers wants an integer from 1 to 64, got 'x'", or tower convert's
 * "--seed: bad value 'x': expected an integer >= 0". */
typedef enum { TW_OPT_SAY_WANTS, TW_OPT_SAY_BAD_VALUE } tw_opt_wording;

/* A command: its table, its arguments and its help page. */
typedef struct {
    const char *command;  /* "tower train": every message starts with it */
    const char *usage;    /* the synopsis after "usage: COMMAND " (a line break continues it) */
    const char *about;    /* the help page's text between the usage and the options, ending in '\n' */
    const char *epilog;   /* the text after the options (exit statuses), or NULL */
    const tw_opt *opts;   /* at most TW_OPT_MAX rows */
    const char *operands; /* the arguments' names for a message ("CHECKPOINT INPUT..."), NULL: none */
    int min_args, max_args;
    tw_opt_wording wording;
    void (*logv)(const char *fmt, va_list ap); /* writes one message line; NULL: stderr */
} tw_options;

enum {
    TW_OPT_MAX = 64,   /* rows of one table */
    TW_OPT_GO = -1,    /* tw_options_parse: the command goes on */
    TW_OPT_USAGE = 2,  /* the exit status of a usage error */
};

/* Parses argv[1..argc) (argv[0] is the command's name) into the fields of base that spec's rows name;
 * fields of options not given keep what the caller put there (the defaults). The arguments that are not
 * options are moved, in their order, to argv[1..*nargs]. Returns TW_OPT_GO; 0 after printing the help page
 * on stdout (-h, --help); TW_OPT_USAGE after printing the usage error on spec's log. Values stored are
 * borrowed from argv. */
int tw_options_parse(const tw_options *spec, void *base, int argc, char **argv, int *nargs);

/* Reports a usage error of the command ("tower train: MESSAGE" and where the help is) on spec's log, for
 * the checks a command makes after parsing; returns TW_OPT_USAGE. */
int tw_options_error(const tw_options *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the help page: usage, about, one line per option (the table's order, -h/--help last), epilog. */
void tw_options_help(const tw_options *spec, FILE *out);

#endif
