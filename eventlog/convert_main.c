/* convert_main.c — `tower convert`: the command line over tw_convert (convert.h).
 *
 * Owns: the option table (one row per option: spelling, value kind, where it goes, help text — the
 * --help page is printed from it, so every option is documented), strict parsing of option values
 * (unknown, repeated or malformed options are usage errors, exit 2), the one-line error message, and the
 * summary (a line, or JSON with --json), and on a terminal the live progress line before it. Does not own: what a conversion does (convert.c) or exiting
 * (server/main.c). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "convert.h"

enum { EXIT_FAILED = 1, EXIT_USAGE = 2 };

typedef enum { ARG_PATH, ARG_COMPRESSION, ARG_FRACTION, ARG_U64, ARG_BYTES, ARG_FLAG } arg_kind;

typedef struct {
    tw_convert_options o;
    const char *class_names; /* --class-names FILE: read into o.class_names */
    int json;
    int help;
} cli;

typedef struct {
    const char *section; /* printed above the first option of each group */
    const char *name;    /* "--images" */
    const char *alias;   /* "-o", or NULL */
    const char *metavar; /* "FILE"; NULL for flags */
    arg_kind kind;
    size_t offset;       /* of the field in cli */
    const char *help;
} option;

#define OPT(field) offsetof(cli, o.field)

static const option OPTIONS[] = {
    {"IDX source (MNIST-style, raw or gzip)", "--images", NULL, "FILE", ARG_PATH, OPT(images),
     "images: ubyte idx3 (N, rows, cols) or idx4 (+ channels)"},
    {NULL, "--labels", NULL, "FILE", ARG_PATH, OPT(labels), "labels: idx1 ubyte, magic 0x0801"},
    {NULL, "--test-images", NULL, "FILE", ARG_PATH, OPT(test_images),
     "a second IDX pair: all of it goes to --test-output"},
    {NULL, "--test-labels", NULL, "FILE", ARG_PATH, OPT(test_labels),
     "the labels of --test-images"},
    {"CSV source (header row, numeric columns, raw or gzip)", "--csv", NULL, "FILE", ARG_PATH,
     OPT(csv), "the CSV file; read twice (validate, then write)"},
    {NULL, "--label-column", NULL, "NAME", ARG_PATH, OPT(label_column),
     "the label column; every other column is a float feature"},
    {NULL, "--test-csv", NULL, "FILE", ARG_PATH, OPT(test_csv),
     "a second CSV, same header: all of it goes to --test-output"},
    {"NumPy source (.npy v1/v2, raw or gzip)", "--npy-features", NULL, "FILE", ARG_PATH,
     OPT(npy_features), "features: |u1 or <f4, any rank >= 1, examples along axis 0"},
    {NULL, "--npy-labels", NULL, "FILE", ARG_PATH, OPT(npy_labels),
     "labels (N,) or (N, 1): |u1 <i4 <i8 -> int64, <f4 <f8 -> float"},
    {NULL, "--test-npy-features", NULL, "FILE", ARG_PATH, OPT(test_npy_features),
     "a second pair, same shape/dtype: all of it goes to --test-output"},
    {NULL, "--test-npy-labels", NULL, "FILE", ARG_PATH, OPT(test_npy_labels),
     "the labels of --test-npy-features"},
    {"TFRecord source (tf.train.Example records; plain, GZIP or ZLIB, detected)", "--tfrecord", NULL,
     "FILE", ARG_PATH, OPT(tfrecord), "every record is checked, then copied as it is"},
    {NULL, "--test-tfrecord", NULL, "FILE", ARG_PATH, OPT(test_tfrecord),
     "a second file, same features: all of it goes to --test-output"},
    {"output", "--output", "-o", "OUT", ARG_PATH, OPT(output),
     "the TFRecord file to write (the train split)"},
    {NULL, "--test-output", NULL, "OUT", ARG_PATH, OPT(test_output),
     "the test split (with --test-fraction or a test file)"},
    {NULL, "--test-fraction", NULL, "F", ARG_FRACTION, OPT(test_fraction),
     "exactly round(F*N) examples, seeded, stratified by integer label"},
    {NULL, "--seed", NULL, "N", ARG_U64, OPT(seed), "seed of the --test-fraction sampling (0)"},
    {NULL, "--class-names", NULL, "FILE", ARG_PATH, offsetof(cli, class_names),
     "names of classes 0..K-1: one a line, a comma list or a JSON array"},
    {NULL, "--compression", NULL, "KIND", ARG_COMPRESSION, OPT(compression),
     "none, gzip or zlib, for both TFRecord files (none)"},
    {NULL, "--meta", NULL, "FILE", ARG_PATH, OPT(meta),
     "the JSON description (default OUT, .tfrecord -> .meta.json)"},
    {"limits and reporting", "--max-bytes", NULL, "N", ARG_BYTES, OPT(max_bytes),
     "budget per input file, decompressed; K/M/G/T suffix (16G)"},
    {NULL, "--max-record-bytes", NULL, "N", ARG_BYTES, OPT(max_record_bytes),
     "cap on one --tfrecord record's length; K/M/G/T suffix (64M)"},
    {NULL, "--allow-nonfinite", NULL, NULL, ARG_FLAG, OPT(allow_nonfinite),
     "keep NaN/Inf float features (refused by default, naming where)"},
    {NULL, "--json", NULL, NULL, ARG_FLAG, offsetof(cli, json),
     "print the summary (or error) as one JSON object"},
    {NULL, "--help", "-h", NULL, ARG_FLAG, offsetof(cli, help), "show this help"},
};

enum { N_OPTIONS = sizeof OPTIONS / sizeof OPTIONS[0] };

static void print_help(void)
{
    printf("usage: tower convert (--images FILE --labels FILE | --csv FILE --label-column NAME |\n"
           "                      --npy-features FILE --npy-labels FILE | --tfrecord FILE)\n"
           "                      -o OUT [options]\n\n"
           "Converts a dataset into a TFRecord file of tf.train.Example records, optionally splits\n"
           "off a test set, and writes a JSON description of the result. Inputs may be gzip\n"
           "compressed (detected by content). On any error nothing is written.\n");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option *op = &OPTIONS[i];
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", op->alias ? op->alias : "", op->alias ? ", " : "",
                 op->name, op->metavar ? " " : "", op->metavar ? op->metavar : "");
        if (op->section)
            printf("\n%s:\n", op->section);
        printf("  %-26s %s\n", left, op->help);
    }
    printf("\nfeatures of each Example:\n"
           "  IDX      image_raw (bytes), label, size, height, width, depth (int64)\n"
           "  CSV      features (float list), label (int64 if every label is an integer, else float)\n"
           "  NumPy    image_raw (bytes, little-endian), shape (int64 list), dtype (bytes), label\n"
           "  TFRecord the input's own, the same names and kinds in every record; an error names\n"
           "           the record (\"record N:\", from 0) and its byte offset (decompressed)\n"
           "\nexit status: 0 done, 1 conversion failed, 2 usage error.\n");
}

/* ================================ parsing ================================ */

/* Prints "tower convert: <message>" and the help hint; returns the usage exit status. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tower convert: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see 'tower convert --help')\n");
    va_end(ap);
    return EXIT_USAGE;
}

/* Parses "N", "NK", "NM", "NG", "NT" (powers of 1024); 0 on success. */
static int parse_bytes(const char *s, uint64_t *out)
{
    static const char units[] = "KMGT";
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    const char *u = *end ? strchr(units, *end) : NULL;
    if (errno || (*end && (!u || end[1])))
        return -1;
    for (int shift = u ? 10 * (int)(u - units + 1) : 0; shift > 0; shift -= 10) {
        if (v > (UINT64_MAX >> 10))
            return -1;
        v <<= 10;
    }
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_fraction(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || errno || *end || !(v >= 0 && v <= 1))
        return -1;
    *out = v;
    return 0;
}

/* Stores value into the field op points at; returns 0 or prints a usage error and returns 2. */
static int set_value(cli *c, const option *op, const char *value)
{
    void *field = (char *)c + op->offset;
    tw_error err;
    int bad = 0;
    switch (op->kind) {
    case ARG_PATH: bad = !*value; *(const char **)field = value; break;
    case ARG_COMPRESSION: bad = tw_compression_parse(value, 0, field, &err) != TW_OK; break;
    case ARG_FRACTION: bad = parse_fraction(value, field); break;
    case ARG_U64: bad = parse_u64(value, field); break;
    case ARG_BYTES: bad = parse_bytes(value, field) || *(uint64_t *)field == 0; break;
    case ARG_FLAG: *(int *)field = 1; break;
    }
    if (!bad)
        return 0;
    static const char *const expect[] = {"a non-empty path", "none, gzip or zlib",
                                         "a number in [0, 1]", "a non-negative integer",
                                         "a positive byte count (K/M/G/T suffixes)", ""};
    return usage_error("%s: bad value '%s': expected %s", op->name, value, expect[op->kind]);
}

static const option *find_option(const char *arg, size_t len)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option *op = &OPTIONS[i];
        if ((strlen(op->name) == len && !strncmp(arg, op->name, len)) ||
            (op->alias && strlen(op->alias) == len && !strncmp(arg, op->alias, len)))
            return op;
    }
    return NULL;
}

/* Parses one argument (and its value, argv[*i + 1] unless given as --name=value). */
static int parse_one(cli *c, int argc, char **argv, int *i, int seen[N_OPTIONS])
{
    const char *arg = argv[*i];
    if (arg[0] != '-')
        return usage_error("unexpected argument '%s'", arg);
    const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
    const option *op = find_option(arg, eq ? (size_t)(eq - arg) : strlen(arg));
    if (!op)
        return usage_error("unknown option '%s'", arg);
    if (seen[op - OPTIONS]++)
        return usage_error("option %s given twice", op->name);
    if (!op->metavar)
        return eq ? usage_error("option %s takes no value", op->name) : set_value(c, op, "");
    if (eq)
        return set_value(c, op, eq + 1);
    if (*i + 1 >= argc)
        return usage_error("option %s needs a value (%s)", op->name, op->metavar);
    return set_value(c, op, argv[++*i]);
}

static int parse_args(cli *c, int argc, char **argv)
{
    int seen[N_OPTIONS] = {0};
    for (int i = 1; i < argc; i++) {
        int rc = parse_one(c, argc, argv, &i, seen);
        if (rc)
            return rc;
    }
    if (seen[find_option("--seed", 6) - OPTIONS] && c->o.test_fraction < 0)
        return usage_error("--seed needs --test-fraction");
    if (seen[find_option("--max-record-bytes", 18) - OPTIONS] && !c->o.tfrecord)
        return usage_error("--max-record-bytes needs --tfrecord");
    return 0;
}

/* ================================ reporting ================================ */

/* The terminal's progress line: when the conversion started (CLOCK_MONOTONIC seconds). */
typedef struct {
    double start;
} progress_line;

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* tw_convert_options.progress on a terminal: "\rconverted N examples  E ex/s", rewritten in place. */
static void draw_progress(uint64_t examples, void *ctx)
{
    const progress_line *p = ctx;
    double s = monotonic_s() - p->start;
    printf("\r\033[Kconverted %llu examples", (unsigned long long)examples);
    if (s > 0)
        printf("  %.0f ex/s", (double)examples / s);
    fflush(stdout);
}

static void report_error(const cli *c, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    fprintf(stderr, "tower convert: %s\n", msg);
    if (!c->json)
        return;
    json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", tw_status_name(err->status), "message",
                          msg);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(j);
}

static int report_json(const cli *c, const tw_convert_result *r)
{
    const tw_convert_options *o = &c->o;
    json_t *j = json_pack("{s:s, s:s, s:{s:s, s:I}, s:s}", "source", tw_convert_source_name(r->source),
                          "compression", tw_compression_name(o->compression), "train", "path",
                          o->output, "count", (json_int_t)r->train_count, "meta", r->meta_path);
    if (j && r->has_test)
        json_object_set_new(j, "test", json_pack("{s:s, s:I}", "path", o->test_output, "count",
                                                 (json_int_t)r->test_count));
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) {
        fprintf(stderr, "tower convert: out of memory while printing the summary\n");
        return EXIT_FAILED;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

static int report(const cli *c, const tw_convert_result *r)
{
    const tw_convert_options *o = &c->o;
    if (c->json)
        return report_json(c, r);
    printf("tower convert: wrote %llu examples to %s", (unsigned long long)r->train_count, o->output);
    if (r->has_test)
        printf(" and %llu to %s", (unsigned long long)r->test_count, o->test_output);
    printf(" (%s, compression %s); meta: %s\n", tw_convert_source_name(r->source),
           tw_compression_name(o->compression), r->meta_path);
    return 0;
}

int tw_convert_main(int argc, char **argv)
{
    cli c;
    memset(&c, 0, sizeof c);
    tw_convert_options_default(&c.o);
    int rc = parse_args(&c, argc, argv);
    if (rc)
        return rc;
    if (c.help) {
        print_help();
        return 0;
    }
    tw_error err;
    tw_error_clear(&err);
    tw_convert_source source;
    if (tw_convert_check(&c.o, &source, &err) != TW_OK)
        return usage_error("%s", err.message);
    progress_line line = {monotonic_s()};
    int terminal = !c.json && isatty(fileno(stdout)); /* --json and pipes keep their one summary line */
    if (terminal) {
        c.o.progress = draw_progress;
        c.o.progress_ctx = &line;
    }
    json_t *names = NULL;
    if (c.class_names && tw_convert_class_names_read(c.class_names, &names, &err) != TW_OK) {
        report_error(&c, &err);
        return EXIT_FAILED;
    }
    c.o.class_names = names;
    tw_convert_result res;
    tw_status s = tw_convert(&c.o, &res, &err);
    json_decref(names);
    if (terminal)
        fputs("\r\033[K", stdout); /* the summary replaces the progress line */
    if (s != TW_OK) {
        report_error(&c, &err);
        return EXIT_FAILED;
    }
    return report(&c, &res);
}
