/* events_read.c — a run folder's scalar series, read from its tfevents files. See events_read.h.
 *
 * The TFRecord framing is read here over tw_gzfile rather than through tfrecord.h's reader because a
 * record longer than the cap must be stepped over, not fail the whole read, and without being held in
 * memory: that reader allocates a record before it can check it and stops for good at the first one
 * past its cap. A large graph or image sits in the same file as the losses (Keras writes both), so
 * stopping there would lose every later point. Both CRCs are still checked, the long record's in
 * pieces as it streams past.
 *
 * Series live in a growable array, found by tag through a jansson object used as a hash table (tag ->
 * index); jansson also builds the reply. */
#include "events_read.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "datafs.h"
#include "event.pb-c.h"
#include "gzfile.h"
#include "tfrecord.h"

static const char PROFILE_EMPTY[] = ".profile-empty";

json_t *tw_events_read_json_number(double v)
{
    if (isfinite(v))
        return json_real(v);
    return json_string(isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
}

/* ------------------------------------------------------------------ series */

typedef struct {
    int64_t step;
    double wall_time;
    float value;
} point;

typedef struct {
    int scalar;        /* decided by the tag's first value (events_read.h) */
    point *kept;       /* [cap] the sample of all but the newest point, steps strictly ascending;
                        * kept[i] is the point that arrived (i * stride)-th */
    size_t n, cap;
    uint64_t stride;   /* the sample takes the arrivals whose index is a multiple of this; a power of 2 */
    uint64_t arrivals; /* index the next arriving point gets */
    point tail;        /* the newest point (when has_tail), not yet offered to the sample */
    uint64_t tail_at;  /* its arrival index */
    int has_tail;
} series;

typedef struct {
    size_t keep;       /* sampled points per series: max_points - 1, the newest point being the last */
    json_t *index;     /* {tag: integer index into s} */
    series *s;         /* [n_series] */
    size_t n_series, cap_series;
    uint8_t *rec;      /* record buffer [rec_cap], at most TW_EVENTS_READ_MAX_RECORD + 4; freed after each
                        * update so a cached reader holds only its series */
    size_t rec_cap;
    uint64_t base;     /* byte offset in the file where the stream being read starts */
} reader;

/* Where the reading of one event file stands (tw_events_scalars). */
typedef struct {
    char *path;        /* owned */
    dev_t dev;
    ino_t ino;
    uint64_t done;     /* bytes up to the end of its last whole record: read on from there */
    uint64_t end;      /* its size when last read to its end */
} file_mark;

struct tw_events_scalars {
    reader r;
    file_mark *files;  /* [n_files] the files read, in the order read (by name) */
    size_t n_files, cap_files;
};

static void reader_cleanup(reader *r)
{
    for (size_t i = 0; i < r->n_series; i++)
        free(r->s[i].kept);
    free(r->s);
    free(r->rec);
    json_decref(r->index);
}

/* Back to a reader that has read nothing, keeping keep. */
static tw_status reader_reset(reader *r, tw_error *err)
{
    size_t keep = r->keep;
    reader_cleanup(r);
    *r = (reader){.keep = keep, .index = json_object()};
    return r->index ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

/* Drops the points of one series with step >= step. When any goes, the sampling restarts just after
 * the last point still sampled, as if the dropped ones had never arrived. */
static void series_discard(series *s, int64_t step)
{
    int dropped = 0;
    if (s->has_tail && s->tail.step >= step) {
        s->has_tail = 0;
        dropped = 1;
    }
    while (s->n > 0 && s->kept[s->n - 1].step >= step) {
        s->n--;
        dropped = 1;
    }
    if (dropped)
        s->arrivals = s->n ? (uint64_t)(s->n - 1) * s->stride + 1 : 0;
}

/* Offers the tail to the sample: taken when its arrival index is on the stride. A full sample first
 * drops every other point (kept[0] stays) and doubles the stride. */
static tw_status sample_tail(series *s, size_t keep, const char *path, tw_error *err)
{
    if (!keep || s->tail_at % s->stride)
        return TW_OK;
    if (s->n == keep) {
        size_t j = 0;
        for (size_t i = 0; i < s->n; i += 2)
            s->kept[j++] = s->kept[i];
        s->n = j;
        s->stride *= 2;
        if (s->n == keep || s->tail_at % s->stride)
            return TW_OK;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        cap = cap < keep ? cap : keep;
        point *q = realloc(s->kept, cap * sizeof *q);
        if (!q)
            return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory for %zu points", cap);
        s->kept = q;
        s->cap = cap;
    }
    s->kept[s->n++] = s->tail;
    return TW_OK;
}

/* Adds the newest point of a series (its step is above every step held: see series_discard). */
static tw_status series_add(series *s, size_t keep, point p, const char *path, tw_error *err)
{
    if (s->has_tail)
        TW_TRY(sample_tail(s, keep, path, err));
    s->tail = p;
    s->tail_at = s->arrivals++;
    s->has_tail = 1;
    return TW_OK;
}

/* The series for v's tag, created on its first value v (which decides whether it is a scalar series).
 * *out is NULL for a tag that is not UTF-8: JSON cannot name it, and TensorBoard's data server fails the
 * record, so its values are skipped. */
static tw_status find_series(reader *r, const Twpb__Summary__Value *v, series **out, const char *path,
                             tw_error *err)
{
    *out = NULL;
    json_t *at = json_object_get(r->index, v->tag);
    if (at) {
        *out = &r->s[json_integer_value(at)];
        return TW_OK;
    }
    json_t *probe = json_string(v->tag);
    if (!probe) {
        probe = json_string_nocheck(v->tag);
        int not_utf8 = probe != NULL;
        json_decref(probe);
        return not_utf8 ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    }
    json_decref(probe);
    if (r->n_series == r->cap_series) {
        size_t cap = r->cap_series ? r->cap_series * 2 : 16;
        series *s = realloc(r->s, cap * sizeof *s);
        if (!s)
            return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory for %zu tags", cap);
        r->s = s;
        r->cap_series = cap;
    }
    const Twpb__SummaryMetadata *m = v->metadata;
    int scalar;
    if (m && m->data_class != TWPB__DATA_CLASS__DATA_CLASS_UNKNOWN)
        scalar = m->data_class == TWPB__DATA_CLASS__DATA_CLASS_SCALAR;
    else if (v->value_case == TWPB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE)
        scalar = 1;
    else
        scalar = v->value_case == TWPB__SUMMARY__VALUE__VALUE_TENSOR && m && m->plugin_data &&
                 !strcmp(m->plugin_data->plugin_name, "scalars");
    if (json_object_set_new(r->index, v->tag, json_integer((json_int_t)r->n_series)))
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    series *s = &r->s[r->n_series++];
    memset(s, 0, sizeof *s);
    s->scalar = scalar;
    s->stride = 1;
    *out = s;
    return TW_OK;
}

/* The float a scalar series' value holds: a simple_value, or a rank-0 DT_FLOAT tensor with exactly one
 * float_val or 4 bytes of (little-endian) tensor_content. 0 when it holds none. */
static int scalar_of(const Twpb__Summary__Value *v, float *out)
{
    if (v->value_case == TWPB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE) {
        *out = v->simple_value;
        return 1;
    }
    if (v->value_case != TWPB__SUMMARY__VALUE__VALUE_TENSOR)
        return 0;
    const Twpb__TensorProto *t = v->tensor;
    if (t->dtype != TWPB__DATA_TYPE__DT_FLOAT || (t->tensor_shape && t->tensor_shape->n_dim))
        return 0;
    if (t->n_float_val == 1 && !t->tensor_content.len) {
        *out = t->float_val[0];
        return 1;
    }
    if (t->n_float_val == 0 && t->tensor_content.len == 4) {
        const uint8_t *b = t->tensor_content.data;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        memcpy(out, &u, sizeof *out);
        return 1;
    }
    return 0;
}

static tw_status add_event(reader *r, const Twpb__Event *ev, const char *path, tw_error *err)
{
    if (ev->what_case == TWPB__EVENT__WHAT_SESSION_LOG &&
        ev->session_log->status == TWPB__SESSION_LOG__SESSION_STATUS__START) {
        for (size_t i = 0; i < r->n_series; i++)
            series_discard(&r->s[i], ev->step);
        return TW_OK;
    }
    if (ev->what_case != TWPB__EVENT__WHAT_SUMMARY)
        return TW_OK;
    for (size_t i = 0; i < ev->summary->n_value; i++) {
        const Twpb__Summary__Value *v = ev->summary->value[i];
        series *s;
        float value;
        TW_TRY(find_series(r, v, &s, path, err));
        if (!s || !s->scalar || !scalar_of(v, &value))
            continue;
        series_discard(s, ev->step);
        point p = {.step = ev->step, .wall_time = ev->wall_time, .value = value};
        TW_TRY(series_add(s, r->keep, p, path, err));
    }
    return TW_OK;
}

/* ------------------------------------------------------------------ records */

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

/* Streams past a record's n payload bytes and its footer, checking the CRC. TW_END when the file ends
 * first (a torn tail). */
static tw_status skip_record(tw_gzfile *f, uint64_t n, int64_t at, tw_error *err)
{
    uint8_t footer[TW_TFRECORD_FOOTER_BYTES];
    uint64_t left = n + sizeof footer;
    uint32_t crc = 0;
    while (left > 0) {
        const uint8_t *p;
        size_t avail;
        TW_TRY(tw_gzfile_peek(f, &p, &avail, err));
        if (avail == 0)
            return TW_END;
        size_t take = avail < left ? avail : (size_t)left;
        uint64_t done = n + sizeof footer - left;
        size_t payload = done >= n ? 0 : (size_t)(n - done < take ? n - done : take);
        crc = tw_crc32c_extend(crc, p, payload);
        for (size_t i = payload; i < take; i++)
            footer[done + i - n] = p[i];
        tw_gzfile_skip(f, take);
        left -= take;
    }
    if (tw_crc32c_mask(crc) != get_le32(footer))
        return tw_error_set(err, TW_ERR_CORRUPT, tw_gzfile_name(f), at,
                            "corrupted record: data CRC mismatch");
    return TW_OK;
}

/* The next record of f that is short enough to decode: TW_OK with *data, *len (in r->rec) and *at (its
 * offset), longer records stepped over. TW_END at the end of the file or at a torn tail. */
static tw_status next_record(reader *r, tw_gzfile *f, const uint8_t **data, size_t *len, int64_t *at,
                             tw_error *err)
{
    for (;;) {
        uint8_t header[TW_TFRECORD_HEADER_BYTES];
        size_t got;
        *at = (int64_t)(r->base + tw_gzfile_offset(f));
        TW_TRY(tw_gzfile_read(f, header, sizeof header, &got, err));
        if (got < sizeof header)
            return TW_END;
        if (tw_crc32c_mask(tw_crc32c(header, 8)) != get_le32(header + 8))
            return tw_error_set(err, TW_ERR_CORRUPT, tw_gzfile_name(f), *at,
                                "corrupted record: length CRC mismatch");
        uint64_t n = get_le64(header);
        if (n > TW_EVENTS_READ_MAX_RECORD) {
            TW_TRY(skip_record(f, n, *at, err));
            continue;
        }
        size_t need = (size_t)n + TW_TFRECORD_FOOTER_BYTES;
        if (need > r->rec_cap) {
            size_t cap = r->rec_cap ? r->rec_cap : 4096;
            while (cap < need)
                cap *= 2;
            uint8_t *p = realloc(r->rec, cap);
            if (!p)
                return tw_error_set(err, TW_ERR_NOMEM, tw_gzfile_name(f), *at,
                                    "out of memory for a record of %zu bytes", need);
            r->rec = p;
            r->rec_cap = cap;
        }
        TW_TRY(tw_gzfile_read(f, r->rec, need, &got, err));
        if (got < need)
            return TW_END;
        if (tw_crc32c_mask(tw_crc32c(r->rec, (size_t)n)) != get_le32(r->rec + n))
            return tw_error_set(err, TW_ERR_CORRUPT, tw_gzfile_name(f), *at,
                                "corrupted record: data CRC mismatch");
        *data = r->rec;
        *len = (size_t)n;
        return TW_OK;
    }
}

/* Reads the records of m's file from m->done on; moves m->done past the last whole record and m->end to
 * where the file ended, adding the bytes consumed to *bytes. */
static tw_status read_file(reader *r, file_mark *m, uint64_t *bytes, tw_error *err)
{
    const char *path = m->path;
    tw_gzfile *f;
    TW_TRY(tw_gzfile_open_plain_at(path, m->done, &f, err));
    r->base = m->done;
    tw_status s;
    const uint8_t *data = NULL;
    size_t len = 0;
    int64_t at = (int64_t)m->done;
    while ((s = next_record(r, f, &data, &len, &at, err)) == TW_OK) {
        Twpb__Event *ev = twpb__event__unpack(NULL, len, data);
        if (!ev) {
            s = tw_error_set(err, TW_ERR_CORRUPT, path, at,
                             "record of %zu bytes is not a valid Event protobuf", len);
            break;
        }
        s = add_event(r, ev, path, err);
        twpb__event__free_unpacked(ev, NULL);
        if (s != TW_OK)
            break;
    }
    if (s == TW_END) { /* at is where the last, unfinished, attempt began: the file's end or a torn tail */
        s = TW_OK;
        m->end = r->base + tw_gzfile_offset(f);
        *bytes += m->end - m->done;
        m->done = (uint64_t)at;
    }
    tw_gzfile_close(f);
    return s;
}

/* ------------------------------------------------------------------ folder */

static int is_event_file(const char *name)
{
    size_t n = strlen(name), k = sizeof PROFILE_EMPTY - 1;
    return strstr(name, "tfevents") && !(n >= k && !strcmp(name + n - k, PROFILE_EMPTY));
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The paths of logdir's event files, sorted by name (caller frees with free_names). */
static tw_status list_files(const char *logdir, char ***out, size_t *count, tw_error *err)
{
    *out = NULL;
    *count = 0;
    DIR *d = tw_fs_opendir(logdir);
    if (!d)
        return tw_fs_error(err, logdir, "cannot list the run folder");
    char **names = NULL;
    size_t n = 0, cap = 0;
    tw_status s = TW_OK;
    errno = 0;
    for (struct dirent *e; s == TW_OK && (e = readdir(d)); errno = 0) {
        if (!is_event_file(e->d_name))
            continue;
        size_t len = strlen(logdir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            s = tw_error_set(err, TW_ERR_NOMEM, logdir, -1, "out of memory");
            break;
        }
        snprintf(path, len, "%s/%s", logdir, e->d_name);
        struct stat st;
        int found = tw_fs_stat(path, &st) == 0;
        if (!found && errno == ELOOP) /* a symlink under the data folder: an error, not skipped */
            s = tw_fs_error(err, path, "cannot read the event file");
        if (!found || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **p = realloc(names, cap * sizeof *p);
            if (!p) {
                free(path);
                s = tw_error_set(err, TW_ERR_NOMEM, logdir, -1, "out of memory");
                break;
            }
            names = p;
        }
        names[n++] = path;
    }
    if (s == TW_OK && errno)
        s = tw_error_errno(err, logdir, "cannot list the run folder");
    closedir(d);
    if (s != TW_OK) {
        free_names(names, n);
        return s;
    }
    if (n)
        qsort(names, n, sizeof *names, by_name);
    *out = names;
    *count = n;
    return TW_OK;
}

/* {tag: [[step, value, wall_time], ...]} of the scalar series with points. */
static tw_status build_json(const reader *r, json_t **out, tw_error *err)
{
    json_t *obj = json_object();
    const char *tag;
    json_t *at;
    json_object_foreach(r->index, tag, at) {
        const series *s = &r->s[json_integer_value(at)];
        if (!s->scalar || (!s->n && !s->has_tail))
            continue;
        json_t *pts = json_array();
        for (size_t i = 0; pts && i < s->n + (size_t)s->has_tail; i++) {
            const point *p = i < s->n ? &s->kept[i] : &s->tail;
            if (json_array_append_new(pts, json_pack("[I, o, o]", (json_int_t)p->step,
                                                     tw_events_read_json_number(p->value),
                                                     tw_events_read_json_number(p->wall_time)))) {
                json_decref(pts);
                pts = NULL;
            }
        }
        if (!obj || json_object_set_new(obj, tag, pts)) {
            json_decref(obj);
            return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory for the scalar series");
        }
    }
    *out = obj;
    return TW_OK;
}

/* ------------------------------------------------------------------ incremental */

static void forget_files(tw_events_scalars *t)
{
    for (size_t i = 0; i < t->n_files; i++)
        free(t->files[i].path);
    t->n_files = 0;
}

/* Whether what was read of the folder is still a prefix of what a full read would read now: the same
 * files (path, device, inode) in the same order, each unchanged in size but the last, which may only
 * have grown; new files sorting after them. sizes[n] are the files' sizes now. */
static int still_prefix(const tw_events_scalars *t, char **paths, const struct stat *st, size_t n)
{
    if (n < t->n_files)
        return 0;
    for (size_t i = 0; i < t->n_files; i++) {
        const file_mark *m = &t->files[i];
        uint64_t size = (uint64_t)st[i].st_size;
        if (strcmp(m->path, paths[i]) || m->dev != st[i].st_dev || m->ino != st[i].st_ino)
            return 0;
        if (i + 1 < t->n_files ? size != m->end : size < m->done)
            return 0;
    }
    return 1;
}

/* Appends a mark for path (taken over by the mark) at offset 0. */
static tw_status add_mark(tw_events_scalars *t, char **path, const struct stat *st, tw_error *err)
{
    if (t->n_files == t->cap_files) {
        size_t cap = t->cap_files ? t->cap_files * 2 : 4;
        file_mark *p = realloc(t->files, cap * sizeof *p);
        if (!p)
            return tw_error_set(err, TW_ERR_NOMEM, *path, -1, "out of memory");
        t->files = p;
        t->cap_files = cap;
    }
    t->files[t->n_files++] = (file_mark){.path = *path, .dev = st->st_dev, .ino = st->st_ino};
    *path = NULL;
    return TW_OK;
}

/* The sizes and identities of paths[n] into st (caller-owned [n]). */
static tw_status stat_all(char **paths, size_t n, struct stat *st, tw_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (tw_fs_stat(paths[i], &st[i]) != 0)
            return tw_fs_error(err, paths[i], "cannot read the event file");
    return TW_OK;
}

/* Reads on: the last file read from where it stopped, then the new ones (paths from t->n_files on, taken
 * over). Starts over when what was read is no longer a prefix of the folder. */
static tw_status read_on(tw_events_scalars *t, char **paths, const struct stat *st, size_t n, uint64_t *bytes,
                         tw_error *err)
{
    if (!still_prefix(t, paths, st, n)) {
        forget_files(t);
        TW_TRY(reader_reset(&t->r, err));
    }
    size_t from = t->n_files ? t->n_files - 1 : 0;
    for (size_t i = t->n_files; i < n; i++)
        TW_TRY(add_mark(t, &paths[i], &st[i], err));
    for (size_t i = from; i < t->n_files; i++)
        if ((uint64_t)st[i].st_size != t->files[i].end || !t->files[i].end) /* unchanged: nothing to read */
            TW_TRY(read_file(&t->r, &t->files[i], bytes, err));
    return TW_OK;
}

tw_status tw_events_scalars_new(size_t max_points, tw_events_scalars **out, tw_error *err)
{
    *out = NULL;
    if (max_points == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_events_scalars_new needs max_points >= 1");
    tw_events_scalars *t = calloc(1, sizeof *t);
    if (t) {
        t->r = (reader){.keep = max_points - 1, .index = json_object()};
        if (!t->r.index) {
            free(t);
            t = NULL;
        }
    }
    if (!t)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    *out = t;
    return TW_OK;
}

void tw_events_scalars_free(tw_events_scalars *t)
{
    if (!t)
        return;
    forget_files(t);
    free(t->files);
    reader_cleanup(&t->r);
    free(t);
}

tw_status tw_events_scalars_update(tw_events_scalars *t, const char *logdir, uint64_t *bytes_read, tw_error *err)
{
    if (!t || !logdir)
        return tw_error_set(err, TW_ERR_INVALID, logdir, -1, "tw_events_scalars_update needs a reader and a folder");
    char **paths;
    size_t n;
    uint64_t bytes = 0;
    TW_TRY(list_files(logdir, &paths, &n, err));
    struct stat *st = calloc(n ? n : 1, sizeof *st);
    tw_status s = st ? stat_all(paths, n, st, err) : tw_error_set(err, TW_ERR_NOMEM, logdir, -1, "out of memory");
    if (s == TW_OK)
        s = read_on(t, paths, st, n, &bytes, err);
    free(t->r.rec);
    t->r.rec = NULL;
    t->r.rec_cap = 0;
    if (s != TW_OK) { /* read again from the start next time, so the error is found again */
        forget_files(t);
        if (reader_reset(&t->r, err) != TW_OK)
            s = TW_ERR_NOMEM;
    }
    free(st);
    free_names(paths, n); /* the entries taken over are NULL */
    if (bytes_read)
        *bytes_read += bytes;
    return s;
}

tw_status tw_events_scalars_json(const tw_events_scalars *t, json_t **out, tw_error *err)
{
    *out = NULL;
    return build_json(&t->r, out, err);
}

size_t tw_events_scalars_memory(const tw_events_scalars *t)
{
    size_t bytes = sizeof *t + t->r.cap_series * sizeof *t->r.s + t->cap_files * sizeof *t->files;
    for (size_t i = 0; i < t->r.n_series; i++)
        bytes += t->r.s[i].cap * sizeof(point) + 64; /* + its tag in the index, roughly */
    return bytes;
}

tw_status tw_events_read_scalars(const char *logdir, size_t max_points, json_t **out, tw_error *err)
{
    if (out)
        *out = NULL;
    if (!logdir || !out || max_points == 0)
        return tw_error_set(err, TW_ERR_INVALID, logdir, -1,
                            "tw_events_read_scalars needs a folder, an output and max_points >= 1");
    tw_events_scalars *t;
    TW_TRY(tw_events_scalars_new(max_points, &t, err));
    tw_status s = tw_events_scalars_update(t, logdir, NULL, err);
    if (s == TW_OK)
        s = tw_events_scalars_json(t, out, err);
    tw_events_scalars_free(t);
    return s;
}
