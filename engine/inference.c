/* inference.c — a trained model read back from a checkpoint. See inference.h. */
#include "inference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ckpt_contents.h"

struct tw_inference {
    tw_config c;
    tw_model *m;
    tw_backend *b;
    tw_replica *r;
    float *params; /* [P] the chosen weights */
    int batch;
    int64_t step;
    tw_weights w;
};

const char *const tw_weights_names[] = {[TW_WEIGHTS_RAW] = "raw", [TW_WEIGHTS_EMA] = "ema", NULL};

int tw_weights_parse(const char *s, tw_weights *w)
{
    for (int i = 0; s && tw_weights_names[i]; i++)
        if (!strcmp(s, tw_weights_names[i])) {
            *w = (tw_weights)i;
            return 0;
        }
    return -1;
}

tw_status tw_inference_load_params(const tw_checkpoint *ck, const tw_model *m, tw_weights w, float *dst,
                                   tw_error *err)
{
    for (size_t i = 0; i < tw_model_n_params(m); i++) {
        const tw_param *p = tw_model_param(m, i);
        char name[TW_CKPT_TENSOR_NAME_BYTES];
        tw_ckpt_weights_name(p, w == TW_WEIGHTS_EMA, name);
        TW_TRY(tw_checkpoint_fetch(ck, name, p->rank, p->shape, dst + p->offset, err));
    }
    return TW_OK;
}

/* The config and step the trainer stored in the checkpoint's metadata. */
static tw_status read_meta(tw_inference *inf, const tw_checkpoint *ck, tw_error *err)
{
    tw_ckpt_state state;
    tw_error e;
    TW_TRY(tw_ckpt_state_read(ck, &state, err));
    if (tw_config_parse(state.config, strlen(state.config), NULL, &inf->c, &e) != TW_OK)
        return tw_error_set(err, TW_ERR_CORRUPT, tw_checkpoint_path(ck), -1, "checkpoint's run config: %s",
                            e.message);
    inf->step = state.step;
    return TW_OK;
}

/* The model, the chosen weights on the host and a CPU replica holding them. */
static tw_status build(tw_inference *inf, const tw_checkpoint *ck, tw_error *err)
{
    TW_TRY(read_meta(inf, ck, err));
    if (inf->w == TW_WEIGHTS_DEFAULT)
        inf->w = inf->c.ema_decay > 0 ? TW_WEIGHTS_EMA : TW_WEIGHTS_RAW;
    TW_TRY(tw_model_create(&inf->c, &inf->m, err));
    size_t P = tw_model_param_floats(inf->m);
    if (!(inf->params = malloc((P ? P : 1) * sizeof(float))))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    TW_TRY(tw_inference_load_params(ck, inf->m, inf->w, inf->params, err));
    TW_TRY(tw_backend_create("cpu", 0, &inf->b, err));
    TW_TRY(tw_replica_create(inf->m, inf->b, inf->batch, &inf->r, err));
    return tw_backend_upload(inf->b, tw_replica_params(inf->r), inf->params, P * sizeof(float), err);
}

tw_status tw_inference_open(const char *path, tw_weights w, int batch, tw_inference **out,
                            tw_error *err)
{
    *out = NULL;
    if (batch < 1 || batch > 65536)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "inference batch %d is outside [1, 65536]", batch);
    tw_inference *inf = calloc(1, sizeof *inf);
    if (!inf)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    inf->batch = batch;
    inf->w = w;
    tw_checkpoint *ck;
    tw_status s = tw_checkpoint_read(path, &ck, err);
    if (s == TW_OK) {
        s = build(inf, ck, err);
        tw_checkpoint_free(ck);
    }
    if (s != TW_OK) {
        tw_inference_close(inf);
        return s;
    }
    *out = inf;
    return TW_OK;
}

void tw_inference_close(tw_inference *inf)
{
    if (!inf)
        return;
    tw_replica_destroy(inf->r);
    tw_backend_destroy(inf->b);
    tw_model_destroy(inf->m);
    free(inf->params);
    free(inf);
}

const tw_config *tw_inference_config(const tw_inference *inf) { return &inf->c; }
const tw_model *tw_inference_model(const tw_inference *inf) { return inf->m; }
const float *tw_inference_params(const tw_inference *inf) { return inf->params; }
int64_t tw_inference_step(const tw_inference *inf) { return inf->step; }
tw_weights tw_inference_weights(const tw_inference *inf) { return inf->w; }

tw_status tw_inference_forward(tw_inference *inf, size_t rows, const float *x, float *out,
                               tw_error *err)
{
    const size_t in = tw_model_input_size(inf->m), outs = (size_t)tw_model_output_size(inf->m);
    for (size_t done = 0; done < rows;) {
        int n = rows - done < (size_t)inf->batch ? (int)(rows - done) : inf->batch;
        TW_TRY(tw_replica_upload_batch(inf->r, n, x + done * in, NULL, err));
        TW_TRY(tw_replica_forward(inf->r, n, 0, 0, 0, err));
        TW_TRY(tw_replica_outputs(inf->r, n, out + done * outs, err));
        done += (size_t)n;
    }
    return TW_OK;
}
