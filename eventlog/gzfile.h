/* gzfile.h — read a file (or a memory buffer) that is raw, gzip- or zlib-compressed as one byte stream,
 * with a budget on the bytes it may produce. The one inflate loop of Tower: converters read IDX, CSV and
 * NPY inputs through it, and the TFRecord reader reads GZIP and ZLIB TFRecords through it.
 *
 * Owns: tw_compression; detecting gzip by content (the 1f 8b magic, never the file name) when asked to;
 * inflating with zlib (concatenated gzip members are accepted, as gunzip and TensorFlow do; a zlib stream
 * must end the file), the decompressed-size budget that stops a gzip bomb, and telling a truncated or
 * corrupt compressed stream apart, with the byte offset in the file.
 * Does not own: what the bytes mean (IDX, CSV and NPY parse them) or writing anything.
 *
 * Memory is constant: a 1 MiB input buffer and, for gzip, 1 MiB of output; a gzip *file* is inflated
 * ahead by a prefetch thread of the reader's own into a ring of four 1 MiB chunks (started at open,
 * joined at rewind and close), so at most that much is decompressed past what the caller consumed.
 * Offsets: tw_gzfile_offset() counts content bytes (after decompression); errors of the gzip layer itself
 * (truncated, corrupt) carry the offset in the compressed file.
 * Not thread-safe: one caller thread per reader. */
#ifndef TW_GZFILE_H
#define TW_GZFILE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum {
    TW_COMPRESSION_NONE = 0,
    TW_COMPRESSION_GZIP = 1,
    TW_COMPRESSION_ZLIB = 2,
    TW_COMPRESSION_AUTO = 3, /* readers only: gzip if the stream starts with 1f 8b, else none */
} tw_compression;

/* Parses "none" / "" / "gzip" / "zlib" (any case; "auto" only when allow_auto). */
tw_status tw_compression_parse(const char *s, int allow_auto, tw_compression *out, tw_error *err);
const char *tw_compression_name(tw_compression c);

typedef struct tw_gzfile tw_gzfile;

/* Where a stream's bytes come from: the file at path, or (path NULL) size bytes of memory at data,
 * borrowed for the reader's life and labelled `name` in errors. */
typedef struct {
    const char *path;
    const void *data;
    size_t size;
    const char *name;
} tw_source;

/* The name errors about src carry: its path, or its label. */
static inline const char *tw_source_name(const tw_source *src)
{
    return src->path ? src->path : src->name;
}

/* Opens path, compressed as c (TW_COMPRESSION_AUTO: detected). max_bytes caps the content bytes (decompressed, or raw for a plain file) the stream may
 * yield; 0 means no cap. Producing byte max_bytes + 1 fails with TW_ERR_TOO_LARGE. Caller owns *out.
 * Errors: TW_ERR_IO (open/read), TW_ERR_NOMEM. */
tw_status tw_gzfile_open(const char *path, tw_compression c, uint64_t max_bytes, tw_gzfile **out,
                         tw_error *err);

/* Like tw_gzfile_open for an uncompressed file, from its byte `at` on: the stream's content (and
 * tw_gzfile_offset) starts there, so an appended-to file is read on from where the last reader stopped.
 * Errors: those of tw_gzfile_open; TW_ERR_IO when the file cannot seek there. */
tw_status tw_gzfile_open_plain_at(const char *path, uint64_t at, tw_gzfile **out, tw_error *err);

/* Like tw_gzfile_open over n bytes of memory (borrowed: must outlive the reader). name (copied, may be
 * NULL) labels errors. */
tw_status tw_gzfile_open_mem(const void *data, size_t n, const char *name, tw_compression c,
                             uint64_t max_bytes, tw_gzfile **out, tw_error *err);

/* tw_gzfile_open or tw_gzfile_open_mem, as src says. */
tw_status tw_gzfile_open_source(const tw_source *src, tw_compression c, uint64_t max_bytes,
                                tw_gzfile **out, tw_error *err);

/* Makes content bytes available without copying: *data points at *avail bytes owned by f, valid until
 * the next call on f other than the accessors. *avail == 0 only at the clean end of the stream (for gzip:
 * after a complete member whose CRC and length checked out; an empty file is an empty stream). Errors: TW_ERR_TRUNCATED (the file ends
 * inside compressed data), TW_ERR_CORRUPT (bad gzip data or trailer), TW_ERR_TOO_LARGE (budget),
 * TW_ERR_IO. After an error every later call repeats it. */
tw_status tw_gzfile_peek(tw_gzfile *f, const uint8_t **data, size_t *avail, tw_error *err);

/* Consumes n bytes of what the last peek made available (n <= *avail). */
void tw_gzfile_skip(tw_gzfile *f, size_t n);

/* Copies up to n content bytes into dst (borrowed, [n]); *got < n only at the end of the stream.
 * Errors as for peek. */
tw_status tw_gzfile_read(tw_gzfile *f, void *dst, size_t n, size_t *got, tw_error *err);

/* Starts again from the first byte (a CSV is read twice). Errors: TW_ERR_IO (lseek). */
tw_status tw_gzfile_rewind(tw_gzfile *f, tw_error *err);

/* Content bytes consumed so far = offset of the next byte. */
uint64_t tw_gzfile_offset(const tw_gzfile *f);

/* How the stream is compressed (never TW_COMPRESSION_AUTO: the detected kind). */
tw_compression tw_gzfile_compression(const tw_gzfile *f);

/* The name errors are reported against (borrowed from f). */
const char *tw_gzfile_name(const tw_gzfile *f);

/* ---- fixed-size items ----
 * A run of equal-sized items that fills the rest of the stream after a header: the data section of an
 * IDX or NPY file. Shared so both formats tell truncation from trailing data the same way. */
typedef struct {
    uint64_t count;       /* items the header declares */
    uint64_t item_bytes;  /* bytes per item, >= 1 */
    uint64_t total_bytes; /* the file size the header declares (header + data), for messages */
    uint64_t done;        /* items read so far */
    uint8_t *buf;         /* [item_bytes] owned: holds an item that straddles two buffer windows */
} tw_gzfile_items;

/* Sets up the run and checks the declared size against f's budget: past it, TW_ERR_TOO_LARGE at offset
 * declared_at (where the header states the sizes) before any data is read. Also TW_ERR_NOMEM. Call
 * tw_gzfile_items_cleanup afterwards, even on failure. */
tw_status tw_gzfile_items_init(tw_gzfile_items *it, const tw_gzfile *f, uint64_t count,
                               uint64_t item_bytes, uint64_t total_bytes, int64_t declared_at,
                               tw_error *err);
void tw_gzfile_items_cleanup(tw_gzfile_items *it);

/* Reads the next item: TW_OK with *item at item_bytes bytes (borrowed, valid until the next call on f);
 * TW_END after the last one, once the stream is checked to end there. Errors: TW_ERR_TRUNCATED (the data
 * ends inside an item), TW_ERR_CORRUPT (trailing data after the declared items), and those of peek. */
tw_status tw_gzfile_next_item(tw_gzfile *f, tw_gzfile_items *it, const uint8_t **item,
                              tw_error *err);

/* Closes the file and frees f (NULL-safe). */
void tw_gzfile_close(tw_gzfile *f);

#endif
