/* api_evaluations.c — a run's evaluation routes (see evaluations.h).
 *
 * GET /api/v1/runs/{id}/evaluation serves the run's evaluation.json as the trainer last wrote it (the
 * engine owns the file, its name and its format: engine/evaluation.h), or 404 with the envelope when the
 * run has not evaluated yet.
 *
 * POST /api/v1/runs/{id}/evaluate {"dataset", "checkpoint", "weights", "split"} checks the request
 * against the run's model (the dataset's per-example shape and class count; the checkpoint kept; EMA
 * weights kept) and queues an evaluation job (store.h: tw_store_eval_*) that the scheduler runs as a
 * supervised `tower evaluate` child (scheduler.c). The job's output and log live in
 * DATA/runs/<run>/evaluations/ (server.h: TW_RUN_EVALUATIONS); its result is the same document as
 * evaluation.json, with the chosen weights' slot filled. GET .../evaluations lists a run's jobs,
 * GET .../evaluations/{eval} polls one, POST .../evaluations/{eval}/cancel cancels it. */
#include "evaluations.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "config.h"
#include "convert.h"
#include "datafs.h"
#include "datasets.h"
#include "evaluation.h"
#include "inference.h"
#include "model.h"
#include "reply.h"
#include "scheduler.h"
#include "store.h"

void tw_api_run_evaluation(tw_server *S, tw_req *r)
{
    json_t *row = tw_api_row_or_404(S, r, "run", tw_store_run_get);
    if (!row)
        return;
    const char *id = tw_req_param(r, "id");
    char path[PATH_MAX];
    json_t *doc = NULL;
    tw_error err;
    int too_long = tw_run_path(S, tw_run_folder(row), TW_EVALUATION_FILE, path, sizeof path) != 0;
    json_decref(row);
    tw_status s = too_long
                      ? tw_error_set(&err, TW_ERR_INVALID, id, -1, "the run folder's path is too long")
                      : tw_evaluation_read(path, &doc, &err);
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "run '%s' has no evaluation yet", id);
    else if (s != TW_OK)
        tw_api_reply_logged(r, &err);
    else
        tw_reply_json(r, 200, doc);
}

/* ================================ evaluation jobs ================================ */

/* The request, decoded and checked. */
typedef struct {
    json_t *run;         /* the run's row (owned) */
    json_t *dataset;     /* the dataset's row (owned) */
    json_t *feed;        /* tw_dataset_for_run of it (owned) */
    const char *split;   /* "test" or "train" */
    const char *weights; /* "raw" or "ema" */
    int64_t step;        /* the checkpoint's */
    char checkpoint[PATH_MAX + 300];
} job_request;

static tw_status invalid(tw_api_code *code, tw_api_code c, tw_error *err, const char *fmt, const char *a,
                         const char *b)
{
    *code = c;
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, fmt, a, b);
}

/* The body's keys: "dataset" (required), "checkpoint" (a step or "latest"), "weights", "split". */
static tw_status decode_body(const json_t *body, job_request *q, const json_t **checkpoint, tw_api_code *code,
                             tw_error *err)
{
    static const char *const ALLOWED[] = {"dataset", "checkpoint", "weights", "split"};
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        size_t k = 0;
        while (k < sizeof ALLOWED / sizeof ALLOWED[0] && strcmp(key, ALLOWED[k]))
            k++;
        if (k == sizeof ALLOWED / sizeof ALLOWED[0])
            return invalid(code, TW_API_INVALID_ARGUMENT, err, "%s: unknown key (the body is {\"dataset\", "
                           "\"checkpoint\", \"weights\", \"split\"})%s", key, "");
    }
    if (!json_is_string(json_object_get(body, "dataset")))
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "dataset: %s%s", "required: a dataset's name or id", "");
    *checkpoint = json_object_get(body, "checkpoint");
    if (*checkpoint && !(json_is_integer(*checkpoint) && json_integer_value(*checkpoint) >= 0) &&
        !(json_is_string(*checkpoint) && !strcmp(json_string_value(*checkpoint), "latest")))
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "checkpoint: %s%s", "a step number or \"latest\"", "");
    v = json_object_get(body, "weights");
    q->weights = v ? json_string_value(v) : NULL; /* NULL: the EMA when the run kept one (check_model) */
    tw_weights w;
    if (v && tw_weights_parse(q->weights ? q->weights : "", &w) != 0)
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "weights: %s%s", "\"raw\" or \"ema\"", "");
    v = json_object_get(body, "split");
    q->split = v ? json_string_value(v) : NULL;
    if (v && (!q->split || (strcmp(q->split, "test") && strcmp(q->split, "train"))))
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "split: %s%s", "\"test\" or \"train\"", "");
    return TW_OK;
}

/* The dataset the body names (resolve.h's rule: an id, or the one dataset of that name), ready, and its
 * feed for a run. */
static tw_status find_dataset(tw_server *S, const char *ref, job_request *q, tw_api_code *code, tw_error *err)
{
    json_t *row = NULL;
    tw_status s = tw_store_dataset_resolve_unique(S->store, ref, &row, err);
    if (s == TW_END || s == TW_ERR_INVALID) {
        char several[sizeof err->message];
        snprintf(several, sizeof several, "%s", s == TW_ERR_INVALID ? err->message : "");
        json_decref(row);
        return s == TW_END ? invalid(code, TW_API_INVALID_ARGUMENT, err, "dataset: no dataset '%s'%s", ref, "")
                           : invalid(code, TW_API_INVALID_ARGUMENT, err, "dataset: %s%s", several, "");
    }
    TW_TRY(s);
    q->dataset = row;
    const char *why = NULL;
    if (tw_store_dataset_state(row) != TW_DATASET_READY || !(q->feed = tw_dataset_for_run(S, row, &why)))
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "dataset: '%s' cannot be evaluated on: %s", ref,
                       why ? why : "it is not ready");
    if (!q->split)
        q->split = json_is_string(json_object_get(q->feed, "test")) ? "test" : "train";
    if (!json_is_string(json_object_get(q->feed, q->split)))
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "split: dataset '%s' has no %s split", ref, q->split);
    return TW_OK;
}

/* "[28, 28, 1]" */
static void shape_text(const json_t *shape, char *buf, size_t size)
{
    char *t = json_dumps(shape, JSON_COMPACT);
    snprintf(buf, size, "%s", t ? t : "?");
    free(t);
}

/* The classes a dataset's integer labels span (the largest label + 1, over its splits), or -1 when its
 * labels are not integers. */
static int dataset_classes(const json_t *dataset_row)
{
    static const char *const SPLITS[2] = {"train", "test"};
    int classes = -1;
    for (int i = 0; i < 2; i++) {
        const char *label;
        json_t *n;
        json_t *h = tw_convert_meta_split(json_object_get(dataset_row, "meta"), SPLITS[i], "label_histogram");
        json_object_foreach(h, label, n) {
            long k = strtol(label, NULL, 10);
            if (k >= 0 && k < TW_EVAL_MAX_CLASSES && k + 1 > classes)
                classes = (int)k + 1;
        }
    }
    return classes;
}

/* The dataset fits the run's model: the same per-example shape; for a classifier, integer labels over
 * exactly the model's classes; EMA weights only from a run that kept them. */
static tw_status check_compatible(const tw_config *c, const tw_model *m, const job_request *q, const char *ref,
                                  tw_api_code *code, tw_error *err)
{
    json_t *want = json_array();
    for (int d = 0; d < c->rank; d++)
        json_array_append_new(want, json_integer(c->shape[d]));
    int same = json_equal(want, json_object_get(q->feed, "shape"));
    char a[120], b[120], msg[400];
    shape_text(json_object_get(q->feed, "shape"), a, sizeof a);
    shape_text(want, b, sizeof b);
    json_decref(want);
    const char *run = json_string_value(json_object_get(q->run, "id"));
    if (!same) {
        snprintf(msg, sizeof msg, "dataset '%s' has examples of shape %s; run %s's model takes %s", ref, a, run, b);
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "dataset: %s%s", msg, "");
    }
    int classes = dataset_classes(q->dataset), outs = tw_model_output_size(m);
    if (c->loss != TW_LOSS_MSE && classes != outs) {
        snprintf(msg, sizeof msg, "dataset '%s' has %d classes; run %s's model has %d", ref, classes < 0 ? 0 : classes,
                 run, outs);
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "dataset: %s%s", msg, "");
    }
    if (!strcmp(q->weights, "ema") && c->ema_decay <= 0)
        return invalid(code, TW_API_INVALID_ARGUMENT, err, "weights: run %s kept no EMA weights (ema_decay 0)%s",
                       run, "");
    return TW_OK;
}

/* The run's model from its config.json (as the trainer reads it): the compatibility check; the default
 * weights (the EMA when the run kept one, else raw). */
static tw_status check_model(tw_server *S, job_request *q, const char *ref, tw_api_code *code,
                             tw_error *err)
{
    char path[PATH_MAX];
    tw_config *c = malloc(sizeof *c);
    tw_model *m = NULL;
    *code = TW_API_INTERNAL;
    tw_status s = !c ? tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory")
                  : tw_run_path(S, tw_run_folder(q->run), TW_RUN_CONFIG, path, sizeof path) != 0
                      ? tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the run folder's path is too long")
                      : tw_config_load(path, c, err);
    if (s == TW_OK && !q->weights)
        q->weights = c->ema_decay > 0 ? "ema" : "raw";
    if (s == TW_OK)
        s = tw_model_create(c, &m, err);
    if (s == TW_OK)
        s = check_compatible(c, m, q, ref, code, err);
    tw_model_destroy(m);
    free(c);
    return s;
}

/* The run's kept checkpoint at `at` (a step, "latest" or NULL: latest): 404 when there is none. */
static tw_status find_checkpoint(tw_server *S, job_request *q, const json_t *at, tw_api_code *code, tw_error *err)
{
    char dir[PATH_MAX + 16], run[PATH_MAX];
    const char *id = json_string_value(json_object_get(q->run, "id"));
    tw_run_dir(S, tw_run_folder(q->run), run, sizeof run);
    tw_checkpoint_dir_of(run, dir, sizeof dir);
    tw_ckpt_listing l;
    *code = TW_API_INTERNAL;
    TW_TRY(tw_checkpoint_list(dir, &l, err));
    q->step = json_is_integer(at) ? json_integer_value(at) : l.latest;
    const tw_ckpt_entry *e = tw_checkpoint_listing_find(&l, q->step);
    const int found = e != NULL;
    if (found)
        snprintf(q->checkpoint, sizeof q->checkpoint, "%s/%s", dir, e->file);
    tw_checkpoint_listing_free(&l);
    if (found)
        return TW_OK;
    *code = TW_API_NOT_FOUND;
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)q->step);
    return q->step < 0 ? tw_error_set(err, TW_ERR_INVALID, NULL, -1, "checkpoint: run %s has no checkpoint yet", id)
                       : tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                      "checkpoint: run %s keeps no checkpoint of step %s", id, step);
}

/* A job row as the API shows it (new): without the child's arguments (server paths). */
static json_t *present(const json_t *row)
{
    json_t *o = json_deep_copy(row);
    json_object_del(o, "job");
    return o;
}

/* Inserts the job: its folder, the child's arguments, the row. */
static tw_status insert_job(tw_server *S, const job_request *q, char id[TW_ID_BYTES], tw_error *err)
{
    const char *run = json_string_value(json_object_get(q->run, "id"));
    char dir[PATH_MAX], out[PATH_MAX + 64], log[PATH_MAX + 64];
    tw_store_new_id('e', id);
    if (tw_run_path(S, tw_run_folder(q->run), TW_RUN_EVALUATIONS, dir, sizeof dir) != 0)
        return tw_error_set(err, TW_ERR_INVALID, run, -1, "the run folder's path is too long");
    snprintf(out, sizeof out, "%s/%s.json", dir, id);
    snprintf(log, sizeof log, "%s/%s.log", dir, id);
    if (tw_fs_mkdir(dir, 0755) != 0 && errno != EEXIST)
        return tw_fs_error(err, dir, "cannot create the run's evaluations folder");
    json_t *job = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "checkpoint", q->checkpoint, "data",
                            json_string_value(json_object_get(q->feed, q->split)), "image_feature",
                            json_string_value(json_object_get(q->feed, "image_feature")), "label_feature",
                            json_string_value(json_object_get(q->feed, "label_feature")), "out", out, "log", log);
    char *text = job ? json_dumps(job, JSON_COMPACT) : NULL;
    json_decref(job);
    tw_eval_new e = {.id = id, .run_id = run, .dataset_id = json_string_value(json_object_get(q->dataset, "id")),
                     .split = q->split, .weights = q->weights, .checkpoint = q->step, .job = text,
                     .now = tw_now_wall()};
    tw_status s = text ? tw_store_eval_insert(S->store, &e, err)
                       : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    free(text);
    return s;
}

void tw_api_run_evaluate(tw_server *S, tw_req *r)
{
    job_request q = {.run = tw_api_row_or_404(S, r, "run", tw_store_run_get)};
    if (!q.run)
        return;
    const json_t *body = tw_req_json(r), *at = NULL;
    tw_api_code code = TW_API_INVALID_ARGUMENT;
    tw_error err;
    char id[TW_ID_BYTES];
    const char *ref = json_string_value(json_object_get(body, "dataset"));
    tw_status s = decode_body(body, &q, &at, &code, &err);
    if (s == TW_OK)
        s = find_dataset(S, ref, &q, &code, &err);
    if (s == TW_OK)
        s = check_model(S, &q, ref, &code, &err);
    if (s == TW_OK)
        s = find_checkpoint(S, &q, at, &code, &err);
    json_t *row = NULL;
    if (s == TW_OK) {
        code = TW_API_INTERNAL; /* from here a failure is the server's */
        s = insert_job(S, &q, id, &err);
    }
    if (s == TW_OK)
        s = tw_store_eval_get(S->store, id, &row, &err);
    if (s == TW_OK) {
        tw_scheduler_wake(S->sched);
        tw_reply_json(r, 202, present(row));
    }
    json_decref(row);
    if (s != TW_OK && code == TW_API_INTERNAL)
        tw_api_reply_logged(r, &err);
    else if (s != TW_OK)
        tw_reply_error(r, code, "%s", err.message);
    json_decref(q.run);
    json_decref(q.dataset);
    json_decref(q.feed);
}

/* The job the path's {eval} names, of the run its {id} names; NULL after replying 404. */
static json_t *job_or_404(tw_server *S, tw_req *r)
{
    json_t *run = tw_api_row_or_404(S, r, "run", tw_store_run_get), *row = NULL;
    json_decref(run);
    if (!run)
        return NULL;
    const char *eid = tw_req_param(r, "eval");
    tw_error err;
    tw_status s = tw_store_eval_get(S->store, eid, &row, &err);
    if (s == TW_OK && strcmp(json_string_value(json_object_get(row, "run_id")), tw_req_param(r, "id")))
        s = TW_END;
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "run '%s' has no evaluation '%s'", tw_req_param(r, "id"), eid);
    else if (s != TW_OK)
        tw_reply_status(r, &err);
    if (s != TW_OK) {
        json_decref(row);
        return NULL;
    }
    return row;
}

void tw_api_run_evaluations(tw_server *S, tw_req *r)
{
    json_t *run = tw_api_row_or_404(S, r, "run", tw_store_run_get), *rows = NULL;
    json_decref(run);
    tw_error err;
    if (!run)
        return;
    if (tw_store_eval_list(S->store, tw_req_param(r, "id"), &rows, &err) != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    json_t *list = json_array(), *row;
    size_t i;
    json_array_foreach(rows, i, row)
        json_array_append_new(list, present(row));
    json_decref(rows);
    tw_reply_json(r, 200, json_pack("{s:o}", "evaluations", list));
}

void tw_api_run_evaluation_job(tw_server *S, tw_req *r)
{
    json_t *row = job_or_404(S, r);
    if (row)
        tw_reply_json(r, 200, present(row));
    json_decref(row);
}

void tw_api_run_evaluation_cancel(tw_server *S, tw_req *r)
{
    json_t *row = job_or_404(S, r);
    if (!row)
        return;
    json_decref(row);
    tw_error err;
    const char *eid = tw_req_param(r, "eval");
    tw_status s = tw_scheduler_cancel_evaluation(S->sched, eid, &err);
    if (s == TW_ERR_INVALID)
        tw_reply_error(r, TW_API_CONFLICT, "%s", err.message);
    else if (s != TW_OK)
        tw_reply_status(r, &err);
    else if ((s = tw_store_eval_get(S->store, eid, &row, &err)) == TW_OK)
        tw_reply_json(r, 202, present(row));
    else
        tw_reply_status(r, &err);
    if (s == TW_OK)
        json_decref(row);
}
