/* runs.h — the run routes (api_runs.c; the list: api_runs_list.c) and the one submission path they share with the demo.
 *
 * Owns: decoding a submission (the engine config with "dataset" naming an uploaded dataset, plus the
 * server keys "name", "max_restarts", "deadline_s", "priority", "processes", "hosts"), validating it with the engine's own parser before
 * anything is stored, writing DIR/runs/<id>/config.json (durable) and then the row (the commit), the run
 * as the API shows it, and the handlers of every /api/v1/runs route. */
#ifndef TW_RUNS_H
#define TW_RUNS_H

#include <jansson.h>

#include "http.h"

/* Submits body (borrowed). On success *run is the new run (new JSON) and *created is 1, or 0 when
 * idem_key (may be NULL) named an existing run, which *run then is. On error *code and err say why. */
tw_status tw_runs_submit(tw_server *S, const json_t *body, const char *idem_key, json_t **run, int *created,
                         tw_api_code *code, tw_error *err);

/* Checks body (borrowed) as tw_runs_submit would, storing nothing: the config, its dataset, the memory it
 * needs (for `together` such runs at once: a sweep's concurrent trials), its launch. On error *code and err
 * say why. */
tw_status tw_runs_check(tw_server *S, const json_t *body, int together, tw_api_code *code, tw_error *err);

/* The stopped run `row` (borrowed) continues from its latest checkpoint with `steps` (at least its own; more
 * for a succeeded run): its config rewritten, the row queued, the scheduler woken. On error *code and err
 * say why (409 when the run's state allows no resume). */
tw_status tw_runs_resume(tw_server *S, const json_t *row, int64_t steps, tw_api_code *code, tw_error *err);

/* Queues the seed MLP (examples/seed_mlp.json, embedded) on the dataset named "fashion-mnist" (the demo's
 * second step, after tw_datasets_demo registered it: serve_main.c). */
tw_status tw_runs_submit_demo(tw_server *S, tw_error *err);

/* Completes the config.json of the queued run `row` when it was submitted while its dataset converted (its
 * "dataset" still names the upload): the engine's dataset object filled in, the config validated as at
 * submission (model, init_from, memory) and written durably. The scheduler calls it before it starts a run
 * whose dataset no longer converts. TW_OK (also when there was nothing to complete); TW_ERR_INVALID: the
 * run cannot start (*reason is "bad_dataset" or "bad_config", static; err says why, naming a failed
 * dataset's error); else the config could not be read or written. */
tw_status tw_runs_complete(tw_server *S, const json_t *row, const char **reason, tw_error *err);

/* A run row as the API shows it (new JSON): a running run whose cancel was asked shows "cancelling". */
json_t *tw_run_present(tw_server *S, const json_t *row);
/* tw_run_present with the run's dataset row ds (borrowed; NULL: gone) already read (the list reads each
 * dataset once: api_runs_list.c). */
json_t *tw_run_present_with(tw_server *S, const json_t *row, const json_t *ds);

/* The keys of a presented run (tw_run_present) that GET /api/v1/runs?fields=a,b may choose, '|' between
 * them (the OpenAPI pattern of `fields` is built from it; "all" or "*" chooses every one). */
#define TW_RUN_FIELDS                                                                                        \
    "id|name|dataset|status|priority|reason|error|config|towers|steps|step|metrics|devices|eta_s|created|"   \
    "started|first_started|finished|restarts|max_restarts|deadline_s|not_before|folder|logdir|tensorboard|" \
    "tensorboard_url|class_names|warnings|processes|hosts|attempts|total_time_s|resources|waiting_for|queue_position|expected_start"

void tw_api_runs_list(tw_server *S, tw_req *r);
void tw_api_runs_create(tw_server *S, tw_req *r);
void tw_api_run_get(tw_server *S, tw_req *r);
void tw_api_run_cancel(tw_server *S, tw_req *r);
void tw_api_run_delete(tw_server *S, tw_req *r);
void tw_api_run_metrics(tw_server *S, tw_req *r);
void tw_api_run_events(tw_server *S, tw_req *r);
void tw_api_run_log(tw_server *S, tw_req *r);
void tw_api_run_checkpoints(tw_server *S, tw_req *r);
/* The path of the run's kept checkpoint of `step` (-1: the latest) into path[size] (PATH_MAX + 300 fits).
 * Returns 0, or -1 after replying: 404 naming the run and the step (`shown`: as the request wrote it) when
 * there is no such run or checkpoint, or the logged error. For the routes that read a checkpoint (predict,
 * export). */
int tw_api_run_checkpoint_file(tw_server *S, tw_req *r, int64_t step, const char *shown, char *path,
                               size_t size);
void tw_api_run_checkpoint_latest(tw_server *S, tw_req *r);
void tw_api_run_checkpoint_step(tw_server *S, tw_req *r);
void tw_api_run_priority(tw_server *S, tw_req *r);
void tw_api_run_resume(tw_server *S, tw_req *r);

/* POST /api/v1/runs/{id}/predict (api_predict.c): the body's upload ops (buffered, capped) and the handler. */
extern const tw_upload_ops TW_API_RUN_PREDICT;
void tw_api_run_predict(tw_server *S, tw_req *r);

#endif
