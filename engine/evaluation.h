/* evaluation.h — the metrics of one evaluation pass, and the run's `evaluation.json`.
 *
 * Owns: accumulating a pass from each batch's outputs and labels (classification: the confusion matrix,
 * top-5 hits and the cross-entropy; regression: squared and absolute errors and the label moments R²
 * needs), turning the sums into metrics (JSON), the per-class scalar tags and their bound, the name a
 * class is shown under, and the `evaluation.json` document (its keys, version and durable write: the one
 * writer of that file, docs/formats.md "evaluation.json"). Does not own the forward pass (the trainer's
 * replica, inference.h), where a pass's examples come from (input.h), or the event file (the caller
 * writes the scalars this module names).
 *
 * Hand-written: a confusion matrix and four sums need no library. Doubles throughout, so a pass of any
 * size sums exactly enough for the counts and to 1e-12 relative for the errors. One tw_evaluation is used
 * by one thread at a time. */
#ifndef TW_EVALUATION_H
#define TW_EVALUATION_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define TW_EVALUATION_FILE "evaluation.json"        /* in the run's log folder */
#define TW_EVALUATION_FORMAT "tower-evaluation-1"   /* the document's "format" */

enum {
    TW_EVAL_MAX_CLASSES = 65536,   /* the largest class count accumulated */
    TW_EVAL_CONFUSION_MAX = 256,   /* classes up to which the document holds the confusion matrix */
    TW_EVAL_SCALAR_CLASSES = 100,  /* per-class scalars go to the event file for the first this many */
    TW_EVAL_TOP_K = 5,             /* "top5": only with more classes than this */
    TW_EVAL_NAME_BYTES = 160,      /* a class name as shown (the converter caps names at 128 bytes) */
};

typedef struct tw_evaluation tw_evaluation;

/* classes > 0: a classifier with `classes` logits per example (outputs must equal classes); classes == 0:
 * regression with `outputs` values per example. Caller owns *out. Errors: TW_ERR_INVALID naming the
 * count out of range; TW_ERR_NOMEM. */
tw_status tw_evaluation_create(int classes, int outputs, tw_evaluation **out, tw_error *err);
void tw_evaluation_destroy(tw_evaluation *ev); /* NULL-safe */
void tw_evaluation_reset(tw_evaluation *ev);   /* back to an empty pass */

/* Adds rows examples: outputs [rows, outputs] fp32 (logits, or predictions); labels [rows] int32 in
 * [0, classes) for a classifier (input.h checks them; one outside is not counted in the matrix) or
 * [rows, outputs] fp32 for regression. Borrowed. */
void tw_evaluation_add(tw_evaluation *ev, int rows, const float *outputs, const void *labels);

/* The pass's headline numbers (the trainer's scalars and progress line). */
typedef struct {
    int64_t examples;
    int classify;         /* 1: accuracy (+ top5 with has_top5); 0: mse, mae, r2 */
    double loss;          /* mean cross-entropy per example, or the MSE per value */
    double accuracy;
    int has_top5;
    double top5;
    double mse, mae, r2;  /* r2: 0 when the labels have no variance */
} tw_evaluation_summary;

tw_evaluation_summary tw_evaluation_summarize(const tw_evaluation *ev);

/* The pass as JSON (new): {"examples", "loss", then "accuracy", ["top5",] "per_class": {"precision",
 * "recall", "f1", "support": [classes]}, ["confusion": [[classes] x classes], rows the true class,
 * columns the predicted one, up to TW_EVAL_CONFUSION_MAX classes] | "mse", "mae", "r2"}. A precision
 * with nothing predicted as the class, or a recall with no example of it, is null (so is its f1). NULL
 * when out of memory. */
json_t *tw_evaluation_metrics(const tw_evaluation *ev);

/* Names the classes for what follows (tags, the document): names is the dataset's class_names array
 * (copied; eventlog/convert.h tw_convert_class_names_of), or NULL for their indices. */
void tw_evaluation_name_classes(tw_evaluation *ev, const json_t *names);

/* The name class k is shown under, in the event file's tags, the document and the page: the dataset's
 * name for it, or its index ("3"). 0, or -1 when size is too small. */
int tw_evaluation_class_name(const tw_evaluation *ev, int k, char *buf, size_t size);

/* The event-file tag of class k's precision or recall: "eval_per_class/precision/<name>", a '/' in the
 * name made '-' (in the run's file for the raw weights, in its eval_ema sub-run for the EMA's: the same
 * tags). The caller writes them only for k < TW_EVAL_SCALAR_CLASSES. 0, or -1 when size is too small. */
int tw_evaluation_class_tag(const tw_evaluation *ev, int k, const char *metric, char *buf, size_t size);

/* The pass's confusion matrix, [k, k] counts row-major (rows the true class), borrowed from ev; NULL for
 * regression. */
const int64_t *tw_evaluation_confusion(const tw_evaluation *ev, int *k);

/* The evaluation.json document (new): {"format", "step", "kind": "classification"|"regression",
 * "classes" (0 for regression), "class_names": [classes] (up to TW_EVAL_CONFUSION_MAX), "raw": metrics,
 * "ema": metrics or null}. Either of raw and ema may be NULL (null), not both. NULL when out of memory. */
json_t *tw_evaluation_document(int64_t step, const tw_evaluation *raw, const tw_evaluation *ema);

/* Writes doc to path durably (atomic_file.h: temporary, fsync, rename). */
tw_status tw_evaluation_write(const char *path, const json_t *doc, tw_error *err);

/* Reads a document tw_evaluation_write wrote (through datafs.h): *doc new. TW_END when
 * there is no file; TW_ERR_CORRUPT when it is not a JSON object of this format; TW_ERR_IO. */
tw_status tw_evaluation_read(const char *path, json_t **doc, tw_error *err);

#endif
