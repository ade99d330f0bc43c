/* api_runs.c — /api/v1/runs: submit, show, cancel, resume, priority, delete, metrics, events, log,
 * checkpoints (the list is api_runs_list.c's). */
#define _GNU_SOURCE
#include "runs.h"

#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "assets.h"
#include "atomic_file.h"
#include "checkpoint.h"
#include "config.h"
#include "convert.h"
#include "datafs.h"
#include "datasets.h"
#include "events_read.h"
#include "launch.h"
#include "logtext.h"
#include "memory.h"
#include "model.h"
#include "names.h"
#include "predict_cache.h"
#include "scalars_cache.h"
#include "reply.h"
#include "resolve.h"
#include "scheduler.h"
#include "store.h"
#include "trainer.h"

enum { LOG_TAIL_BYTES = 256 * 1024, MAX_IDEM_KEY = 255, MAX_PRIORITY = 1000 };

/* ================================ submission ================================ */

typedef struct {
    const char *name;
    int max_restarts;
    double deadline_s;
    int priority;
    json_t *dataset_row; /* owned */
    int converting;      /* the dataset is still converting: "dataset" stays a reference (tw_runs_complete) */
    tw_launch_keys launch; /* "processes", "hosts" (launch.h); its hosts owned */
} server_keys;

static tw_status bad(tw_api_code *code, tw_api_code c, tw_error *err, const char *key, const char *msg)
{
    *code = c;
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: %s", key, msg);
}

/* A queue priority: an integer from -MAX_PRIORITY to MAX_PRIORITY. */
static tw_status priority_of(const json_t *v, int *priority, tw_api_code *code, tw_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < -MAX_PRIORITY || json_integer_value(v) > MAX_PRIORITY)
        return bad(code, TW_API_INVALID_ARGUMENT, err, "priority", "must be an integer from -1000 to 1000");
    *priority = (int)json_integer_value(v);
    return TW_OK;
}

/* The kept checkpoint of run `ref` (an id or name) at `at` (a step, "latest" or NULL: latest) into
 * path[PATH_MAX + 300] (the checkpoint folder's listing is the engine's: checkpoint.h). */
static tw_status parent_checkpoint(tw_server *S, const char *ref, const json_t *at, char *path, tw_api_code *code,
                                   tw_error *err)
{
    json_t *row;
    char msg[600], run[PATH_MAX], dir[PATH_MAX + 16];
    tw_status s = tw_store_run_resolve(S->store, ref, &row, err);
    if (s == TW_ERR_INVALID) /* a name several runs share: err lists them */
        snprintf(msg, sizeof msg, "%s", err->message);
    if (s == TW_END || s == TW_ERR_INVALID) {
        json_decref(row);
        return s == TW_END ? bad(code, TW_API_NOT_FOUND, err, "init_from.run", "no run has that id or name")
                           : bad(code, TW_API_INVALID_ARGUMENT, err, "init_from.run", msg);
    }
    TW_TRY(s);
    tw_run_dir(S, tw_run_folder(row), run, sizeof run);
    json_decref(row);
    tw_checkpoint_dir_of(run, dir, sizeof dir);
    tw_ckpt_listing l;
    if ((s = tw_checkpoint_list(dir, &l, err)) == TW_OK) {
        const tw_ckpt_entry *e = tw_checkpoint_listing_find(&l, json_is_integer(at) ? json_integer_value(at) : -1);
        if (e)
            snprintf(path, PATH_MAX + 300, "%s/%s", dir, e->file);
        else
            s = bad(code, TW_API_INVALID_ARGUMENT, err, "init_from.checkpoint",
                    "that run keeps no such checkpoint (GET /api/v1/runs/{id}/checkpoints lists them)");
    }
    tw_checkpoint_listing_free(&l);
    return s;
}

/* "init_from": {"run": ID_OR_NAME, "checkpoint": STEP | "latest", "weights": W} (from, borrowed) becomes
 * the engine's {"checkpoint": PATH, "weights": W} in cfg: the path of that run's kept checkpoint. */
static tw_status take_init_from(tw_server *S, json_t *cfg, const json_t *from, tw_api_code *code, tw_error *err)
{
    const char *key;
    json_t *v, *at = json_object_get(from, "checkpoint");
    json_object_foreach((json_t *)from, key, v) if (strcmp(key, "run") && strcmp(key, "checkpoint") &&
                                                    strcmp(key, "weights"))
        return bad(code, TW_API_INVALID_ARGUMENT, err, "init_from",
                   "unknown key (the keys are \"run\", \"checkpoint\" and \"weights\")");
    if (!json_is_string(json_object_get(from, "run")))
        return bad(code, TW_API_INVALID_ARGUMENT, err, "init_from.run", "must be a run's id or name");
    if (at && !(json_is_integer(at) || (json_is_string(at) && !strcmp(json_string_value(at), "latest"))))
        return bad(code, TW_API_INVALID_ARGUMENT, err, "init_from.checkpoint", "must be a step or \"latest\"");
    char path[PATH_MAX + 300];
    TW_TRY(parent_checkpoint(S, json_string_value(json_object_get(from, "run")), at, path, code, err));
    json_t *weights = json_object_get(from, "weights");
    json_object_set_new(cfg, "init_from", json_pack("{s:s, s:O}", "checkpoint", path, "weights",
                                                    weights ? weights : json_null()));
    return TW_OK;
}

/* Refuses a file path anywhere in cfg, except the run that init_from names (then resolved to its
 * checkpoint's path). */
static tw_status check_paths(tw_server *S, json_t *cfg, tw_api_code *code, tw_error *err)
{
    char path_key[128];
    json_t *from = json_incref(json_object_get(cfg, "init_from"));
    int by_run = json_is_object(from) && json_object_get(from, "run");
    if (by_run)
        json_object_del(cfg, "init_from");
    tw_status s = TW_OK;
    if (tw_config_find_path_key(cfg, path_key, sizeof path_key))
        s = bad(code, TW_API_INVALID_ARGUMENT, err, path_key,
                "a file path cannot be given over the API: a run reads the uploaded dataset that \"dataset\" "
                "names (POST /api/v1/datasets uploads one), and starts from a run's checkpoint with "
                "\"init_from\": {\"run\": ...}");
    if (s == TW_OK && by_run)
        s = take_init_from(S, cfg, from, code, err);
    json_decref(from);
    return s;
}

/* What a failed dataset says: its name and the upload's error message, into buf. */
static const char *failed_text(const json_t *row, char *buf, size_t size)
{
    json_t *e = json_object_get(row, "error");
    const char *msg = json_is_object(e) ? json_string_value(json_object_get(e, "message")) : json_string_value(e);
    snprintf(buf, size, "dataset %s failed to convert: %s", json_string_value(json_object_get(row, "name")),
             msg ? msg : "no error recorded");
    return buf;
}

/* Resolves cfg's "dataset" (an uploaded dataset's id or name, or an object with "name" and overrides) into
 * *row (new) and replaces it in cfg with the engine's dataset object, the overrides kept. A dataset still
 * converting: *converting = 1 and cfg keeps the reference (tw_runs_complete fills it in when the run may
 * start); converting NULL: an error, as for a failed dataset (TW_ERR_INVALID with *code). */
static tw_status resolve_dataset(tw_server *S, json_t *cfg, json_t **row, int *converting, tw_api_code *code,
                                 tw_error *err)
{
    json_t *ds = json_object_get(cfg, "dataset"), *v;
    json_t *ref = json_is_object(ds) ? json_object_get(ds, "name") : ds;
    if (!json_is_string(ref))
        return bad(code, TW_API_INVALID_ARGUMENT, err, "dataset",
                   "must name an uploaded dataset (its id or name), or be an object with \"name\"");
    tw_status found = tw_store_dataset_resolve(S->store, json_string_value(ref), row, err);
    if (found == TW_END) {
        char hint[TW_NAME_MAX + 32], msg[TW_NAME_MAX + 96];
        tw_api_suggest_name(S, 'd', json_string_value(ref), hint, sizeof hint);
        snprintf(msg, sizeof msg, "no dataset has that id or name%s", hint);
        return bad(code, TW_API_NOT_FOUND, err, "dataset", msg); /* the request names what does not exist */
    }
    if (found != TW_OK)
        return found; /* the caller maps a failed read to its code */
    tw_dataset_state state = tw_store_dataset_state(*row);
    char why[1200];
    if (state == TW_DATASET_FAILED) /* the dataset's state, not the request, is in the way */
        return bad(code, TW_API_CONFLICT, err, "dataset", failed_text(*row, why, sizeof why));
    if (state != TW_DATASET_READY && converting) {
        *converting = 1;
        return TW_OK;
    }
    if (state != TW_DATASET_READY)
        return bad(code, TW_API_CONFLICT, err, "dataset", "that dataset is still converting");
    const char *why_not;
    json_t *engine_ds = tw_dataset_for_run(S, *row, &why_not);
    if (!engine_ds)
        return bad(code, TW_API_INVALID_ARGUMENT, err, "dataset", why_not);
    const char *key;
    json_object_foreach(ds, key, v) /* the overrides of an object "dataset" */
        if (strcmp(key, "name"))
            json_object_set(engine_ds, key, v);
    json_object_set_new(cfg, "dataset", engine_ds);
    return TW_OK;
}

/* Reads and removes the server's own keys from cfg (a copy). */
static tw_status take_server_keys(tw_server *S, json_t *cfg, server_keys *k, tw_api_code *code, tw_error *err)
{
    char why[200];
    json_t *v;
    TW_TRY(check_paths(S, cfg, code, err));
    k->max_restarts = S->opt.max_restarts;
    if ((v = json_object_get(cfg, "name"))) {
        if (!json_is_string(v))
            return bad(code, TW_API_INVALID_ARGUMENT, err, "name", "must be a string");
        if (!tw_name_valid(json_string_value(v), why, sizeof why))
            return bad(code, TW_API_INVALID_ARGUMENT, err, "name", why);
        k->name = json_string_value(v);
    }
    if ((v = json_object_get(cfg, "max_restarts"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100)
            return bad(code, TW_API_INVALID_ARGUMENT, err, "max_restarts", "must be an integer from 0 to 100");
        k->max_restarts = (int)json_integer_value(v);
    }
    if ((v = json_object_get(cfg, "deadline_s"))) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1e8)
            return bad(code, TW_API_INVALID_ARGUMENT, err, "deadline_s", "must be a number of seconds >= 0");
        k->deadline_s = json_number_value(v);
    }
    if ((v = json_object_get(cfg, "priority")))
        TW_TRY(priority_of(v, &k->priority, code, err));
    *code = TW_API_INVALID_ARGUMENT;
    TW_TRY(tw_launch_take_keys(S->launcher, cfg, &k->launch, err));
    TW_TRY(resolve_dataset(S, cfg, &k->dataset_row, &k->converting, code, err));
    json_object_del(cfg, "name");
    json_object_del(cfg, "max_restarts");
    json_object_del(cfg, "deadline_s");
    json_object_del(cfg, "priority");
    return TW_OK;
}

/* Refuses a config whose memory estimate (engine/memory.h, with the dataset's example counts) passes
 * what the run's devices have: on a CPU server the host's memory for every tower; on a GPU server the
 * host parts only (a GPU's memory is not known without the CUDA runtime: `tower train` checks it), for
 * `together` such runs at once (a sweep's concurrent trials) as far as the GPUs hold them side by side (the
 * CPU trains one run at a time). */
static tw_status check_memory(tw_server *S, const tw_config *c, const json_t *dataset_row, int together,
                              tw_error *err)
{
    const json_t *splits = json_object_get(json_object_get(dataset_row, "meta"), "splits");
    tw_memory_data d = {
        .train_examples = (uint64_t)json_integer_value(json_object_get(json_object_get(splits, "train"), "count")),
        .test_examples = (uint64_t)json_integer_value(json_object_get(json_object_get(splits, "test"), "count"))};
    tw_memory need;
    TW_TRY(tw_memory_estimate(c, &d, &need, err));
    tw_memory_limit limit;
    if (S->opt.memory_limit)
        tw_memory_limit_given(S->opt.memory_limit, &limit);
    else
        TW_TRY(tw_memory_host_limit(&limit, err));
    int gpus = tw_scheduler_gpu_count(S->sched), copies = gpus > 0 ? gpus / c->towers : 1;
    copies = copies < together ? copies : together;
    for (int p = TW_MEM_DEVICE_PARTS; p < TW_MEM_PARTS && copies > 1; p++)
        need.part[p] *= (uint64_t)copies;
    need.host *= (uint64_t)(copies > 1 ? copies : 1);
    tw_status s = tw_memory_check(&need, gpus > 0, &limit, gpus > 0 && S->opt.memory_limit ? &limit : NULL, err);
    if (s != TW_OK && copies > 1) {
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%s", err->message);
        tw_error_set(err, s, NULL, -1, "%d runs at once (one per %d GPUs): %.900s", copies, c->towers, msg);
    }
    return s;
}

/* The init_from checkpoint holds every variable of c's model with its shape (read at submit, so a
 * mismatch is a 400 now, not a failed run later). */
static tw_status check_init_from(const tw_config *c, tw_error *err)
{
    tw_model *m;
    TW_TRY(tw_model_create(c, &m, err));
    tw_status s = tw_train_init_from(c, m, NULL, err);
    tw_model_destroy(m);
    return s;
}

/* Validates cfg with the engine's parser and the memory estimate (for `together` such runs at once);
 * fills *c. */
static tw_status validate(tw_server *S, const json_t *cfg, const json_t *dataset_row, int together, tw_config *c,
                          tw_api_code *code, tw_error *err)
{
    tw_status s = tw_config_decode(cfg, NULL, c, err);
    *code = TW_API_INVALID_ARGUMENT;
    if (s == TW_OK && c->init_weights != TW_INIT_FROM_NONE)
        s = check_init_from(c, err);
    if (s == TW_OK && tw_scheduler_gpu_count(S->sched) > 0 && c->towers > tw_scheduler_gpu_count(S->sched))
        s = tw_error_set(err, TW_ERR_INVALID, NULL, -1, "towers: %d asked, this server has %d GPUs", c->towers,
                         tw_scheduler_gpu_count(S->sched));
    if (s == TW_OK)
        s = check_memory(S, c, dataset_row, together, err);
    return s;
}

/* Decodes cfg, whose dataset still converts, with a stand-in for the dataset's files and shape (known once
 * it is converted): its keys and values are checked now; the model, init_from and the memory estimate when
 * the run may start (tw_runs_complete). Fills *c. */
static tw_status decode_waiting(const json_t *cfg, tw_config *c, tw_api_code *code, tw_error *err)
{
    json_t *copy = json_deep_copy(cfg), *ds = json_object_get(cfg, "dataset"), *v;
    json_t *stand_in = json_pack("{s:s, s:[i]}", "train", "converting", "shape", 1);
    const char *key;
    json_object_foreach(ds, key, v) /* the overrides of an object "dataset" */
        if (strcmp(key, "name"))
            json_object_set(stand_in, key, v);
    json_object_set_new(copy, "dataset", stand_in);
    *code = TW_API_INVALID_ARGUMENT;
    tw_status s = tw_config_decode(copy, NULL, c, err);
    json_decref(copy);
    return s;
}

/* A run of several processes on a GPU server needs its towers on this host's GPUs (launch.h's count). */
static tw_status launch_devices(tw_server *S, const tw_launch_keys *k, int towers, tw_error *err)
{
    int gpus = tw_scheduler_gpu_count(S->sched), local = tw_launch_local_towers(towers, k->processes, k->hosts);
    if (gpus > 0 && k->processes > 1 && local > gpus)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "processes: %d processes x %d towers need %d GPUs here, "
                            "this server has %d", k->processes, towers, local, gpus);
    return TW_OK;
}

/* Creates the new run's folder DATA/runs/<folder> (tw_run_folder_name of id and name, may be NULL; the
 * whole id when the short one is taken) into folder[TW_RUN_FOLDER_BYTES] and dir[PATH_MAX]. */
static tw_status make_run_dir(tw_server *S, const char *id, const char *name, char *folder, char *dir,
                              tw_error *err)
{
    for (int whole_id = 0; whole_id < 2; whole_id++) {
        if (tw_run_folder_name(id, name, whole_id, folder, TW_RUN_FOLDER_BYTES) != 0 ||
            tw_run_dir(S, folder, dir, PATH_MAX) != 0)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the data folder's path is too long");
        if (tw_fs_mkdir(dir, 0755) == 0)
            return TW_OK;
        if (errno != EEXIST || !name)
            break;
    }
    return tw_fs_error(err, dir, "cannot create the run folder");
}

/* The config.json of the run in folder (its path into path[PATH_MAX]), read (new JSON); NULL when it cannot
 * be read (err says so). */
static json_t *read_run_config(tw_server *S, const char *folder, char *path, tw_error *err)
{
    tw_run_path(S, folder, TW_RUN_CONFIG, path, PATH_MAX);
    json_error_t je;
    int fd = tw_fs_open(path, O_RDONLY, 0);
    json_t *cfg = fd >= 0 ? json_loadfd(fd, 0, &je) : NULL;
    if (fd >= 0)
        close(fd);
    if (fd < 0)
        tw_fs_error(err, path, "cannot read the run's config"); /* names a symbolic link met on the way */
    else if (!cfg)
        tw_error_set(err, TW_ERR_IO, path, -1, "cannot read the run's config");
    return cfg;
}

/* Writes cfg to the config.json at path (temp name, fsync, rename). */
static tw_status write_run_config(const char *path, const json_t *cfg, tw_error *err)
{
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS);
    tw_status s = text ? tw_atomic_write_file(path, text, strlen(text), err)
                       : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    free(text);
    return s;
}

/* Creates the run's folder (its name into folder[TW_RUN_FOLDER_BYTES]) and writes its config.json durably. */
static tw_status write_config(tw_server *S, const char *id, const char *name, char *folder, const json_t *cfg,
                              tw_error *err)
{
    char dir[PATH_MAX], path[PATH_MAX];
    TW_TRY(make_run_dir(S, id, name, folder, dir, err));
    if (tw_run_path(S, folder, TW_RUN_CONFIG, path, sizeof path) != 0) {
        tw_remove_tree(dir);
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the data folder's path is too long");
    }
    tw_status s = write_run_config(path, cfg, err);
    if (s == TW_OK)
        s = tw_fsync_dir_of(dir, err);
    if (s != TW_OK)
        tw_remove_tree(dir);
    return s;
}

enum { WEEK_S = 7 * 24 * 3600 };

/* A warning (new string) when `steps` more steps at `rate` steps/s (measured by `by`) take more than a week,
 * else NULL. */
static json_t *eta_warning(double steps, double rate, const char *by)
{
    if (rate <= 0 || steps / rate <= WEEK_S)
        return NULL;
    return json_sprintf("at %.0f steps/s (%s) this run's %.0f steps to go take about %.0f days: check \"steps\"",
                        rate, by, steps, steps / rate / 86400);
}

/* A submitted run's duration from the rate the newest run of the same model, batch size and towers
 * measured on this server: its warning appended to the run's "warnings" when over a week. */
static void warn_long_run(tw_server *S, const json_t *row, json_t *run)
{
    double rate;
    tw_error ignored;
    char *config = json_dumps(json_object_get(row, "config"), JSON_COMPACT);
    if (config && tw_store_run_rate_like(S->store, config, &rate, &ignored) == TW_OK) {
        json_t *w = eta_warning((double)json_integer_value(json_object_get(row, "steps")), rate,
                                "measured by the last run of this model");
        if (w)
            json_array_append_new(json_object_get(run, "warnings"), w);
    }
    free(config);
}

tw_status tw_runs_complete(tw_server *S, const json_t *row, const char **reason, tw_error *err)
{
    char path[PATH_MAX];
    json_t *cfg = read_run_config(S, tw_run_folder(row), path, err), *dataset_row = NULL;
    if (!cfg)
        return err->status;
    json_t *ds = json_object_get(cfg, "dataset");
    tw_status s = TW_OK;
    if (json_is_string(ds) || json_object_get(ds, "name")) { /* still a reference: submitted while converting */
        static __thread tw_config c; /* large: off the stack */
        tw_api_code code;
        *reason = "bad_dataset";
        s = resolve_dataset(S, cfg, &dataset_row, NULL, &code, err);
        if (s == TW_OK && (*reason = "bad_config", s = validate(S, cfg, dataset_row, 1, &c, &code, err)) == TW_OK)
            s = write_run_config(path, cfg, err);
    }
    json_decref(dataset_row);
    json_decref(cfg);
    return s;
}

/* An Idempotency-Key is 1 to MAX_IDEM_KEY bytes without control characters. */
static tw_status check_key(const char *key, tw_api_code *code, tw_error *err)
{
    size_t n = 0;
    for (; key[n]; n++)
        if ((unsigned char)key[n] < 0x20 || key[n] == 0x7f)
            return bad(code, TW_API_INVALID_ARGUMENT, err, "Idempotency-Key", "the header has a control character");
    if (n == 0 || n > MAX_IDEM_KEY)
        return bad(code, TW_API_INVALID_ARGUMENT, err, "Idempotency-Key", "the header must be 1 to 255 bytes");
    return TW_OK;
}

/* The run an earlier submission with key and the canonical body made, presented into *run: TW_OK, TW_END
 * (no run holds the key), or an error with *code: 422 when the key came with another body, 500 when the
 * store could not be read. */
static tw_status keyed_run(tw_server *S, const char *key, const char *body, json_t **run, tw_api_code *code,
                           tw_error *err)
{
    json_t *row;
    tw_status s = tw_store_run_by_key(S->store, key, body, &row, err);
    if (s == TW_OK)
        *run = tw_run_present(S, row);
    else if (s == TW_ERR_INVALID)
        *code = TW_API_IDEMPOTENCY_MISMATCH;
    else if (s != TW_END)
        *code = tw_api_code_for(err);
    json_decref(row);
    return s;
}

tw_status tw_runs_check(tw_server *S, const json_t *body, int together, tw_api_code *code, tw_error *err)
{
    json_t *cfg = json_deep_copy(body);
    server_keys k = {0};
    static __thread tw_config c; /* large: off the stack */
    tw_status s = cfg ? take_server_keys(S, cfg, &k, code, err) : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s == TW_OK)
        s = k.converting ? decode_waiting(cfg, &c, code, err) : validate(S, cfg, k.dataset_row, together, &c, code, err);
    if (s == TW_OK)
        s = launch_devices(S, &k.launch, c.towers, err);
    json_decref(cfg);
    json_decref(k.dataset_row);
    json_decref(k.launch.hosts);
    return s;
}

/* Validates body, writes the run's folder and inserts its row (with idem_key and its canonical body
 * idem_body, both may be NULL). The insert decides the races: a dataset deleted meanwhile answers 409,
 * a concurrent submission that took the key first is the answer (its run); either way the folder goes. */
static tw_status submit_new(tw_server *S, const json_t *body, const char *idem_key, const char *idem_body,
                            json_t **run, int *created, tw_api_code *code, tw_error *err)
{
    json_t *submitted = json_deep_copy(body), *cfg = json_deep_copy(body);
    server_keys k = {0};
    static __thread tw_config c; /* large: off the stack */
    char id[TW_ID_BYTES], folder[TW_RUN_FOLDER_BYTES];
    tw_store_new_id('r', id);
    tw_status s = take_server_keys(S, cfg, &k, code, err);
    k.name = json_string_value(json_object_get(submitted, "name")); /* cfg lost its copy */
    if (s == TW_OK)
        s = k.converting ? decode_waiting(cfg, &c, code, err) : validate(S, cfg, k.dataset_row, 1, &c, code, err);
    if (s == TW_OK)
        s = launch_devices(S, &k.launch, c.towers, err);
    if (s == TW_OK)
        s = write_config(S, id, k.name, folder, cfg, err);
    char *sub_text = json_dumps(submitted, JSON_COMPACT | JSON_REAL_PRECISION(15)); /* 0.1, not 0.1000…01 */
    char *hosts = json_dumps(k.launch.hosts, JSON_COMPACT);
    if (s == TW_OK) {
        tw_run_new n = {.id = id, .name = k.name, .folder = folder, .dataset_id = json_string_value(json_object_get(k.dataset_row, "id")),
                        .config = sub_text, .idem_key = idem_key, .idem_body = idem_body, .towers = c.towers,
                        .steps = c.steps, .max_restarts = k.max_restarts, .deadline_s = k.deadline_s,
                        .priority = k.priority, .processes = k.launch.processes, .hosts = hosts};
        s = tw_store_run_insert(S->store, &n, err);
        if (s != TW_OK) {
            char dir[PATH_MAX];
            tw_run_dir(S, folder, dir, sizeof dir);
            tw_remove_tree(dir);
        }
        if (s == TW_ERR_INVALID)
            *code = TW_API_CONFLICT;
    }
    if (s != TW_OK && s != TW_END && err->status == TW_ERR_IO)
        *code = tw_api_code_for(err);
    free(sub_text);
    free(hosts);
    json_decref(submitted);
    json_decref(cfg);
    json_decref(k.dataset_row);
    json_decref(k.launch.hosts);
    if (s == TW_END && (s = keyed_run(S, idem_key, idem_body, run, code, err)) == TW_END) {
        *code = TW_API_CONFLICT; /* the winner was deleted already: only a retry can tell */
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "Idempotency-Key: a concurrent request used it; retry");
    }
    if (s != TW_OK || *run)
        return s;
    json_t *row;
    if ((s = tw_store_run_get(S->store, id, &row, err)) != TW_OK) {
        *code = tw_api_code_for(err);
        return s == TW_END ? tw_error_set(err, TW_ERR_IO, NULL, -1, "run %s vanished after its insert", id) : s;
    }
    *run = tw_run_present(S, row);
    warn_long_run(S, row, *run);
    json_decref(row);
    *created = 1;
    tw_scheduler_wake(S->sched);
    tw_server_changed(S);
    return TW_OK;
}

tw_status tw_runs_submit(tw_server *S, const json_t *body, const char *idem_key, json_t **run, int *created,
                         tw_api_code *code, tw_error *err)
{
    *run = NULL;
    *created = 0;
    if (!idem_key)
        return submit_new(S, body, NULL, NULL, run, created, code, err);
    TW_TRY(check_key(idem_key, code, err));
    char *canonical = json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT); /* the body, whatever its key order */
    tw_status s = canonical ? keyed_run(S, idem_key, canonical, run, code, err)
                            : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s == TW_END)
        s = submit_new(S, body, idem_key, canonical, run, created, code, err);
    else if (!canonical)
        *code = tw_api_code_for(err);
    free(canonical);
    return s;
}

tw_status tw_runs_submit_demo(tw_server *S, tw_error *err)
{
    const tw_asset *a = tw_asset_find("seed_mlp.json");
    json_t *cfg = a ? json_loadb((const char *)a->data, a->size, 0, NULL) : NULL;
    if (!cfg)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "the embedded seed config is missing");
    json_object_set_new(cfg, "dataset", json_string("fashion-mnist"));
    json_object_set_new(cfg, "name", json_string("seed-mlp"));
    json_t *run;
    int created;
    tw_api_code code;
    tw_status s = tw_runs_submit(S, cfg, NULL, &run, &created, &code, err);
    json_decref(cfg);
    json_decref(run);
    return s;
}

/* ================================ presentation ================================ */

/* What a run shows of its dataset row ds (NULL: gone) besides its name: "class_names" (null when it has
 * none) and "warnings", which says up front when the dataset has no test split (the run is never
 * evaluated). */
static void dataset_facts(json_t *r, const json_t *ds)
{
    const json_t *meta = json_object_get(ds, "meta");
    const json_t *names = tw_convert_meta_class_names(meta);
    json_object_set_new(r, "class_names", names ? json_deep_copy(names) : json_null());
    json_t *warnings = json_array();
    json_t *test = tw_convert_meta_split(meta, "test", "count");
    if (json_is_object(meta) && !(json_integer_value(test) > 0))
        json_array_append_new(warnings, json_sprintf("dataset '%s' has no test split: this run is never evaluated "
                                                     "(no eval_loss or eval_accuracy, eval_every does nothing). "
                                                     "Upload it with a test file or validation_split",
                                                     json_string_value(json_object_get(ds, "name"))));
    json_object_set_new(r, "warnings", warnings);
}

/* The run's dataset row (new), NULL when not found or unreadable: its name is only shown, as null then. */
static json_t *run_dataset(tw_server *S, const json_t *row)
{
    json_t *ds;
    tw_error ignored;
    tw_store_dataset_get(S->store, json_string_value(json_object_get(row, "dataset_id")), &ds, &ignored);
    return ds;
}

/* The seconds the run's attempts have trained, all of them: each from its start to its end, the open one
 * to now. */
static double total_time(const json_t *row)
{
    double sum = 0, now = tw_now_wall();
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(row, "attempts"), i, a) {
        const json_t *ended = json_object_get(a, "ended");
        sum += (json_is_number(ended) ? json_number_value(ended) : now) - json_number_value(json_object_get(a, "started"));
    }
    return sum;
}

/* What a queued run waits for besides a device (new JSON): its dataset's conversion, else null. */
static json_t *waiting_for(const json_t *row, const json_t *ds)
{
    if (tw_store_run_state(row) != TW_RUN_QUEUED || !ds || tw_store_dataset_state(ds) != TW_DATASET_CONVERTING)
        return json_null();
    return json_sprintf("dataset %s is converting", json_string_value(json_object_get(ds, "name")));
}

/* When the queued run `row` should start (new JSON, whole epoch seconds, rounded up): as the running run whose end frees
 * its device ends by its eta_s (the p-th shortest for queue_position p: each ends and frees one), not before
 * its back-off; null when not queued, waiting for its dataset (waiting), with more runs queued ahead than
 * running, or while a running run's ETA is not known. */
static json_t *expected_start(tw_server *S, const json_t *row, const json_t *waiting)
{
    json_t *pos = json_object_get(row, "queue_position"), *etas;
    tw_error ignored;
    if (!json_is_integer(pos) || !json_is_null(waiting) || tw_store_running_etas(S->store, &etas, &ignored) != TW_OK)
        return json_null();
    json_t *eta = json_array_get(etas, (size_t)json_integer_value(pos) - 1);
    json_t *at = json_null();
    if (json_is_number(eta) && json_is_number(json_array_get(etas, 0))) { /* unknown ETAs sort first */
        double t = tw_now_wall() + json_number_value(eta), after = json_number_value(json_object_get(row, "not_before"));
        at = json_integer((json_int_t)ceil(t > after ? t : after)); /* up: never before now */
    }
    json_decref(etas);
    return at;
}

json_t *tw_run_present_with(tw_server *S, const json_t *row, const json_t *ds)
{
    json_t *r = json_deep_copy(row);
    const char *id = json_string_value(json_object_get(row, "id"));
    json_t *name = json_object_get(ds, "name");
    json_object_set_new(r, "dataset", json_pack("{s:O, s:O}", "id", json_object_get(row, "dataset_id"), "name",
                                                name ? name : json_null()));
    dataset_facts(r, ds);
    json_object_del(r, "dataset_id");
    char dir[PATH_MAX], runs[PATH_MAX], tb[PATH_MAX + 32];
    tw_run_dir(S, tw_run_folder(row), dir, sizeof dir);
    tw_data_path(S, TW_DATA_RUNS, runs, sizeof runs);
    snprintf(tb, sizeof tb, "tensorboard --logdir %s", runs);
    json_object_set_new(r, "logdir", json_string(dir));
    json_object_set_new(r, "tensorboard", json_string(tb));
    json_object_set_new(r, "tensorboard_url", S->opt.tensorboard_url ? json_string(S->opt.tensorboard_url) : json_null());
    if (!json_is_array(json_object_get(r, "devices")))
        json_object_set_new(r, "devices", json_array());
    if (!json_is_object(json_object_get(r, "metrics")))
        json_object_set_new(r, "metrics", json_object());
    if (!json_is_array(json_object_get(r, "attempts")))
        json_object_set_new(r, "attempts", json_array());
    json_object_set_new(r, "total_time_s", json_real(total_time(row)));
    int running = tw_store_run_state(row) == TW_RUN_RUNNING;
    json_t *w = running ? eta_warning((double)(json_integer_value(json_object_get(row, "steps")) -
                                               json_integer_value(json_object_get(row, "step"))),
                                      json_number_value(json_object_get(json_object_get(row, "metrics"), "steps_per_sec")),
                                      "its own rate")
                        : NULL;
    if (w)
        json_array_append_new(json_object_get(r, "warnings"), w);
    json_object_set_new(r, "resources", running ? tw_scheduler_usage(S->sched, id) : json_null());
    json_object_set_new(r, "waiting_for", waiting_for(row, ds));
    json_object_set_new(r, "expected_start", expected_start(S, row, json_object_get(r, "waiting_for")));
    if (running && tw_scheduler_cancelling(S->sched, id))
        json_object_set_new(r, "status", json_string("cancelling")); /* shown, never stored (runs.h) */
    return r;
}

json_t *tw_run_present(tw_server *S, const json_t *row)
{
    if (!row)
        return NULL;
    json_t *ds = run_dataset(S, row);
    json_t *r = tw_run_present_with(S, row, ds);
    json_decref(ds);
    return r;
}

/* The run named by the path, as a row; replies 404 when there is none, 500 when it cannot be read. */
static json_t *run_or_404(tw_server *S, tw_req *r)
{
    return tw_api_row_or_404(S, r, "run", tw_store_run_get);
}

/* ================================ handlers ================================ */

void tw_api_runs_create(tw_server *S, tw_req *r)
{
    json_t *run;
    int created;
    tw_api_code code = TW_API_INVALID_ARGUMENT;
    tw_error err;
    tw_error_clear(&err);
    if (tw_runs_submit(S, tw_req_json(r), tw_req_header(r, "Idempotency-Key"), &run, &created, &code, &err) != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        tw_reply_error(r, code, "%s", msg);
        return;
    }
    if (!created) {
        tw_reply_json(r, 200, run);
        return;
    }
    tw_reply_json(r, 201, json_pack("{s:O, s:O, s:O, s:O}", "id", json_object_get(run, "id"), "status",
                                    json_object_get(run, "status"), "logdir", json_object_get(run, "logdir"),
                                    "warnings", json_object_get(run, "warnings")));
    json_decref(run);
}

/* GET /runs/{id} is what dashboards poll: its reply is kept per run until the next change of any run or
 * dataset (tw_server_changed), so polling costs a copy instead of two queries and a JSON round trip. The
 * version is read before the store is, so a reply is never kept under a version newer than its data. */
enum { RUN_CACHE = 64 };

static struct {
    pthread_mutex_t mu;
    struct {
        char id[TW_ID_BYTES];
        uint64_t version;
        char *text; /* owned */
        size_t len;
    } slot[RUN_CACHE];
} run_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static unsigned cache_slot(const char *id)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h % RUN_CACHE;
}

/* A copy of the cached reply for id at version, or NULL. */
static char *cache_get(const char *id, uint64_t version, size_t *len)
{
    unsigned k = cache_slot(id);
    char *copy = NULL;
    pthread_mutex_lock(&run_cache.mu);
    if (run_cache.slot[k].text && run_cache.slot[k].version == version && !strcmp(run_cache.slot[k].id, id) &&
        (copy = malloc(run_cache.slot[k].len)))
        memcpy(copy, run_cache.slot[k].text, *len = run_cache.slot[k].len);
    pthread_mutex_unlock(&run_cache.mu);
    return copy;
}

static void cache_put(const char *id, uint64_t version, const char *text, size_t len)
{
    unsigned k = cache_slot(id);
    char *copy = malloc(len);
    if (!copy)
        return;
    memcpy(copy, text, len);
    pthread_mutex_lock(&run_cache.mu);
    free(run_cache.slot[k].text);
    snprintf(run_cache.slot[k].id, TW_ID_BYTES, "%s", id);
    run_cache.slot[k].version = version;
    run_cache.slot[k].text = copy;
    run_cache.slot[k].len = len;
    pthread_mutex_unlock(&run_cache.mu);
}

void tw_api_run_get(tw_server *S, tw_req *r)
{
    const char *id = tw_req_param(r, "id");
    uint64_t version = tw_server_version(S);
    size_t len = 0;
    char *text = cache_get(id, version, &len);
    if (!text) {
        json_t *row = run_or_404(S, r);
        json_t *run = tw_run_present(S, row);
        json_decref(row);
        text = run ? json_dumps(run, JSON_COMPACT) : NULL;
        json_decref(run);
        if (!text)
            return; /* replied 404, or out of memory: the dispatcher answers */
        len = strlen(text);
        cache_put(id, version, text, len);
    }
    tw_reply_text(r, 200, "application/json", text, len);
}

void tw_api_run_cancel(tw_server *S, tw_req *r)
{
    tw_error err;
    json_t *row = NULL;
    const char *id = tw_req_param(r, "id");
    tw_status s = tw_scheduler_cancel(S->sched, id, &err);
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "no run '%s'", id);
    else if (s == TW_ERR_INVALID)
        tw_reply_error(r, TW_API_CONFLICT, "%s", err.message);
    else if (s != TW_OK)
        tw_reply_status(r, &err);
    else if ((s = tw_store_run_get(S->store, id, &row, &err)) != TW_OK)
        s == TW_END ? tw_reply_error(r, TW_API_NOT_FOUND, "no run '%s'", id) : tw_reply_status(r, &err);
    else
        tw_reply_json(r, 202, tw_run_present(S, row));
    json_decref(row);
}

void tw_api_run_delete(tw_server *S, tw_req *r)
{
    tw_error err;
    char dir[PATH_MAX] = "";
    json_t *row = run_or_404(S, r); /* its folder, read before the row goes */
    if (!row)
        return;
    tw_run_dir(S, tw_run_folder(row), dir, sizeof dir);
    char id[TW_ID_BYTES]; /* the cached series' key (a name in the path resolves to it) */
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(row, "id")));
    json_decref(row);
    tw_status s = tw_store_run_delete(S->store, tw_req_param(r, "id"), &err);
    if (s == TW_OK) {
        tw_predict_cache_forget_run(S->predict, tw_req_param(r, "id")); /* its models, at once */
        tw_scalars_cache_forget_run(S->scalars, id);
    }
    tw_api_reply_deleted(S, r, s, &err, "run", dir);
}

/* Adds the series got (one folder's) to into, each named by rename(tag, buf[128]). */
static void add_series(json_t *into, json_t *got, const char *(*rename)(const char *tag, char *buf))
{
    const char *tag;
    json_t *points;
    char buf[128];
    json_object_foreach(got, tag, points) json_object_set(into, rename(tag, buf), points);
}

/* The API's name of a tag of the run's own file: as written, less the training prefix (train/loss is
 * "loss", as before the tags moved: old and new runs read alike). */
static const char *main_series(const char *tag, char *buf)
{
    (void)buf;
    size_t n = strlen(TW_TRAIN_TAGS);
    return strncmp(tag, TW_TRAIN_TAGS, n) ? tag : tag + n;
}

/* The API's name of a tag of the eval_ema sub-run: the tag with "_ema" (eval/accuracy_ema). */
static const char *ema_series(const char *tag, char *buf)
{
    snprintf(buf, 128, "%.100s_ema", tag);
    return buf;
}

/* Every scalar series of run id in folder dir: its file's and its eval_ema sub-run's, into *out (new), read
 * on from the last request's (scalars_cache.h). */
static tw_status run_scalars(tw_server *S, const char *id, const char *dir, json_t **out, tw_error *err)
{
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/" TW_EVAL_EMA_RUN, dir);
    const char *const dirs[TW_SCALARS_PARTS] = {dir, sub};
    json_t *got[TW_SCALARS_PARTS];
    *out = NULL;
    TW_TRY(tw_scalars_cache_read(S->scalars, id, dirs, got, err));
    *out = json_object();
    add_series(*out, got[0], main_series);
    add_series(*out, got[1], ema_series);
    json_decref(got[0]);
    json_decref(got[1]);
    return TW_OK;
}

void tw_api_run_metrics(tw_server *S, tw_req *r)
{
    json_t *row = run_or_404(S, r);
    if (!row)
        return;
    char dir[PATH_MAX], id[TW_ID_BYTES];
    tw_run_dir(S, tw_run_folder(row), dir, sizeof dir);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(row, "id")));
    json_decref(row);
    json_t *scalars;
    tw_error err;
    if (run_scalars(S, id, dir, &scalars, &err) != TW_OK) {
        tw_api_reply_logged(r, &err);
        return;
    }
    tw_reply_json(r, 200, json_pack("{s:o}", "scalars", scalars));
}

/* ---- Server-Sent Events ---- */

typedef struct {
    tw_server *S;
    char id[TW_ID_BYTES];
    uint64_t seen;
    char *last;      /* the last run JSON sent, less its CLOCK_FIELDS (owned) */
    char *pending;   /* bytes not yet handed to the connection (owned) */
    size_t off, len;
    int ending;      /* the run finished: end after pending */
    double sent_at;  /* monotonic time this stream last produced anything */
} sse;

/* The longest a stream stays silent: 15 s, or a third of --conn-timeout when that is shorter, so that a
 * queued run's stream outlives the connection timeout however long it waits. */
static double keepalive_every(const tw_server *S)
{
    double third = S->opt.conn_timeout / 3.0;
    return third < 15.0 ? third : 15.0;
}

/* The run object's fields that move with the clock alone: a change of them is not an event. */
static const char *const CLOCK_FIELDS[] = {"total_time_s", "expected_start"};

/* Produces the next event text into s->pending: the run when it changed, else a keep-alive comment once the
 * stream has been silent for keepalive_every (whatever other runs do meanwhile). Blocks until then. */
static void sse_produce(sse *s)
{
    for (;;) {
        json_t *row;
        tw_error err;
        tw_status got = tw_store_run_get(s->S->store, s->id, &row, &err);
        if (got != TW_OK) { /* unreadable: the stream ends without an event, never "deleted" */
            s->ending = 1;
            s->pending = got == TW_END ? strdup("event: deleted\ndata: {}\n\n") : NULL;
            if (got != TW_END)
                tw_log("tower serve: run %s: %s", s->id, err.message);
            break;
        }
        json_t *run = tw_run_present(s->S, row);
        json_decref(row);
        char *text = json_dumps(run, JSON_COMPACT);
        s->ending = tw_run_state_final(tw_store_run_state(run));
        for (size_t i = 0; i < sizeof CLOCK_FIELDS / sizeof *CLOCK_FIELDS; i++)
            json_object_del(run, CLOCK_FIELDS[i]);
        char *seen = json_dumps(run, JSON_COMPACT);
        json_decref(run);
        if (text && seen && (!s->last || strcmp(seen, s->last))) {
            free(s->last);
            s->last = seen;
            if (asprintf(&s->pending, "event: run\ndata: %s\n\n", text) < 0)
                s->pending = NULL;
            free(text);
            break;
        }
        free(text);
        free(seen);
        if (s->ending) {
            s->pending = NULL;
            break;
        }
        double left = s->sent_at + keepalive_every(s->S) - tw_now_mono();
        if (left <= 0) {
            s->pending = strdup(": keep-alive\n\n");
            break;
        }
        tw_server_wait_change(s->S, &s->seen, left); /* a change (of any run), or the keep-alive's time */
    }
    s->sent_at = tw_now_mono();
    s->off = 0;
    s->len = s->pending ? strlen(s->pending) : 0;
}

static ssize_t sse_next(void *ctx, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse *s = ctx;
    if (!s->pending || s->off == s->len) {
        int end = s->ending;
        free(s->pending);
        s->pending = NULL;
        if (end)
            return -1; /* MHD_CONTENT_READER_END_OF_STREAM */
        sse_produce(s);
        if (!s->pending)
            return -1;
    }
    size_t n = s->len - s->off < max ? s->len - s->off : max;
    memcpy(buf, s->pending + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void sse_done(void *ctx)
{
    sse *s = ctx;
    free(s->last);
    free(s->pending);
    free(s);
}

void tw_api_run_events(tw_server *S, tw_req *r)
{
    json_t *row = run_or_404(S, r);
    if (!row)
        return;
    json_decref(row);
    sse *s = calloc(1, sizeof *s);
    if (!s) {
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    s->S = S;
    s->sent_at = tw_now_mono();
    snprintf(s->id, sizeof s->id, "%s", tw_req_param(r, "id"));
    tw_reply_stream(r, "text/event-stream", sse_next, sse_done, s);
}

/* ---- log and checkpoints ---- */

void tw_api_run_log(tw_server *S, tw_req *r)
{
    long tail;
    char path[PATH_MAX];
    json_t *row = run_or_404(S, r);
    if (row)
        tw_run_path(S, tw_run_folder(row), TW_RUN_LOG, path, sizeof path);
    json_decref(row);
    if (!row || tw_req_query_int(r, "tail", 1, 100000, 200, &tail))
        return;
    int fd = tw_fs_open(path, O_RDONLY, 0);
    if (fd < 0 && errno != ENOENT) {
        tw_error err;
        tw_fs_error(&err, path, "cannot read the run's log");
        tw_api_reply_logged(r, &err);
        return;
    }
    char *buf = malloc(LOG_TAIL_BYTES + 1);
    off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    off_t from = size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0;
    ssize_t n = fd >= 0 && buf ? pread(fd, buf, (size_t)(size - from), from) : 0;
    if (fd >= 0)
        close(fd);
    if (!buf || n < 0) {
        free(buf);
        tw_reply_error(r, TW_API_INTERNAL, "cannot read the run's log");
        return;
    }
    char *start = buf + n;
    for (long lines = 0; start > buf; start--) /* back to the start of the tail-th last line */
        if (start[-1] == '\n' && start != buf + n && ++lines == tail)
            break;
    memmove(buf, start, (size_t)(buf + n - start));
    tw_reply_text(r, 200, "text/plain; charset=utf-8", buf, (size_t)(buf + n - start));
}

/* The run's checkpoint folder into dir[PATH_MAX + 16]; replies 404 and returns -1 for no such run. */
static int checkpoint_dir(tw_server *S, tw_req *r, char *dir)
{
    json_t *row = run_or_404(S, r);
    if (!row)
        return -1;
    char run[PATH_MAX];
    tw_run_dir(S, tw_run_folder(row), run, sizeof run);
    json_decref(row);
    tw_checkpoint_dir_of(run, dir, PATH_MAX + 16); /* the engine names its folder */
    return 0;
}

/* The run's checkpoint folder into dir[PATH_MAX + 16] and the engine's read-only listing of it into *l
 * (engine/checkpoint.h owns the layout; the caller frees *l). Returns 0, or -1 after replying (404 for no
 * such run, or the logged error). */
static int checkpoint_listing(tw_server *S, tw_req *r, char *dir, tw_ckpt_listing *l)
{
    tw_error err;
    if (checkpoint_dir(S, r, dir) != 0)
        return -1;
    if (tw_checkpoint_list(dir, l, &err) != TW_OK) {
        tw_api_reply_logged(r, &err);
        return -1;
    }
    return 0;
}

int tw_api_run_checkpoint_file(tw_server *S, tw_req *r, int64_t step, const char *shown, char *path, size_t size)
{
    char dir[PATH_MAX + 16];
    tw_ckpt_listing l;
    if (checkpoint_listing(S, r, dir, &l) != 0)
        return -1;
    const tw_ckpt_entry *e = tw_checkpoint_listing_find(&l, step);
    const int found = e != NULL;
    if (found)
        snprintf(path, size, "%s/%s", dir, e->file);
    tw_checkpoint_listing_free(&l);
    if (found)
        return 0;
    if (step < 0)
        tw_reply_error(r, TW_API_NOT_FOUND, "run '%s' has no checkpoint yet", tw_req_param(r, "id"));
    else
        tw_reply_error(r, TW_API_NOT_FOUND,
                       "run '%s' keeps no checkpoint of step %.40s (GET /api/v1/runs/{id}/checkpoints lists them)",
                       tw_req_param(r, "id"), shown);
    return -1;
}

void tw_api_run_checkpoints(tw_server *S, tw_req *r)
{
    char dir[PATH_MAX + 16];
    tw_ckpt_listing l;
    if (checkpoint_listing(S, r, dir, &l) != 0)
        return;
    json_t *list = json_array();
    for (size_t i = 0; i < l.n; i++)
        json_array_append_new(list, json_pack("{s:I, s:s, s:I}", "step", (json_int_t)l.entries[i].step, "file",
                                              l.entries[i].file, "bytes", (json_int_t)l.entries[i].bytes));
    json_t *latest = l.latest >= 0 ? json_integer(l.latest) : json_null();
    tw_checkpoint_listing_free(&l);
    tw_reply_json(r, 200, json_pack("{s:o, s:o}", "checkpoints", list, "latest", latest));
}

void tw_api_run_checkpoint_latest(tw_server *S, tw_req *r)
{
    char dir[PATH_MAX + 16], path[PATH_MAX + 300], latest[TW_CKPT_NAME_BYTES];
    if (checkpoint_dir(S, r, dir) != 0)
        return;
    struct stat st;
    int fd = -1;
    tw_error err;
    tw_status s = tw_checkpoint_latest_name(dir, latest, &err); /* the engine reads the pointer */
    if (s == TW_OK) {
        snprintf(path, sizeof path, "%s/%s", dir, latest);
        if ((fd = tw_fs_open(path, O_RDONLY, 0)) < 0 && errno != ENOENT)
            s = tw_fs_error(&err, path, "cannot open the checkpoint");
    }
    if (s < 0) {
        tw_api_reply_logged(r, &err);
        return;
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        tw_reply_error(r, TW_API_NOT_FOUND, "run '%s' has no checkpoint yet", tw_req_param(r, "id"));
        return;
    }
    tw_reply_file(r, fd, (uint64_t)st.st_size, "application/octet-stream", latest);
}

/* Replies to a change of run row (202, presented) or its failure: TW_END 404, TW_ERR_INVALID `code`
 * (400 for a bad body, 409 for a state that refuses), otherwise the error's own code. */
static void reply_changed(tw_server *S, tw_req *r, tw_status s, const json_t *row, tw_api_code code,
                          const tw_error *err)
{
    if (s == TW_OK) {
        tw_server_changed(S);
        tw_reply_json(r, 202, tw_run_present(S, row));
    } else if (s == TW_END) {
        tw_reply_error(r, TW_API_NOT_FOUND, "no run '%s'", tw_req_param(r, "id"));
    } else if (s == TW_ERR_INVALID) {
        tw_reply_error(r, code, "%s", err->message);
    } else {
        tw_reply_status(r, err);
    }
}

/* GET /runs/{id}/checkpoints/{step}: a kept checkpoint, found in the engine's listing. */
void tw_api_run_checkpoint_step(tw_server *S, tw_req *r)
{
    char dir[PATH_MAX + 16], path[PATH_MAX + 300], *end;
    const char *arg = tw_req_param(r, "step");
    errno = 0;
    long long step = strtoll(arg, &end, 10);
    if (*end || end == arg || errno || step < 0) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "step: '%s' is not a step number (or 'latest')", arg);
        return;
    }
    tw_ckpt_listing l;
    if (checkpoint_listing(S, r, dir, &l) != 0)
        return;
    int fd = -1;
    struct stat st;
    for (size_t i = 0; i < l.n; i++)
        if (l.entries[i].step == step) {
            snprintf(path, sizeof path, "%s/%s", dir, l.entries[i].file);
            fd = tw_fs_open(path, O_RDONLY, 0);
        }
    tw_checkpoint_listing_free(&l);
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        tw_reply_error(r, TW_API_NOT_FOUND, "run '%s' keeps no checkpoint of step %lld", tw_req_param(r, "id"), step);
        return;
    }
    tw_reply_file(r, fd, (uint64_t)st.st_size, "application/octet-stream", strrchr(path, '/') + 1);
}

/* POST /runs/{id}/priority {"priority": N}: moves a queued run in the queue. */
void tw_api_run_priority(tw_server *S, tw_req *r)
{
    json_t *body = tw_req_json(r), *row = NULL;
    const char *key;
    json_t *v;
    int priority = 0;
    tw_api_code code = TW_API_INVALID_ARGUMENT;
    tw_error err;
    json_object_foreach(body, key, v) if (strcmp(key, "priority")) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "%s: unknown key (the body is {\"priority\": N})", key);
        return;
    }
    tw_status s = priority_of(json_object_get(body, "priority"), &priority, &code, &err);
    const char *id = tw_req_param(r, "id");
    if (s == TW_OK) {
        code = TW_API_CONFLICT; /* from here a refusal is the run's state */
        s = tw_store_run_set_priority(S->store, id, priority, &err);
    }
    if (s == TW_OK)
        s = tw_store_run_get(S->store, id, &row, &err);
    reply_changed(S, r, s, row, code, &err);
    json_decref(row);
}

/* The run's config.json with steps changed, written durably (the trainer reads it at its next start). */
static tw_status rewrite_steps(tw_server *S, const char *folder, int64_t steps, tw_error *err)
{
    char path[PATH_MAX];
    json_t *cfg = read_run_config(S, folder, path, err);
    if (!cfg)
        return err->status;
    json_object_set_new(cfg, "steps", json_integer(steps));
    tw_status s = write_run_config(path, cfg, err);
    json_decref(cfg);
    return s;
}

tw_status tw_runs_resume(tw_server *S, const json_t *row, int64_t steps, tw_api_code *code, tw_error *err)
{
    const char *id = json_string_value(json_object_get(row, "id"));
    /* a run of several processes needs the launcher now as at its submission */
    tw_status s = tw_launch_usable(S->launcher, (int)json_integer_value(json_object_get(row, "processes")), err);
    tw_run_state state = tw_store_run_state(row);
    int stopped = tw_run_state_final(state) &&
                  steps >= json_integer_value(json_object_get(row, "steps")) + (state == TW_RUN_SUCCEEDED);
    if (s == TW_OK)
        *code = TW_API_CONFLICT; /* from here a refusal is the run's state */
    if (s == TW_OK && stopped)
        s = rewrite_steps(S, tw_run_folder(row), steps, err);
    if (s == TW_OK) /* the store decides (and says why not) */
        s = tw_store_run_resume(S->store, id, steps, err);
    if (s == TW_OK)
        tw_scheduler_wake(S->sched);
    return s;
}

/* POST /runs/{id}/resume {} or {"steps": N}: a stopped run continues from its latest checkpoint. */
void tw_api_run_resume(tw_server *S, tw_req *r)
{
    json_t *body = tw_req_json(r), *row = run_or_404(S, r), *v;
    const char *key, *id = tw_req_param(r, "id");
    tw_api_code code = TW_API_INVALID_ARGUMENT;
    tw_error err;
    tw_status s = TW_OK;
    if (!row)
        return;
    json_object_foreach(body, key, v) if (strcmp(key, "steps"))
        s = bad(&code, TW_API_INVALID_ARGUMENT, &err, key, "unknown key (the body is {} or {\"steps\": N})");
    json_int_t steps = json_integer_value(json_object_get(row, "steps"));
    if ((v = json_object_get(body, "steps")) && s == TW_OK) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000000)
            s = bad(&code, TW_API_INVALID_ARGUMENT, &err, "steps", "must be an integer from 1 to 1000000000");
        steps = json_integer_value(v);
    }
    if (s == TW_OK)
        s = tw_runs_resume(S, row, steps, &code, &err);
    json_decref(row);
    row = NULL;
    if (s == TW_OK)
        s = tw_store_run_get(S->store, id, &row, &err);
    reply_changed(S, r, s, row, code, &err);
    json_decref(row);
}
