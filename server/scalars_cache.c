/* scalars_cache.c — the server's cache of runs' scalar series (scalars_cache.h). The list and its LRU
 * bookkeeping follow predict_cache.c's pattern (held entries, dropped ones freed on release). */
#include "scalars_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "datafs.h"
#include "events_read.h"

typedef struct entry {
    char run[64];
    tw_events_scalars *part[TW_SCALARS_PARTS]; /* owned; NULL until the folder is seen */
    size_t bytes;          /* memory the readers hold (under the cache's mutex) */
    pthread_mutex_t use;   /* held while a request reads the run */
    int refs;              /* requests holding the entry (under the cache's mutex) */
    int dead;              /* dropped from the list: freed when refs reach 0 */
    uint64_t last_used;
    struct entry *next;
} entry;

struct tw_scalars_cache {
    pthread_mutex_t mu;
    entry *head;           /* the live entries */
    size_t n, bytes, max_points;
    uint64_t tick;
    atomic_uint_fast64_t bytes_read;
};

tw_status tw_scalars_cache_create(size_t max_points, tw_scalars_cache **out, tw_error *err)
{
    *out = NULL;
    if (max_points == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_scalars_cache_create needs max_points >= 1");
    tw_scalars_cache *c = calloc(1, sizeof *c);
    if (!c)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->max_points = max_points;
    atomic_init(&c->bytes_read, 0);
    *out = c;
    return TW_OK;
}

static void entry_free(entry *e)
{
    for (int i = 0; i < TW_SCALARS_PARTS; i++)
        tw_events_scalars_free(e->part[i]);
    pthread_mutex_destroy(&e->use);
    free(e);
}

void tw_scalars_cache_destroy(tw_scalars_cache *c)
{
    if (!c)
        return;
    for (entry *e = c->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Unlinks *link's entry (under mu); frees it unless a request holds it (the last release does). */
static void drop(tw_scalars_cache *c, entry **link)
{
    entry *e = *link;
    *link = e->next;
    e->next = NULL;
    c->n--;
    c->bytes -= e->bytes;
    e->bytes = 0;
    e->dead = 1;
    if (e->refs == 0)
        entry_free(e);
}

/* Drops least recently used idle entries while over the bounds (under mu). */
static void trim(tw_scalars_cache *c)
{
    while (c->n > TW_SCALARS_CACHE_RUNS || c->bytes > TW_SCALARS_CACHE_BYTES) {
        entry **oldest = NULL;
        for (entry **link = &c->head; *link; link = &(*link)->next)
            if ((*link)->refs == 0 && (!oldest || (*link)->last_used < (*oldest)->last_used))
                oldest = link;
        if (!oldest)
            return; /* every entry is in use: over the bound until one is released */
        drop(c, oldest);
    }
}

/* run's entry, created when absent, held (takes mu). NULL when out of memory. */
static entry *hold(tw_scalars_cache *c, const char *run)
{
    pthread_mutex_lock(&c->mu);
    entry *e = c->head;
    while (e && strcmp(e->run, run))
        e = e->next;
    if (!e && (e = calloc(1, sizeof *e))) {
        snprintf(e->run, sizeof e->run, "%s", run);
        pthread_mutex_init(&e->use, NULL);
        e->next = c->head;
        c->head = e;
        c->n++;
    }
    if (e) {
        e->refs++;
        e->last_used = ++c->tick;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* Lets e go, accounting its memory now (takes mu); frees it when it was dropped meanwhile. */
static void release(tw_scalars_cache *c, entry *e, size_t bytes)
{
    pthread_mutex_lock(&c->mu);
    e->refs--;
    if (e->dead) {
        if (e->refs == 0)
            entry_free(e);
    } else {
        c->bytes = c->bytes - e->bytes + bytes;
        e->bytes = bytes;
        trim(c);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Reads on one folder into *part (created on first sight; dropped when the folder is gone). */
static tw_status read_part(tw_scalars_cache *c, tw_events_scalars **part, const char *dir, json_t **out,
                           uint64_t *bytes, tw_error *err)
{
    struct stat st;
    if (tw_fs_stat(dir, &st) != 0 && errno == ENOENT) { /* a symlink is ELOOP: read, and refused */
        tw_events_scalars_free(*part);
        *part = NULL;
        *out = json_object();
        return *out ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, dir, -1, "out of memory");
    }
    if (!*part)
        TW_TRY(tw_events_scalars_new(c->max_points, part, err));
    TW_TRY(tw_events_scalars_update(*part, dir, bytes, err));
    return tw_events_scalars_json(*part, out, err);
}

tw_status tw_scalars_cache_read(tw_scalars_cache *c, const char *run, const char *const dirs[TW_SCALARS_PARTS],
                                json_t *out[TW_SCALARS_PARTS], tw_error *err)
{
    for (int i = 0; i < TW_SCALARS_PARTS; i++)
        out[i] = NULL;
    entry *e = hold(c, run);
    if (!e)
        return tw_error_set(err, TW_ERR_NOMEM, run, -1, "out of memory");
    pthread_mutex_lock(&e->use);
    uint64_t bytes = 0;
    size_t memory = 0;
    tw_status s = TW_OK;
    for (int i = 0; s == TW_OK && i < TW_SCALARS_PARTS; i++)
        s = read_part(c, &e->part[i], dirs[i], &out[i], &bytes, err);
    for (int i = 0; i < TW_SCALARS_PARTS; i++)
        memory += e->part[i] ? tw_events_scalars_memory(e->part[i]) : 0;
    pthread_mutex_unlock(&e->use);
    atomic_fetch_add(&c->bytes_read, bytes);
    release(c, e, memory);
    if (s != TW_OK)
        for (int i = 0; i < TW_SCALARS_PARTS; i++) {
            json_decref(out[i]);
            out[i] = NULL;
        }
    return s;
}

void tw_scalars_cache_forget_run(tw_scalars_cache *c, const char *run)
{
    pthread_mutex_lock(&c->mu);
    for (entry **link = &c->head; *link; link = &(*link)->next)
        if (!strcmp((*link)->run, run)) {
            drop(c, link);
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

uint64_t tw_scalars_cache_bytes_read(tw_scalars_cache *c)
{
    return atomic_load(&c->bytes_read);
}
