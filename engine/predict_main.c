/* predict_main.c — `tower predict CHECKPOINT INPUT... [--weights raw|ema] [--top-k K] [--json]`: the
 * prediction of POST /api/v1/runs/{id}/predict from the command line, on a checkpoint file.
 *
 * Owns: the command line, reading the input files (PNG, JPEG, .npy by their signatures; a .json file
 * holding an array of inputs or {"inputs": [...]}) and the report (one line per input, or the route's
 * JSON). The inputs' rules, the forward pass and the top-k are predict.h's, shared with the server. */
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "options.h"
#include "predict.h"
#include "predict_main.h"

static const long MAX_INPUT_FILE = 256L << 20;

typedef struct {
    int weights; /* tw_weights, or TW_WEIGHTS_DEFAULT */
    int top_k, json;
} options;

static const tw_opt OPTIONS[] = {
    {.name = "weights", .kind = TW_OPT_CHOICE, .offset = offsetof(options, weights), .arg = "W",
     .names = tw_weights_names, .help = "raw or ema (default: ema when the run kept an EMA, else raw)"},
    {.name = "top-k", .kind = TW_OPT_INT, .offset = offsetof(options, top_k), .arg = "K", .min = 1,
     .max = TW_PREDICT_MAX_TOP_K, .help = "classes shown per input, 1 to 1000 (default 5)"},
    {.name = "json", .kind = TW_OPT_FLAG, .offset = offsetof(options, json),
     .help = "the route's JSON reply instead of lines"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower predict",
    .usage = "CHECKPOINT INPUT... [--weights raw|ema] [--top-k K] [--json]",
    .about = "Runs a trained model (a checkpoint file, ckpt-<step>.safetensors) on inputs and prints the top-K\n"
             "classes with their probabilities (the softmax of the logits), or a regression model's outputs.\n"
             "An INPUT is a PNG or JPEG image of the model's size (gray or RGB: converted to the model's channels;\n"
             "pixels times the run's scale), a .npy array [N, ...] (uint8: scaled like pixels; float32/float64: as\n"
             "they are) or a .json file holding an array of inputs (arrays of numbers taken as they are, or base64\n"
             "PNG/JPEG/.npy strings), as POST /api/v1/runs/{id}/predict takes them.\n",
    .epilog = "Exit status: 0 ok, 2 usage error or an input the model does not take, 14 a damaged checkpoint,\n"
              "1 another failure (I/O).\n",
    .opts = OPTIONS,
    .operands = "CHECKPOINT INPUT...",
    .min_args = 2,
    .max_args = INT_MAX,
};

/* Reads path (at most MAX_INPUT_FILE bytes) into a new buffer *data (caller frees). */
static tw_status read_input(const char *path, char **data, size_t *n, tw_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tw_error_errno(err, path, "cannot open the input");
    char *buf = malloc((size_t)MAX_INPUT_FILE + 1);
    size_t got = buf ? fread(buf, 1, (size_t)MAX_INPUT_FILE + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || got > (size_t)MAX_INPUT_FILE) {
        free(buf);
        return tw_error_set(err, !buf ? TW_ERR_NOMEM : bad ? TW_ERR_IO : TW_ERR_TOO_LARGE, path, -1,
                            !buf ? "out of memory" : bad ? "cannot read the input" : "over %ld bytes", MAX_INPUT_FILE);
    }
    *data = buf;
    *n = got;
    return TW_OK;
}

/* A .json input file: an array of inputs, or {"inputs": [...]}. */
static tw_status add_json_file(tw_predict_batch *b, const char *data, size_t n, const char *path, tw_error *err)
{
    json_error_t je;
    json_t *doc = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return tw_error_set(err, TW_ERR_INVALID, path, je.position, "JSON: %s", je.text);
    json_t *inputs = json_is_object(doc) ? json_object_get(doc, "inputs") : doc;
    tw_status s = tw_predict_add_json(b, inputs, err);
    json_decref(doc);
    return s;
}

static tw_status add_input(tw_predict_batch *b, const char *path, tw_error *err)
{
    char *data = NULL;
    size_t n = 0, i = 0;
    TW_TRY(read_input(path, &data, &n, err));
    while (i < n && strchr(" \t\r\n", data[i]))
        i++;
    tw_status s = i < n && (data[i] == '[' || data[i] == '{') ? add_json_file(b, data, n, path, err)
                                                               : tw_predict_add_file(b, data, n, path, err);
    free(data);
    return s;
}

static void print_lines(const json_t *predictions)
{
    size_t i, j;
    json_t *p, *e;
    json_array_foreach(predictions, i, p) {
        printf("%s:", json_string_value(json_object_get(p, "input")));
        json_array_foreach(json_object_get(p, "top_k"), j, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            printf(" %lld%s%s%s %.4f", (long long)json_integer_value(json_object_get(e, "class")), name ? " (" : "",
                   name ? name : "", name ? ")" : "", json_real_value(json_object_get(e, "probability")));
        }
        json_array_foreach(json_object_get(p, "outputs"), j, e)
            printf(" %.6g", json_real_value(e));
        printf("\n");
    }
}

int tw_predict_main(int argc, char **argv)
{
    options o = {.weights = TW_WEIGHTS_DEFAULT, .top_k = TW_PREDICT_DEFAULT_TOP_K};
    int nargs, rc = tw_options_parse(&COMMAND, &o, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    const char *checkpoint = argv[1];
    tw_error err = {0};
    tw_inference *inf = NULL;
    tw_predict_batch b = {0};
    json_t *predictions = NULL, *names = NULL;
    tw_status s = tw_predict_open(checkpoint, o.weights, &inf, NULL, &err);
    int input_error = 0;
    if (s == TW_OK && (s = tw_predict_batch_init(&b, inf, &err)) == TW_OK) {
        for (int i = 2; s == TW_OK && i <= nargs; i++)
            s = add_input(&b, argv[i], &err);
        input_error = s != TW_OK;
        names = tw_predict_class_names(tw_inference_config(inf));
    }
    if (s == TW_OK)
        s = tw_predict_run(inf, &b, o.top_k, names, &predictions, &err);
    if (s == TW_OK && o.json) {
        json_t *doc = json_pack("{s:{s:I, s:s}, s:s, s:s, s:O}", "checkpoint", "step", (json_int_t)tw_inference_step(inf),
                                "file", checkpoint, "weights", tw_inference_weights(inf) == TW_WEIGHTS_EMA ? "ema" : "raw",
                                "task", tw_predict_task(inf), "predictions", predictions);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else if (s == TW_OK) {
        print_lines(predictions);
    } else {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tower predict: %s\n", msg);
    }
    json_decref(predictions);
    json_decref(names);
    tw_predict_batch_cleanup(&b);
    tw_inference_close(inf);
    return s == TW_OK ? 0 : input_error && s != TW_ERR_NOMEM && s != TW_ERR_IO ? 2 : tw_child_exit_code(&err);
}
