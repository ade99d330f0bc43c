/* export_tf.c — a checkpoint as a TensorFlow checkpoint V2, and its one-file archive. See export.h. */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_contents.h"
#include "tar.h"

void tw_export_tf_name(int64_t step, char *buf, size_t size)
{
    snprintf(buf, size, "model.ckpt-%lld", (long long)step);
}

/* The variables of m that arena a holds (ckpt_contents.h: the raw ones, or their EMA shadows) from its
 * values, into t[*n...], their names into names[]. */
static void add_variables(const tw_model *m, const float *arena, tw_ckpt_arena a, tw_bundle_tensor *t,
                          char (*names)[TW_CKPT_TENSOR_NAME_BYTES], size_t *n)
{
    for (size_t i = 0; i < tw_model_n_params(m); i++) {
        const tw_param *p = tw_model_param(m, i);
        if (!tw_ckpt_holds(p, a))
            continue;
        tw_ckpt_name(p, TW_OPT_SGD, a, names[*n]);
        t[*n] = (tw_bundle_tensor){.name = names[*n], .dtype = TW_BUNDLE_FLOAT, .rank = p->rank,
                                   .data = arena + p->offset};
        memcpy(t[*n].shape, p->shape, sizeof p->shape);
        (*n)++;
    }
}

/* The EMA shadows of inf's model, read from the checkpoint at path into ema[P]. */
static tw_status load_ema(const char *path, const tw_inference *inf, float *ema, tw_error *err)
{
    tw_checkpoint *ck;
    TW_TRY(tw_checkpoint_read(path, &ck, err));
    tw_status s = tw_inference_load_params(ck, tw_inference_model(inf), TW_WEIGHTS_EMA, ema, err);
    tw_checkpoint_free(ck);
    return s;
}

static tw_status build(const char *path, const tw_inference *inf, tw_bundle_bytes *out, tw_error *err)
{
    const tw_model *m = tw_inference_model(inf);
    const int with_ema = tw_inference_config(inf)->ema_decay > 0;
    const size_t np = tw_model_n_params(m), P = tw_model_param_floats(m);
    tw_bundle_tensor *t = calloc(2 * np + 1, sizeof *t);
    char(*names)[TW_CKPT_TENSOR_NAME_BYTES] = calloc(2 * np + 1, sizeof *names);
    float *ema = with_ema ? malloc((P ? P : 1) * sizeof *ema) : NULL;
    tw_status s = t && names && (ema || !with_ema) ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    size_t n = 0;
    int64_t step = tw_inference_step(inf);
    if (s == TW_OK) {
        add_variables(m, tw_inference_params(inf), TW_CKPT_PARAMS, t, names, &n);
        if (with_ema && (s = load_ema(path, inf, ema, err)) == TW_OK)
            add_variables(m, ema, TW_CKPT_EMA, t, names, &n);
        t[n++] = (tw_bundle_tensor){.name = "global_step", .dtype = TW_BUNDLE_INT64, .rank = 0, .data = &step};
    }
    if (s == TW_OK)
        s = tw_bundle_build(t, n, out, err);
    free(ema);
    free(names);
    free(t);
    return s;
}

tw_status tw_export_tf(const char *path, tw_bundle_bytes *out, int64_t *step, tw_error *err)
{
    memset(out, 0, sizeof *out);
    tw_inference *inf;
    TW_TRY(tw_inference_open(path, TW_WEIGHTS_RAW, 1, &inf, err));
    if (step)
        *step = tw_inference_step(inf);
    tw_status s = build(path, inf, out, err);
    tw_inference_close(inf);
    return s;
}

tw_status tw_export_tf_archive(const char *path, uint64_t mtime, uint8_t **bytes, size_t *len, int64_t *step,
                               tw_error *err)
{
    *bytes = NULL;
    *len = 0;
    tw_bundle_bytes b;
    int64_t at;
    TW_TRY(tw_export_tf(path, &b, &at, err));
    char name[64], index[128], data[128];
    tw_export_tf_name(at, name, sizeof name);
    tw_bundle_file_names(name, index, data, sizeof index);
    char *state = tw_bundle_state_text(name);
    tw_tar tar = {0};
    tw_status s = state ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s == TW_OK)
        s = tw_tar_add(&tar, index, b.index, b.index_len, mtime, err);
    if (s == TW_OK)
        s = tw_tar_add(&tar, data, b.data, b.data_len, mtime, err);
    if (s == TW_OK)
        s = tw_tar_add(&tar, "checkpoint", state, strlen(state), mtime, err);
    if (s == TW_OK)
        s = tw_tar_finish(&tar, err);
    free(state);
    tw_bundle_bytes_free(&b);
    if (s != TW_OK) {
        tw_tar_free(&tar);
        return s;
    }
    *bytes = tar.bytes;
    *len = tar.len;
    if (step)
        *step = at;
    return TW_OK;
}
