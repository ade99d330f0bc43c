/* ckpt_contents.h — what a Tower checkpoint holds, in one place: the arenas it saves, the name of every
 * variable in each (TensorFlow 1's: "<var>", "<var>/ExponentialMovingAverage", "<var>/Momentum",
 * "<var>/Adam", "<var>/Adam_1"), and the typed state its metadata carries (step, data position, seed,
 * config). The trainer, the memory estimate, inference, init_from and the exports all ask here; the file
 * folder and its reading are checkpoint.h's. docs/formats.md §7.2 describes the file. */
#ifndef TW_CKPT_CONTENTS_H
#define TW_CKPT_CONTENTS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "model.h"

/* The arenas a checkpoint may hold, in the order they are saved. */
typedef enum { TW_CKPT_PARAMS = 0, TW_CKPT_EMA, TW_CKPT_SLOT1, TW_CKPT_SLOT2, TW_CKPT_ARENAS } tw_ckpt_arena;

/* The arenas a checkpoint of optimizer o holds: params and EMA, then the optimizer's slots (none for SGD,
 * the accumulator for momentum, m and v for Adam): the first tw_ckpt_arena_count(o) of tw_ckpt_arena. */
int tw_ckpt_arena_count(tw_optimizer_kind o);

/* 1 when arena a saves variable p: batch norm's moving statistics (p->is_state) are saved raw only, as
 * TensorFlow keeps no EMA shadow or slot for them. */
int tw_ckpt_holds(const tw_param *p, tw_ckpt_arena a);

enum { TW_CKPT_TENSOR_NAME_BYTES = TW_PARAM_NAME_BYTES + 32 };

/* The name of p's values in arena a of a checkpoint of optimizer o, into out[TW_CKPT_TENSOR_NAME_BYTES]. */
void tw_ckpt_name(const tw_param *p, tw_optimizer_kind o, tw_ckpt_arena a, char *out);

/* The same for a variable named var (at most TW_PARAM_NAME_BYTES - 1 characters; another name than Tower's,
 * as a TF export's name map gives it). */
void tw_ckpt_name_as(const char *var, tw_optimizer_kind o, tw_ckpt_arena a, char *out);

/* The name to read a model's weights from: raw, or the EMA shadow where the checkpoint keeps one (state:
 * raw either way, as TensorFlow's variables_to_restore maps it). */
void tw_ckpt_weights_name(const tw_param *p, int ema, char *out);

/* The values a checkpoint of model m with optimizer o holds, every arena together (the memory estimate). */
uint64_t tw_ckpt_values(const tw_model *m, tw_optimizer_kind o);

/* The run's state at a checkpoint, as its metadata carries it. */
typedef struct {
    int64_t step;            /* completed updates */
    uint64_t data_epoch;     /* the training input's position after the step (input.h) */
    uint64_t data_consumed;
    uint64_t seed;           /* the config's */
    const char *config;      /* the canonical config JSON; borrowed (on read: from the checkpoint) */
} tw_ckpt_state;

enum { TW_CKPT_META = 6 };

/* The metadata entries of s, "format" first, into meta[TW_CKPT_META]; their text in buf (which must outlive
 * meta). */
typedef struct {
    char step[24], epoch[24], consumed[24], seed[24];
} tw_ckpt_state_text;
void tw_ckpt_state_meta(const tw_ckpt_state *s, tw_ckpt_meta meta[TW_CKPT_META], tw_ckpt_state_text *buf);

/* The state ck carries. Errors: TW_ERR_CORRUPT naming the key that is missing or is not a number. The
 * format itself was checked when ck was read (tw_checkpoint_read refuses an unknown one by name). */
tw_status tw_ckpt_state_read(const tw_checkpoint *ck, tw_ckpt_state *s, tw_error *err);

#endif
