/* compare.h — `tower compare`'s view of runs: the hyperparameters that differ (the config keys whose
 * values are not the same in every run, flattened to dotted paths such as "optimizer.learning_rate" or
 * "model.layers[1].units") and the final metrics side by side. Owns the flattening and the rows; does not
 * own fetching the runs (client_main.c) nor the table's layout (table.h). */
#ifndef TW_COMPARE_H
#define TW_COMPARE_H

#include <stdio.h>

#include <jansson.h>

/* The metrics shown for every run, in order (keys of a run's "metrics"). */
#define TW_COMPARE_METRICS {"loss", "eval_loss", "eval_accuracy", "eval_loss_ema", "eval_accuracy_ema"}

/* Prints the compare table of runs[n] (run objects as GET /api/v1/runs/{id} returns them; borrowed):
 * a header row of the runs' ids, their names, statuses and steps, then one row per differing config
 * key, then the metrics. Returns -1 out of memory. */
int tw_compare_print(json_t *const *runs, int n, FILE *out);

#endif
