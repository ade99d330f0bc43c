/* searcher.c — a sweep's search space, trial values and decisions. See searcher.h.
 *
 * Written here: ASHA and the grid are a few loops over the trials' results, and what matters is that
 * they are pure functions of the recorded results (the server's durability rests on it); no packaged C
 * library does hyperparameter search. The random draws are Tower's counter-based stream (elementwise.h's
 * tw_hash64), so trial i's values depend on (seed, i) alone. */
#include "searcher.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "elementwise.h"

static tw_status bad(tw_error *err, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tw_status bad(tw_error *err, const char *path, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: %s", path, msg);
}

/* ================================ the spec ================================ */

/* Only the keys in known (NULL-terminated) may be in obj. */
static tw_status known_keys(const json_t *obj, const char *path, const char *const *known, tw_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(key, known[i]);
        if (!ok)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s.%.60s: unknown key", path, key);
    }
    return TW_OK;
}

/* obj[key] as an integer in [lo, hi], or def when absent. */
static tw_status int_of(const json_t *obj, const char *path, const char *key, int64_t lo, int64_t hi, int64_t def,
                        int64_t *out, tw_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = def;
    if (!v)
        return TW_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s.%s: must be an integer from %lld to %lld", path, key,
                            (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return TW_OK;
}

static tw_status range_of(const json_t *p, const char *path, tw_sweep_param *sp, tw_error *err)
{
    const json_t *lo = json_object_get(p, "min"), *hi = json_object_get(p, "max");
    if (!json_is_number(lo) || !json_is_number(hi))
        return bad(err, path, "a range needs numbers 'min' and 'max'");
    sp->min = json_number_value(lo);
    sp->max = json_number_value(hi);
    if (!(sp->min < sp->max) || !isfinite(sp->min) || !isfinite(sp->max))
        return bad(err, path, "'min' must be below 'max'");
    if (sp->kind == TW_PARAM_LOG_UNIFORM && !(sp->min > 0))
        return bad(err, path, "a log_uniform range needs min > 0");
    if (sp->kind == TW_PARAM_INT && (sp->min != floor(sp->min) || sp->max != floor(sp->max)))
        return bad(err, path, "an int range needs integer 'min' and 'max'");
    int64_t count;
    TW_TRY(int_of(p, path, "count", 2, TW_SWEEP_MAX_CHOICES, 0, &count, err));
    sp->count = (int)count;
    return TW_OK;
}

/* One key of "space": a list of values (a choice), or {"type": choice|uniform|log_uniform|int, ...}. */
static tw_status param_of(const char *key, const json_t *p, tw_sweep_param *sp, tw_error *err)
{
    static const char *const KINDS[] = {"choice", "uniform", "log_uniform", "int"};
    static const char *const KNOWN[] = {"type", "values", "min", "max", "count", NULL};
    char path[TW_SWEEP_KEY_BYTES + 16];
    snprintf(path, sizeof path, "space.%s", key);
    if (strlen(key) >= TW_SWEEP_KEY_BYTES || !key[0])
        return bad(err, "space", "a key must be 1 to %d bytes", TW_SWEEP_KEY_BYTES - 1);
    snprintf(sp->key, sizeof sp->key, "%s", key);
    const json_t *values = json_is_array(p) ? p : json_object_get(p, "values");
    if (json_is_object(p)) {
        TW_TRY(known_keys(p, path, KNOWN, err));
        const char *type = json_string_value(json_object_get(p, "type"));
        int k = -1;
        for (int i = 0; type && i < 4; i++)
            k = !strcmp(type, KINDS[i]) ? i : k;
        if (k < 0)
            return bad(err, path, "'type' must be choice, uniform, log_uniform or int");
        sp->kind = (tw_sweep_param_kind)k;
        if (k != TW_PARAM_CHOICE)
            return range_of(p, path, sp, err);
    } else if (!json_is_array(p)) {
        return bad(err, path, "give a list of values, or {\"type\": ...}");
    }
    sp->kind = TW_PARAM_CHOICE;
    if (!json_is_array(values) || json_array_size(values) < 1 || json_array_size(values) > TW_SWEEP_MAX_CHOICES)
        return bad(err, path, "a choice needs 1 to %d values", TW_SWEEP_MAX_CHOICES);
    sp->values = json_deep_copy(values);
    return sp->values ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

static tw_status space_of(const json_t *space, tw_sweep_spec *s, tw_error *err)
{
    if (!json_is_object(space) || json_object_size(space) < 1 || json_object_size(space) > TW_SWEEP_MAX_PARAMS)
        return bad(err, "space", "must be an object of 1 to %d keys", TW_SWEEP_MAX_PARAMS);
    const char *key;
    json_t *p;
    json_object_foreach((json_t *)space, key, p) TW_TRY(param_of(key, p, &s->params[s->n_params++], err));
    return TW_OK;
}

/* The number of grid points of p (0: a range without a count). */
static int grid_points(const tw_sweep_param *p)
{
    if (p->kind == TW_PARAM_CHOICE)
        return (int)json_array_size(p->values);
    if (p->kind == TW_PARAM_INT && !p->count)
        return p->max - p->min + 1 <= TW_SWEEP_MAX_CHOICES ? (int)(p->max - p->min + 1) : 0;
    return p->count;
}

static tw_status grid_size(tw_sweep_spec *s, tw_error *err)
{
    int64_t n = 1;
    for (int i = 0; i < s->n_params; i++) {
        int k = grid_points(&s->params[i]);
        if (!k)
            return bad(err, "searcher", "a grid needs points for space.%s: a choice, an int range of at most %d "
                       "values, or a range with a 'count'", s->params[i].key, TW_SWEEP_MAX_CHOICES);
        if ((n *= k) > TW_SWEEP_MAX_TRIALS)
            return bad(err, "searcher", "the grid has more than %d points", TW_SWEEP_MAX_TRIALS);
    }
    s->max_trials = (int)n;
    return TW_OK;
}

static tw_status searcher_of(const json_t *sr, int64_t base_steps, tw_sweep_spec *s, tw_error *err)
{
    static const char *const KNOWN[] = {"type", "max_trials", "max_steps", "reduction_factor", "rungs", "seed",
                                        "max_concurrent", "sample", NULL};
    if (!json_is_object(sr))
        return bad(err, "searcher", "must be an object: {\"type\": \"grid\" | \"random\" | \"asha\", ...}");
    TW_TRY(known_keys(sr, "searcher", KNOWN, err));
    const char *type = json_string_value(json_object_get(sr, "type"));
    if (!type || (strcmp(type, "grid") && strcmp(type, "random") && strcmp(type, "asha")))
        return bad(err, "searcher.type", "must be grid, random or asha");
    s->kind = !strcmp(type, "grid") ? TW_SEARCH_GRID : !strcmp(type, "random") ? TW_SEARCH_RANDOM : TW_SEARCH_ASHA;
    int64_t v;
    TW_TRY(int_of(sr, "searcher", "seed", 0, INT64_MAX, 0, &v, err));
    s->seed = (uint64_t)v;
    TW_TRY(int_of(sr, "searcher", "max_concurrent", 1, 64, 4, &v, err));
    s->max_concurrent = (int)v;
    TW_TRY(int_of(sr, "searcher", "max_steps", 1, 1000000000, base_steps, &v, err));
    s->max_steps = v;
    TW_TRY(int_of(sr, "searcher", "reduction_factor", 2, 16, 4, &v, err));
    s->eta = (int)v;
    TW_TRY(int_of(sr, "searcher", "rungs", 1, TW_SWEEP_MAX_RUNGS, 3, &v, err));
    s->rungs = s->kind == TW_SEARCH_ASHA ? (int)v : 1;
    if (s->kind == TW_SEARCH_GRID)
        return json_object_get(sr, "max_trials") ? bad(err, "searcher.max_trials", "a grid runs every point")
                                                 : json_object_get(sr, "sample") ? bad(err, "searcher.sample", "a grid "
                                                 "runs every point in order") : grid_size(s, err);
    const json_t *sample = json_object_get(sr, "sample");
    if (sample && (!json_is_string(sample) || (strcmp(json_string_value(sample), "grid") &&
                                               strcmp(json_string_value(sample), "random"))))
        return bad(err, "searcher.sample", "must be \"random\" (each value drawn) or \"grid\" (the grid's points in "
                   "a seeded order, each once)");
    s->grid_sample = sample && !strcmp(json_string_value(sample), "grid");
    int points = 0;
    if (s->grid_sample) {
        TW_TRY(grid_size(s, err));
        points = s->max_trials;
    }
    TW_TRY(int_of(sr, "searcher", "max_trials", 1, points ? points : TW_SWEEP_MAX_TRIALS, points ? points : 16, &v,
                  err));
    s->max_trials = (int)v;
    return TW_OK;
}

/* The base run config's steps, or the engine's default (config.h owns every default). */
static int64_t steps_of(const json_t *base)
{
    const json_t *v = json_object_get(base, "steps");
    if (json_is_integer(v) && json_integer_value(v) > 0)
        return json_integer_value(v);
    static __thread tw_config c; /* large: off the stack */
    tw_config_defaults(&c);
    return c.steps;
}

tw_status tw_sweep_spec_decode(const json_t *doc, const json_t *base, tw_sweep_spec *s, tw_error *err)
{
    memset(s, 0, sizeof *s);
    TW_TRY(space_of(json_object_get(doc, "space"), s, err));
    const char *metric = json_string_value(json_object_get(doc, "metric"));
    if (!metric || !metric[0] || strlen(metric) >= sizeof s->metric)
        return bad(err, "metric", "name the run metric to optimise (\"eval_accuracy_ema\", \"eval_loss\", ...)");
    snprintf(s->metric, sizeof s->metric, "%s", metric);
    const json_t *max = json_object_get(doc, "maximize");
    if (max && !json_is_boolean(max))
        return bad(err, "maximize", "must be true or false");
    s->maximize = max ? json_is_true(max) : strstr(metric, "accuracy") != NULL || strstr(metric, "r2") != NULL;
    return searcher_of(json_object_get(doc, "searcher"), steps_of(base), s, err);
}

void tw_sweep_spec_clear(tw_sweep_spec *s)
{
    for (int i = 0; i < TW_SWEEP_MAX_PARAMS; i++)
        json_decref(s->params[i].values);
    memset(s, 0, sizeof *s);
}

int tw_sweep_trials(const tw_sweep_spec *s) { return s->max_trials; }

/* ================================ trial values ================================ */

/* x to 6 significant digits: what a config's float32 keeps of it, and what a person reads. */
static json_t *real6(double x)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", x);
    return json_real(strtod(buf, NULL));
}

/* Point j of p's grid (0 <= j < grid_points). */
static json_t *grid_value(const tw_sweep_param *p, int j)
{
    if (p->kind == TW_PARAM_CHOICE)
        return json_incref(json_array_get(p->values, (size_t)j));
    if (p->kind == TW_PARAM_INT && !p->count)
        return json_integer((json_int_t)p->min + j);
    double f = (double)j / (p->count - 1);
    double v = j == 0 ? p->min
               : j == p->count - 1 ? p->max
               : p->kind == TW_PARAM_LOG_UNIFORM ? exp(log(p->min) + f * (log(p->max) - log(p->min)))
                                                 : p->min + f * (p->max - p->min);
    return p->kind == TW_PARAM_INT ? json_integer((json_int_t)llround(v)) : real6(v);
}

/* p drawn from u in [0, 1). */
static json_t *drawn_value(const tw_sweep_param *p, double u)
{
    switch (p->kind) {
    case TW_PARAM_CHOICE: return json_incref(json_array_get(p->values, (size_t)(u * (double)json_array_size(p->values))));
    case TW_PARAM_UNIFORM: return real6(p->min + u * (p->max - p->min));
    case TW_PARAM_LOG_UNIFORM: return real6(exp(log(p->min) + u * (log(p->max) - log(p->min))));
    case TW_PARAM_INT: return json_integer((json_int_t)p->min + (json_int_t)(u * (p->max - p->min + 1)));
    }
    return NULL;
}

/* The grid point trial i takes when a random or ASHA searcher samples the grid: position i of a Fisher-Yates
 * shuffle of the n points drawn from the seed. */
static int shuffled_point(const tw_sweep_spec *s, int i, int n)
{
    static __thread int order[TW_SWEEP_MAX_TRIALS];
    for (int j = 0; j < n; j++)
        order[j] = j;
    for (int j = n - 1; j > 0; j--) {
        int k = (int)(tw_hash64(s->seed ^ 0x9e3779b97f4a7c15ull, (uint64_t)j) % (uint64_t)(j + 1));
        int t = order[j];
        order[j] = order[k];
        order[k] = t;
    }
    return order[i];
}

json_t *tw_sweep_trial_values(const tw_sweep_spec *s, int i)
{
    int on_grid = s->kind == TW_SEARCH_GRID || s->grid_sample, n = 1;
    for (int k = 0; on_grid && k < s->n_params; k++)
        n *= grid_points(&s->params[k]);
    int point[TW_SWEEP_MAX_PARAMS], rest = s->grid_sample ? shuffled_point(s, i, n) : i;
    for (int k = s->n_params - 1; k >= 0; k--) { /* on a grid the last key varies fastest */
        int m = on_grid ? grid_points(&s->params[k]) : 1;
        point[k] = rest % m;
        rest /= m;
    }
    json_t *out = json_object();
    for (int k = 0; out && k < s->n_params; k++) {
        const tw_sweep_param *p = &s->params[k];
        uint64_t h = tw_hash64(s->seed, (uint64_t)i * TW_SWEEP_MAX_PARAMS + (uint64_t)k);
        json_t *v = on_grid ? grid_value(p, point[k])
                                              : drawn_value(p, (double)(h >> 11) * (1.0 / 9007199254740992.0));
        if (!v || json_object_set_new(out, p->key, v) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* ================================ applying values ================================ */

/* The next step of a dotted key at *at: a name (up to '.', '[' or the end) or an index ("[3]"). */
static int next_step(const char **at, char *name, size_t size, long *index)
{
    const char *p = *at;
    if (*p == '[') {
        char *end;
        *index = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end != ']' || *index < 0)
            return -1;
        *at = end + 1 + (end[1] == '.');
        return 1;
    }
    size_t n = strcspn(p, ".[");
    if (n == 0 || n >= size)
        return -1;
    memcpy(name, p, n);
    name[n] = 0;
    *at = p + n + (p[n] == '.');
    return 0;
}

static tw_status set_path(json_t *doc, const char *key, json_t *value, tw_error *err)
{
    char name[TW_SWEEP_KEY_BYTES], where[TW_SWEEP_KEY_BYTES + 8];
    const char *at = key;
    json_t *node = doc;
    for (;;) {
        long index = 0;
        int kind = next_step(&at, name, sizeof name, &index);
        size_t done = (size_t)(at - key) - (at > key && at[-1] == '.');
        snprintf(where, sizeof where, "space.%.*s", (int)done, key);
        int last = *at == 0;
        if (kind < 0)
            return bad(err, "space", "'%s' is not a dotted key (\"optimizer.learning_rate\", \"model.layers[1].units\")",
                       key);
        if (kind == 1 && (!json_is_array(node) || (size_t)index >= json_array_size(node)))
            return bad(err, where, "the config has no element %ld there", index);
        if (kind == 0 && !json_is_object(node))
            return bad(err, where, "the config has no object there");
        if (last) {
            int r = kind ? json_array_set(node, (size_t)index, value) : json_object_set(node, name, value);
            return r == 0 ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        }
        json_t *child = kind ? json_array_get(node, (size_t)index) : json_object_get(node, name);
        if (!child) { /* an object key the config leaves at its default */
            child = json_object();
            if (!child || json_object_set_new(node, name, child) != 0)
                return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        }
        node = child;
    }
}

tw_status tw_sweep_apply(const json_t *base, const json_t *values, json_t **out, tw_error *err)
{
    *out = json_deep_copy(base);
    if (!*out)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)values, key, v) {
        tw_status s = set_path(*out, key, v, err);
        if (s != TW_OK) {
            json_decref(*out);
            *out = NULL;
            return s;
        }
    }
    return TW_OK;
}

/* ================================ rungs and decisions ================================ */

int tw_sweep_rung_count(const tw_sweep_spec *s) { return s->kind == TW_SEARCH_ASHA ? s->rungs : 1; }

int64_t tw_sweep_rung_steps(const tw_sweep_spec *s, int rung)
{
    int64_t steps = s->max_steps;
    for (int k = rung; k < tw_sweep_rung_count(s) - 1; k++)
        steps /= s->eta;
    return steps > 0 ? steps : 1;
}

/* 1 when a is better than b (ties: neither). */
static int better(const tw_sweep_spec *s, double a, double b) { return s->maximize ? a > b : a < b; }

/* 1 when trial t finished rung k (it is paused there, or went on). */
static int finished(const tw_sweep_trial *t, int k) { return !t->failed && (t->rung > k || (t->rung == k && t->done)); }

/* Rung k's results, best first (ties: the earlier trial), into order[]; returns their count. */
static int rung_order(const tw_sweep_spec *s, const tw_sweep_trial *trials, int n, int k, int *order)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!finished(&trials[i], k))
            continue;
        int j = m++;
        while (j > 0 && better(s, trials[i].metric[k], trials[order[j - 1]].metric[k])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    return m;
}

tw_sweep_action tw_sweep_next(const tw_sweep_spec *s, const tw_sweep_trial *trials, int n)
{
    static __thread int order[TW_SWEEP_MAX_TRIALS];
    for (int k = tw_sweep_rung_count(s) - 2; k >= 0; k--) {
        int m = rung_order(s, trials, n, k, order);
        for (int j = 0; j < m / s->eta; j++) {
            const tw_sweep_trial *t = &trials[order[j]];
            if (t->rung == k && t->done)
                return (tw_sweep_action){TW_SWEEP_PROMOTE, order[j], k + 1};
        }
    }
    if (n < s->max_trials)
        return (tw_sweep_action){TW_SWEEP_START, n, 0};
    for (int i = 0; i < n; i++)
        if (trials[i].running)
            return (tw_sweep_action){TW_SWEEP_WAIT, -1, -1};
    return (tw_sweep_action){TW_SWEEP_DONE, -1, -1};
}

int tw_sweep_best(const tw_sweep_spec *s, const tw_sweep_trial *trials, int n)
{
    static __thread int order[TW_SWEEP_MAX_TRIALS];
    for (int k = tw_sweep_rung_count(s) - 1; k >= 0; k--)
        if (rung_order(s, trials, n, k, order) > 0)
            return order[0];
    return -1;
}
