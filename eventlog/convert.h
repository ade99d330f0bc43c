/* convert.h — dataset conversion: IDX, CSV, NumPy or TFRecord sources into TFRecord files of
 * tf.train.Example, with an optional test split and a JSON description (meta) of the result.
 *
 * Owns: which features each source becomes (below), the train/test split (a second file of the source's
 * kind — IDX pair, CSV, NumPy pair or TFRecord —, the first or the last N examples in input order, or an
 * exact seeded fraction by selection sampling —
 * Knuth's Algorithm S: streaming, no buffering, exactly round(F·N) test examples, halves rounded away
 * from zero; with integer labels it is stratified: see "Fraction splits" below), the label statistics,
 * the class names (parsed and checked in convert_classes.c), the meta JSON, and the
 * all-or-nothing output protocol: every output is written to a temporary file and renamed into place
 * only after the whole conversion succeeded; on any error no output file or temporary file is left.
 * Does not own: parsing the inputs (idx.c, csv.c, npy.c, example.c), TFRecord framing (tfrecord.c), the
 * command line (convert_main.c). Built from convert.c (options, the conversion loop, splits and the meta,
 * written and read back) and convert_source.c (the source adapters, convert_source.h).
 *
 * Features written per Example:
 *   idx: image_raw (bytes, the h·w·d uint8 pixels), label (int64), size (int64, h·w·d), height, width,
 *        depth (int64; depth 1 for 3-D IDX, the 4th dimension for 4-D IDX)
 *   csv: features (float list, every non-label column in file order), label (int64 when every label cell
 *        is an integer literal, else float)
 *   npy: image_raw (bytes, one example's raw little-endian bytes), shape (int64 list, per-example dims),
 *        dtype (bytes "uint8" or "float32"), label (int64 for |u1/<i4/<i8 labels, float for <f4/<f8)
 *   tfrecord: the input's records themselves, byte for byte, re-framed with the output compression.
 *        The input (plain, GZIP or ZLIB, told apart by content) is validated record by record: both
 *        CRCs, a length cap checked before anything is allocated (max_record_bytes), and every record
 *        must parse as a tf.train.Example with exactly the feature names and kinds of the first record
 *        of --tfrecord (the test file's records too), each name once. When the first record has a
 *        one-value int64 or float feature "label", every record must have one finite label value; it
 *        gives the label histogram or statistics (without one, the splits have neither). With a
 *        fraction split the file is read twice (count, then write).
 *
 * TFRecord shapes: the per-example shape the meta reports (and a run on the dataset takes) is --shape when
 * given (every record's image_raw must then hold product(shape) bytes or 4 * product(shape) bytes, else
 * the record is refused), else, when every record agrees, the first of: one-value int64 features height,
 * width (and depth, else 1) -> [h, w, d]; an int64 list "shape"; the length n of a float list "features"
 * -> [n]; a one-value int64 feature "size" (the tf.train.Example layout TensorFlow's MNIST tutorials
 * write: size, label, image_raw) or else the byte length of a one-item bytes image_raw, as n values:
 * n = s*s -> [s, s, 1], n = 3*s*s -> [s, s, 3], otherwise [n]. The meta's "shape_rule" says which rule
 * gave the shape, in words.
 *
 * Non-finite features: by default a NaN or ±Inf float feature is TW_ERR_INVALID naming where it is:
 * a CSV cell (nan, inf, infinity in any case, signed) by file, line, data row and column; a float32 NumPy
 * value by file, byte offset, row, element and NumPy index; a TFRecord float list value by file, record
 * (below), feature name and value index. allow_nonfinite lets them through as they are. Labels must be
 * finite either way (integer kinds, IDX bytes and uint8 NumPy data cannot hold NaN).
 *
 * Errors about one record of a TFRecord input name the input file, carry the record's byte offset in
 * tw_error.offset (in the decompressed stream for GZIP/ZLIB inputs, as TensorFlow counts) and have a
 * message that starts with "record N: " (N counts records from 0); tw_convert_error_record reads N back.
 *
 * Fraction splits: with integer labels (classification; at most 65536 distinct values) a first pass
 * counts the examples of each class N_c, and class c gives floor(F·N_c) test examples plus one more for
 * the classes with the largest remainders F·N_c - floor(F·N_c) (ties: the smaller label) until the total
 * is round(F·N); each class is then sampled by its own Algorithm S over one splitmix64 stream seeded
 * with `seed` (the counting pass reads the whole input once more). So the split is deterministic (same input, fraction and seed: same split), every example
 * lands in exactly one split, in input order, and each class's share of the test split is its share of
 * the input to within one example. Float labels (regression) or no labels: one Algorithm S over all.
 *
 * Memory is constant in the number of examples (readers stream; CSV is read twice; a TFRecord input
 * costs its first record and its largest one). Thread-safety: a
 * conversion touches only its own state; concurrent conversions to different outputs are fine. */
#ifndef TW_CONVERT_H
#define TW_CONVERT_H

#include <jansson.h>
#include <stdint.h>

#include "status.h"
#include "tfrecord.h"

enum { TW_CONVERT_MAX_RANK = 8, TW_CONVERT_MAX_DIM = 1 << 24 }; /* a --shape's rank and each dimension */

typedef enum {
    TW_CONVERT_IDX = 0,
    TW_CONVERT_CSV = 1,
    TW_CONVERT_NPY = 2,
    TW_CONVERT_TFRECORD = 3,
    TW_CONVERT_ARCHIVE = 4, /* an image-folder archive (convert_archive.c) */
} tw_convert_source;

/* How an archive's images of other sizes become the stored size. */
typedef enum {
    TW_CONVERT_FIT_CROP = 0, /* scale the shorter side to the target, cut the middle */
    TW_CONVERT_FIT_PAD = 1,  /* scale the longer side to it, centre on black */
} tw_convert_fit;

/* Every string is borrowed for the duration of tw_convert. Set exactly one source group. */
typedef struct {
    const char *images, *labels;           /* IDX images (idx3/idx4) and labels (idx1) */
    const char *test_images, *test_labels; /* optional second IDX pair: all of it goes to the test split */
    const char *csv, *label_column;        /* CSV file and the name of its label column */
    const char *test_csv;                  /* optional second CSV, same columns: all of it is test */
    const char *npy_features, *npy_labels; /* NumPy arrays, examples along the first axis */
    const char *test_npy_features, *test_npy_labels; /* optional second pair, same per-example shape
                                                         and dtype: all of it goes to the test split */
    const char *tfrecord, *test_tfrecord;  /* TFRecord of tf.train.Example; optional test file */
    int64_t shape[TW_CONVERT_MAX_RANK];    /* a TFRecord's per-example shape as given (--shape), else */
    size_t shape_rank;                     /* 0: inferred (see "TFRecord shapes" below) */
    const char *image_archive;             /* .tar, .tar.gz or .zip: one top-level folder of images per class */
    int image_height, image_width;         /* the stored size of an archive's images (required with one) */
    int image_channels;                    /* 1 (gray) or 3 (RGB); default 3 */
    tw_convert_fit image_fit;              /* default crop */
    const char *output;                    /* train TFRecord path (required) */
    const char *test_output;               /* test TFRecord path (required with a test split) */
    const char *meta;                      /* meta JSON path; NULL: see tw_convert_meta_path */
    tw_compression compression;            /* of both TFRecord outputs; default NONE */
    double test_fraction;                  /* in [0, 1]; < 0 (default) = no fraction split */
    uint64_t test_first, test_last;        /* hold out the first / the last N examples in input order as
                                              the test split (0: not asked; at most one of them) */
    uint64_t seed;                         /* selection-sampling seed; default 0 */
    uint64_t max_bytes;                    /* budget on content bytes per input file; default 16 GiB */
    uint64_t max_record_bytes;             /* cap on one TFRecord input record; default 64 MiB */
    int allow_nonfinite;                   /* 1: float features may be NaN / Inf; default 0 (see
                                              "Non-finite features" above) */
    const json_t *class_names;             /* NULL, or an array of class names (checked with
                                              tw_convert_class_names_check; borrowed): name k is class
                                              k's, and their count must be max label + 1 */
    /* Called with the examples written so far, every TW_CONVERT_PROGRESS_EVERY of them (NULL: never;
     * `tower convert` draws its terminal progress line from it). */
    void (*progress)(uint64_t examples, void *ctx);
    void *progress_ctx;
} tw_convert_options;

#define TW_CONVERT_PROGRESS_EVERY 4096

typedef struct {
    tw_convert_source source;
    uint64_t train_count;   /* examples in output */
    uint64_t test_count;    /* examples in test_output (0 without a split) */
    int has_test;           /* 1 when test_output was written */
    char meta_path[4096];   /* where the meta JSON went */
    char shape[192];        /* a TFRecord source's per-example shape ("28x28x1") and the meta's */
    char shape_rule[192];   /* "shape_rule"; both "" for the other sources or an unknown shape */
} tw_convert_result;

/* All defaults, in one place. */
void tw_convert_options_default(tw_convert_options *o);

/* Parses a shape, "28x28x1" or "28,28,1" (1 to TW_CONVERT_MAX_RANK dimensions, each 1 to
 * TW_CONVERT_MAX_DIM), into o->shape and o->shape_rank. Errors: TW_ERR_INVALID naming the text and the form;
 * o->shape_rank is then 0. */
tw_status tw_convert_shape_parse(const char *text, tw_convert_options *o, tw_error *err);

/* Checks that the options name exactly one complete source, the outputs a split needs, a fraction in
 * [0, 1], a non-zero budget and record cap, and no output path equal to another output or an input
 * (by spelling).
 * Fills *source. Errors: TW_ERR_INVALID, naming the options by their command-line spelling. */
tw_status tw_convert_check(const tw_convert_options *o, tw_convert_source *source, tw_error *err);

/* The default meta path for output: a trailing ".tfrecord" replaced by ".meta.json", else output +
 * ".meta.json". Writes into buf[size]. Errors: TW_ERR_INVALID when it does not fit. */
tw_status tw_convert_meta_path(const char *output, char *buf, size_t size, tw_error *err);

/* "idx", "csv", "npy", "tfrecord". */
const char *tw_convert_source_name(tw_convert_source s);

/* Runs the conversion described by o and fills *res (may be NULL). On success the outputs and the meta
 * file are in place; on failure none of them was created or replaced and no temporary file remains
 * (a failure while renaming the outputs into place removes the ones already renamed).
 *
 * Meta JSON: {"format_version": 1, "source", "features": {name: kind}, "shape" ([h, w, d] for idx, the
 * feature count for csv, the per-example shape for npy), "dtype", "compression", ("label_column" for
 * csv), "test_split": {"method": "none" | "file" | "fraction" | "first" | "last"; for "fraction" also
 * "fraction" (F), "seed" (an integer; a decimal string past 2^63 - 1) and "stratified" (bool); for
 * "first" and "last" also "count" (N)}, ("shape_rule" for tfrecord), ("class_names":
 * [name of class 0, ...] when given), "splits": {"train": {"path", "count", ...}, "test": {...}}} where
 * each split has
 * "label_histogram" {"<label>": count} for integer labels (up to 65536 distinct values) and otherwise
 * "label_stats" {"min", "max", "mean"}.
 * For tfrecord, "features" are the first record's in its order, and "shape" is as "TFRecord shapes"
 * above says; otherwise null. "dtype" is "uint8" when a one-item bytes feature "image_raw" holds product(shape) bytes, "float32"
 * when it holds 4 * product(shape) bytes or when a float list "image_raw" or "features" holds
 * product(shape) values; otherwise null (also when shape is null).
 *
 * Errors: those of tw_convert_check, of the readers (naming the file and byte offset or line), of the
 * writers, TW_ERR_INVALID for sources that disagree (image and label counts, test shape, columns,
 * dtype or label kind), and TW_ERR_INVALID for class names that do not fit the labels (float labels, a
 * negative label, or a count other than max label + 1). For a
 * TFRecord input (see the record errors above): TW_ERR_CORRUPT (a CRC, a record that is not an
 * Example), TW_ERR_TRUNCATED (the file ends inside a record), TW_ERR_TOO_LARGE (a length past
 * max_record_bytes, or past the max_bytes budget), TW_ERR_INVALID (features that differ from the
 * first record's, a first record without features, an empty file: "no records"). */
tw_status tw_convert(const tw_convert_options *o, tw_convert_result *res, tw_error *err);

/* For the error of a failed conversion: returns 1 when it is about one record of a TFRecord input
 * (its message starts with "record N: ") and stores N, counted from 0, in *index (may be NULL); the
 * record's byte offset is then err->offset and the file err->file. Returns 0 otherwise. */
int tw_convert_error_record(const tw_error *err, uint64_t *index);

/* ---- the meta, read back ----
 * convert.c owns the meta's keys (tw_convert above); whoever reads a meta reads it through these. */

/* Reads the meta file at path (through datafs.h): *meta is new (caller owns). Errors: TW_ERR_IO (cannot
 * open), TW_ERR_CORRUPT (not a JSON object). */
tw_status tw_convert_meta_load(const char *path, json_t **meta, tw_error *err);

/* The value of key ("path", "count", "label_histogram", "label_stats") in the meta's split ("train",
 * "test"), borrowed from meta; NULL when absent (also for a NULL meta). */
json_t *tw_convert_meta_split(const json_t *meta, const char *split, const char *key);

/* The per-example shape as a JSON array of integers (new; a CSV meta's feature count n becomes [n]);
 * NULL when the meta has none. */
json_t *tw_convert_meta_shape(const json_t *meta);

/* A training run's dataset settings for the converted dataset in folder dir, derived from its meta (new
 * JSON, the engine config's "dataset" object): {"train": dir/<train file>, "test": dir/<test file> (null
 * unless the test split has examples), "image_feature": "image_raw" when the Examples have one, else
 * "features", "label_feature": "label", "shape": tw_convert_meta_shape}. The file names are those the
 * meta's splits record. NULL when the dataset cannot feed a run; then *why (static text) says why. */
json_t *tw_convert_meta_run_dataset(const json_t *meta, const char *dir, const char **why);

/* ---- class names (parsing and checks: convert_classes.c; the meta getters: convert.c) ---- */

enum {
    TW_CONVERT_MAX_CLASS_NAMES = 65536,   /* names per dataset (the label histogram's cap) */
    TW_CONVERT_MAX_CLASS_NAME = 128,      /* bytes of one name */
    TW_CONVERT_MAX_CLASS_TEXT = 1 << 20,  /* bytes of a class-names text or file */
};

/* Parses class names from text[len]: a JSON array of strings when the text starts (after white space)
 * with '[', else one name per line when it holds more than one line (CRLF too; a last empty line is
 * ignored), else (one line, with or without its newline) a comma-separated list. Names in a list or on a line are trimmed of spaces and tabs. The result
 * passes tw_convert_class_names_check. *names: a new JSON array (caller owns), NULL on failure.
 * Errors: TW_ERR_INVALID naming the problem and the name's position ("name 3 ..."), counted from 1:
 * not UTF-8, empty, longer than TW_CONVERT_MAX_CLASS_NAME bytes, a control character, a duplicate,
 * more than TW_CONVERT_MAX_CLASS_NAMES names, none, or bad JSON (its line and column). */
tw_status tw_convert_class_names_parse(const char *text, size_t len, json_t **names, tw_error *err);

/* Reads the file at path (through datafs.h; at most TW_CONVERT_MAX_CLASS_TEXT bytes) and parses it
 * as above. Errors: TW_ERR_IO (naming the file), TW_ERR_TOO_LARGE, those of the parse. */
tw_status tw_convert_class_names_read(const char *path, json_t **names, tw_error *err);

/* Checks an array of class names: 1 to TW_CONVERT_MAX_CLASS_NAMES strings, each non-empty, at most
 * TW_CONVERT_MAX_CLASS_NAME bytes, free of control characters (C0, DEL, C1) and NUL, all different.
 * Errors: TW_ERR_INVALID as for the parse. */
tw_status tw_convert_class_names_check(const json_t *names, tw_error *err);

/* The meta's class names: the array (borrowed from meta), or NULL when it has none. */
const json_t *tw_convert_meta_class_names(const json_t *meta);

/* How the meta's test split was made: "none", "file" or "fraction" (a meta written before the key
 * existed: "file" when it has a test split, else "none"). */
const char *tw_convert_meta_test_method(const json_t *meta);

/* Loads the meta of the dataset whose train TFRecord is train_path: tw_convert_meta_path(train_path)
 * when that file exists (a `tower convert` output), else meta.json in train_path's folder (a server
 * dataset). Errors: those of tw_convert_meta_load (for the second name tried). */
tw_status tw_convert_meta_find(const char *train_path, json_t **meta, tw_error *err);

/* The class names of the dataset a TFRecord file belongs to (its meta, as tw_convert_meta_find finds it
 * from the file's path: a train or a test file of a server dataset, or a `tower convert` output): a new
 * reference to the array of names, or NULL when it has none or no meta is found. The one way engine code
 * names classes (evaluation, prediction). */
json_t *tw_convert_class_names_of(const char *data_path);

/* `tower convert` (convert_main.c), dispatched by cli/main.c: returns the exit status (0 ok, 1 failure,
 * 2 usage error), never exits. argv[0] is the subcommand's name. */
int tw_convert_main(int argc, char **argv);

#endif
