/* compare.h — `tower compare`'s view of runs: the hyperparameters that differ (the config keys whose
 * values are not the same in every run, flattened to dotted paths such as "optimizer.learning_rate" or
 * "model.layers[1].units") and the final metrics side by side. Owns the flattening and the rows; does not
 * own fetching the runs (client_main.c) nor the table's layout (table.h). */
#ifndef TW_COMPARE_H
#define TW_COMPARE_H

#include <stdio.h>

#include <jansson.h>

/* The metrics shown for every run, in order (keys of a run's "metrics"). */
#define TW_COMPARE_METRICS {"loss", "eval_loss", "eval_loss_ema", "eval_accuracy", "eval_accuracy_ema"}

/* Prints the compare view of runs[n] (run objects as GET /api/v1/runs/{id} returns them; borrowed): a
 * row of the runs' ids, their names, statuses, steps and datasets; under the heading "Config" one row per
 * differing config key; under "Final metrics" the metrics (raw, and `_ema` the EMA weights'), the best of
 * each marked "*". Returns -1 out of memory. */
int tw_compare_print(json_t *const *runs, int n, FILE *out);

#endif
