/* convert_main.c — `tower convert`: the command line over tw_convert (convert.h).
 *
 * Owns: the option table (one row per option: spelling, value kind, where it goes, help text — the
 * --help page is printed from it by base/options.h, which also makes unknown, repeated or malformed
 * options usage errors, exit 2), the one-line error message, the summary (a line, or JSON with --json),
 * and on a terminal the live progress line before it. Does not own: what a conversion does (convert.c)
 * or exiting (cli/main.c). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "convert.h"
#include "options.h"

enum { EXIT_FAILED = 1 };

typedef struct {
    tw_convert_options o;
    const char *class_names; /* --class-names FILE: read into o.class_names */
    int json;
} cli;

/* --compression's values: a writer's (no auto). */
static int compression_of(const char *value, void *field)
{
    tw_error err;
    return tw_compression_parse(value, 0, field, &err) == TW_OK ? 0 : -1;
}

/* --image-size: "HxW", or one number for a square, each side 1 to 4096, into image_height, image_width. */
static int image_size_of(const char *value, void *field)
{
    int *hw = field, n = 0;
    unsigned h, w;
    char x;
    if (sscanf(value, "%u%n", &h, &n) == 1 && !value[n])
        w = h;
    else if (sscanf(value, "%u%c%u%n", &h, &x, &w, &n) != 3 || x != 'x' || value[n])
        return -1;
    if (h < 1 || w < 1 || h > 4096 || w > 4096)
        return -1;
    hw[0] = (int)h;
    hw[1] = (int)w;
    return 0;
}

static int channels_of(const char *value, void *field)
{
    if (strcmp(value, "1") && strcmp(value, "3"))
        return -1;
    *(int *)field = value[0] - '0';
    return 0;
}

/* --shape: "28x28x1" or "28,28,1", into the options' shape (tw_convert_shape_parse). */
static int shape_of(const char *value, void *field)
{
    tw_error err;
    return tw_convert_shape_parse(value, field, &err) == TW_OK ? 0 : -1;
}

static const char *const FITS[] = {[TW_CONVERT_FIT_CROP] = "crop", [TW_CONVERT_FIT_PAD] = "pad", NULL};

#define PATH_OPTION(option, field, placeholder, text) \
    .name = option, .kind = TW_OPT_STRING, .offset = offsetof(cli, o.field), .arg = placeholder, .min = 1, \
    .help = text

static const tw_opt OPTIONS[] = {
    {PATH_OPTION("images", images, "FILE", "images: ubyte idx3 (N, rows, cols) or idx4 (+ channels)"),
     .section = "IDX source (MNIST-style, raw or gzip)"},
    {PATH_OPTION("labels", labels, "FILE", "labels: idx1 ubyte, magic 0x0801")},
    {PATH_OPTION("test-images", test_images, "FILE", "a second IDX pair: all of it goes to --test-output")},
    {PATH_OPTION("test-labels", test_labels, "FILE", "the labels of --test-images")},
    {PATH_OPTION("csv", csv, "FILE", "the CSV file; read twice (validate, then write)"),
     .section = "CSV source (header row, numeric columns, raw or gzip)"},
    {PATH_OPTION("label-column", label_column, "NAME", "the label column; every other column is a float feature")},
    {PATH_OPTION("test-csv", test_csv, "FILE", "a second CSV, same header: all of it goes to --test-output")},
    {PATH_OPTION("npy-features", npy_features, "FILE", "features: |u1 or <f4, any rank >= 1, examples along axis 0"),
     .section = "NumPy source (.npy v1/v2, raw or gzip)"},
    {PATH_OPTION("npy-labels", npy_labels, "FILE", "labels (N,) or (N, 1): |u1 <i4 <i8 -> int64, <f4 <f8 -> float")},
    {PATH_OPTION("test-npy-features", test_npy_features, "FILE",
          "a second pair, same shape/dtype: all of it goes to --test-output")},
    {PATH_OPTION("test-npy-labels", test_npy_labels, "FILE", "the labels of --test-npy-features")},
    {PATH_OPTION("tfrecord", tfrecord, "FILE", "every record is checked, then copied as it is"),
     .section = "TFRecord source (tf.train.Example records; plain, GZIP or ZLIB, detected)"},
    {PATH_OPTION("test-tfrecord", test_tfrecord, "FILE", "a second file, same features: all of it goes to --test-output")},
    {.name = "shape", .kind = TW_OPT_CUSTOM, .offset = offsetof(cli, o), .arg = "DIMS", .parse = shape_of,
     .wants = "dimensions joined by x or commas, e.g. 28x28x1", .needs = "tfrecord",
     .help = "each example's shape, e.g. 28x28x1 (default: from height/width/depth, shape,\n"
             "features, or size / image_raw's length: s*s -> [s,s,1], 3*s*s -> [s,s,3], else [n])"},
    {PATH_OPTION("image-archive", image_archive, "FILE",
                 "a .tar, .tar.gz or .zip of one folder of PNG/JPEG files per class (the class\n"
                 "names: the folders', sorted)"),
     .section = "Image folder (an archive; hidden files and files outside a class folder skipped)"},
    {.name = "image-size", .kind = TW_OPT_CUSTOM, .offset = offsetof(cli, o.image_height), .arg = "HxW",
     .parse = image_size_of, .wants = "HxW or one side, each 1 to 4096", .needs = "image-archive",
     .help = "the stored size of every image (required with --image-archive)"},
    {.name = "channels", .kind = TW_OPT_CUSTOM, .offset = offsetof(cli, o.image_channels), .arg = "1|3",
     .parse = channels_of, .wants = "1 or 3", .needs = "image-archive", .help = "grey or colour (3)"},
    {.name = "resize", .kind = TW_OPT_CHOICE, .offset = offsetof(cli, o.image_fit), .arg = "crop|pad",
     .names = FITS, .needs = "image-archive",
     .help = "crop: the shorter side to the size, the middle kept (crop); pad: the longer side to\n"
             "it, centred on black"},
    {PATH_OPTION("output", output, "OUT", "the TFRecord file to write (the train split)"), .letter = 'o',
     .section = "output"},
    {PATH_OPTION("test-output", test_output, "OUT", "the test split (with --test-fraction, --test-first,\n"
                                                   "--test-last or a test file)")},
    {.name = "test-fraction", .kind = TW_OPT_DOUBLE, .offset = offsetof(cli, o.test_fraction), .arg = "F",
     .min = 0, .max = 1, .help = "exactly round(F*N) examples, seeded, stratified by integer label"},
    {.name = "test-first", .kind = TW_OPT_U64, .offset = offsetof(cli, o.test_first), .arg = "N", .min = 1,
     .max = 1e18, .help = "the first N examples, in input order, are the test split"},
    {.name = "test-last", .kind = TW_OPT_U64, .offset = offsetof(cli, o.test_last), .arg = "N", .min = 1,
     .max = 1e18, .help = "the last N examples, in input order, are the test split"},
    {.name = "seed", .kind = TW_OPT_U64, .offset = offsetof(cli, o.seed), .arg = "N", .min = 0, .max = INFINITY,
     .needs = "test-fraction", .help = "seed of the --test-fraction sampling (0)"},
    {.name = "class-names", .kind = TW_OPT_STRING, .offset = offsetof(cli, class_names), .arg = "FILE", .min = 1,
     .help = "names of classes 0..K-1: one a line, a comma list or a JSON array"},
    {.name = "compression", .kind = TW_OPT_CUSTOM, .offset = offsetof(cli, o.compression), .arg = "KIND",
     .parse = compression_of, .wants = "none, gzip or zlib",
     .help = "none, gzip or zlib, for both TFRecord files (none)"},
    {PATH_OPTION("meta", meta, "FILE", "the JSON description (default OUT, .tfrecord -> .meta.json)")},
    {.name = "max-bytes", .kind = TW_OPT_BYTES, .offset = offsetof(cli, o.max_bytes), .arg = "N", .min = 1,
     .max = 1e18, .help = "budget per input file, decompressed; K/M/G/T suffix (16G)",
     .section = "limits and reporting"},
    {.name = "max-record-bytes", .kind = TW_OPT_BYTES, .offset = offsetof(cli, o.max_record_bytes), .arg = "N",
     .min = 1, .max = 1e18, .needs = "tfrecord",
     .help = "cap on one --tfrecord record's length; K/M/G/T suffix (64M)"},
    {.name = "allow-nonfinite", .kind = TW_OPT_FLAG, .offset = offsetof(cli, o.allow_nonfinite),
     .help = "keep NaN/Inf float features (refused by default, naming where)"},
    {.name = "json", .kind = TW_OPT_FLAG, .offset = offsetof(cli, json),
     .help = "print the summary (or error) as one JSON object"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower convert",
    .usage = "(--images FILE --labels FILE | --csv FILE --label-column NAME |\n"
             "                      --npy-features FILE --npy-labels FILE | --tfrecord FILE |\n"
             "                      --image-archive FILE --image-size HxW)\n"
             "                      -o OUT [options]",
    .about = "Converts a dataset into a TFRecord file of tf.train.Example records, optionally splits\n"
             "off a test set, and writes a JSON description of the result. Inputs may be gzip\n"
             "compressed (detected by content). On any error nothing is written.\n",
    .epilog = "features of each Example:\n"
              "  IDX      image_raw (bytes), label, size, height, width, depth (int64)\n"
              "  CSV      features (float list), label (int64 if every label is an integer, else float)\n"
              "  NumPy    image_raw (bytes, little-endian), shape (int64 list), dtype (bytes), label\n"
              "  TFRecord the input's own, the same names and kinds in every record; an error names\n"
              "           the record (\"record N:\", from 0) and its byte offset (decompressed)\n"
              "  archive  image_raw (bytes, HxWxC), label (the class folder's index), height, width, depth\n"
              "\nexit status: 0 done, 1 conversion failed, 2 usage error.\n",
    .opts = OPTIONS,
    .wording = TW_OPT_SAY_BAD_VALUE,
};

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
    if (j && r->shape_rule[0])
        json_object_set_new(j, "shape_rule", json_string(r->shape_rule));
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
    if (r->shape_rule[0])
        printf("tower convert: each example is %s (%s)\n", r->shape, r->shape_rule);
    return 0;
}

int tw_convert_main(int argc, char **argv)
{
    cli c = {0};
    tw_convert_options_default(&c.o);
    int nargs, rc = tw_options_parse(&COMMAND, &c, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    tw_error err;
    tw_error_clear(&err);
    tw_convert_source source;
    if (tw_convert_check(&c.o, &source, &err) != TW_OK)
        return tw_options_error(&COMMAND, "%s", err.message);
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
