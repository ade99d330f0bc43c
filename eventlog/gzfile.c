/* gzfile.c — one content stream over a raw, gzip or zlib file, with a budget. See gzfile.h.
 *
 * Layers, bottom up: a decoder (the raw window — a 1 MiB buffer filled by read(2), or the caller's
 * memory — and, when compressed, inflate) produces content chunks; peek/skip serve them, clamped to the
 * budget. For a compressed *file* the decoder runs on a prefetch thread that fills a ring of RING 1 MiB chunks ahead of
 * the reader, so inflating overlaps with whatever the reader does with the bytes (inflate is most of the
 * cost of converting a .gz dataset); memory sources and raw files are decoded on the caller's thread.
 * Inflating uses ISA-L's igzip (Intel's libisal), which decodes the same gzip and zlib streams as zlib at
 * about twice its speed here (BENCHMARKS.md); zlib still does all compressing. zlib's gzFile API would
 * hide the compressed offset and accept trailing garbage silently, so the loop over the library is
 * written here, once. */
#include "gzfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <isa-l/igzip_lib.h>

#include "datafs.h"

enum { BUF_BYTES = 1 << 20, RING = 4 };

/* The producing side: touched only by the thread that decodes (the caller's, or the prefetch thread). */
typedef struct {
    const char *name;      /* borrowed from tw_gzfile */
    int fd;                /* owned by tw_gzfile, -1 for a memory source */
    const uint8_t *mem;    /* borrowed memory source, or NULL */
    size_t mem_len;
    const uint8_t *in;     /* raw window: in_buf, or a slice of mem */
    uint8_t *in_buf;       /* [BUF_BYTES] owned, file sources only */
    size_t in_len, in_pos;
    uint64_t raw_end;      /* raw offset just past the current raw window */
    int in_eof;
    tw_compression comp;   /* resolved: NONE, GZIP or ZLIB */
    struct inflate_state *zs; /* owned (87 KB), NULL when not compressed */
    int z_ended;
    uint64_t produced;     /* content bytes produced so far */
} decoder;

/* One produced chunk: len content bytes, then status (TW_OK; len 0 with TW_OK is the clean end). */
typedef struct {
    uint8_t *data;         /* [BUF_BYTES] owned */
    size_t len;
    tw_status status;
    tw_error error;        /* when status != TW_OK */
} chunk;

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* broadcast on every change of count or stop */
    chunk ring[RING];
    size_t head, count;    /* the reader holds ring[head] when holding; the producer fills the next */
    int holding, stop;
} prefetch;

struct tw_gzfile {
    char *name;            /* owned */
    decoder dec;
    uint8_t *out;          /* [BUF_BYTES] inflate output when decoding on the caller's thread */
    prefetch *pf;          /* owned; NULL: decode on the caller's thread */
    const uint8_t *win;    /* the current content window [win_len], consumed up to win_pos */
    size_t win_len, win_pos;
    int at_end;            /* the decoder reported the clean end */
    uint64_t consumed;     /* content bytes handed out */
    uint64_t max_bytes;    /* 0 = no budget */
    tw_error failure;      /* sticky; status TW_OK while healthy */
};

tw_status tw_compression_parse(const char *s, int allow_auto, tw_compression *out, tw_error *err)
{
    if (!s[0] || !strcasecmp(s, "none"))
        *out = TW_COMPRESSION_NONE;
    else if (!strcasecmp(s, "gzip"))
        *out = TW_COMPRESSION_GZIP;
    else if (!strcasecmp(s, "zlib"))
        *out = TW_COMPRESSION_ZLIB;
    else if (allow_auto && !strcasecmp(s, "auto"))
        *out = TW_COMPRESSION_AUTO;
    else
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "unknown compression '%s' (expected none, gzip or zlib%s)", s,
                            allow_auto ? " or auto" : "");
    return TW_OK;
}

const char *tw_compression_name(tw_compression c)
{
    switch (c) {
    case TW_COMPRESSION_NONE: return "none";
    case TW_COMPRESSION_GZIP: return "gzip";
    case TW_COMPRESSION_ZLIB: return "zlib";
    case TW_COMPRESSION_AUTO: return "auto";
    }
    return "?";
}

/* ================================ decoder ================================ */

static uint64_t raw_offset(const decoder *d)
{
    return d->raw_end - (d->in_len - d->in_pos);
}

static tw_status raw_fill(decoder *d, tw_error *err)
{
    if (d->in_pos < d->in_len || d->in_eof)
        return TW_OK;
    size_t got;
    if (d->fd < 0) {
        d->in = d->mem + d->raw_end;
        got = d->mem_len - (size_t)d->raw_end;
        if (got > BUF_BYTES)
            got = BUF_BYTES;
    } else {
        ssize_t r;
        do
            r = read(d->fd, d->in_buf, BUF_BYTES);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return tw_error_errno(err, d->name, "read failed");
        got = (size_t)r;
    }
    d->in_len = got;
    d->in_pos = 0;
    d->raw_end += got;
    d->in_eof = got == 0;
    return TW_OK;
}

static tw_status gzip_error(const decoder *d, tw_error *err, tw_status s, const char *what)
{
    return tw_error_set(err, s, d->name, (int64_t)raw_offset(d),
                        "%s (after %llu decompressed bytes)", what,
                        (unsigned long long)d->produced);
}

/* Readies d->zs for a new gzip member or zlib stream. */
static void inflate_reset(decoder *d)
{
    isal_inflate_reset(d->zs);
    d->zs->crc_flag = d->comp == TW_COMPRESSION_GZIP ? ISAL_GZIP : ISAL_ZLIB;
}

static const char *inflate_error_name(int rc)
{
    switch (rc) {
    case ISAL_INVALID_BLOCK: return "invalid deflate block";
    case ISAL_INVALID_SYMBOL: return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK: return "invalid distance too far back";
    case ISAL_INVALID_WRAPPER: return "invalid header";
    case ISAL_UNSUPPORTED_METHOD: return "unsupported compression method";
    case ISAL_INCORRECT_CHECKSUM: return "incorrect data check";
    }
    return "inflate failed";
}

/* Runs inflate once over the raw window, appending to out[*len..BUF_BYTES). */
static tw_status inflate_step(decoder *d, uint8_t *out, size_t *len, tw_error *err)
{
    if (d->z_ended) { /* more input after a complete gzip member: only another member may follow */
        if (d->comp != TW_COMPRESSION_GZIP || d->in[d->in_pos] != 0x1f)
            return gzip_error(d, err, TW_ERR_CORRUPT,
                              d->comp == TW_COMPRESSION_GZIP
                                  ? "trailing bytes after the end of the gzip stream"
                                  : "trailing bytes after the end of the zlib stream");
        inflate_reset(d);
        d->z_ended = 0;
    }
    d->zs->next_in = (uint8_t *)(d->in + d->in_pos);
    d->zs->avail_in = (uint32_t)(d->in_len - d->in_pos);
    d->zs->next_out = out + *len;
    d->zs->avail_out = (uint32_t)(BUF_BYTES - *len);
    int rc = isal_inflate(d->zs);
    d->in_pos = d->in_len - d->zs->avail_in;
    d->produced += BUF_BYTES - *len - d->zs->avail_out;
    *len = BUF_BYTES - d->zs->avail_out;
    if (rc < 0) {
        char what[200];
        snprintf(what, sizeof what, "invalid %s data: %s", tw_compression_name(d->comp),
                 inflate_error_name(rc));
        return gzip_error(d, err, TW_ERR_CORRUPT, what);
    }
    if (d->zs->block_state != ISAL_BLOCK_FINISH)
        return TW_OK;
    /* igzip reads ahead into a bit buffer: give back the whole bytes it holds past the stream's end. */
    size_t unread = (size_t)d->zs->read_in_length / 8;
    if (unread > d->in_pos)
        return gzip_error(d, err, TW_ERR_CORRUPT, "unexpected bytes after the end of a stream");
    d->in_pos -= unread;
    d->z_ended = 1;
    return TW_OK;
}

static tw_status truncated(const decoder *d, tw_error *err)
{
    char what[120];
    snprintf(what, sizeof what, "truncated %s stream: the file ends inside compressed data",
             tw_compression_name(d->comp));
    return gzip_error(d, err, TW_ERR_TRUNCATED, what);
}

/* Produces the next content chunk into *data and *len (len 0 only at the clean end). Compressed bytes are
 * inflated into out[BUF_BYTES]; for a raw source they are the rest of the raw window, handed over whole. */
static tw_status produce(decoder *d, uint8_t *out, const uint8_t **data, size_t *len, tw_error *err)
{
    *len = 0;
    if (d->comp == TW_COMPRESSION_NONE) {
        TW_TRY(raw_fill(d, err));
        *data = d->in + d->in_pos;
        *len = d->in_len - d->in_pos;
        d->in_pos = d->in_len;
        d->produced += *len;
        return TW_OK;
    }
    *data = out;
    while (*len == 0) {
        TW_TRY(raw_fill(d, err));
        if (d->in_pos == d->in_len)
            return d->z_ended || d->raw_end == 0 ? TW_OK : truncated(d, err);
        TW_TRY(inflate_step(d, out, len, err));
    }
    return TW_OK;
}

/* Back to the first raw byte. */
static tw_status decoder_rewind(decoder *d, tw_error *err)
{
    if (d->fd >= 0 && lseek(d->fd, 0, SEEK_SET) != 0)
        return tw_error_errno(err, d->name, "cannot seek back to the start");
    d->in_len = d->in_pos = 0;
    d->raw_end = 0;
    d->in_eof = 0;
    d->z_ended = 0;
    d->produced = 0;
    if (d->zs)
        inflate_reset(d);
    return TW_OK;
}

/* ================================ prefetch ================================ */

static void *prefetch_main(void *arg)
{
    tw_gzfile *f = arg;
    prefetch *pf = f->pf;
    for (;;) {
        pthread_mutex_lock(&pf->mu);
        while (pf->count == RING && !pf->stop)
            pthread_cond_wait(&pf->cv, &pf->mu);
        int stop = pf->stop;
        chunk *c = &pf->ring[(pf->head + pf->count) % RING];
        pthread_mutex_unlock(&pf->mu);
        if (stop)
            return NULL;
        const uint8_t *data;
        c->status = produce(&f->dec, c->data, &data, &c->len, &c->error);
        pthread_mutex_lock(&pf->mu);
        pf->count++;
        pthread_cond_broadcast(&pf->cv);
        pthread_mutex_unlock(&pf->mu);
        if (c->status != TW_OK || c->len == 0)
            return NULL; /* the last chunk: an error or the end */
    }
}

static void prefetch_stop(prefetch *pf)
{
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pf->stop = 0;
    pf->head = pf->count = 0;
    pf->holding = 0;
}

static void prefetch_free(prefetch *pf)
{
    for (int i = 0; i < RING; i++)
        free(pf->ring[i].data);
    pthread_cond_destroy(&pf->cv);
    pthread_mutex_destroy(&pf->mu);
    free(pf);
}

/* Starts decoding on a thread; when anything is missing the caller's thread decodes instead. */
static void prefetch_start(tw_gzfile *f)
{
    prefetch *pf = calloc(1, sizeof *pf);
    if (!pf)
        return;
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    int ok = 1;
    for (int i = 0; i < RING; i++)
        ok &= (pf->ring[i].data = malloc(BUF_BYTES)) != NULL;
    f->pf = pf;
    if (!ok || pthread_create(&pf->thread, NULL, prefetch_main, f) != 0) {
        f->pf = NULL;
        prefetch_free(pf);
    }
}

/* Takes the next chunk from the ring, handing the previous one back to the producer. */
static tw_status prefetch_next(tw_gzfile *f, chunk **out)
{
    prefetch *pf = f->pf;
    pthread_mutex_lock(&pf->mu);
    if (pf->holding) {
        pf->head = (pf->head + 1) % RING;
        pf->count--;
        pthread_cond_broadcast(&pf->cv);
    }
    while (pf->count == 0)
        pthread_cond_wait(&pf->cv, &pf->mu);
    pf->holding = 1;
    *out = &pf->ring[pf->head];
    pthread_mutex_unlock(&pf->mu);
    return (*out)->status;
}

/* ================================ reading ================================ */

/* Records a failure in f and in *err; returns its status. */
static tw_status fail(tw_gzfile *f, tw_error *err, const tw_error *e)
{
    f->failure = *e;
    if (err)
        *err = *e;
    return e->status;
}

/* Moves to the next content window (empty at the end). */
static tw_status next_window(tw_gzfile *f, tw_error *err)
{
    tw_error e;
    tw_status s;
    f->win_pos = 0;
    if (f->pf) {
        chunk *c;
        s = prefetch_next(f, &c);
        e = c->error;
        f->win = c->data;
        f->win_len = s == TW_OK ? c->len : 0;
    } else {
        s = produce(&f->dec, f->out, &f->win, &f->win_len, &e);
    }
    if (s != TW_OK)
        return fail(f, err, &e);
    f->at_end = f->win_len == 0;
    return TW_OK;
}

tw_status tw_gzfile_peek(tw_gzfile *f, const uint8_t **data, size_t *avail, tw_error *err)
{
    if (f->failure.status != TW_OK)
        return fail(f, err, &f->failure);
    if (f->win_pos == f->win_len && !f->at_end)
        TW_TRY(next_window(f, err));
    *data = f->win + f->win_pos;
    *avail = f->win_len - f->win_pos;
    if (!f->max_bytes || f->consumed + *avail <= f->max_bytes)
        return TW_OK;
    if (f->consumed < f->max_bytes) {
        *avail = (size_t)(f->max_bytes - f->consumed);
        return TW_OK;
    }
    tw_error e;
    tw_error_set(&e, TW_ERR_TOO_LARGE, f->name, (int64_t)f->consumed,
                 "the data is larger than the budget of %llu bytes%s",
                 (unsigned long long)f->max_bytes,
                 f->dec.comp != TW_COMPRESSION_NONE ? " after decompression" : "");
    return fail(f, err, &e);
}

void tw_gzfile_skip(tw_gzfile *f, size_t n)
{
    f->win_pos += n;
    f->consumed += n;
}

tw_status tw_gzfile_read(tw_gzfile *f, void *dst, size_t n, size_t *got, tw_error *err)
{
    uint8_t *d = dst;
    *got = 0;
    while (*got < n) {
        const uint8_t *p;
        size_t avail;
        TW_TRY(tw_gzfile_peek(f, &p, &avail, err));
        if (avail == 0)
            break;
        size_t take = n - *got < avail ? n - *got : avail;
        memcpy(d + *got, p, take);
        tw_gzfile_skip(f, take);
        *got += take;
    }
    return TW_OK;
}

/* ================================ lifetime ================================ */

/* Resolves TW_COMPRESSION_AUTO from the first raw bytes and sets up inflate (and the prefetch thread
 * for compressed files). */
static tw_status start(tw_gzfile *f, tw_compression c, tw_error *err)
{
    decoder *d = &f->dec;
    TW_TRY(raw_fill(d, err));
    if (c == TW_COMPRESSION_AUTO)
        c = d->in_len >= 2 && d->in[0] == 0x1f && d->in[1] == 0x8b ? TW_COMPRESSION_GZIP
                                                                     : TW_COMPRESSION_NONE;
    d->comp = c;
    if (c == TW_COMPRESSION_NONE)
        return TW_OK;
    if (!(d->zs = malloc(sizeof *d->zs)))
        return tw_error_set(err, TW_ERR_NOMEM, f->name, -1, "out of memory");
    isal_inflate_init(d->zs);
    inflate_reset(d);
    if (d->fd >= 0)
        prefetch_start(f);
    if (!f->pf && !(f->out = malloc(BUF_BYTES)))
        return tw_error_set(err, TW_ERR_NOMEM, f->name, -1, "out of memory");
    return TW_OK;
}

static tw_status gzfile_new(const char *name, uint64_t max_bytes, tw_gzfile **out, tw_error *err)
{
    tw_gzfile *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name ? name : "<memory>"))) {
        free(f);
        return tw_error_set(err, TW_ERR_NOMEM, name, -1, "out of memory");
    }
    f->dec.name = f->name;
    f->dec.fd = -1;
    f->max_bytes = max_bytes;
    tw_error_clear(&f->failure);
    *out = f;
    return TW_OK;
}

/* tw_gzfile_open from raw byte `at` of the file on (0: its start). */
static tw_status open_file(const char *path, tw_compression c, uint64_t max_bytes, uint64_t at, tw_gzfile **out,
                           tw_error *err)
{
    *out = NULL;
    tw_gzfile *f = NULL;
    TW_TRY(gzfile_new(path, max_bytes, &f, err));
    tw_status s = TW_OK;
    f->dec.fd = tw_fs_open(path, O_RDONLY, 0);
    if (f->dec.fd < 0)
        s = tw_fs_error(err, path, "cannot open");
    else if (at && lseek(f->dec.fd, (off_t)at, SEEK_SET) != (off_t)at)
        s = tw_error_errno(err, path, "cannot seek to the offset to read from");
    else if (!(f->dec.in_buf = malloc(BUF_BYTES)))
        s = tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    else {
        f->dec.in = f->dec.in_buf;
        s = start(f, c, err);
    }
    if (s != TW_OK) {
        tw_gzfile_close(f);
        return s;
    }
    *out = f;
    return TW_OK;
}

tw_status tw_gzfile_open(const char *path, tw_compression c, uint64_t max_bytes, tw_gzfile **out,
                         tw_error *err)
{
    return open_file(path, c, max_bytes, 0, out, err);
}

tw_status tw_gzfile_open_plain_at(const char *path, uint64_t at, tw_gzfile **out, tw_error *err)
{
    return open_file(path, TW_COMPRESSION_NONE, 0, at, out, err);
}

tw_status tw_gzfile_open_mem(const void *data, size_t n, const char *name, tw_compression c,
                             uint64_t max_bytes, tw_gzfile **out, tw_error *err)
{
    *out = NULL;
    tw_gzfile *f = NULL;
    TW_TRY(gzfile_new(name, max_bytes, &f, err));
    f->dec.mem = data;
    f->dec.mem_len = n;
    f->dec.in = f->dec.mem;
    tw_status s = start(f, c, err);
    if (s != TW_OK) {
        tw_gzfile_close(f);
        return s;
    }
    *out = f;
    return TW_OK;
}

tw_status tw_gzfile_open_source(const tw_source *src, tw_compression c, uint64_t max_bytes,
                                tw_gzfile **out, tw_error *err)
{
    if (src->path)
        return tw_gzfile_open(src->path, c, max_bytes, out, err);
    return tw_gzfile_open_mem(src->data, src->size, src->name, c, max_bytes, out, err);
}

tw_status tw_gzfile_rewind(tw_gzfile *f, tw_error *err)
{
    if (f->pf)
        prefetch_stop(f->pf);
    TW_TRY(decoder_rewind(&f->dec, err));
    f->win = NULL;
    f->win_len = f->win_pos = 0;
    f->at_end = 0;
    f->consumed = 0;
    tw_error_clear(&f->failure);
    if (f->pf && pthread_create(&f->pf->thread, NULL, prefetch_main, f) != 0) {
        prefetch_free(f->pf);
        f->pf = NULL;
        if (!(f->out = malloc(BUF_BYTES)))
            return tw_error_set(err, TW_ERR_NOMEM, f->name, -1, "out of memory");
    }
    return TW_OK;
}

uint64_t tw_gzfile_offset(const tw_gzfile *f) { return f->consumed; }

tw_compression tw_gzfile_compression(const tw_gzfile *f) { return f->dec.comp; }

const char *tw_gzfile_name(const tw_gzfile *f) { return f->name; }

/* ================================ items ================================ */

tw_status tw_gzfile_items_init(tw_gzfile_items *it, const tw_gzfile *f, uint64_t count,
                               uint64_t item_bytes, uint64_t total_bytes, int64_t declared_at,
                               tw_error *err)
{
    memset(it, 0, sizeof *it);
    it->count = count;
    it->item_bytes = item_bytes;
    it->total_bytes = total_bytes;
    if (f->max_bytes && total_bytes > f->max_bytes)
        return tw_error_set(err, TW_ERR_TOO_LARGE, f->name, declared_at,
                            "the header declares %llu items of %llu bytes (%llu bytes in all), past "
                            "the budget of %llu bytes",
                            (unsigned long long)count, (unsigned long long)item_bytes,
                            (unsigned long long)total_bytes, (unsigned long long)f->max_bytes);
    if (!(it->buf = malloc(item_bytes)))
        return tw_error_set(err, TW_ERR_NOMEM, f->name, -1, "out of memory");
    return TW_OK;
}

void tw_gzfile_items_cleanup(tw_gzfile_items *it)
{
    free(it->buf);
    it->buf = NULL;
}

/* Content offsets differ from file offsets only when the file is compressed; say so then. */
static const char *offset_note(const tw_gzfile *f)
{
    return f->dec.comp != TW_COMPRESSION_NONE ? " (offset in the decompressed data)" : "";
}

/* After the last item: the stream must end exactly here. */
static tw_status expect_end(tw_gzfile *f, const tw_gzfile_items *it, tw_error *err)
{
    const uint8_t *p;
    size_t avail;
    TW_TRY(tw_gzfile_peek(f, &p, &avail, err));
    if (avail == 0)
        return TW_END;
    return tw_error_set(err, TW_ERR_CORRUPT, f->name, (int64_t)f->consumed,
                        "trailing data after the %llu items the header declares%s",
                        (unsigned long long)it->count, offset_note(f));
}

tw_status tw_gzfile_next_item(tw_gzfile *f, tw_gzfile_items *it, const uint8_t **item,
                              tw_error *err)
{
    if (it->done == it->count)
        return expect_end(f, it, err);
    const uint8_t *p;
    size_t avail, got;
    TW_TRY(tw_gzfile_peek(f, &p, &avail, err));
    if (avail >= it->item_bytes) {
        tw_gzfile_skip(f, (size_t)it->item_bytes);
        *item = p;
    } else {
        TW_TRY(tw_gzfile_read(f, it->buf, (size_t)it->item_bytes, &got, err));
        if (got < it->item_bytes)
            return tw_error_set(err, TW_ERR_TRUNCATED, f->name, (int64_t)f->consumed,
                                "truncated: the data ends inside item %llu of %llu (the header "
                                "declares %llu bytes)%s",
                                (unsigned long long)it->done + 1, (unsigned long long)it->count,
                                (unsigned long long)it->total_bytes, offset_note(f));
        *item = it->buf;
    }
    it->done++;
    return TW_OK;
}

void tw_gzfile_close(tw_gzfile *f)
{
    if (!f)
        return;
    if (f->pf) {
        prefetch_stop(f->pf);
        prefetch_free(f->pf);
    }
    if (f->dec.fd >= 0)
        close(f->dec.fd);
    free(f->dec.zs);
    free(f->out);
    free(f->dec.in_buf);
    free(f->name);
    free(f);
}
