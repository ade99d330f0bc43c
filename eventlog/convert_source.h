/* convert_source.h — the converter's inputs (internal to eventlog/convert): one source per input kind.
 *
 * Owns: the source interface the conversion loop (convert.c) reads examples through, and opening the
 * sources an options struct names (train, and the test IDX pair or TFRecord file). Does not own: the
 * splits, the output files or the meta file (convert.c). */
#ifndef TW_CONVERT_SOURCE_H
#define TW_CONVERT_SOURCE_H

#include <jansson.h>
#include <stdint.h>

#include "convert.h"
#include "example.h"

typedef struct {
    int64_t i; /* the label, for integer-labelled sources */
    double f;  /* the label as a double, always (statistics, float labels) */
} tw_label_value;

typedef struct tw_convert_src tw_convert_src;
struct tw_convert_src {
    const char *kind;  /* "idx", "csv", "npy", "tfrecord" */
    uint64_t count;    /* examples next() will yield (tfrecord: counted only for a fraction split) */
    int int_labels;    /* label feature is int64 (else float) */
    /* Builds the next Example into b (reset by the caller), or sets record/record_len to one already
     * serialized; TW_END after the last. */
    tw_status (*next)(tw_convert_src *s, tw_example_builder *b, tw_label_value *label, tw_error *err);
    /* Adds "features", "shape" and "dtype" (and any source-specific keys) to the meta object. */
    tw_status (*describe)(const tw_convert_src *s, json_t *meta, tw_error *err);
    void (*close)(tw_convert_src *s);
    int64_t label_i;   /* the current label, borrowed by the Example being built */
    float label_f;
    int no_labels;     /* the examples have no label to count: splits get no label statistics */
    const uint8_t *record; /* [record_len] the serialized Example next() yielded, borrowed until the
                              next call; NULL: the Example is in the builder */
    size_t record_len;
    /* Optional (NULL: next() stands in): the next example's label alone, without building it (the class
     * counts of a stratified split); TW_END after the last. */
    tw_status (*next_label)(tw_convert_src *s, tw_label_value *label, tw_error *err);
};

/* Opens the training source of kind, and into *test the test source the options name (--test-images
 * pair or --test-tfrecord; else *test stays NULL). Caller owns both (close them, *test first: a TFRecord
 * test source borrows the training source's schema), also on failure. */
tw_status tw_convert_src_open(const tw_convert_options *o, tw_convert_source kind, tw_convert_src **train,
                          tw_convert_src **test, tw_error *err);

/* The image-folder source (convert_archive.c): o->image_archive read as classes of images. */
tw_status tw_convert_archive_open(const tw_convert_options *o, tw_convert_src **out, tw_error *err);

/* Sets key on obj, stealing value; a NULL value (jansson out of memory) is an error. */
tw_status tw_convert_put(json_t *obj, const char *key, json_t *value, tw_error *err);

#endif
