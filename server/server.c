/* server.c — the shared pieces of tw_server (see server.h): defaults, the change signal, the fatal flag,
 * clocks and the data-folder paths (removal never follows a symlink: base/datafs.h). */
#define _GNU_SOURCE
#include "server.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "datafs.h"
#include "logtext.h"
#include "names.h"
#include "store.h"

void tw_serve_options_default(tw_serve_options *o)
{
    memset(o, 0, sizeof *o);
    o->listen = "127.0.0.1:8080";
    o->data = "tower-data";
    o->demo = 1;
    o->max_upload = 8ull << 30;
    o->max_dataset = 16ull << 30;
    o->min_free = 256ull << 20;
    o->conn_limit = 256;
    o->per_ip_limit = 64;
    o->conn_timeout = 30;
    o->header_timeout = 10;
    o->body_min_rate = 1000;
    o->heartbeat_timeout = 300;
    o->grace = 30;
    o->backoff_base = 10;
    o->backoff_cap = 300;
    o->max_restarts = 3;
}

void tw_server_changed(tw_server *S)
{
    pthread_mutex_lock(&S->change_mu);
    S->change++;
    pthread_cond_broadcast(&S->change_cv);
    pthread_mutex_unlock(&S->change_mu);
}

uint64_t tw_server_version(tw_server *S)
{
    pthread_mutex_lock(&S->change_mu);
    uint64_t v = S->change;
    pthread_mutex_unlock(&S->change_mu);
    return v;
}

int tw_server_wait_change(tw_server *S, uint64_t *seen, double seconds)
{
    struct timespec until = tw_mono_after(seconds);
    pthread_mutex_lock(&S->change_mu);
    int rc = 0;
    while (S->change == *seen && rc == 0)
        rc = pthread_cond_timedwait(&S->change_cv, &S->change_mu, &until);
    int changed = S->change != *seen;
    *seen = S->change;
    pthread_mutex_unlock(&S->change_mu);
    return changed;
}

void tw_server_fatal(tw_server *S, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    tw_log("tower serve: fatal: %s: stopping (state can no longer be saved)", msg);
    atomic_store(&S->fatal, 1);
    char b = 1;
    ssize_t n = write(S->wake_fd[1], &b, 1);
    (void)n;
}

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double tw_now_mono(void) { return clock_seconds(CLOCK_MONOTONIC); }
double tw_now_wall(void) { return clock_seconds(CLOCK_REALTIME); }

/* DATA/parts[0]/.../parts[n-1] into buf: 0, or -1 (buf "") when it does not fit. */
static int data_join(const tw_server *S, char *buf, size_t size, const char *const *parts, int n)
{
    int len = snprintf(buf, size, "%s", S->data);
    for (int i = 0; i < n && len >= 0 && (size_t)len < size; i++)
        len += snprintf(buf + len, size - (size_t)len, "/%s", parts[i]);
    if (len >= 0 && (size_t)len < size)
        return 0;
    if (size)
        buf[0] = 0;
    return -1;
}

#define JOIN(...) data_join(S, buf, size, (const char *const[]){__VA_ARGS__}, \
                            (int)(sizeof (const char *const[]){__VA_ARGS__} / sizeof(const char *)))

int tw_data_path(const tw_server *S, const char *name, char *buf, size_t size) { return JOIN(name); }
int tw_run_folder_name(const char *id, const char *name, int whole_id, char *buf, size_t size)
{
    int n = name ? snprintf(buf, size, "%s-%.*s", name, whole_id ? TW_ID_BYTES : TW_RUN_FOLDER_ID, id)
                 : snprintf(buf, size, "%s", id);
    if (n >= 0 && (size_t)n < size)
        return 0;
    if (size)
        buf[0] = 0;
    return -1;
}

int tw_run_folder_valid(const char *s)
{
    if (tw_store_id_valid('r', s))
        return 1;
    const char *dash = strrchr(s, '-'), *tail = dash ? dash + 1 : "";
    size_t k = strlen(tail);
    if (!dash || dash - s > TW_NAME_MAX || (k != TW_RUN_FOLDER_ID && k != TW_ID_BYTES - 1))
        return 0;
    char name[TW_NAME_MAX + 1], id[TW_ID_BYTES], why[80];
    snprintf(name, sizeof name, "%.*s", (int)(dash - s), s);
    snprintf(id, sizeof id, "%s000000000", tail); /* a short id padded to an id's length */
    return tw_store_id_valid('r', id) && tw_name_valid(name, why, sizeof why);
}

const char *tw_run_folder(const json_t *row) { return json_string_value(json_object_get(row, "folder")); }

int tw_run_dir(const tw_server *S, const char *folder, char *buf, size_t size)
{
    return JOIN(TW_DATA_RUNS, folder);
}

int tw_sweep_dir(const tw_server *S, const char *folder, const char *trial, char *buf, size_t size)
{
    return trial ? JOIN(TW_DATA_SWEEPS, folder, trial) : JOIN(TW_DATA_SWEEPS, folder);
}

int tw_dataset_dir(const tw_server *S, const char *id, char *buf, size_t size)
{
    return JOIN(TW_DATA_DATASETS, id);
}

int tw_run_path(const tw_server *S, const char *folder, const char *name, char *buf, size_t size)
{
    return JOIN(TW_DATA_RUNS, folder, name);
}

int tw_dataset_path(const tw_server *S, const char *id, const char *name, char *buf, size_t size)
{
    return JOIN(TW_DATA_DATASETS, id, name);
}

int tw_upload_path(const tw_server *S, const char *id, const char *field, char *buf, size_t size)
{
    return JOIN(TW_DATA_DATASETS, id, TW_DATASET_UPLOAD_DIR, field);
}

void tw_remove_tree(const char *path)
{
    if (tw_fs_remove_tree(path) != 0) {
        tw_error err;
        tw_fs_error(&err, path, "cannot remove");
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        tw_log("tower serve: %s", msg);
    }
}

int tw_server_url(tw_server *S, char *buf, size_t size)
{
    int port = atomic_load(&S->port);
    const char *host = strncmp(S->opt.listen, "0.0.0.0:", 8) ? S->opt.listen : "127.0.0.1:";
    const char *colon = strrchr(host, ':');
    int n = port && colon ? snprintf(buf, size, "http://%.*s:%d", (int)(colon - host), host, port) : -1;
    if (n < 0 || (size_t)n >= size) {
        if (size)
            buf[0] = 0;
        return -1;
    }
    return 0;
}
