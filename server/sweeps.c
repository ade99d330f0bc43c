/* sweeps.c — the driver of hyperparameter sweeps: turns the searcher's decisions (searcher.h) into runs.
 *
 * Owns: a sweep's trials as ordinary runs named "<sweep>-t<N>", and the driver (tw_sweeps_drive, which the
 * scheduler calls on every round through the server's drive_sweeps hook): record each trial's metric when it
 * finishes a rung, then ask the searcher while fewer than max_concurrent trials train. The routes that
 * submit and show sweeps are api_sweeps.c's.
 *
 * Durable with the store alone, so a server killed at any point loses nothing and decides nothing twice: a
 * trial's run is submitted with the idempotency key "sweep-<id>-t<N>" (a start repeated after a crash finds
 * the same run), a promotion is recorded (the trial's rung) before its run is resumed (a crash in between
 * resumes it at the next round), and a rung's result is recorded before the searcher is asked again. */
#include "sweeps.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "run_hparams.h"
#include "runs.h"
#include "searcher.h"
#include "store.h"
#include "sweep_board.h"

/* ================================ trials from rows ================================ */

/* The spec of a sweep row (decoded again from its stored JSON; the base config gives the default steps). */
tw_status tw_sweep_spec_of(const json_t *sweep, tw_sweep_spec *s, tw_error *err)
{
    return tw_sweep_spec_decode(json_object_get(sweep, "spec"), json_object_get(sweep, "config"), s, err);
}

/* Trial row t as the searcher sees it. A trial whose run trains, is queued or waits for its resume is
 * running; one whose run succeeded at its rung's steps is done (its result recorded or about to be); a failed,
 * cancelled or deleted run is failed (a sweep's resume resumes the runs its cancel cancelled). */
static tw_sweep_trial trial_of(const tw_sweep_spec *s, const json_t *t)
{
    tw_sweep_trial tr = {.rung = (int)json_integer_value(json_object_get(t, "rung"))};
    const char *status = json_string_value(json_object_get(t, "status"));
    const json_t *results = json_object_get(t, "results");
    for (size_t k = 0; k < json_array_size(results) && k < TW_SWEEP_MAX_RUNGS; k++) {
        tr.metric[k] = json_number_value(json_array_get(results, k));
        tr.failed |= !json_is_number(json_array_get(results, k)); /* a rung that never reported the metric */
    }
    int64_t steps = json_integer_value(json_object_get(t, "steps"));
    if (tr.failed || !status || !strcmp(status, "failed") || !strcmp(status, "cancelled"))
        tr.failed = 1;
    else if (!strcmp(status, "succeeded") && steps >= tw_sweep_rung_steps(s, tr.rung))
        tr.done = 1;
    else
        tr.running = 1; /* queued, running, or succeeded below its rung: a promotion's resume owed */
    return tr;
}

/* The run's metric at its end, or NAN. */
static double metric_of(const tw_sweep_spec *s, const json_t *t)
{
    const json_t *v = json_object_get(json_object_get(t, "metrics"), s->metric);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The result m of trial row t at its rung, in the sweep's HParams experiment (sweep_board.h). A failure is
 * logged: the sweep goes on without that point. */
static void board_result(tw_server *S, const json_t *sweep, const tw_sweep_spec *s, const json_t *t, int rung,
                         double m)
{
    char dir[PATH_MAX], uri[PATH_MAX];
    const char *folder = tw_run_folder(t);
    if (!folder || tw_run_dir(S, folder, dir, sizeof dir) != 0)
        return;
    tw_run_model_uri(dir, uri, sizeof uri);
    json_t *values = tw_sweep_trial_values(s, (int)json_integer_value(json_object_get(t, "trial")));
    tw_error err;
    if (!values || tw_sweep_board_result(S, sweep, json_string_value(json_object_get(t, "name")), values, rung,
                                         tw_sweep_rung_steps(s, rung), m, uri, &err) != TW_OK)
        fprintf(stderr, "tower serve: sweep %s: TensorBoard's experiment: %s\n",
                json_string_value(json_object_get(sweep, "name")), values ? err.message : "out of memory");
    json_decref(values);
}

/* A trial done with its rung but without that rung's result: the result recorded now (before any decision
 * reads it), in TensorBoard's experiment first (a crash in between writes the same point again). A run that
 * never reported the metric fails the trial's rung: NAN never wins. */
static tw_status record_result(tw_server *S, const json_t *sweep, const tw_sweep_spec *s, const json_t *t,
                               tw_sweep_trial *tr, tw_error *err)
{
    json_t *results = json_object_get(t, "results");
    if (!tr->done || (int)json_array_size(results) > tr->rung)
        return TW_OK;
    double m = metric_of(s, t);
    board_result(S, sweep, s, t, tr->rung, m);
    tr->metric[tr->rung] = m;
    tr->failed = isnan(m);
    json_t *more = json_deep_copy(results);
    json_array_append_new(more, isnan(m) ? json_null() : json_real(m));
    char *text = json_dumps(more, JSON_COMPACT);
    json_decref(more);
    tw_status st = text ? tw_store_trial_set_results(S->store, json_string_value(json_object_get(sweep, "id")),
                                                     (int)json_integer_value(json_object_get(t, "trial")), text, err)
                        : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    free(text);
    return st;
}

/* ================================ decisions ================================ */

/* Trial i's run config: the base with trial i's values and rung 0's steps, named "<sweep>-t<i>". */
static tw_status trial_config(const json_t *sweep, const tw_sweep_spec *s, int i, json_t **out, tw_error *err)
{
    json_t *values = tw_sweep_trial_values(s, i);
    if (!values)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_status st = tw_sweep_apply(json_object_get(sweep, "config"), values, out, err);
    json_decref(values);
    TW_TRY(st);
    char name[TW_NAME_MAX + 1];
    snprintf(name, sizeof name, "%s-t%d", json_string_value(json_object_get(sweep, "name")), i);
    json_object_set_new(*out, "name", json_string(name));
    json_object_set_new(*out, "steps", json_integer(tw_sweep_rung_steps(s, 0)));
    return TW_OK;
}

static tw_status start_trial(tw_server *S, const json_t *sweep, const tw_sweep_spec *s, int i, tw_error *err)
{
    json_t *cfg, *run = NULL;
    TW_TRY(trial_config(sweep, s, i, &cfg, err));
    const char *id = json_string_value(json_object_get(sweep, "id"));
    char key[64];
    snprintf(key, sizeof key, "sweep-%s-t%d", id, i);
    int created;
    tw_api_code code;
    tw_status st = tw_runs_submit(S, cfg, key, &run, &created, &code, err);
    if (st == TW_OK)
        st = tw_store_trial_insert(S->store, id, i, json_string_value(json_object_get(run, "id")), err);
    json_decref(run);
    json_decref(cfg);
    return st;
}

/* Trial row t's succeeded run continues to the steps of the trial's rung (a promotion's resume, also one a
 * crash interrupted). Nothing to do for a run that is queued or running. */
static tw_status continue_trial(tw_server *S, const tw_sweep_spec *s, const json_t *t, tw_error *err)
{
    const char *status = json_string_value(json_object_get(t, "status"));
    if (!status || strcmp(status, "succeeded"))
        return TW_OK;
    json_t *row;
    TW_TRY(tw_store_run_get(S->store, json_string_value(json_object_get(t, "run_id")), &row, err));
    tw_api_code code;
    int64_t steps = tw_sweep_rung_steps(s, (int)json_integer_value(json_object_get(t, "rung")));
    tw_status st = tw_runs_resume(S, row, steps, &code, err);
    json_decref(row);
    return st;
}

static tw_status promote(tw_server *S, const json_t *sweep, const tw_sweep_spec *s, const json_t *trials,
                         const tw_sweep_action *a, tw_error *err)
{
    const char *id = json_string_value(json_object_get(sweep, "id"));
    TW_TRY(tw_store_trial_set_rung(S->store, id, a->trial, a->rung, err)); /* the decision, recorded first */
    json_t *t = json_deep_copy(json_array_get(trials, (size_t)a->trial));
    json_object_set_new(t, "rung", json_integer(a->rung));
    tw_status st = continue_trial(S, s, t, err);
    json_decref(t);
    return st;
}

/* One round of one running sweep: results recorded, owed resumes issued, then decisions while there is room. */
static tw_status drive_one(tw_server *S, const json_t *sweep, double now, tw_error *err)
{
    tw_sweep_spec s;
    json_t *trials = NULL;
    static __thread tw_sweep_trial tr[TW_SWEEP_MAX_TRIALS];
    tw_status st = tw_sweep_spec_of(sweep, &s, err);
    if (st == TW_OK)
        st = tw_store_trials(S->store, json_string_value(json_object_get(sweep, "id")), &trials, err);
    int n = st == TW_OK ? (int)json_array_size(trials) : 0, running = 0;
    for (int i = 0; st == TW_OK && i < n; i++) {
        const json_t *t = json_array_get(trials, (size_t)i);
        tr[i] = trial_of(&s, t);
        st = record_result(S, sweep, &s, t, &tr[i], err);
        if (st == TW_OK && tr[i].running)
            st = continue_trial(S, &s, t, err);
        running += tr[i].running;
    }
    while (st == TW_OK && running < s.max_concurrent) {
        tw_sweep_action a = tw_sweep_next(&s, tr, n);
        if (a.kind == TW_SWEEP_DONE)
            st = tw_store_sweep_set_status(S->store, json_string_value(json_object_get(sweep, "id")), "succeeded", now,
                                           err);
        if (a.kind == TW_SWEEP_DONE || a.kind == TW_SWEEP_WAIT)
            break;
        st = a.kind == TW_SWEEP_START ? start_trial(S, sweep, &s, a.trial, err) : promote(S, sweep, &s, trials, &a, err);
        tr[a.trial] = (tw_sweep_trial){.rung = a.rung, .running = 1};
        if (a.kind == TW_SWEEP_PROMOTE)
            memcpy(tr[a.trial].metric, trial_of(&s, json_array_get(trials, (size_t)a.trial)).metric, sizeof tr[0].metric);
        n += a.kind == TW_SWEEP_START;
        running++;
    }
    json_decref(trials);
    tw_sweep_spec_clear(&s);
    return st;
}

static pthread_mutex_t driver_mu = PTHREAD_MUTEX_INITIALIZER;

void tw_sweeps_lock(void) { pthread_mutex_lock(&driver_mu); }

void tw_sweeps_unlock(void) { pthread_mutex_unlock(&driver_mu); }

void tw_sweeps_drive(tw_server *S, double now)
{
    json_t *sweeps;
    tw_error err;
    tw_sweeps_lock();
    if (tw_store_sweep_list(S->store, "running", &sweeps, &err) != TW_OK) {
        tw_sweeps_unlock();
        fprintf(stderr, "tower serve: sweeps: %s\n", err.message);
        return;
    }
    for (size_t i = 0; i < json_array_size(sweeps); i++)
        if (drive_one(S, json_array_get(sweeps, i), now, &err) != TW_OK)
            fprintf(stderr, "tower serve: sweep %s: %s\n",
                    json_string_value(json_object_get(json_array_get(sweeps, i), "name")), err.message);
    tw_sweeps_unlock();
    json_decref(sweeps);
}
