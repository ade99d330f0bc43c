/* schedule.h — what changes with the step number alone: the learning rate and the EMA's decay, with
 * TensorFlow's formulas (docs/formats.md, "Training semantics"). Pure functions of the config and the
 * step, so a resumed run continues the same schedule. */
#ifndef TW_SCHEDULE_H
#define TW_SCHEDULE_H

#include <stdint.h>

#include "config.h"

/* The learning rate before update global_step + 1 (float32 throughout):
 *   warm-up     step < warmup_steps: learning_rate × step / warmup_steps (Keras' CosineDecay warm-up from 0);
 *               afterwards the schedule below sees s = step − warmup_steps
 *   none        learning_rate
 *   exponential tf.compat.v1.train.exponential_decay(learning_rate, s, decay_steps, decay_rate, staircase)
 *   cosine      tf.compat.v1.train.cosine_decay(learning_rate, s, decay_steps, alpha)
 *   piecewise   learning_rate × factors[i], i the number of boundaries below s (tf.compat.v1.train.
 *               piecewise_constant: a step equal to a boundary is still in the piece before it) */
float tw_learning_rate(const tw_config *c, int64_t global_step);

/* tf.train.ExponentialMovingAverage's decay at num_updates: min(decay, (1 + n) / (10 + n)). */
float tw_ema_decay(float decay, int64_t num_updates);

#endif
