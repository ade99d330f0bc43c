/* searcher.h — a sweep's search: its space of hyperparameters, the trials' values, and the next decision
 * of a grid, random or ASHA searcher, as pure functions of the sweep's spec and its trials' recorded
 * results (no hidden state: a server that restarts asks again and gets the same answer, so no decision is
 * taken twice).
 *
 * Owns: the spec's JSON form (decoded strictly, errors naming the key: "searcher.reduction_factor: ..."),
 * the values of trial i (grid: the i-th point, the first key slowest; random and ASHA: drawn from the seed
 * and i, so a sweep is reproducible from its seed, or with "sample": "grid" the grid's points in an order
 * drawn from the seed), applying them to the base run config by dotted key
 * ("optimizer.learning_rate", "model.layers[1].units"), the rungs' steps, and ASHA (Li et al., "A System
 * for Massively Parallel Hyperparameter Tuning", MLSys 2020, Algorithm 2: promote from the highest rung
 * that has a promotable trial, else grow the bottom rung). Does not own the store, the runs or the
 * scheduling (sweeps.c). */
#ifndef TW_SEARCHER_H
#define TW_SEARCHER_H

#include <jansson.h>
#include <stdint.h>

#include "status.h"

enum {
    TW_SWEEP_MAX_PARAMS = 16,   /* searched keys */
    TW_SWEEP_MAX_CHOICES = 64,  /* values of one choice (and grid points of one range) */
    TW_SWEEP_MAX_TRIALS = 1024,
    TW_SWEEP_MAX_RUNGS = 8,
    TW_SWEEP_KEY_BYTES = 128,
};

typedef enum { TW_PARAM_CHOICE = 0, TW_PARAM_UNIFORM, TW_PARAM_LOG_UNIFORM, TW_PARAM_INT } tw_sweep_param_kind;

typedef struct {
    char key[TW_SWEEP_KEY_BYTES]; /* dotted, with indices: "model.layers[1].units" */
    tw_sweep_param_kind kind;
    json_t *values;               /* CHOICE: the array of values (owned) */
    double min, max;              /* UNIFORM, LOG_UNIFORM (min > 0), INT (integers) */
    int count;                    /* grid points of a UNIFORM or LOG_UNIFORM range (0: not griddable) */
} tw_sweep_param;

typedef enum { TW_SEARCH_GRID = 0, TW_SEARCH_RANDOM, TW_SEARCH_ASHA } tw_searcher_kind;

typedef struct {
    tw_sweep_param params[TW_SWEEP_MAX_PARAMS];
    int n_params;
    tw_searcher_kind kind;
    uint64_t seed;        /* random and ASHA */
    int max_trials;       /* random and ASHA; grid: the grid's size */
    int grid_sample;      /* random and ASHA with "sample": "grid": trial i takes a grid point, each once, in an
                             order drawn from the seed (max_trials at most, and by default, the grid's size) */
    int64_t max_steps;    /* ASHA: the top rung's steps; grid and random: the base config's steps */
    int eta;              /* ASHA's reduction factor, 2 to 16 (default 4) */
    int rungs;            /* ASHA's rungs, 1 to TW_SWEEP_MAX_RUNGS (default 3) */
    int max_concurrent;   /* trials training at once (default 4) */
    char metric[64];      /* a run metric: "eval_accuracy_ema", "eval_loss", ... */
    int maximize;         /* 1: larger is better */
} tw_sweep_spec;

/* Decodes the spec's "space", "searcher", "metric" and "maximize" from doc (borrowed); max_steps defaults
 * to the steps of base (the base run config, borrowed; the engine's default when it has none). Errors:
 * TW_ERR_INVALID naming the key. Free with tw_sweep_spec_clear, also after an error. */
tw_status tw_sweep_spec_decode(const json_t *doc, const json_t *base, tw_sweep_spec *s, tw_error *err);
void tw_sweep_spec_clear(tw_sweep_spec *s);

/* The trials the sweep runs at most (grid: every point). */
int tw_sweep_trials(const tw_sweep_spec *s);

/* Trial i's values: a new object {key: value} in the space's key order. NULL when out of memory. */
json_t *tw_sweep_trial_values(const tw_sweep_spec *s, int i);

/* base (borrowed) with every key of values set, as a new document. Errors: TW_ERR_INVALID naming a key that
 * does not lead into the config ("model.layers[7]: the config has 3 layers"). */
tw_status tw_sweep_apply(const json_t *base, const json_t *values, json_t **out, tw_error *err);

/* The steps a trial has trained at the end of rung k (ASHA: max_steps / eta^(rungs - 1 - k), at least 1;
 * grid and random have one rung: max_steps). */
int64_t tw_sweep_rung_steps(const tw_sweep_spec *s, int rung);
int tw_sweep_rung_count(const tw_sweep_spec *s);

/* What the searcher knows of one trial. */
typedef struct {
    int rung;             /* the rung it trains toward or reached (0 at its start) */
    int running;          /* training toward `rung` now */
    int done;             /* `rung` finished: metric[rung] holds its result */
    double metric[TW_SWEEP_MAX_RUNGS]; /* the metric at the end of each finished rung */
    int failed;           /* it failed: never promoted, never counted as a result */
} tw_sweep_trial;

typedef enum {
    TW_SWEEP_START = 0,   /* start trial `trial` (the next new one) at rung 0 */
    TW_SWEEP_PROMOTE,     /* resume trial `trial` to rung `rung` */
    TW_SWEEP_WAIT,        /* nothing to do until a running trial finishes */
    TW_SWEEP_DONE,        /* the sweep is finished */
} tw_sweep_action_kind;

typedef struct {
    tw_sweep_action_kind kind;
    int trial, rung;
} tw_sweep_action;

/* The next decision for trials[n] (index i is trial i; n = the trials started so far). The caller asks
 * only while fewer than max_concurrent trials run. */
tw_sweep_action tw_sweep_next(const tw_sweep_spec *s, const tw_sweep_trial *trials, int n);

/* The best trial so far (its best finished rung's metric, the highest rung first), or -1. */
int tw_sweep_best(const tw_sweep_spec *s, const tw_sweep_trial *trials, int n);

#endif
