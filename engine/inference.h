/* inference.h — a trained model read back from a checkpoint, for forward passes outside training:
 * prediction, evaluating a checkpoint on a dataset, export to other formats.
 *
 * Owns: the config a checkpoint carries (its "config" metadata, decoded as a run config), the model built
 * from it, the chosen weights (the raw parameters or their EMA shadows) on the host, a CPU replica of a
 * fixed batch that runs forward passes over any number of rows in chunks, and the one rule that loads a
 * model's variables from a checkpoint by name and shape (a run's init_from uses it too). Does not own the
 * checkpoint file (checkpoint.h), the layer math (model.h) or what the outputs mean (the callers: they
 * are logits for classification, predictions for regression). A tw_inference is used by one thread at a
 * time. */
#ifndef TW_INFERENCE_H
#define TW_INFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "config.h"
#include "model.h"
#include "status.h"

/* TW_WEIGHTS_DEFAULT: the EMA weights when the run kept them (its ema_decay > 0), else the raw ones, the
 * rule every command and route follows when the weights are not named (README, "Raw and EMA"). */
typedef enum { TW_WEIGHTS_DEFAULT = -1, TW_WEIGHTS_RAW = 0, TW_WEIGHTS_EMA = 1 } tw_weights;

/* The weights' names by value, as commands and routes spell the choice, NULL-terminated: "raw", "ema". */
extern const char *const tw_weights_names[];

/* "raw" or "ema" into *w: 0, or -1 for anything else. */
int tw_weights_parse(const char *s, tw_weights *w);


/* Copies every variable of m from ck into dst ([tw_model_param_floats(m)] fp32, caller-owned) at the
 * variable's offset: the raw value, or its EMA shadow. Errors: TW_ERR_CORRUPT naming the tensor that is
 * absent or stored with another shape (tw_checkpoint_fetch). */
tw_status tw_inference_load_params(const tw_checkpoint *ck, const tw_model *m, tw_weights w, float *dst,
                                   tw_error *err);

typedef struct tw_inference tw_inference;

/* Reads the checkpoint at path, decodes its config, builds the model and a CPU replica for up to
 * `batch` rows (1 to 65536) holding the chosen weights. Caller owns *out. Errors: those of
 * tw_checkpoint_read; TW_ERR_CORRUPT when the metadata holds no config or one that does not decode, or a
 * variable is missing; TW_ERR_NOMEM. */
tw_status tw_inference_open(const char *path, tw_weights w, int batch, tw_inference **out,
                            tw_error *err);
void tw_inference_close(tw_inference *inf); /* NULL-safe */

const tw_config *tw_inference_config(const tw_inference *inf); /* borrowed, as the run trained it */
const tw_model *tw_inference_model(const tw_inference *inf);   /* borrowed */
const float *tw_inference_params(const tw_inference *inf);     /* [tw_model_param_floats] chosen weights */
int64_t tw_inference_step(const tw_inference *inf);            /* the checkpoint's step */
tw_weights tw_inference_weights(const tw_inference *inf);

/* The forward pass in inference mode (no dropout): x [rows, tw_model_input_size] fp32, already scaled as
 * the trainer feeds it (uint8 pixels times config.scale); out [rows, tw_model_output_size] fp32
 * (logits, or regression outputs). rows >= 0, any number: run in chunks of the batch. */
tw_status tw_inference_forward(tw_inference *inf, size_t rows, const float *x, float *out,
                               tw_error *err);

#endif
