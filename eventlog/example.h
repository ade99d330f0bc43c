/* example.h — tf.train.Example encode and decode, through the protobuf-c code generated from
 * eventlog/proto/example.proto.
 *
 * Owns: building an Example from named feature lists (bytes, float, int64) and serializing it the way
 * TensorFlow does (one packed block per numeric list, map entries key then value); parsing serialized
 * Examples (packed or unpacked lists, as protobuf allows) into a view with typed accessors.
 * Does not own: which features a dataset has (converters and the engine decide).
 * Thread-safety: a builder or a parsed example belongs to one thread at a time. */
#ifndef TW_EXAMPLE_H
#define TW_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum { TW_EXAMPLE_MAX_FEATURES = 64 };

typedef enum {
    TW_FEATURE_NONE = 0,  /* present but empty (no kind set) */
    TW_FEATURE_BYTES = 1,
    TW_FEATURE_FLOAT = 2,
    TW_FEATURE_INT64 = 3,
} tw_feature_kind;

const char *tw_feature_kind_name(tw_feature_kind k); /* "bytes", "float", "int64", "none" */

/* ---- building ---- */

typedef struct tw_example_builder tw_example_builder;

tw_status tw_example_builder_create(tw_example_builder **out, tw_error *err);
void tw_example_builder_destroy(tw_example_builder *b); /* NULL-safe */

/* Forgets all features (keeps memory) so the builder can make the next Example. */
void tw_example_builder_reset(tw_example_builder *b);

/* Add one feature. name and the value arrays are BORROWED until the next serialize/reset: the
 * builder stores pointers, it does not copy. A bytes feature holds n items, items[i] of lens[i] bytes.
 * Errors: TW_ERR_INVALID past TW_EXAMPLE_MAX_FEATURES features. */
tw_status tw_example_add_bytes(tw_example_builder *b, const char *name, const void *const *items,
                               const size_t *lens, size_t n, tw_error *err);
tw_status tw_example_add_floats(tw_example_builder *b, const char *name, const float *values,
                                size_t n, tw_error *err);
tw_status tw_example_add_int64s(tw_example_builder *b, const char *name, const int64_t *values,
                                size_t n, tw_error *err);

/* Convenience: a bytes feature with one item. */
tw_status tw_example_add_bytes1(tw_example_builder *b, const char *name, const void *data,
                                size_t len, tw_error *err);

/* Serializes the Example into a builder-owned buffer; *data stays valid until the next call on b. */
tw_status tw_example_serialize(tw_example_builder *b, const uint8_t **data, size_t *len,
                               tw_error *err);

/* ---- parsing ---- */

typedef struct tw_example tw_example; /* a parsed Example; owns its unpacked message */

/* One feature of a parsed Example. Pointers are borrowed from the tw_example. */
typedef struct {
    const char *name;
    tw_feature_kind kind;
    size_t count;             /* number of values (items for bytes) */
    const float *floats;      /* [count] when kind == FLOAT */
    const int64_t *int64s;    /* [count] when kind == INT64 */
    const void *bytes_impl;   /* use tw_feature_bytes_at() */
} tw_feature;

/* Parses a serialized Example. Not a protobuf, or not an Example -> TW_ERR_CORRUPT. Caller owns *out.
 * `source`/`offset` only label the error (file and record offset), may be NULL/-1. */
tw_status tw_example_parse(const void *data, size_t len, const char *source, int64_t offset,
                           tw_example **out, tw_error *err);
void tw_example_destroy(tw_example *ex); /* NULL-safe */

size_t tw_example_feature_count(const tw_example *ex);
void tw_example_feature_at(const tw_example *ex, size_t i, tw_feature *out);

/* Finds a feature by name (the last one wins if the map repeats a key, as in protobuf). Returns 1 and
 * fills *out when found, else 0. */
int tw_example_find(const tw_example *ex, const char *name, tw_feature *out);

/* Item i (< f->count) of a bytes feature; *len gets its length. Borrowed from the tw_example. */
const uint8_t *tw_feature_bytes_at(const tw_feature *f, size_t i, size_t *len);

#endif
