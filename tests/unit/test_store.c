/* test_store.c — the SQLite store (store.h) against a fresh folder per test: the schema and its journal
 * mode as a second connection sees them, the migration of a version-1 database, durability across
 * close/reopen, datasets (insert, finish, get, list, resolve, delete while in use), runs (insert, lookups,
 * names resolved (unique, or the candidates), priority order and moves, resume rules,
 * paging, idempotency keys and bodies, the insert refused once its dataset is gone, the scheduler's queue
 * order and back-off, every state transition and the ones refused), JSON columns decoded, ids; every read
 * telling "not found" (TW_END) from "could not read" (TW_ERR_IO, tables dropped under it by a second
 * connection), and start-up debris removal deleting nothing when its read fails. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include <sys/stat.h>

#include "datasets.h"
#include "server.h"
#include "store.h"
#include "testutil.h"

typedef struct {
    char dir[4096];
    char db[4200];
    tw_store *st;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || tw_test_mkdtemp(f->dir, sizeof f->dir, "test_store") != 0)
        return -1;
    snprintf(f->db, sizeof f->db, "%s/tower.db", f->dir);
    tw_error err;
    if (tw_store_open(f->db, &f->st, &err) != TW_OK) {
        fprintf(stderr, "tw_store_open: %s\n", err.message);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tw_store_close(f->st);
    int rc = tw_test_rmdir(f->dir);
    free(f);
    return rc;
}

/* ---- helpers ---- */

static const char *str(const json_t *row, const char *key)
{
    return json_string_value(json_object_get(row, key));
}

static json_int_t num(const json_t *row, const char *key)
{
    const json_t *v = json_object_get(row, key);
    if (!json_is_integer(v))
        fail_msg("%s is not an integer", key);
    return json_integer_value(v);
}

static double real(const json_t *row, const char *key)
{
    const json_t *v = json_object_get(row, key);
    if (!json_is_number(v))
        fail_msg("%s is not a number", key);
    return json_number_value(v);
}

static void expect_null(const json_t *row, const char *key)
{
    if (!json_is_null(json_object_get(row, key)))
        fail_msg("%s is not null", key);
}

/* The canonical body add_run_key stores with a key. */
static const char KEY_BODY[] = "{\"steps\":10}";

/* The row a read returned: NULL for TW_END; any failure fails the test. */
static json_t *found(tw_status s, json_t *row, const tw_error *err, const char *what)
{
    if (s != TW_OK && s != TW_END)
        fail_msg("%s: %s", what, err->message);
    if ((s == TW_OK) != (row != NULL))
        fail_msg("%s: status %d with row %p", what, s, (void *)row);
    return row;
}

#define READ(call, what)                                                                             \
    do {                                                                                             \
        tw_error err_;                                                                               \
        json_t *row_ = NULL;                                                                         \
        tw_status s_ = call;                                                                         \
        return found(s_, row_, &err_, what);                                                         \
    } while (0)

static json_t *dataset_row(tw_store *st, const char *id) { READ(tw_store_dataset_get(st, id, &row_, &err_), id); }
static json_t *run_row(tw_store *st, const char *id) { READ(tw_store_run_get(st, id, &row_, &err_), id); }
static json_t *key_row(tw_store *st, const char *key)
{
    READ(tw_store_run_by_key(st, key, KEY_BODY, &row_, &err_), key);
}
static json_t *converting(tw_store *st) { READ(tw_store_datasets_converting(st, &row_, &err_), "converting"); }
static json_t *dataset_list(tw_store *st) { READ(tw_store_dataset_list(st, &row_, &err_), "datasets"); }
static json_t *resolve(tw_store *st, const char *n) { READ(tw_store_dataset_resolve(st, n, &row_, &err_), n); }
/* A page of the run list read whole, as the route streams it (3 rows at a time): {"runs", "total", "limit",
 * "offset"}. */
static json_t *run_list(tw_store *st, const char *status, long limit, long offset)
{
    tw_run_state state = tw_run_state_named(status);
    tw_run_page page;
    tw_error err;
    if (tw_store_run_page_open(st, status ? &state : NULL, limit, offset, &page, &err) != TW_OK)
        fail_msg("run_page_open: %s", err.message);
    json_t *runs = json_array(), *rows = NULL;
    do {
        json_decref(rows);
        if (tw_store_run_page_next(st, &page, 3, 1, &rows, &err) != TW_OK)
            fail_msg("run_page_next: %s", err.message);
        json_array_extend(runs, rows);
    } while (json_array_size(rows));
    json_decref(rows);
    return json_pack("{s:o, s:I, s:i, s:i}", "runs", runs, "total", (json_int_t)page.total, "limit", (int)limit,
                     "offset", (int)offset);
}
static json_t *run_counts(tw_store *st) { READ(tw_store_run_counts(st, &row_, &err_), "counts"); }
static json_t *runs_in(tw_store *st, const char *status)
{
    READ(tw_store_runs_in(st, tw_run_state_named(status), &row_, &err_), status);
}
static json_t *run_next(tw_store *st, double now) { READ(tw_store_run_next(st, now, &row_, &err_), "next"); }

static void add_dataset(tw_store *st, const char *id, const char *name, const char *status)
{
    tw_error err;
    assert_int_equal(tw_store_dataset_insert(st, id, name, "upload", 1000, &err), TW_OK);
    if (status)
        assert_int_equal(tw_store_dataset_finish(st, id, tw_dataset_state_named(status),
                                                 !strcmp(status, "ready") ? "{\"n\": 1}" : NULL,
                                                 !strcmp(status, "failed") ? "{\"code\": \"CORRUPT\"}" : NULL,
                                                 &err),
                         TW_OK);
}

/* Inserts a run on dataset_id, registering that dataset (ready) first when it does not exist: a run is
 * only accepted on a ready dataset. */
static tw_status add_run_key(tw_store *st, const char *id, const char *dataset_id, const char *key,
                             tw_error *err)
{
    json_t *d = dataset_row(st, dataset_id);
    if (!d)
        add_dataset(st, dataset_id, "auto", "ready");
    json_decref(d);
    tw_run_new r = {.id = id, .name = NULL, .dataset_id = dataset_id, .config = "{\"steps\": 10}",
                    .idem_key = key, .idem_body = key ? KEY_BODY : NULL, .towers = 1, .steps = 10,
                    .max_restarts = 3, .deadline_s = 0};
    return tw_store_run_insert(st, &r, err);
}

static void add_run(tw_store *st, const char *id, const char *dataset_id)
{
    tw_error err;
    assert_int_equal(add_run_key(st, id, dataset_id, NULL, &err), TW_OK);
}

static void expect_status(tw_store *st, const char *id, const char *status)
{
    json_t *r = run_row(st, id);
    if (!r)
        fail_msg("run %s not found", id);
    if (strcmp(str(r, "status"), status))
        fail_msg("run %s is %s, expected %s", id, str(r, "status"), status);
    json_decref(r);
}

/* A second, independent connection's answer to a one-value query, as text (caller frees). */
static char *peek(const char *db, const char *sql)
{
    sqlite3 *c = NULL;
    assert_int_equal(sqlite3_open_v2(db, &c, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(c, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(s, 0);
    char *out = strdup(t ? (const char *)t : "(null)");
    sqlite3_finalize(s);
    sqlite3_close(c);
    return out;
}

static void expect_peek(const char *db, const char *sql, const char *want)
{
    char *got = peek(db, sql);
    if (strcmp(got, want))
        fail_msg("%s: got %s, expected %s", sql, got, want);
    free(got);
}

/* ---- open, schema, durability ---- */

static void test_open_creates_schema_in_wal_mode(void **state)
{
    fixture *f = *state;
    expect_peek(f->db, "PRAGMA journal_mode", "wal");
    expect_peek(f->db, "PRAGMA user_version", "9");
    expect_peek(f->db, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'idempotency_body'", "1");
    expect_peek(f->db,
                "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master "
                "WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' ORDER BY name)",
                "datasets,evaluations,evaluations_run,run_counts,runs,runs_folder,runs_status,sweep_trials,sweeps");
}

static void test_reopen_keeps_rows(void **state)
{
    fixture *f = *state;
    add_dataset(f->st, "d000000000000001", "mnist", "ready");
    add_run(f->st, "r000000000000001", "d000000000000001");
    tw_store_close(f->st);
    f->st = NULL;
    tw_error err;
    assert_int_equal(tw_store_open(f->db, &f->st, &err), TW_OK);
    json_t *d = dataset_row(f->st, "d000000000000001");
    assert_non_null(d);
    assert_string_equal(str(d, "status"), "ready");
    json_decref(d);
    expect_status(f->st, "r000000000000001", "queued");
    /* Opening again over existing tables is not an error, and still WAL. */
    expect_peek(f->db, "PRAGMA journal_mode", "wal");
    expect_peek(f->db, "SELECT count(*) FROM runs", "1");
}

static void test_open_refuses_what_is_not_a_database(void **state)
{
    fixture *f = *state;
    char path[4300];
    snprintf(path, sizeof path, "%s/garbage.db", f->dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 512; i++)
        fputs("this is not an SQLite file. ", fp);
    fclose(fp);
    tw_store *st = (tw_store *)&st;
    tw_error err;
    assert_int_equal(tw_store_open(path, &st, &err), TW_ERR_IO);
    assert_null(st);
    assert_non_null(strstr(err.message, "cannot open the database"));

    snprintf(path, sizeof path, "%s/no/such/folder/tower.db", f->dir);
    st = (tw_store *)&st;
    assert_int_equal(tw_store_open(path, &st, &err), TW_ERR_IO);
    assert_null(st);
    tw_store_close(NULL);
}

static void test_new_id_format(void **state)
{
    (void)state;
    char a[TW_ID_BYTES], b[TW_ID_BYTES];
    tw_store_new_id('r', a);
    tw_store_new_id('r', b);
    assert_int_equal(strlen(a), TW_ID_BYTES - 1);
    assert_int_equal(a[0], 'r');
    for (int i = 1; i < TW_ID_BYTES - 1; i++)
        if (!((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f')))
            fail_msg("id %s: character %d is not a lower-case hex digit", a, i);
    assert_string_not_equal(a, b);
    tw_store_new_id('d', a);
    assert_int_equal(a[0], 'd');
    assert_int_equal(strlen(a), 16);
}

/* The state names are the ones older databases hold: each name maps back to its state, and an unknown
 * name (or none) to the count. */
static void test_state_names(void **state)
{
    (void)state;
    static const char *const runs[] = {"queued", "running", "succeeded", "failed", "cancelled"};
    static const char *const datasets[] = {"converting", "ready", "failed"};
    for (int s = 0; s < TW_RUN_STATES; s++) {
        assert_string_equal(tw_run_state_name((tw_run_state)s), runs[s]);
        assert_int_equal(tw_run_state_named(runs[s]), s);
        assert_int_equal(tw_run_state_final((tw_run_state)s), s >= TW_RUN_SUCCEEDED);
    }
    for (int s = 0; s < TW_DATASET_STATES; s++) {
        assert_string_equal(tw_dataset_state_name((tw_dataset_state)s), datasets[s]);
        assert_int_equal(tw_dataset_state_named(datasets[s]), s);
    }
    assert_int_equal(tw_run_state_named("done"), TW_RUN_STATES);
    assert_int_equal(tw_run_state_named(NULL), TW_RUN_STATES);
    assert_int_equal(tw_dataset_state_named("queued"), TW_DATASET_STATES);
    assert_string_equal(tw_run_state_name(TW_RUN_STATES), "unknown");
    json_t *row = json_pack("{s:s}", "status", "cancelled");
    assert_int_equal(tw_store_run_state(row), TW_RUN_CANCELLED);
    json_object_set_new(row, "status", json_string("ready"));
    assert_int_equal(tw_store_dataset_state(row), TW_DATASET_READY);
    json_decref(row);
}

/* ---- datasets ---- */

static void test_dataset_insert_finish_get(void **state)
{
    fixture *f = *state;
    tw_error err;
    assert_int_equal(tw_store_dataset_insert(f->st, "d1", "mnist", "tfrecord", 123456789012LL, &err), TW_OK);
    json_t *d = dataset_row(f->st, "d1");
    assert_non_null(d);
    assert_string_equal(str(d, "id"), "d1");
    assert_string_equal(str(d, "name"), "mnist");
    assert_string_equal(str(d, "status"), "converting");
    assert_string_equal(str(d, "source"), "tfrecord");
    assert_int_equal(num(d, "bytes"), 123456789012LL);
    assert_true(real(d, "created") > 1e9);
    expect_null(d, "meta");
    expect_null(d, "error");
    json_decref(d);

    json_t *conv = converting(f->st);
    assert_int_equal(json_array_size(conv), 1);
    assert_string_equal(str(json_array_get(conv, 0), "id"), "d1");
    json_decref(conv);

    assert_int_equal(tw_store_dataset_finish(f->st, "d1", TW_DATASET_READY,
                                             "{\"examples\": 60000, \"shape\": [28, 28, 1]}",
                                             NULL, &err),
                     TW_OK);
    d = dataset_row(f->st, "d1");
    assert_string_equal(str(d, "status"), "ready");
    json_t *meta = json_object_get(d, "meta");
    assert_true(json_is_object(meta)); /* decoded, not a string */
    assert_int_equal(num(meta, "examples"), 60000);
    assert_int_equal(json_array_size(json_object_get(meta, "shape")), 3);
    expect_null(d, "error");
    json_decref(d);
    conv = converting(f->st);
    assert_int_equal(json_array_size(conv), 0);
    json_decref(conv);

    assert_int_equal(tw_store_dataset_insert(f->st, "d2", "bad", "upload", 5, &err), TW_OK);
    assert_int_equal(tw_store_dataset_finish(f->st, "d2", TW_DATASET_FAILED, NULL,
                                             "{\"code\": \"CORRUPT\", \"message\": \"bad CRC\", \"offset\": 12}", &err),
                     TW_OK);
    d = dataset_row(f->st, "d2");
    assert_string_equal(str(d, "status"), "failed");
    assert_string_equal(str(json_object_get(d, "error"), "code"), "CORRUPT");
    assert_int_equal(num(json_object_get(d, "error"), "offset"), 12);
    expect_null(d, "meta");
    json_decref(d);

    assert_null(dataset_row(f->st, "d3"));
    /* The same id twice is refused, and a constraint is not a fatal I/O failure. */
    assert_int_equal(tw_store_dataset_insert(f->st, "d1", "again", "upload", 1, &err), TW_ERR_IO);
    assert_int_not_equal(err.errno_value, EIO); /* a constraint, not a failing disk: not fatal */
}

static void test_dataset_list_newest_first(void **state)
{
    fixture *f = *state;
    json_t *l = dataset_list(f->st);
    assert_true(json_is_array(l));
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
    add_dataset(f->st, "d1", "a", "ready");
    add_dataset(f->st, "d2", "b", NULL);
    add_dataset(f->st, "d3", "c", "failed");
    l = dataset_list(f->st);
    assert_int_equal(json_array_size(l), 3);
    assert_string_equal(str(json_array_get(l, 0), "id"), "d3");
    assert_string_equal(str(json_array_get(l, 1), "id"), "d2");
    assert_string_equal(str(json_array_get(l, 2), "id"), "d1");
    json_decref(l);
}

static void expect_resolves(tw_store *st, const char *name_or_id, const char *id)
{
    json_t *d = resolve(st, name_or_id);
    if (!id) {
        if (d)
            fail_msg("%s resolved to %s, expected nothing", name_or_id, str(d, "id"));
        return;
    }
    if (!d)
        fail_msg("%s resolved to nothing, expected %s", name_or_id, id);
    if (strcmp(str(d, "id"), id))
        fail_msg("%s resolved to %s, expected %s", name_or_id, str(d, "id"), id);
    json_decref(d);
}

static void test_dataset_resolve(void **state)
{
    fixture *f = *state;
    add_dataset(f->st, "d1", "mnist", "ready");
    add_dataset(f->st, "d2", "mnist", "ready");
    add_dataset(f->st, "d3", "mnist", NULL);     /* newest, still converting */
    add_dataset(f->st, "d4", "mnist", "failed"); /* newest of all, failed */
    expect_resolves(f->st, "mnist", "d2");       /* the newest *ready* one */
    /* An id resolves to itself whatever its status. */
    expect_resolves(f->st, "d1", "d1");
    expect_resolves(f->st, "d3", "d3");
    expect_resolves(f->st, "d4", "d4");
    /* No ready dataset of that name: the newest of that name. */
    add_dataset(f->st, "d5", "fashion", "failed");
    add_dataset(f->st, "d6", "fashion", NULL);
    expect_resolves(f->st, "fashion", "d6");
    /* A name spelled like another dataset's id: the id wins. */
    add_dataset(f->st, "d7", "d1", "ready");
    expect_resolves(f->st, "d1", "d1");
    expect_resolves(f->st, "nothing", NULL);
    expect_resolves(f->st, "", NULL);
    /* Names are matched exactly (no LIKE, no case folding). */
    expect_resolves(f->st, "MNIST", NULL);
    expect_resolves(f->st, "mnis%", NULL);
}

static void test_dataset_delete_while_in_use(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_dataset(f->st, "d1", "mnist", "ready");
    add_dataset(f->st, "d2", "other", "ready");
    add_run(f->st, "r1", "d1");
    assert_int_equal(tw_store_dataset_delete(f->st, "d1", &err), TW_ERR_INVALID); /* queued */
    assert_non_null(strstr(err.message, "d1"));
    assert_int_equal(tw_store_run_started(f->st, "r1", "[0]", 100.0, &err), TW_OK);
    assert_int_equal(tw_store_dataset_delete(f->st, "d1", &err), TW_ERR_INVALID); /* running */
    json_t *d = dataset_row(f->st, "d1");
    assert_non_null(d);
    json_decref(d);
    assert_int_equal(tw_store_run_finished(f->st, "r1", TW_RUN_SUCCEEDED, NULL, NULL, 200.0, &err), TW_OK);
    assert_int_equal(tw_store_dataset_delete(f->st, "d1", &err), TW_OK); /* only finished runs use it */
    assert_null(dataset_row(f->st, "d1"));
    assert_int_equal(tw_store_dataset_delete(f->st, "d1", &err), TW_END);
    assert_int_equal(tw_store_dataset_delete(f->st, "nope", &err), TW_END);
    /* Another dataset's runs do not matter. */
    add_run(f->st, "r2", "d1");
    assert_int_equal(tw_store_dataset_delete(f->st, "d2", &err), TW_OK);
}

/* ---- runs ---- */

static void test_run_insert_get(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_dataset(f->st, "d1", "mnist", "ready");
    tw_run_new r = {.id = "r1", .name = "123", .dataset_id = "d1",
                    .config = "{\"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 10}]}, \"steps\": 500}",
                    .idem_key = "key-1", .towers = 2, .steps = 500, .max_restarts = 4, .deadline_s = 3600.5,
                    .processes = 2, .hosts = "[\"a:1\",\"b:1\"]"};
    assert_int_equal(tw_store_run_insert(f->st, &r, &err), TW_OK);
    json_t *g = run_row(f->st, "r1");
    assert_int_equal(num(g, "processes"), 2); /* the launch keys (launch.h); hosts decoded as JSON */
    assert_string_equal(json_string_value(json_array_get(json_object_get(g, "hosts"), 1)), "b:1");
    assert_non_null(g);
    assert_string_equal(str(g, "id"), "r1");
    assert_string_equal(str(g, "name"), "123"); /* a text column stays text even when it reads as JSON */
    assert_string_equal(str(g, "dataset_id"), "d1");
    assert_string_equal(str(g, "status"), "queued");
    json_t *cfg = json_object_get(g, "config");
    assert_true(json_is_object(cfg));
    assert_int_equal(num(cfg, "steps"), 500);
    assert_string_equal(str(json_array_get(json_object_get(json_object_get(cfg, "model"), "layers"), 0), "type"),
                        "dense");
    assert_int_equal(num(g, "towers"), 2);
    assert_int_equal(num(g, "steps"), 500);
    assert_int_equal(num(g, "step"), 0);
    assert_int_equal(num(g, "restarts"), 0);
    assert_int_equal(num(g, "max_restarts"), 4);
    assert_true(real(g, "deadline_s") == 3600.5);
    assert_true(real(g, "created") > 1e9);
    assert_true(real(g, "not_before") == 0);
    static const char *const nulls[] = {"reason", "error", "metrics", "devices", "eta_s",
                                        "started", "first_started", "finished"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        expect_null(g, nulls[i]);
    json_decref(g);

    tw_run_new anon = {.id = "r2", .dataset_id = "d1", .config = "{}", .towers = 1, .steps = 1};
    assert_int_equal(tw_store_run_insert(f->st, &anon, &err), TW_OK);
    g = run_row(f->st, "r2");
    expect_null(g, "name");
    assert_int_equal(num(g, "processes"), 1); /* unset: one process, no hosts */
    assert_int_equal(json_array_size(json_object_get(g, "hosts")), 0);
    assert_true(json_is_object(json_object_get(g, "config")));
    json_decref(g);
    assert_null(run_row(f->st, "r3"));
    /* The same id twice is refused (not fatal). */
    assert_int_equal(tw_store_run_insert(f->st, &anon, &err), TW_ERR_IO);
    assert_int_not_equal(err.errno_value, EIO); /* a constraint, not a failing disk: not fatal */
}

static void test_idempotency_key(void **state)
{
    fixture *f = *state;
    tw_error err;
    assert_int_equal(add_run_key(f->st, "r1", "d1", "abc", &err), TW_OK);
    assert_int_equal(add_run_key(f->st, "r2", "d1", NULL, &err), TW_OK);
    assert_int_equal(add_run_key(f->st, "r3", "d1", NULL, &err), TW_OK); /* many runs without a key */
    json_t *r = key_row(f->st, "abc");
    assert_non_null(r);
    assert_string_equal(str(r, "id"), "r1");
    json_decref(r);
    assert_null(key_row(f->st, "abd"));
    assert_null(key_row(f->st, ""));
    /* The key is taken: the insert says so (TW_END, the caller reads the winner), not an I/O error. */
    assert_int_equal(add_run_key(f->st, "r4", "d1", "abc", &err), TW_END);
    assert_null(run_row(f->st, "r4"));
    r = key_row(f->st, "abc");
    assert_string_equal(str(r, "id"), "r1");
    json_decref(r);
}

static void expect_page(tw_store *st, const char *status, long limit, long offset, json_int_t total,
                        const char *const *ids, size_t n)
{
    json_t *p = run_list(st, status, limit, offset);
    assert_non_null(p);
    assert_int_equal(num(p, "total"), total);
    assert_int_equal(num(p, "limit"), limit);
    assert_int_equal(num(p, "offset"), offset);
    json_t *runs = json_object_get(p, "runs");
    assert_true(json_is_array(runs));
    if (json_array_size(runs) != n)
        fail_msg("status %s limit %ld offset %ld: %zu runs, expected %zu", status ? status : "(all)", limit,
                 offset, json_array_size(runs), n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(str(json_array_get(runs, i), "id"), ids[i]);
    json_decref(p);
}

static void test_run_list_filter_and_paging(void **state)
{
    fixture *f = *state;
    tw_error err;
    expect_page(f->st, NULL, 10, 0, 0, NULL, 0);
    const char *ids[] = {"r1", "r2", "r3", "r4", "r5"};
    for (int i = 0; i < 5; i++)
        add_run(f->st, ids[i], "d1");
    assert_int_equal(tw_store_run_started(f->st, "r2", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r4", "[1]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r4", TW_RUN_FAILED, "crashed", NULL, 2.0, &err), TW_OK);

    const char *all[] = {"r5", "r4", "r3", "r2", "r1"}; /* newest first */
    expect_page(f->st, NULL, 50, 0, 5, all, 5);
    expect_page(f->st, NULL, 2, 0, 5, all, 2);
    expect_page(f->st, NULL, 2, 2, 5, all + 2, 2);
    expect_page(f->st, NULL, 2, 4, 5, all + 4, 1);
    expect_page(f->st, NULL, 2, 5, 5, NULL, 0);
    expect_page(f->st, NULL, 0, 0, 5, NULL, 0);
    const char *queued[] = {"r5", "r3", "r1"};
    expect_page(f->st, "queued", 50, 0, 3, queued, 3);
    expect_page(f->st, "queued", 1, 1, 3, queued + 1, 1);
    const char *running[] = {"r2"};
    expect_page(f->st, "running", 50, 0, 1, running, 1);
    expect_page(f->st, "succeeded", 50, 0, 0, NULL, 0);
    expect_page(f->st, "no-such-status", 50, 0, 0, NULL, 0);

    json_t *c = run_counts(f->st);
    assert_int_equal(num(c, "queued"), 3);
    assert_int_equal(num(c, "running"), 1);
    assert_int_equal(num(c, "failed"), 1);
    assert_int_equal(num(c, "succeeded"), 0);
    assert_int_equal(num(c, "cancelled"), 0);
    json_decref(c);

    json_t *in = runs_in(f->st, "queued"); /* oldest first */
    assert_int_equal(json_array_size(in), 3);
    assert_string_equal(str(json_array_get(in, 0), "id"), "r1");
    assert_string_equal(str(json_array_get(in, 2), "id"), "r5");
    json_decref(in);
}

static void expect_next(tw_store *st, double now, const char *id)
{
    json_t *r = run_next(st, now);
    if (!id) {
        if (r)
            fail_msg("next at %g is %s, expected none", now, str(r, "id"));
        return;
    }
    if (!r)
        fail_msg("next at %g is none, expected %s", now, id);
    if (strcmp(str(r, "id"), id))
        fail_msg("next at %g is %s, expected %s", now, str(r, "id"), id);
    json_decref(r);
}

static void test_run_next_order_and_back_off(void **state)
{
    fixture *f = *state;
    tw_error err;
    expect_next(f->st, 1000.0, NULL);
    /* Ids in an order unlike submission: the queue follows submission, not ids. */
    add_run(f->st, "rc", "d1");
    add_run(f->st, "ra", "d1");
    add_run(f->st, "rb", "d1");
    expect_next(f->st, 1000.0, "rc");
    assert_int_equal(tw_store_run_started(f->st, "rc", "[0]", 1000.0, &err), TW_OK);
    expect_next(f->st, 1000.0, "ra");
    /* rc fails and backs off until 1100: ra, rb go first; at 1100 rc is first again (older). */
    assert_int_equal(tw_store_run_requeue(f->st, "rc", "oom", NULL, 1100.0, &err), TW_OK);
    expect_next(f->st, 1000.0, "ra");
    expect_next(f->st, 1099.9, "ra");
    expect_next(f->st, 1100.0, "rc");
    assert_int_equal(tw_store_run_started(f->st, "ra", "[0]", 1001.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "rb", "[1]", 1001.0, &err), TW_OK);
    expect_next(f->st, 1050.0, NULL);
    expect_next(f->st, 1100.0, "rc");
    assert_int_equal(tw_store_run_cancel_queued(f->st, "rc", 1060.0, &err), 1);
    expect_next(f->st, 1e12, NULL);
}

static void add_run_priority(tw_store *st, const char *id, int priority)
{
    tw_error err;
    tw_run_new r = {.id = id, .dataset_id = "d1", .config = "{\"steps\": 10}", .towers = 1, .steps = 10,
                    .max_restarts = 3, .priority = priority};
    assert_int_equal(tw_store_run_insert(st, &r, &err), TW_OK);
}

static void test_run_next_highest_priority_first_fifo_within(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_run(f->st, "r0", "d1"); /* priority 0 */
    add_run_priority(f->st, "r5a", 5);
    add_run_priority(f->st, "rneg", -3);
    add_run_priority(f->st, "r5b", 5);
    expect_next(f->st, 1000.0, "r5a");
    assert_int_equal(tw_store_run_set_priority(f->st, "r0", 9, &err), TW_OK);
    expect_next(f->st, 1000.0, "r0");
    const char *order[] = {"r0", "r5a", "r5b", "rneg"};
    for (size_t i = 0; i < 4; i++) {
        expect_next(f->st, 1000.0, order[i]);
        assert_int_equal(tw_store_run_started(f->st, order[i], "[0]", 1000.0, &err), TW_OK);
    }
    /* only a queued run moves; a missing one is TW_END */
    assert_int_equal(tw_store_run_set_priority(f->st, "r0", 1, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "running"));
    assert_int_equal(tw_store_run_set_priority(f->st, "rnone", 1, &err), TW_END);
}

static void test_run_resume_rules(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_run(f->st, "rq", "d1");
    assert_int_equal(tw_store_run_resume(f->st, "rq", 10, &err), TW_ERR_INVALID); /* queued */
    assert_non_null(strstr(err.message, "queued"));
    assert_int_equal(tw_store_run_started(f->st, "rq", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_resume(f->st, "rq", 10, &err), TW_ERR_INVALID); /* running */
    assert_int_equal(tw_store_run_finished(f->st, "rq", TW_RUN_SUCCEEDED, NULL, NULL, 2.0, &err), TW_OK);
    assert_int_equal(tw_store_run_resume(f->st, "rq", 10, &err), TW_ERR_INVALID); /* succeeded, no more steps */
    assert_non_null(strstr(err.message, "more steps"));
    assert_int_equal(tw_store_run_resume(f->st, "rq", 15, &err), TW_OK);
    json_t *r = run_row(f->st, "rq");
    assert_string_equal(str(r, "status"), "queued");
    assert_int_equal(json_integer_value(json_object_get(r, "steps")), 15);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "config"), "steps")), 15);
    assert_true(json_is_null(json_object_get(r, "finished")));
    json_decref(r);
    assert_int_equal(tw_store_run_started(f->st, "rq", "[0]", 3.0, &err), TW_OK);
    assert_int_equal(tw_store_run_requeue(f->st, "rq", "crashed", NULL, 0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "rq", "[0]", 4.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "rq", TW_RUN_FAILED, "crashed", "{}", 5.0, &err), TW_OK);
    assert_int_equal(tw_store_run_resume(f->st, "rq", 14, &err), TW_ERR_INVALID); /* fewer steps */
    assert_int_equal(tw_store_run_resume(f->st, "rq", 15, &err), TW_OK);          /* failed: same steps */
    r = run_row(f->st, "rq");
    assert_int_equal(json_integer_value(json_object_get(r, "restarts")), 0);
    assert_true(json_is_null(json_object_get(r, "reason")));
    json_decref(r);
    assert_int_equal(tw_store_run_resume(f->st, "rnone", 15, &err), TW_END);
    assert_int_equal(tw_store_run_cancel_queued(f->st, "rq", 6.0, &err), 1); /* its dataset deleted: no resume */
    assert_int_equal(tw_store_dataset_delete(f->st, "d1", &err), TW_OK);
    assert_int_equal(tw_store_run_resume(f->st, "rq", 15, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "dataset"));
}

static void test_resolve_names_and_ids(void **state)
{
    fixture *f = *state;
    tw_error err;
    json_t *out;
    add_dataset(f->st, "d1", "alpha", "ready");
    tw_run_new r = {.dataset_id = "d1", .config = "{}", .towers = 1, .steps = 1, .max_restarts = 0};
    const char *ids[] = {"ra", "rb", "rc"}, *names[] = {"solo", "dup", "dup"};
    for (int i = 0; i < 3; i++) {
        r.id = ids[i];
        r.name = names[i];
        assert_int_equal(tw_store_run_insert(f->st, &r, &err), TW_OK);
    }
    assert_int_equal(tw_store_run_resolve(f->st, "solo", &out, &err), TW_OK);
    assert_string_equal(str(out, "id"), "ra");
    json_decref(out);
    assert_int_equal(tw_store_run_resolve(f->st, "rb", &out, &err), TW_OK); /* an id */
    assert_string_equal(str(out, "id"), "rb");
    json_decref(out);
    assert_int_equal(tw_store_run_resolve(f->st, "dup", &out, &err), TW_ERR_INVALID);
    assert_int_equal(json_array_size(out), 2);
    assert_string_equal(json_string_value(json_array_get(out, 0)), "rc"); /* newest first */
    assert_non_null(strstr(err.message, "rb"));
    json_decref(out);
    assert_int_equal(tw_store_run_resolve(f->st, "nobody", &out, &err), TW_END);
    assert_null(out);
    assert_int_equal(tw_store_dataset_resolve_unique(f->st, "alpha", &out, &err), TW_OK);
    assert_string_equal(str(out, "id"), "d1");
    json_decref(out);
    add_dataset(f->st, "d2", "alpha", "ready");
    assert_int_equal(tw_store_dataset_resolve_unique(f->st, "alpha", &out, &err), TW_ERR_INVALID);
    json_decref(out);
}

static void test_run_lifecycle(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_run(f->st, "r1", "d1");
    assert_int_equal(tw_store_run_started(f->st, "r1", "[0, 1]", 100.0, &err), TW_OK);
    json_t *r = run_row(f->st, "r1");
    assert_string_equal(str(r, "status"), "running");
    json_t *dev = json_object_get(r, "devices");
    assert_true(json_is_array(dev));
    assert_int_equal(json_array_size(dev), 2);
    assert_int_equal(json_integer_value(json_array_get(dev, 1)), 1);
    assert_true(real(r, "started") == 100.0);
    assert_true(real(r, "first_started") == 100.0);
    json_decref(r);

    assert_int_equal(tw_store_run_progress(f->st, "r1", 42, "{\"loss\": 0.5, \"accuracy\": 0.75}", 12.5, &err),
                     TW_OK);
    r = run_row(f->st, "r1");
    assert_int_equal(num(r, "step"), 42);
    assert_true(json_is_object(json_object_get(r, "metrics")));
    assert_true(real(json_object_get(r, "metrics"), "loss") == 0.5);
    assert_true(real(r, "eta_s") == 12.5);
    json_decref(r);

    /* A retriable failure: back to queued, restarts + 1, the failure kept, devices and ETA cleared. */
    assert_int_equal(tw_store_run_requeue(f->st, "r1", "worker_crashed", "{\"code\": \"INTERNAL\", \"signal\": 9}",
                                          150.0, &err),
                     TW_OK);
    r = run_row(f->st, "r1");
    assert_string_equal(str(r, "status"), "queued");
    assert_int_equal(num(r, "restarts"), 1);
    assert_string_equal(str(r, "reason"), "worker_crashed");
    assert_int_equal(num(json_object_get(r, "error"), "signal"), 9);
    assert_true(real(r, "not_before") == 150.0);
    expect_null(r, "devices");
    expect_null(r, "eta_s");
    assert_int_equal(num(r, "step"), 42); /* progress stays until the run reports again */
    json_decref(r);

    /* Started again: started moves, first_started stays. */
    assert_int_equal(tw_store_run_started(f->st, "r1", "[1]", 200.0, &err), TW_OK);
    r = run_row(f->st, "r1");
    assert_true(real(r, "started") == 200.0);
    assert_true(real(r, "first_started") == 100.0);
    json_decref(r);
    assert_int_equal(tw_store_run_requeue(f->st, "r1", "worker_crashed", NULL, 250.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r1", "[1]", 260.0, &err), TW_OK);
    assert_int_equal(tw_store_run_progress(f->st, "r1", 100, NULL, 1.0, &err), TW_OK);

    assert_int_equal(tw_store_run_finished(f->st, "r1", TW_RUN_FAILED, "diverged",
                                           "{\"code\": \"INVALID_ARGUMENT\", \"message\": \"loss is NaN\"}", 300.0,
                                           &err),
                     TW_OK);
    r = run_row(f->st, "r1");
    assert_string_equal(str(r, "status"), "failed");
    assert_string_equal(str(r, "reason"), "diverged");
    assert_string_equal(str(json_object_get(r, "error"), "message"), "loss is NaN");
    assert_true(real(r, "finished") == 300.0);
    assert_int_equal(num(r, "restarts"), 2);
    assert_int_equal(num(r, "step"), 100);
    expect_null(r, "eta_s");
    expect_null(r, "metrics");
    json_decref(r);

    add_run(f->st, "r2", "d1");
    assert_int_equal(tw_store_run_started(f->st, "r2", "[0]", 10.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r2", TW_RUN_SUCCEEDED, NULL, NULL, 20.0, &err), TW_OK);
    r = run_row(f->st, "r2");
    assert_string_equal(str(r, "status"), "succeeded");
    expect_null(r, "reason");
    expect_null(r, "error");
    json_decref(r);
}

/* Reads the rows' recovery counts into *requeued and *failed, asserting the call succeeded. */
static void recover(tw_store *st, int *requeued, int *failed)
{
    tw_error err;
    assert_int_equal(tw_store_runs_recover(st, requeued, failed, &err), TW_OK);
}

static void test_runs_recover(void **state)
{
    fixture *f = *state;
    tw_error err;
    int requeued, failed;
    recover(f->st, &requeued, &failed);
    assert_int_equal(requeued + failed, 0);
    add_run(f->st, "r1", "d1");
    add_run(f->st, "r2", "d1");
    add_run(f->st, "r3", "d1");
    add_run(f->st, "r4", "d1");
    add_run(f->st, "r5", "d1");
    assert_int_equal(tw_store_run_started(f->st, "r1", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r2", "[1]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_progress(f->st, "r2", 7, "{}", 3.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r3", "[2]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r3", TW_RUN_SUCCEEDED, NULL, NULL, 2.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r5", "[3]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_stopped(f->st, "r5", &err), 1); /* a stopping server stopped it */
    assert_int_equal(tw_store_run_stopped(f->st, "r5", &err), 0);

    /* The server dies and comes back: each running run's start was an attempt that crashed. */
    tw_store_close(f->st);
    assert_int_equal(tw_store_open(f->db, &f->st, &err), TW_OK);
    recover(f->st, &requeued, &failed);
    assert_int_equal(requeued, 2);
    assert_int_equal(failed, 0);
    expect_status(f->st, "r1", "queued");
    expect_status(f->st, "r2", "queued");
    expect_status(f->st, "r3", "succeeded");
    expect_status(f->st, "r4", "queued");
    json_t *r = run_row(f->st, "r2");
    assert_int_equal(num(r, "restarts"), 1); /* counted: the crash ended an attempt */
    assert_string_equal(str(r, "reason"), "crashed");
    expect_null(r, "devices");
    expect_null(r, "eta_s");
    json_t *last = json_array_get(json_object_get(r, "attempts"), 0);
    assert_string_equal(json_string_value(json_object_get(last, "reason")), "server crashed");
    assert_int_equal(json_integer_value(json_object_get(last, "step_end")), 7);
    json_decref(r);
    r = run_row(f->st, "r5");
    assert_int_equal(num(r, "restarts"), 0); /* stopped, not crashed */
    last = json_array_get(json_object_get(r, "attempts"), 0);
    assert_string_equal(json_string_value(json_object_get(last, "reason")), "server stopped");
    json_decref(r);
    recover(f->st, &requeued, &failed);
    assert_int_equal(requeued + failed, 0);
    /* Submission order survives: r1 is still first. */
    expect_next(f->st, 10.0, "r1");

    /* A run that brings the server down every time it starts meets its max_restarts (3), then fails. */
    for (int crash = 1; crash <= 3; crash++) {
        assert_int_equal(tw_store_run_started(f->st, "r2", "[1]", 10.0 + crash, &err), TW_OK);
        recover(f->st, &requeued, &failed);
        assert_int_equal(requeued, crash < 3);
        assert_int_equal(failed, crash == 3);
    }
    r = run_row(f->st, "r2");
    assert_string_equal(str(r, "status"), "failed");
    assert_string_equal(str(r, "reason"), "crashed");
    const char *message = json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    assert_non_null(strstr(message, "gave up after 3 restarts"));
    assert_int_equal(json_array_size(json_object_get(r, "attempts")), 4);
    json_decref(r);
}

/* The state counts the triggers keep equal a count over the rows after every kind of change: inserts,
 * starts, requeues, finishes, cancels, the recovery at open and deletes. */
static void expect_counts_match_rows(tw_store *st, const char *db)
{
    json_t *c = run_counts(st);
    for (int k = 0; k < TW_RUN_STATES; k++) {
        const char *name = tw_run_state_name((tw_run_state)k);
        char sql[160], want[32];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE status = '%s'", name);
        snprintf(want, sizeof want, "%lld", (long long)num(c, name));
        expect_peek(db, sql, want);
    }
    json_decref(c);
}

static void test_counts_follow_every_change(void **state)
{
    fixture *f = *state;
    tw_error err;
    for (int i = 0; i < 6; i++) {
        char id[8];
        snprintf(id, sizeof id, "r%d", i);
        add_run(f->st, id, "d1");
    }
    expect_counts_match_rows(f->st, f->db);
    assert_int_equal(tw_store_run_started(f->st, "r0", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r1", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r2", "[0]", 1.0, &err), TW_OK);
    expect_counts_match_rows(f->st, f->db);
    assert_int_equal(tw_store_run_requeue(f->st, "r0", "worker_crashed", NULL, 2.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r1", TW_RUN_SUCCEEDED, NULL, NULL, 3.0, &err), TW_OK);
    assert_int_equal(tw_store_run_progress(f->st, "r2", 5, NULL, 1.0, &err), TW_OK); /* no state change */
    assert_int_equal(tw_store_run_cancel_queued(f->st, "r3", 4.0, &err), 1);
    expect_counts_match_rows(f->st, f->db);
    int requeued, failed;
    assert_int_equal(tw_store_runs_recover(f->st, &requeued, &failed, &err), TW_OK); /* r2: running -> queued */
    assert_int_equal(requeued, 1);
    assert_int_equal(tw_store_run_delete(f->st, "r1", &err), TW_OK);
    assert_int_equal(tw_store_run_delete(f->st, "r3", &err), TW_OK);
    expect_counts_match_rows(f->st, f->db);
    json_t *c = run_counts(f->st);
    assert_int_equal(num(c, "queued"), 4);
    assert_int_equal(num(c, "succeeded") + num(c, "cancelled") + num(c, "running"), 0);
    json_decref(c);
}

static void test_cancel_queued_only(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_run(f->st, "r1", "d1");
    add_run(f->st, "r2", "d1");
    add_run(f->st, "r3", "d1");
    assert_int_equal(tw_store_run_started(f->st, "r2", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_started(f->st, "r3", "[1]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r3", TW_RUN_SUCCEEDED, NULL, NULL, 2.0, &err), TW_OK);

    assert_int_equal(tw_store_run_cancel_queued(f->st, "r1", 5.0, &err), 1);
    json_t *r = run_row(f->st, "r1");
    assert_string_equal(str(r, "status"), "cancelled");
    assert_true(real(r, "finished") == 5.0);
    json_decref(r);
    assert_int_equal(tw_store_run_cancel_queued(f->st, "r1", 6.0, &err), 0); /* already cancelled */
    r = run_row(f->st, "r1");
    assert_true(real(r, "finished") == 5.0);
    json_decref(r);
    assert_int_equal(tw_store_run_cancel_queued(f->st, "r2", 6.0, &err), 0); /* running */
    expect_status(f->st, "r2", "running");
    assert_int_equal(tw_store_run_cancel_queued(f->st, "r3", 6.0, &err), 0); /* finished */
    expect_status(f->st, "r3", "succeeded");
    assert_int_equal(tw_store_run_cancel_queued(f->st, "nope", 6.0, &err), 0);
}

/* Evaluation jobs: insert, the oldest queued next, started, finished with a result (JSON, decoded),
 * cancel only while queued, recovery of running ones, the run's list newest first. */
static void test_evaluation_jobs(void **state)
{
    fixture *f = *state;
    tw_error err;
    json_t *row = NULL;
    assert_int_equal(tw_store_eval_next(f->st, &row, &err), TW_END);
    static const char *const IDS[3] = {"e1", "e2", "e3"};
    for (int i = 0; i < 3; i++) {
        tw_eval_new e = {.id = IDS[i], .run_id = "r1", .dataset_id = "d1", .split = "test", .weights = "ema",
                         .checkpoint = 300, .job = "{\"data\": \"x\"}", .now = 1.0 + i};
        assert_int_equal(tw_store_eval_insert(f->st, &e, &err), TW_OK);
    }
    assert_int_equal(tw_store_eval_next(f->st, &row, &err), TW_OK);
    assert_string_equal(str(row, "id"), "e1");
    assert_string_equal(str(json_object_get(row, "job"), "data"), "x");
    assert_int_equal(num(row, "checkpoint"), 300);
    json_decref(row);
    assert_int_equal(tw_store_eval_started(f->st, "e1", 2.0, &err), TW_OK);
    assert_int_equal(tw_store_eval_cancel_queued(f->st, "e1", 3.0, &err), 0); /* running */
    assert_int_equal(tw_store_eval_cancel_queued(f->st, "e2", 3.0, &err), 1);
    assert_int_equal(tw_store_eval_next(f->st, &row, &err), TW_OK);
    assert_string_equal(str(row, "id"), "e3");
    json_decref(row);
    assert_int_equal(tw_store_eval_started(f->st, "e3", 4.0, &err), TW_OK);
    assert_int_equal(tw_store_eval_finished(f->st, "e1", TW_RUN_SUCCEEDED, NULL, "{\"step\": 300}", 5.0, &err),
                     TW_OK);
    assert_int_equal(tw_store_eval_get(f->st, "e1", &row, &err), TW_OK);
    assert_string_equal(str(row, "status"), "succeeded");
    assert_int_equal(num(json_object_get(row, "result"), "step"), 300);
    json_decref(row);
    assert_int_equal(tw_store_evals_recover(f->st, &err), 1); /* e3 */
    assert_int_equal(tw_store_eval_next(f->st, &row, &err), TW_OK);
    assert_string_equal(str(row, "id"), "e3");
    json_decref(row);
    assert_int_equal(tw_store_eval_list(f->st, "r1", &row, &err), TW_OK);
    assert_int_equal(json_array_size(row), 3);
    assert_string_equal(str(json_array_get(row, 0), "id"), "e3");
    json_decref(row);
    assert_int_equal(tw_store_eval_get(f->st, "nope", &row, &err), TW_END);
    /* A finished run is not deleted while a job of it is queued; once none is, its jobs go with it. */
    add_run(f->st, "r1", "d1");
    assert_int_equal(tw_store_run_started(f->st, "r1", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r1", TW_RUN_SUCCEEDED, NULL, NULL, 2.0, &err), TW_OK);
    assert_int_equal(tw_store_run_delete(f->st, "r1", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "evaluation job"));
    assert_int_equal(tw_store_eval_finished(f->st, "e3", TW_RUN_FAILED, NULL, NULL, 6.0, &err), TW_OK);
    assert_int_equal(tw_store_run_delete(f->st, "r1", &err), TW_OK);
    assert_int_equal(tw_store_eval_get(f->st, "e1", &row, &err), TW_END);
}

static void test_run_delete_only_finished(void **state)
{
    fixture *f = *state;
    tw_error err;
    const char *finals[] = {"succeeded", "failed", "cancelled"};
    add_run(f->st, "rq", "d1");
    add_run(f->st, "rr", "d1");
    assert_int_equal(tw_store_run_started(f->st, "rr", "[0]", 1.0, &err), TW_OK);
    char id[8];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "rf%d", i);
        add_run(f->st, id, "d1");
        assert_int_equal(tw_store_run_finished(f->st, id, tw_run_state_named(finals[i]), NULL, NULL, 2.0, &err), TW_OK);
    }
    assert_int_equal(tw_store_run_delete(f->st, "rq", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "rq"));
    assert_int_equal(tw_store_run_delete(f->st, "rr", &err), TW_ERR_INVALID);
    expect_status(f->st, "rq", "queued");
    expect_status(f->st, "rr", "running");
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "rf%d", i);
        assert_int_equal(tw_store_run_delete(f->st, id, &err), TW_OK);
        assert_null(run_row(f->st, id));
        assert_int_equal(tw_store_run_delete(f->st, id, &err), TW_END);
    }
    assert_int_equal(tw_store_run_delete(f->st, "nope", &err), TW_END);
    json_t *p = run_list(f->st, NULL, 10, 0);
    assert_int_equal(num(p, "total"), 2);
    json_decref(p);
}

/* A page read a few rows at a time: its total and range are fixed at open; a run deleted before its turn
 * is skipped, a run added meanwhile (newer) never shows, a run
 * that left the filtered state is skipped, and no read goes past the page. */
static void test_run_page_reads_as_it_goes(void **state)
{
    fixture *f = *state;
    tw_error err;
    char id[8];
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "r%d", i);
        add_run(f->st, id, "d1");
    }
    tw_run_page page;
    json_t *rows;
    assert_int_equal(tw_store_run_page_open(f->st, NULL, 6, 2, &page, &err), TW_OK); /* r7 .. r2 */
    assert_int_equal(page.total, 10);
    assert_int_equal(tw_store_run_page_next(f->st, &page, 2, 0, &rows, &err), TW_OK);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(str(json_array_get(rows, 0), "id"), "r7");
    assert_string_equal(str(json_array_get(rows, 1), "id"), "r6");
    expect_null(json_array_get(rows, 0), "config"); /* with_config 0 */
    assert_null(json_object_get(json_array_get(rows, 0), "seq"));
    json_decref(rows);
    add_run(f->st, "rnew", "d1");
    for (int i = 5; i >= 3; i--) { /* r5..r3 finish; r4 and r3 are deleted */
        snprintf(id, sizeof id, "r%d", i);
        assert_int_equal(tw_store_run_started(f->st, id, "[0]", 1.0, &err), TW_OK);
        assert_int_equal(tw_store_run_finished(f->st, id, TW_RUN_SUCCEEDED, NULL, NULL, 2.0, &err), TW_OK);
        if (i < 5)
            assert_int_equal(tw_store_run_delete(f->st, id, &err), TW_OK);
    }
    assert_int_equal(tw_store_run_page_next(f->st, &page, 64, 1, &rows, &err), TW_OK);
    assert_int_equal(json_array_size(rows), 2); /* r5, r2: r4 and r3 are gone, r1 and r0 past the page */
    assert_string_equal(str(json_array_get(rows, 0), "id"), "r5");
    assert_string_equal(str(json_array_get(rows, 1), "id"), "r2");
    assert_true(json_is_object(json_object_get(json_array_get(rows, 0), "config")));
    json_decref(rows);
    assert_int_equal(tw_store_run_page_next(f->st, &page, 64, 1, &rows, &err), TW_OK);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);

    tw_run_state queued = TW_RUN_QUEUED;
    assert_int_equal(tw_store_run_page_open(f->st, &queued, 3, 0, &page, &err), TW_OK); /* rnew, r9, r8 */
    assert_int_equal(page.total, 8);
    assert_int_equal(tw_store_run_started(f->st, "r9", "[0]", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_page_next(f->st, &page, 64, 0, &rows, &err), TW_OK);
    assert_int_equal(json_array_size(rows), 2); /* r9 left the state: not shown, and r7 is past the page */
    assert_string_equal(str(json_array_get(rows, 0), "id"), "rnew");
    assert_string_equal(str(json_array_get(rows, 1), "id"), "r8");
    json_decref(rows);
}

/* A key used again: the same canonical body finds the run, another body is refused (TW_ERR_INVALID, not
 * "found" and not "none"), and a key unknown is TW_END. */
static void test_idempotency_body(void **state)
{
    fixture *f = *state;
    tw_error err;
    json_t *r = NULL;
    assert_int_equal(add_run_key(f->st, "r1", "d1", "k", &err), TW_OK);
    assert_int_equal(tw_store_run_by_key(f->st, "k", KEY_BODY, &r, &err), TW_OK);
    assert_string_equal(str(r, "id"), "r1");
    assert_null(json_object_get(r, "same")); /* the comparison is not a column of the run */
    json_decref(r);
    r = (json_t *)&r;
    assert_int_equal(tw_store_run_by_key(f->st, "k", "{\"steps\":11}", &r, &err), TW_ERR_INVALID);
    assert_null(r);
    assert_non_null(strstr(err.message, "Idempotency-Key"));
    assert_int_equal(tw_store_run_by_key(f->st, "other", KEY_BODY, &r, &err), TW_END);
    assert_null(r);
}

/* The insert commits only while its dataset exists and is ready: deleted, converting, failed or never
 * there, nothing is inserted and the error names the dataset. */
static void test_run_insert_needs_ready_dataset(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_dataset(f->st, "dgone", "a", "ready");
    assert_int_equal(tw_store_dataset_delete(f->st, "dgone", &err), TW_OK);
    add_dataset(f->st, "dfail", "c", "failed");
    const char *const ids[] = {"dgone", "dfail", "dnever"};
    for (int i = 0; i < 3; i++) {
        tw_run_new r = {.id = "r1", .dataset_id = ids[i], .config = "{}", .towers = 1, .steps = 1};
        assert_int_equal(tw_store_run_insert(f->st, &r, &err), TW_ERR_INVALID);
        assert_non_null(strstr(err.message, ids[i]));
        assert_null(run_row(f->st, "r1"));
    }
    /* Both directions of the race are one statement each: once a queued run holds it, the delete refuses. */
    add_dataset(f->st, "dok", "d", "ready");
    add_run(f->st, "r2", "dok");
    assert_int_equal(tw_store_dataset_delete(f->st, "dok", &err), TW_ERR_INVALID);
    expect_peek(f->db, "SELECT count(*) FROM runs WHERE dataset_id NOT IN (SELECT id FROM datasets)", "0");
}

/* A run on a dataset still converting is queued, and the queue passes over it until the dataset is ready. */
static void test_run_on_a_converting_dataset_waits(void **state)
{
    fixture *f = *state;
    tw_error err;
    json_t *next;
    add_dataset(f->st, "dconv", "b", NULL);
    add_run(f->st, "r1", "dconv");
    add_run(f->st, "r2", "dready");
    expect_status(f->st, "r1", "queued");
    assert_int_equal(tw_store_run_next(f->st, 1e12, &next, &err), TW_OK);
    assert_string_equal(str(next, "id"), "r2");
    json_decref(next);
    assert_int_equal(tw_store_run_finished(f->st, "r2", TW_RUN_CANCELLED, NULL, NULL, 1, &err), TW_OK);
    assert_int_equal(tw_store_run_next(f->st, 1e12, &next, &err), TW_END);
    assert_int_equal(tw_store_dataset_finish(f->st, "dconv", TW_DATASET_READY, "{\"n\": 1}", NULL, &err), TW_OK);
    assert_int_equal(tw_store_run_next(f->st, 1e12, &next, &err), TW_OK);
    assert_string_equal(str(next, "id"), "r1");
    json_decref(next);
}

/* A database made by the version-1 schema gains the body column; its keyed runs (no body kept) are still
 * found by their key. */
static void test_migrates_version_1(void **state)
{
    fixture *f = *state;
    tw_store_close(f->st);
    f->st = NULL;
    char path[4300];
    snprintf(path, sizeof path, "%s/v1.db", f->dir);
    sqlite3 *c = NULL;
    assert_int_equal(sqlite3_open(path, &c), SQLITE_OK);
    assert_int_equal(sqlite3_exec(c,
                                  "CREATE TABLE datasets(id TEXT PRIMARY KEY, name TEXT NOT NULL, status TEXT NOT NULL,"
                                  " source TEXT NOT NULL, error TEXT, meta TEXT, bytes INTEGER NOT NULL,"
                                  " created REAL NOT NULL);"
                                  "CREATE TABLE runs(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,"
                                  " name TEXT, dataset_id TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, error TEXT,"
                                  " config TEXT NOT NULL, towers INTEGER NOT NULL, steps INTEGER NOT NULL,"
                                  " step INTEGER NOT NULL DEFAULT 0, metrics TEXT, devices TEXT, eta_s REAL,"
                                  " created REAL NOT NULL, started REAL, first_started REAL, finished REAL,"
                                  " restarts INTEGER NOT NULL DEFAULT 0, max_restarts INTEGER NOT NULL,"
                                  " deadline_s REAL NOT NULL, not_before REAL NOT NULL DEFAULT 0,"
                                  " idempotency_key TEXT UNIQUE);"
                                  "INSERT INTO runs(id, dataset_id, status, config, towers, steps, created,"
                                  " max_restarts, deadline_s, idempotency_key) VALUES('rold', 'd1', 'queued', '{}',"
                                  " 1, 1, 1.0, 0, 0, 'old-key');"
                                  "PRAGMA user_version = 1;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(c);
    tw_error err;
    assert_int_equal(tw_store_open(path, &f->st, &err), TW_OK);
    expect_peek(path, "PRAGMA user_version", "9");
    expect_peek(path, "SELECT priority FROM runs WHERE id = 'rold'", "0");
    expect_peek(path, "SELECT attempts FROM runs WHERE id = 'rold'", "[]"); /* its history before: unknown */
    expect_peek(path, "SELECT processes || ' ' || hosts FROM runs WHERE id = 'rold'", "1 []"); /* one process */
    expect_peek(path, "SELECT n FROM run_counts WHERE status = 'queued'", "1"); /* counted from the rows */
    expect_peek(path, "SELECT folder FROM runs WHERE id = 'rold'", "rold"); /* an old run's folder: its id */
    expect_peek(path, "SELECT count(*) FROM evaluations", "0");
    json_t *r = NULL;
    assert_int_equal(tw_store_run_by_key(f->st, "old-key", "{\"any\":1}", &r, &err), TW_OK);
    assert_string_equal(str(r, "id"), "rold");
    json_decref(r);
    tw_store_close(f->st); /* and opening a version-8 database again changes nothing */
    assert_int_equal(tw_store_open(path, &f->st, &err), TW_OK);
    expect_peek(path, "PRAGMA user_version", "9");
}

/* Drops the store's tables through a second connection: every later read of them fails for real. */
static void drop_tables(const char *db, const char *sql)
{
    sqlite3 *c = NULL;
    assert_int_equal(sqlite3_open(db, &c), SQLITE_OK);
    assert_int_equal(sqlite3_exec(c, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(c);
}

/* A read that fails: TW_ERR_IO with the database's message, *out NULL; never TW_END, never an empty list. */
static void expect_read_fails(tw_status s, json_t *out, const tw_error *err, const char *what)
{
    if (s != TW_ERR_IO)
        fail_msg("%s: status %d, expected TW_ERR_IO", what, s);
    if (out)
        fail_msg("%s: a row or list came back from a failed read", what);
    if (!strstr(err->message, "no such table"))
        fail_msg("%s: message '%s' does not give the database's reason", what, err->message);
}

static void test_reads_tell_not_found_from_failure(void **state)
{
    fixture *f = *state;
    tw_error err;
    json_t *out = NULL;
    assert_int_equal(add_run_key(f->st, "r1", "d1", "k", &err), TW_OK);
    /* Not found first: TW_END with *out NULL. */
    assert_int_equal(tw_store_dataset_get(f->st, "dx", &out, &err), TW_END);
    assert_int_equal(tw_store_dataset_resolve(f->st, "nothing", &out, &err), TW_END);
    assert_int_equal(tw_store_run_get(f->st, "rx", &out, &err), TW_END);
    assert_int_equal(tw_store_run_by_key(f->st, "kx", KEY_BODY, &out, &err), TW_END);
    assert_int_equal(tw_store_run_next(f->st, -1.0, &out, &err), TW_END);
    assert_null(out);

    tw_run_page open_page, page; /* a page opened before the tables went: its next read fails */
    assert_int_equal(tw_store_run_page_open(f->st, NULL, 10, 0, &open_page, &err), TW_OK);
    drop_tables(f->db, "DROP TABLE runs; DROP TABLE datasets; DROP TABLE run_counts;");
    out = NULL;
#define FAILS(call, what)                                                                            \
    do {                                                                                             \
        tw_error_clear(&err);                                                                        \
        tw_status s_ = call;                                                                         \
        expect_read_fails(s_, out, &err, what);                                                      \
    } while (0)
    FAILS(tw_store_dataset_get(f->st, "d1", &out, &err), "dataset_get");
    FAILS(tw_store_dataset_list(f->st, &out, &err), "dataset_list");
    FAILS(tw_store_dataset_resolve(f->st, "d1", &out, &err), "dataset_resolve");
    FAILS(tw_store_datasets_converting(f->st, &out, &err), "datasets_converting");
    FAILS(tw_store_run_get(f->st, "r1", &out, &err), "run_get");
    FAILS(tw_store_run_by_key(f->st, "k", KEY_BODY, &out, &err), "run_by_key");
    FAILS(tw_store_run_page_open(f->st, NULL, 10, 0, &page, &err), "run_page_open");
    FAILS(tw_store_run_page_next(f->st, &open_page, 8, 1, &out, &err), "run_page_next");
    FAILS(tw_store_run_counts(f->st, &out, &err), "run_counts");
    FAILS(tw_store_run_next(f->st, 1e12, &out, &err), "run_next");
    FAILS(tw_store_runs_in(f->st, TW_RUN_QUEUED, &out, &err), "runs_in");
#undef FAILS
    /* The deletes read after a no-op delete: a failure there is not "no such row" either. */
    assert_int_equal(tw_store_dataset_delete(f->st, "d1", &err), TW_ERR_IO);
    assert_int_equal(tw_store_run_delete(f->st, "r1", &err), TW_ERR_IO);
}

/* Makes DATA/kind/id (a folder with one file). */
static void make_folder(const char *data, const char *kind, const char *id)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", data, kind);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", data, kind, id);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/%s/%s/config.json", data, kind, id);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
}

static int folder_exists(const char *data, const char *kind, const char *id)
{
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%s/config.json", data, kind, id);
    return stat(path, &st) == 0;
}

/* Start-up debris removal: folders without a row go, folders with one stay; when the read fails, nothing
 * goes (an accepted run's or dataset's folder is never deleted because the store could not answer). */
/* A run's folder: NAME-<the id's first 7 characters>, the whole id when asked, the bare id unnamed; and
 * the forms the start-up clean-up takes for ours. */
static void test_run_folder_names(void **state)
{
    (void)state;
    char buf[TW_RUN_FOLDER_BYTES];
    assert_int_equal(tw_run_folder_name("r9ac3a9dd3318c2d", "mnist-lr0.1", 0, buf, sizeof buf), 0);
    assert_string_equal(buf, "mnist-lr0.1-r9ac3a9");
    assert_int_equal(tw_run_folder_name("r9ac3a9dd3318c2d", "mnist-lr0.1", 1, buf, sizeof buf), 0);
    assert_string_equal(buf, "mnist-lr0.1-r9ac3a9dd3318c2d");
    assert_int_equal(tw_run_folder_name("r9ac3a9dd3318c2d", NULL, 0, buf, sizeof buf), 0);
    assert_string_equal(buf, "r9ac3a9dd3318c2d");
    assert_int_equal(tw_run_folder_name("r9ac3a9dd3318c2d", "mnist", 0, buf, 8), -1);
    assert_string_equal(buf, "");
    const char *ours[] = {"r9ac3a9dd3318c2d", "mnist-lr0.1-r9ac3a9", "a-r9ac3a9dd3318c2d", "x.y_z-r000000"};
    const char *not_ours[] = {"mnist", "mnist-r9ac3a", "mnist-r9ac3a9d", "mnist-x9ac3a9", "-r9ac3a9", ".a-r9ac3a9",
                              "a..b-r9ac3a9", "mnist-R9AC3A9", "r9ac3a9dd3318c2", "checkpoints"};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        assert_true(tw_run_folder_valid(ours[i]));
    for (size_t i = 0; i < sizeof not_ours / sizeof not_ours[0]; i++)
        if (tw_run_folder_valid(not_ours[i]))
            fail_msg("%s taken for a run folder", not_ours[i]);
}

static void test_debris_removal_needs_a_successful_read(void **state)
{
    fixture *f = *state;
    static tw_server S; /* only data and store are used */
    snprintf(S.data, sizeof S.data, "%s", f->dir);
    S.store = f->st;
    tw_error err;
    const char *ds = "d00000000000000a", *run = "r00000000000000a";
    const char *ds_debris = "d00000000000000b", *run_debris = "r00000000000000b";
    add_dataset(f->st, ds, "kept", "ready");
    add_run(f->st, run, ds);
    make_folder(f->dir, "datasets", ds);
    make_folder(f->dir, "runs", run);
    make_folder(f->dir, "datasets", ds_debris);
    make_folder(f->dir, "runs", run_debris);
    make_folder(f->dir, "runs", "rnot-an-id"); /* not ours: never touched */
    tw_run_new named = {.id = "r00000000000000c", .name = "mnist", .folder = "mnist-r000000", .dataset_id = ds,
                        .config = "{}", .towers = 1, .steps = 1};
    assert_int_equal(tw_store_run_insert(f->st, &named, &err), TW_OK);
    make_folder(f->dir, "runs", "mnist-r000000");             /* a named run's folder: kept */
    make_folder(f->dir, "runs", "mnist-r000001");             /* a named submission that never committed */
    make_folder(f->dir, "runs", "mnist-r00000000000000d");    /* the same, with the whole id */
    make_folder(f->dir, "runs", "mnist-r00000g");             /* not ours: not hex */
    make_folder(f->dir, "runs", "-r000001");                  /* not ours: no name */
    assert_int_equal(tw_datasets_remove_debris(&S, &err), TW_OK);
    assert_true(folder_exists(f->dir, "runs", "mnist-r000000"));
    assert_false(folder_exists(f->dir, "runs", "mnist-r000001"));
    assert_false(folder_exists(f->dir, "runs", "mnist-r00000000000000d"));
    assert_true(folder_exists(f->dir, "runs", "mnist-r00000g"));
    assert_true(folder_exists(f->dir, "runs", "-r000001"));
    assert_true(folder_exists(f->dir, "datasets", ds));
    assert_true(folder_exists(f->dir, "runs", run));
    assert_false(folder_exists(f->dir, "datasets", ds_debris));
    assert_false(folder_exists(f->dir, "runs", run_debris));
    assert_true(folder_exists(f->dir, "runs", "rnot-an-id"));

    /* The runs table unreadable: the datasets sweep still works, the runs sweep fails and deletes nothing. */
    make_folder(f->dir, "runs", run_debris);
    drop_tables(f->db, "DROP TABLE runs");
    assert_int_equal(tw_datasets_remove_debris(&S, &err), TW_ERR_IO);
    assert_non_null(strstr(err.message, "no such table"));
    assert_true(folder_exists(f->dir, "runs", run));
    assert_true(folder_exists(f->dir, "runs", run_debris));
    /* The datasets table unreadable too: nothing at all is deleted. */
    make_folder(f->dir, "datasets", ds_debris);
    drop_tables(f->db, "DROP TABLE datasets");
    assert_int_equal(tw_datasets_remove_debris(&S, &err), TW_ERR_IO);
    assert_true(folder_exists(f->dir, "datasets", ds));
    assert_true(folder_exists(f->dir, "datasets", ds_debris));
    assert_true(folder_exists(f->dir, "runs", run));
    assert_true(folder_exists(f->dir, "runs", run_debris));
    char path[4400];
    for (int i = 0; i < 2; i++) { /* the fixture removes only flat files */
        snprintf(path, sizeof path, "%s/%s", f->dir, i ? "runs" : "datasets");
        tw_remove_tree(path);
    }
}

/* A JSON column whose text is a JSON scalar decodes to that scalar, not a string. */
static void test_json_columns_decode(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_run(f->st, "r1", "d1");
    assert_int_equal(tw_store_run_started(f->st, "r1", "\"cpu\"", 1.0, &err), TW_OK);
    assert_int_equal(tw_store_run_progress(f->st, "r1", 1, "[1.5, null, true]", 0.0, &err), TW_OK);
    assert_int_equal(tw_store_run_finished(f->st, "r1", TW_RUN_FAILED, "{\"not\": \"json column\"}", "17", 2.0, &err),
                     TW_OK);
    json_t *r = run_row(f->st, "r1");
    assert_string_equal(str(r, "devices"), "cpu");
    json_t *m = json_object_get(r, "metrics");
    assert_true(json_is_array(m));
    assert_true(json_is_null(json_array_get(m, 1)));
    assert_true(json_is_true(json_array_get(m, 2)));
    assert_true(json_is_integer(json_object_get(r, "error")));
    assert_int_equal(num(r, "error"), 17);
    assert_string_equal(str(r, "reason"), "{\"not\": \"json column\"}"); /* reason is plain text */
    json_decref(r);
}

/* Several threads inserting and reading at once: every insert lands, none is lost or doubled. */
typedef struct {
    tw_store *st;
    int thread;
    int failures;
} worker;

enum { THREADS = 4, PER_THREAD = 20 };

static void *insert_many(void *arg)
{
    worker *w = arg;
    char id[TW_ID_BYTES], key[32];
    for (int i = 0; i < PER_THREAD; i++) {
        tw_store_new_id('r', id);
        snprintf(key, sizeof key, "t%d-%d", w->thread, i);
        tw_error err;
        if (add_run_key(w->st, id, "d1", key, &err) != TW_OK)
            w->failures++;
        json_t *r = key_row(w->st, key);
        if (!r || strcmp(json_string_value(json_object_get(r, "id")), id))
            w->failures++;
        json_decref(r);
        json_decref(run_next(w->st, 1e12));
    }
    return NULL;
}

static void test_concurrent_use(void **state)
{
    fixture *f = *state;
    pthread_t t[THREADS];
    worker w[THREADS];
    add_dataset(f->st, "d1", "mnist", "ready");
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){f->st, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, insert_many, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    json_t *p = run_list(f->st, "queued", 1, 0);
    assert_int_equal(num(p, "total"), THREADS * PER_THREAD);
    json_decref(p);
}

/* Sweeps and their trials: names are unique, a trial is inserted once, its row carries its run's state,
 * rung and results move, and deleting the sweep takes its trial rows but leaves the runs. */
static void test_sweeps_and_trials(void **state)
{
    fixture *f = *state;
    tw_error err;
    add_dataset(f->st, "d1", "data", "ready");
    add_run(f->st, "r1", "d1");
    assert_int_equal(tw_store_sweep_insert(f->st, "s1", "lr", "{\"metric\": \"eval_loss\"}", "{\"steps\": 9}", 1.0,
                                           &err), TW_OK);
    assert_int_not_equal(tw_store_sweep_insert(f->st, "s2", "lr", "{}", "{}", 2.0, &err), TW_OK); /* name taken */
    json_t *sw;
    assert_int_equal(tw_store_sweep_resolve(f->st, "lr", &sw, &err), TW_OK);
    assert_string_equal(str(sw, "id"), "s1");
    assert_string_equal(str(sw, "status"), "running");
    assert_string_equal(json_string_value(json_object_get(json_object_get(sw, "spec"), "metric")), "eval_loss");
    json_decref(sw);
    assert_int_equal(tw_store_trial_insert(f->st, "s1", 0, "r1", &err), TW_OK);
    assert_int_equal(tw_store_trial_insert(f->st, "s1", 0, "r-other", &err), TW_OK); /* the first stays */
    assert_int_equal(tw_store_trial_set_rung(f->st, "s1", 0, 2, &err), TW_OK);
    assert_int_equal(tw_store_trial_set_results(f->st, "s1", 0, "[0.5, 0.25]", &err), TW_OK);
    json_t *trials;
    assert_int_equal(tw_store_trials(f->st, "s1", &trials, &err), TW_OK);
    assert_int_equal(json_array_size(trials), 1);
    json_t *t = json_array_get(trials, 0);
    assert_string_equal(str(t, "run_id"), "r1");
    assert_string_equal(str(t, "status"), "queued");
    assert_int_equal(json_integer_value(json_object_get(t, "rung")), 2);
    assert_true(json_real_value(json_array_get(json_object_get(t, "results"), 1)) == 0.25);
    json_decref(trials);
    assert_int_equal(tw_store_sweep_set_status(f->st, "s1", "cancelled", 3.0, &err), TW_OK);
    json_t *listed;
    assert_int_equal(tw_store_sweep_list(f->st, "running", &listed, &err), TW_OK);
    assert_int_equal(json_array_size(listed), 0);
    json_decref(listed);
    assert_int_equal(tw_store_sweep_delete(f->st, "s1", &err), TW_OK);
    assert_int_equal(tw_store_trials(f->st, "s1", &trials, &err), TW_OK);
    assert_int_equal(json_array_size(trials), 0);
    json_decref(trials);
    expect_status(f->st, "r1", "queued"); /* the run stays */
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_open_creates_schema_in_wal_mode),
        T(test_reopen_keeps_rows),
        T(test_open_refuses_what_is_not_a_database),
        cmocka_unit_test(test_new_id_format),
        cmocka_unit_test(test_state_names),
        T(test_dataset_insert_finish_get),
        T(test_dataset_list_newest_first),
        T(test_dataset_resolve),
        T(test_dataset_delete_while_in_use),
        T(test_run_insert_get),
        T(test_idempotency_key),
        T(test_idempotency_body),
        T(test_run_insert_needs_ready_dataset),
        T(test_run_on_a_converting_dataset_waits),
        T(test_migrates_version_1),
        T(test_run_folder_names),
        T(test_reads_tell_not_found_from_failure),
        T(test_debris_removal_needs_a_successful_read),
        T(test_run_list_filter_and_paging),
        T(test_run_page_reads_as_it_goes),
        T(test_run_next_order_and_back_off),
        T(test_run_next_highest_priority_first_fifo_within),
        T(test_run_resume_rules),
        T(test_resolve_names_and_ids),
        T(test_run_lifecycle),
        T(test_runs_recover),
        T(test_counts_follow_every_change),
        T(test_cancel_queued_only),
        T(test_evaluation_jobs),
        T(test_run_delete_only_finished),
        T(test_json_columns_decode),
        T(test_sweeps_and_trials),
        T(test_concurrent_use),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
