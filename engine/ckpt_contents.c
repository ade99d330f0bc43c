/* ckpt_contents.c — what a checkpoint holds. See ckpt_contents.h. */
#include "ckpt_contents.h"

#include <stdio.h>
#include <stdlib.h>

/* TensorFlow's suffix of arena a for optimizer o. */
static const char *suffix(tw_optimizer_kind o, tw_ckpt_arena a)
{
    switch (a) {
    case TW_CKPT_EMA: return "/ExponentialMovingAverage";
    case TW_CKPT_SLOT1: return o == TW_OPT_ADAM ? "/Adam" : "/Momentum";
    case TW_CKPT_SLOT2: return "/Adam_1";
    default: return "";
    }
}

int tw_ckpt_arena_count(tw_optimizer_kind o)
{
    return 2 + (o == TW_OPT_MOMENTUM) + 2 * (o == TW_OPT_ADAM);
}

int tw_ckpt_holds(const tw_param *p, tw_ckpt_arena a) { return a == TW_CKPT_PARAMS || !p->is_state; }

void tw_ckpt_name_as(const char *var, tw_optimizer_kind o, tw_ckpt_arena a, char *out)
{
    snprintf(out, TW_CKPT_TENSOR_NAME_BYTES, "%s%s", var, suffix(o, a));
}

void tw_ckpt_name(const tw_param *p, tw_optimizer_kind o, tw_ckpt_arena a, char *out)
{
    tw_ckpt_name_as(p->name, o, a, out);
}

void tw_ckpt_weights_name(const tw_param *p, int ema, char *out)
{
    tw_ckpt_name(p, TW_OPT_SGD, ema && tw_ckpt_holds(p, TW_CKPT_EMA) ? TW_CKPT_EMA : TW_CKPT_PARAMS, out);
}

uint64_t tw_ckpt_values(const tw_model *m, tw_optimizer_kind o)
{
    uint64_t sum = 0;
    for (int a = 0; a < tw_ckpt_arena_count(o); a++)
        for (size_t i = 0; i < tw_model_n_params(m); i++)
            if (tw_ckpt_holds(tw_model_param(m, i), (tw_ckpt_arena)a))
                sum += tw_model_param(m, i)->count;
    return sum;
}

void tw_ckpt_state_meta(const tw_ckpt_state *s, tw_ckpt_meta meta[TW_CKPT_META], tw_ckpt_state_text *buf)
{
    snprintf(buf->step, sizeof buf->step, "%lld", (long long)s->step);
    snprintf(buf->epoch, sizeof buf->epoch, "%llu", (unsigned long long)s->data_epoch);
    snprintf(buf->consumed, sizeof buf->consumed, "%llu", (unsigned long long)s->data_consumed);
    snprintf(buf->seed, sizeof buf->seed, "%llu", (unsigned long long)s->seed);
    const tw_ckpt_meta all[TW_CKPT_META] = {{"format", TW_CHECKPOINT_FORMAT}, {"step", buf->step},
                                            {"data_epoch", buf->epoch},     {"data_consumed", buf->consumed},
                                            {"seed", buf->seed},            {"config", s->config ? s->config : ""}};
    for (int i = 0; i < TW_CKPT_META; i++)
        meta[i] = all[i];
}

/* The metadata value of key as an unsigned decimal number at most max. */
static tw_status meta_u64(const tw_checkpoint *ck, const char *key, uint64_t max, uint64_t *v, tw_error *err)
{
    const char *path = tw_checkpoint_path(ck);
    const char *s = tw_checkpoint_meta(ck, key);
    char *end;
    if (!s || !*s)
        return tw_error_set(err, TW_ERR_CORRUPT, path, -1, "checkpoint metadata lacks '%s'", key);
    *v = strtoull(s, &end, 10);
    if (*end || *s < '0' || *s > '9' || *v > max)
        return tw_error_set(err, TW_ERR_CORRUPT, path, -1, "checkpoint metadata '%s' is '%s', not a number", key, s);
    return TW_OK;
}

tw_status tw_ckpt_state_read(const tw_checkpoint *ck, tw_ckpt_state *s, tw_error *err)
{
    uint64_t step = 0;
    s->config = tw_checkpoint_meta(ck, "config"); /* first: a file of another tool's has none */
    if (!s->config || !*s->config)
        return tw_error_set(err, TW_ERR_CORRUPT, tw_checkpoint_path(ck), -1, "checkpoint metadata holds no run config");
    TW_TRY(meta_u64(ck, "step", INT64_MAX, &step, err));
    TW_TRY(meta_u64(ck, "data_epoch", UINT64_MAX, &s->data_epoch, err));
    TW_TRY(meta_u64(ck, "data_consumed", UINT64_MAX, &s->data_consumed, err));
    TW_TRY(meta_u64(ck, "seed", UINT64_MAX, &s->seed, err));
    s->step = (int64_t)step;
    return TW_OK;
}
