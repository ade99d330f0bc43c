/* sweep_view.h — `tower sweep`'s views of a sweep, as GET /api/v1/sweeps/{id} returns one (its "spec",
 * "trials", "rung_steps", "best", "steps_trained" and "steps_full"): the line a created sweep is announced
 * with, the list's rows, the show view (a header, then the trials with one column per searched key and one
 * per rung, the best trial marked) and the lines `--follow` prints on a terminal. Owns their text; does not
 * own fetching the sweeps nor following them (client_main.c), nor the table's layout (table.h). */
#ifndef TW_SWEEP_VIEW_H
#define TW_SWEEP_VIEW_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "table.h"

/* The list's columns: TW_SWEEP_VIEW_LIST_COLS of them, the header's names in order. */
#define TW_SWEEP_VIEW_LIST_COLS 7
#define TW_SWEEP_VIEW_LIST_HEADER {"ID", "NAME", "STATUS", "SEARCHER", "METRIC", "TRIALS", "BEST"}

/* The trials the sweep plans (its steps_full over its top rung's steps), 0 when the sweep does not say. */
int64_t tw_sweep_view_planned(const json_t *sweep);

/* "ID NAME STATUS: SEARCHER, N trials planned, each trained to S steps" (ASHA: "rungs at A, B, C steps"). */
void tw_sweep_view_print_created(const json_t *sweep, FILE *out);

/* The list's row of row (a sweep of GET /api/v1/sweeps; borrowed) with what sweep (the same one as GET
 * /api/v1/sweeps/{id} shows it; NULL: unknown, "-") adds: trials started/planned and the best trial's
 * result. Returns -1 out of memory. */
int tw_sweep_view_add_list_row(tw_table *t, const json_t *row, const json_t *sweep);

/* The show view: name, id, status, the searcher and its settings, the metric and its direction, the rungs'
 * steps, the steps trained against every trial trained to the end (with the percentage) and the best trial;
 * then the trials, the best marked "*". Returns -1 out of memory. */
int tw_sweep_view_print_show(const json_t *sweep, FILE *out);

/* Following on a terminal: a trial's line ("trial 3  NAME  STATUS  STEP/STEPS  METRIC V @S ...  KEY=VALUE
 * ..."), the progress line that is rewritten in place (trials started, training, steps trained), and the
 * closing lines (the sweep's status, the steps it trained, its best trial and that trial's values). */
void tw_sweep_view_print_trial(const json_t *sweep, const json_t *trial, FILE *out);
void tw_sweep_view_print_progress(const json_t *sweep, FILE *out);
void tw_sweep_view_print_outcome(const json_t *sweep, FILE *out);

#endif
