/* tfrecord.h — TFRecord framing: writer and streaming reader, uncompressed, GZIP and ZLIB.
 *
 * Owns: the record layout of docs/formats.md §1 (u64 LE length, masked CRC32C of the length, payload,
 * masked CRC32C of the payload) and the one-deflate-stream-per-file compression TensorFlow uses
 * (§1.4). Does not own: what a payload means (Example, Event) or where the file lives.
 *
 * The reader streams in constant memory: the buffers of its tw_gzfile byte stream (which also does the
 * inflating, the decompression budget and concatenated gzip members) and one record buffer that grows
 * to the largest record seen, never past max_record_bytes. TW_COMPRESSION_AUTO tells gzip (magic),
 * uncompressed (a valid length CRC at byte 0) and zlib (a zlib header) apart. It verifies both CRCs and tells a
 * clean end (TW_END) from a truncated record (TW_ERR_TRUNCATED) from a corrupted one (TW_ERR_CORRUPT),
 * each with the byte offset of the record (in the decompressed stream for GZIP/ZLIB files).
 * Neither reader nor writer is thread-safe; use one per thread. */
#ifndef TW_TFRECORD_H
#define TW_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "gzfile.h"
#include "status.h"

enum { TW_TFRECORD_HEADER_BYTES = 12, TW_TFRECORD_FOOTER_BYTES = 4 };

/* ---- writer ---- */

typedef struct tw_tfrecord_writer tw_tfrecord_writer;

/* Creates a writer onto fd (borrowed: never closed by the writer). `name` (borrowed, may be NULL) is
 * used in error messages. Caller owns *out. */
tw_status tw_tfrecord_writer_create(int fd, tw_compression c, const char *name,
                                    tw_tfrecord_writer **out, tw_error *err);

/* Appends one record. Data is buffered; see flush. After an I/O error every later call fails too. */
tw_status tw_tfrecord_write(tw_tfrecord_writer *w, const void *data, size_t n, tw_error *err);

/* Pushes buffered bytes to the fd (for GZIP/ZLIB, a Z_SYNC_FLUSH so every record written so far is
 * decodable). Does not fsync. */
tw_status tw_tfrecord_writer_flush(tw_tfrecord_writer *w, tw_error *err);

/* Ends the compressed stream (if any) and flushes. Call once, before destroy, to keep the file. */
tw_status tw_tfrecord_writer_finish(tw_tfrecord_writer *w, tw_error *err);

/* Records written and bytes handed to the fd so far. */
uint64_t tw_tfrecord_writer_records(const tw_tfrecord_writer *w);
uint64_t tw_tfrecord_writer_bytes(const tw_tfrecord_writer *w);

/* Frees the writer (NULL-safe). Does not finish the stream or close the fd. */
void tw_tfrecord_writer_destroy(tw_tfrecord_writer *w);

/* ---- reader ---- */

typedef struct {
    tw_compression compression; /* TW_COMPRESSION_AUTO by default (see above) */
    uint64_t max_record_bytes;  /* a larger length field is TW_ERR_TOO_LARGE; default 256 MiB */
    uint64_t max_total_bytes;   /* budget on decompressed bytes (gzip bombs), 0 = none (default) */
} tw_tfrecord_options;

void tw_tfrecord_options_default(tw_tfrecord_options *o);

typedef struct tw_tfrecord_reader tw_tfrecord_reader;

/* Opens path for reading. opts may be NULL for defaults. Caller owns *out. */
tw_status tw_tfrecord_reader_open(const char *path, const tw_tfrecord_options *opts,
                                  tw_tfrecord_reader **out, tw_error *err);

/* Reads from a memory buffer (borrowed, must outlive the reader); name is used in messages. */
tw_status tw_tfrecord_reader_open_mem(const void *data, size_t n, const char *name,
                                      const tw_tfrecord_options *opts, tw_tfrecord_reader **out,
                                      tw_error *err);

/* Reads the next record. TW_OK: *data and *len point into a reader-owned buffer valid until the next call.
 * TW_END: clean end of file. Errors: TW_ERR_TRUNCATED, TW_ERR_CORRUPT, TW_ERR_TOO_LARGE, TW_ERR_IO,
 * each naming the file and the record's offset. After an error the reader stays failed. */
tw_status tw_tfrecord_read(tw_tfrecord_reader *r, const uint8_t **data, size_t *len, tw_error *err);

/* Offset (in the uncompressed stream) of the next record to be read, and records read so far. */
uint64_t tw_tfrecord_reader_offset(const tw_tfrecord_reader *r);
uint64_t tw_tfrecord_reader_records(const tw_tfrecord_reader *r);
tw_compression tw_tfrecord_reader_compression(const tw_tfrecord_reader *r);

/* Closes the file and frees the reader (NULL-safe). */
void tw_tfrecord_reader_close(tw_tfrecord_reader *r);

#endif
