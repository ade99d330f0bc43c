/* sweep_view.c — `tower sweep`'s views of a sweep. See sweep_view.h. */
#include "sweep_view.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* The server's limits (server/searcher.h): searched keys and rungs. The trials table has a column for each, and
 * trial, rung, run, status and step. */
enum { MAX_KEYS = 16, MAX_RUNGS = 8, MAX_COLS = MAX_KEYS + MAX_RUNGS + 5 };

static const json_t *get(const json_t *obj, const char *key) { return json_object_get(obj, key); }

static const char *str(const json_t *obj, const char *key) { return json_string_value(get(obj, key)); }

/* A searched value as a cell: strings bare, integers as they are, reals with 6 significant digits. */
static const char *value_text(const json_t *v, char *buf, size_t size)
{
    if (!v)
        return NULL;
    if (json_is_string(v))
        snprintf(buf, size, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, size, "%.6g", json_real_value(v));
    else {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, size, "%s", text ? text : "?");
        free(text);
    }
    return buf;
}

/* A rung's result: "%.4f", "none" (the run never reported the metric), NULL when the rung is not reached. */
static const char *result_text(const json_t *v, char *buf, size_t size)
{
    if (!v)
        return NULL;
    if (!json_is_number(v))
        return "none";
    snprintf(buf, size, "%.4f", json_number_value(v));
    return buf;
}

/* A trial's result: its highest finished rung's (how the server ranks trials), or NULL. */
static const json_t *trial_result(const json_t *trial)
{
    const json_t *results = get(trial, "results");
    size_t n = json_array_size(results);
    return n ? json_array_get(results, n - 1) : NULL;
}

/* Whether a larger metric is better: the spec's "maximize", else the server's default for the metric (an
 * accuracy or an r2 is maximised, anything else minimised: searcher.c). */
static int maximizes(const json_t *spec)
{
    const json_t *m = get(spec, "maximize");
    const char *metric = str(spec, "metric");
    if (json_is_boolean(m))
        return json_is_true(m);
    return metric && (strstr(metric, "accuracy") || strstr(metric, "r2"));
}

/* "asha: seed 7, max_trials 20, reduction_factor 3" (the searcher's settings as the spec gives them). */
static const char *searcher_text(const json_t *searcher, char *buf, size_t size)
{
    const char *type = str(searcher, "type"), *key;
    json_t *v;
    size_t len = (size_t)snprintf(buf, size, "%s", type ? type : "?");
    int n = 0;
    json_object_foreach((json_t *)searcher, key, v) {
        char text[64];
        if (strcmp(key, "type") && len < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%s %s", n++ ? ", " : ": ", key,
                                    value_text(v, text, sizeof text));
    }
    return buf;
}

/* "12, 50, 200" */
static const char *rung_steps_text(const json_t *sweep, char *buf, size_t size)
{
    size_t i, len = 0;
    json_t *v;
    buf[0] = '\0';
    json_array_foreach(get(sweep, "rung_steps"), i, v) {
        if (len < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", (long long)json_integer_value(v));
    }
    return buf;
}

/* "each trained to 50 steps" (one rung) or "rungs at 12, 50, 200 steps". */
static const char *rungs_text(const json_t *sweep, char *buf, size_t size)
{
    char steps[256];
    rung_steps_text(sweep, steps, sizeof steps);
    snprintf(buf, size, "%s %s steps", json_array_size(get(sweep, "rung_steps")) > 1 ? "rungs at" : "each trained to",
             steps);
    return buf;
}

/* The trial's values as "KEY=VALUE KEY=VALUE" (sep between them). */
static const char *values_text(const json_t *trial, const char *sep, char *buf, size_t size)
{
    const char *key;
    json_t *v;
    size_t len = 0;
    buf[0] = '\0';
    json_object_foreach((json_t *)get(trial, "values"), key, v) {
        char text[128];
        if (len < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%s=%s", len ? sep : "", key,
                                    value_text(v, text, sizeof text));
    }
    return buf;
}

int64_t tw_sweep_view_planned(const json_t *sweep)
{
    const json_t *rungs = get(sweep, "rung_steps");
    json_int_t top = json_integer_value(json_array_get(rungs, json_array_size(rungs) - 1));
    return top > 0 ? (int64_t)(json_integer_value(get(sweep, "steps_full")) / top) : 0;
}

void tw_sweep_view_print_created(const json_t *sweep, FILE *out)
{
    char rungs[300];
    const char *type = str(get(get(sweep, "spec"), "searcher"), "type");
    fprintf(out, "%s %s %s: %s, %lld trials planned, %s\n", str(sweep, "id"), str(sweep, "name"), str(sweep, "status"),
            type ? type : "?", (long long)tw_sweep_view_planned(sweep), rungs_text(sweep, rungs, sizeof rungs));
}

int tw_sweep_view_add_list_row(tw_table *t, const json_t *row, const json_t *sweep)
{
    char trials[48], best[32];
    const json_t *spec = get(row, "spec");
    snprintf(trials, sizeof trials, "%zu/%lld", json_array_size(get(sweep, "trials")),
             (long long)tw_sweep_view_planned(sweep));
    const char *cells[TW_SWEEP_VIEW_LIST_COLS] = {
        str(row, "id"),
        str(row, "name"),
        str(row, "status"),
        str(get(spec, "searcher"), "type"),
        str(spec, "metric"),
        sweep ? trials : NULL,
        result_text(trial_result(get(sweep, "best")), best, sizeof best),
    };
    return tw_table_add(t, cells);
}

/* ================================ show ================================ */

/* "S steps trained (P% of F)", P rounded down: 100% only when every step is trained. */
static const char *steps_text(const json_t *sweep, char *buf, size_t size)
{
    json_int_t trained = json_integer_value(get(sweep, "steps_trained")), full = json_integer_value(get(sweep, "steps_full"));
    snprintf(buf, size, "%lld steps trained (%lld%% of %lld)", (long long)trained,
             full > 0 ? (long long)(trained * 100 / full) : 0LL, (long long)full);
    return buf;
}

/* The header: one "LABEL  TEXT" row per fact. */
static int add_facts(tw_table *t, const json_t *sweep)
{
    const json_t *spec = get(sweep, "spec"), *best = get(sweep, "best");
    char name[300], searcher[600], metric[160], rungs[300], trials[64], steps[160], best_text[1400], values[1200],
        result[32];
    const json_t *top = json_array_get(get(sweep, "rung_steps"), json_array_size(get(sweep, "rung_steps")) - 1);
    snprintf(name, sizeof name, "%s (%s)", str(sweep, "name"), str(sweep, "id"));
    rung_steps_text(sweep, rungs, sizeof rungs - 8);
    strcat(rungs, " steps");
    snprintf(metric, sizeof metric, "%s, %s is best", str(spec, "metric"), maximizes(spec) ? "highest" : "lowest");
    snprintf(trials, sizeof trials, "%zu started of %lld planned", json_array_size(get(sweep, "trials")),
             (long long)tw_sweep_view_planned(sweep));
    size_t len = strlen(steps_text(sweep, steps, sizeof steps)) - 1; /* before its ")" */
    snprintf(steps + len, sizeof steps - len, ": every trial to %lld steps)", (long long)json_integer_value(top));
    if (json_is_object(best))
        snprintf(best_text, sizeof best_text, "trial %lld (%s): %s %s with %s", (long long)json_integer_value(get(best, "trial")),
                 str(get(best, "run"), "name"), str(spec, "metric"), result_text(trial_result(best), result, sizeof result),
                 values_text(best, ", ", values, sizeof values));
    const char *rows[][2] = {
        {"sweep", name},
        {"status", str(sweep, "status")},
        {"searcher", searcher_text(get(spec, "searcher"), searcher, sizeof searcher)},
        {"metric", metric},
        {"rungs", rungs},
        {"trials", trials},
        {"steps", steps},
        {"best", json_is_object(best) ? best_text : "none yet"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        rc |= tw_table_add(t, rows[i]);
    return rc;
}

/* "EVAL_LOSS" (one rung) or "EVAL_LOSS@50". */
static void metric_header(const json_t *sweep, size_t rung, char *buf, size_t size)
{
    const json_t *steps = get(sweep, "rung_steps");
    const char *metric = str(get(sweep, "spec"), "metric");
    size_t len = 0;
    for (; metric && metric[len] && len + 1 < size; len++)
        buf[len] = (char)toupper((unsigned char)metric[len]);
    buf[len] = '\0';
    if (json_array_size(steps) > 1)
        snprintf(buf + len, size - len, "@%lld", (long long)json_integer_value(json_array_get(steps, rung)));
}

/* The trials table's header: TRIAL, the searched keys (as the spec spells them), RUNG, the metric at each
 * rung, RUN, STATUS, STEP. Returns its number of columns. */
static int trials_header(const json_t *sweep, char names[MAX_RUNGS][160], const char **cells)
{
    int n = 0;
    const char *key;
    json_t *v;
    cells[n++] = "TRIAL";
    json_object_foreach((json_t *)get(get(sweep, "spec"), "space"), key, v) {
        if (n <= MAX_KEYS)
            cells[n++] = key;
    }
    cells[n++] = "RUNG";
    for (size_t k = 0; k < json_array_size(get(sweep, "rung_steps")) && k < MAX_RUNGS; k++) {
        metric_header(sweep, k, names[k], sizeof names[k]);
        cells[n++] = names[k];
    }
    cells[n++] = "RUN";
    cells[n++] = "STATUS";
    cells[n++] = "STEP";
    return n;
}

static int add_trial_row(tw_table *t, const json_t *sweep, const json_t *trial)
{
    char text[MAX_COLS][64];
    const char *cells[MAX_COLS], *key;
    const json_t *run = get(trial, "run"), *best = get(sweep, "best"), *v;
    int n = 0, is_best = json_is_object(best) && json_equal(get(best, "trial"), get(trial, "trial"));
    snprintf(text[n], sizeof text[n], "%lld%s", (long long)json_integer_value(get(trial, "trial")), is_best ? "*" : "");
    cells[n] = text[n];
    n++;
    json_object_foreach((json_t *)get(get(sweep, "spec"), "space"), key, v) {
        if (n > MAX_KEYS)
            continue;
        cells[n] = value_text(get(get(trial, "values"), key), text[n], sizeof text[n]);
        n++;
    }
    snprintf(text[n], sizeof text[n], "%lld", (long long)json_integer_value(get(trial, "rung")));
    cells[n] = text[n];
    n++;
    for (size_t k = 0; k < json_array_size(get(sweep, "rung_steps")) && k < MAX_RUNGS; k++, n++)
        cells[n] = result_text(json_array_get(get(trial, "results"), k), text[n], sizeof text[n]);
    cells[n++] = str(run, "name");
    cells[n++] = str(run, "status");
    snprintf(text[n], sizeof text[n], "%lld/%lld", (long long)json_integer_value(get(run, "step")),
             (long long)json_integer_value(get(run, "steps")));
    cells[n] = text[n];
    return tw_table_add(t, cells);
}

int tw_sweep_view_print_show(const json_t *sweep, FILE *out)
{
    char names[MAX_RUNGS][160];
    const char *header[MAX_COLS];
    tw_table facts, trials;
    int cols = trials_header(sweep, names, header);
    int rc = tw_table_init(&facts, 2, NULL) | tw_table_init(&trials, cols, header);
    rc |= add_facts(&facts, sweep);
    size_t i;
    json_t *trial;
    json_array_foreach(get(sweep, "trials"), i, trial)
        rc |= add_trial_row(&trials, sweep, trial);
    if (!rc) {
        tw_table_print(&facts, out);
        fprintf(out, "\nTrials (* the best)\n");
        if (json_array_size(get(sweep, "trials")))
            tw_table_print(&trials, out);
        else
            fprintf(out, "  none started yet\n");
    }
    tw_table_free(&facts);
    tw_table_free(&trials);
    return rc;
}

/* ================================ follow ================================ */

void tw_sweep_view_print_trial(const json_t *sweep, const json_t *trial, FILE *out)
{
    const json_t *run = get(trial, "run"), *r;
    const char *name = str(run, "name"), *status = str(run, "status"), *metric = str(get(sweep, "spec"), "metric");
    char values[1200], text[32];
    size_t k;
    snprintf(text, sizeof text, "%lld/%lld", (long long)json_integer_value(get(run, "step")),
             (long long)json_integer_value(get(run, "steps")));
    fprintf(out, "trial %lld  %s  %-10s  %-9s", (long long)json_integer_value(get(trial, "trial")), name ? name : "-",
            status ? status : "-", text); /* the widest status and a step of up to 99999 steps: aligned */
    json_array_foreach(get(trial, "results"), k, r) {
        if (!k)
            fprintf(out, "  %s", metric ? metric : "?");
        fprintf(out, "%s %s @%lld", k ? "," : "", result_text(r, text, sizeof text),
                (long long)json_integer_value(json_array_get(get(sweep, "rung_steps"), k)));
    }
    fprintf(out, "  %s\n", values_text(trial, " ", values, sizeof values));
}

/* Trials whose run is queued, running or stopping. */
static int training(const json_t *sweep)
{
    static const char *const BUSY[] = {"queued", "running", "cancelling"};
    size_t i;
    json_t *trial;
    int n = 0;
    json_array_foreach(get(sweep, "trials"), i, trial) {
        const char *status = str(get(trial, "run"), "status");
        for (size_t b = 0; status && b < sizeof BUSY / sizeof BUSY[0]; b++)
            n += !strcmp(status, BUSY[b]);
    }
    return n;
}

void tw_sweep_view_print_progress(const json_t *sweep, FILE *out)
{
    char steps[160];
    fprintf(out, "\r\033[K%s: %zu of %lld trials started, %d training; %s", str(sweep, "name"),
            json_array_size(get(sweep, "trials")), (long long)tw_sweep_view_planned(sweep), training(sweep),
            steps_text(sweep, steps, sizeof steps));
    fflush(out);
}

void tw_sweep_view_print_outcome(const json_t *sweep, FILE *out)
{
    const json_t *best = get(sweep, "best");
    const char *metric = str(get(sweep, "spec"), "metric");
    char steps[160], values[1200], text[32];
    metric = metric ? metric : "its metric";
    fprintf(out, "sweep %s %s: %s\n", str(sweep, "name"), str(sweep, "status"), steps_text(sweep, steps, sizeof steps));
    if (!json_is_object(best))
        fprintf(out, "best: none (no trial has reported %s)\n", metric);
    else
        fprintf(out, "best: trial %lld (%s) %s %s with %s\n", (long long)json_integer_value(get(best, "trial")),
                str(get(best, "run"), "name"), metric, result_text(trial_result(best), text, sizeof text),
                values_text(best, ", ", values, sizeof values));
}
