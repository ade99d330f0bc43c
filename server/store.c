/* store.c — SQLite under the server: schema, cached statements, rows as JSON, state transitions.
 *
 * Every statement is prepared once (keyed by its text's address: they are literals) and bound with a
 * small format string ("s" text, "S" text or NULL, "i" int64, "d" double). Rows become JSON objects
 * column by column; columns named in JSON_COLUMNS hold JSON text and are decoded. The schema's version is
 * PRAGMA user_version (9), and an older database is migrated at open. */
#define _GNU_SOURCE
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

enum { MAX_STATEMENTS = 64 };

struct tw_store {
    sqlite3 *db;
    pthread_mutex_t mu;
    struct {
        const char *sql;
        sqlite3_stmt *stmt;
    } cache[MAX_STATEMENTS];
    int n_cached;
    void (*on_fatal)(void *arg, const tw_error *err);
    void *fatal_arg;
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS datasets("
    " id TEXT PRIMARY KEY, name TEXT NOT NULL, status TEXT NOT NULL, source TEXT NOT NULL,"
    " error TEXT, meta TEXT, bytes INTEGER NOT NULL, created REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS runs("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, name TEXT,"
    " dataset_id TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, error TEXT, config TEXT NOT NULL,"
    " towers INTEGER NOT NULL, steps INTEGER NOT NULL, step INTEGER NOT NULL DEFAULT 0, metrics TEXT,"
    " devices TEXT, eta_s REAL, created REAL NOT NULL, started REAL, first_started REAL, finished REAL,"
    " restarts INTEGER NOT NULL DEFAULT 0, max_restarts INTEGER NOT NULL, deadline_s REAL NOT NULL,"
    " not_before REAL NOT NULL DEFAULT 0, idempotency_key TEXT UNIQUE);"
    "CREATE INDEX IF NOT EXISTS runs_status ON runs(status, seq);";

/* Version 2 stores the canonical body an idempotency key was first used with. Databases of version 1
 * (and the version-1 tables SCHEMA makes in a new file) gain the column once (migrate()). */
static const char MIGRATE_2[] =
    "ALTER TABLE runs ADD COLUMN idempotency_body TEXT;"
    "PRAGMA user_version = 2;";

/* Version 3 gives each run a queue priority (tw_store_run_next takes the highest first). */
static const char MIGRATE_3[] =
    "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;"
    "PRAGMA user_version = 3;";

/* Version 4 keeps each run's folder under DATA/runs (server.h, tw_run_folder_name): the runs an older
 * Tower made keep theirs, the bare id. */
static const char MIGRATE_4[] =
    "ALTER TABLE runs ADD COLUMN folder TEXT;"
    "UPDATE runs SET folder = id;"
    "CREATE UNIQUE INDEX runs_folder ON runs(folder);"
    "PRAGMA user_version = 4;";

/* Version 5 keeps the number of runs in each state in run_counts, maintained by triggers in the same
 * transaction as every insert, state change and delete, so /health and /metrics read a handful of rows
 * whatever the number of runs, and the counts cannot drift from the table. Filled once from runs. */
static const char MIGRATE_5[] =
    "CREATE TABLE IF NOT EXISTS run_counts(status TEXT PRIMARY KEY, n INTEGER NOT NULL);"
    "DELETE FROM run_counts;"
    "INSERT INTO run_counts SELECT status, count(*) FROM runs GROUP BY status;"
    "CREATE TRIGGER IF NOT EXISTS run_counts_insert AFTER INSERT ON runs BEGIN"
    " INSERT INTO run_counts VALUES(NEW.status, 1) ON CONFLICT(status) DO UPDATE SET n = n + 1; END;"
    "CREATE TRIGGER IF NOT EXISTS run_counts_update AFTER UPDATE OF status ON runs"
    " WHEN OLD.status IS NOT NEW.status BEGIN"
    " UPDATE run_counts SET n = n - 1 WHERE status = OLD.status;"
    " INSERT INTO run_counts VALUES(NEW.status, 1) ON CONFLICT(status) DO UPDATE SET n = n + 1; END;"
    "CREATE TRIGGER IF NOT EXISTS run_counts_delete AFTER DELETE ON runs BEGIN"
    " UPDATE run_counts SET n = n - 1 WHERE status = OLD.status; END;"
    "PRAGMA user_version = 5;";

/* Version 6 keeps evaluation jobs (POST /runs/{id}/evaluate): a checkpoint of a run on a dataset's split,
 * in a `tower evaluate` child; the result is the evaluation document (engine/evaluation.h). */
static const char MIGRATE_6[] =
    "CREATE TABLE IF NOT EXISTS evaluations("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, run_id TEXT NOT NULL,"
    " dataset_id TEXT NOT NULL, split TEXT NOT NULL, checkpoint INTEGER NOT NULL, weights TEXT NOT NULL,"
    " job TEXT NOT NULL, status TEXT NOT NULL, error TEXT, result TEXT, created REAL NOT NULL,"
    " started REAL, finished REAL);"
    "CREATE INDEX IF NOT EXISTS evaluations_run ON evaluations(run_id, seq);"
    "CREATE TRIGGER IF NOT EXISTS evaluations_go_with_their_run AFTER DELETE ON runs"
    " BEGIN DELETE FROM evaluations WHERE run_id = OLD.id; END;"
    "PRAGMA user_version = 6;";

/* Version 7 keeps how many processes a run trains in and the hosts it names (launch.h); older runs: one
 * process, no hosts. */
static const char MIGRATE_7[] =
    "ALTER TABLE runs ADD COLUMN processes INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE runs ADD COLUMN hosts TEXT NOT NULL DEFAULT '[]';"
    "PRAGMA user_version = 7;";

/* Version 8 keeps each run's attempts (every start of its trainer: when, the steps, why it ended) as a JSON
 * array; an older run's history before it is unknown: []. */
static const char MIGRATE_8[] =
    "ALTER TABLE runs ADD COLUMN attempts TEXT NOT NULL DEFAULT '[]';"
    "PRAGMA user_version = 8;";

/* Version 9 keeps sweeps (POST /api/v1/sweeps): the spec and base config, and each trial: its run, the rung
 * it trains toward and the metric at the end of each rung it finished (a JSON array). A trial's run is an
 * ordinary run; deleting the sweep leaves them. */
static const char MIGRATE_9[] =
    "CREATE TABLE IF NOT EXISTS sweeps("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,"
    " spec TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL, finished REAL);"
    "CREATE TABLE IF NOT EXISTS sweep_trials("
    " sweep_id TEXT NOT NULL, trial INTEGER NOT NULL, run_id TEXT NOT NULL, rung INTEGER NOT NULL DEFAULT 0,"
    " results TEXT NOT NULL DEFAULT '[]', PRIMARY KEY(sweep_id, trial));"
    "CREATE TRIGGER IF NOT EXISTS sweep_trials_go_with_their_sweep AFTER DELETE ON sweeps"
    " BEGIN DELETE FROM sweep_trials WHERE sweep_id = OLD.id; END;"
    "PRAGMA user_version = 9;";

/* The SQL that ends a run's open attempt (its last, while "ended" is null) at the time ?N with the reason
 * ?M and the run's step: the attempt timeline of the run object (server/API.md). */
#define END_ATTEMPT(now, reason)                                                                     \
    "attempts = CASE WHEN json_extract(attempts, '$[#-1].ended') IS NULL AND json_array_length(attempts) "  \
    "> 0 THEN json_set(attempts, '$[#-1].ended', " now ", '$[#-1].step_end', step, '$[#-1].reason', " \
    reason ") ELSE attempts END"
/* The time now in SQL, seconds since the epoch (for the statements not given one). */
#define SQL_NOW "((julianday('now') - 2440587.5) * 86400.0)"

static const char *const JSON_COLUMNS[] = {"error", "meta", "config", "metrics", "devices", "job", "result", "hosts",
                                           "attempts", "spec", "results"};

/* The names the states are stored and shown as (the statements below spell the ones they test in SQL). */
static const char *const RUN_STATES[TW_RUN_STATES] = {
    [TW_RUN_QUEUED] = "queued",     [TW_RUN_RUNNING] = "running",     [TW_RUN_SUCCEEDED] = "succeeded",
    [TW_RUN_FAILED] = "failed",     [TW_RUN_CANCELLED] = "cancelled",
};
static const char *const DATASET_STATES[TW_DATASET_STATES] = {
    [TW_DATASET_CONVERTING] = "converting", [TW_DATASET_READY] = "ready", [TW_DATASET_FAILED] = "failed",
};

/* ================================ states ================================ */

const char *tw_run_state_name(tw_run_state s)
{
    return s >= 0 && s < TW_RUN_STATES ? RUN_STATES[s] : "unknown";
}

const char *tw_dataset_state_name(tw_dataset_state s)
{
    return s >= 0 && s < TW_DATASET_STATES ? DATASET_STATES[s] : "unknown";
}

/* The index of name in names[n], or n. */
static int named(const char *const *names, int n, const char *name)
{
    int i = 0;
    while (i < n && !(name && !strcmp(name, names[i])))
        i++;
    return i;
}

tw_run_state tw_run_state_named(const char *name) { return (tw_run_state)named(RUN_STATES, TW_RUN_STATES, name); }

tw_dataset_state tw_dataset_state_named(const char *name)
{
    return (tw_dataset_state)named(DATASET_STATES, TW_DATASET_STATES, name);
}

tw_run_state tw_store_run_state(const json_t *row)
{
    return tw_run_state_named(json_string_value(json_object_get(row, "status")));
}

tw_dataset_state tw_store_dataset_state(const json_t *row)
{
    return tw_dataset_state_named(json_string_value(json_object_get(row, "status")));
}

int tw_run_state_final(tw_run_state s) { return s == TW_RUN_SUCCEEDED || s == TW_RUN_FAILED || s == TW_RUN_CANCELLED; }

/* ================================ plumbing ================================ */

static tw_status sql_error(tw_store *st, int rc, const char *what, tw_error *err)
{
    int ext = sqlite3_extended_errcode(st->db);
    tw_status s = tw_error_set(err, TW_ERR_IO, NULL, -1, "database: %s: %s (%d)", what,
                               sqlite3_errmsg(st->db), ext);
    int fatal = rc != SQLITE_FULL && (ext & 0xff) == SQLITE_IOERR;
    if (err)
        err->errno_value = rc == SQLITE_FULL ? ENOSPC : (fatal ? EIO : 0);
    if (fatal && st->on_fatal && err)
        st->on_fatal(st->fatal_arg, err);
    return s;
}

void tw_store_on_fatal(tw_store *st, void (*fn)(void *arg, const tw_error *err), void *arg)
{
    st->on_fatal = fn;
    st->fatal_arg = arg;
}

static sqlite3_stmt *prepared(tw_store *st, const char *sql)
{
    for (int i = 0; i < st->n_cached; i++)
        if (st->cache[i].sql == sql) {
            sqlite3_reset(st->cache[i].stmt);
            sqlite3_clear_bindings(st->cache[i].stmt);
            return st->cache[i].stmt;
        }
    sqlite3_stmt *stmt = NULL;
    if (st->n_cached == MAX_STATEMENTS ||
        sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL) != SQLITE_OK)
        return NULL;
    st->cache[st->n_cached].sql = sql;
    st->cache[st->n_cached++].stmt = stmt;
    return stmt;
}

static int bind_all(sqlite3_stmt *stmt, const char *fmt, va_list ap)
{
    int rc = SQLITE_OK;
    for (int i = 1; *fmt && rc == SQLITE_OK; fmt++, i++) {
        const char *s;
        switch (*fmt) {
        case 's':
        case 'S':
            s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(stmt, i, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(stmt, i);
            break;
        case 'i': rc = sqlite3_bind_int64(stmt, i, va_arg(ap, int64_t)); break;
        case 'd': rc = sqlite3_bind_double(stmt, i, va_arg(ap, double)); break;
        default: rc = SQLITE_MISUSE;
        }
    }
    return rc;
}

/* Prepares and binds sql; the caller holds the lock. NULL after filling err. */
static sqlite3_stmt *statement(tw_store *st, const char *sql, tw_error *err, const char *fmt, va_list ap)
{
    sqlite3_stmt *stmt = prepared(st, sql);
    if (!stmt) {
        sql_error(st, SQLITE_ERROR, "prepare", err);
        return NULL;
    }
    if (bind_all(stmt, fmt, ap) != SQLITE_OK) {
        sql_error(st, SQLITE_ERROR, "bind", err);
        return NULL;
    }
    return stmt;
}

/* Runs a statement without result rows. *changes (may be NULL) gets the rows changed; *ext (may be NULL)
 * the extended result code of a failed step (0 otherwise). */
static tw_status exec_v(tw_store *st, int *changes, int *ext, tw_error *err, const char *sql, const char *fmt,
                        va_list ap)
{
    pthread_mutex_lock(&st->mu);
    tw_status s = TW_OK;
    sqlite3_stmt *stmt = statement(st, sql, err, fmt, ap);
    int rc = stmt ? sqlite3_step(stmt) : SQLITE_ERROR;
    if (ext)
        *ext = stmt && rc != SQLITE_DONE ? sqlite3_extended_errcode(st->db) : 0;
    if (!stmt)
        s = TW_ERR_IO;
    else if (rc != SQLITE_DONE)
        s = sql_error(st, rc, "write", err);
    if (changes)
        *changes = sqlite3_changes(st->db);
    if (stmt)
        sqlite3_reset(stmt);
    pthread_mutex_unlock(&st->mu);
    return s;
}

static tw_status exec(tw_store *st, int *changes, tw_error *err, const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tw_status s = exec_v(st, changes, NULL, err, sql, fmt, ap);
    va_end(ap);
    return s;
}

static tw_status exec_ext(tw_store *st, int *changes, int *ext, tw_error *err, const char *sql, const char *fmt,
                          ...)
{
    va_list ap;
    va_start(ap, fmt);
    tw_status s = exec_v(st, changes, ext, err, sql, fmt, ap);
    va_end(ap);
    return s;
}

static json_t *column_json(sqlite3_stmt *stmt, int i)
{
    const char *name = sqlite3_column_name(stmt, i);
    switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER: return json_integer(sqlite3_column_int64(stmt, i));
    case SQLITE_FLOAT: return json_real(sqlite3_column_double(stmt, i));
    case SQLITE_NULL: return json_null();
    default: break;
    }
    const char *text = (const char *)sqlite3_column_text(stmt, i);
    for (size_t k = 0; k < sizeof JSON_COLUMNS / sizeof JSON_COLUMNS[0]; k++)
        if (!strcmp(name, JSON_COLUMNS[k])) {
            json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
            return v ? v : json_null();
        }
    return json_string(text);
}

/* Runs a query: TW_OK with *rows a new array of objects (maybe empty), or TW_ERR_IO (err filled, *rows
 * NULL) when it could not be read to the end. */
static tw_status query(tw_store *st, json_t **rows, tw_error *err, const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&st->mu);
    tw_status s = TW_OK;
    sqlite3_stmt *stmt = statement(st, sql, err, fmt, ap);
    *rows = stmt ? json_array() : NULL;
    int rc = SQLITE_DONE;
    while (*rows && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int i = 0; i < sqlite3_column_count(stmt); i++)
            json_object_set_new(row, sqlite3_column_name(stmt, i), column_json(stmt, i));
        json_array_append_new(*rows, row);
    }
    if (!stmt)
        s = TW_ERR_IO;
    else if (!*rows)
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "database: read: out of memory");
    else if (rc != SQLITE_DONE) {
        s = sql_error(st, rc, "read", err);
        json_decref(*rows);
        *rows = NULL;
    }
    if (stmt)
        sqlite3_reset(stmt);
    pthread_mutex_unlock(&st->mu);
    va_end(ap);
    return s;
}

/* The first row of a query's result s/rows into *out (new): TW_OK, TW_END (no row) or s (failed). */
static tw_status first(tw_status s, json_t *rows, json_t **out)
{
    *out = s == TW_OK ? json_incref(json_array_get(rows, 0)) : NULL;
    json_decref(rows);
    return s != TW_OK ? s : *out ? TW_OK : TW_END;
}

/* Brings a database of an older version to this one: the version is read and changed in one write
 * transaction, so two openers never both migrate. An SQLite result code; on failure why holds SQLite's
 * message (taken before the rollback, which clears it). */
static int migrate(sqlite3 *db, char *why, size_t why_size)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, NULL);
    int version = rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    if (rc == SQLITE_OK && version < 0)
        rc = SQLITE_ERROR;
    if (rc == SQLITE_OK && version < 2)
        rc = sqlite3_exec(db, MIGRATE_2, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 3)
        rc = sqlite3_exec(db, MIGRATE_3, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 4)
        rc = sqlite3_exec(db, MIGRATE_4, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 5)
        rc = sqlite3_exec(db, MIGRATE_5, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 6)
        rc = sqlite3_exec(db, MIGRATE_6, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 7)
        rc = sqlite3_exec(db, MIGRATE_7, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 8)
        rc = sqlite3_exec(db, MIGRATE_8, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < 9)
        rc = sqlite3_exec(db, MIGRATE_9, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        snprintf(why, why_size, "%s", sqlite3_errmsg(db));
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    }
    return rc;
}

tw_status tw_store_open(const char *path, tw_store **out, tw_error *err)
{
    *out = NULL;
    tw_store *st = calloc(1, sizeof *st);
    if (!st)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    pthread_mutex_init(&st->mu, NULL);
    int rc = sqlite3_open_v2(path, &st->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                             NULL);
    static const char *const setup[] = {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                                        "PRAGMA busy_timeout=5000", SCHEMA};
    for (size_t i = 0; rc == SQLITE_OK && i < sizeof setup / sizeof setup[0]; i++)
        rc = sqlite3_exec(st->db, setup[i], NULL, NULL, NULL);
    char why[256] = "";
    if (rc == SQLITE_OK)
        rc = migrate(st->db, why, sizeof why);
    if (rc != SQLITE_OK) {
        tw_status s = tw_error_set(err, TW_ERR_IO, path, -1, "cannot open the database: %s",
                                   why[0] ? why : st->db ? sqlite3_errmsg(st->db) : "out of memory");
        tw_store_close(st);
        return s;
    }
    *out = st;
    return TW_OK;
}

void tw_store_close(tw_store *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_cached; i++)
        sqlite3_finalize(st->cache[i].stmt);
    sqlite3_close(st->db);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

void tw_store_new_id(char prefix, char id[TW_ID_BYTES])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) /* never on Linux >= 3.17; still unique-ish */
        v ^= (uint64_t)(uintptr_t)&v ^ (uint64_t)time(NULL) << 20;
    snprintf(id, TW_ID_BYTES, "%c%015llx", prefix, (unsigned long long)(v & 0xfffffffffffffffull));
}

int tw_store_id_valid(char prefix, const char *s)
{
    if (s[0] != prefix || strlen(s) != TW_ID_BYTES - 1)
        return 0;
    for (const char *c = s + 1; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return 0;
    return 1;
}

/* ================================ datasets ================================ */

#define DATASET_COLUMNS "id, name, status, source, error, meta, bytes, created"

tw_status tw_store_dataset_insert(tw_store *st, const char *id, const char *name, const char *source,
                                  int64_t bytes, tw_error *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return exec(st, NULL, err,
                "INSERT INTO datasets(id, name, status, source, bytes, created) "
                "VALUES(?, ?, 'converting', ?, ?, ?)",
                "sssid", id, name, source, (int64_t)bytes, ts.tv_sec + ts.tv_nsec * 1e-9);
}

tw_status tw_store_dataset_finish(tw_store *st, const char *id, tw_dataset_state state, const char *meta,
                                  const char *error, tw_error *err)
{
    const char *status = tw_dataset_state_name(state);
    return exec(st, NULL, err, "UPDATE datasets SET status = ?, meta = ?, error = ? WHERE id = ?", "sSSs",
                status, meta, error, id);
}

tw_status tw_store_dataset_get(tw_store *st, const char *id, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err, "SELECT " DATASET_COLUMNS " FROM datasets WHERE id = ?", "s", id);
    return first(s, rows, out);
}

tw_status tw_store_dataset_list(tw_store *st, json_t **out, tw_error *err)
{
    return query(st, out, err, "SELECT " DATASET_COLUMNS " FROM datasets ORDER BY created DESC", "");
}

tw_status tw_store_dataset_resolve(tw_store *st, const char *name_or_id, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err,
                        "SELECT " DATASET_COLUMNS " FROM datasets WHERE id = ?1 OR name = ?1 "
                        "ORDER BY id = ?1 DESC, status = 'ready' DESC, created DESC LIMIT 1",
                        "s", name_or_id);
    return first(s, rows, out);
}

tw_status tw_store_datasets_converting(tw_store *st, json_t **out, tw_error *err)
{
    return query(st, out, err,
                 "SELECT " DATASET_COLUMNS " FROM datasets WHERE status = 'converting' ORDER BY created", "");
}

tw_status tw_store_dataset_delete(tw_store *st, const char *id, tw_error *err)
{
    int changed = 0;
    TW_TRY(exec(st, &changed, err,
                "DELETE FROM datasets WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM runs WHERE "
                "dataset_id = ?1 AND status IN ('queued', 'running'))",
                "s", id));
    if (changed)
        return TW_OK;
    json_t *d;
    tw_status s = tw_store_dataset_get(st, id, &d, err);
    json_decref(d);
    return s == TW_OK ? tw_error_set(err, TW_ERR_INVALID, NULL, -1, "dataset %s is used by a queued or running run", id)
                      : s;
}

/* ================================ runs ================================ */

#define RUN_COLUMNS RUN_COLUMNS_HEAD "config" RUN_COLUMNS_TAIL
#define RUN_COLUMNS_HEAD "id, name, dataset_id, status, reason, error, "
#define RUN_COLUMNS_TAIL                                                                           \
    ", towers, steps, step, metrics, devices,"                                                     \
    " eta_s, created, started, first_started, finished, restarts, max_restarts, deadline_s,"       \
    " not_before, priority, folder, processes, hosts, attempts, " QUEUE_POSITION

/* A queued run's place in the queue, 1-based, in the order tw_store_run_next takes runs (priority, then
 * submission); NULL for a run in another state. */
#define QUEUE_POSITION                                                                                  \
    "CASE WHEN status = 'queued' THEN (SELECT count(*) + 1 FROM runs q WHERE q.status = 'queued' AND "   \
    "(q.priority > runs.priority OR (q.priority = runs.priority AND q.seq < runs.seq))) END AS queue_position"

tw_status tw_store_run_insert(tw_store *st, const tw_run_new *r, tw_error *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int changed = 0, ext = 0;
    tw_status s = exec_ext(st, &changed, &ext, err,
                           "INSERT INTO runs(id, name, dataset_id, status, config, towers, steps, created, "
                           "max_restarts, deadline_s, idempotency_key, idempotency_body, priority, folder, "
                           "processes, hosts) "
                           "SELECT ?1, ?2, ?3, 'queued', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, COALESCE(?13, ?1), "
                           "MAX(?14, 1), COALESCE(?15, '[]') "
                           "WHERE EXISTS (SELECT 1 FROM datasets WHERE id = ?3 AND status IN ('ready', 'converting'))",
                           "sSssiididSSiSiS", r->id, r->name, r->dataset_id, r->config, (int64_t)r->towers, r->steps,
                           ts.tv_sec + ts.tv_nsec * 1e-9, (int64_t)r->max_restarts, r->deadline_s, r->idem_key,
                           r->idem_body, (int64_t)r->priority, r->folder, (int64_t)r->processes, r->hosts);
    if (s != TW_OK && r->idem_key && ext == SQLITE_CONSTRAINT_UNIQUE && strstr(err->message, "idempotency_key")) {
        tw_error_clear(err);
        return TW_END;
    }
    if (s == TW_OK && !changed)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "dataset %s was deleted or failed to convert", r->dataset_id);
    return s;
}

tw_status tw_store_run_get(tw_store *st, const char *id, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err, "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?", "s", id);
    return first(s, rows, out);
}

tw_status tw_store_run_by_folder(tw_store *st, const char *folder, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err, "SELECT " RUN_COLUMNS " FROM runs WHERE folder = ?", "s", folder);
    return first(s, rows, out);
}

tw_status tw_store_run_by_key(tw_store *st, const char *idem_key, const char *idem_body, json_t **out,
                              tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err,
                        "SELECT " RUN_COLUMNS ", idempotency_body IS NULL OR idempotency_body IS ?2 AS same "
                        "FROM runs WHERE idempotency_key = ?1",
                        "sS", idem_key, idem_body);
    if ((s = first(s, rows, out)) != TW_OK)
        return s;
    int same = json_integer_value(json_object_get(*out, "same")) != 0;
    json_object_del(*out, "same");
    if (same)
        return TW_OK;
    json_decref(*out);
    *out = NULL;
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "Idempotency-Key: this key was used with a different request body");
}

/* The page's total (from run_counts, kept by triggers: no count over the runs) and the seq range of its
 * rows, in one statement: one read, consistent. */
tw_status tw_store_run_page_open(tw_store *st, const tw_run_state *state, long limit, long offset, tw_run_page *p,
                                 tw_error *err)
{
    const char *status = state ? tw_run_state_name(*state) : NULL;
    json_t *rows, *got;
    tw_status s = query(st, &rows, err,
                        "SELECT (SELECT coalesce(sum(n), 0) FROM run_counts WHERE ?1 IS NULL OR status = ?1) AS total,"
                        " max(seq) AS hi, min(seq) AS lo, count(*) AS n FROM (SELECT seq FROM runs"
                        " WHERE ?1 IS NULL OR status = ?1 ORDER BY seq DESC LIMIT ?2 OFFSET ?3)",
                        "Sii", status, (int64_t)limit, (int64_t)offset);
    if ((s = first(s, rows, &got)) != TW_OK)
        return s == TW_END ? tw_error_set(err, TW_ERR_IO, NULL, -1, "database: read: no page") : s;
    *p = (tw_run_page){status, json_integer_value(json_object_get(got, "hi")),
                       json_integer_value(json_object_get(got, "lo")),
                       (long)json_integer_value(json_object_get(got, "n")),
                       json_integer_value(json_object_get(got, "total"))};
    json_decref(got);
    return TW_OK;
}

tw_status tw_store_run_page_next(tw_store *st, tw_run_page *p, int n, int with_config, json_t **rows,
                                 tw_error *err)
{
    n = n < 1 ? 1 : n > 64 ? 64 : n;
    if (p->left <= 0)
        return (*rows = json_array()) ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    TW_TRY(query(st, rows, err,
                 with_config ? "SELECT seq, " RUN_COLUMNS " FROM runs WHERE seq BETWEEN ?1 AND ?2 AND "
                               "(?3 IS NULL OR status = ?3) ORDER BY seq DESC LIMIT ?4"
                             : "SELECT seq, " RUN_COLUMNS_HEAD "NULL AS config" RUN_COLUMNS_TAIL " FROM runs WHERE "
                               "seq BETWEEN ?1 AND ?2 AND (?3 IS NULL OR status = ?3) ORDER BY seq DESC LIMIT ?4",
                 "iiSi", p->lo, p->next, p->status, (int64_t)(n < p->left ? n : p->left)));
    size_t i;
    json_t *row;
    json_array_foreach(*rows, i, row) {
        p->next = json_integer_value(json_object_get(row, "seq")) - 1;
        json_object_del(row, "seq");
    }
    p->left = json_array_size(*rows) ? p->left - (long)json_array_size(*rows) : 0; /* none left in the range */
    return TW_OK;
}

tw_status tw_store_run_counts(tw_store *st, json_t **out, tw_error *err)
{
    json_t *rows;
    *out = NULL;
    TW_TRY(query(st, &rows, err, "SELECT status, n FROM run_counts", "")); /* kept by triggers (MIGRATE_5) */
    *out = json_object();
    for (int k = 0; k < TW_RUN_STATES; k++)
        json_object_set_new(*out, RUN_STATES[k], json_integer(0));
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
        json_object_set(*out, json_string_value(json_object_get(row, "status")), json_object_get(row, "n"));
    json_decref(rows);
    return *out ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "database: read: out of memory");
}

tw_status tw_store_run_next(tw_store *st, double now, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err,
                        "SELECT " RUN_COLUMNS " FROM runs WHERE status = 'queued' AND not_before <= ? AND "
                        "(SELECT status FROM datasets WHERE datasets.id = runs.dataset_id) IS NOT 'converting' "
                        "ORDER BY priority DESC, seq LIMIT 1",
                        "d", now);
    return first(s, rows, out);
}

tw_status tw_store_running_etas(tw_store *st, json_t **out, tw_error *err)
{
    json_t *rows;
    TW_TRY(query(st, &rows, err, "SELECT eta_s FROM runs WHERE status = 'running' ORDER BY eta_s", ""));
    *out = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) json_array_append(*out, json_object_get(row, "eta_s"));
    json_decref(rows);
    return TW_OK;
}

tw_status tw_store_runs_in(tw_store *st, tw_run_state state, json_t **out, tw_error *err)
{
    return query(st, out, err, "SELECT " RUN_COLUMNS " FROM runs WHERE status = ? ORDER BY seq", "s",
                 tw_run_state_name(state));
}

tw_status tw_store_run_started(tw_store *st, const char *id, const char *devices, double now,
                               tw_error *err)
{
    return exec(st, NULL, err,
                "UPDATE runs SET status = 'running', devices = ?, started = ?2, "
                "first_started = coalesce(first_started, ?2), attempts = json_insert(attempts, '$[#]', "
                "json_object('attempt', json_array_length(attempts) + 1, 'started', ?2, 'ended', NULL, "
                "'step_start', step, 'step_end', NULL, 'reason', NULL)) WHERE id = ?3",
                "sds", devices, now, id);
}

tw_status tw_store_run_progress(tw_store *st, const char *id, int64_t step, const char *metrics,
                                double eta_s, tw_error *err)
{
    return exec(st, NULL, err, "UPDATE runs SET step = ?, metrics = ?, eta_s = ? WHERE id = ?", "iSds",
                step, metrics, eta_s, id);
}

tw_status tw_store_run_finished(tw_store *st, const char *id, tw_run_state state, const char *reason,
                                const char *error, double now, tw_error *err)
{
    return exec(st, NULL, err,
                "UPDATE runs SET status = ?1, reason = ?2, error = ?3, finished = ?4, eta_s = NULL, "
                END_ATTEMPT("?4", "coalesce(?2, ?1)") " WHERE id = ?5",
                "sSSds", tw_run_state_name(state), reason, error, now, id);
}

tw_status tw_store_run_requeue(tw_store *st, const char *id, const char *reason, const char *error,
                               double not_before, tw_error *err)
{
    return exec(st, NULL, err,
                "UPDATE runs SET status = 'queued', reason = ?1, error = ?2, not_before = ?3, "
                "restarts = restarts + 1, devices = NULL, eta_s = NULL, " END_ATTEMPT(SQL_NOW, "?1")
                " WHERE id = ?4",
                "SSds", reason, error, not_before, id);
}

int tw_store_run_stopped(tw_store *st, const char *id, tw_error *err)
{
    int changed = 0;
    if (exec(st, &changed, err,
             "UPDATE runs SET status = 'queued', devices = NULL, eta_s = NULL, "
             END_ATTEMPT(SQL_NOW, "'server stopped'") " WHERE id = ? AND status = 'running'",
             "s", id) != TW_OK)
        return -1;
    return changed;
}

tw_status tw_store_runs_recover(tw_store *st, int *requeued, int *failed, tw_error *err)
{
    static const char WHY[] = "the server ended without stopping the run (a crash, a kill or a power loss)";
    *requeued = *failed = 0;
    TW_TRY(exec(st, failed, err,
                "UPDATE runs SET status = 'failed', reason = 'crashed', error = json_object('code', 'CRASHED', "
                "'message', 'gave up after ' || restarts || ' restarts: ' || ?1), finished = " SQL_NOW
                ", devices = NULL, eta_s = NULL, " END_ATTEMPT(SQL_NOW, "'server crashed'")
                " WHERE status = 'running' AND restarts >= max_restarts",
                "s", WHY));
    return exec(st, requeued, err,
                "UPDATE runs SET status = 'queued', reason = 'crashed', error = json_object('code', 'CRASHED', "
                "'message', ?1), restarts = restarts + 1, devices = NULL, eta_s = NULL, "
                END_ATTEMPT(SQL_NOW, "'server crashed'") " WHERE status = 'running'",
                "s", WHY);
}

int tw_store_run_cancel_queued(tw_store *st, const char *id, double now, tw_error *err)
{
    int changed = 0;
    if (exec(st, &changed, err,
             "UPDATE runs SET status = 'cancelled', finished = ? WHERE id = ? AND status = 'queued'", "ds",
             now, id) != TW_OK)
        return -1;
    return changed;
}

tw_status tw_store_run_delete(tw_store *st, const char *id, tw_error *err)
{
    int changed = 0;
    TW_TRY(exec(st, &changed, err,
                "DELETE FROM runs WHERE id = ?1 AND status IN ('succeeded', 'failed', 'cancelled') AND NOT EXISTS "
                "(SELECT 1 FROM evaluations WHERE run_id = ?1 AND status IN ('queued', 'running'))",
                "s", id));
    if (changed)
        return TW_OK;
    json_t *r;
    tw_status s = tw_store_run_get(st, id, &r, err);
    int finished = s == TW_OK && tw_run_state_final(tw_store_run_state(r));
    json_decref(r);
    if (s != TW_OK)
        return s;
    return finished ? tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                   "run %s has an evaluation job queued or running: cancel it first", id)
                    : tw_error_set(err, TW_ERR_INVALID, NULL, -1, "run %s has not finished: cancel it first", id);
}

/* The one row of `table` whose id is ref, else the rows named ref (sql selects them, newest first):
 * TW_OK with the row, TW_END for none, TW_ERR_INVALID with *out the array of candidate ids when more
 * than one row has that name. */
static tw_status resolve(tw_store *st, const char *sql, const char *kind, const char *ref, json_t **out,
                         tw_error *err)
{
    json_t *rows;
    *out = NULL;
    TW_TRY(query(st, &rows, err, sql, "s", ref));
    json_t *row0 = json_array_get(rows, 0);
    if (json_array_size(rows) > 1 && strcmp(json_string_value(json_object_get(row0, "id")), ref)) {
        json_t *ids = json_array(), *row;
        char list[400] = "";
        size_t i, used = 0;
        json_array_foreach(rows, i, row) {
            const char *id = json_string_value(json_object_get(row, "id"));
            json_array_append(ids, json_object_get(row, "id"));
            if (used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", id);
        }
        json_decref(rows);
        *out = ids;
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%zu %ss are named '%s' (%s): use an id",
                            json_array_size(ids), kind, ref, list);
    }
    return first(TW_OK, rows, out);
}

tw_status tw_store_run_resolve(tw_store *st, const char *ref, json_t **out, tw_error *err)
{
    return resolve(st,
                   "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC, seq DESC",
                   "run", ref, out, err);
}

tw_status tw_store_dataset_resolve_unique(tw_store *st, const char *ref, json_t **out, tw_error *err)
{
    return resolve(st,
                   "SELECT " DATASET_COLUMNS " FROM datasets WHERE id = ?1 OR name = ?1 "
                   "ORDER BY id = ?1 DESC, created DESC",
                   "dataset", ref, out, err);
}

tw_status tw_store_run_rate_like(tw_store *st, const char *config, double *rate, tw_error *err)
{
    json_t *rows;
    *rate = 0;
    TW_TRY(query(st, &rows, err,
                 "SELECT json_extract(metrics, '$.steps_per_sec') AS rate FROM runs WHERE "
                 "json_extract(config, '$.model') = json_extract(?1, '$.model') AND "
                 "json_extract(config, '$.batch_size') IS json_extract(?1, '$.batch_size') AND "
                 "json_extract(config, '$.towers') IS json_extract(?1, '$.towers') AND "
                 "json_extract(metrics, '$.steps_per_sec') > 0 ORDER BY seq DESC LIMIT 1",
                 "s", config));
    *rate = json_number_value(json_object_get(json_array_get(rows, 0), "rate"));
    json_decref(rows);
    return TW_OK;
}

tw_status tw_store_names(tw_store *st, char kind, json_t **out, tw_error *err)
{
    return query(st, out, err,
                 kind == 'r' ? "SELECT name FROM runs WHERE name IS NOT NULL GROUP BY name ORDER BY MAX(seq) DESC "
                               "LIMIT 10000"
                             : "SELECT name FROM datasets GROUP BY name ORDER BY MAX(created) DESC LIMIT 10000",
                 "");
}

/* Why a conditional update of run id changed nothing: TW_END (no such run) or TW_ERR_INVALID naming
 * its state and `why`. */
static tw_status unchanged(tw_store *st, const char *id, const char *why, tw_error *err)
{
    json_t *r;
    tw_status s = tw_store_run_get(st, id, &r, err);
    if (s == TW_OK)
        s = tw_error_set(err, TW_ERR_INVALID, NULL, -1, "run %s is %s: %s", id,
                         json_string_value(json_object_get(r, "status")), why);
    json_decref(r);
    return s;
}

tw_status tw_store_run_set_priority(tw_store *st, const char *id, int priority, tw_error *err)
{
    int changed = 0;
    TW_TRY(exec(st, &changed, err, "UPDATE runs SET priority = ? WHERE id = ? AND status = 'queued'", "is",
                (int64_t)priority, id));
    return changed ? TW_OK : unchanged(st, id, "only a queued run can be moved in the queue", err);
}

tw_status tw_store_run_resume(tw_store *st, const char *id, int64_t steps, tw_error *err)
{
    int changed = 0;
    TW_TRY(exec(st, &changed, err,
                "UPDATE runs SET status = 'queued', steps = ?2, config = json_set(config, '$.steps', ?2), "
                "reason = NULL, error = NULL, finished = NULL, eta_s = NULL, devices = NULL, not_before = 0, "
                "restarts = 0 WHERE id = ?1 AND ((status IN ('cancelled', 'failed') AND ?2 >= steps) OR "
                "(status = 'succeeded' AND ?2 > steps)) AND EXISTS "
                "(SELECT 1 FROM datasets WHERE id = runs.dataset_id AND status = 'ready')",
                "si", id, steps));
    return changed ? TW_OK
                   : unchanged(st, id,
                               "a cancelled or failed run resumes (with steps >= its steps); a succeeded run "
                               "only with more steps; a queued or running run is not stopped; and its dataset "
                               "must still exist",
                               err);
}

/* ================================ evaluation jobs ================================ */

#define EVAL_COLUMNS                                                                                         \
    "id, run_id, dataset_id, split, checkpoint, weights, job, status, error, result, created, started, finished"

tw_status tw_store_eval_insert(tw_store *st, const tw_eval_new *e, tw_error *err)
{
    return exec(st, NULL, err,
                "INSERT INTO evaluations(id, run_id, dataset_id, split, checkpoint, weights, job, status, "
                "created) VALUES(?, ?, ?, ?, ?, ?, ?, 'queued', ?)",
                "ssssissd", e->id, e->run_id, e->dataset_id, e->split, (int64_t)e->checkpoint, e->weights,
                e->job, e->now);
}

tw_status tw_store_eval_get(tw_store *st, const char *id, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err, "SELECT " EVAL_COLUMNS " FROM evaluations WHERE id = ?", "s", id);
    return first(s, rows, out);
}

tw_status tw_store_eval_list(tw_store *st, const char *run_id, json_t **out, tw_error *err)
{
    return query(st, out, err,
                 "SELECT " EVAL_COLUMNS " FROM evaluations WHERE run_id = ? ORDER BY seq DESC LIMIT 100", "s",
                 run_id);
}

tw_status tw_store_eval_next(tw_store *st, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err,
                        "SELECT " EVAL_COLUMNS " FROM evaluations WHERE status = 'queued' ORDER BY seq LIMIT 1", "");
    return first(s, rows, out);
}

tw_status tw_store_eval_started(tw_store *st, const char *id, double now, tw_error *err)
{
    return exec(st, NULL, err, "UPDATE evaluations SET status = 'running', started = ? WHERE id = ?", "ds", now,
                id);
}

tw_status tw_store_eval_finished(tw_store *st, const char *id, tw_run_state state, const char *error,
                                 const char *result, double now, tw_error *err)
{
    return exec(st, NULL, err,
                "UPDATE evaluations SET status = ?, error = ?, result = ?, finished = ? WHERE id = ?", "sSSds",
                tw_run_state_name(state), error, result, now, id);
}

int tw_store_eval_cancel_queued(tw_store *st, const char *id, double now, tw_error *err)
{
    int changed = 0;
    if (exec(st, &changed, err,
             "UPDATE evaluations SET status = 'cancelled', finished = ? WHERE id = ? AND status = 'queued'", "ds",
             now, id) != TW_OK)
        return -1;
    return changed;
}

int tw_store_evals_recover(tw_store *st, tw_error *err)
{
    int changed = 0;
    if (exec(st, &changed, err, "UPDATE evaluations SET status = 'queued', started = NULL WHERE status = 'running'",
             "") != TW_OK)
        return -1;
    return changed;
}

/* ================================ sweeps ================================ */

#define SWEEP_COLUMNS "id, name, spec, config, status, created, finished"

tw_status tw_store_sweep_insert(tw_store *st, const char *id, const char *name, const char *spec, const char *config,
                                double now, tw_error *err)
{
    return exec(st, NULL, err,
                "INSERT INTO sweeps(id, name, spec, config, status, created) VALUES(?, ?, ?, ?, 'running', ?)",
                "ssssd", id, name, spec, config, now);
}

tw_status tw_store_sweep_resolve(tw_store *st, const char *ref, json_t **out, tw_error *err)
{
    json_t *rows;
    tw_status s = query(st, &rows, err, "SELECT " SWEEP_COLUMNS " FROM sweeps WHERE id = ? OR name = ?", "ss", ref, ref);
    return first(s, rows, out);
}

tw_status tw_store_sweep_list(tw_store *st, const char *status, json_t **out, tw_error *err)
{
    if (status)
        return query(st, out, err, "SELECT " SWEEP_COLUMNS " FROM sweeps WHERE status = ? ORDER BY seq", "s", status);
    return query(st, out, err, "SELECT " SWEEP_COLUMNS " FROM sweeps ORDER BY seq DESC LIMIT 1000", "");
}

tw_status tw_store_sweep_set_status(tw_store *st, const char *id, const char *status, double now, tw_error *err)
{
    return exec(st, NULL, err,
                "UPDATE sweeps SET status = ?, finished = CASE WHEN ? = 'running' THEN NULL ELSE ? END WHERE id = ?",
                "ssds", status, status, now, id);
}

tw_status tw_store_sweep_delete(tw_store *st, const char *id, tw_error *err)
{
    return exec(st, NULL, err, "DELETE FROM sweeps WHERE id = ?", "s", id);
}

tw_status tw_store_trial_insert(tw_store *st, const char *sweep_id, int trial, const char *run_id, tw_error *err)
{
    return exec(st, NULL, err, "INSERT OR IGNORE INTO sweep_trials(sweep_id, trial, run_id) VALUES(?, ?, ?)", "sis",
                sweep_id, (int64_t)trial, run_id);
}

tw_status tw_store_trials(tw_store *st, const char *sweep_id, json_t **out, tw_error *err)
{
    return query(st, out, err,
                 "SELECT t.trial, t.run_id, t.rung, t.results, r.name, r.folder, r.status, r.steps, r.step, r.metrics, r.config "
                 "FROM sweep_trials t LEFT JOIN runs r ON r.id = t.run_id WHERE t.sweep_id = ? ORDER BY t.trial",
                 "s", sweep_id);
}

tw_status tw_store_trial_set_rung(tw_store *st, const char *sweep_id, int trial, int rung, tw_error *err)
{
    return exec(st, NULL, err, "UPDATE sweep_trials SET rung = ? WHERE sweep_id = ? AND trial = ?", "isi",
                (int64_t)rung, sweep_id, (int64_t)trial);
}

tw_status tw_store_trial_set_results(tw_store *st, const char *sweep_id, int trial, const char *results, tw_error *err)
{
    return exec(st, NULL, err, "UPDATE sweep_trials SET results = ? WHERE sweep_id = ? AND trial = ?", "ssi", results,
                sweep_id, (int64_t)trial);
}
