/* api_system.c — health, devices, the OpenAPI document, Prometheus metrics and the static files.
 * The OpenAPI document (3.1) is generated from the route table and the tables that own each shape (see
 * "OpenAPI" below); the security scheme is declared only when the server has a token. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "assets.h"
#include "config.h"
#include "launch.h"
#include "runs.h"
#include "scalars_cache.h"
#include "scheduler.h"
#include "store.h"

void tw_api_health(tw_server *S, tw_req *r)
{
    json_t *counts;
    tw_error err;
    if (tw_store_run_counts(S->store, &counts, &err) != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    tw_reply_json(r, 200, json_pack("{s:s, s:s, s:f, s:O, s:O}", "status", "ok", "version", TW_VERSION,
                                    "uptime_s", tw_now_wall() - S->started, "queued",
                                    json_object_get(counts, tw_run_state_name(TW_RUN_QUEUED)), "running",
                                    json_object_get(counts, tw_run_state_name(TW_RUN_RUNNING))));
    json_decref(counts);
}

void tw_api_devices(tw_server *S, tw_req *r)
{
    tw_reply_json(r, 200, json_pack("{s:o}", "devices", tw_scheduler_devices(S->sched)));
}

/* ---- OpenAPI ----
 *
 * The document is generated: the paths, methods, path and query parameters from the route table
 * (routes.c); the run config's schema from the engine's tables (tw_config_json_schema) plus the server's
 * own keys; the envelope's code enum from http.c's table and the states from store.c's. What the table
 * does not hold (the schema of each reply and body, each parameter's type) is in the lookup tables
 * below, keyed by method + pattern and by parameter name: a new route gets its schemas by a row here,
 * and one without a row is still listed (with its description only). */

/* The 2xx reply and the JSON body of a route (a row whose route is not in the table is unused). */
static const struct {
    const char *method, *pattern;
    const char *type;   /* the 2xx reply's media type */
    const char *schema; /* its schema, a name in components/schemas; NULL: none */
    int also;           /* another 2xx the route answers with the same reply (0: none) */
    const char *body;   /* a JSON route's body, a name in components/schemas; NULL: any object */
} REPLIES[] = {
    {"GET", "/api/v1/health", "application/json", "Health", 0, NULL},
    {"GET", "/api/v1/devices", "application/json", "Devices", 0, NULL},
    {"GET", "/api/v1/openapi.json", "application/json", "OpenApi", 0, NULL},
    {"GET", "/api/v1/datasets", "application/json", "DatasetList", 0, NULL},
    {"POST", "/api/v1/datasets", "application/json", "Dataset", 201, NULL}, /* 201: a TFRecord, ready at once */
    {"GET", "/api/v1/datasets/{id}", "application/json", "Dataset", 0, NULL},
    {"GET", "/api/v1/datasets/{id}/samples", "application/json", "Samples", 0, NULL},
    {"GET", "/api/v1/runs", "application/json", "RunList", 0, NULL},
    {"POST", "/api/v1/runs", "application/json", "RunCreated", 0, "RunConfig"},
    {"GET", "/api/v1/runs/{id}", "application/json", "Run", 0, NULL},
    {"POST", "/api/v1/runs/{id}/cancel", "application/json", "Run", 0, NULL},
    {"POST", "/api/v1/runs/{id}/resume", "application/json", "Run", 0, "Resume"},
    {"POST", "/api/v1/runs/{id}/priority", "application/json", "Run", 0, "Priority"},
    {"GET", "/api/v1/runs/{id}/metrics", "application/json", "Metrics", 0, NULL},
    {"GET", "/api/v1/runs/{id}/events", "text/event-stream", NULL, 0, NULL},
    {"GET", "/api/v1/runs/{id}/log", "text/plain", NULL, 0, NULL},
    {"GET", "/api/v1/runs/{id}/checkpoints", "application/json", "Checkpoints", 0, NULL},
    {"GET", "/api/v1/runs/{id}/checkpoints/latest", "application/octet-stream", NULL, 0, NULL},
    {"GET", "/api/v1/runs/{id}/checkpoints/{step}", "application/octet-stream", NULL, 0, NULL},
    {"POST", "/api/v1/runs/{id}/predict", "application/json", "Prediction", 0, "PredictInputs"},
    {"POST", "/api/v1/runs/{id}/evaluate", "application/json", NULL, 0, "EvaluateRequest"},
    {"GET", "/api/v1/runs/{id}/export", "application/octet-stream", NULL, 0, NULL},
    {"GET", "/api/v1/sweeps", "application/json", "SweepList", 0, NULL},
    {"POST", "/api/v1/sweeps", "application/json", "Sweep", 0, "SweepRequest"},
    {"GET", "/api/v1/sweeps/{id}", "application/json", "Sweep", 0, NULL},
    {"POST", "/api/v1/sweeps/{id}/cancel", "application/json", "Sweep", 0, NULL},
    {"POST", "/api/v1/sweeps/{id}/resume", "application/json", "Sweep", 0, NULL},
    {"GET", "/metrics", "text/plain", NULL, 0, NULL},
    {"GET", "/", "text/html", NULL, 0, NULL},
};

/* The schema of each path and query parameter, by name (the route table names them; http.c refuses other
 * query parameters); one not listed is a non-empty string. */
static const struct {
    const char *name, *schema; /* JSON text */
} PARAM_SCHEMAS[] = {
    {"step", "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 9223372036854775807}"}, /* strtoll's range */
    {"limit", "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000, \"default\": 50}"},
    {"offset", "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 1099511627776, \"default\": 0}"},
    {"tail", "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 100000, \"default\": 200}"},
    {"n", "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 64, \"default\": 16}"},
    {"name", "{\"$ref\": \"#/components/schemas/Name\"}"},
    {"label_column", "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 1024}"},
    {"validation_split", "{\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 0.5}"},
    {"split_seed", "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 9223372036854775807, \"default\": 0}"},
    {"class_names", "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 1024}"},
    {"image_size", "{\"type\": \"string\", \"pattern\": \"^[0-9]{1,5}(x[0-9]{1,5})?$\", \"description\": \"an image"
                   " folder's stored size: HxW, or one side for a square\"}"},
    {"channels", "{\"type\": \"integer\", \"enum\": [1, 3], \"default\": 3}"},
    {"resize", "{\"type\": \"string\", \"enum\": [\"crop\", \"pad\"], \"default\": \"crop\"}"},
    {"status", "{\"$ref\": \"#/components/schemas/RunState\"}"},
    {"checkpoint", "{\"type\": \"string\", \"pattern\": \"^(latest|[0-9]{1,18})$\", \"default\": \"latest\"}"},
    {"weights", "{\"type\": \"string\", \"enum\": [\"raw\", \"ema\"]}"},
    {"top_k", "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000, \"default\": 5}"},
    {"format", "{\"type\": \"string\", \"enum\": [\"tf\", \"onnx\"]}"},
    {"names", "{\"type\": \"string\", \"enum\": [\"tower\", \"seed\"], \"default\": \"tower\", \"description\":"
              " \"a tf export's variable names: tower (layer1/weights, an int64 global_step) or seed (the seed"
              " program's graph: layer1/w, layer1/bias, an int32 Variable)\"}"},
    {"fields", "{\"type\": \"string\", \"maxLength\": 1024, \"pattern\": \"^(all|[*]|(" TW_RUN_FIELDS ")(,(" TW_RUN_FIELDS
               "))*)$\", \"description\": \"the run fields each listed run shows (id always); all or *: every field;"
               " absent, every field but config and class_names (on the run's own route)\"}"},
};

/* names.c's rule (tw_name_valid) as a pattern: what a run or dataset name and a dataset reference are. */
#define NAME_PATTERN "^(?!.*[.][.])[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

/* The reply schemas, as JSON text; Run, Dataset, RunConfig and the enums are built in components(). */
static const char *const REPLY_SCHEMAS[][2] = {
    {"Name", "{\"type\": \"string\", \"pattern\": \"" NAME_PATTERN "\"}"},
    {"Health", "{\"type\": \"object\", \"required\": [\"status\", \"version\", \"uptime_s\", \"queued\", \"running\"],"
               " \"properties\": {\"status\": {\"type\": \"string\"}, \"version\": {\"type\": \"string\"},"
               " \"uptime_s\": {\"type\": \"number\"}, \"queued\": {\"type\": \"integer\"},"
               " \"running\": {\"type\": \"integer\"}}}"},
    {"Devices", "{\"type\": \"object\", \"required\": [\"devices\"], \"properties\": {\"devices\": {\"type\": \"array\","
                " \"items\": {\"type\": \"object\", \"required\": [\"id\", \"kind\", \"name\", \"run\"], \"properties\":"
                " {\"id\": {\"type\": \"string\"}, \"kind\": {\"type\": \"string\"}, \"name\": {\"type\": \"string\"},"
                " \"run\": {\"type\": [\"string\", \"null\"]}}}}}}"},
    {"OpenApi", "{\"type\": \"object\", \"required\": [\"openapi\", \"paths\"]}"},
    {"DatasetList", "{\"type\": \"object\", \"required\": [\"datasets\", \"total\"], \"properties\": {\"datasets\":"
                    " {\"type\": \"array\", \"items\": {\"$ref\": \"#/components/schemas/Dataset\"}},"
                    " \"total\": {\"type\": \"integer\", \"minimum\": 0}}}"},
    {"Samples", "{\"type\": \"object\", \"required\": [\"shape\", \"samples\"], \"properties\": {\"shape\":"
                " {\"type\": [\"array\", \"null\"], \"items\": {\"type\": \"integer\"}}, \"samples\": {\"type\": \"array\","
                " \"items\": {\"type\": \"object\", \"required\": [\"label\"], \"properties\": {\"pixels\": {\"type\":"
                " \"array\", \"items\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 255}}, \"features\":"
                " {\"type\": \"array\", \"items\": {\"type\": \"number\"}}}}}}}"},
    {"RunList", "{\"type\": \"object\", \"required\": [\"runs\", \"total\", \"limit\", \"offset\"], \"properties\":"
                " {\"runs\": {\"type\": \"array\", \"items\": {\"anyOf\": [{\"$ref\": \"#/components/schemas/Run\"},"
                " {\"type\": \"object\", \"required\": [\"id\"], \"description\": \"a Run without config and class_names"
                " (the default), or with ?fields those fields of a Run\"}]}}, \"total\": {\"type\": \"integer\"}, \"limit\": {\"type\": \"integer\"}, \"offset\": {\"type\": \"integer\"}}}"},
    {"RunCreated", "{\"type\": \"object\", \"required\": [\"id\", \"status\", \"logdir\"], \"properties\": {\"id\":"
                   " {\"$ref\": \"#/components/schemas/RunId\"}, \"status\": {\"$ref\": \"#/components/schemas/RunState\"},"
                   " \"logdir\": {\"type\": \"string\"}, \"warnings\": {\"type\": \"array\", \"items\": {\"type\":"
                   " \"string\"}, \"description\": \"e.g. the dataset has no test split: the run is never evaluated\"}}}"},
    {"RunId", "{\"type\": \"string\", \"pattern\": \"^r[0-9a-f]{15}$\"}"},
    {"Resume", "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {\"steps\": {\"type\": "
     "\"integer\", \"minimum\": 1, \"maximum\": 1000000000, \"description\": \"more steps than the run"
     " had (needed to extend a succeeded run)\"}}}"},
    {"Priority", "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"priority\"], \"properti"
     "es\": {\"priority\": {\"$ref\": \"#/components/schemas/RunPriority\"}}}"},
    {"RunPriority", "{\"type\": \"integer\", \"minimum\": -1000, \"maximum\": 1000, \"default\": 0, \"description\": "
     "\"higher runs first; FIFO within one priority\"}"},
    {"InitFrom", "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\", \"weights\"], \""
     "properties\": {\"run\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"the id or na"
     "me of the run whose weights start this one\"}, \"checkpoint\": {\"anyOf\": [{\"type\": \"integer"
     "\", \"minimum\": 0}, {\"const\": \"latest\"}], \"default\": \"latest\"}, \"weights\": {\"enum\":"
     " [\"raw\", \"ema\"]}}}"},
    {"DatasetId", "{\"type\": \"string\", \"pattern\": \"^d[0-9a-f]{15}$\"}"},
    {"Metrics", "{\"type\": \"object\", \"required\": [\"scalars\"], \"properties\": {\"scalars\": {\"type\": \"object\","
                " \"additionalProperties\": {\"type\": \"array\", \"items\": {\"type\": \"array\", \"items\":"
                " {\"type\": \"number\"}, \"minItems\": 3, \"maxItems\": 3}}}}}"},
    {"Prediction", "{\"type\": \"object\", \"required\": [\"run\", \"checkpoint\", \"weights\", \"task\", \"model_cached\","
                   " \"predictions\"], \"properties\": {\"run\": {\"type\": \"string\"}, \"checkpoint\": {\"type\": \"object\","
                   " \"required\": [\"step\", \"file\"], \"properties\": {\"step\": {\"type\": \"integer\"}, \"file\": {\"type\":"
                   " \"string\"}}}, \"weights\": {\"enum\": [\"raw\", \"ema\"]}, \"task\": {\"enum\": [\"classification\","
                   " \"regression\"]}, \"model_cached\": {\"type\": \"boolean\"}, \"predictions\": {\"type\": \"array\", \"items\":"
                   " {\"type\": \"object\", \"required\": [\"input\"], \"properties\": {\"input\": {\"type\": \"string\"},"
                   " \"top_k\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"required\": [\"class\", \"probability\"],"
                   " \"properties\": {\"class\": {\"type\": \"integer\", \"minimum\": 0}, \"name\": {\"type\": \"string\"},"
                   " \"probability\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}}}}, \"outputs\": {\"type\": \"array\","
                   " \"items\": {\"type\": \"number\"}}}}}}}"},
    {"EvaluateRequest", "{\"type\": \"object\", \"required\": [\"dataset\"], \"additionalProperties\": false, \"properties\":"
                        " {\"dataset\": {\"$ref\": \"#/components/schemas/Name\"}, \"checkpoint\": {\"anyOf\": [{\"type\":"
                        " \"integer\", \"minimum\": 0}, {\"const\": \"latest\"}]}, \"weights\": {\"enum\": [\"raw\", \"ema\"]},"
                        " \"split\": {\"enum\": [\"test\", \"train\"]}}}"},
    {"PredictInputs", "{\"type\": \"object\", \"required\": [\"inputs\"], \"additionalProperties\": false, \"properties\":"
                      " {\"inputs\": {\"type\": \"array\", \"minItems\": 1, \"maxItems\": 1024, \"items\": {\"anyOf\": [{\"type\":"
                      " \"string\", \"description\": \"the base64 of a PNG, JPEG or .npy file, or its data: URL\"}, {\"type\": \"array\","
                      " \"description\": \"numbers (nested at most 4 deep) flattening to the model's input size, taken as they are\"}]}}}}"},
    {"Checkpoints", "{\"type\": \"object\", \"required\": [\"checkpoints\", \"latest\"], \"properties\": {\"checkpoints\":"
                    " {\"type\": \"array\", \"items\": {\"type\": \"object\", \"required\": [\"step\", \"file\", \"bytes\"],"
                    " \"properties\": {\"step\": {\"type\": \"integer\"}, \"file\": {\"type\": \"string\"}, \"bytes\":"
                    " {\"type\": \"integer\"}}}}, \"latest\": {\"type\": [\"integer\", \"null\"]}}}"},
    {"Dataset", "{\"type\": \"object\", \"required\": [\"id\", \"name\", \"status\", \"error\", \"created\", \"bytes\"],"
                " \"properties\": {\"id\": {\"$ref\": \"#/components/schemas/DatasetId\"}, \"name\": {\"type\": \"string\"},"
                " \"status\": {\"$ref\": \"#/components/schemas/DatasetState\"}, \"error\": {\"anyOf\": [{\"type\": \"null\"},"
                " {\"$ref\": \"#/components/schemas/ErrorBody\"}]}, \"source\": {\"type\": [\"string\", \"null\"]},"
                " \"created\": {\"type\": \"number\"}, \"bytes\": {\"type\": \"integer\", \"minimum\": 0},"
                " \"train_examples\": {\"type\": [\"integer\", \"null\"]}, \"test_examples\": {\"type\": [\"integer\", \"null\"]},"
                " \"shape\": {\"type\": [\"array\", \"null\"], \"items\": {\"type\": \"integer\"}}, \"dtype\": {\"type\":"
                " [\"string\", \"null\"]}, \"features\": {\"type\": [\"object\", \"null\"], \"additionalProperties\": {\"type\":"
                " \"string\"}}, \"label_histogram\": {\"type\": [\"object\", \"null\"]},"
                " \"class_names\": {\"type\": [\"array\", \"null\"], \"items\": {\"type\": \"string\"}},"
                " \"test_split\": {\"type\": [\"object\", \"null\"]}}}"},
    {"Run", "{\"type\": \"object\", \"required\": [\"id\", \"name\", \"dataset\", \"status\", \"reason\", \"error\","
            " \"step\", \"steps\", \"towers\", \"devices\", \"metrics\", \"created\", \"started\", \"finished\", \"restarts\","
            " \"max_restarts\", \"deadline_s\", \"logdir\", \"folder\", \"tensorboard\", \"config\"], \"properties\": {"
            "\"id\": {\"$ref\": \"#/components/schemas/RunId\"}, \"name\": {\"type\": [\"string\", \"null\"]},"
            " \"dataset\": {\"type\": \"object\", \"required\": [\"id\", \"name\"], \"properties\": {\"id\": {\"type\":"
            " \"string\"}, \"name\": {\"type\": [\"string\", \"null\"]}}}, \"status\": {\"anyOf\": [{\"$ref\":"
            " \"#/components/schemas/RunState\"}, {\"const\": \"cancelling\", \"description\": \"running, its cancel asked: shown until the child is gone\"}]}, \"priority\": {\"$ref\": \"#/components/schemas/RunPriority\"}, \"reason\": {\"type\": [\"string\", \"null\"]},"
            " \"error\": {\"description\": \"the child's last error line (null while there is none)\"},"
            " \"step\": {\"type\": \"integer\", \"minimum\": 0}, \"steps\": {\"type\": \"integer\", \"minimum\": 1},"
            " \"towers\": {\"type\": \"integer\", \"minimum\": 1}, \"devices\": {\"type\": \"array\", \"items\": {\"type\":"
            " \"string\"}}, \"metrics\": {\"type\": \"object\"}, \"created\": {\"type\": \"number\"}, \"started\":"
            " {\"type\": [\"number\", \"null\"]}, \"first_started\": {\"type\": [\"number\", \"null\"]}, \"finished\":"
            " {\"type\": [\"number\", \"null\"]}, \"eta_s\": {\"type\": [\"number\", \"null\"]}, \"not_before\": {\"type\":"
            " \"number\"}, \"restarts\": {\"type\": \"integer\", \"minimum\": 0}, \"max_restarts\": {\"type\": \"integer\","
            " \"minimum\": 0}, \"deadline_s\": {\"type\": \"number\", \"minimum\": 0}, \"logdir\": {\"type\": \"string\"},"
            " \"folder\": {\"type\": \"string\", \"description\": \"the run's folder under DATA/runs: TensorBoard's name"
            " for it (NAME-rXXXXXX for a named run, the id otherwise)\"},"
            " \"tensorboard\": {\"type\": \"string\"}, \"tensorboard_url\": {\"type\": [\"string\", \"null\"]},"
            " \"class_names\": {\"type\": [\"array\", \"null\"], \"items\": {\"type\": \"string\"}, \"description\":"
            " \"the dataset's class names: name k is class k's\"}, \"warnings\": {\"type\": \"array\", \"items\": {\"type\":"
            " \"string\"}, \"description\": \"e.g. the dataset has no test split: the run is never evaluated\"},"
            " \"processes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"processes the run trains"
            " in (1: the trainer alone; more: started by the server's --launcher)\"}, \"hosts\": {\"type\":"
            " \"array\", \"items\": {\"type\": \"string\"}, \"description\": \"the hosts given to the launcher\"},"
            " \"attempts\": {\"type\": \"array\", \"description\": \"every start of the trainer: attempt, started, ended"
            " (null while it runs), step_start, step_end, reason (why it ended)\", \"items\": {\"type\": \"object\","
            " \"required\": [\"attempt\", \"started\", \"ended\", \"step_start\", \"step_end\", \"reason\"]}},"
            " \"total_time_s\": {\"type\": \"number\", \"minimum\": 0, \"description\": \"seconds trained across"
            " the attempts, the running one to now\"}, \"resources\": {\"type\": [\"object\", \"null\"],"
            " \"description\": \"while running: cpu_percent, rss_bytes, gpu_utilization_percent, gpu_memory_bytes\"},"
            " \"config\": {\"type\": \"object\", \"description\": \"the run config"
            " as submitted\"}}}"},
    {"SweepRow", "{\"type\": \"object\", \"required\": [\"id\", \"name\", \"status\", \"created\", \"finished\","
                 " \"spec\", \"config\"], \"properties\": {\"id\": {\"type\": \"string\", \"pattern\": \"^s[0-9a-f]{15}$\"},"
                 " \"name\": {\"$ref\": \"#/components/schemas/Name\"}, \"status\": {\"type\": \"string\", \"enum\":"
                 " [\"running\", \"succeeded\", \"cancelled\"]}, \"created\": {\"type\": \"number\"}, \"finished\":"
                 " {\"type\": [\"number\", \"null\"]}, \"spec\": {\"type\": \"object\", \"description\": \"space,"
                 " searcher, metric, maximize as submitted\"}, \"config\": {\"type\": \"object\", \"description\":"
                 " \"the base run config\"}}}"},
    {"SweepList", "{\"type\": \"object\", \"required\": [\"sweeps\"], \"properties\": {\"sweeps\": {\"type\":"
                  " \"array\", \"items\": {\"$ref\": \"#/components/schemas/SweepRow\"}}}}"},
    {"SweepTrial", "{\"type\": \"object\", \"required\": [\"trial\", \"values\", \"rung\", \"results\", \"run\"],"
                   " \"properties\": {\"trial\": {\"type\": \"integer\", \"minimum\": 0}, \"values\": {\"type\":"
                   " \"object\", \"description\": \"the searched keys' values\"}, \"rung\": {\"type\": \"integer\","
                   " \"minimum\": 0}, \"results\": {\"type\": \"array\", \"items\": {\"type\": [\"number\", \"null\"]},"
                   " \"description\": \"the metric at the end of each rung it finished\"}, \"run\": {\"type\": \"object\","
                   " \"required\": [\"id\", \"name\", \"status\", \"step\", \"steps\"]}}}"},
    {"Sweep", "{\"allOf\": [{\"$ref\": \"#/components/schemas/SweepRow\"}, {\"type\": \"object\", \"required\":"
              " [\"trials\", \"rung_steps\", \"best\", \"steps_trained\", \"steps_full\"], \"properties\": {"
              "\"trials\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/components/schemas/SweepTrial\"}},"
              " \"rung_steps\": {\"type\": \"array\", \"items\": {\"type\": \"integer\", \"minimum\": 1}},"
              " \"best\": {\"anyOf\": [{\"$ref\": \"#/components/schemas/SweepTrial\"}, {\"type\": \"null\"}]},"
              " \"steps_trained\": {\"type\": \"integer\", \"minimum\": 0}, \"steps_full\": {\"type\": \"integer\","
              " \"minimum\": 0, \"description\": \"the steps of every trial trained to the top rung\"},"
              " \"logdir\": {\"type\": \"string\", \"description\": \"the sweep's HParams experiment: one session"
              " per trial\"}, \"tensorboard\": {\"type\": \"string\"}}}]}"},
    {"SweepRequest", "{\"type\": \"object\", \"required\": [\"name\", \"config\", \"space\", \"metric\"],"
                     " \"additionalProperties\": false, \"properties\": {\"name\": {\"$ref\": \"#/components/schemas/Name\"},"
                     " \"config\": {\"$ref\": \"#/components/schemas/RunConfig\"}, \"space\": {\"type\": \"object\","
                     " \"minProperties\": 1, \"maxProperties\": 16, \"propertyNames\": {\"minLength\": 1, \"maxLength\": 127},"
                     " \"additionalProperties\": {\"anyOf\": [{\"type\":"
                     " \"array\", \"minItems\": 1, \"maxItems\": 64}, {\"type\": \"object\", \"required\": [\"type\"],"
                     " \"properties\": {\"type\": {\"enum\": [\"choice\", \"uniform\", \"log_uniform\", \"int\"]},"
                     " \"values\": {\"type\": \"array\"}, \"min\": {\"type\": \"number\"}, \"max\": {\"type\":"
                     " \"number\"}, \"count\": {\"type\": \"integer\", \"minimum\": 2, \"maximum\": 64}}}]}},"
                     " \"searcher\": {\"type\": \"object\", \"required\": [\"type\"], \"properties\": {\"type\":"
                     " {\"enum\": [\"grid\", \"random\", \"asha\"]}, \"seed\": {\"type\": \"integer\", \"minimum\": 0},"
                     " \"max_trials\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1024}, \"max_steps\":"
                     " {\"type\": \"integer\", \"minimum\": 1}, \"reduction_factor\": {\"type\": \"integer\", \"minimum\":"
                     " 2, \"maximum\": 16}, \"rungs\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 8},"
                     " \"max_concurrent\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 64}, \"sample\": {\"enum\":"
                     " [\"random\", \"grid\"]}}}, \"metric\":"
                     " {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 63}, \"maximize\": {\"type\": \"boolean\"}}}"},
};

/* The run config a POST /api/v1/runs takes: the engine's schema without the file paths, with "dataset"
 * naming an uploaded dataset (a name or id, or an object with "name" and the engine's dataset keys as
 * overrides), the server's keys name, max_restarts, deadline_s, priority (api_runs.c, take_server_keys),
 * processes and hosts (launch.h)
 * and "init_from" naming a run, not a file (api_runs.c, take_init_from). */
static json_t *run_config_schema(void)
{
    json_t *s = tw_config_json_schema(0);
    json_t *props = json_object_get(s, "properties");
    json_t *ds = json_object_get(props, "dataset"); /* borrowed: becomes the override object */
    if (!ds)
        return s;
    json_object_set_new(ds, "required", json_pack("[s]", "name"));
    json_object_set_new(json_object_get(ds, "properties"), "name", json_pack("{s:s}", "$ref", "#/components/schemas/Name"));
    json_object_set_new(props, "dataset", json_pack("{s:[{s:s}, O]}", "anyOf", "$ref", "#/components/schemas/Name", ds));
    json_object_set_new(props, "name", json_pack("{s:s}", "$ref", "#/components/schemas/Name"));
    json_object_set_new(props, "max_restarts", json_pack("{s:s, s:i, s:i}", "type", "integer", "minimum", 0, "maximum", 100));
    json_object_set_new(props, "deadline_s", json_pack("{s:s, s:i, s:f}", "type", "number", "minimum", 0, "maximum", 1e8));
    json_object_set_new(props, "priority", json_pack("{s:s}", "$ref", "#/components/schemas/RunPriority"));
    json_object_set_new(props, "processes", json_pack("{s:s, s:i, s:i}", "type", "integer", "minimum", 1, "maximum",
                                                      TW_LAUNCH_MAX_PROCESSES));
    json_object_set_new(props, "hosts", json_pack("{s:s, s:i, s:{s:s, s:s, s:i}}", "type", "array", "maxItems",
                                                  TW_LAUNCH_MAX_HOSTS, "items", "type", "string", "pattern",
                                                  "^[A-Za-z0-9][A-Za-z0-9._-]*(:[1-9][0-9]{0,3})?$", "maxLength",
                                                  TW_LAUNCH_MAX_HOST_BYTES));
    json_object_set_new(props, "init_from", json_pack("{s:[{s:s}, {s:s}]}", "anyOf", "$ref", "#/components/schemas/InitFrom",
                                                      "type", "null"));
    /* a run given hosts trains in more than one process (launch.c refuses hosts for one) */
    json_object_set_new(s, "if", json_pack("{s:{s:{s:i}}, s:[s]}", "properties", "hosts", "minItems", 1, "required", "hosts"));
    json_object_set_new(s, "then", json_pack("{s:{s:{s:i}}, s:[s]}", "properties", "processes", "minimum", 2, "required",
                                             "processes"));
    json_object_del(s, "$schema");
    return s;
}

/* {"type": "string", "enum": [name(0), ..., name(n - 1)]} */
static json_t *name_enum(const char *(*name)(int), int n)
{
    json_t *names = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(names, json_string(name(i)));
    return json_pack("{s:s, s:o}", "type", "string", "enum", names);
}

static const char *code_name(int i) { return tw_api_code_name((tw_api_code)i); }
static const char *run_state(int i) { return tw_run_state_name((tw_run_state)i); }
static const char *dataset_state(int i) { return tw_dataset_state_name((tw_dataset_state)i); }

static json_t *components(const tw_server *S)
{
    json_t *schemas = json_object();
    for (size_t i = 0; i < sizeof REPLY_SCHEMAS / sizeof *REPLY_SCHEMAS; i++)
        json_object_set_new(schemas, REPLY_SCHEMAS[i][0], json_loads(REPLY_SCHEMAS[i][1], 0, NULL));
    json_object_set_new(schemas, "RunConfig", run_config_schema());
    json_object_set_new(schemas, "RunState", name_enum(run_state, TW_RUN_STATES));
    json_object_set_new(schemas, "DatasetState", name_enum(dataset_state, TW_DATASET_STATES));
    json_object_set_new(schemas, "ErrorBody",
                        json_pack("{s:s, s:[s, s], s:{s:o, s:{s:s}}}", "type", "object", "required", "code", "message",
                                  "properties", "code", name_enum(code_name, TW_API_CODES), "message", "type", "string"));
    json_object_set_new(schemas, "Error", json_pack("{s:s, s:[s], s:{s:{s:s}}}", "type", "object", "required", "error",
                                                    "properties", "error", "$ref", "#/components/schemas/ErrorBody"));
    json_t *c = json_pack("{s:o}", "schemas", schemas);
    if (S->opt.token) /* declared only when the server asks for it */
        json_object_set_new(c, "securitySchemes", json_pack("{s:{s:s, s:s}}", "bearer", "type", "http", "scheme", "bearer"));
    return c;
}

/* The index of the route's row in REPLIES, or -1. */
static int reply_row(const tw_route *rt)
{
    for (size_t i = 0; i < sizeof REPLIES / sizeof *REPLIES; i++)
        if (!strcmp(REPLIES[i].method, rt->method) && !strcmp(REPLIES[i].pattern, rt->pattern))
            return (int)i;
    return -1;
}

/* "get_api_v1_runs_id" for GET /api/v1/runs/{id}: the operationId links name. */
static void operation_id(const tw_route *rt, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = rt->method; *p && n + 1 < size; p++)
        out[n++] = (char)(*p | 0x20);
    for (const char *p = rt->pattern; *p && n + 1 < size; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))
            out[n++] = *p;
        else if (out[n - 1] != '_')
            out[n++] = '_';
    while (n > 0 && out[n - 1] == '_')
        n--;
    out[n] = 0;
}

/* The links of a POST to P that creates a resource (its reply holds the new "id"): every route of the
 * table under P/{id}, with that id. Empty for any other route. */
static json_t *links(const tw_route *routes, const tw_route *rt)
{
    json_t *out = json_object();
    size_t n = strlen(rt->pattern);
    for (const tw_route *to = routes; to->method; to++) {
        if (strncmp(to->pattern, rt->pattern, n) || strncmp(to->pattern + n, "/{id}", 5) ||
            (to->pattern[n + 5] && to->pattern[n + 5] != '/'))
            continue;
        char id[128];
        operation_id(to, id, sizeof id);
        json_object_set_new(out, id, json_pack("{s:s, s:{s:s}}", "operationId", id, "parameters", "id",
                                               "$response.body#/id"));
    }
    return out;
}

static json_t *param_schema(const char *name)
{
    for (size_t i = 0; i < sizeof PARAM_SCHEMAS / sizeof *PARAM_SCHEMAS; i++)
        if (!strcmp(PARAM_SCHEMAS[i].name, name))
            return json_loads(PARAM_SCHEMAS[i].schema, 0, NULL);
    return json_pack("{s:s, s:i}", "type", "string", "minLength", 1);
}

static json_t *parameters(const tw_route *rt)
{
    json_t *params = json_array();
    for (const char *p = strchr(rt->pattern, '{'); p; p = strchr(p + 1, '{')) {
        const char *end = strchr(p, '}');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
        json_array_append_new(params, json_pack("{s:s, s:s, s:b, s:o}", "name", name, "in", "path", "required", 1,
                                                "schema", param_schema(name)));
    }
    for (const char *w = rt->query; w && *w;) { /* "!name label_column": '!' marks a required one */
        int required = *w == '!';
        w += required;
        size_t len = strcspn(w, " ");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, w);
        json_array_append_new(params, json_pack("{s:s, s:s, s:b, s:o}", "name", name, "in", "query", "required",
                                                required, "schema", param_schema(name)));
        w += len;
        w += *w == ' ';
    }
    return params;
}

/* The route's 2xx replies (with the links of a created resource). */
static json_t *responses(const tw_route *routes, const tw_route *rt)
{
    int row = reply_row(rt);
    json_t *ok = json_pack("{s:s}", "description", rt->reply);
    if (row >= 0 && rt->status != 204) {
        char ref[96];
        snprintf(ref, sizeof ref, "#/components/schemas/%s", REPLIES[row].schema ? REPLIES[row].schema : "");
        json_t *media = REPLIES[row].schema ? json_pack("{s:{s:s}}", "schema", "$ref", ref) : json_object();
        json_object_set_new(ok, "content", json_pack("{s:o}", REPLIES[row].type, media));
    }
    json_t *created = links(routes, rt);
    if (!strcmp(rt->method, "POST") && json_object_size(created))
        json_object_set(ok, "links", created);
    json_decref(created);
    json_t *out = json_object();
    char code[8];
    snprintf(code, sizeof code, "%d", rt->status);
    json_object_set(out, code, ok);
    if (row >= 0 && REPLIES[row].also) {
        snprintf(code, sizeof code, "%d", REPLIES[row].also);
        json_object_set(out, code, ok);
    }
    json_decref(ok);
    json_object_set_new(out, "default",
                        json_pack("{s:s, s:{s:{s:{s:s}}}}", "description", "the error envelope", "content",
                                  "application/json", "schema", "$ref", "#/components/schemas/Error"));
    return out;
}

/* The body a route takes: a JSON route's from its row (any object without one), the upload's forms. */
static json_t *request_body(const tw_route *rt)
{
    int row = reply_row(rt);
    if ((rt->flags & TW_ROUTE_JSON_BODY) && row >= 0 && REPLIES[row].body) {
        char ref[96];
        snprintf(ref, sizeof ref, "#/components/schemas/%s", REPLIES[row].body);
        return json_pack("{s:b, s:{s:{s:{s:s}}}}", "required", 1, "content", "application/json", "schema", "$ref", ref);
    }
    if (rt->flags & TW_ROUTE_JSON_BODY)
        return json_pack("{s:b, s:{s:{s:{s:s}}}}", "required", 1, "content", "application/json", "schema", "type",
                         "object");
    if (row >= 0 && REPLIES[row].body) { /* an upload that also takes JSON (predict): files as a form, or the JSON */
        char ref[96];
        snprintf(ref, sizeof ref, "#/components/schemas/%s", REPLIES[row].body);
        return json_pack("{s:b, s:{s:{s:{s:s}}, s:{s:{s:s, s:{s:s, s:s}}}}}", "required", 1, "content", "application/json",
                         "schema", "$ref", ref, "multipart/form-data", "schema", "type", "object", "additionalProperties",
                         "type", "string", "format", "binary");
    }
    return json_pack("{s:s, s:b, s:{s:{s:{s:s}}, s:{}, s:{}}}", "description",
                     "multipart: the files as parts (images, labels, test_images, test_labels; features, labels, "
                     "test_features; csv, test_csv; tfrecord, test_tfrecord; archive; classes) and the values "
                     "label_column, test_fraction, validation_split, split_seed, class_names, image_size, channels, "
                     "resize; or the raw bytes of "
                     "one CSV or TFRecord file (any bytes: the converter judges them)",
                     "required", 1, "content", "multipart/form-data", "schema", "type", "object", "text/csv",
                     "application/x-tfrecord");
}

static json_t *operation(const tw_server *S, const tw_route *rt)
{
    char id[128];
    operation_id(rt, id, sizeof id);
    json_t *op = json_pack("{s:s, s:s, s:o, s:o}", "operationId", id, "summary", rt->summary, "parameters",
                           parameters(rt), "responses", responses(S->routes, rt));
    if (rt->flags & (TW_ROUTE_JSON_BODY | TW_ROUTE_UPLOAD))
        json_object_set_new(op, "requestBody", request_body(rt));
    if (S->opt.token && strcmp(rt->method, "GET"))
        json_object_set_new(op, "security", json_pack("[{s:[]}]", "bearer"));
    return op;
}

/* The OpenAPI 3.1 document of the route table served (new JSON). */
static json_t *openapi(const tw_server *S)
{
    json_t *paths = json_object();
    for (const tw_route *rt = S->routes; rt->method; rt++) {
        json_t *item = json_object_get(paths, rt->pattern);
        if (!item)
            json_object_set_new(paths, rt->pattern, item = json_object());
        char method[8];
        size_t i = 0;
        for (; rt->method[i] && i < sizeof method - 1; i++)
            method[i] = (char)(rt->method[i] | 0x20);
        method[i] = 0;
        json_object_set_new(item, method, operation(S, rt));
    }
    return json_pack("{s:s, s:{s:s, s:s}, s:o, s:o}", "openapi", "3.1.0", "info", "title", "Tower", "version",
                     TW_VERSION, "paths", paths, "components", components(S));
}

void tw_api_openapi(tw_server *S, tw_req *r)
{
    tw_reply_json(r, 200, openapi(S));
}

/* ---- Prometheus ---- */

/* The running runs' resource gauges (usage.h), one series per run: run="ID"; the GPU ones only for runs
 * with GPU figures. */
static void run_usage(tw_server *S, FILE *f)
{
    static const struct {
        const char *name, *key, *help;
    } GAUGES[] = {
        {"tower_run_cpu_percent", "cpu_percent", "CPU use of a running run's processes (100 = one core)."},
        {"tower_run_rss_bytes", "rss_bytes", "Resident memory of a running run's processes."},
        {"tower_run_gpu_utilization_percent", "gpu_utilization_percent", "Mean utilisation of a running run's GPUs."},
        {"tower_run_gpu_memory_bytes", "gpu_memory_bytes", "Memory used on a running run's GPUs."},
    };
    json_t *all = tw_scheduler_usage(S->sched, NULL);
    for (size_t g = 0; g < sizeof GAUGES / sizeof GAUGES[0]; g++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", GAUGES[g].name, GAUGES[g].help, GAUGES[g].name);
        const char *id;
        json_t *u;
        json_object_foreach(all, id, u) {
            json_t *v = json_object_get(u, GAUGES[g].key);
            if (json_is_number(v))
                fprintf(f, "%s{run=\"%s\"} %.17g\n", GAUGES[g].name, id, json_number_value(v));
        }
    }
    json_decref(all);
}

void tw_api_prometheus(tw_server *S, tw_req *r)
{
    char *text = NULL;
    size_t len = 0;
    json_t *counts;
    tw_error err;
    if (tw_store_run_counts(S->store, &counts, &err) != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        json_decref(counts);
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    const char *state;
    json_t *v;
    fprintf(f, "# HELP tower_runs Runs by state.\n# TYPE tower_runs gauge\n");
    json_object_foreach(counts, state, v) fprintf(f, "tower_runs{state=\"%s\"} %lld\n", state, (long long)json_integer_value(v));
    fprintf(f, "# HELP tower_queue_length Runs waiting to start.\n# TYPE tower_queue_length gauge\n"
               "tower_queue_length %lld\n",
            (long long)json_integer_value(json_object_get(counts, tw_run_state_name(TW_RUN_QUEUED))));
    json_decref(counts);
    fprintf(f, "# HELP tower_steps_per_second Training steps per second, all running runs.\n"
               "# TYPE tower_steps_per_second gauge\ntower_steps_per_second %g\n",
            tw_scheduler_steps_per_sec(S->sched));
    run_usage(S, f);
    fprintf(f, "# HELP tower_http_requests_total HTTP replies by status.\n# TYPE tower_http_requests_total counter\n");
    for (int i = 0; i < TW_STATUS_SLOTS; i++)
        fprintf(f, "tower_http_requests_total{code=\"%s\"} %llu\n", tw_http_status_label(i),
                (unsigned long long)atomic_load(&S->requests[i]));
    fprintf(f, "# HELP tower_http_errors_total Error replies by envelope code.\n# TYPE tower_http_errors_total counter\n");
    for (int c = 0; c < TW_API_CODES; c++)
        fprintf(f, "tower_http_errors_total{code=\"%s\"} %llu\n", tw_api_code_name((tw_api_code)c),
                (unsigned long long)atomic_load(&S->errors[c]));
    fprintf(f, "# HELP tower_event_bytes_read_total Event-file bytes read for GET /api/v1/runs/{id}/metrics.\n"
               "# TYPE tower_event_bytes_read_total counter\ntower_event_bytes_read_total %llu\n",
            (unsigned long long)tw_scalars_cache_bytes_read(S->scalars));
    fprintf(f, "# HELP tower_uptime_seconds Seconds since the server started.\n# TYPE tower_uptime_seconds gauge\n"
               "tower_uptime_seconds %.3f\n",
            tw_now_wall() - S->started);
    fclose(f);
    tw_reply_text(r, 200, "text/plain; version=0.0.4", text, len);
}

/* ---- static files ---- */

void tw_api_index(tw_server *S, tw_req *r)
{
    (void)S;
    const tw_asset *a = tw_asset_find("index.html");
    if (!a) {
        tw_reply_error(r, TW_API_NOT_FOUND, "this build has no status page");
        return;
    }
    tw_reply_static(r, tw_asset_type(a->name), a->data, a->size);
}

void tw_api_static(tw_server *S, tw_req *r)
{
    const char *name = tw_req_param(r, "file");
    if (!strcmp(name, "chart.js") && S->chartjs_path[0]) {
        int fd = open(S->chartjs_path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            tw_reply_file(r, fd, (uint64_t)st.st_size, "text/javascript; charset=utf-8", NULL);
            return;
        }
        if (fd >= 0)
            close(fd);
    }
    const tw_asset *a = strcmp(name, "index.html") ? tw_asset_find(name) : NULL;
    if (!a) {
        tw_reply_error(r, TW_API_NOT_FOUND, "no static file '%s'", name);
        return;
    }
    tw_reply_static(r, tw_asset_type(a->name), a->data, a->size);
}
