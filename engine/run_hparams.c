/* run_hparams.c — the HParams list and the TEXT tab's config, from a tw_config. See run_hparams.h. */
#define _DEFAULT_SOURCE /* realpath */
#include "run_hparams.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

static const char *const OPTIMIZERS[] = {"sgd", "momentum", "adam"};

/* Appends one layer's short form ("dense512", "conv32k5", "pool2", "avgpool2", "gap", "bn", "add", "cat",
 * "drop0.4"; flatten: nothing). */
static void layer_text(const tw_layer_config *l, char *buf, size_t size)
{
    switch (l->type) {
    case TW_LAYER_DENSE: snprintf(buf, size, "dense%d", l->units); break;
    case TW_LAYER_CONV2D:
    case TW_LAYER_CONV3D:
        snprintf(buf, size, "conv%s%dk%d", l->type == TW_LAYER_CONV3D ? "3d" : "", l->filters, l->kernel[2]);
        break;
    case TW_LAYER_MAX_POOL2D:
    case TW_LAYER_MAX_POOL3D:
        snprintf(buf, size, "pool%s%d", l->type == TW_LAYER_MAX_POOL3D ? "3d" : "", l->kernel[2]);
        break;
    case TW_LAYER_AVG_POOL2D:
    case TW_LAYER_AVG_POOL3D:
        snprintf(buf, size, "avgpool%s%d", l->type == TW_LAYER_AVG_POOL3D ? "3d" : "", l->kernel[2]);
        break;
    case TW_LAYER_GLOBAL_AVG_POOL: snprintf(buf, size, "gap"); break;
    case TW_LAYER_BATCH_NORM: snprintf(buf, size, "bn"); break;
    case TW_LAYER_ADD: snprintf(buf, size, "add"); break;
    case TW_LAYER_CONCAT: snprintf(buf, size, "cat"); break;
    case TW_LAYER_DROPOUT: snprintf(buf, size, "drop%g", (double)l->rate); break;
    case TW_LAYER_FLATTEN: buf[0] = 0; break;
    }
}

/* The layers joined by '-', cut at size. */
static void model_text(const tw_config *c, char *out, size_t size)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < c->n_layers; i++) {
        char one[64];
        layer_text(&c->layers[i], one, sizeof one);
        if (one[0] && len < size)
            len += (size_t)snprintf(out + len, size - len, "%s%s", len ? "-" : "", one);
    }
}

/* The last folder of path's parent ("a/fashion/train.tfrecord" -> "fashion"), else the path. */
static void dataset_text(const char *path, char *out, size_t size)
{
    const char *slash = strrchr(path, '/');
    const char *start = path;
    int n = (int)strlen(path);
    if (slash && slash > path) {
        const char *p = slash - 1;
        while (p > path && *p != '/')
            p--;
        start = *p == '/' ? p + 1 : p;
        n = (int)(slash - start);
    }
    snprintf(out, size, "%.*s", n, start);
}

/* v as the shortest decimal that reads back as the same float (0.001f shows as 0.001, not
 * 0.0010000000474974513). */
static double decimal(float v)
{
    char buf[32];
    for (int digits = 6; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v)
            return strtod(buf, NULL);
    }
    return v;
}

static tw_hparam number(const char *name, double v)
{
    return (tw_hparam){.name = name, .kind = TW_HPARAM_NUMBER, .number = v};
}

static tw_hparam string(const char *name, const char *v)
{
    return (tw_hparam){.name = name, .kind = TW_HPARAM_STRING, .string = v};
}

/* "piecewise F0,F1@B0,F2@B1...", cut at size; the length written or wanted. */
static int piecewise_text(const tw_config *c, char *out, size_t size)
{
    int n = snprintf(out, size, "piecewise %g", (double)c->factors[0]);
    for (int i = 1; i < c->n_factors && n >= 0 && (size_t)n < size; i++)
        n += snprintf(out + n, size - (size_t)n, ",%g@%lld", (double)c->factors[i], (long long)c->boundaries[i - 1]);
    return n;
}

/* The schedule in a few characters: "none", "0.9/600[ staircase]" (exponential), "cosine/600[ alpha
 * 0.1]", "piecewise 1,0.1@300,0.01@600"; " warmup W" after any of them. Long piecewise ones are cut. */
static void decay_text(const tw_config *c, char *out, size_t size)
{
    int n = 0;
    if (c->lr_decay == TW_DECAY_EXPONENTIAL)
        n = snprintf(out, size, "%g/%lld%s", (double)c->decay_rate, (long long)c->decay_steps,
                     c->staircase ? " staircase" : "");
    else if (c->lr_decay == TW_DECAY_COSINE && c->alpha > 0)
        n = snprintf(out, size, "cosine/%lld alpha %g", (long long)c->decay_steps, (double)c->alpha);
    else if (c->lr_decay == TW_DECAY_COSINE)
        n = snprintf(out, size, "cosine/%lld", (long long)c->decay_steps);
    else if (c->lr_decay == TW_DECAY_PIECEWISE)
        n = piecewise_text(c, out, size);
    else
        n = snprintf(out, size, "none");
    if (c->warmup_steps && n >= 0 && (size_t)n < size)
        snprintf(out + n, size - (size_t)n, " warmup %lld", (long long)c->warmup_steps);
}

int tw_run_hparams_of(const tw_config *c, tw_run_hparams *h)
{
    tw_config unseeded = *c;
    unseeded.seed = 0;
    char *canonical = tw_config_to_json(&unseeded);
    if (!canonical)
        return -1;
    tw_hparams_group_name(canonical, h->group);
    free(canonical);
    model_text(c, h->model, sizeof h->model);
    dataset_text(c->train_path, h->dataset, sizeof h->dataset);
    decay_text(c, h->lr_decay, sizeof h->lr_decay);
    tw_hparam *l = h->list;
    l[0] = string("optimizer", OPTIMIZERS[c->optimizer]);
    l[1] = number("learning_rate", decimal(c->learning_rate));
    l[2] = string("lr_decay", h->lr_decay);
    l[3] = number("batch_size", c->batch_size);
    l[4] = number("towers", c->towers);
    l[5] = number("l2", decimal(c->l2));
    l[6] = number("ema_decay", decimal(c->ema_decay));
    l[7] = number("steps", (double)c->steps);
    l[8] = string("model", h->model);
    l[9] = string("dataset", h->dataset);
    l[10] = number("seed", (double)c->seed);
    return 0;
}

tw_hparams_session tw_run_hparams_session(const tw_run_hparams *h, tw_hparams_status status,
                                          const char *model_uri, const char *monitor_url, double start_secs)
{
    return (tw_hparams_session){.hparams = h->list, .n = TW_RUN_HPARAMS,
                                .group_name = status == TW_HPARAMS_SUCCESS ? h->group : "",
                                .model_uri = model_uri, .monitor_url = monitor_url, .start_secs = start_secs};
}

void tw_run_model_uri(const char *logdir, char *out, size_t size)
{
    char abs[PATH_MAX];
    if (!realpath(logdir, abs) || tw_checkpoint_dir_of(abs, out, size) != 0)
        tw_checkpoint_dir_of(logdir, out, size);
}

char *tw_run_config_markdown(const tw_config *c)
{
    char *compact = tw_config_to_json(c);
    json_t *doc = compact ? json_loads(compact, 0, NULL) : NULL;
    free(compact);
    char *indented = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(doc);
    if (!indented)
        return NULL;
    size_t n = strlen(indented) + 16;
    char *md = malloc(n);
    if (md)
        snprintf(md, n, "```json\n%s\n```", indented);
    free(indented);
    return md;
}
