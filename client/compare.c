/* compare.c — the compare view of runs. See compare.h. */
#include "compare.h"

#include <stdlib.h>
#include <string.h>

#include "table.h"

/* Adds every leaf of v under prefix to flat (key: dotted path, value: a borrowed-then-copied leaf). */
static void flatten(const json_t *v, const char *prefix, json_t *flat)
{
    char key[1024];
    const char *k;
    json_t *child;
    size_t i;
    if (json_is_object(v) && json_object_size(v)) {
        json_object_foreach((json_t *)v, k, child) {
            snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", k);
            flatten(child, key, flat);
        }
    } else if (json_is_array(v) && json_array_size(v)) {
        json_array_foreach(v, i, child) {
            snprintf(key, sizeof key, "%s[%zu]", prefix, i);
            flatten(child, key, flat);
        }
    } else {
        json_object_set(flat, prefix, (json_t *)v);
    }
}

/* A leaf as a cell: strings bare, everything else as compact JSON (malloc'd; NULL when absent). */
static char *cell_text(const json_t *v)
{
    if (!v)
        return NULL;
    if (json_is_string(v))
        return strdup(json_string_value(v));
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(7));
}

/* A row: label, then per run the text of the leaf of flats[r] at key (or metric, for the metrics). */
static int add_row(tw_table *t, const char *label, json_t *const *objs, int n, const char *key)
{
    const char **cells = calloc((size_t)n + 1, sizeof *cells);
    int rc = cells ? 0 : -1;
    for (int r = 0; cells && r < n; r++)
        cells[r + 1] = cell_text(json_object_get(objs[r], key));
    if (cells) {
        cells[0] = label;
        rc = tw_table_add(t, cells);
        for (int r = 0; r < n; r++)
            free((char *)cells[r + 1]);
    }
    free(cells);
    return rc;
}

/* Whether the leaf at key differs between any two of flats[n] (a missing leaf differs from a present one). */
static int differs(json_t *const *flats, int n, const char *key)
{
    for (int r = 1; r < n; r++)
        if (!json_equal(json_object_get(flats[0], key), json_object_get(flats[r], key)) &&
            (json_object_get(flats[0], key) || json_object_get(flats[r], key)))
            return 1;
    return 0;
}

/* The rows of the config keys that differ, in the order the first run that has them lists them. */
static int add_differing(tw_table *t, json_t *const *flats, int n)
{
    json_t *done = json_object();
    int rc = done ? 0 : -1;
    for (int r = 0; !rc && r < n; r++) {
        const char *key;
        json_t *v;
        json_object_foreach(flats[r], key, v) {
            if (json_object_get(done, key) || !differs(flats, n, key))
                continue;
            json_object_set_new(done, key, json_true());
            rc |= add_row(t, key, flats, n, key);
        }
    }
    json_decref(done);
    return rc;
}

static int add_header(tw_table *t, json_t *const *runs, int n)
{
    static const char *const ROWS[] = {"name", "status", "step", "dataset"};
    int rc = add_row(t, "id", runs, n, "id") ? -1 : 0;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        if (!strcmp(ROWS[i], "dataset")) {
            json_t *names[n];
            for (int r = 0; r < n; r++)
                names[r] = json_object_get(runs[r], "dataset");
            rc |= add_row(t, "dataset", names, n, "name");
        } else {
            rc |= add_row(t, ROWS[i], runs, n, ROWS[i]);
        }
    }
    return rc;
}

/* The row of metric key: each run's value ("%.4f"), the best marked "*" (the highest accuracy, the lowest
 * loss; every run that ties with it as shown) when more than one run has it and not all are equal. */
static int add_metric_row(tw_table *t, json_t *const *metrics, int n, const char *key)
{
    int higher = strstr(key, "accuracy") != NULL, best = -1, have = 0, ties = 0;
    for (int r = 0; r < n; r++) {
        const json_t *v = json_object_get(metrics[r], key);
        if (!json_is_number(v))
            continue;
        have++;
        double x = json_number_value(v), b = best < 0 ? 0 : json_number_value(json_object_get(metrics[best], key));
        if (best < 0 || (higher ? x > b : x < b))
            best = r;
    }
    char text[n][32], best_text[32] = "";
    if (best >= 0)
        snprintf(best_text, sizeof best_text, "%.4f", json_number_value(json_object_get(metrics[best], key)));
    for (int r = 0; r < n; r++) {
        const json_t *v = json_object_get(metrics[r], key);
        snprintf(text[r], sizeof text[r], "%.4f", json_number_value(v));
        ties += json_is_number(v) && !strcmp(text[r], best_text);
    }
    const char *cells[n + 1];
    cells[0] = key;
    for (int r = 0; r < n; r++) {
        const json_t *v = json_object_get(metrics[r], key);
        if (have > 1 && ties < have && json_is_number(v) && !strcmp(text[r], best_text))
            strcat(text[r], "*");
        cells[r + 1] = json_is_number(v) ? text[r] : NULL;
    }
    return tw_table_add(t, cells);
}

/* Prints a heading line, then t (empty: `none` instead). */
static void print_section(const char *heading, const tw_table *t, const char *none, FILE *out)
{
    fprintf(out, "\n%s\n", heading);
    if (t->rows)
        tw_table_print(t, out);
    else
        fprintf(out, "  %s\n", none);
}

int tw_compare_print(json_t *const *runs, int n, FILE *out)
{
    static const char *const METRICS[] = TW_COMPARE_METRICS;
    json_t *flats[n], *metrics[n];
    for (int r = 0; r < n; r++) {
        flats[r] = json_object();
        if (flats[r])
            flatten(json_object_get(runs[r], "config"), "", flats[r]);
        json_object_del(flats[r], "name"); /* shown in the runs' rows */
        metrics[r] = json_object_get(runs[r], "metrics");
    }
    tw_table head, config, final;
    int rc = tw_table_init(&head, n + 1, NULL) | tw_table_init(&config, n + 1, NULL) |
             tw_table_init(&final, n + 1, NULL); /* no header rows: the first row is the runs' ids */
    rc |= add_header(&head, runs, n);
    rc |= add_differing(&config, flats, n);
    for (size_t i = 0; i < sizeof METRICS / sizeof METRICS[0]; i++)
        rc |= add_metric_row(&final, metrics, n, METRICS[i]);
    if (!rc) {
        tw_table_print(&head, out);
        print_section("Config (the keys that differ)", &config, "the same in every run", out);
        print_section("Final metrics (* the best: highest accuracy, lowest loss; _ema: the EMA weights')", &final,
                      "none yet", out);
    }
    tw_table_free(&head);
    tw_table_free(&config);
    tw_table_free(&final);
    for (int r = 0; r < n; r++)
        json_decref(flats[r]);
    return rc;
}
