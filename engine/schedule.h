/* schedule.h — what changes with the step number alone: the learning rate and the EMA's decay, with
 * TensorFlow 1's formulas (docs/formats.md, "Training semantics"). Pure functions of the config and the
 * step, so a resumed run continues the same schedule. */
#ifndef TW_SCHEDULE_H
#define TW_SCHEDULE_H

#include <stdint.h>

#include "config.h"

/* tf.train.exponential_decay(lr, global_step, decay_steps, decay_rate, staircase), in float32. */
float tw_learning_rate(const tw_config *c, int64_t global_step);

/* tf.train.ExponentialMovingAverage's decay at num_updates: min(decay, (1 + n) / (10 + n)). */
float tw_ema_decay(float decay, int64_t num_updates);

#endif
