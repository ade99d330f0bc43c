/* ckpt_writer.c — checkpoints saved off the training step. See ckpt_writer.h.
 *
 * One job at a time: submit fills the job (owned tensor list, names and a copy of the metadata) and
 * starts a thread that runs tw_checkpoint_save on it and marks it done under the mutex; poll joins a done
 * thread, wait joins whatever is in flight. The outcome (status and tw_error) stays in the writer until
 * collected. A thread per save (not a pool): a save is seconds apart at the fastest, a thread start is
 * microseconds, and nothing lingers between saves. */
#include "ckpt_writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t step;
    int keep;
    tw_ckpt_tensor *tensors; /* [n], owned */
    void *names;             /* owned: what the tensors' names point into */
    size_t n;
    tw_ckpt_meta *meta;      /* [n_meta], owned, its strings in strings */
    size_t n_meta;
    char *strings;           /* owned: every key and value, NUL-terminated, back to back */
} job;

struct tw_ckpt_writer {
    char dir[TW_CKPT_MAX_PATH];
    pthread_mutex_t mu;
    pthread_t thread;
    int running;      /* a thread was started and not yet joined (caller's side only) */
    int done;         /* the thread has finished its save (under mu) */
    job j;
    tw_status status; /* the outcome of the last save, until collected */
    tw_error err;
};

static void free_job(job *j)
{
    free(j->tensors);
    free(j->names);
    free(j->meta);
    free(j->strings);
    memset(j, 0, sizeof *j);
}

static void run_job(tw_ckpt_writer *w)
{
    w->status = tw_checkpoint_save(w->dir, w->j.step, w->j.keep, w->j.tensors, w->j.n, w->j.meta,
                                   w->j.n_meta, &w->err);
    free_job(&w->j);
}

static void *thread_main(void *arg)
{
    tw_ckpt_writer *w = arg;
    run_job(w);
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

tw_status tw_ckpt_writer_create(const char *dir, tw_ckpt_writer **out, tw_error *err)
{
    *out = NULL;
    if (strlen(dir) >= TW_CKPT_MAX_PATH)
        return tw_error_set(err, TW_ERR_INVALID, dir, -1, "the checkpoint folder's path is too long");
    tw_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "pthread_mutex_init failed");
    }
    strcpy(w->dir, dir);
    *out = w;
    return TW_OK;
}

/* The outcome of the collected save (TW_OK once reported). */
static tw_status collect(tw_ckpt_writer *w, tw_error *err)
{
    tw_status s = w->status;
    if (s != TW_OK)
        *err = w->err;
    w->status = TW_OK;
    return s;
}

tw_status tw_ckpt_writer_wait(tw_ckpt_writer *w, tw_error *err)
{
    if (w->running) {
        pthread_join(w->thread, NULL);
        w->running = 0;
        w->done = 0;
    }
    return collect(w, err);
}

tw_status tw_ckpt_writer_poll(tw_ckpt_writer *w, int *busy, tw_error *err)
{
    pthread_mutex_lock(&w->mu);
    int done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (busy)
        *busy = w->running && !done;
    return w->running && !done ? TW_OK : tw_ckpt_writer_wait(w, err);
}

/* Copies meta into j (one block of strings). */
static int copy_meta(job *j, const tw_ckpt_meta *meta, size_t n_meta)
{
    size_t bytes = 0;
    for (size_t i = 0; i < n_meta; i++)
        bytes += strlen(meta[i].key) + strlen(meta[i].value) + 2;
    j->meta = malloc((n_meta ? n_meta : 1) * sizeof *j->meta);
    j->strings = malloc(bytes ? bytes : 1);
    if (!j->meta || !j->strings)
        return -1;
    char *p = j->strings;
    for (size_t i = 0; i < n_meta; i++) {
        const char *kv[2] = {meta[i].key, meta[i].value};
        const char *copy[2];
        for (int k = 0; k < 2; k++) {
            size_t len = strlen(kv[k]) + 1;
            copy[k] = memcpy(p, kv[k], len);
            p += len;
        }
        j->meta[i] = (tw_ckpt_meta){copy[0], copy[1]};
    }
    j->n_meta = n_meta;
    return 0;
}

tw_status tw_ckpt_writer_submit(tw_ckpt_writer *w, int64_t step, int keep, tw_ckpt_tensor *tensors,
                                void *names, size_t n, const tw_ckpt_meta *meta, size_t n_meta,
                                tw_error *err)
{
    tw_status s = tw_ckpt_writer_wait(w, err);
    w->j = (job){.step = step, .keep = keep, .tensors = tensors, .names = names, .n = n};
    if (s == TW_OK && copy_meta(&w->j, meta, n_meta) != 0)
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s != TW_OK) {
        free_job(&w->j);
        return s;
    }
    if (pthread_create(&w->thread, NULL, thread_main, w) == 0) {
        w->running = 1;
        return TW_OK;
    }
    run_job(w); /* no thread to be had: the step waits for the save, as it did before */
    return collect(w, err);
}

void tw_ckpt_writer_destroy(tw_ckpt_writer *w)
{
    if (!w)
        return;
    tw_error e;
    tw_ckpt_writer_wait(w, &e);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
