/* api_system.c — health, devices, the OpenAPI document, Prometheus metrics and the static files. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "assets.h"
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

/* ---- OpenAPI ---- */

static json_t *operation(const tw_route *rt)
{
    json_t *params = json_array();
    for (const char *p = strchr(rt->pattern, '{'); p; p = strchr(p + 1, '{')) {
        const char *end = strchr(p, '}');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
        json_array_append_new(params, json_pack("{s:s, s:s, s:b, s:{s:s}}", "name", name, "in", "path", "required", 1,
                                                "schema", "type", "string"));
    }
    for (const char *w = rt->query; w && *w;) { /* "!name label_column": '!' marks a required one */
        int required = *w == '!';
        w += required;
        size_t len = strcspn(w, " ");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, w);
        json_array_append_new(params, json_pack("{s:s, s:s, s:b, s:{s:s}}", "name", name, "in", "query", "required",
                                                required, "schema", "type", "string"));
        w += len;
        w += *w == ' ';
    }
    json_t *ok = json_pack("{s:s}", "description", rt->reply);
    char code[8];
    snprintf(code, sizeof code, "%d", rt->status);
    json_t *op = json_pack("{s:s, s:o, s:{s:o, s:{s:s, s:{s:{s:{s:s}}}}}}", "summary", rt->summary, "parameters",
                           params, "responses", code, ok, "default", "description",
                           "error envelope {\"error\": {\"code\", \"message\"}}", "content", "application/json",
                           "schema", "$ref", "#/components/schemas/Error");
    if (rt->flags & (TW_ROUTE_JSON_BODY | TW_ROUTE_UPLOAD))
        json_object_set_new(op, "requestBody",
                            json_pack("{s:b, s:{s:{}}}", "required", 1, "content",
                                      rt->flags & TW_ROUTE_UPLOAD ? "multipart/form-data" : "application/json"));
    if (strcmp(rt->method, "GET"))
        json_object_set_new(op, "security", json_pack("[{s:[]}]", "bearer"));
    return op;
}

/* The OpenAPI 3.0 document of the route table served (new JSON). */
static json_t *openapi(const tw_route *routes)
{
    json_t *paths = json_object();
    for (const tw_route *rt = routes; rt->method; rt++) {
        json_t *item = json_object_get(paths, rt->pattern);
        if (!item)
            json_object_set_new(paths, rt->pattern, item = json_object());
        char method[8];
        size_t i = 0;
        for (; rt->method[i] && i < sizeof method - 1; i++)
            method[i] = (char)(rt->method[i] | 0x20);
        method[i] = 0;
        json_object_set_new(item, method, operation(rt));
    }
    return json_pack(
        "{s:s, s:{s:s, s:s}, s:o, s:{s:{s:{s:s, s:{s:{s:s, s:{s:{s:s}, s:{s:s}}}}}}, s:{s:{s:s, s:s}}}}",
        "openapi", "3.0.3", "info", "title", "Tower", "version", TW_VERSION, "paths", paths, "components",
        "schemas", "Error", "type", "object", "properties", "error", "type", "object", "properties", "code",
        "type", "string", "message", "type", "string", "securitySchemes", "bearer", "type", "http", "scheme",
        "bearer");
}

void tw_api_openapi(tw_server *S, tw_req *r)
{
    tw_reply_json(r, 200, openapi(S->routes));
}

/* ---- Prometheus ---- */

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
    fprintf(f, "# HELP tower_http_requests_total HTTP replies by status.\n# TYPE tower_http_requests_total counter\n");
    for (int i = 0; i < TW_STATUS_SLOTS; i++)
        fprintf(f, "tower_http_requests_total{code=\"%s\"} %llu\n", tw_http_status_label(i),
                (unsigned long long)atomic_load(&S->requests[i]));
    fprintf(f, "# HELP tower_http_errors_total Error replies by envelope code.\n# TYPE tower_http_errors_total counter\n");
    for (int c = 0; c < TW_API_CODES; c++)
        fprintf(f, "tower_http_errors_total{code=\"%s\"} %llu\n", tw_api_code_name((tw_api_code)c),
                (unsigned long long)atomic_load(&S->errors[c]));
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
