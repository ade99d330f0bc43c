/* sweep_board.h — a sweep as one TensorBoard HParams experiment: `tensorboard --logdir DATA/sweeps/<folder>`
 * lists one session per trial, the searched keys as its hyperparameters and the sweep's metric as its
 * metric (TensorBoard infers the experiment from the sessions, so no experiment summary is written).
 *
 * Owns: DATA/sweeps/<folder>/ (server.h: tw_sweep_dir; <folder> is tw_run_folder_name of the sweep's id and
 * name) and its trials' folders <trial run name>/, each holding small event files: the session (start and
 * end info, written with the trial's first result) and the metric at the end of each rung it finished, a
 * scalar tagged with the metric's name at the rung's step. A result written twice (a server killed between
 * the file and the store) writes the same point again, which TensorBoard shows once. Does not own the
 * summaries' bytes (eventlog/hparams.h, events.h) nor when a result is recorded (sweeps.c). */
#ifndef TW_SWEEP_BOARD_H
#define TW_SWEEP_BOARD_H

#include <jansson.h>
#include <stdint.h>

#include "server.h"

/* Trial `trial_name`'s result `metric` (NAN: the rung failed, written as a FAILURE session without a point)
 * at `step`, the end of rung `rung`, in sweep row `sweep`'s experiment; values: the trial's {key: value}
 * (borrowed); model_uri: the trial run's checkpoint folder. */
tw_status tw_sweep_board_result(tw_server *S, const json_t *sweep, const char *trial_name, const json_t *values,
                                int rung, int64_t step, double metric, const char *model_uri, tw_error *err);

/* The sweep row's folder, DATA/sweeps/<folder> (it may not exist yet), into buf[PATH_MAX]. Returns 0, or -1
 * when the path does not fit. */
int tw_sweep_board_dir(tw_server *S, const json_t *sweep, char *buf);

/* Removes the sweep row's folder (best effort: a deleted sweep's experiment goes with it). */
void tw_sweep_board_remove(tw_server *S, const json_t *sweep);

#endif
