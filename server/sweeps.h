/* sweeps.h — hyperparameter sweeps run by the server: the driver (sweeps.c) and the /api/v1/sweeps routes
 * (api_sweeps.c). A sweep is a base run config, a search space and a searcher (searcher.h); its trials are
 * ordinary runs named "<sweep>-t<N>"; server/API.md, "Sweeps", documents the routes. */
#ifndef TW_SWEEPS_H
#define TW_SWEEPS_H

#include "http.h"
#include "searcher.h"

/* One round of every running sweep: each trial's result recorded when it finishes a rung, owed resumes issued,
 * then the searcher's decisions (start a trial, promote one) while fewer than its max_concurrent trials
 * train; a sweep with nothing left to do becomes "succeeded". The scheduler calls it every round (the
 * server's drive_sweeps hook); failures are logged and the next round tries again. now: seconds since the
 * epoch. */
void tw_sweeps_drive(tw_server *S, double now);

/* The spec of a sweep row of the store (borrowed), its base config giving the default steps: as
 * tw_sweep_spec_decode. */
tw_status tw_sweep_spec_of(const json_t *sweep, tw_sweep_spec *s, tw_error *err);

/* The driver's lock, held by each round and by the routes that change a sweep's state (cancel, resume,
 * delete), so a cancelled sweep never starts a trial from a round that read it running. */
void tw_sweeps_lock(void);
void tw_sweeps_unlock(void);

void tw_api_sweeps_create(tw_server *S, tw_req *r);
void tw_api_sweeps_list(tw_server *S, tw_req *r);
void tw_api_sweep_get(tw_server *S, tw_req *r);
void tw_api_sweep_cancel(tw_server *S, tw_req *r);
void tw_api_sweep_resume(tw_server *S, tw_req *r);
void tw_api_sweep_delete(tw_server *S, tw_req *r);

#endif
