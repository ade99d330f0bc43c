/* export_main.c — `tower export CHECKPOINT --format tf|onnx -o OUT [--names tower|seed|FILE.json]
 * [--weights raw|ema] [--input raw|scaled] [--verify X.npy --verify-out Y.npy]`: the command line around
 * export.h.
 *
 * CHECKPOINT is a checkpoint file (ckpt-<step>.safetensors) or a run's folder (its latest checkpoint).
 * --names (tf only) is a built-in name map or a map file (export_names.h).
 * --verify runs Tower's own forward pass (inference.h, the CPU engine the trainer evaluates with) over the
 * examples of X.npy (uint8 or float32, [N, dataset.shape...], taken as the exported graph takes its input)
 * and writes the outputs (logits or predictions, float32 [N, outputs]) to Y.npy: what the ONNX graph must
 * reproduce. Exit status: 0 written, 1 a runtime failure, 2 a usage error, 14 a damaged checkpoint or
 * input file (engine/child.h's table). */
#include "export_main.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"
#include "checkpoint.h"
#include "child.h"
#include "datafs.h"
#include "export.h"
#include "npy.h"
#include "options.h"

/* --format, by the option's index. */
enum { FORMAT_TF, FORMAT_ONNX };
static const char *const FORMATS[] = {"tf", "onnx", NULL};
static const char *const INPUTS[] = {[TW_ONNX_INPUT_RAW] = "raw", [TW_ONNX_INPUT_SCALED] = "scaled", NULL};

typedef struct {
    const char *checkpoint, *out, *verify, *verify_out;
    const char *names; /* tf: a built-in name map or a map file, NULL: Tower's names */
    int format;  /* FORMAT_* */
    int weights; /* tw_weights, or TW_WEIGHTS_DEFAULT */
    int input;   /* tw_onnx_input, or -1: not given (raw) */
} options;

static const tw_opt OPTIONS[] = {
    {.name = "format", .kind = TW_OPT_CHOICE, .offset = offsetof(options, format), .arg = "F", .names = FORMATS,
     .required = 1,
     .help = "tf: a TensorFlow checkpoint V2: OUT.index, OUT.data-00000-of-00001 and the\n"
             "'checkpoint' file beside them (tf.train.load_checkpoint(OUT) reads it); TF1\n"
             "names (--names), the EMA as <var>/ExponentialMovingAverage, the step\n"
             "onnx: an ONNX inference graph (opset 13) in the file OUT"},
    {.name = "output", .letter = 'o', .kind = TW_OPT_STRING, .offset = offsetof(options, out), .arg = "OUT",
     .required = 1, .help = "where it goes (missing folders are made; required)"},
    {.name = "names", .kind = TW_OPT_STRING, .offset = offsetof(options, names), .arg = "MAP",
     .help = "tf: the variables' names: tower (default: layer1/weights, layer1/biases,\n"
             "an int64 global_step), seed (the seed program's graph: layer1/w, layer1/bias,\n"
             "the step as an int32 'Variable'), or a JSON map file {\"leaves\": {...},\n"
             "\"variables\": {...}, \"global_step\": {\"name\": N, \"dtype\": \"int32\"|\"int64\"}}"},
    {.name = "weights", .kind = TW_OPT_CHOICE, .offset = offsetof(options, weights), .arg = "W",
     .names = tw_weights_names, .help = "onnx: ema or raw weights (default: ema when the run kept an EMA; a tf export\n"
                                        "holds both)"},
    {.name = "input", .kind = TW_OPT_CHOICE, .offset = offsetof(options, input), .arg = "I", .names = INPUTS,
     .help = "onnx: raw (default: the stored values, uint8 pixels as float; the graph\n"
             "multiplies by dataset.scale) or scaled (values as the model sees them)"},
    {.name = "verify", .kind = TW_OPT_STRING, .offset = offsetof(options, verify), .arg = "X.npy",
     .needs = "verify-out",
     .help = "also run Tower's own forward pass over X.npy (uint8 or float32, [N, shape...],\n"
             "taken as the graph's input) and write its outputs to --verify-out Y.npy"},
    {.name = "verify-out", .kind = TW_OPT_STRING, .offset = offsetof(options, verify_out), .arg = "Y.npy",
     .needs = "verify", .help = "where --verify writes"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower export",
    .usage = "CHECKPOINT --format tf|onnx -o OUT [--names tower|seed|FILE.json]\n"
             "                    [--weights raw|ema] [--input raw|scaled] [--verify X.npy --verify-out Y.npy]",
    .about = "Writes a trained checkpoint (a ckpt-<step>.safetensors file, or a run's folder: its latest) for\n"
             "other stacks.\n",
    .epilog = "Exit status: 0 written, 1 runtime failure, 2 usage error, 14 damaged checkpoint or input.\n",
    .opts = OPTIONS,
    .operands = "CHECKPOINT",
    .min_args = 1,
    .max_args = 1,
};

/* Parses the command line into *o; TW_OPT_GO to go on, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.weights = TW_WEIGHTS_DEFAULT, .input = -1};
    int nargs, rc = tw_options_parse(&COMMAND, o, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    o->checkpoint = argv[1];
    if (o->format == FORMAT_TF && (o->weights != TW_WEIGHTS_DEFAULT || o->input >= 0 || o->verify))
        return tw_options_error(&COMMAND, "--weights, --input and --verify apply to --format onnx (a tf export "
                                          "holds raw and EMA weights)");
    if (o->format == FORMAT_ONNX && o->names)
        return tw_options_error(&COMMAND, "--names applies to --format tf (an ONNX graph's inputs and outputs "
                                          "have fixed names)");
    o->input = o->input >= 0 ? o->input : TW_ONNX_INPUT_RAW;
    return TW_OPT_GO;
}

/* The checkpoint file arg names: itself, or a run folder's latest, into buf[size]. */
static tw_status resolve(const char *arg, char *buf, size_t size, tw_error *err)
{
    struct stat st;
    if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(buf, size, "%s", arg);
        return TW_OK;
    }
    char dir[TW_CKPT_MAX_PATH];
    if (tw_checkpoint_dir_of(arg, dir, sizeof dir) != 0)
        return tw_error_set(err, TW_ERR_INVALID, arg, -1, "path too long");
    tw_status s = tw_checkpoint_latest(dir, buf, size, err);
    return s == TW_END ? tw_error_set(err, TW_ERR_INVALID, arg, -1, "the run folder holds no checkpoint") : s;
}

/* X.npy's examples as the graph's input (float32 [N, input_size]) into *x, *rows. */
static tw_status read_inputs(const char *path, size_t input_size, float **x, size_t *rows, tw_error *err)
{
    tw_npy_reader *r;
    TW_TRY(tw_npy_open(path, 0, &r, err));
    const tw_npy_header *h = tw_npy_reader_header(r);
    size_t item = h->dtype == TW_NPY_UINT8 ? 1 : h->dtype == TW_NPY_FLOAT32 ? 4 : 0;
    tw_status s = TW_OK;
    if (!item || h->item_bytes != input_size * item)
        s = tw_error_set(err, TW_ERR_INVALID, path, -1, "expected uint8 or float32 examples of %zu values, got %s "
                         "of %llu bytes", input_size, tw_npy_dtype_name(h->dtype), (unsigned long long)h->item_bytes);
    else if (!(*x = malloc((h->count ? h->count : 1) * input_size * sizeof **x)))
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    const uint8_t *p;
    for (*rows = 0; s == TW_OK && (s = tw_npy_next(r, &p, err)) == TW_OK; (*rows)++)
        for (size_t i = 0; i < input_size; i++) {
            float *v = *x + *rows * input_size + i;
            if (item == 1)
                *v = (float)p[i];
            else
                memcpy(v, p + 4 * i, 4);
        }
    tw_npy_close(r);
    return s == TW_END ? TW_OK : s;
}

/* outs [rows, cols] float32 as a .npy file (version 1.0), atomically. */
static tw_status write_npy(const char *path, const float *outs, size_t rows, int cols, tw_error *err)
{
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %d), }", rows,
                     cols);
    size_t header = 10 + (size_t)n + 1, pad = (64 - header % 64) % 64, hlen = (size_t)n + pad + 1;
    size_t bytes = rows * (size_t)cols * sizeof(float);
    uint8_t *file = malloc(10 + hlen + bytes);
    if (!file)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    memcpy(file, "\x93NUMPY\x01\x00", 8);
    file[8] = (uint8_t)(hlen & 0xff);
    file[9] = (uint8_t)(hlen >> 8);
    memcpy(file + 10, dict, (size_t)n);
    memset(file + 10 + n, ' ', pad);
    file[10 + hlen - 1] = '\n';
    memcpy(file + 10 + hlen, outs, bytes);
    tw_status s = tw_atomic_write_file(path, file, 10 + hlen + bytes, err);
    free(file);
    return s;
}

/* Tower's forward pass over --verify's examples, scaled as the graph's input is. */
static tw_status verify(tw_inference *inf, const options *o, tw_error *err)
{
    const tw_model *m = tw_inference_model(inf);
    size_t in = tw_model_input_size(m), rows = 0;
    int outs = tw_model_output_size(m);
    float *x = NULL, *y = NULL;
    tw_status s = read_inputs(o->verify, in, &x, &rows, err);
    if (s == TW_OK && o->input == TW_ONNX_INPUT_RAW)
        for (size_t i = 0; i < rows * in; i++)
            x[i] *= tw_inference_config(inf)->scale;
    if (s == TW_OK && !(y = malloc((rows ? rows : 1) * (size_t)outs * sizeof *y)))
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s == TW_OK)
        s = tw_inference_forward(inf, rows, x, y, err);
    if (s == TW_OK)
        s = write_npy(o->verify_out, y, rows, outs, err);
    free(x);
    free(y);
    return s;
}

static tw_status export_onnx(const char *path, const options *o, tw_error *err)
{
    tw_inference *inf;
    TW_TRY(tw_inference_open(path, o->weights, 256, &inf, err));
    uint8_t *bytes;
    size_t len;
    tw_status s = tw_export_onnx(inf, o->input, &bytes, &len, err);
    if (s == TW_OK) {
        s = tw_atomic_write_file(o->out, bytes, len, err);
        free(bytes);
    }
    if (s == TW_OK && o->verify)
        s = verify(inf, o, err);
    tw_inference_close(inf);
    return s;
}

static tw_status export_tf(const char *path, const options *o, tw_error *err)
{
    tw_export_names *names = NULL;
    if (o->names)
        TW_TRY(tw_export_names_open(o->names, &names, err));
    tw_bundle_bytes b;
    tw_status s = tw_export_tf(path, names, &b, NULL, err);
    if (s == TW_OK)
        s = tw_bundle_write(o->out, &b, err);
    tw_bundle_bytes_free(&b);
    tw_export_names_destroy(names);
    return s;
}

/* The folder path's file goes in, with any missing folder above it, as TensorFlow's savers make them. */
static tw_status make_parent(const char *path, tw_error *err)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return TW_OK;
    char dir[PATH_MAX];
    if ((size_t)(slash - path) >= sizeof dir)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "the output path is too long");
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return tw_fs_mkdirs(dir, "cannot create the output folder", err);
}

int tw_export_main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != TW_OPT_GO)
        return rc;
    char path[TW_CKPT_MAX_PATH];
    tw_error err;
    tw_status s = resolve(o.checkpoint, path, sizeof path, &err);
    if (s == TW_OK)
        s = make_parent(o.out, &err);
    if (s == TW_OK && o.verify_out)
        s = make_parent(o.verify_out, &err);
    if (s == TW_OK)
        s = o.format == FORMAT_TF ? export_tf(path, &o, &err) : export_onnx(path, &o, &err);
    if (s == TW_OK)
        return 0;
    char msg[1200];
    tw_error_format(&err, msg, sizeof msg);
    fprintf(stderr, "tower export: %s\n", msg);
    return s == TW_ERR_INVALID ? TW_EXIT_USAGE : tw_child_exit_code(&err);
}
