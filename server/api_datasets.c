/* api_datasets.c — /api/v1/datasets: upload (the HTTP side: the body's framing and the replies; the files
 * and the conversion are datasets.c), list, show, delete, samples. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "datasets.h"
#include "example.h"
#include "multipart.h"
#include "names.h"
#include "reply.h"
#include "store.h"
#include "tfrecord.h"

enum { MAX_SAMPLES = 64, MAX_SAMPLE_RECORD = 16 << 20 };

/* ================================ the upload ================================ */

/* One upload body being received: its files (datasets.c) and, for a form, its multipart parser. */
typedef struct {
    tw_dataset_upload *files;
    tw_multipart *mp;      /* NULL for a raw CSV or TFRecord body */
    uint64_t bytes;        /* of the body */
    tw_error err;          /* the first failure */
} receiving;

/* The body kind from Content-Type: 'm' multipart, 'c' CSV, 't' TFRecord, 0 unsupported. */
static int body_kind(const char *ctype)
{
    if (!ctype)
        return 0;
    if (!strncasecmp(ctype, "multipart/", 10))
        return 'm';
    if (!strncasecmp(ctype, "text/csv", 8))
        return 'c';
    if (!strncasecmp(ctype, "application/x-tfrecord", 22) ||
        !strncasecmp(ctype, "application/octet-stream", 24))
        return 't';
    return 0;
}

static int refuse(tw_req *r, tw_api_code code, const char *msg)
{
    tw_reply_error(r, code, "%s", msg);
    return -1;
}

/* The upload's options given in the query (label_column, validation_split, split_seed, test_first,
 * test_last, class_names, an image folder's image_size, channels, resize, and a TFRecord's shape), for a
 * form and a raw body alike: each is received as the form field of its name, so the same option given
 * again as a form field is refused ("given twice"). */
static tw_status query_options(tw_req *r, receiving *u)
{
    static const char *const values[] = {"label_column", "validation_split", "split_seed", "test_first", "test_last",
                                         "class_names", "image_size", "channels", "resize", "shape"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        const char *v = tw_req_query(r, values[i]);
        if (!v)
            continue;
        if (!v[0])
            return tw_error_set(&u->err, TW_ERR_INVALID, NULL, -1, "query parameter '%s' is empty", values[i]);
        TW_TRY(tw_dataset_upload_part_begin(u->files, values[i], "", "", &u->err));
        TW_TRY(tw_dataset_upload_part_data(u->files, v, strlen(v), &u->err));
        TW_TRY(tw_dataset_upload_part_end(u->files, &u->err));
    }
    return TW_OK;
}

static int upload_begin(tw_server *S, tw_req *r)
{
    const char *name = tw_req_query(r, "name"), *ctype = tw_req_header(r, "Content-Type");
    char why[200];
    if (!tw_name_valid(name, why, sizeof why)) { /* present: the route table requires it */
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter 'name': %s", why);
        return -1;
    }
    int kind = body_kind(ctype);
    if (!kind)
        return refuse(r, TW_API_UNSUPPORTED_MEDIA_TYPE,
                      "Content-Type must be multipart/form-data (curl -F), text/csv or application/x-tfrecord");
    receiving *u = calloc(1, sizeof *u);
    if (!u)
        return refuse(r, TW_API_UNAVAILABLE, "out of memory");
    tw_req_set_upload(r, u);
    if (tw_dataset_upload_new(S, name, &u->files, &u->err) != TW_OK) {
        tw_reply_status(r, &u->err);
        return -1;
    }
    tw_multipart_callbacks cb = {tw_dataset_upload_part_begin, tw_dataset_upload_part_data,
                                 tw_dataset_upload_part_end, u->files};
    tw_status s = query_options(r, u);
    if (s != TW_OK) {
        tw_reply_status(r, &u->err);
        return -1;
    }
    if (kind == 'm')
        s = tw_multipart_create(ctype, &cb, &u->mp, &u->err);
    else /* the body is the data file's part */
        s = tw_dataset_upload_part_begin(u->files, kind == 'c' ? "csv" : "tfrecord", "", "", &u->err);
    if (s != TW_OK) {
        if (s == TW_ERR_UNSUPPORTED || kind == 'm')
            tw_reply_error(r, TW_API_UNSUPPORTED_MEDIA_TYPE, "%s", u->err.message);
        else
            tw_reply_status(r, &u->err);
        return -1;
    }
    return 0;
}

static int upload_data(tw_server *S, tw_req *r, const char *chunk, size_t n)
{
    (void)S;
    receiving *u = tw_req_upload(r);
    u->bytes += n;
    tw_status s = u->mp ? tw_multipart_feed(u->mp, chunk, n, &u->err)
                        : tw_dataset_upload_part_data(u->files, chunk, n, &u->err);
    if (s == TW_OK)
        return 0;
    tw_reply_status(r, &u->err);
    return -1;
}

static void upload_cleanup(tw_server *S, tw_req *r)
{
    (void)S;
    receiving *u = tw_req_upload(r);
    if (!u)
        return;
    tw_multipart_destroy(u->mp);
    tw_dataset_upload_free(u->files);
    free(u);
}

const tw_upload_ops TW_API_DATASET_UPLOAD = {upload_begin, upload_data, upload_cleanup};

/* The reply to a TFRecord upload converted before the reply: 201 with the dataset, or its error (the
 * conversion's code, conv) naming the dataset. */
static void reply_converted(tw_req *r, json_t *d, const tw_error *conv)
{
    json_t *e = json_object_get(d, "error");
    if (!json_is_object(e)) {
        tw_reply_json(r, 201, d);
        return;
    }
    json_object_set(e, "dataset", json_object_get(d, "id"));
    tw_reply_error_json(r, tw_api_code_for(conv), json_incref(e));
    json_decref(d);
}

void tw_api_dataset_upload(tw_server *S, tw_req *r)
{
    receiving *u = tw_req_upload(r);
    if (u->mp && tw_multipart_finish(u->mp, &u->err) != TW_OK) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "multipart body: %s", u->err.message);
        return;
    }
    tw_status s = tw_dataset_upload_accept(u->files, u->bytes, &u->err);
    if (s == TW_ERR_INVALID) { /* the files make no dataset */
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "%s", u->err.message);
        return;
    }
    if (s != TW_OK) {
        tw_reply_status(r, &u->err);
        return;
    }
    int now;
    tw_error conv;
    tw_dataset_upload_convert(u->files, &now, &conv);
    json_t *row;
    if (tw_store_dataset_get(S->store, tw_dataset_upload_id(u->files), &row, &u->err) != TW_OK) {
        tw_reply_status(r, &u->err);
        return;
    }
    json_t *d = tw_dataset_present(row);
    json_decref(row);
    if (now)
        reply_converted(r, d, &conv);
    else
        tw_reply_json(r, 202, d);
}

/* ================================ the other routes ================================ */

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

void tw_api_dataset_delete(tw_server *S, tw_req *r)
{
    tw_error err;
    char dir[PATH_MAX];
    tw_dataset_dir(S, tw_req_param(r, "id"), dir, sizeof dir);
    tw_status s = tw_store_dataset_delete(S->store, tw_req_param(r, "id"), &err);
    tw_api_reply_deleted(S, r, s, &err, "dataset", dir);
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
    tw_dataset_state state = tw_store_dataset_state(row);
    json_t *shown = tw_dataset_present(row);
    json_decref(row);
    if (state != TW_DATASET_READY) {
        json_decref(shown);
        tw_reply_error(r, TW_API_CONFLICT, "dataset '%s' is not ready", tw_req_param(r, "id"));
        return;
    }
    char path[PATH_MAX];
    tw_dataset_path(S, tw_req_param(r, "id"), TW_DATASET_TRAIN, path, sizeof path);
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
