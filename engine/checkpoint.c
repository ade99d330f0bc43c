/* checkpoint.c — the checkpoint folder (save, pointer, prune, leftovers) and the fp32 checkpoint
 * reader. See checkpoint.h.
 *
 * Owns no format code: files are written and validated by eventlog/safetensors.c, and every durable
 * write goes through tw_atomic_file (temporary, fsync, rename, fsync of the folder). What is here is the
 * order of the steps — checkpoint, then pointer, then pruning — and the folder's naming rules. */
#include "checkpoint.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "datafs.h"

enum {
    STEP_DIGITS = 10,      /* zero padding of the step in file names */
    MAX_STEP_DIGITS = 19,  /* INT64_MAX has 19 digits */
    NAME_BYTES = TW_CKPT_NAME_BYTES, /* "ckpt-" + 19 digits + ".safetensors" + NUL fits */
    LATEST_MAX_BYTES = 64, /* a longer `latest` is corrupt */
};

static const char PREFIX[] = "ckpt-", SUFFIX[] = ".safetensors", LATEST[] = "latest";

struct tw_checkpoint {
    tw_safetensors *st; /* owned; every tensor F32 */
};

static void ckpt_name(int64_t step, char name[NAME_BYTES])
{
    snprintf(name, NAME_BYTES, "%s%0*lld%s", PREFIX, STEP_DIGITS, (long long)step, SUFFIX);
}

/* The step of a checkpoint file name of len bytes, which must be exactly what ckpt_name writes (so one
 * step has one name, and other files are never taken for ours). */
static int parse_name(const char *name, size_t len, int64_t *step)
{
    size_t p = sizeof PREFIX - 1, s = sizeof SUFFIX - 1;
    if (len <= p + s || len > p + s + MAX_STEP_DIGITS)
        return 0;
    uint64_t v = 0;
    for (size_t i = p; i < len - s; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(name[i] - '0'); /* at most 19 digits: no overflow */
    }
    char canonical[NAME_BYTES];
    if (v > INT64_MAX)
        return 0;
    ckpt_name((int64_t)v, canonical);
    if (strlen(canonical) != len || memcmp(canonical, name, len) != 0)
        return 0;
    *step = (int64_t)v;
    return 1;
}

/* A temporary that tw_atomic_file left for a checkpoint or for the pointer. */
static int is_temporary(const char *name)
{
    return !strncmp(name, "latest.tmp.", 11) ||
           (!strncmp(name, PREFIX, sizeof PREFIX - 1) && strstr(name, ".safetensors.tmp."));
}

/* dir/name into buf[TW_CKPT_MAX_PATH]. */
static tw_status join(const char *dir, const char *name, char *buf, tw_error *err)
{
    int n = snprintf(buf, TW_CKPT_MAX_PATH, "%s/%s", dir, name);
    if (n < 0 || n >= TW_CKPT_MAX_PATH)
        return tw_error_set(err, TW_ERR_INVALID, dir, -1, "checkpoint folder path is too long");
    return TW_OK;
}

/* Creates dir if it is missing and makes its entry durable by fsyncing the parent folder. */
static tw_status ensure_dir(const char *dir, tw_error *err)
{
    if (tw_fs_mkdir(dir, 0755) != 0)
        return errno == EEXIST ? TW_OK : tw_fs_error(err, dir, "cannot create checkpoint folder");
    return tw_fsync_dir_of(dir, err);
}

/* The steps of the checkpoint files in dir (caller frees *steps); TW_END when dir does not exist. */
static tw_status list_steps(const char *dir, int64_t **steps, size_t *n, tw_error *err)
{
    *steps = NULL;
    *n = 0;
    DIR *d = tw_fs_opendir(dir);
    if (!d)
        return errno == ENOENT ? TW_END : tw_fs_error(err, dir, "cannot list checkpoint folder");
    size_t cap = 0;
    tw_status s = TW_OK;
    struct dirent *e;
    while (s == TW_OK && (e = readdir(d))) {
        int64_t step;
        if (!parse_name(e->d_name, strlen(e->d_name), &step))
            continue;
        if (*n == cap) {
            int64_t *grown = realloc(*steps, (cap = cap ? 2 * cap : 16) * sizeof *grown);
            if (!grown) {
                s = tw_error_set(err, TW_ERR_NOMEM, dir, -1, "out of memory");
                break;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    return s;
}

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Deletes every checkpoint above step, and all but the newest `keep` at or below it. */
static tw_status prune(const char *dir, int64_t step, int keep, tw_error *err)
{
    int64_t *steps;
    size_t n;
    tw_status s = list_steps(dir, &steps, &n, err);
    if (s == TW_END) /* gone since the save: nothing to prune */
        s = TW_OK;
    if (s == TW_OK)
        qsort(steps, n, sizeof *steps, newest_first);
    int kept = 0;
    for (size_t i = 0; s == TW_OK && i < n; i++) {
        if (steps[i] <= step && kept < keep) {
            kept++;
            continue;
        }
        char name[NAME_BYTES], path[TW_CKPT_MAX_PATH];
        ckpt_name(steps[i], name);
        s = join(dir, name, path, err);
        if (s == TW_OK && tw_fs_unlink(path) != 0 && errno != ENOENT)
            s = tw_fs_error(err, path, "checkpoint at step %lld is saved and `latest` names "
                               "it, but deleting this old one failed", (long long)step);
    }
    free(steps);
    return s;
}

tw_status tw_checkpoint_save(const char *dir, int64_t step, int keep, const tw_ckpt_tensor *tensors,
                             size_t n, const tw_ckpt_meta *meta, size_t n_meta, tw_error *err)
{
    if (step < 0 || keep < 1)
        return tw_error_set(err, TW_ERR_INVALID, dir, -1,
                            "checkpoint step (%lld) must be >= 0 and keep (%d) >= 1",
                            (long long)step, keep);
    char name[NAME_BYTES], path[TW_CKPT_MAX_PATH], latest[TW_CKPT_MAX_PATH], line[NAME_BYTES + 1];
    ckpt_name(step, name);
    TW_TRY(join(dir, name, path, err));
    TW_TRY(join(dir, LATEST, latest, err));
    TW_TRY(ensure_dir(dir, err));
    TW_TRY(tw_safetensors_write_finite(path, tensors, n, meta, n_meta, err)); /* no NaN or Inf, ever */
    int len = snprintf(line, sizeof line, "%s\n", name);
    TW_TRY(tw_atomic_write_file(latest, line, (size_t)len, err));
    return prune(dir, step, keep, err);
}

tw_status tw_checkpoint_remove_temporaries(const char *dir, tw_error *err)
{
    DIR *d = tw_fs_opendir(dir);
    if (!d)
        return errno == ENOENT ? TW_OK : tw_fs_error(err, dir, "cannot list checkpoint folder");
    tw_status s = TW_OK;
    struct dirent *e;
    while (s == TW_OK && (e = readdir(d))) {
        char path[TW_CKPT_MAX_PATH];
        if (!is_temporary(e->d_name))
            continue;
        s = join(dir, e->d_name, path, err);
        if (s == TW_OK && tw_fs_unlink(path) != 0 && errno != ENOENT)
            s = tw_fs_error(err, path, "cannot remove leftover temporary file");
    }
    closedir(d);
    return s;
}

/* Reads the small file path into buf[max + 1] (terminated); TW_END when it does not exist. */
static tw_status read_small(const char *path, char *buf, size_t max, size_t *len, tw_error *err)
{
    int fd = tw_fs_open(path, O_RDONLY, 0);
    if (fd < 0)
        return errno == ENOENT ? TW_END : tw_fs_error(err, path, "cannot open");
    *len = 0;
    ssize_t r;
    while (*len <= max && (r = read(fd, buf + *len, max + 1 - *len)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            tw_status s = tw_error_errno(err, path, "read failed");
            close(fd);
            return s;
        }
        *len += (size_t)r;
    }
    close(fd);
    if (*len > max)
        return tw_error_set(err, TW_ERR_CORRUPT, path, (int64_t)max,
                            "longer than %zu bytes: not a checkpoint pointer", max);
    buf[*len] = 0;
    return TW_OK;
}

/* The checkpoint file dir/latest names into name[TW_CKPT_NAME_BYTES]; touches nothing. TW_END when there
 * is no pointer; TW_ERR_CORRUPT (err.file dir/latest) when it is not one line naming a checkpoint file. */
static tw_status read_latest(const char *dir, char *name, tw_error *err)
{
    char lpath[TW_CKPT_MAX_PATH], text[LATEST_MAX_BYTES + 2];
    size_t len = 0;
    int64_t step;
    TW_TRY(join(dir, LATEST, lpath, err));
    TW_TRY(read_small(lpath, text, LATEST_MAX_BYTES, &len, err));
    if (len < 2 || text[len - 1] != '\n' || !parse_name(text, len - 1, &step))
        return tw_error_set(err, TW_ERR_CORRUPT, lpath, 0,
                            "does not hold one line naming a checkpoint file "
                            "(ckpt-<step>.safetensors)");
    memcpy(name, text, len - 1);
    name[len - 1] = 0;
    return TW_OK;
}

tw_status tw_checkpoint_latest(const char *dir, char *buf, size_t size, tw_error *err)
{
    char lpath[TW_CKPT_MAX_PATH], text[TW_CKPT_NAME_BYTES], path[TW_CKPT_MAX_PATH];
    TW_TRY(join(dir, LATEST, lpath, err));
    TW_TRY(tw_checkpoint_remove_temporaries(dir, err));
    TW_TRY(read_latest(dir, text, err));
    TW_TRY(join(dir, text, path, err));
    struct stat sb;
    if (tw_fs_stat(path, &sb) != 0)
        return errno == ENOENT ? tw_error_set(err, TW_ERR_CORRUPT, lpath, 0,
                                              "names %s, which does not exist", text)
                               : tw_fs_error(err, path, "cannot stat");
    if (strlen(path) >= size)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "path does not fit the buffer");
    memcpy(buf, path, strlen(path) + 1);
    return TW_OK;
}

tw_status tw_checkpoint_latest_name(const char *dir, char *name, tw_error *err)
{
    tw_error e;
    tw_status s = read_latest(dir, name, &e);
    if (s == TW_ERR_CORRUPT || s == TW_END)
        return TW_END;
    if (s != TW_OK && err)
        *err = e;
    return s;
}

int tw_checkpoint_dir_of(const char *logdir, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/checkpoints", logdir);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int oldest_first(const void *a, const void *b) { return newest_first(b, a); }

/* The entry of the checkpoint at step in dir: its name and size. TW_END when it went since it was listed
 * (a prune); a symlink is an error. */
static tw_status list_entry(const char *dir, int64_t step, tw_ckpt_entry *e, tw_error *err)
{
    char path[TW_CKPT_MAX_PATH];
    struct stat sb;
    e->step = step;
    ckpt_name(step, e->file);
    TW_TRY(join(dir, e->file, path, err));
    if (tw_fs_stat(path, &sb) == 0) {
        e->bytes = (uint64_t)sb.st_size;
        return TW_OK;
    }
    return errno == ENOENT ? TW_END : tw_fs_error(err, path, "cannot list the checkpoint");
}

tw_status tw_checkpoint_list(const char *dir, tw_ckpt_listing *out, tw_error *err)
{
    memset(out, 0, sizeof *out);
    out->latest = -1;
    int64_t *steps = NULL;
    size_t n = 0;
    tw_status s = tw_checkpoint_latest_name(dir, out->latest_file, err);
    int have_latest = s == TW_OK;
    if (s == TW_OK || s == TW_END)
        s = list_steps(dir, &steps, &n, err);
    if (s == TW_END) /* no folder: no checkpoint */
        s = TW_OK;
    if (s == TW_OK && n)
        s = (out->entries = calloc(n, sizeof *out->entries)) ? TW_OK
            : tw_error_set(err, TW_ERR_NOMEM, dir, -1, "out of memory");
    if (s == TW_OK && n) /* steps is NULL when there are none */
        qsort(steps, n, sizeof *steps, oldest_first);
    for (size_t i = 0; s == TW_OK && i < n; i++) {
        tw_ckpt_entry *e = &out->entries[out->n];
        tw_status got = list_entry(dir, steps[i], e, err);
        if (got == TW_OK && have_latest && !strcmp(e->file, out->latest_file))
            out->latest = e->step;
        out->n += got == TW_OK;
        s = got == TW_END ? TW_OK : got;
    }
    free(steps);
    if (s != TW_OK)
        tw_checkpoint_listing_free(out);
    return s;
}

const tw_ckpt_entry *tw_checkpoint_listing_find(const tw_ckpt_listing *l, int64_t step)
{
    const int64_t want = step >= 0 ? step : l->latest;
    for (size_t i = 0; i < l->n && want >= 0; i++)
        if (l->entries[i].step == want)
            return &l->entries[i];
    return NULL;
}

void tw_checkpoint_listing_free(tw_ckpt_listing *l)
{
    free(l->entries);
    l->entries = NULL;
    l->n = 0;
}

tw_status tw_checkpoint_read(const char *path, tw_checkpoint **out, tw_error *err)
{
    *out = NULL;
    tw_safetensors *st;
    TW_TRY(tw_safetensors_read(path, &st, err));
    const char *format = tw_safetensors_meta(st, "format");
    if (format && strcmp(format, TW_CHECKPOINT_FORMAT)) {
        tw_status s = tw_error_set(err, TW_ERR_UNSUPPORTED, path, -1,
                                   "the checkpoint is format '%.64s'; this Tower reads %s (a checkpoint of a newer "
                                   "Tower needs that Tower)", format, TW_CHECKPOINT_FORMAT);
        tw_safetensors_free(st);
        return s;
    }
    for (size_t i = 0; i < tw_safetensors_count(st); i++) {
        const tw_st_info *t = tw_safetensors_at(st, i);
        if (t->dtype != TW_ST_F32) {
            tw_status s = tw_error_set(err, TW_ERR_UNSUPPORTED, path, (int64_t)t->offset,
                                       "tensor '%s' is %s; checkpoints hold F32 only", t->name,
                                       tw_st_dtype_name(t->dtype));
            tw_safetensors_free(st);
            return s;
        }
        /* All F32 and contiguous from 0: every tensor starts 4-aligned in the 8-aligned buffer. */
        assert((uintptr_t)t->data % sizeof(float) == 0);
    }
    tw_checkpoint *c = malloc(sizeof *c);
    if (!c) {
        tw_safetensors_free(st);
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    }
    c->st = st;
    *out = c;
    return TW_OK;
}

tw_status tw_checkpoint_open_latest(const char *dir, tw_checkpoint **out, tw_error *err)
{
    *out = NULL;
    char path[TW_CKPT_MAX_PATH];
    TW_TRY(tw_checkpoint_latest(dir, path, sizeof path, err));
    return tw_checkpoint_read(path, out, err);
}

void tw_checkpoint_free(tw_checkpoint *c)
{
    if (!c)
        return;
    tw_safetensors_free(c->st);
    free(c);
}

const char *tw_checkpoint_path(const tw_checkpoint *c) { return tw_safetensors_name(c->st); }

const float *tw_checkpoint_tensor(const tw_checkpoint *c, const char *name, size_t *count)
{
    const tw_st_info *t = tw_safetensors_find(c->st, name);
    if (t && count)
        *count = (size_t)t->count;
    return t ? (const float *)(const void *)t->data : NULL;
}

static int same_shape(const tw_st_info *t, int rank, const int64_t *shape)
{
    if (t->rank != rank)
        return 0;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0 || t->shape[i] != (uint64_t)shape[i])
            return 0;
    return 1;
}

tw_status tw_checkpoint_fetch(const tw_checkpoint *c, const char *name, int rank,
                              const int64_t *shape, float *dst, tw_error *err)
{
    const char *path = tw_checkpoint_path(c);
    if (rank < 0 || rank > TW_ST_MAX_RANK)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "rank %d is not in 0..%d", rank,
                            TW_ST_MAX_RANK);
    const tw_st_info *t = tw_safetensors_find(c->st, name);
    if (!t)
        return tw_error_set(err, TW_ERR_CORRUPT, path, -1, "the checkpoint has no tensor '%s'",
                            name);
    if (!same_shape(t, rank, shape)) {
        uint64_t want[TW_ST_MAX_RANK];
        char have_text[256], want_text[256];
        for (int i = 0; i < rank; i++)
            want[i] = (uint64_t)shape[i];
        tw_st_shape_text(t->shape, t->rank, have_text, sizeof have_text);
        tw_st_shape_text(want, rank, want_text, sizeof want_text);
        return tw_error_set(err, TW_ERR_CORRUPT, path, (int64_t)t->offset,
                            "tensor '%s' has shape %s but the model expects %s", name, have_text,
                            want_text);
    }
    if (t->nbytes)
        memcpy(dst, t->data, (size_t)t->nbytes);
    return TW_OK;
}

const char *tw_checkpoint_meta(const tw_checkpoint *c, const char *key)
{
    return tw_safetensors_meta(c->st, key);
}
