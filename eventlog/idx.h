/* idx.h — MNIST-style IDX files (docs/formats.md §8): header parsing and a streaming item reader.
 *
 * Owns: the IDX header (magic 00 00 <type> <rank>, then one big-endian u32 per dimension), the checks on
 * it (every length capped before use; the declared size against the caller's budget before any data is
 * read), and reading the items one at a time: item i is the i-th slice along the first dimension.
 * Truncated data and trailing data past the declared size are errors. Raw and gzip files are both read,
 * detected by content (see gzfile.h). Does not own: what the items mean (images, labels: convert.c), or
 * element types other than 0x08 unsigned byte (TW_ERR_UNSUPPORTED).
 *
 * Offsets in errors are content offsets (after decompression for a gzip file).
 * Not thread-safe: one reader per thread. */
#ifndef TW_IDX_H
#define TW_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum {
    TW_IDX_MAX_RANK = 8,                      /* a larger rank byte is TW_ERR_UNSUPPORTED */
    TW_IDX_MAX_ITEM_BYTES = 256 * 1024 * 1024 /* a larger item is TW_ERR_TOO_LARGE */
};

typedef enum {
    TW_IDX_UBYTE = 0x08,
    TW_IDX_SBYTE = 0x09,
    TW_IDX_INT16 = 0x0B,
    TW_IDX_INT32 = 0x0C,
    TW_IDX_FLOAT32 = 0x0D,
    TW_IDX_FLOAT64 = 0x0E,
} tw_idx_type;

typedef struct {
    uint8_t type;                   /* tw_idx_type; only TW_IDX_UBYTE gets this far */
    int rank;                       /* 1..TW_IDX_MAX_RANK */
    uint32_t dims[TW_IDX_MAX_RANK]; /* [rank]; dims[0] = number of items */
    uint64_t count;                 /* dims[0] */
    uint64_t item_bytes;            /* prod(dims[1..rank-1]) (1 for rank 1), <= TW_IDX_MAX_ITEM_BYTES */
    uint64_t header_bytes;          /* 4 + 4·rank */
    uint64_t total_bytes;           /* header_bytes + count·item_bytes: the declared file size */
} tw_idx_header;

/* Parses the header at the start of p[0..n). n may be short: a complete header needs 4 + 4·rank bytes.
 * Errors (offsets are into the file): TW_ERR_TRUNCATED (n too small), TW_ERR_CORRUPT (first two bytes
 * not zero, unknown element type, rank 0, a zero item dimension), TW_ERR_UNSUPPORTED (element type other
 * than ubyte, rank > TW_IDX_MAX_RANK), TW_ERR_TOO_LARGE (item or total size past the caps). name
 * (borrowed, may be NULL) labels the error. */
tw_status tw_idx_parse_header(const uint8_t *p, size_t n, const char *name, tw_idx_header *h,
                              tw_error *err);

/* Name of an element type code ("ubyte", "float32", ..., "unknown"). */
const char *tw_idx_type_name(uint8_t type);

typedef struct tw_idx_reader tw_idx_reader;

/* Opens path (raw or gzip) and reads its header. max_bytes is the budget on content bytes (0 = none): a
 * header declaring more fails here with TW_ERR_TOO_LARGE before any data is read. Caller owns *out.
 * Errors: those of tw_idx_parse_header and tw_gzfile_open. */
tw_status tw_idx_open(const char *path, uint64_t max_bytes, tw_idx_reader **out, tw_error *err);

/* Like tw_idx_open over memory (borrowed: must outlive the reader); name (copied) labels errors. This is
 * the parse-from-memory entry point the fuzzer drives. */
tw_status tw_idx_open_mem(const void *data, size_t n, const char *name, uint64_t max_bytes,
                          tw_idx_reader **out, tw_error *err);

/* The parsed header (borrowed from r). */
const tw_idx_header *tw_idx_reader_header(const tw_idx_reader *r);

/* The file name errors are reported against (borrowed from r). */
const char *tw_idx_reader_name(const tw_idx_reader *r);

/* 1 when the file is gzip-compressed. */
int tw_idx_reader_is_gzip(const tw_idx_reader *r);

/* Reads the next item: TW_OK with *item pointing at item_bytes bytes (borrowed, valid until the next call
 * on r); TW_END after the last declared item, once the stream is checked to end there. Errors:
 * TW_ERR_TRUNCATED (data ends inside an item), TW_ERR_CORRUPT (trailing data after the declared items, or
 * a corrupt gzip stream), TW_ERR_TOO_LARGE (budget), TW_ERR_IO. */
tw_status tw_idx_next(tw_idx_reader *r, const uint8_t **item, tw_error *err);

/* Items read so far. */
uint64_t tw_idx_reader_items(const tw_idx_reader *r);

/* Closes the file and frees r (NULL-safe). */
void tw_idx_close(tw_idx_reader *r);

#endif
