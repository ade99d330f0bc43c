/* safetensors.h — the safetensors weight-file format (docs/formats.md §7.1): writing fp32 tensors, reading
 * and validating any file.
 *
 * Owns: the byte layout (u64 little-endian header length N, N bytes of JSON header padded with spaces
 * to a multiple of 8, then the data buffer), the header's JSON (tensor entries and the `__metadata__`
 * string map), the dtype table, and the reader's validation, which follows the reference Rust reader
 * (safetensors/src/tensor.rs `read_metadata` and `Metadata::validate`). Writing is atomic through
 * tw_atomic_file. Does not own: what the tensors mean, the checkpoint folder (engine/checkpoint.h), or
 * statistics over values (the inspect subcommand).
 *
 * Host byte order must be little-endian (checked at compile time): tensor bytes are written and handed
 * out as stored. Objects are not thread-safe; distinct objects may be used from distinct threads. */
#ifndef TW_SAFETENSORS_H
#define TW_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum {
    TW_ST_MAX_RANK = 16,                   /* a longer shape is TW_ERR_UNSUPPORTED */
    TW_ST_MAX_HEADER_BYTES = 100000000,    /* the reference reader's cap on N */
};

/* Every dtype the format names. Only F32 is written; all are read (inspect reports them). */
typedef enum {
    TW_ST_BOOL, TW_ST_U8, TW_ST_I8, TW_ST_I16, TW_ST_U16, TW_ST_F16, TW_ST_BF16, TW_ST_I32,
    TW_ST_U32, TW_ST_F32, TW_ST_C64, TW_ST_F64, TW_ST_I64, TW_ST_U64, TW_ST_F8_E5M2, TW_ST_F8_E4M3,
    TW_ST_F8_E8M0, TW_ST_F8_E4M3FNUZ, TW_ST_F8_E5M2FNUZ, TW_ST_F4, TW_ST_F6_E2M3, TW_ST_F6_E3M2,
} tw_st_dtype;

/* The header spelling ("F32", "BF16", ...). */
const char *tw_st_dtype_name(tw_st_dtype d);

/* Bits per element: 32 for F32, 4 for F4, 6 for the F6 types. */
unsigned tw_st_dtype_bits(tw_st_dtype d);

/* Writes "[2, 3]" ("[]" for rank 0) into buf[size], always terminated. */
void tw_st_shape_text(const uint64_t *shape, int rank, char *buf, size_t size);

/* A tensor to write: name and data borrowed for the duration of the call. */
typedef struct {
    const char *name;                 /* UTF-8, not "__metadata__" */
    const float *data;                /* [prod(shape)] fp32; may be NULL when prod(shape) == 0 */
    int rank;                         /* 0..TW_ST_MAX_RANK; 0 is a scalar (one value) */
    int64_t shape[TW_ST_MAX_RANK];    /* [rank], each >= 0 */
} tw_st_tensor;

/* One `__metadata__` entry: borrowed UTF-8 strings. */
typedef struct {
    const char *key;
    const char *value;
} tw_st_meta;

/* Writes path atomically (temporary name, fsync, rename, fsync of the folder): the tensors as F32, laid
 * out and listed sorted by name (bytewise), the header padded with spaces to a multiple of 8, then
 * `__metadata__` first when n_meta > 0 (its keys sorted too). The same inputs give the same bytes.
 * Errors: TW_ERR_INVALID (duplicate, reserved or non-UTF-8 name or key, rank or dimension out of range,
 * NULL data with values; nothing is created), TW_ERR_IO (a write, fsync or rename failed: path is
 * untouched and the temporary removed), TW_ERR_NOMEM. */
tw_status tw_safetensors_write(const char *path, const tw_st_tensor *tensors, size_t n,
                               const tw_st_meta *meta, size_t n_meta, tw_error *err);

/* tw_safetensors_write for checkpoints: every value is checked in the pass that writes it, and a NaN or
 * Inf is TW_ERR_INVALID with errno_value EDOM naming the tensor and element; path is then untouched and
 * the temporary removed. */
tw_status tw_safetensors_write_finite(const char *path, const tw_st_tensor *tensors, size_t n,
                                      const tw_st_meta *meta, size_t n_meta, tw_error *err);

/* ---- reading ---- */

typedef struct tw_safetensors tw_safetensors; /* a validated file held in memory */

/* One tensor of a read file; everything borrowed from the tw_safetensors. */
typedef struct {
    const char *name;
    tw_st_dtype dtype;
    int rank;
    uint64_t shape[TW_ST_MAX_RANK];   /* [rank] */
    uint64_t count;                   /* prod(shape); 1 for rank 0 */
    uint64_t offset;                  /* file offset of the first data byte: 8 + N + begin */
    uint64_t nbytes;                  /* end - begin */
    const uint8_t *data;              /* [nbytes] little-endian, C order; 8-aligned when offset is */
} tw_st_info;

/* Reads path whole into memory and validates it as the reference reader does: N capped at
 * TW_ST_MAX_HEADER_BYTES and at the file size before any allocation; the header a JSON object without
 * duplicate keys; each entry {dtype, shape, data_offsets} (other keys ignored) with a known dtype,
 * non-negative integer dims (rank <= TW_ST_MAX_RANK) and end - begin == prod(shape) * bits / 8; the
 * entries sorted by offsets contiguous from 0 with no gap or overlap; `__metadata__` (optional, may be
 * null) a map of strings; and 8 + N + the last end == the file size exactly. The data buffer is placed
 * 8-byte aligned in memory (a tensor is aligned as far as its offset is). Caller owns *out
 * (tw_safetensors_free). Errors: TW_ERR_CORRUPT (any rule broken: err names the file, the tensor when
 * there is one, and the byte offset), TW_ERR_UNSUPPORTED (rank past the cap), TW_ERR_IO,
 * TW_ERR_NOMEM. */
tw_status tw_safetensors_read(const char *path, tw_safetensors **out, tw_error *err);

/* Like tw_safetensors_read over n bytes of memory (copied: the caller keeps data); name labels
 * errors. */
tw_status tw_safetensors_parse(const void *data, size_t n, const char *name, tw_safetensors **out,
                               tw_error *err);

void tw_safetensors_free(tw_safetensors *st); /* NULL-safe */

/* The file name errors are reported against (borrowed). */
const char *tw_safetensors_name(const tw_safetensors *st);

/* N, the header length. */
uint64_t tw_safetensors_header_bytes(const tw_safetensors *st);

/* Tensors, in data order (by offset); i < tw_safetensors_count. Borrowed from st. */
size_t tw_safetensors_count(const tw_safetensors *st);
const tw_st_info *tw_safetensors_at(const tw_safetensors *st, size_t i);

/* The tensor called name (borrowed from st), NULL when absent. Linear in the tensor count. */
const tw_st_info *tw_safetensors_find(const tw_safetensors *st, const char *name);

/* `__metadata__` entries in header order; i < tw_safetensors_meta_count. Borrowed from st. */
size_t tw_safetensors_meta_count(const tw_safetensors *st);
const tw_st_meta *tw_safetensors_meta_at(const tw_safetensors *st, size_t i);

/* The metadata value for key (borrowed from st), NULL when absent. */
const char *tw_safetensors_meta(const tw_safetensors *st, const char *key);

#endif
