/* tf_bundle.h — TensorFlow's checkpoint V2 (a "tensor bundle"): `PREFIX.index`, `PREFIX.data-00000-of-00001`
 * and the `checkpoint` state file beside them, as `tf.train.load_checkpoint(PREFIX)` and a tf.compat.v1
 * Saver read them (docs/formats.md §7.3).
 *
 * Owns: the byte layout of both files — the data shard (the tensors' little-endian bytes back to back) and
 * the .index table (a LevelDB-style SSTable: one data block of prefix-compressed, sorted keys with restart
 * points, an empty metaindex block, an index block, each followed by its type byte and masked CRC32C, and
 * the 48-byte footer with the table magic), whose values are BundleHeaderProto (key "") and one
 * BundleEntryProto per tensor (dtype, shape, offset, size, masked CRC32C of the bytes) — and the text of the
 * `checkpoint` state file. Does not own what the tensors are or how they are named (the engine's exporter,
 * engine/export.h). POD dtypes only (float32, int32, int64): Tower writes no strings.
 *
 * Host byte order must be little-endian (as safetensors.h). Stateless and thread-safe. */
#ifndef TW_TF_BUNDLE_H
#define TW_TF_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum { TW_BUNDLE_MAX_RANK = 8 };

/* TensorFlow's DataType numbers (types.proto) of the dtypes a bundle here holds. */
typedef enum { TW_BUNDLE_FLOAT = 1, TW_BUNDLE_INT32 = 3, TW_BUNDLE_INT64 = 9 } tw_bundle_dtype;

/* One tensor to store: name and data borrowed for the call. */
typedef struct {
    const char *name;          /* non-empty, unique; "layer1/weights" */
    tw_bundle_dtype dtype;
    int rank;                  /* 0 (a scalar) .. TW_BUNDLE_MAX_RANK */
    int64_t shape[TW_BUNDLE_MAX_RANK];
    const void *data;          /* [prod(shape)] values of dtype, little-endian; NULL only with none */
} tw_bundle_tensor;

/* A bundle's two files in memory (owned; tw_bundle_bytes_free). */
typedef struct {
    uint8_t *index;
    size_t index_len;
    uint8_t *data;
    size_t data_len;
} tw_bundle_bytes;

/* Builds both files from n tensors (in any order: the table sorts the keys bytewise). The same inputs give
 * the same bytes. Errors: TW_ERR_INVALID (an empty or duplicate name, a rank or dimension out of range,
 * NULL data with values, an unknown dtype), TW_ERR_NOMEM. On error *out is empty. */
tw_status tw_bundle_build(const tw_bundle_tensor *t, size_t n, tw_bundle_bytes *out, tw_error *err);
void tw_bundle_bytes_free(tw_bundle_bytes *b); /* NULL-safe; leaves *b empty */

/* The `checkpoint` state file naming the bundle `name` (the prefix's last component, relative to the
 * file's folder) as the latest and only checkpoint: "model_checkpoint_path: \"NAME\"\n
 * all_model_checkpoint_paths: \"NAME\"\n" with '"' and '\\' escaped. Caller frees; NULL when out of memory. */
char *tw_bundle_state_text(const char *name);

/* The file names of the bundle at prefix into index[size] and data[size] ("P.index",
 * "P.data-00000-of-00001"). Returns 0, or -1 when either does not fit. */
int tw_bundle_file_names(const char *prefix, char *index, char *data, size_t size);

/* Writes the bundle at prefix: PREFIX.data-00000-of-00001, then PREFIX.index, then the `checkpoint` state
 * file in the prefix's folder, each atomically and durably (base/atomic_file.h). Errors: TW_ERR_INVALID
 * (prefix empty, ending in '/', or too long), TW_ERR_IO, TW_ERR_NOMEM. */
tw_status tw_bundle_write(const char *prefix, const tw_bundle_bytes *b, tw_error *err);

#endif
