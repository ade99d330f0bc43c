/* schedule.c — the learning-rate and EMA-decay schedules. See schedule.h. */
#include "schedule.h"

#include <math.h>

static float exponential(const tw_config *c, int64_t s)
{
    float p = (float)s / (float)c->decay_steps;
    if (c->staircase)
        p = floorf(p);
    return c->learning_rate * powf(c->decay_rate, p);
}

/* TF's cosine_decay computes in float32, pi rounded to float32. */
static const float PI = 3.14159265358979323846f;

static float cosine(const tw_config *c, int64_t s)
{
    float done = (float)(s < c->decay_steps ? s : c->decay_steps) / (float)c->decay_steps;
    float cosine_decayed = 0.5f * (1.0f + cosf(PI * done));
    return c->learning_rate * ((1.0f - c->alpha) * cosine_decayed + c->alpha);
}

static float piecewise(const tw_config *c, int64_t s)
{
    int i = 0;
    while (i < c->n_boundaries && s > c->boundaries[i])
        i++;
    return c->learning_rate * c->factors[i];
}

float tw_learning_rate(const tw_config *c, int64_t global_step)
{
    if (global_step < c->warmup_steps)
        return (float)global_step / (float)c->warmup_steps * c->learning_rate;
    int64_t s = global_step - c->warmup_steps;
    switch (c->lr_decay) {
    case TW_DECAY_EXPONENTIAL: return exponential(c, s);
    case TW_DECAY_COSINE: return cosine(c, s);
    case TW_DECAY_PIECEWISE: return piecewise(c, s);
    default: return c->learning_rate;
    }
}

float tw_ema_decay(float decay, int64_t num_updates)
{
    float n = (float)num_updates;
    float warm = (1.0f + n) / (10.0f + n);
    return warm < decay ? warm : decay;
}
