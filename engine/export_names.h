/* export_names.h — the names a TensorFlow export gives Tower's variables: a name map (docs/formats.md §7.3).
 *
 * A TF1 Saver restores a checkpoint by the names of its own graph's variables, so a graph written with other
 * names than Tower's ("layer1/w" for "layer1/weights", the step as "Variable") needs the export to use its
 * names. A map has three parts, each optional:
 *   - "leaves": {"weights": "w", ...} renames the last path component of every variable;
 *   - "variables": {"layer1/weights": "dense/kernel", ...} maps one variable's full Tower name to its full TF
 *     name, over the leaves;
 *   - "global_step": {"name": "Variable", "dtype": "int32"} names the step and chooses its dtype (default
 *     "global_step", int64).
 * An EMA shadow follows its variable's TF name: "<name>/ExponentialMovingAverage".
 *
 * Owns: the map, its strict decoding (unknown keys, a name that is not a string, empty or TF would refuse,
 * two variables mapped to one name, an unknown dtype: each TW_ERR_INVALID naming the key), the built-in maps
 * ("tower": Tower's own names, the default; "seed": the names the seed program's graph declares, w and bias
 * under tf.variable_scope and the step as tf.Variable(0, trainable=False), which TF calls "Variable" and
 * makes int32) and the mapping of a model's names. Does not own the export (export_tf.c) or the bundle
 * (eventlog/tf_bundle.h). A map is immutable once made: thread-safe to share. */
#ifndef TW_EXPORT_NAMES_H
#define TW_EXPORT_NAMES_H

#include <stddef.h>

#include "model.h"
#include "status.h"
#include "tf_bundle.h"

/* A TF name holds at most TW_EXPORT_NAME_BYTES - 1 characters (a Tower variable's limit). */
enum { TW_EXPORT_NAME_BYTES = TW_PARAM_NAME_BYTES };

typedef struct tw_export_names tw_export_names;

/* The built-in maps' names, NULL-terminated: "tower" (the default), "seed". */
extern const char *const tw_export_names_builtin[];

/* The built-in map called name into *out (caller destroys). Errors: TW_ERR_INVALID naming the built-in
 * ones (and the closest, when one is), TW_ERR_NOMEM. */
tw_status tw_export_names_of_builtin(const char *name, tw_export_names **out, tw_error *err);

/* The map doc (borrowed; a JSON object) describes, into *out (caller destroys). Errors: TW_ERR_INVALID with
 * a message that starts with the key path ("global_step.dtype: ..."), TW_ERR_NOMEM. */
struct json_t;
tw_status tw_export_names_decode(const struct json_t *doc, tw_export_names **out, tw_error *err);

/* The map arg names: a built-in map's name, else the path of a JSON map file (read and decoded; its errors
 * carry the file). Caller destroys *out. Errors: TW_ERR_INVALID (neither a built-in name nor a file that
 * opens, a syntax error, a decoding error), TW_ERR_IO, TW_ERR_NOMEM. */
tw_status tw_export_names_open(const char *arg, tw_export_names **out, tw_error *err);

void tw_export_names_destroy(tw_export_names *m); /* NULL-safe */

/* The step's TF name (borrowed from m) and dtype (TW_BUNDLE_INT32 or TW_BUNDLE_INT64). */
const char *tw_export_names_step(const tw_export_names *m);
tw_bundle_dtype tw_export_names_step_dtype(const tw_export_names *m);

/* The TF names of the n variables names[] (a model's, in any order) into out[n]: each one's "variables"
 * entry, else its leaf renamed. Errors (TW_ERR_INVALID): a "variables" key that is none of names[], a TF
 * name longer than TW_EXPORT_NAME_BYTES - 1, two variables (or a variable and the step, or an EMA shadow)
 * given one name; each names the variables. */
tw_status tw_export_names_map(const tw_export_names *m, const char *const *names, size_t n,
                              char (*out)[TW_EXPORT_NAME_BYTES], tw_error *err);

#endif
