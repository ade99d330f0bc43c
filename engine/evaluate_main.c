/* evaluate_main.c — `tower evaluate CHECKPOINT --data FILE [--weights raw|ema] [--out FILE]
 * [--image-feature NAME] [--label-feature NAME] [--batch N] [--data-root DIR]`: one evaluation pass of a
 * checkpoint's model over a TFRecord file.
 *
 * The model, its input scale and its feature names come from the checkpoint's own config (inference.h);
 * --image-feature/--label-feature name another dataset's features. Examples are read as the trainer reads
 * its test split (input.h, in file order), run through the CPU forward pass and accumulated
 * (evaluation.h). Stdout carries the child protocol (child.h): heartbeats while it reads, one eval line
 * (step = the checkpoint's step; the chosen weights' numbers under the plain "eval_" keys) and the final
 * "completed" line (with the seconds the pass took), or the failed line; the document
 * (evaluation.json's format, with only the chosen weights' slot filled, plus "checkpoint", "data" and
 * "weights") goes durably to --out, or to stdout after the lines without it. Exit statuses are
 * `tower train`'s: 0 done, 2 usage or a config that does not fit the file, 14 a damaged file, 11 out of
 * memory, 1 otherwise. */
#include "evaluate_main.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "convert.h"
#include "datafs.h"
#include "evaluation.h"
#include "inference.h"
#include "input.h"
#include "model.h"
#include "options.h"

typedef struct {
    const char *checkpoint, *data, *out, *image, *label, *data_root;
    int weights; /* tw_weights, or TW_WEIGHTS_DEFAULT */
    int batch;
} options;

static const tw_opt OPTIONS[] = {
    {.name = "data", .kind = TW_OPT_STRING, .offset = offsetof(options, data), .arg = "FILE", .required = 1,
     .help = "the examples (a dataset's train.tfrecord or test.tfrecord; required)"},
    {.name = "weights", .kind = TW_OPT_CHOICE, .offset = offsetof(options, weights), .arg = "W",
     .names = tw_weights_names, .help = "ema or raw: the parameters' moving averages or the parameters themselves\n"
                                        "(default: ema when the run kept an EMA, else raw)"},
    {.name = "out", .kind = TW_OPT_STRING, .offset = offsetof(options, out), .arg = "FILE",
     .help = "where the result goes (written durably)"},
    {.name = "image-feature", .kind = TW_OPT_STRING, .offset = offsetof(options, image), .arg = "N",
     .help = "the input feature's name (default: the run's)"},
    {.name = "label-feature", .kind = TW_OPT_STRING, .offset = offsetof(options, label), .arg = "N",
     .help = "the label feature's name (default: the run's)"},
    {.name = "batch", .kind = TW_OPT_INT, .offset = offsetof(options, batch), .arg = "N", .min = 1, .max = 65536,
     .help = "examples per forward pass, 1 to 65536 (default 256)"},
    {.name = "data-root", .kind = TW_OPT_STRING, .offset = offsetof(options, data_root), .arg = "DIR",
     .help = "no file under DIR is reached through a symlink"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower evaluate",
    .usage = "CHECKPOINT --data FILE [--weights raw|ema] [--out FILE]\n"
             "                      [--image-feature NAME] [--label-feature NAME] [--batch N] [--data-root DIR]",
    .about = "Evaluates the model a checkpoint holds (its config is in the checkpoint) on the examples of a\n"
             "TFRecord file: accuracy, top-5, per-class precision/recall/F1 and the confusion matrix for a\n"
             "classifier; MSE, MAE and R² for regression. Progress is JSON lines on stdout; the result (the\n"
             "evaluation.json format) goes to --out, or to stdout at the end.\n",
    .epilog = "Exit status: 0 done, 1 runtime failure, 2 usage error or a model that does not fit the file,\n"
              "11 out of memory, 14 damaged checkpoint or data file, or a label outside the classes.\n",
    .opts = OPTIONS,
    .operands = "CHECKPOINT",
    .min_args = 1,
    .max_args = 1,
};

/* The input over o->data as the trainer opens its test split, with the checkpoint's settings. */
static tw_status open_data(const options *o, const tw_inference *inf, tw_input **in, tw_error *err)
{
    const tw_config *c = tw_inference_config(inf);
    const tw_model *m = tw_inference_model(inf);
    tw_input_options io;
    tw_input_options_default(&io);
    io.path = o->data;
    io.image_feature = o->image ? o->image : c->image_feature;
    io.label_feature = o->label ? o->label : c->label_feature;
    io.example_size = tw_model_input_size(m);
    io.scale = c->scale;
    io.float_labels = c->loss == TW_LOSS_MSE;
    io.classes = c->loss == TW_LOSS_MSE ? 0 : tw_model_output_size(m);
    io.shuffle = 0;
    io.prefetch_batches = 0;
    return tw_input_open(&io, in, err);
}

/* Reads every example of in through the model into ev, a heartbeat line between batches. */
static tw_status pass(const options *o, tw_inference *inf, tw_input *in, tw_evaluation *ev,
                      tw_child_out *out, tw_error *err)
{
    const tw_model *m = tw_inference_model(inf);
    size_t rows = (size_t)o->batch, outs = (size_t)tw_model_output_size(m);
    size_t labels = tw_inference_config(inf)->loss == TW_LOSS_MSE ? outs : 1;
    float *x = malloc(rows * tw_model_input_size(m) * sizeof(float)), *z = malloc(rows * outs * sizeof(float));
    void *y = malloc(rows * labels * 4);
    tw_status s = x && z && y ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    int got = 1;
    int64_t done = 0;
    while (s == TW_OK && got) {
        s = tw_input_next_once(in, o->batch, x, y, &got, err);
        if (s == TW_OK && got)
            s = tw_inference_forward(inf, (size_t)got, x, z, err);
        if (s == TW_OK && got)
            tw_evaluation_add(ev, got, z, y);
        done += got;
        tw_child_heartbeat(out, done);
    }
    free(x);
    free(z);
    free(y);
    return s;
}

/* The document with the chosen weights' slot, and where it came from. */
static json_t *document(const options *o, const tw_inference *inf, const tw_evaluation *ev)
{
    int ema = tw_inference_weights(inf) == TW_WEIGHTS_EMA;
    json_t *doc = tw_evaluation_document(tw_inference_step(inf), ema ? NULL : ev, ema ? ev : NULL);
    if (doc && json_object_update_new(doc, json_pack("{s:s, s:s, s:s}", "checkpoint", o->checkpoint, "data",
                                                      o->data, "weights", ema ? "ema" : "raw")) != 0) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static tw_status emit(const options *o, const tw_inference *inf, const tw_evaluation *ev, tw_child_out *out,
                      double started, tw_error *err)
{
    tw_evaluation_summary s = tw_evaluation_summarize(ev);
    tw_child_eval line = {.step = tw_inference_step(inf), .loss = s.loss, .examples = s.examples,
                          .has_accuracy = s.classify, .accuracy = s.accuracy, .has_top5 = s.has_top5,
                          .top5 = {s.top5}, .has_regression = !s.classify, .mae = {s.mae}, .r2 = {s.r2}};
    json_t *doc = document(o, inf, ev);
    if (!doc)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_status st = o->out ? tw_evaluation_write(o->out, doc, err) : TW_OK;
    if (st == TW_OK) {
        tw_child_eval_line(out, &line);
        tw_child_final(out, TW_CHILD_COMPLETED, line.step, tw_child_now() - started);
    }
    if (st == TW_OK && !o->out)
        json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(doc);
    return st;
}

static tw_status run(const options *o, tw_child_out *out, tw_error *err)
{
    double started = tw_child_now();
    tw_inference *inf = NULL;
    tw_input *in = NULL;
    tw_evaluation *ev = NULL;
    tw_status s = tw_inference_open(o->checkpoint, o->weights, o->batch, &inf, err);
    if (s == TW_OK)
        s = open_data(o, inf, &in, err);
    if (s == TW_OK) {
        const tw_config *c = tw_inference_config(inf);
        int outs = tw_model_output_size(tw_inference_model(inf));
        s = tw_evaluation_create(c->loss == TW_LOSS_MSE ? 0 : outs, outs, &ev, err);
        json_t *names = s == TW_OK && c->loss != TW_LOSS_MSE ? tw_convert_class_names_of(o->data) : NULL;
        if (s == TW_OK)
            tw_evaluation_name_classes(ev, names); /* the evaluated dataset's */
        json_decref(names);
    }
    if (s == TW_OK)
        s = pass(o, inf, in, ev, out, err);
    if (s == TW_OK)
        s = emit(o, inf, ev, out, started, err);
    tw_evaluation_destroy(ev);
    tw_input_close(in);
    tw_inference_close(inf);
    return s;
}

int tw_evaluate_main(int argc, char **argv)
{
    options o = {.batch = 256, .weights = TW_WEIGHTS_DEFAULT};
    int nargs, rc = tw_options_parse(&COMMAND, &o, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    o.checkpoint = argv[1];
    tw_child_out out;
    tw_child_init(&out, stdout);
    tw_error err;
    tw_error_clear(&err);
    if ((o.data_root && tw_fs_confine(o.data_root, &err) != TW_OK) || run(&o, &out, &err) != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tower evaluate: %s\n", msg);
        return tw_child_failed(&out, tw_status_name(err.status), tw_child_exit_code(&err), msg);
    }
    return 0;
}
