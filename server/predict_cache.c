/* predict_cache.c — the server's cache of models opened for prediction (predict_cache.h). */
#include "predict_cache.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "datafs.h"

struct tw_predict_entry {
    char run[64];
    char path[PATH_MAX + 320]; /* the checkpoint file under the data folder: the key with run and weights */
    int weights;             /* as asked: tw_weights or TW_WEIGHTS_DEFAULT */
    struct stat id;          /* the file's identity when it was read: dev, ino, size, mtime */
    tw_inference *inf;       /* owned */
    uint64_t bytes;
    pthread_mutex_t use;     /* held while a request runs inf */
    int refs;                /* requests holding the entry (under the cache's mutex) */
    int dead;                /* dropped from the list: freed when refs reach 0 */
    uint64_t last_used;
    tw_predict_entry *next;
};

struct tw_predict_cache {
    pthread_mutex_t mu;
    tw_predict_entry *head; /* the live entries */
    int n;
    uint64_t bytes, tick;
};

tw_status tw_predict_cache_create(tw_predict_cache **out, tw_error *err)
{
    tw_predict_cache *c = calloc(1, sizeof *c);
    if (!c)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return TW_OK;
}

static void entry_free(tw_predict_entry *e)
{
    tw_inference_close(e->inf);
    pthread_mutex_destroy(&e->use);
    free(e);
}

void tw_predict_cache_destroy(tw_predict_cache *c)
{
    if (!c)
        return;
    for (tw_predict_entry *e = c->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Unlinks *link's entry from the list (under mu); frees it unless held. */
static void drop(tw_predict_cache *c, tw_predict_entry **link)
{
    tw_predict_entry *e = *link;
    *link = e->next;
    c->n--;
    c->bytes -= e->bytes;
    e->dead = 1;
    if (e->refs == 0)
        entry_free(e);
}

/* Drops the entries whose checkpoint file is gone or replaced, and those of run (NULL: none) (under mu). */
static void sweep(tw_predict_cache *c, const char *run)
{
    for (tw_predict_entry **link = &c->head; *link;) {
        struct stat now;
        tw_predict_entry *e = *link;
        if ((run && !strcmp(e->run, run)) || tw_fs_stat(e->path, &now) != 0 || !same_file(&now, &e->id))
            drop(c, link);
        else
            link = &e->next;
    }
}

/* Drops least recently used idle entries while over the bounds (under mu). */
static void trim(tw_predict_cache *c)
{
    while (c->n > TW_PREDICT_CACHE_ENTRIES || c->bytes > TW_PREDICT_CACHE_BYTES) {
        tw_predict_entry **oldest = NULL;
        for (tw_predict_entry **link = &c->head; *link; link = &(*link)->next)
            if ((*link)->refs == 0 && (!oldest || (*link)->last_used < (*oldest)->last_used))
                oldest = link;
        if (!oldest)
            return; /* every entry is in use: over the bound until one is released */
        drop(c, oldest);
    }
}

/* The live entry of the key, held (under mu); NULL when absent. */
static tw_predict_entry *find(tw_predict_cache *c, const char *run, const char *path, int w)
{
    for (tw_predict_entry *e = c->head; e; e = e->next)
        if (!strcmp(e->run, run) && !strcmp(e->path, path) && e->weights == w) {
            e->refs++;
            e->last_used = ++c->tick;
            return e;
        }
    return NULL;
}

/* Opens the model of path (outside mu: reading a checkpoint takes a while) into a new entry. */
static tw_status load(const char *run, const char *path, int w, tw_predict_entry **out, tw_error *err)
{
    struct stat before;
    if (tw_fs_stat(path, &before) != 0)
        return tw_fs_error(err, path, "cannot read the checkpoint");
    tw_predict_entry *e = calloc(1, sizeof *e);
    if (!e)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    snprintf(e->run, sizeof e->run, "%s", run);
    snprintf(e->path, sizeof e->path, "%s", path);
    e->weights = w;
    e->id = before;
    e->refs = 1;
    pthread_mutex_init(&e->use, NULL);
    tw_status s = tw_predict_open(path, w, &e->inf, &e->bytes, err);
    if (s != TW_OK) {
        entry_free(e);
        return s;
    }
    *out = e;
    return TW_OK;
}

tw_status tw_predict_cache_get(tw_predict_cache *c, const char *run, const char *path, int w,
                               tw_predict_entry **out, int *hit, tw_error *err)
{
    *out = NULL;
    if (strlen(run) >= sizeof c->head->run || strlen(path) >= sizeof c->head->path)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "the checkpoint's path is too long");
    pthread_mutex_lock(&c->mu);
    sweep(c, NULL);
    tw_predict_entry *e = find(c, run, path, w);
    pthread_mutex_unlock(&c->mu);
    *hit = e != NULL;
    if (!e) {
        TW_TRY(load(run, path, w, &e, err));
        pthread_mutex_lock(&c->mu);
        tw_predict_entry *raced = find(c, run, path, w); /* another request loaded it meanwhile */
        if (raced) {
            entry_free(e);
            e = raced;
        } else {
            e->next = c->head;
            c->head = e;
            c->n++;
            c->bytes += e->bytes;
            e->last_used = ++c->tick;
            trim(c);
        }
        pthread_mutex_unlock(&c->mu);
    }
    *out = e;
    return TW_OK;
}

const tw_inference *tw_predict_entry_model(const tw_predict_entry *e) { return e->inf; }

tw_status tw_predict_entry_run(tw_predict_entry *e, const tw_predict_batch *b, int top_k, const json_t *names,
                               json_t **predictions, tw_error *err)
{
    pthread_mutex_lock(&e->use);
    tw_status s = tw_predict_run(e->inf, b, top_k, names, predictions, err);
    pthread_mutex_unlock(&e->use);
    return s;
}

void tw_predict_cache_release(tw_predict_cache *c, tw_predict_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&c->mu);
    int free_it = --e->refs == 0 && e->dead;
    if (!e->dead)
        trim(c);
    pthread_mutex_unlock(&c->mu);
    if (free_it)
        entry_free(e);
}

void tw_predict_cache_forget_run(tw_predict_cache *c, const char *run)
{
    pthread_mutex_lock(&c->mu);
    sweep(c, run);
    pthread_mutex_unlock(&c->mu);
}
