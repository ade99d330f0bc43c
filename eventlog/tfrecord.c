/* tfrecord.c — TFRecord framing over plain files and one zlib/gzip deflate stream. See tfrecord.h.
 *
 * Reader: record framing over a tw_gzfile byte stream (which reads, inflates and enforces the budget).
 * Writer: framing -> optional deflate -> a 256 KiB buffer -> write(2), and every WRITEBACK_BYTES the
 * kernel is asked to start writing what came before to disk (sync_file_range), so the fsync that makes the
 * file durable (its owner's) waits for the tail only, not for the whole file. */
#define _GNU_SOURCE
#include "tfrecord.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "atomic_file.h"
#include "crc32c.h"

enum { BUF_BYTES = 256 * 1024, WRITEBACK_BYTES = 8 << 20, ZLIB_WINDOW_BITS = 15, GZIP_WINDOW_BITS = 15 + 16 };

static const uint64_t DEFAULT_MAX_RECORD = 256ull << 20;

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* =============================== writer =============================== */

struct tw_tfrecord_writer {
    int fd;                /* borrowed */
    tw_compression comp;
    const char *name;      /* borrowed, for messages */
    z_stream zs;
    int z_ready;
    uint8_t *buf;          /* [BUF_BYTES] staged output (compressed bytes when comp != NONE) */
    size_t buf_len;
    uint64_t records, bytes;
    uint64_t written_back; /* bytes the kernel was asked to start writing to disk */
    tw_status failed;      /* sticky I/O failure */
    int finished;
};

tw_status tw_tfrecord_writer_create(int fd, tw_compression c, const char *name,
                                    tw_tfrecord_writer **out, tw_error *err)
{
    *out = NULL;
    if (c == TW_COMPRESSION_AUTO)
        return tw_error_set(err, TW_ERR_INVALID, name, -1, "a writer needs a concrete compression");
    tw_tfrecord_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->buf = malloc(BUF_BYTES))) {
        free(w);
        return tw_error_set(err, TW_ERR_NOMEM, name, -1, "out of memory");
    }
    w->fd = fd;
    w->comp = c;
    w->name = name;
    if (c != TW_COMPRESSION_NONE) {
        int bits = c == TW_COMPRESSION_GZIP ? GZIP_WINDOW_BITS : ZLIB_WINDOW_BITS;
        /* TF's ZlibCompressionOptions: default level, mem_level 9, default strategy. */
        if (deflateInit2(&w->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, 9,
                         Z_DEFAULT_STRATEGY) != Z_OK) {
            tw_tfrecord_writer_destroy(w);
            return tw_error_set(err, TW_ERR_NOMEM, name, -1, "deflateInit2 failed");
        }
        w->z_ready = 1;
    }
    *out = w;
    return TW_OK;
}

/* data[n] written to the file; past WRITEBACK_BYTES since the last hint, writeback of them is started (a
 * hint: a file system without it, or a pipe, is written all the same). */
static tw_status put(tw_tfrecord_writer *w, const void *data, size_t n, tw_error *err)
{
    tw_status s = tw_write_all(w->fd, data, n, w->name, err);
    if (s != TW_OK)
        return w->failed = s;
    w->bytes += n;
    if (w->bytes - w->written_back >= WRITEBACK_BYTES) {
        (void)sync_file_range(w->fd, (off64_t)w->written_back, (off64_t)(w->bytes - w->written_back),
                              SYNC_FILE_RANGE_WRITE);
        w->written_back = w->bytes;
    }
    return TW_OK;
}

static tw_status drain(tw_tfrecord_writer *w, tw_error *err)
{
    TW_TRY(put(w, w->buf, w->buf_len, err));
    w->buf_len = 0;
    return TW_OK;
}

/* Feeds n bytes through deflate with the given flush mode, draining full output buffers. */
static tw_status deflate_some(tw_tfrecord_writer *w, const void *data, size_t n, int flush,
                              tw_error *err)
{
    const uint8_t *p = data;
    do {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        w->zs.next_in = (Bytef *)p;
        w->zs.avail_in = chunk;
        p += chunk;
        n -= chunk;
        int mode = n ? Z_NO_FLUSH : flush;
        for (;;) {
            if (w->buf_len == BUF_BYTES)
                TW_TRY(drain(w, err));
            w->zs.next_out = w->buf + w->buf_len;
            w->zs.avail_out = (uInt)(BUF_BYTES - w->buf_len);
            int rc = deflate(&w->zs, mode);
            w->buf_len = BUF_BYTES - w->zs.avail_out;
            TW_CHECK_FOREIGN(rc != Z_STREAM_ERROR, err, TW_ERR_INTERNAL, "zlib deflate");
            if (mode == Z_FINISH ? rc == Z_STREAM_END
                                 : (w->zs.avail_in == 0 && w->zs.avail_out != 0))
                break;
        }
    } while (n);
    return TW_OK;
}

static tw_status emit(tw_tfrecord_writer *w, const void *data, size_t n, tw_error *err)
{
    if (w->comp != TW_COMPRESSION_NONE)
        return deflate_some(w, data, n, Z_NO_FLUSH, err);
    if (w->buf_len + n > BUF_BYTES) {
        TW_TRY(drain(w, err));
        if (n > BUF_BYTES)
            return put(w, data, n, err);
    }
    memcpy(w->buf + w->buf_len, data, n);
    w->buf_len += n;
    return TW_OK;
}

tw_status tw_tfrecord_write(tw_tfrecord_writer *w, const void *data, size_t n, tw_error *err)
{
    if (w->failed)
        return tw_error_set(err, w->failed, w->name, -1, "writer failed earlier");
    if (w->finished)
        return tw_error_set(err, TW_ERR_INVALID, w->name, -1, "write after finish");
    uint8_t header[TW_TFRECORD_HEADER_BYTES], footer[TW_TFRECORD_FOOTER_BYTES];
    put_le64(header, n);
    put_le32(header + 8, tw_crc32c_mask(tw_crc32c(header, 8)));
    put_le32(footer, tw_crc32c_mask(tw_crc32c(data, n)));
    TW_TRY(emit(w, header, sizeof header, err));
    TW_TRY(emit(w, data, n, err));
    TW_TRY(emit(w, footer, sizeof footer, err));
    w->records++;
    return TW_OK;
}

tw_status tw_tfrecord_writer_flush(tw_tfrecord_writer *w, tw_error *err)
{
    if (w->failed)
        return tw_error_set(err, w->failed, w->name, -1, "writer failed earlier");
    if (w->comp != TW_COMPRESSION_NONE && !w->finished)
        TW_TRY(deflate_some(w, "", 0, Z_SYNC_FLUSH, err));
    return drain(w, err);
}

tw_status tw_tfrecord_writer_finish(tw_tfrecord_writer *w, tw_error *err)
{
    if (w->failed)
        return tw_error_set(err, w->failed, w->name, -1, "writer failed earlier");
    if (w->comp != TW_COMPRESSION_NONE && !w->finished)
        TW_TRY(deflate_some(w, "", 0, Z_FINISH, err));
    w->finished = 1;
    return drain(w, err);
}

uint64_t tw_tfrecord_writer_records(const tw_tfrecord_writer *w) { return w->records; }

uint64_t tw_tfrecord_writer_bytes(const tw_tfrecord_writer *w) { return w->bytes; }

void tw_tfrecord_writer_destroy(tw_tfrecord_writer *w)
{
    if (!w)
        return;
    if (w->z_ready)
        deflateEnd(&w->zs);
    free(w->buf);
    free(w);
}

/* =============================== reader =============================== */

struct tw_tfrecord_reader {
    tw_gzfile *in;          /* owned: the (decompressed) byte stream */
    tw_tfrecord_options opts;
    uint8_t *rec;           /* record buffer [rec_cap], grows up to max_record_bytes + 4 */
    size_t rec_cap;
    uint64_t offset;        /* logical offset of the next record */
    uint64_t records;
    tw_error failure;       /* sticky error, status TW_OK while healthy */
};

void tw_tfrecord_options_default(tw_tfrecord_options *o)
{
    o->compression = TW_COMPRESSION_AUTO;
    o->max_record_bytes = DEFAULT_MAX_RECORD;
    o->max_total_bytes = 0;
}

/* TFRecord's own detection (docs/formats.md §1): gzip by its magic; uncompressed when the first length CRC
 * checks out; zlib by a valid zlib header; uncompressed otherwise, so the reader reports the bad CRC. */
static tw_compression detect(const uint8_t *p, size_t n)
{
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
        return TW_COMPRESSION_GZIP;
    if (n >= 12 && tw_crc32c_mask(tw_crc32c(p, 8)) == get_le32(p + 8))
        return TW_COMPRESSION_NONE;
    if (n >= 2 && (p[0] & 0x0f) == Z_DEFLATED && ((p[0] << 8) | p[1]) % 31 == 0)
        return TW_COMPRESSION_ZLIB;
    return TW_COMPRESSION_NONE;
}

/* Opens the byte stream; for TW_COMPRESSION_AUTO it looks at the raw first bytes, then reopens with the
 * compression they show. */
static tw_status reader_open(const tw_source *src, const tw_tfrecord_options *opts,
                             tw_tfrecord_reader **out, tw_error *err)
{
    *out = NULL;
    tw_tfrecord_reader *r = calloc(1, sizeof *r);
    if (!r)
        return tw_error_set(err, TW_ERR_NOMEM, tw_source_name(src), -1, "out of memory");
    if (opts)
        r->opts = *opts;
    else
        tw_tfrecord_options_default(&r->opts);
    tw_error_clear(&r->failure);
    tw_compression c = r->opts.compression;
    tw_status s = TW_OK;
    if (c == TW_COMPRESSION_AUTO) {
        const uint8_t *head;
        size_t n;
        s = tw_gzfile_open_source(src, TW_COMPRESSION_NONE, 0, &r->in, err);
        if (s == TW_OK)
            s = tw_gzfile_peek(r->in, &head, &n, err);
        if (s == TW_OK)
            c = detect(head, n);
        tw_gzfile_close(r->in);
        r->in = NULL;
    }
    if (s == TW_OK)
        s = tw_gzfile_open_source(src, c, r->opts.max_total_bytes, &r->in, err);
    if (s != TW_OK) {
        tw_tfrecord_reader_close(r);
        return s;
    }
    *out = r;
    return TW_OK;
}

tw_status tw_tfrecord_reader_open(const char *path, const tw_tfrecord_options *opts,
                                  tw_tfrecord_reader **out, tw_error *err)
{
    const tw_source src = {.path = path};
    return reader_open(&src, opts, out, err);
}

tw_status tw_tfrecord_reader_open_mem(const void *data, size_t n, const char *name,
                                      const tw_tfrecord_options *opts, tw_tfrecord_reader **out,
                                      tw_error *err)
{
    const tw_source src = {.data = data, .size = n, .name = name};
    return reader_open(&src, opts, out, err);
}

static tw_status ensure_record_buffer(tw_tfrecord_reader *r, size_t need, tw_error *err)
{
    if (need <= r->rec_cap)
        return TW_OK;
    size_t cap = r->rec_cap ? r->rec_cap : 4096;
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(r->rec, cap);
    if (!p)
        return tw_error_set(err, TW_ERR_NOMEM, tw_gzfile_name(r->in), (int64_t)r->offset,
                            "out of memory for a record of %zu bytes", need);
    r->rec = p;
    r->rec_cap = cap;
    return TW_OK;
}

static tw_status read_record(tw_tfrecord_reader *r, const uint8_t **data, size_t *len,
                             tw_error *err)
{
    uint8_t header[TW_TFRECORD_HEADER_BYTES];
    size_t got;
    int64_t at = (int64_t)r->offset;
    TW_TRY(tw_gzfile_read(r->in, header, sizeof header, &got, err));
    if (got == 0)
        return TW_END;
    if (got < sizeof header)
        return tw_error_set(err, TW_ERR_TRUNCATED, tw_gzfile_name(r->in), at,
                            "truncated record: header has %zu of 12 bytes", got);
    if (tw_crc32c_mask(tw_crc32c(header, 8)) != get_le32(header + 8))
        return tw_error_set(err, TW_ERR_CORRUPT, tw_gzfile_name(r->in), at,
                            "corrupted record: length CRC mismatch%s",
                            at == 0 ? " (is this a TFRecord file?)" : "");
    uint64_t n = get_le64(header);
    if (n > r->opts.max_record_bytes)
        return tw_error_set(err, TW_ERR_TOO_LARGE, tw_gzfile_name(r->in), at,
                            "record length %llu exceeds the cap of %llu bytes",
                            (unsigned long long)n, (unsigned long long)r->opts.max_record_bytes);
    size_t need = (size_t)n + TW_TFRECORD_FOOTER_BYTES;
    TW_TRY(ensure_record_buffer(r, need, err));
    TW_TRY(tw_gzfile_read(r->in, r->rec, need, &got, err));
    if (got < need)
        return tw_error_set(err, TW_ERR_TRUNCATED, tw_gzfile_name(r->in), at,
                            "truncated record: %llu payload bytes expected, %zu present",
                            (unsigned long long)n, got >= 4 ? got - 4 : 0);
    if (tw_crc32c_mask(tw_crc32c(r->rec, (size_t)n)) != get_le32(r->rec + n))
        return tw_error_set(err, TW_ERR_CORRUPT, tw_gzfile_name(r->in), at, "corrupted record: data CRC mismatch");
    r->offset += TW_TFRECORD_HEADER_BYTES + need;
    r->records++;
    *data = r->rec;
    *len = (size_t)n;
    return TW_OK;
}

tw_status tw_tfrecord_read(tw_tfrecord_reader *r, const uint8_t **data, size_t *len, tw_error *err)
{
    *data = NULL;
    *len = 0;
    if (r->failure.status != TW_OK) {
        if (err)
            *err = r->failure;
        return r->failure.status;
    }
    tw_status s = read_record(r, data, len, &r->failure);
    if (s == TW_END || s == TW_OK) {
        tw_error_clear(&r->failure);
        return s;
    }
    if (err)
        *err = r->failure;
    return s;
}

uint64_t tw_tfrecord_reader_offset(const tw_tfrecord_reader *r) { return r->offset; }

uint64_t tw_tfrecord_reader_records(const tw_tfrecord_reader *r) { return r->records; }

tw_compression tw_tfrecord_reader_compression(const tw_tfrecord_reader *r)
{
    return tw_gzfile_compression(r->in);
}

void tw_tfrecord_reader_close(tw_tfrecord_reader *r)
{
    if (!r)
        return;
    tw_gzfile_close(r->in);
    free(r->rec);
    free(r);
}
