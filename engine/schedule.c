/* schedule.c — the learning-rate and EMA-decay schedules. See schedule.h. */
#include "schedule.h"

#include <math.h>

float tw_learning_rate(const tw_config *c, int64_t global_step)
{
    if (!c->lr_decay)
        return c->learning_rate;
    float p = (float)global_step / (float)c->decay_steps;
    if (c->staircase)
        p = floorf(p);
    return c->learning_rate * powf(c->decay_rate, p);
}

float tw_ema_decay(float decay, int64_t num_updates)
{
    float n = (float)num_updates;
    float warm = (1.0f + n) / (10.0f + n);
    return warm < decay ? warm : decay;
}
