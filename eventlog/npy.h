/* npy.h — NumPy .npy files (format versions 1.0 and 2.0): strict header parsing and a streaming reader
 * of one example (a slice along the first axis) at a time.
 *
 * Owns: the preamble (magic "\x93NUMPY", version, little-endian header length, capped), the header
 * dict parsed strictly — exactly the keys 'descr', 'fortran_order' and 'shape', each once, as Python
 * literals — the dtypes Tower reads (|u1, <i4, <i8, <f4, <f8), and reading the data section item by item
 * with the same truncation/trailing-data checks as IDX (gzfile.h). Raw and gzip files are both read.
 * Does not own: which dtypes a role accepts (features vs labels: convert.c), byte swapping (item bytes
 * are handed out as stored: little-endian), or Fortran-ordered arrays (TW_ERR_UNSUPPORTED).
 *
 * Offsets in errors are content offsets (after decompression for a gzip file).
 * Not thread-safe: one reader per thread. */
#ifndef TW_NPY_H
#define TW_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum {
    TW_NPY_MAX_RANK = 16,                     /* a longer shape is TW_ERR_UNSUPPORTED */
    TW_NPY_MAX_HEADER_BYTES = 65536,          /* a longer header dict is TW_ERR_TOO_LARGE */
    TW_NPY_MAX_ITEM_BYTES = 256 * 1024 * 1024 /* a larger example is TW_ERR_TOO_LARGE */
};

typedef enum {
    TW_NPY_UINT8 = 0,   /* '|u1' (also '<u1') */
    TW_NPY_INT32 = 1,   /* '<i4' */
    TW_NPY_INT64 = 2,   /* '<i8' */
    TW_NPY_FLOAT32 = 3, /* '<f4' */
    TW_NPY_FLOAT64 = 4, /* '<f8' */
} tw_npy_dtype;

/* "uint8", "int32", "int64", "float32", "float64". */
const char *tw_npy_dtype_name(tw_npy_dtype d);

/* Bytes per element: 1, 4, 8, 4, 8. */
size_t tw_npy_dtype_size(tw_npy_dtype d);

typedef struct {
    int major;                      /* format version: 1 or 2 */
    tw_npy_dtype dtype;
    int rank;                       /* 0..TW_NPY_MAX_RANK */
    uint64_t shape[TW_NPY_MAX_RANK];/* [rank] */
    uint64_t count;                 /* shape[0] (1 for rank 0) */
    uint64_t item_bytes;            /* prod(shape[1..rank-1]) · dtype size, <= TW_NPY_MAX_ITEM_BYTES */
    uint64_t header_bytes;          /* preamble + dict: where the data starts */
    uint64_t total_bytes;           /* header_bytes + count · item_bytes: the declared file size */
} tw_npy_header;

/* Parses the preamble at p[0..n) (n >= 10; 12 for version 2): fills h->major and the dict length and
 * h->header_bytes. Errors: TW_ERR_TRUNCATED (n too small), TW_ERR_CORRUPT (bad magic),
 * TW_ERR_UNSUPPORTED (version other than 1 or 2), TW_ERR_TOO_LARGE (dict longer than the cap). */
tw_status tw_npy_parse_preamble(const uint8_t *p, size_t n, const char *name, tw_npy_header *h,
                                size_t *dict_len, tw_error *err);

/* Parses the header dict text[0..n) (borrowed; not NUL-terminated), e.g.
 * "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 28, 28), }" padded with spaces and ending in
 * '\n'. at is the dict's offset in the file, for error offsets. Fills dtype, rank, shape, count and
 * item_bytes (total_bytes too when h->header_bytes is set). Errors: TW_ERR_CORRUPT (syntax, unknown,
 * duplicate or missing key), TW_ERR_UNSUPPORTED (dtype, fortran_order True, rank past the cap, a zero
 * per-example dimension), TW_ERR_TOO_LARGE (sizes past the caps). */
tw_status tw_npy_parse_dict(const char *text, size_t n, const char *name, int64_t at,
                            tw_npy_header *h, tw_error *err);

typedef struct tw_npy_reader tw_npy_reader;

/* Opens path (raw or gzip) and reads its header; the array must have rank >= 1 (examples along the
 * first axis). max_bytes is the budget on content bytes (0 = none): a header declaring more fails with
 * TW_ERR_TOO_LARGE before any data is read. Caller owns *out. */
tw_status tw_npy_open(const char *path, uint64_t max_bytes, tw_npy_reader **out, tw_error *err);

/* Like tw_npy_open over memory (borrowed: must outlive the reader); name (copied) labels errors. */
tw_status tw_npy_open_mem(const void *data, size_t n, const char *name, uint64_t max_bytes,
                          tw_npy_reader **out, tw_error *err);

/* The parsed header (borrowed from r). */
const tw_npy_header *tw_npy_reader_header(const tw_npy_reader *r);

/* The file name errors are reported against (borrowed from r). */
const char *tw_npy_reader_name(const tw_npy_reader *r);

/* Reads the next example: TW_OK with *item at item_bytes little-endian bytes (borrowed, valid until the
 * next call on r); TW_END after the last, once the stream is checked to end there. Errors:
 * TW_ERR_TRUNCATED, TW_ERR_CORRUPT (trailing data, corrupt gzip), TW_ERR_TOO_LARGE, TW_ERR_IO. */
tw_status tw_npy_next(tw_npy_reader *r, const uint8_t **item, tw_error *err);

/* Closes the file and frees r (NULL-safe). */
void tw_npy_close(tw_npy_reader *r);

#endif
