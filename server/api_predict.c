/* api_predict.c — POST /api/v1/runs/{id}/predict: the HTTP side of a prediction.
 *
 * Owns: the body's forms and cap (multipart/form-data with the inputs as file parts — PNG, JPEG or .npy,
 * found by their signatures — or application/json {"inputs": [...]}: arrays of numbers or base64 files,
 * engine/predict.h), the query (checkpoint, weights, top_k), finding the checkpoint in the run's folder
 * (the engine's listing), the status of each failure and the reply. Does not own the input rules, the
 * forward pass or the top-k (engine/predict.h), nor the model cache (predict_cache.h).
 *
 * The body is buffered whole (at most TW_PREDICT_MAX_BODY bytes, 413 past it, from Content-Length before
 * reading when it is given): a prediction needs every input before it runs, and the cap is small. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "multipart.h"
#include "predict_cache.h"
#include "reply.h"
#include "runs.h"

enum { TW_PREDICT_MAX_BODY = 32 << 20 }; /* bytes of a request body */

/* One input file of a form. */
typedef struct {
    char name[TW_MULTIPART_MAX_FILENAME + 1];
    char *data;       /* [n] bytes; owned */
    size_t n, cap;
} form_file;

/* One request's body, buffered, and the files a multipart form gave. */
typedef struct {
    char *body;       /* [len] bytes; owned */
    size_t len, cap;
    int multipart;    /* else JSON */
    form_file part[TW_MULTIPART_MAX_PARTS];
    int parts;
} predict_body;

static int body_is(const char *ctype, const char *want)
{
    size_t n = strlen(want);
    return ctype && !strncasecmp(ctype, want, n) && (!ctype[n] || ctype[n] == ';' || ctype[n] == ' ');
}

static int predict_begin(tw_server *S, tw_req *r)
{
    (void)S;
    const char *ctype = tw_req_header(r, "Content-Type"), *cl = tw_req_header(r, "Content-Length");
    if (!body_is(ctype, "multipart/form-data") && !body_is(ctype, "application/json")) {
        tw_reply_error(r, TW_API_UNSUPPORTED_MEDIA_TYPE,
                       "Content-Type must be multipart/form-data (image or .npy files) or application/json "
                       "({\"inputs\": [...]})");
        return -1;
    }
    if (cl && strtoull(cl, NULL, 10) > TW_PREDICT_MAX_BODY) {
        tw_reply_error(r, TW_API_PAYLOAD_TOO_LARGE, "the body (%s bytes) is over the cap of %d bytes for a prediction",
                       cl, TW_PREDICT_MAX_BODY);
        return -1;
    }
    predict_body *b = calloc(1, sizeof *b);
    if (!b) {
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return -1;
    }
    b->multipart = body_is(ctype, "multipart/form-data");
    tw_req_set_upload(r, b);
    return 0;
}

/* Appends n bytes to *buf (len, cap); -1 when memory runs out. */
static int append(char **buf, size_t *len, size_t *cap, const void *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t want = *cap ? *cap : 4096;
        while (want < *len + n + 1)
            want *= 2;
        char *grown = realloc(*buf, want);
        if (!grown)
            return -1;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static int predict_data(tw_server *S, tw_req *r, const char *chunk, size_t n)
{
    (void)S;
    predict_body *b = tw_req_upload(r);
    if (b->len + n > TW_PREDICT_MAX_BODY) {
        tw_reply_error(r, TW_API_PAYLOAD_TOO_LARGE, "the body is over the cap of %d bytes for a prediction",
                       TW_PREDICT_MAX_BODY);
        return -1;
    }
    if (append(&b->body, &b->len, &b->cap, chunk, n) != 0) {
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory reading the body");
        return -1;
    }
    return 0;
}

static void predict_cleanup(tw_server *S, tw_req *r)
{
    (void)S;
    predict_body *b = tw_req_upload(r);
    if (!b)
        return;
    for (int i = 0; i < b->parts; i++)
        free(b->part[i].data);
    free(b->body);
    free(b);
}

const tw_upload_ops TW_API_RUN_PREDICT = {predict_begin, predict_data, predict_cleanup};

/* ---- the multipart form: every part a file ---- */

static tw_status part_begin(void *ctx, const char *name, const char *filename, const char *ctype, tw_error *err)
{
    (void)ctype;
    predict_body *b = ctx;
    if (b->parts == TW_MULTIPART_MAX_PARTS)
        return tw_error_set(err, TW_ERR_TOO_LARGE, NULL, -1, "more than %d files in one form", TW_MULTIPART_MAX_PARTS);
    if (!*filename)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "part '%s' is not a file: every part is an input file (PNG, JPEG or .npy)", name);
    snprintf(b->part[b->parts].name, sizeof b->part[0].name, "%s", filename);
    b->parts++;
    return TW_OK;
}

static tw_status part_data(void *ctx, const void *data, size_t n, tw_error *err)
{
    predict_body *b = ctx;
    form_file *p = &b->part[b->parts - 1];
    if (append(&p->data, &p->n, &p->cap, data, n) != 0)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    return TW_OK;
}

static tw_status part_end(void *ctx, tw_error *err)
{
    (void)ctx;
    (void)err;
    return TW_OK;
}

/* Splits the buffered form into b->part. */
static tw_status parse_form(tw_req *r, predict_body *b, tw_error *err)
{
    tw_multipart_callbacks cb = {part_begin, part_data, part_end, b};
    tw_multipart *mp;
    TW_TRY(tw_multipart_create(tw_req_header(r, "Content-Type"), &cb, &mp, err));
    tw_status s = tw_multipart_feed(mp, b->body, b->len, err);
    if (s == TW_OK)
        s = tw_multipart_finish(mp, err);
    tw_multipart_destroy(mp);
    if (s == TW_OK && b->parts == 0)
        s = tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the form holds no input file");
    return s;
}

/* {"inputs": [...]} with no other key. */
static tw_status parse_json(const predict_body *b, json_t **inputs, tw_error *err)
{
    json_error_t je;
    json_t *doc = json_loadb(b->body ? b->body : "", b->len, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return tw_error_set(err, TW_ERR_INVALID, "request body", je.position, "%s", je.text);
    const char *key;
    json_t *v;
    tw_status s = json_is_object(doc) ? TW_OK
                                      : tw_error_set(err, TW_ERR_INVALID, "request body", -1, "expected a JSON object");
    json_object_foreach(doc, key, v) if (s == TW_OK && strcmp(key, "inputs"))
        s = tw_error_set(err, TW_ERR_INVALID, "request body", -1, "unknown key '%.64s' (the body is {\"inputs\": [...]})",
                         key);
    *inputs = s == TW_OK ? json_incref(json_object_get(doc, "inputs")) : NULL;
    json_decref(doc);
    return s;
}

/* The inputs of the body into batch (for the entry's model). */
static tw_status read_inputs(tw_req *r, predict_body *b, tw_predict_batch *batch, tw_error *err)
{
    if (b->multipart) {
        TW_TRY(parse_form(r, b, err));
        for (int i = 0; i < b->parts; i++)
            TW_TRY(tw_predict_add_file(batch, b->part[i].data ? b->part[i].data : "", b->part[i].n, b->part[i].name,
                                       err));
        return TW_OK;
    }
    json_t *inputs = NULL;
    TW_TRY(parse_json(b, &inputs, err));
    tw_status s = tw_predict_add_json(batch, inputs, err);
    json_decref(inputs);
    return s;
}

/* ---- the query and the checkpoint ---- */

typedef struct {
    long long step;  /* -1: latest */
    int weights;     /* tw_weights or TW_WEIGHTS_DEFAULT */
    long top_k;
} predict_query;

static int read_query(tw_req *r, predict_query *q)
{
    const char *at = tw_req_query(r, "checkpoint"), *w = tw_req_query(r, "weights");
    char *end;
    q->step = -1;
    if (at && strcmp(at, "latest")) {
        q->step = strtoll(at, &end, 10);
        if (*end || end == at || q->step < 0 || !(*at >= '0' && *at <= '9')) {
            tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter 'checkpoint': '%.64s' is not a step or 'latest'",
                           at);
            return -1;
        }
    }
    tw_weights given;
    q->weights = !w ? TW_WEIGHTS_DEFAULT : tw_weights_parse(w, &given) == 0 ? (int)given : -2;
    if (q->weights == -2) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter 'weights': '%.64s' is not raw or ema", w);
        return -1;
    }
    return tw_req_query_int(r, "top_k", 1, TW_PREDICT_MAX_TOP_K, TW_PREDICT_DEFAULT_TOP_K, &q->top_k);
}

/* An input that does not fit is the client's: 400, or 413 past a cap; memory is 503. */
static void reply_input_error(tw_req *r, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    tw_api_code code = err->status == TW_ERR_TOO_LARGE ? TW_API_PAYLOAD_TOO_LARGE
                       : err->status == TW_ERR_NOMEM   ? TW_API_UNAVAILABLE
                                                       : TW_API_INVALID_ARGUMENT;
    tw_reply_error(r, code, "%s", msg);
}

static void reply_predictions(tw_req *r, const char *file, tw_predict_entry *e, int hit, json_t *predictions)
{
    const tw_inference *inf = tw_predict_entry_model(e);
    tw_reply_json(r, 200,
                  json_pack("{s:s, s:{s:I, s:s}, s:s, s:s, s:b, s:o}", "run", tw_req_param(r, "id"), "checkpoint", "step",
                            (json_int_t)tw_inference_step(inf), "file", file, "weights",
                            tw_inference_weights(inf) == TW_WEIGHTS_EMA ? "ema" : "raw", "task", tw_predict_task(inf),
                            "model_cached", hit, "predictions", predictions));
}

void tw_api_run_predict(tw_server *S, tw_req *r)
{
    predict_query q;
    char path[PATH_MAX + 320];
    const char *file;
    if (read_query(r, &q) != 0 || tw_api_run_checkpoint_file(S, r, q.step, tw_req_query(r, "checkpoint"), path, sizeof path) != 0)
        return;
    file = strrchr(path, '/') + 1;
    tw_error err = {0};
    tw_predict_entry *e;
    int hit;
    tw_status s = tw_predict_cache_get(S->predict, tw_req_param(r, "id"), path, q.weights, &e, &hit, &err);
    if (s != TW_OK) {
        tw_reply_status(r, &err); /* TW_ERR_INVALID: ema of a run without an EMA; CORRUPT: a damaged checkpoint */
        return;
    }
    tw_predict_batch batch;
    json_t *predictions = NULL, *names = NULL;
    s = tw_predict_batch_init(&batch, tw_predict_entry_model(e), &err);
    if (s == TW_OK && (s = read_inputs(r, tw_req_upload(r), &batch, &err)) != TW_OK)
        reply_input_error(r, &err);
    else if (s == TW_OK) {
        names = tw_predict_class_names(tw_inference_config(tw_predict_entry_model(e)));
        s = tw_predict_entry_run(e, &batch, (int)q.top_k, names, &predictions, &err);
        if (s == TW_OK)
            reply_predictions(r, file, e, hit, predictions);
        else
            tw_reply_status(r, &err); /* TW_ERR_INVALID: no rows (400) */
    } else {
        tw_reply_status(r, &err);
    }
    json_decref(names);
    tw_predict_batch_cleanup(&batch);
    tw_predict_cache_release(S->predict, e);
}
