/* api_runs_list.c — GET /api/v1/runs: the run list, streamed row by row.
 *
 * Owns: the list's query (status, limit, offset, fields: checked before the first byte, a 400 through the
 * envelope), which keys a listed run shows (by default every key of the run but the bulky ones, LIST_BULKY;
 * "fields=all" or "fields=*" adds them back), and the reply made as it is sent: the head with the total,
 * then each run read from the store (tw_store_run_page_next, a few rows at a time), presented, dumped and
 * sent before the next is read, then the tail. The server never holds the page's JSON text nor its tree:
 * a request holds one batch of rows, the text of one run and libmicrohttpd's send buffer, whatever the
 * limit. A run deleted while the list streams is left out (the store skips it); the body stays one JSON
 * document. A store failure after the head aborts the reply (the client sees a cut body, never a shorter
 * well-formed one). Does not own how a run is presented (api_runs.c, tw_run_present_with) nor the store.
 * Thread-safety: a list's state is its own; next() runs on the connection's thread. */
#define _GNU_SOURCE
#include "runs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logtext.h"
#include "store.h"

enum {
    MAX_FIELDS_TEXT = 1024,
    ROWS_PER_READ = 8,   /* runs read from the store at a time */
    MAX_DATASETS = 16,   /* dataset rows kept while a list streams (its runs mostly share a few) */
};

/* The keys a list leaves out unless asked: their size grows with what users submit (a run's config, up
 * to the 1 MiB body; the dataset's class names, one per class), and they dominate a long list's bytes and
 * the server's time (BENCHMARKS.md, "The run list"). The run's own route shows them. */
static const char *const LIST_BULKY[] = {"config", "class_names"};

/* Whether name (n bytes) is one of TW_RUN_FIELDS. */
static int run_field(const char *name, size_t n)
{
    for (const char *w = TW_RUN_FIELDS; *w;) {
        size_t len = strcspn(w, "|");
        if (len == n && !strncmp(w, name, n))
            return 1;
        w += len + (w[len] == '|');
    }
    return 0;
}

/* The keys a list shows without ?fields: {name: true} (new), every run field but LIST_BULKY. */
static json_t *default_fields(void)
{
    json_t *fields = json_object();
    for (const char *w = TW_RUN_FIELDS; *w;) {
        size_t len = strcspn(w, "|");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, w);
        int bulky = 0;
        for (size_t k = 0; k < sizeof LIST_BULKY / sizeof *LIST_BULKY; k++)
            bulky |= !strcmp(name, LIST_BULKY[k]);
        if (!bulky)
            json_object_set_new(fields, name, json_true());
        w += len + (w[len] == '|');
    }
    return fields;
}

/* ?fields=a,b as {name: true} (+ id) in *out (new): absent, the default keys; "all" or "*", NULL (every
 * key). Replies 400 naming a field that is not a run's and returns -1. */
static int list_fields(tw_req *r, json_t **out)
{
    const char *text = tw_req_query(r, "fields");
    *out = NULL;
    if (text && (!strcmp(text, "all") || !strcmp(text, "*")))
        return 0;
    if (!text) {
        *out = default_fields();
        return 0;
    }
    if (strlen(text) > MAX_FIELDS_TEXT) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter 'fields' is longer than 1024 characters");
        return -1;
    }
    json_t *fields = json_pack("{s:b}", "id", 1);
    for (const char *w = text;; w++) {
        size_t n = strcspn(w, ",");
        char name[MAX_FIELDS_TEXT + 1];
        snprintf(name, sizeof name, "%.*s", (int)n, w);
        if (!run_field(w, n)) {
            tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter 'fields': '%s' is not a field of a run "
                           "(fields: %s, comma-separated; or all)", name, TW_RUN_FIELDS);
            json_decref(fields);
            return -1;
        }
        json_object_set_new(fields, name, json_true());
        w += n;
        if (!*w)
            break;
    }
    *out = fields;
    return 0;
}

/* One list being sent. */
typedef struct {
    tw_server *S;
    tw_run_page page;
    long limit, offset;
    json_t *fields;     /* {name: true}, NULL: every key */
    int with_config;    /* the store reads and parses each config */
    json_t *datasets;   /* {dataset_id: row or null}, at most MAX_DATASETS */
    json_t *batch;      /* the rows read and not yet sent (array), from index at; NULL: none read */
    size_t at;
    long shown;         /* runs sent so far */
    enum { HEAD, ROWS, DONE, FAILED } stage; /* the next piece to make (DONE: the tail was made) */
    char *piece;        /* the text being sent (malloc), NULL between pieces */
    size_t len, sent;
} run_list;

/* The dataset row of a listed run, read once while it stays in the list's small cache; borrowed. */
static const json_t *listed_dataset(run_list *l, const json_t *row)
{
    const char *id = json_string_value(json_object_get(row, "dataset_id"));
    json_t *ds = id ? json_object_get(l->datasets, id) : NULL;
    if (!ds && id) {
        tw_error ignored;
        if (json_object_size(l->datasets) >= MAX_DATASETS)
            json_object_clear(l->datasets);
        tw_store_dataset_get(l->S->store, id, &ds, &ignored); /* NULL when gone: its name shows as null */
        json_object_set_new(l->datasets, id, ds ? ds : json_null());
    }
    return json_is_object(ds) ? ds : NULL;
}

/* The run row as listed (new): tw_run_present_with's, only the fields asked (all when fields is NULL); a
 * dataset is read only when one of its keys is asked. */
static json_t *listed(run_list *l, const json_t *row)
{
    const json_t *f = l->fields;
    int dataset = !f || json_object_get(f, "dataset") || json_object_get(f, "class_names") ||
                  json_object_get(f, "warnings");
    json_t *all = tw_run_present_with(l->S, row, dataset ? listed_dataset(l, row) : NULL);
    if (!f || !all)
        return all;
    const char *key;
    json_t *v;
    void *it;
    json_object_foreach_safe(all, it, key, v) if (!json_object_get(f, key)) json_object_del(all, key);
    return all;
}

/* The next run of the page into *row (borrowed from l->batch; NULL at the page's end). -1 when the store
 * failed (logged). */
static int next_row(run_list *l, const json_t **row)
{
    if (l->batch && l->at == json_array_size(l->batch)) {
        json_decref(l->batch);
        l->batch = NULL;
    }
    if (!l->batch) {
        tw_error err;
        if (tw_store_run_page_next(l->S->store, &l->page, ROWS_PER_READ, l->with_config, &l->batch, &err) != TW_OK) {
            char msg[1200];
            tw_error_format(&err, msg, sizeof msg);
            tw_log("tower serve: GET /api/v1/runs: the list was cut: %s", msg);
            return -1;
        }
        l->at = 0;
    }
    *row = json_array_get(l->batch, l->at++);
    return 0;
}

/* One run's text into l->piece: ",{...}" (no comma before the first). 0, or -1 (out of memory). */
static int row_piece(run_list *l, const json_t *row)
{
    json_t *shown = listed(l, row);
    char *text = shown ? json_dumps(shown, JSON_COMPACT) : NULL;
    json_decref(shown);
    int n = text ? asprintf(&l->piece, "%s%s", l->shown ? "," : "", text) : -1;
    free(text);
    if (n < 0) {
        l->piece = NULL;
        return -1;
    }
    l->len = (size_t)n;
    l->shown++;
    return 0;
}

/* Makes the next piece of the body into l->piece: the head (the total first), one run, or the tail.
 * 0, TW_STREAM_END when the body is complete, TW_STREAM_ABORT on a failure (and from then on). */
static int next_piece(run_list *l)
{
    const json_t *row = NULL;
    int n = -1;
    l->sent = 0;
    switch (l->stage) {
    case HEAD:
        n = asprintf(&l->piece, "{\"total\":%lld,\"limit\":%ld,\"offset\":%ld,\"runs\":[", (long long)l->page.total,
                     l->limit, l->offset);
        l->stage = ROWS;
        break;
    case ROWS:
        if (next_row(l, &row) != 0) /* the store failed */
            break;
        if (row)
            return row_piece(l, row) == 0 ? 0 : (l->stage = FAILED, TW_STREAM_ABORT);
        n = asprintf(&l->piece, "]}");
        l->stage = DONE;
        break;
    case DONE: return TW_STREAM_END;
    case FAILED: break;
    }
    if (n < 0) {
        l->piece = NULL;
        l->stage = FAILED;
        return TW_STREAM_ABORT;
    }
    l->len = (size_t)n;
    return 0;
}

/* tw_stream_next: fills buf with the next pieces (libmicrohttpd sends what one call gives as one chunk). */
static ssize_t list_next(void *ctx, uint64_t pos, char *buf, size_t max)
{
    run_list *l = ctx;
    size_t n = 0;
    (void)pos;
    while (n < max) {
        if (!l->piece || l->sent == l->len) {
            free(l->piece);
            l->piece = NULL;
            int s = next_piece(l);
            if (s)
                return n ? (ssize_t)n : s; /* the end (or the abort) comes at the next call */
        }
        size_t k = l->len - l->sent < max - n ? l->len - l->sent : max - n;
        memcpy(buf + n, l->piece + l->sent, k);
        l->sent += k;
        n += k;
    }
    return (ssize_t)n;
}

static void list_done(void *ctx)
{
    run_list *l = ctx;
    json_decref(l->fields);
    json_decref(l->datasets);
    json_decref(l->batch);
    free(l->piece);
    free(l);
}

void tw_api_runs_list(tw_server *S, tw_req *r)
{
    long limit, offset;
    const char *status = tw_req_query(r, "status");
    tw_run_state state = tw_run_state_named(status);
    if (status && state == TW_RUN_STATES) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT,
                       "query parameter 'status' must be queued, running, succeeded, failed or cancelled");
        return;
    }
    json_t *fields;
    if (tw_req_query_int(r, "limit", 1, 1000, 50, &limit) || tw_req_query_int(r, "offset", 0, 1L << 40, 0, &offset) ||
        list_fields(r, &fields))
        return;
    run_list *l = malloc(sizeof *l);
    json_t *datasets = json_object();
    if (!l || !datasets) {
        free(l);
        json_decref(datasets);
        json_decref(fields);
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    *l = (run_list){.S = S, .limit = limit, .offset = offset, .fields = fields, .datasets = datasets,
                    .with_config = !fields || json_object_get(fields, "config") != NULL};
    tw_error err;
    if (tw_store_run_page_open(S->store, status ? &state : NULL, limit, offset, &l->page, &err) != TW_OK) {
        list_done(l);
        tw_reply_status(r, &err);
        return;
    }
    tw_reply_pieces(r, "application/json", list_next, list_done, l);
}
