/* api_datasets.c — /api/v1/datasets: list, show, delete, samples (the upload is datasets.c). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "datasets.h"
#include "example.h"
#include "logtext.h"
#include "store.h"
#include "tfrecord.h"

enum { MAX_SAMPLES = 64, MAX_SAMPLE_RECORD = 16 << 20 };

void tw_api_datasets_list(tw_server *S, tw_req *r)
{
    json_t *rows, *shown, *row;
    tw_error err;
    if (tw_store_dataset_list(S->store, &rows, &err) != TW_OK) {
        tw_reply_status(r, &err);
        return;
    }
    shown = json_array();
    size_t i;
    json_array_foreach(rows, i, row) json_array_append_new(shown, tw_dataset_present(row));
    tw_reply_json(r, 200, json_pack("{s:o, s:I}", "datasets", shown, "total", (json_int_t)json_array_size(rows)));
    json_decref(rows);
}

json_t *tw_api_row_or_404(tw_server *S, tw_req *r, const char *kind, tw_store_get_fn get)
{
    const char *id = tw_req_param(r, "id");
    json_t *row;
    tw_error err;
    tw_status s = get(S->store, id, &row, &err);
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "no %s '%s'", kind, id);
    else if (s != TW_OK)
        tw_reply_status(r, &err);
    return row;
}

static json_t *dataset_or_404(tw_server *S, tw_req *r)
{
    return tw_api_row_or_404(S, r, "dataset", tw_store_dataset_get);
}

void tw_api_dataset_get(tw_server *S, tw_req *r)
{
    json_t *row = dataset_or_404(S, r);
    if (row)
        tw_reply_json(r, 200, tw_dataset_present(row));
    json_decref(row);
}

void tw_api_reply_deleted(tw_server *S, tw_req *r, tw_status s, const tw_error *err, const char *kind,
                          int (*dir_of)(const tw_server *, const char *, char *, size_t))
{
    const char *id = tw_req_param(r, "id");
    char dir[PATH_MAX];
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "no %s '%s'", kind, id);
    else if (s == TW_ERR_INVALID)
        tw_reply_error(r, TW_API_CONFLICT, "%s", err->message);
    else if (s != TW_OK)
        tw_reply_status(r, err);
    else {
        if (dir_of(S, id, dir, sizeof dir) == 0)
            tw_remove_tree(dir);
        tw_server_changed(S);
        tw_reply_empty(r, 204);
    }
}

void tw_api_reply_logged(tw_req *r, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    tw_log("tower serve: a %s request failed: %s", tw_req_method(r), msg);
    tw_reply_status(r, err);
}

void tw_api_dataset_delete(tw_server *S, tw_req *r)
{
    tw_error err;
    tw_status s = tw_store_dataset_delete(S->store, tw_req_param(r, "id"), &err);
    tw_api_reply_deleted(S, r, s, &err, "dataset", tw_dataset_dir);
}

/* One Example as {"label", "pixels" | "features"}. */
static json_t *sample_json(const tw_example *ex)
{
    json_t *s = json_object();
    tw_feature f;
    if (tw_example_find(ex, "label", &f) && f.count == 1)
        json_object_set_new(s, "label", f.kind == TW_FEATURE_INT64 ? json_integer(f.int64s[0])
                                                                   : json_real(f.floats[0]));
    size_t len;
    const uint8_t *px;
    if (tw_example_find(ex, "image_raw", &f) && f.kind == TW_FEATURE_BYTES && f.count == 1 &&
        (px = tw_feature_bytes_at(&f, 0, &len))) {
        json_t *arr = json_array();
        for (size_t k = 0; k < len; k++)
            json_array_append_new(arr, json_integer(px[k]));
        json_object_set_new(s, "pixels", arr);
    }
    if (tw_example_find(ex, "features", &f) && f.kind == TW_FEATURE_FLOAT) {
        json_t *arr = json_array();
        for (size_t k = 0; k < f.count; k++)
            json_array_append_new(arr, json_real(f.floats[k]));
        json_object_set_new(s, "features", arr);
    }
    return s;
}

void tw_api_dataset_samples(tw_server *S, tw_req *r)
{
    long n;
    json_t *row = dataset_or_404(S, r);
    if (!row || tw_req_query_int(r, "n", 1, MAX_SAMPLES, 16, &n)) {
        json_decref(row);
        return;
    }
    json_t *shown = tw_dataset_present(row);
    json_decref(row);
    if (strcmp(json_string_value(json_object_get(shown, "status")), "ready")) {
        json_decref(shown);
        tw_reply_error(r, TW_API_CONFLICT, "dataset '%s' is not ready", tw_req_param(r, "id"));
        return;
    }
    char path[PATH_MAX + 32];
    tw_dataset_dir(S, tw_req_param(r, "id"), path, PATH_MAX);
    strcat(path, "/train.tfrecord");
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.max_record_bytes = MAX_SAMPLE_RECORD;
    tw_tfrecord_reader *rd = NULL;
    tw_error err;
    json_t *samples = json_array();
    tw_status s = tw_tfrecord_reader_open(path, &o, &rd, &err);
    for (long i = 0; s == TW_OK && i < n; i++) {
        const uint8_t *data;
        size_t len;
        tw_example *ex;
        if ((s = tw_tfrecord_read(rd, &data, &len, &err)) != TW_OK)
            break;
        if ((s = tw_example_parse(data, len, path, -1, &ex, &err)) != TW_OK)
            break;
        json_array_append_new(samples, sample_json(ex));
        tw_example_destroy(ex);
    }
    tw_tfrecord_reader_close(rd);
    if (s != TW_OK && s != TW_END) {
        json_decref(samples);
        json_decref(shown);
        tw_api_reply_logged(r, &err);
        return;
    }
    tw_reply_json(r, 200, json_pack("{s:O, s:o}", "shape", json_object_get(shown, "shape"), "samples", samples));
    json_decref(shown);
}
