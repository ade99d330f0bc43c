/* api_sweeps.c — the /api/v1/sweeps routes (sweeps.h; server/API.md, "Sweeps"): submit a sweep (every trial's
 * config checked first), list, show (its trials, rungs, the best trial so far and the steps spent against
 * every trial trained to the end), cancel, resume and delete. The runs belong to the driver (sweeps.c). */
#include "sweeps.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "reply.h"
#include "runs.h"
#include "scheduler.h"
#include "searcher.h"
#include "store.h"
#include "sweep_board.h"

/* ================================ submission ================================ */

/* The trials a submission checks: every one (up to the cap), and each key at its smallest and its largest
 * value with the others at trial 0's (ranges' ends, a choice's first and last). */
static tw_status check_values(tw_server *S, const json_t *base, const json_t *values, int trial, int together,
                              tw_api_code *code, tw_error *err)
{
    json_t *cfg;
    TW_TRY(tw_sweep_apply(base, values, &cfg, err));
    tw_status s = tw_runs_check(S, cfg, together, code, err);
    json_decref(cfg);
    if (s != TW_OK) {
        char *text = json_dumps(values, JSON_COMPACT);
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%s", err->message);
        if (trial >= 0)
            tw_error_set(err, s, NULL, -1, "trial %d %s: %.380s", trial, text ? text : "?", msg);
        else
            tw_error_set(err, s, NULL, -1, "the values %s: %.380s", text ? text : "?", msg);
        free(text);
    }
    return s;
}

/* values with key k at the end `hi` (0: the smallest) of its range or choice. */
static json_t *at_end(const tw_sweep_param *p, int hi)
{
    if (p->kind == TW_PARAM_CHOICE)
        return json_incref(json_array_get(p->values, hi ? json_array_size(p->values) - 1 : 0));
    double v = hi ? p->max : p->min;
    return p->kind == TW_PARAM_INT ? json_integer((json_int_t)v) : json_real(v);
}

static tw_status check_trials(tw_server *S, const json_t *base, const tw_sweep_spec *s, tw_api_code *code,
                              tw_error *err)
{
    enum { CHECKED = 64 }; /* trials checked one by one; the ends of every key besides */
    for (int i = 0; i < tw_sweep_trials(s) && i < CHECKED; i++) {
        json_t *v = tw_sweep_trial_values(s, i);
        tw_status st = v ? check_values(S, base, v, i, s->max_concurrent, code, err) : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        json_decref(v);
        TW_TRY(st);
    }
    for (int k = 0; k < s->n_params; k++)
        for (int hi = 0; hi < 2; hi++) {
            json_t *v = tw_sweep_trial_values(s, 0);
            json_object_set_new(v, s->params[k].key, at_end(&s->params[k], hi));
            tw_status st = check_values(S, base, v, -1, s->max_concurrent, code, err);
            json_decref(v);
            TW_TRY(st);
        }
    return TW_OK;
}

/* The body: {"name", "config": base run config, "space", "searcher", "metric", "maximize"}. */
static tw_status submit(tw_server *S, const json_t *body, char *id, tw_api_code *code, tw_error *err)
{
    static const char *const KNOWN[] = {"name", "config", "space", "searcher", "metric", "maximize"};
    const char *key, *name = json_string_value(json_object_get(body, "name"));
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        int ok = 0;
        for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
            ok |= !strcmp(key, KNOWN[i]);
        if (!ok)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%.60s: unknown key (a sweep takes name, config, space, "
                                "searcher, metric, maximize)", key);
    }
    char why[200];
    if (!name)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name: a sweep needs a name (its trials are <name>-t<N>)");
    if (!tw_name_valid(name, why, sizeof why))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name: %s", why);
    if (strlen(name) > TW_NAME_MAX - 6)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name: at most %d characters (its trials are <name>-t<N>)",
                            TW_NAME_MAX - 6);
    const json_t *base = json_object_get(body, "config");
    if (!json_is_object(base))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "config: the base run config, an object as POST /runs takes");
    tw_sweep_spec s;
    tw_status st = tw_sweep_spec_decode(body, base, &s, err);
    if (st == TW_OK)
        st = check_trials(S, base, &s, code, err);
    tw_sweep_spec_clear(&s);
    TW_TRY(st);
    json_t *spec = json_pack("{s:O, s:O, s:O, s:O*}", "space", json_object_get(body, "space"), "searcher",
                             json_object_get(body, "searcher"), "metric", json_object_get(body, "metric"), "maximize",
                             json_object_get(body, "maximize"));
    char *spec_text = spec ? json_dumps(spec, JSON_COMPACT) : NULL, *cfg_text = json_dumps(base, JSON_COMPACT);
    tw_store_new_id('s', id);
    st = spec_text && cfg_text ? tw_store_sweep_insert(S->store, id, name, spec_text, cfg_text, tw_now_wall(), err)
                               : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (st != TW_OK && st != TW_ERR_NOMEM) {
        *code = TW_API_CONFLICT;
        tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name: a sweep named '%s' exists", name);
    }
    json_decref(spec);
    free(spec_text);
    free(cfg_text);
    return st;
}

/* ================================ presenting ================================ */

static json_t *sweep_or_404(tw_server *S, tw_req *r)
{
    return tw_api_row_or_404(S, r, "sweep", tw_store_sweep_resolve);
}

/* One trial: {trial, values, rung, results, run: {id, name, status, step, steps}}. */
static json_t *present_trial(const tw_sweep_spec *s, const json_t *t)
{
    int i = (int)json_integer_value(json_object_get(t, "trial"));
    json_t *run = json_pack("{s:O, s:O, s:O, s:O, s:O}", "id", json_object_get(t, "run_id"), "name",
                            json_object_get(t, "name"), "status", json_object_get(t, "status"), "step",
                            json_object_get(t, "step"), "steps", json_object_get(t, "steps"));
    return json_pack("{s:i, s:o, s:O, s:O, s:o}", "trial", i, "values", tw_sweep_trial_values(s, i), "rung",
                     json_object_get(t, "rung"), "results", json_object_get(t, "results"), "run", run);
}

/* The sweep as the API shows it: its row, its trials, the best so far, the rungs' steps and the steps spent. */
static json_t *present(tw_server *S, const json_t *sweep, tw_error *err)
{
    tw_sweep_spec s;
    json_t *trials = NULL, *out = NULL;
    if (tw_sweep_spec_of(sweep, &s, err) != TW_OK ||
        tw_store_trials(S->store, json_string_value(json_object_get(sweep, "id")), &trials, err) != TW_OK) {
        tw_sweep_spec_clear(&s);
        return NULL;
    }
    static __thread tw_sweep_trial tr[TW_SWEEP_MAX_TRIALS];
    json_t *list = json_array(), *rungs = json_array();
    json_int_t trained = 0;
    size_t n = json_array_size(trials);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(trials, i);
        json_array_append_new(list, present_trial(&s, t));
        trained += json_integer_value(json_object_get(t, "step"));
        tr[i] = (tw_sweep_trial){.rung = (int)json_array_size(json_object_get(t, "results")) - 1, .done = 1};
        tr[i].failed = tr[i].rung < 0;
        for (int k = 0; k <= tr[i].rung; k++) {
            const json_t *m = json_array_get(json_object_get(t, "results"), (size_t)k);
            tr[i].metric[k] = json_number_value(m);
            tr[i].failed |= !json_is_number(m);
        }
    }
    for (int k = 0; k < tw_sweep_rung_count(&s); k++)
        json_array_append_new(rungs, json_integer(tw_sweep_rung_steps(&s, k)));
    int best = tw_sweep_best(&s, tr, (int)n);
    out = json_deep_copy(sweep);
    json_object_set_new(out, "trials", list);
    json_object_set_new(out, "rung_steps", rungs);
    json_object_set_new(out, "best", best < 0 ? json_null() : present_trial(&s, json_array_get(trials, (size_t)best)));
    json_object_set_new(out, "steps_trained", json_integer(trained));
    json_object_set_new(out, "steps_full", json_integer((json_int_t)tw_sweep_trials(&s) * s.max_steps));
    char dir[PATH_MAX], tb[PATH_MAX + 32];
    if (tw_sweep_board_dir(S, sweep, dir) == 0) {
        snprintf(tb, sizeof tb, "tensorboard --logdir %s", dir);
        json_object_set_new(out, "logdir", json_string(dir));
        json_object_set_new(out, "tensorboard", json_string(tb));
    }
    json_decref(trials);
    tw_sweep_spec_clear(&s);
    return out;
}

static void reply_sweep(tw_server *S, tw_req *r, int status, const json_t *sweep)
{
    tw_error err;
    json_t *out = present(S, sweep, &err);
    if (out)
        tw_reply_json(r, status, out);
    else
        tw_reply_status(r, &err);
}

/* ================================ handlers ================================ */

void tw_api_sweeps_create(tw_server *S, tw_req *r)
{
    tw_api_code code = TW_API_INVALID_ARGUMENT;
    tw_error err;
    char id[TW_ID_BYTES];
    tw_error_clear(&err);
    if (submit(S, tw_req_json(r), id, &code, &err) != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        tw_reply_error(r, code, "%s", msg);
        return;
    }
    json_t *sweep;
    if (tw_store_sweep_resolve(S->store, id, &sweep, &err) != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    tw_scheduler_wake(S->sched); /* its first trials start at the next round */
    reply_sweep(S, r, 201, sweep);
    json_decref(sweep);
}

void tw_api_sweeps_list(tw_server *S, tw_req *r)
{
    json_t *rows;
    tw_error err;
    if (tw_store_sweep_list(S->store, NULL, &rows, &err) != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    tw_reply_json(r, 200, json_pack("{s:o}", "sweeps", rows));
}

void tw_api_sweep_get(tw_server *S, tw_req *r)
{
    json_t *sweep = sweep_or_404(S, r);
    if (!sweep)
        return;
    reply_sweep(S, r, 200, sweep);
    json_decref(sweep);
}

/* The sweep's trial runs stopped (cancel: the queued and running ones) or continued (the cancelled ones, from
 * their checkpoints). The first failure is the answer; the others are tried all the same. */
static tw_status each_trial_run(tw_server *S, const json_t *sweep, int cancel, tw_error *err)
{
    json_t *trials;
    TW_TRY(tw_store_trials(S->store, json_string_value(json_object_get(sweep, "id")), &trials, err));
    tw_status first = TW_OK;
    for (size_t i = 0; i < json_array_size(trials); i++) {
        const json_t *t = json_array_get(trials, i);
        const char *status = json_string_value(json_object_get(t, "status"));
        const char *run = json_string_value(json_object_get(t, "run_id"));
        json_t *row = NULL;
        tw_api_code code;
        tw_error e;
        tw_status s = TW_OK;
        tw_error_clear(&e);
        if (status && cancel && (!strcmp(status, "queued") || !strcmp(status, "running")) &&
            (s = tw_scheduler_cancel(S->sched, run, &e)) == TW_ERR_INVALID)
            s = TW_OK; /* it ended meanwhile: nothing to cancel */
        else if (status && !cancel && !strcmp(status, "cancelled") && (s = tw_store_run_get(S->store, run, &row, &e)) == TW_OK)
            s = tw_runs_resume(S, row, json_integer_value(json_object_get(row, "steps")), &code, &e);
        json_decref(row);
        if (s != TW_OK && s != TW_END && first == TW_OK) {
            first = s;
            *err = e;
        }
    }
    json_decref(trials);
    return first;
}

static void change_state(tw_server *S, tw_req *r, const char *from, const char *to, int cancel)
{
    json_t *sweep = sweep_or_404(S, r);
    tw_error err;
    if (!sweep)
        return;
    const char *status = json_string_value(json_object_get(sweep, "status"));
    if (strcmp(status, from)) {
        tw_reply_error(r, TW_API_CONFLICT, "sweep '%s' is %s: only a %s sweep can be %s",
                       json_string_value(json_object_get(sweep, "name")), status, from, to);
        json_decref(sweep);
        return;
    }
    char id[TW_ID_BYTES];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(sweep, "id")));
    tw_sweeps_lock();
    tw_status s = tw_store_sweep_set_status(S->store, id, cancel ? "cancelled" : "running", tw_now_wall(), &err);
    if (s == TW_OK)
        s = each_trial_run(S, sweep, cancel, &err);
    tw_sweeps_unlock();
    json_decref(sweep);
    if (s == TW_OK)
        s = tw_store_sweep_resolve(S->store, id, &sweep, &err);
    if (s != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    tw_scheduler_wake(S->sched);
    reply_sweep(S, r, 202, sweep);
    json_decref(sweep);
}

void tw_api_sweep_cancel(tw_server *S, tw_req *r) { change_state(S, r, "running", "cancelled", 1); }

void tw_api_sweep_resume(tw_server *S, tw_req *r) { change_state(S, r, "cancelled", "resumed", 0); }

void tw_api_sweep_delete(tw_server *S, tw_req *r)
{
    json_t *sweep = sweep_or_404(S, r);
    tw_error err;
    if (!sweep)
        return;
    if (!strcmp(json_string_value(json_object_get(sweep, "status")), "running")) {
        tw_reply_error(r, TW_API_CONFLICT, "sweep '%s' is running: cancel it first (its runs stay when it is deleted)",
                       json_string_value(json_object_get(sweep, "name")));
        json_decref(sweep);
        return;
    }
    tw_sweeps_lock();
    tw_status s = tw_store_sweep_delete(S->store, json_string_value(json_object_get(sweep, "id")), &err);
    if (s == TW_OK)
        tw_sweep_board_remove(S, sweep);
    tw_sweeps_unlock();
    json_decref(sweep);
    tw_api_reply_deleted(S, r, s, &err, "sweep", "");
}
