/* evaluations.h — a run's evaluation routes (api_evaluations.c): the metrics of its latest evaluation
 * (the trainer's evaluation.json) and evaluation jobs (a checkpoint on a dataset, in a `tower evaluate`
 * child).
 *
 * Owns: the handlers of /api/v1/runs/{id}/evaluation, /evaluate and /evaluations[/{eval}[/cancel]]. Does not own the
 * document's format or its file (engine/evaluation.h), the child's supervision (scheduler.c) or the
 * store (store.c). */
#ifndef TW_EVALUATIONS_H
#define TW_EVALUATIONS_H

#include "http.h"

void tw_api_run_evaluation(tw_server *S, tw_req *r);
void tw_api_run_evaluate(tw_server *S, tw_req *r);
void tw_api_run_evaluations(tw_server *S, tw_req *r);
void tw_api_run_evaluation_job(tw_server *S, tw_req *r);
void tw_api_run_evaluation_cancel(tw_server *S, tw_req *r);

#endif
