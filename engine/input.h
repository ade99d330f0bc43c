/* input.h — the input pipeline: TFRecord files of tf.train.Example -> shuffled, repeated batches.
 *
 * Owns: decoding the image feature (raw uint8 bytes scaled by `scale`, or a float list) and the label
 * feature (int64 -> int32 class, or float for regression) of each Example; keeping the decoded set in
 * memory when it fits under max_memory_bytes, else streaming the file through a shuffle buffer; a seeded
 * shuffle per epoch, repeat, batch; a prefetch thread that prepares the next batches while the trainer
 * computes; an exact position (epoch, examples consumed, RNG state) for checkpoints, and seeking back to
 * it, so a resumed run sees the same batches as an uninterrupted one. Also one-pass, in-order iteration
 * for evaluation. Does not own the model or the backend: batches are host memory.
 *
 * Errors name the file and the record offset (a corrupt record, a missing feature, a wrong size, a
 * label outside [0, classes)). Thread-safety: one consumer thread per tw_input. */
#ifndef TW_INPUT_H
#define TW_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "status.h"

typedef struct {
    const char *path;            /* borrowed */
    const char *image_feature;   /* borrowed; bytes (uint8, example_size long) or float list */
    const char *label_feature;   /* borrowed; int64 or float list of 1 value */
    size_t example_size;         /* values per example (product of the input shape) */
    float scale;                 /* uint8 values are multiplied by it */
    int float_labels;            /* 1: labels are floats (regression); 0: int classes */
    int classes;                 /* int labels must be in [0, classes) */
    uint64_t seed;               /* shuffle seed */
    int shuffle;                 /* 0: in file order (evaluation) */
    uint64_t max_memory_bytes;   /* decoded set larger than this -> streaming; default 2 GiB */
    int shuffle_buffer;          /* examples in the streaming shuffle buffer; default 10000 */
    int prefetch_batches;        /* batches prepared ahead; default 2; 0 = no thread */
    size_t prefetch_min_bytes;   /* in memory, batches of at most this many fp32 bytes are assembled by
                                    the caller, with no thread (input.c says why); default 1 MiB; 0: the
                                    thread for every batch */
    const tw_augment *augment;   /* borrowed; NULL (default) or nothing to do: the examples as stored. Each
                                    example is augmented as it is made, keyed by (seed, its epoch, its place
                                    in the epoch's order), so a position and a seed give the same batches */
    tw_augment_shape image;      /* with augment: the examples' [h, w, c] (h * w * c = example_size) */
} tw_input_options;

void tw_input_options_default(tw_input_options *o);

/* The host memory an input opened with o holds at most when its file has `examples` examples (0: not
 * known, or too many: the streaming size) and hands out batches of `batch`: the decoded set (rows,
 * labels, shuffle order) when it fits under max_memory_bytes, else the shuffle buffer; plus the prefetch
 * ring. Rows are counted as fp32: a uint8 file holds less (input.c). (Deciding between the two, open()
 * decodes up to max_memory_bytes' worth of fp32 rows and frees it again, a passing peak — unless the
 * file is uncompressed and its size says it is over twice the budget: then nothing is decoded, input.c.) */
uint64_t tw_input_memory_bytes(const tw_input_options *o, uint64_t examples, int batch);

/* Where a stream stands: enough to seek back to it exactly. Stored in checkpoints. */
typedef struct {
    uint64_t epoch;              /* passes started over the file, from 0 */
    uint64_t consumed;           /* examples handed out in this epoch */
} tw_input_position;

typedef struct tw_input tw_input;

/* Opens the file, validates the first record against the options (features present, sizes), and for
 * in-memory mode decodes the whole file. Caller owns *out. */
tw_status tw_input_open(const tw_input_options *o, tw_input **out, tw_error *err);
void tw_input_close(tw_input *in); /* NULL-safe; stops the prefetch thread */

/* Examples in the file (known after open for in-memory mode and for streaming after the first pass; 0
 * if not yet known). */
uint64_t tw_input_count(const tw_input *in);
int tw_input_in_memory(const tw_input *in);

/* The next `batch` examples, repeating over epochs: x [batch, example_size] fp32, labels [batch] int32
 * (or fp32 when float_labels). Host memory, caller-owned. An error (a bad record met while
 * streaming, I/O) is sticky: later calls return it until tw_input_seek or tw_input_rewind. */
tw_status tw_input_next(tw_input *in, int batch, float *x, void *labels, tw_error *err);

/* Like tw_input_next(batch), but only rows [lo, lo + rows) of the batch are wanted: x [rows,
 * example_size] and labels [rows] receive them and the other examples are skipped unconverted; the
 * position after it is the same. The processes of a world (world.h) each take their towers' rows of the
 * world's batch this way, so every example of an epoch reaches exactly one tower. Errors: TW_ERR_INVALID
 * when [lo, lo + rows) is not inside [0, batch) or rows < 1; tw_input_next's. */
tw_status tw_input_next_rows(tw_input *in, int batch, int lo, int rows, float *x, void *labels,
                             tw_error *err);

/* For evaluation (shuffle = 0): the next up-to-`batch` examples of a single pass; *got = 0 at the end.
 * tw_input_rewind starts the pass again. */
tw_status tw_input_next_once(tw_input *in, int batch, float *x, void *labels, int *got,
                             tw_error *err);
tw_status tw_input_rewind(tw_input *in, tw_error *err);

tw_input_position tw_input_tell(const tw_input *in);
/* Repositions so the next tw_input_next returns what it returned after `pos` was told. Errors:
 * TW_ERR_INVALID for a position past the end of an epoch; after any error the input is at (0,0). */
tw_status tw_input_seek(tw_input *in, const tw_input_position *pos, tw_error *err);

#endif
