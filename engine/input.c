/* input.c — the input pipeline: TFRecord files of tf.train.Example -> shuffled, repeated batches.
 *
 * Owns: decoding an Example into one row of fp32 values and a label; the two sources of examples
 * (the whole file decoded once into memory, or the file streamed through a shuffle buffer); the
 * order of every epoch; batching across epoch boundaries; the prefetch thread; positions (tell and
 * seek) and the one-pass iteration for evaluation. Does not own: TFRecord framing and inflating
 * (tfrecord.c, gzfile.c), protobuf parsing (example.c), what the batches are used for.
 *
 * Written by hand because what it must guarantee is ours: tf.data has no C API, and the order of
 * every batch must be a pure function of (file, options, seed, position) so that a resumed run sees
 * the same batches as an uninterrupted one. The random numbers are counter-based (SplitMix64 over a
 * key derived from (seed, epoch)), so no generator state is saved or replayed:
 *   - in memory, epoch e is a Fisher–Yates permutation of the decoded set drawn from key(seed, e);
 *   - streaming, epoch e reads the file from its start into a buffer of shuffle_buffer slots and
 *     hands out slot draw(key(seed, e), k) % filled as its k-th example, refilling from the file,
 *     as tf.data's shuffle(buffer) does. Seeking to example k of an epoch replays those k picks.
 * With shuffle = 0 the order is the file's in both modes (streaming then uses a one-slot buffer).
 * In-memory and streaming orders differ; a resumed run is in the same mode because the choice
 * depends only on the file and max_memory_bytes.
 *
 * Decoding: a bytes image feature holds one item of example_size bytes, read as uint8 and
 * multiplied by `scale`, or of 4·example_size bytes, read as little-endian float32 as they are (what
 * `tower convert` writes for float32 NumPy arrays); a float-list image must hold example_size floats,
 * taken as they are (scale is not applied to floats). The file's first record sets the row type
 * (uint8, or fp32) and every record must have it. Rows are held as stored — a uint8 row as its bytes —
 * and made fp32 as a batch is assembled, so an image data set takes a quarter of its fp32 size in memory.
 * Int labels must be one int64 in [0, classes); float labels take one float or one
 * int64 (converted). Messages count records from 0; tw_error carries the file and the record's byte
 * offset (in the decompressed stream for GZIP/ZLIB files).
 *
 * Memory: in-memory mode holds count × (row_bytes + 4 + 8) bytes (rows as stored, labels,
 * permutation) and is chosen when count × (example_size·4 + 4 + 8) — the rows counted as fp32, so
 * that the choice is the file's count alone and tw_input_memory_bytes an upper bound — fits in
 * max_memory_bytes; the set is decoded into growing arrays and abandoned for streaming as soon as it
 * would not fit. An uncompressed file is not decoded at all when its size already says it cannot fit:
 * its count estimated as file size / the first record's framed size, counted as above, passes twice
 * max_memory_bytes (size_estimate; twice, so that records smaller than the first, which only a full
 * read would count, never turn a file that fits into a streamed one). Both tests read only the file
 * and the options, so the mode stays a pure function of them. Streaming holds shuffle_buffer ×
 * (row_bytes + 4) bytes. The prefetch thread holds prefetch_batches fp32 batches; it runs for streamed
 * input and for in-memory batches over prefetch_min_bytes (smaller ones the caller assembles itself:
 * caller_assembles). Either way the batches are the same.
 *
 * Threads: the producer (the decoded set or the stream, its position and permutation) belongs to
 * the prefetch thread while that runs and to the caller otherwise; the two meet only in the ring of
 * prepared batches, under one mutex. Each prepared batch carries the producer's position after it,
 * so tell() reports what the caller has received. Anything that moves the position (seek, rewind, a
 * new batch size or slice, switching between next and next_once) stops the thread, puts the producer at the
 * caller's position and lets the next call start a new thread.
 *
 * A world of processes (world.h) shards the stream by global tower: every process opens the same file
 * with the same seed, so all see the same order, and each takes only its towers' rows of the world's
 * batch (tw_input_next_rows); the rows of other towers are produced without being converted. */
#include "input.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "datafs.h"
#include "example.h"
#include "tfrecord.h"

enum { MAX_EXAMPLE_SIZE = 1 << 28 }; /* values per example; 1 GiB of fp32 */

/* One label: an int32 class or an fp32 target. Both are 4 bytes and are copied as such. */
typedef union {
    int32_t i;
    float f;
} label;

/* The producer of examples: the only code that reads the decoded set or the file. */
typedef struct {
    tw_input_position pos;      /* the next example it produces */
    uint64_t count;             /* examples in the file; streaming: 0 until a pass has ended */
    size_t *perm;               /* in memory with shuffle: [count], the order of epoch perm_epoch */
    uint64_t perm_epoch;        /* UINT64_MAX: perm not built yet */
    tw_tfrecord_reader *reader; /* streaming: open during a pass, NULL at the start of one */
    int eof;                    /* streaming: the reader reached the end of the file in this pass */
    uint8_t *buf_x;             /* streaming: [cap, row_bytes], the shuffle buffer (rows as stored) */
    label *buf_y;               /* streaming: [cap] */
    size_t cap, filled;         /* streaming: slots in the buffer, slots holding an example */
    float *aug_work;            /* with augmentation: tw_augment_scratch floats */
} producer;

/* What the caller takes from each batch of `batch` examples: rows [lo, lo + rows) (tw_input_next_rows;
 * all of them otherwise); once: one pass (evaluation). */
typedef struct {
    int batch, lo, rows, once;
} request;

/* A batch prepared by the prefetch thread. */
typedef struct {
    float *x;                   /* [rows, example_size] fp32 */
    label *y;                   /* [rows] */
    int got;                    /* examples in it; < rows only at the end of a one-pass run */
    tw_input_position end;      /* the producer's position after it */
    uint64_t count;             /* the producer's count after it */
} prepared;

typedef struct {
    pthread_t thread;
    int running;
    int sync_ready;             /* mu and changed are initialized */
    pthread_mutex_t mu;         /* guards head, fill, stop, done, status, error */
    pthread_cond_t changed;     /* a batch was added or taken, or stop was set */
    prepared *ring;             /* [slots] */
    int slots, head, fill;
    request req;                /* what the running thread prepares; fixed while it runs */
    int stop;                   /* caller -> thread: exit */
    int done;                   /* thread -> caller: nothing more comes; status says why */
    tw_status status;           /* TW_END after a one-pass iteration, else the error */
    tw_error error;
} prefetch;

struct tw_input {
    tw_input_options o;         /* the strings point at the copies below */
    char *path, *image_feature, *label_feature;
    int in_memory;
    int u8;                     /* rows are uint8 (scaled to fp32 as a batch is made), else fp32 */
    uint64_t estimate;          /* examples an uncompressed file holds by its size (size_estimate); 0: unknown */
    size_t row_bytes;           /* a stored row: example_size bytes (u8) or 4·example_size (fp32) */
    uint8_t *x;                 /* in memory: [count, row_bytes], rows as stored */
    label *y;                   /* in memory: [count] */
    producer p;
    prefetch f;
    tw_input_position pos;      /* what the caller has received */
    uint64_t count;             /* the count as of the batches the caller has received */
    tw_status failed;           /* sticky error of next/next_once until a seek or rewind */
    tw_error failure;
};

/* ---- random numbers: a pure function of (seed, epoch, counter) ---- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t epoch_key(uint64_t seed, uint64_t epoch)
{
    return splitmix64(seed ^ splitmix64(epoch));
}

/* Draw number i of a key's stream (SplitMix64's i-th output), reduced to [0, n). The modulo bias is
 * below n / 2^64. */
static uint64_t draw(uint64_t key, uint64_t i, uint64_t n)
{
    return splitmix64(key + i * 0x9e3779b97f4a7c15ull) % n;
}

/* ---- options ---- */

void tw_input_options_default(tw_input_options *o)
{
    memset(o, 0, sizeof *o);
    o->image_feature = "image_raw";
    o->label_feature = "label";
    o->scale = 1.0f / 255.0f;
    o->shuffle = 1;
    o->max_memory_bytes = 2ull << 30;
    o->shuffle_buffer = 10000;
    o->prefetch_batches = 2;
    o->prefetch_min_bytes = 1 << 20;
}

static tw_status check_options(const tw_input_options *o, tw_error *err)
{
    const char *bad = NULL;
    if (!o->path || !o->path[0])
        bad = "path is required";
    else if (!o->image_feature || !o->image_feature[0] || !o->label_feature || !o->label_feature[0])
        bad = "image_feature and label_feature are required";
    else if (o->example_size < 1 || o->example_size > MAX_EXAMPLE_SIZE)
        bad = "example_size must be in [1, 2^28]";
    else if (!o->float_labels && o->classes < 1)
        bad = "classes must be >= 1 for int labels";
    else if (o->shuffle_buffer < 1)
        bad = "shuffle_buffer must be >= 1";
    else if (o->prefetch_batches < 0)
        bad = "prefetch_batches must be >= 0";
    else if (!isfinite(o->scale))
        bad = "scale must be finite";
    else if (o->augment && tw_augment_any(o->augment) &&
             (o->image.h < 1 || o->image.w < 1 || o->image.c < 1 ||
              (size_t)o->image.h * (size_t)o->image.w * (size_t)o->image.c != o->example_size))
        bad = "augmentation needs the examples' [h, w, c], of example_size values";
    if (bad)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "input options: %s", bad);
    return TW_OK;
}

/* ---- decoding one record ---- */

/* Where a record is, for messages. */
typedef struct {
    unsigned long long index;   /* records before it in the file */
    int64_t offset;             /* its byte offset */
} record_at;

static tw_status find_feature(const tw_input *in, const tw_example *ex, const char *name,
                              record_at at, tw_feature *f, tw_error *err)
{
    if (tw_example_find(ex, name, f))
        return TW_OK;
    return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset, "record %llu has no feature '%s'",
                        at.index, name);
}

/* The error for a record whose image feature is not in the file's row format. */
static tw_status bad_image(const tw_input *in, const tw_feature *f, record_at at, size_t len, tw_error *err)
{
    const size_t n = in->o.example_size;
    const int floats = f->kind == TW_FEATURE_FLOAT && f->count == n, u8 = f->kind == TW_FEATURE_BYTES && len == n,
              f32 = f->kind == TW_FEATURE_BYTES && len == n * sizeof(float);
    if (floats || u8 || f32) /* a well-formed row of the other type */
        return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset,
                            "feature '%s' of record %llu holds %s; the file's first record holds %s, and one "
                            "file's rows must all be of one type",
                            f->name, at.index, u8 ? "uint8 bytes" : "float32 values",
                            in->u8 ? "uint8 bytes" : "float32 values");
    if (f->kind == TW_FEATURE_FLOAT)
        return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset,
                            "feature '%s' of record %llu has %zu floats; expected %zu (example_size)", f->name,
                            at.index, f->count, n);
    if (f->kind == TW_FEATURE_BYTES)
        return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset,
                            "feature '%s' of record %llu holds %zu bytes in %zu items; expected one item of "
                            "%zu bytes (uint8) or %zu (float32)",
                            f->name, at.index, len, f->count, n, n * sizeof(float));
    return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset,
                        "feature '%s' of record %llu holds %s values; expected bytes (uint8) or floats", f->name,
                        at.index, tw_feature_kind_name(f->kind));
}

/* Fills row [row_bytes] from the image feature, as stored: uint8 bytes, or fp32 (little-endian float32
 * bytes, Tower's hosts being little-endian, or a float list). Every record must be in the row format of
 * the file's first record (in->u8). */
static tw_status decode_row(const tw_input *in, const tw_example *ex, record_at at, uint8_t *row,
                            tw_error *err)
{
    tw_feature f;
    TW_TRY(find_feature(in, ex, in->image_feature, at, &f, err));
    size_t len = 0;
    const uint8_t *b = f.kind == TW_FEATURE_BYTES && f.count == 1 ? tw_feature_bytes_at(&f, 0, &len) : NULL;
    if (b && len == in->row_bytes) {
        memcpy(row, b, len);
        return TW_OK;
    }
    if (!in->u8 && f.kind == TW_FEATURE_FLOAT && f.count == in->o.example_size) {
        memcpy(row, f.floats, in->row_bytes);
        return TW_OK;
    }
    return bad_image(in, &f, at, len, err);
}

static tw_status decode_label(const tw_input *in, const tw_example *ex, record_at at, label *y,
                              tw_error *err)
{
    tw_feature f;
    TW_TRY(find_feature(in, ex, in->label_feature, at, &f, err));
    if (f.count != 1 || (f.kind != TW_FEATURE_INT64 && f.kind != TW_FEATURE_FLOAT))
        return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset,
                            "label feature '%s' of record %llu is a %s list of %zu values; "
                            "expected one int64 or float",
                            f.name, at.index, tw_feature_kind_name(f.kind), f.count);
    if (in->o.float_labels) {
        y->f = f.kind == TW_FEATURE_FLOAT ? f.floats[0] : (float)f.int64s[0];
        return TW_OK;
    }
    if (f.kind != TW_FEATURE_INT64)
        return tw_error_set(err, TW_ERR_INVALID, in->path, at.offset,
                            "label feature '%s' of record %llu is a float; expected an int64 class "
                            "(float labels are for regression)",
                            f.name, at.index);
    const int64_t v = f.int64s[0];
    if (v < 0 || v >= in->o.classes) { /* bad data, not a bad config: EILSEQ says so (child.h) */
        tw_error_set(err, TW_ERR_INVALID, in->path, at.offset, "label %lld at record %llu is outside [0, %d)",
                     (long long)v, at.index, in->o.classes);
        if (err)
            err->errno_value = EILSEQ;
        return TW_ERR_INVALID;
    }
    y->i = (int32_t)v;
    return TW_OK;
}

/* Reads the next record of r and decodes it into row [row_bytes] and *y. TW_END at the end of the
 * file; reader errors as tw_tfrecord_read gives them. */
static tw_status read_example(const tw_input *in, tw_tfrecord_reader *r, uint8_t *row, label *y,
                              tw_error *err)
{
    const record_at at = {tw_tfrecord_reader_records(r), (int64_t)tw_tfrecord_reader_offset(r)};
    const uint8_t *rec;
    size_t len;
    TW_TRY(tw_tfrecord_read(r, &rec, &len, err));
    tw_example *ex;
    TW_TRY(tw_example_parse(rec, len, in->path, at.offset, &ex, err));
    tw_status s = decode_row(in, ex, at, row, err);
    if (s == TW_OK)
        s = decode_label(in, ex, at, y, err);
    tw_example_destroy(ex);
    return s;
}

static tw_status no_records(const tw_input *in, tw_error *err)
{
    return tw_error_set(err, TW_ERR_INVALID, in->path, -1, "the file holds no records");
}

/* ---- in memory ---- */

/* One decoded example in memory as the in-memory/streaming choice counts it: an fp32 row, its label and
 * its place in the shuffle order. A uint8 file's rows are held as uint8, a quarter of that; the choice
 * still counts fp32 rows, so that it depends on the file's count alone (a resumed run of an older Tower
 * is in the same mode) and tw_input_memory_bytes, which does not know the row format, is an upper
 * bound. */
static uint64_t example_bytes(const tw_input_options *o)
{
    return o->example_size * sizeof(float) + sizeof(label) + sizeof(size_t);
}

static uint64_t bytes_per_example(const tw_input *in) { return example_bytes(&in->o); }

uint64_t tw_input_memory_bytes(const tw_input_options *o, uint64_t examples, int batch)
{
    const uint64_t row = o->example_size * sizeof(float) + sizeof(label);
    uint64_t held = examples && examples < o->max_memory_bytes / example_bytes(o) /* as grow() */
                        ? examples * example_bytes(o)
                        : (o->shuffle ? (uint64_t)o->shuffle_buffer : 1) * row;
    return held + (uint64_t)o->prefetch_batches * (uint64_t)(batch > 0 ? batch : 0) * row;
}

/* Makes room for more than n examples in in->x/in->y (capacity *cap), or sets *fits = 0 when n + 1
 * examples would pass max_memory_bytes. */
static tw_status grow(tw_input *in, uint64_t n, uint64_t *cap, int *fits, tw_error *err)
{
    const uint64_t most = in->o.max_memory_bytes / bytes_per_example(in);
    if (n >= most) {
        *fits = 0;
        return TW_OK;
    }
    uint64_t want = *cap ? *cap * 2 : (16u << 20) / bytes_per_example(in) + 1; /* 16 MiB first */
    if (want > most)
        want = most;
    uint8_t *x = realloc(in->x, want * in->row_bytes);
    if (x)
        in->x = x;
    label *y = x ? realloc(in->y, want * sizeof *y) : NULL;
    if (!y)
        return tw_error_set(err, TW_ERR_NOMEM, in->path, -1,
                            "out of memory for %llu decoded examples", (unsigned long long)want);
    in->y = y;
    *cap = want;
    return TW_OK;
}

/* Gives back the capacity past n examples (a failed shrink keeps the larger block). */
static void shrink(tw_input *in, uint64_t n)
{
    uint8_t *x = realloc(in->x, n * in->row_bytes);
    if (x)
        in->x = x;
    label *y = realloc(in->y, n * sizeof *y);
    if (y)
        in->y = y;
}

/* Decodes the whole file into in->x, in->y and sets p.count. *fits = 0 (and nothing is kept) when
 * the decoded set would pass max_memory_bytes. */
static tw_status load(tw_input *in, int *fits, tw_error *err)
{
    tw_tfrecord_reader *r;
    TW_TRY(tw_tfrecord_reader_open(in->path, NULL, &r, err));
    const size_t row = in->row_bytes;
    uint64_t n = 0, cap = 0;
    tw_status s = TW_OK;
    *fits = 1;
    while (s == TW_OK && *fits) {
        if (n == cap)
            s = grow(in, n, &cap, fits, err);
        if (s == TW_OK && *fits) {
            s = read_example(in, r, in->x + n * row, in->y + n, err);
            n += s == TW_OK;
        }
    }
    tw_tfrecord_reader_close(r);
    if (s == TW_END && n == 0)
        s = no_records(in, err);
    if (s == TW_END) {
        in->p.count = n;
        shrink(in, n);
        return TW_OK;
    }
    free(in->x);
    free(in->y);
    in->x = NULL;
    in->y = NULL;
    return s;
}

/* Builds the Fisher–Yates permutation of epoch e into p.perm. */
static void build_perm(tw_input *in, uint64_t e)
{
    producer *p = &in->p;
    const uint64_t key = epoch_key(in->o.seed, e);
    for (uint64_t i = 0; i < p->count; i++)
        p->perm[i] = (size_t)i;
    for (uint64_t i = p->count; i-- > 1;) {
        const uint64_t j = draw(key, i, i + 1);
        const size_t t = p->perm[i];
        p->perm[i] = p->perm[j];
        p->perm[j] = t;
    }
    p->perm_epoch = e;
}

/* ---- streaming ---- */

/* Reads records into the free slots of the shuffle buffer until it is full or the file ends. */
static tw_status fill(tw_input *in, tw_error *err)
{
    producer *p = &in->p;
    const size_t row = in->row_bytes;
    while (!p->eof && p->filled < p->cap) {
        tw_status s = read_example(in, p->reader, p->buf_x + p->filled * row, p->buf_y + p->filled,
                                   err);
        if (s == TW_END)
            p->eof = 1;
        else if (s != TW_OK)
            return s;
        else
            p->filled++;
    }
    return TW_OK;
}

/* Starts a pass over the file: opens it and fills the buffer. */
static tw_status start_pass(tw_input *in, tw_error *err)
{
    producer *p = &in->p;
    p->filled = 0;
    p->eof = 0;
    TW_TRY(tw_tfrecord_reader_open(in->path, NULL, &p->reader, err));
    TW_TRY(fill(in, err));
    return p->filled ? TW_OK : no_records(in, err);
}

/* Forgets the current pass; the next example starts one. */
static void end_pass(producer *p)
{
    tw_tfrecord_reader_close(p->reader);
    p->reader = NULL;
    p->filled = 0;
    p->eof = 0;
}

/* ---- the producer ---- */

/* One example into the batch: the stored row as fp32 (uint8 times scale) into x [example_size], its
 * label into *y; either may be NULL (skip). */
static void emit(const tw_input *in, const uint8_t *row, const label *src_y, float *x, label *y)
{
    if (x && in->u8) {
        const float scale = in->o.scale;
        for (size_t i = 0; i < in->o.example_size; i++)
            x[i] = (float)row[i] * scale;
    } else if (x) {
        memcpy(x, row, in->row_bytes);
    }
    if (y)
        *y = *src_y;
}

static void next_epoch(producer *p)
{
    p->pos.epoch++;
    p->pos.consumed = 0;
}

/* Asks the cache for the stored row of example `next` of this epoch's order ahead of its turn: a
 * shuffled epoch jumps around a set of tens of MB, and each row would otherwise wait on memory line by
 * line (the gather of a batch ran at ~1 ns a value, on the step's critical path). */
static void prefetch_row(const tw_input *in, uint64_t next)
{
    const producer *p = &in->p;
    if (next >= p->count)
        return;
    const uint8_t *row = in->x + (in->o.shuffle ? p->perm[next] : next) * in->row_bytes;
    for (size_t at = 0; at < in->row_bytes; at += 64)
        __builtin_prefetch(row + at);
}

static void take_memory(tw_input *in, float *x, label *y)
{
    producer *p = &in->p;
    uint64_t i = p->pos.consumed;
    if (in->o.shuffle) {
        if (p->perm_epoch != p->pos.epoch)
            build_perm(in, p->pos.epoch);
        i = p->perm[i];
    }
    if (x)
        prefetch_row(in, p->pos.consumed + 2);
    emit(in, in->x + i * in->row_bytes, in->y + i, x, y);
    if (++p->pos.consumed == p->count)
        next_epoch(p);
}

static tw_status take_stream(tw_input *in, float *x, label *y, tw_error *err)
{
    producer *p = &in->p;
    const size_t row = in->row_bytes;
    if (!p->reader)
        TW_TRY(start_pass(in, err));
    const uint64_t j = draw(epoch_key(in->o.seed, p->pos.epoch), p->pos.consumed, p->filled);
    emit(in, p->buf_x + j * row, p->buf_y + j, x, y);
    p->filled--;
    if (j != p->filled) {
        memcpy(p->buf_x + j * row, p->buf_x + p->filled * row, row);
        p->buf_y[j] = p->buf_y[p->filled];
    }
    TW_TRY(fill(in, err));
    p->pos.consumed++;
    if (p->filled == 0) {
        p->count = p->pos.consumed;
        end_pass(p);
        next_epoch(p);
    }
    return TW_OK;
}

/* Produces the example at p.pos into x [example_size] and *y (either may be NULL: skip) and
 * advances p.pos, into the next epoch after the last example of one. */
static tw_status produce_one(tw_input *in, float *x, label *y, tw_error *err)
{
    tw_input_position at = in->p.pos;
    if (!in->in_memory)
        TW_TRY(take_stream(in, x, y, err));
    else
        take_memory(in, x, y);
    if (x && in->p.aug_work)
        tw_augment_apply(in->o.augment, &in->o.image, in->o.seed, at.epoch, at.consumed, x, in->p.aug_work);
    return TW_OK;
}

/* Produces up to r->batch examples, of which rows [lo, lo + rows) go into x [rows, example_size] and y
 * [rows] (*got of them) and the others are skipped. Continues across epochs, unless r->once: then it
 * stops at the end of epoch 0. */
static tw_status produce(tw_input *in, const request *r, float *x, label *y, int *got, tw_error *err)
{
    *got = 0;
    for (int k = 0; k < r->batch && !(r->once && in->p.pos.epoch > 0); k++) {
        int kept = k >= r->lo && k < r->lo + r->rows;
        TW_TRY(produce_one(in, kept ? x + (size_t)*got * in->o.example_size : NULL, kept ? y + *got : NULL,
                           err));
        *got += kept;
    }
    return TW_OK;
}

static tw_status past_end(const tw_input *in, tw_input_position pos, tw_error *err)
{
    return tw_error_set(err, TW_ERR_INVALID, in->path, -1,
                        "position %llu of epoch %llu is past the end of an epoch of %llu examples",
                        (unsigned long long)pos.consumed, (unsigned long long)pos.epoch,
                        (unsigned long long)in->p.count);
}

/* Puts the producer at pos. Streaming replays the picks of pos.epoch up to pos.consumed. */
static tw_status producer_seek(tw_input *in, tw_input_position pos, tw_error *err)
{
    producer *p = &in->p;
    if (p->count && pos.consumed >= p->count)
        return past_end(in, pos, err);
    if (in->in_memory) {
        p->pos = pos;
        return TW_OK;
    }
    end_pass(p);
    p->pos.epoch = pos.epoch;
    p->pos.consumed = 0;
    while (p->pos.consumed < pos.consumed) {
        TW_TRY(take_stream(in, NULL, NULL, err));
        if (p->pos.epoch != pos.epoch)
            return past_end(in, pos, err);
    }
    return TW_OK;
}

/* ---- the prefetch thread ---- */

static void *prefetch_main(void *arg)
{
    tw_input *in = arg;
    prefetch *f = &in->f;
    for (int done = 0; !done;) {
        pthread_mutex_lock(&f->mu);
        while (f->fill == f->slots && !f->stop)
            pthread_cond_wait(&f->changed, &f->mu);
        const int stop = f->stop;
        prepared *b = &f->ring[(f->head + f->fill) % f->slots];
        pthread_mutex_unlock(&f->mu);
        if (stop)
            break;
        tw_error e;
        tw_error_clear(&e);
        tw_status s = produce(in, &f->req, b->x, b->y, &b->got, &e);
        b->end = in->p.pos;
        b->count = in->p.count;
        pthread_mutex_lock(&f->mu);
        f->fill += s == TW_OK;
        if (s != TW_OK || (f->req.once && b->got < f->req.rows)) {
            f->done = 1;
            f->status = s == TW_OK ? TW_END : s;
            f->error = e;
        }
        done = f->done;
        pthread_cond_broadcast(&f->changed);
        pthread_mutex_unlock(&f->mu);
    }
    return NULL;
}

static void free_ring(prefetch *f)
{
    for (int i = 0; f->ring && i < f->slots; i++) {
        free(f->ring[i].x);
        free(f->ring[i].y);
    }
    free(f->ring);
    f->ring = NULL;
    f->slots = 0;
}

/* The ring of prefetch_batches batches of `batch` rows. */
static tw_status alloc_ring(tw_input *in, int batch, tw_error *err)
{
    prefetch *f = &in->f;
    f->slots = in->o.prefetch_batches;
    f->ring = calloc((size_t)f->slots, sizeof *f->ring);
    int ok = f->ring != NULL;
    for (int i = 0; ok && i < f->slots; i++) {
        f->ring[i].x = malloc((size_t)batch * in->o.example_size * sizeof(float));
        f->ring[i].y = malloc((size_t)batch * sizeof(label));
        ok = f->ring[i].x && f->ring[i].y;
    }
    if (ok)
        return TW_OK;
    free_ring(f);
    return tw_error_set(err, TW_ERR_NOMEM, NULL, -1,
                        "out of memory for %d prefetched batches of %d", in->o.prefetch_batches,
                        batch);
}

/* Starts a thread that prepares the batches of r from the producer. */
static tw_status start_prefetch(tw_input *in, const request *r, tw_error *err)
{
    prefetch *f = &in->f;
    TW_TRY(alloc_ring(in, r->rows, err));
    f->req = *r;
    f->head = f->fill = f->stop = f->done = 0;
    f->status = TW_OK;
    int rc = pthread_create(&f->thread, NULL, prefetch_main, in);
    if (rc != 0) {
        free_ring(f);
        return tw_error_set(err, rc == EAGAIN ? TW_ERR_NOMEM : TW_ERR_INTERNAL, NULL, -1,
                            "cannot start the prefetch thread: %s", strerror(rc)); /* EAGAIN: no room for its stack */
    }
    f->running = 1;
    return TW_OK;
}

/* Stops and joins the thread (if any) and drops its batches. The producer is then ahead of the
 * caller's position. */
static void stop_prefetch(tw_input *in)
{
    prefetch *f = &in->f;
    if (!f->running)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    f->running = 0;
    free_ring(f);
}

/* Takes the next prepared batch into x and labels, waiting for it; *got = 0 once a pass ended. */
static tw_status take_prepared(tw_input *in, float *x, void *labels, int *got, tw_error *err)
{
    prefetch *f = &in->f;
    pthread_mutex_lock(&f->mu);
    while (f->fill == 0 && !f->done)
        pthread_cond_wait(&f->changed, &f->mu);
    if (f->fill == 0) {
        const tw_status s = f->status;
        if (s != TW_END && err)
            *err = f->error;
        pthread_mutex_unlock(&f->mu);
        *got = 0;
        return s == TW_END ? TW_OK : s;
    }
    const prepared *b = &f->ring[f->head];
    pthread_mutex_unlock(&f->mu);
    memcpy(x, b->x, (size_t)b->got * in->o.example_size * sizeof *x);
    memcpy(labels, b->y, (size_t)b->got * sizeof(label));
    *got = b->got;
    in->pos = b->end;
    in->count = b->count;
    pthread_mutex_lock(&f->mu);
    f->head = (f->head + 1) % f->slots;
    f->fill--;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mu);
    return TW_OK;
}

/* ---- the caller's side ---- */

/* 1 when the caller assembles r's batches itself: in memory, at most prefetch_min_bytes of fp32 (1 MiB
 * by default). A gather and a scale of a few microseconds cost less than a hand-off between threads and
 * than the core the thread takes from the step's own threads (BENCHMARKS.md, "Worker threads"). Streamed
 * input (reading, inflating, parsing) and big batches keep the thread. */
static int caller_assembles(const tw_input *in, const request *r)
{
    return in->in_memory && (uint64_t)r->rows * in->o.example_size * sizeof(float) <= in->o.prefetch_min_bytes;
}

/* Makes the next batches of r come from a producer at the caller's position: a thread that prepares
 * exactly those, or no thread when prefetch_batches is 0 or the caller assembles them (above). */
static tw_status prepare(tw_input *in, const request *r, tw_error *err)
{
    prefetch *f = &in->f;
    if (f->running && !memcmp(&f->req, r, sizeof *r))
        return TW_OK;
    if (f->running) {
        stop_prefetch(in);
        TW_TRY(producer_seek(in, in->pos, err));
    }
    return in->o.prefetch_batches && !caller_assembles(in, r) ? start_prefetch(in, r, err) : TW_OK;
}

static tw_status next_batch(tw_input *in, const request *r, float *x, void *labels, int *got,
                            tw_error *err)
{
    *got = 0;
    if (r->batch < 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "batch must be >= 1, not %d", r->batch);
    if (r->lo < 0 || r->rows < 1 || r->rows > r->batch - r->lo)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "rows [%d, %d + %d) are not inside a batch of %d",
                            r->lo, r->lo, r->rows, r->batch);
    tw_error e;
    tw_error_clear(&e);
    tw_status s = in->failed;
    if (s != TW_OK)
        e = in->failure;
    else
        s = prepare(in, r, &e);
    if (s == TW_OK && in->f.running) {
        s = take_prepared(in, x, labels, got, &e);
    } else if (s == TW_OK) {
        s = produce(in, r, x, labels, got, &e);
        in->pos = in->p.pos;
        in->count = in->p.count;
    }
    if (s != TW_OK) {
        in->failed = s;
        in->failure = e;
        if (err)
            *err = e;
    }
    return s;
}

tw_status tw_input_next(tw_input *in, int batch, float *x, void *labels, tw_error *err)
{
    return tw_input_next_rows(in, batch, 0, batch, x, labels, err);
}

tw_status tw_input_next_rows(tw_input *in, int batch, int lo, int rows, float *x, void *labels,
                             tw_error *err)
{
    const request r = {.batch = batch, .lo = lo, .rows = rows};
    int got;
    return next_batch(in, &r, x, labels, &got, err);
}

tw_status tw_input_next_once(tw_input *in, int batch, float *x, void *labels, int *got,
                             tw_error *err)
{
    const request r = {.batch = batch, .rows = batch, .once = 1};
    return next_batch(in, &r, x, labels, got, err);
}

tw_status tw_input_seek(tw_input *in, const tw_input_position *pos, tw_error *err)
{
    stop_prefetch(in);
    in->failed = TW_OK;
    tw_status s = producer_seek(in, *pos, err);
    if (s != TW_OK) {
        const tw_input_position start = {0, 0};
        producer_seek(in, start, NULL);
    }
    in->pos = in->p.pos;
    in->count = in->p.count;
    return s;
}

tw_status tw_input_rewind(tw_input *in, tw_error *err)
{
    const tw_input_position start = {0, 0};
    return tw_input_seek(in, &start, err);
}

tw_input_position tw_input_tell(const tw_input *in) { return in->pos; }

uint64_t tw_input_count(const tw_input *in) { return in->count; }

int tw_input_in_memory(const tw_input *in) { return in->in_memory; }

/* ---- open and close ---- */

static char *copy_string(const char *s)
{
    const size_t n = strlen(s) + 1;
    char *c = malloc(n);
    return c ? memcpy(c, s, n) : NULL;
}

static tw_status init_input(tw_input *in, const tw_input_options *o, tw_error *err)
{
    in->o = *o;
    in->path = copy_string(o->path);
    in->image_feature = copy_string(o->image_feature);
    in->label_feature = copy_string(o->label_feature);
    in->o.path = in->path;
    in->o.image_feature = in->image_feature;
    in->o.label_feature = in->label_feature;
    in->p.perm_epoch = UINT64_MAX;
    if (!in->path || !in->image_feature || !in->label_feature)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (pthread_mutex_init(&in->f.mu, NULL) != 0)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "pthread_mutex_init failed");
    if (pthread_cond_init(&in->f.changed, NULL) != 0) {
        pthread_mutex_destroy(&in->f.mu);
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "pthread_cond_init failed");
    }
    in->f.sync_ready = 1;
    if (o->augment && tw_augment_any(o->augment) &&
        !(in->p.aug_work = malloc(tw_augment_scratch(&o->image, o->augment) * sizeof(float))))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    return TW_OK;
}

/* in->estimate for an uncompressed file (the reader has read its first record): its size over the first
 * record's framed size. Left 0 for a compressed file or one whose size cannot be read. */
static void size_estimate(tw_input *in, const tw_tfrecord_reader *r)
{
    struct stat st;
    const uint64_t first = tw_tfrecord_reader_offset(r);
    if (tw_tfrecord_reader_compression(r) == TW_COMPRESSION_NONE && first > 0 &&
        tw_fs_stat(in->path, &st) == 0 && st.st_size > 0)
        in->estimate = (uint64_t)st.st_size / first;
}

/* 1 when the file's estimate, counted as fp32 examples, passes twice max_memory_bytes: it streams
 * without being decoded first. */
static int clearly_too_large(const tw_input *in)
{
    return in->estimate > 2 * (in->o.max_memory_bytes / bytes_per_example(in));
}

/* The file's row format, from its first record: uint8 when its image feature is example_size bytes,
 * fp32 when float32 bytes or a float list (every later record must match: decode_row). */
static tw_status row_format(tw_input *in, tw_error *err)
{
    tw_tfrecord_reader *r;
    TW_TRY(tw_tfrecord_reader_open(in->path, NULL, &r, err));
    const record_at at = {0, 0};
    const uint8_t *rec;
    size_t len;
    tw_status s = tw_tfrecord_read(r, &rec, &len, err);
    tw_example *ex = NULL;
    if (s == TW_END)
        s = no_records(in, err);
    else if (s == TW_OK)
        s = tw_example_parse(rec, len, in->path, 0, &ex, err);
    tw_feature f;
    if (s == TW_OK)
        s = find_feature(in, ex, in->image_feature, at, &f, err);
    if (s == TW_OK) {
        size_t n = 0;
        if (f.kind == TW_FEATURE_BYTES && f.count == 1)
            tw_feature_bytes_at(&f, 0, &n);
        in->u8 = f.kind == TW_FEATURE_BYTES && n == in->o.example_size;
        size_estimate(in, r);
        in->row_bytes = in->o.example_size * (in->u8 ? 1 : sizeof(float));
        if (!in->u8 && !(f.kind == TW_FEATURE_FLOAT ? f.count == in->o.example_size : n == in->row_bytes))
            s = bad_image(in, &f, at, n, err);
    }
    tw_example_destroy(ex);
    tw_tfrecord_reader_close(r);
    return s;
}

/* Allocates what the chosen mode needs; streaming starts its first pass, which checks the first
 * records. */
static tw_status setup_mode(tw_input *in, tw_error *err)
{
    producer *p = &in->p;
    if (in->in_memory) {
        if (in->o.shuffle && !(p->perm = malloc(p->count * sizeof *p->perm)))
            return tw_error_set(err, TW_ERR_NOMEM, in->path, -1, "out of memory");
        in->count = p->count;
        return TW_OK;
    }
    p->cap = in->o.shuffle ? (size_t)in->o.shuffle_buffer : 1;
    p->buf_x = malloc(p->cap * in->row_bytes);
    p->buf_y = malloc(p->cap * sizeof *p->buf_y);
    if (!p->buf_x || !p->buf_y)
        return tw_error_set(err, TW_ERR_NOMEM, in->path, -1,
                            "out of memory for a shuffle buffer of %zu examples", p->cap);
    return start_pass(in, err);
}

tw_status tw_input_open(const tw_input_options *o, tw_input **out, tw_error *err)
{
    *out = NULL;
    TW_TRY(check_options(o, err));
    tw_input *in = calloc(1, sizeof *in);
    if (!in)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_status s = init_input(in, o, err);
    if (s == TW_OK)
        s = row_format(in, err);
    if (s == TW_OK && !clearly_too_large(in))
        s = load(in, &in->in_memory, err);
    if (s == TW_OK)
        s = setup_mode(in, err);
    if (s != TW_OK) {
        tw_input_close(in);
        return s;
    }
    *out = in;
    return TW_OK;
}

void tw_input_close(tw_input *in)
{
    if (!in)
        return;
    stop_prefetch(in);
    if (in->f.sync_ready) {
        pthread_cond_destroy(&in->f.changed);
        pthread_mutex_destroy(&in->f.mu);
    }
    tw_tfrecord_reader_close(in->p.reader);
    free(in->p.perm);
    free(in->p.buf_x);
    free(in->p.buf_y);
    free(in->p.aug_work);
    free(in->x);
    free(in->y);
    free(in->path);
    free(in->image_feature);
    free(in->label_feature);
    free(in);
}
