/* options.c — a command's argv parsed against its table, its usage errors and its help page (see
 * options.h). */
#include "options.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "suggest.h"

enum { MESSAGE_MAX = 1024, NAME_MAX_LEN = 64 };

/* Writes one line on spec's log. */
static void say(const tw_options *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const tw_options *spec, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (spec->logv) {
        spec->logv(fmt, ap);
    } else {
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

int tw_options_error(const tw_options *spec, const char *fmt, ...)
{
    char msg[MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    say(spec, "%s: %s", spec->command, msg);
    say(spec, "(see '%s --help')", spec->command);
    return TW_OPT_USAGE;
}

/* ================================ values ================================ */

static int in_range(const tw_opt *o, double v)
{
    return v >= o->min && v <= o->max;
}

/* A whole number of decimal digits in o's range into *v; -1 when it is not one. */
static int whole(const tw_opt *o, const char *s, uint64_t *v)
{
    char *end;
    if (*s < '0' || *s > '9' || s[strspn(s, "0123456789")])
        return -1;
    errno = 0;
    *v = strtoull(s, &end, 10);
    return errno || !in_range(o, (double)*v) ? -1 : 0;
}

/* A decimal number (with a K/M/G/T multiplier when units) in o's range into *v; -1 when it is not one. */
static int decimal(const tw_opt *o, const char *s, int units, double *v)
{
    static const char UNITS[] = "KMGT";
    size_t digits = strspn(s, "0123456789.eE+-");
    char *end;
    if (!digits || !((*s >= '0' && *s <= '9') || *s == '.'))
        return -1;
    errno = 0;
    *v = strtod(s, &end);
    if (errno || end != s + digits)
        return -1;
    const char *unit = units && *end ? strchr(UNITS, *end) : NULL;
    if (unit && end[1] == 0)
        *v *= (double)(1ull << (10 * (unit - UNITS + 1)));
    else if (*end)
        return -1;
    return in_range(o, *v) ? 0 : -1;
}

static int choice(const tw_opt *o, const char *s, int *v)
{
    for (int i = 0; o->names[i]; i++)
        if (!strcmp(s, o->names[i])) {
            *v = i;
            return 0;
        }
    return -1;
}

/* Parses s by o's kind into field; -1 when it is malformed (field may then hold anything). */
static int parse_value(const tw_opt *o, const char *s, void *field)
{
    uint64_t n = 0;
    double d = 0;
    int bad = 0;
    switch (o->kind) {
    case TW_OPT_FLAG: *(int *)field = 1; break;
    case TW_OPT_CLEAR: *(int *)field = 0; break;
    case TW_OPT_STRING: *(const char **)field = s; bad = (double)strlen(s) < o->min; break;
    case TW_OPT_INT: bad = whole(o, s, &n); *(int *)field = (int)n; break; /* max <= INT_MAX */
    case TW_OPT_U64: bad = whole(o, s, field); break;
    case TW_OPT_DOUBLE: bad = decimal(o, s, 0, field); break;
    case TW_OPT_BYTES: bad = decimal(o, s, 1, &d); *(uint64_t *)field = bad ? 0 : (uint64_t)d; break;
    case TW_OPT_CHOICE: bad = choice(o, s, field); break;
    case TW_OPT_CUSTOM: bad = o->parse(s, field); break;
    }
    return bad ? -1 : 0;
}

/* The size of one value of o's kind: the step between a list's entries. */
static size_t value_size(const tw_opt *o)
{
    switch (o->kind) {
    case TW_OPT_STRING: return sizeof(const char *);
    case TW_OPT_U64: case TW_OPT_BYTES: return sizeof(uint64_t);
    case TW_OPT_DOUBLE: return sizeof(double);
    default: return sizeof(int);
    }
}

/* What a value of o must be, for a message: "an integer from 1 to 64", "auto, cpu or cuda". */
static void wants(const tw_opt *o, char *buf, size_t size)
{
    size_t len = 0;
    switch (o->kind) {
    case TW_OPT_INT: case TW_OPT_U64:
        if (isinf(o->max))
            snprintf(buf, size, "an integer >= %.0f", o->min);
        else
            snprintf(buf, size, "an integer from %.0f to %.0f", o->min, o->max);
        return;
    case TW_OPT_DOUBLE: snprintf(buf, size, "a number from %g to %g", o->min, o->max); return;
    case TW_OPT_BYTES:
        snprintf(buf, size, "a number of bytes from %g to %g (K, M, G, T: powers of 1024)", o->min, o->max);
        return;
    case TW_OPT_CHOICE:
        buf[0] = 0;
        for (int i = 0; o->names[i] && len < size; i++)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", i == 0 ? "" : o->names[i + 1] ? ", " : " or ",
                                    o->names[i]);
        return;
    case TW_OPT_CUSTOM: snprintf(buf, size, "%s", o->wants); return;
    default: snprintf(buf, size, "a value that is not empty"); return;
    }
}

static int bad_value(const tw_options *spec, const tw_opt *o, const char *s)
{
    char w[256];
    wants(o, w, sizeof w);
    if (spec->wording == TW_OPT_SAY_BAD_VALUE)
        return tw_options_error(spec, "--%s: bad value '%s': expected %s", o->name, s, w);
    return tw_options_error(spec, "--%s wants %s, got '%s'", o->name, w, s);
}

/* Stores s into o's field of base (the next entry of a list). */
static int store(const tw_options *spec, const tw_opt *o, void *base, const char *s)
{
    char *field = (char *)base + o->offset;
    int *count = o->repeat ? (int *)((char *)base + o->count) : NULL;
    if (count && *count == o->repeat)
        return tw_options_error(spec, "option --%s given more than %d times", o->name, o->repeat);
    if (parse_value(o, s, count ? field + (size_t)*count * value_size(o) : field) != 0)
        return bad_value(spec, o, s);
    if (count)
        ++*count;
    return TW_OPT_GO;
}

/* ================================ options ================================ */

static int is_flag(const tw_opt *o)
{
    return o->kind == TW_OPT_FLAG || o->kind == TW_OPT_CLEAR;
}

/* The row of "--name" (name[len], without the dashes) or of "-letter" (letter != 0); NULL when none. */
static const tw_opt *find(const tw_options *spec, const char *name, size_t len, char letter)
{
    for (const tw_opt *o = spec->opts; o->name; o++)
        if (letter ? o->letter == letter : strlen(o->name) == len && !strncmp(o->name, name, len))
            return o;
    return NULL;
}

/* "unknown option 'ARG'", with the closest long name when one is close. */
static int unknown(const tw_options *spec, const char *arg, size_t len)
{
    const char *names[TW_OPT_MAX];
    size_t n = 0;
    for (const tw_opt *o = spec->opts; o->name; o++)
        names[n++] = o->name;
    char typed[NAME_MAX_LEN] = "";
    if (arg[1] == '-' && len - 2 < sizeof typed) {
        memcpy(typed, arg + 2, len - 2);
        typed[len - 2] = 0;
    }
    const char *hint = typed[0] ? tw_suggest(typed, names, n) : NULL;
    return tw_options_error(spec, "unknown option '%s'%s%s%s", arg, hint ? " (did you mean --" : "",
                            hint ? hint : "", hint ? "?)" : "");
}

/* Takes the option argv[*i] (and its value, argv[*i + 1] unless given as --name=value); given: the rows
 * seen so far, a bit each. */
static int take_option(const tw_options *spec, void *base, int argc, char **argv, int *i, uint64_t *given)
{
    const char *arg = argv[*i], *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const tw_opt *o = arg[1] == '-' ? find(spec, arg + 2, len - 2, 0) : len == 2 ? find(spec, NULL, 0, arg[1]) : NULL;
    if (!o)
        return unknown(spec, arg, len);
    uint64_t bit = 1ull << (o - spec->opts);
    if ((*given & bit) && !o->repeat)
        return tw_options_error(spec, "option --%s given twice", o->name);
    *given |= bit;
    if (is_flag(o) && eq)
        return tw_options_error(spec, "option --%s takes no value", o->name);
    if (!is_flag(o) && !eq && *i + 1 >= argc)
        return tw_options_error(spec, "option --%s needs a value (%s)", o->name, o->arg);
    return store(spec, o, base, is_flag(o) ? "" : eq ? eq + 1 : argv[++*i]);
}

/* The checks after the last argument: required options (a choice's message lists its values), the options
 * others need, the arguments' count. */
static int check_given(const tw_options *spec, uint64_t given, int nargs)
{
    if (nargs < spec->min_args)
        return tw_options_error(spec, "expected %s (%d given)", spec->operands, nargs);
    for (const tw_opt *o = spec->opts; o->name; o++) {
        int has = (given >> (o - spec->opts)) & 1;
        const tw_opt *needed = o->needs ? find(spec, o->needs, strlen(o->needs), 0) : NULL;
        if (o->required && !has && o->kind == TW_OPT_CHOICE) {
            char w[256];
            wants(o, w, sizeof w);
            return tw_options_error(spec, "--%s is required (%s)", o->name, w);
        }
        if (o->required && !has)
            return tw_options_error(spec, "--%s is required", o->name);
        if (has && needed && !((given >> (needed - spec->opts)) & 1))
            return tw_options_error(spec, "--%s needs --%s", o->name, o->needs);
    }
    return TW_OPT_GO;
}

int tw_options_parse(const tw_options *spec, void *base, int argc, char **argv, int *nargs)
{
    uint64_t given = 0;
    int n = 0, only_args = 0, rc = TW_OPT_GO;
    for (const tw_opt *o = spec->opts; o->name; o++)
        assert(o - spec->opts < TW_OPT_MAX && (!o->needs || find(spec, o->needs, strlen(o->needs), 0)));
    for (int i = 1; i < argc && rc == TW_OPT_GO; i++) {
        const char *arg = argv[i];
        if (only_args || arg[0] != '-' || !arg[1]) {
            if (n == spec->max_args)
                return tw_options_error(spec, "unexpected argument '%s'", arg);
            argv[1 + n++] = argv[i]; /* i >= 1 + n: nothing unread is overwritten */
        } else if (!strcmp(arg, "--")) {
            only_args = 1;
        } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            tw_options_help(spec, stdout);
            return 0;
        } else {
            rc = take_option(spec, base, argc, argv, &i, &given);
        }
    }
    *nargs = n;
    return rc == TW_OPT_GO ? check_given(spec, given, n) : rc;
}

/* ================================ the help page ================================ */

/* The left column of o's line: "-o, --output OUT". */
static void left_column(const tw_opt *o, char *buf, size_t size)
{
    int n = o->letter ? snprintf(buf, size, "-%c, ", o->letter) : 0;
    snprintf(buf + n, size - (size_t)n, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
}

/* "  LEFT  HELP" with HELP's continuation lines under its first. */
static void print_row(FILE *out, const char *left, int width, const char *help)
{
    fprintf(out, "  %-*s ", width, left);
    for (const char *line = help; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (line != help)
            fprintf(out, "  %-*s ", width, "");
        fprintf(out, "%.*s\n", (int)strcspn(line, "\n"), line);
    }
}

void tw_options_help(const tw_options *spec, FILE *out)
{
    static const tw_opt HELP = {.name = "help", .letter = 'h', .help = "show this help"};
    char left[NAME_MAX_LEN * 2];
    int width = (int)strlen("-h, --help");
    for (const tw_opt *o = spec->opts; o->name; o++) {
        left_column(o, left, sizeof left);
        width = (int)strlen(left) > width ? (int)strlen(left) : width;
    }
    width += 1;
    fprintf(out, "usage: %s %s\n\n%s%s", spec->command, spec->usage, spec->about, spec->opts->section ? "" : "\n");
    for (const tw_opt *o = spec->opts; o->name; o++) {
        if (o->section)
            fprintf(out, "\n%s:\n", o->section);
        left_column(o, left, sizeof left);
        print_row(out, left, width, o->help);
    }
    left_column(&HELP, left, sizeof left);
    print_row(out, left, width, HELP.help);
    if (spec->epilog)
        fprintf(out, "\n%s", spec->epilog);
}
