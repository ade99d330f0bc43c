/* routes.c — the one route table of `tower serve`: every path, its handler, and what the OpenAPI
 * document says about it. 404 and 405 come from this table (http.c), and so does /api/v1/openapi.json. */
#include "api.h"
#include "evaluations.h"
#include "api_export.h"
#include "runs.h"
#include "sweeps.h"

#define JSON TW_ROUTE_JSON_BODY

const tw_route TW_ROUTES[] = {
    {"GET", "/api/v1/health", tw_api_health, 0, NULL, 200, "Liveness and queue summary", "{status, version, uptime_s, queued, running}", NULL},
    {"GET", "/api/v1/devices", tw_api_devices, 0, NULL, 200, "Devices runs are scheduled on", "{devices: [{id, kind, name, run}]}", NULL},
    {"GET", "/api/v1/openapi.json", tw_api_openapi, 0, NULL, 200, "This document", "OpenAPI 3.0", NULL},
    {"GET", "/api/v1/datasets", tw_api_datasets_list, 0, NULL, 200, "List datasets, newest first", "{datasets: [dataset], total}", NULL},
    {"POST", "/api/v1/datasets", tw_api_dataset_upload, TW_ROUTE_UPLOAD, &TW_API_DATASET_UPLOAD, 202,
     "Upload a dataset (multipart form, or a raw CSV or TFRecord body); ?name=N", "dataset (202 converting, 201 ready)", "!name label_column validation_split split_seed test_first test_last class_names image_size channels resize shape"},
    {"GET", "/api/v1/datasets/{id}", tw_api_dataset_get, 0, NULL, 200, "Show a dataset", "dataset", NULL},
    {"DELETE", "/api/v1/datasets/{id}", tw_api_dataset_delete, 0, NULL, 204, "Delete a dataset no queued or running run uses", "204", NULL},
    {"GET", "/api/v1/datasets/{id}/samples", tw_api_dataset_samples, 0, NULL, 200, "A few decoded examples; ?n=16", "{shape, samples: [{label, pixels | features}]}", "n"},
    {"GET", "/api/v1/runs", tw_api_runs_list, 0, NULL, 200, "List runs, newest first, streamed; ?status=S&limit=50&offset=0&fields=id,name,status|all (default: every field but config and class_names)", "{total, limit, offset, runs: [run]}", "status limit offset fields"},
    {"POST", "/api/v1/runs", tw_api_runs_create, JSON, NULL, 201, "Submit a run (the tower train config with \"dataset\" naming a dataset)", "{id, status, logdir}", NULL},
    {"GET", "/api/v1/runs/{id}", tw_api_run_get, 0, NULL, 200, "Show a run", "run", NULL},
    {"DELETE", "/api/v1/runs/{id}", tw_api_run_delete, 0, NULL, 204, "Delete a finished run and its files", "204", NULL},
    {"POST", "/api/v1/runs/{id}/cancel", tw_api_run_cancel, 0, NULL, 202, "Cancel a queued or running run (a running one shows \"cancelling\" until it has stopped)", "run", NULL},
    {"POST", "/api/v1/runs/{id}/resume", tw_api_run_resume, JSON, NULL, 202,
     "Continue a cancelled or failed run from its latest checkpoint, or a succeeded one with more steps; body {} or {\"steps\": N}", "run", NULL},
    {"POST", "/api/v1/runs/{id}/priority", tw_api_run_priority, JSON, NULL, 202,
     "Move a queued run in the queue (highest priority first, FIFO within one); body {\"priority\": N}", "run", NULL},
    {"GET", "/api/v1/runs/{id}/metrics", tw_api_run_metrics, 0, NULL, 200, "Scalar series from the run's event files", "{scalars: {tag: [[step, value, wall_time]]}}", NULL},
    {"GET", "/api/v1/runs/{id}/events", tw_api_run_events, 0, NULL, 200, "Server-Sent Events: the run whenever it changes", "text/event-stream", NULL},
    {"GET", "/api/v1/runs/{id}/log", tw_api_run_log, 0, NULL, 200, "The last lines of the run's log; ?tail=200", "text/plain", "tail"},
    {"GET", "/api/v1/runs/{id}/evaluation", tw_api_run_evaluation, 0, NULL, 200, "The run's latest evaluation (raw and EMA weights): accuracy, top5, per-class precision/recall/F1, confusion matrix; or MSE, MAE, R²", "{format, step, kind, classes, class_names, raw: metrics, ema: metrics | null}", NULL},
    {"POST", "/api/v1/runs/{id}/evaluate", tw_api_run_evaluate, JSON, NULL, 202,
     "Evaluate a checkpoint of the run on a compatible dataset in a supervised child; body {\"dataset\": NAME_OR_ID, \"checkpoint\": STEP | \"latest\", \"weights\": \"raw\" | \"ema\", \"split\": \"test\" | \"train\"}", "evaluation job {id, run_id, dataset_id, split, checkpoint, weights, status, error, result, created, started, finished}", NULL},
    {"GET", "/api/v1/runs/{id}/evaluations", tw_api_run_evaluations, 0, NULL, 200, "The run's evaluation jobs, newest first (up to 100)", "{evaluations: [evaluation job]}", NULL},
    {"GET", "/api/v1/runs/{id}/evaluations/{eval}", tw_api_run_evaluation_job, 0, NULL, 200, "An evaluation job; its result (when succeeded) is the evaluation document", "evaluation job", NULL},
    {"POST", "/api/v1/runs/{id}/evaluations/{eval}/cancel", tw_api_run_evaluation_cancel, 0, NULL, 202, "Cancel a queued or running evaluation job", "evaluation job", NULL},
    {"GET", "/api/v1/runs/{id}/checkpoints", tw_api_run_checkpoints, 0, NULL, 200, "The run's checkpoints", "{checkpoints: [{step, file, bytes}], latest}", NULL},
    {"GET", "/api/v1/runs/{id}/checkpoints/latest", tw_api_run_checkpoint_latest, 0, NULL, 200, "Download the latest checkpoint (safetensors)", "application/octet-stream", NULL},
    {"GET", "/api/v1/runs/{id}/checkpoints/{step}", tw_api_run_checkpoint_step, 0, NULL, 200, "Download the kept checkpoint of that step (safetensors)", "application/octet-stream", NULL},
    {"POST", "/api/v1/runs/{id}/predict", tw_api_run_predict, TW_ROUTE_UPLOAD, &TW_API_RUN_PREDICT, 200,
     "Classify inputs with a checkpoint of the run: PNG, JPEG or .npy files (multipart) or {\"inputs\": [...]} (JSON); "
     "?checkpoint=STEP|latest&weights=raw|ema&top_k=5", "{run, checkpoint, weights, task, model_cached, predictions}",
     "checkpoint weights top_k"},
    {"GET", "/api/v1/runs/{id}/export", tw_api_run_export, 0, NULL, 200,
     "Download a checkpoint as a TensorFlow checkpoint (a tar of NAME.index, NAME.data-00000-of-00001 and checkpoint) or an ONNX graph; ?format=tf|onnx&step=S (default: the latest)&weights=raw|ema (onnx)&names=tower|seed (tf: the variables' names; seed: the seed program's graph's)",
     "application/octet-stream (tf: a tar archive; onnx: the ModelProto)", "!format step weights names"},
    {"GET", "/api/v1/sweeps", tw_api_sweeps_list, 0, NULL, 200, "List sweeps, newest first", "{sweeps: [sweep row]}", NULL},
    {"POST", "/api/v1/sweeps", tw_api_sweeps_create, JSON, NULL, 201,
     "Start a sweep: {\"name\", \"config\": a run config, \"space\": {dotted key: values or range}, \"searcher\": "
     "{\"type\": \"grid\" | \"random\" | \"asha\", ...}, \"metric\", \"maximize\"}; every trial's config is checked first",
     "sweep", NULL},
    {"GET", "/api/v1/sweeps/{id}", tw_api_sweep_get, 0, NULL, 200,
     "Show a sweep: its trials (values, rung, results, run), the best so far, the rungs' steps, the steps trained", "sweep",
     NULL},
    {"POST", "/api/v1/sweeps/{id}/cancel", tw_api_sweep_cancel, 0, NULL, 202, "Cancel a running sweep and its queued and running trials", "sweep", NULL},
    {"POST", "/api/v1/sweeps/{id}/resume", tw_api_sweep_resume, 0, NULL, 202, "Resume a cancelled sweep (its cancelled trials continue from their checkpoints)", "sweep", NULL},
    {"DELETE", "/api/v1/sweeps/{id}", tw_api_sweep_delete, 0, NULL, 204, "Delete a sweep that is not running (its runs stay)", "204", NULL},
    {"GET", "/metrics", tw_api_prometheus, 0, NULL, 200, "Prometheus metrics", "text/plain", NULL},
    {"GET", "/", tw_api_index, 0, NULL, 200, "The status page", "text/html", NULL},
    {"GET", "/static/{file}", tw_api_static, 0, NULL, 200, "The status page's files and Chart.js", "the file", NULL},
    {0},
};
