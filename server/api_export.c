/* api_export.c — GET /api/v1/runs/{id}/export?format=tf|onnx&step=S&weights=raw|ema&names=tower|seed. See
 * api_export.h.
 *
 * The checkpoint is one the engine's listing of the run's folder holds: step S, or the one `latest` names
 * (step absent or "latest"). The reply is built in memory (a Tower model is at most a few hundred MiB) and
 * sent from an anonymous memory file (memfd), so that it carries its download name like a checkpoint
 * download does; nothing is written under the data folder or anywhere else. A checkpoint that cannot be
 * exported (damaged, or one without the run config in its metadata) is a 409 naming why. The ONNX graph takes
 * the values as the run's dataset stores them: uint8 ones scaled in the graph, float ones (a CSV) as they are,
 * as the trainer feeds them. `weights` chooses the ONNX graph's weights; a tf archive holds both, so there it
 * is checked and has no effect (the OpenAPI document cannot say that one parameter applies only with a value
 * of another). `names` names the tf export's variables by one of the built-in name maps
 * (engine/export_names.h; a map file is `tower export`'s alone: the server reads no file a client names); it
 * is checked with onnx too and has no effect there, as `weights` with tf. */
#define _GNU_SOURCE
#include "api_export.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "atomic_file.h"
#include "export.h"
#include "reply.h"
#include "runs.h"
#include "server.h"

typedef struct {
    int onnx;
    const char *names; /* tf: a built-in name map's name (borrowed from the query), NULL: Tower's names */
    tw_weights weights;
    long long step; /* -1: the latest; past 2^63 - 1: LLONG_MAX, which no checkpoint has */
    tw_onnx_input input; /* onnx: the graph's input, by the run's dataset (onnx_input) */
} request;

/* `names`: a built-in map's name; replies 400 naming it and returns -1 otherwise. */
static int parse_names(tw_req *r, request *q)
{
    q->names = tw_req_query(r, "names");
    if (!q->names)
        return 0;
    size_t i = 0;
    while (tw_export_names_builtin[i] && strcmp(tw_export_names_builtin[i], q->names))
        i++;
    if (!tw_export_names_builtin[i]) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "names: must be 'tower' or 'seed' (a built-in name map)");
        return -1;
    }
    return 0;
}

/* The query, checked; replies 400 naming the bad parameter and returns -1. */
static int parse_query(tw_req *r, request *q)
{
    const char *format = tw_req_query(r, "format"), *step = tw_req_query(r, "step");
    const char *weights = tw_req_query(r, "weights");
    if (!format || (strcmp(format, "tf") && strcmp(format, "onnx"))) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "format: must be 'tf' or 'onnx'");
        return -1;
    }
    q->onnx = !strcmp(format, "onnx");
    q->weights = TW_WEIGHTS_DEFAULT; /* the EMA when the run kept one */
    if (weights && tw_weights_parse(weights, &q->weights) != 0) { /* tf: both are in the bundle */
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "weights: must be 'raw' or 'ema'");
        return -1;
    }
    if (parse_names(r, q) != 0)
        return -1;
    q->step = -1;
    if (step && strcmp(step, "latest")) {
        char *end;
        errno = 0;
        q->step = strtoll(step, &end, 10);
        if (!*step || *end || (errno && errno != ERANGE) || q->step < 0 || *step == '-') {
            tw_reply_error(r, TW_API_INVALID_ARGUMENT, "step: must be a step number >= 0 or 'latest'");
            return -1;
        }
    }
    return 0;
}

/* The ONNX graph's input for the run's dataset: its values as stored. The trainer multiplies only uint8
 * values by `scale` (engine/input.c); a float dataset (a CSV, float32 NumPy) is fed as it is, so its graph
 * takes the values without the scale (TW_ONNX_INPUT_SCALED). Returns -1 after replying (no such run, an
 * unreadable row). */
static int onnx_input(tw_server *S, tw_req *r, tw_onnx_input *input)
{
    json_t *run = tw_api_row_or_404(S, r, "run", tw_store_run_get), *ds = NULL;
    if (!run)
        return -1;
    tw_error ignored; /* a dataset deleted since: the run's values were uint8 or not, unknown; as stored */
    tw_store_dataset_get(S->store, json_string_value(json_object_get(run, "dataset_id")), &ds, &ignored);
    const char *dtype = json_string_value(json_object_get(json_object_get(ds, "meta"), "dtype"));
    *input = dtype && !strcmp(dtype, "float32") ? TW_ONNX_INPUT_SCALED : TW_ONNX_INPUT_RAW;
    json_decref(ds);
    json_decref(run);
    return 0;
}

/* The export's bytes and download name. */
static tw_status build(const char *path, const request *q, uint8_t **bytes, size_t *len, char *name,
                       size_t size, tw_error *err)
{
    int64_t step;
    if (!q->onnx) {
        tw_export_names *names = NULL;
        if (q->names)
            TW_TRY(tw_export_names_of_builtin(q->names, &names, err));
        tw_status s = tw_export_tf_archive(path, names, 0, bytes, len, &step, err); /* dated 0: the same bytes */
        tw_export_names_destroy(names);
        if (s != TW_OK)
            return s;
        char prefix[64];
        tw_export_tf_name(step, prefix, sizeof prefix);
        snprintf(name, size, "%s.tar", prefix);
        return TW_OK;
    }
    tw_inference *inf;
    TW_TRY(tw_inference_open(path, q->weights, 1, &inf, err));
    tw_status s = tw_export_onnx(inf, q->input, bytes, len, err);
    snprintf(name, size, "model-%lld-%s.onnx", (long long)tw_inference_step(inf),
             tw_inference_weights(inf) == TW_WEIGHTS_EMA ? "ema" : "raw");
    tw_inference_close(inf);
    return s;
}

/* Sends bytes (taken) from an anonymous memory file, as the download `name`. */
static void reply_bytes(tw_req *r, uint8_t *bytes, size_t len, const char *type, const char *name)
{
    tw_error err;
    int fd = memfd_create("tower-export", MFD_CLOEXEC);
    tw_status s = fd >= 0 ? tw_write_all(fd, bytes, len, "export", &err)
                          : tw_error_errno(&err, NULL, "cannot create the export's memory file");
    free(bytes);
    if (s != TW_OK) {
        if (fd >= 0)
            close(fd);
        tw_api_reply_logged(r, &err);
        return;
    }
    tw_reply_file(r, fd, len, type, name);
}

void tw_api_run_export(tw_server *S, tw_req *r)
{
    request q;
    char path[PATH_MAX + 300], name[96];
    if (parse_query(r, &q) != 0 || tw_api_run_checkpoint_file(S, r, q.step, tw_req_query(r, "step"), path, sizeof path) != 0 ||
        onnx_input(S, r, &q.input) != 0)
        return;
    uint8_t *bytes;
    size_t len;
    tw_error err;
    tw_status s = build(path, &q, &bytes, &len, name, sizeof name, &err);
    if (s == TW_ERR_CORRUPT || s == TW_ERR_INVALID || s == TW_ERR_UNSUPPORTED || s == TW_ERR_TRUNCATED) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        tw_reply_error(r, TW_API_CONFLICT, "the checkpoint cannot be exported: %s", msg);
    } else if (s != TW_OK) {
        tw_api_reply_logged(r, &err);
    } else {
        reply_bytes(r, bytes, len, "application/octet-stream", name);
    }
}
