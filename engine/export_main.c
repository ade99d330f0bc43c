/* export_main.c — `tower export CHECKPOINT --format tf|onnx -o OUT [--weights raw|ema] [--input raw|scaled]
 * [--verify X.npy --verify-out Y.npy]`: the command line around export.h.
 *
 * CHECKPOINT is a checkpoint file (ckpt-<step>.safetensors) or a run's folder (its latest checkpoint).
 * --verify runs Tower's own forward pass (inference.h, the CPU engine the trainer evaluates with) over the
 * examples of X.npy (uint8 or float32, [N, dataset.shape...], taken as the exported graph takes its input)
 * and writes the outputs (logits or predictions, float32 [N, outputs]) to Y.npy: what the ONNX graph must
 * reproduce. Exit status: 0 written, 1 a runtime failure, 2 a usage error, 14 a damaged checkpoint or
 * input file (engine/child.h's table). */
#include "export_main.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"
#include "checkpoint.h"
#include "child.h"
#include "export.h"
#include "npy.h"

static const char USAGE[] =
    "usage: tower export CHECKPOINT --format tf|onnx -o OUT [--weights raw|ema] [--input raw|scaled]\n"
    "                    [--verify X.npy --verify-out Y.npy]\n"
    "\n"
    "Writes a trained checkpoint (a ckpt-<step>.safetensors file, or a run's folder: its latest) for\n"
    "other stacks.\n"
    "\n"
    "  --format tf      a TensorFlow checkpoint V2: OUT.index, OUT.data-00000-of-00001 and the\n"
    "                   'checkpoint' file beside them (tf.train.load_checkpoint(OUT) reads it); TF1\n"
    "                   names, the EMA as <var>/ExponentialMovingAverage, global_step\n"
    "  --format onnx    an ONNX inference graph (opset 13) in the file OUT\n"
    "  --weights W      onnx: ema or raw weights (default: ema when the run kept an EMA; a tf export\n"
    "                   holds both)\n"
    "  --input I        onnx: raw (default: the stored values, uint8 pixels as float; the graph\n"
    "                   multiplies by dataset.scale) or scaled (values as the model sees them)\n"
    "  --verify X.npy   also run Tower's own forward pass over X.npy (uint8 or float32, [N, shape...],\n"
    "                   taken as the graph's input) and write its outputs to --verify-out Y.npy\n"
    "\n"
    "Exit status: 0 written, 1 runtime failure, 2 usage error, 14 damaged checkpoint or input.\n";

typedef struct {
    const char *checkpoint, *format, *out, *verify, *verify_out;
    tw_weights weights;
    int weights_given;
    tw_onnx_input input;
} options;

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tower export: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", USAGE);
    return TW_EXIT_USAGE;
}

static int check_options(const options *o)
{
    if (!o->format)
        return usage_error("--format is required (tf or onnx)%s", "");
    if (!o->out)
        return usage_error("-o is required%s", "");
    int onnx = !strcmp(o->format, "onnx");
    if (!onnx && (o->weights_given || o->input || o->verify))
        return usage_error("--weights, --input and --verify apply to --format onnx (a tf export holds raw "
                           "and EMA weights)%s", "");
    if (!o->verify != !o->verify_out)
        return usage_error("--verify and --verify-out go together%s", "");
    return 0;
}

/* Returns 0 to go on, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        {"format", required_argument, 0, 'f'}, {"output", required_argument, 0, 'o'},
        {"weights", required_argument, 0, 'w'}, {"input", required_argument, 0, 'i'},
        {"verify", required_argument, 0, 'v'}, {"verify-out", required_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->weights = TW_WEIGHTS_DEFAULT;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "o:", longs, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (strcmp(optarg, "tf") && strcmp(optarg, "onnx"))
                return usage_error("--format must be tf or onnx, got '%s'", optarg);
            o->format = optarg;
            break;
        case 'o': o->out = optarg; break;
        case 'w':
            if (tw_weights_parse(optarg, &o->weights) != 0)
                return usage_error("--weights must be raw or ema, got '%s'", optarg);
            o->weights_given = 1;
            break;
        case 'i':
            if (strcmp(optarg, "raw") && strcmp(optarg, "scaled"))
                return usage_error("--input must be raw or scaled, got '%s'", optarg);
            o->input = !strcmp(optarg, "scaled") ? TW_ONNX_INPUT_SCALED : TW_ONNX_INPUT_RAW;
            break;
        case 'v': o->verify = optarg; break;
        case 'V': o->verify_out = optarg; break;
        case 'h': fputs(USAGE, stdout); return -1;
        default: fputs(USAGE, stderr); return TW_EXIT_USAGE;
        }
    }
    if (optind != argc - 1)
        return usage_error("expected exactly one CHECKPOINT%s", "");
    o->checkpoint = argv[optind];
    return check_options(o);
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
    tw_bundle_bytes b;
    TW_TRY(tw_export_tf(path, &b, NULL, err));
    tw_status s = tw_bundle_write(o->out, &b, err);
    tw_bundle_bytes_free(&b);
    return s;
}

int tw_export_main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    char path[TW_CKPT_MAX_PATH];
    tw_error err;
    tw_status s = resolve(o.checkpoint, path, sizeof path, &err);
    if (s == TW_OK)
        s = !strcmp(o.format, "tf") ? export_tf(path, &o, &err) : export_onnx(path, &o, &err);
    if (s == TW_OK)
        return 0;
    char msg[1200];
    tw_error_format(&err, msg, sizeof msg);
    fprintf(stderr, "tower export: %s\n", msg);
    return s == TW_ERR_INVALID ? TW_EXIT_USAGE : tw_child_exit_code(&err);
}
