/* export_tf.c — a checkpoint as a TensorFlow checkpoint V2, and its one-file archive. See export.h. */
#include "export.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_contents.h"
#include "tar.h"

void tw_export_tf_name(int64_t step, char *buf, size_t size)
{
    snprintf(buf, size, "model.ckpt-%lld", (long long)step);
}

/* A model's variables under their TF names: tf[i] is the name of the model's variable i. */
typedef struct {
    const tw_model *m;
    char (*tf)[TW_EXPORT_NAME_BYTES];
} tf_names;

/* The TF names names gives m's variables (caller frees ->tf). */
static tw_status map_names(const tw_model *m, const tw_export_names *names, tf_names *out, tw_error *err)
{
    const size_t np = tw_model_n_params(m);
    const char **tower = calloc(np + 1, sizeof *tower);
    *out = (tf_names){.m = m, .tf = calloc(np + 1, sizeof *out->tf)};
    tw_status s = tower && out->tf ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    for (size_t i = 0; s == TW_OK && i < np; i++)
        tower[i] = tw_model_param(m, i)->name;
    if (s == TW_OK)
        s = tw_export_names_map(names, tower, np, out->tf, err);
    free(tower);
    return s;
}

/* The variables arena a holds (ckpt_contents.h: the raw ones, or their EMA shadows) from its values, into
 * t[*n...], their TF names into names[]. */
static void add_variables(const tf_names *v, const float *arena, tw_ckpt_arena a, tw_bundle_tensor *t,
                          char (*names)[TW_CKPT_TENSOR_NAME_BYTES], size_t *n)
{
    for (size_t i = 0; i < tw_model_n_params(v->m); i++) {
        const tw_param *p = tw_model_param(v->m, i);
        if (!tw_ckpt_holds(p, a))
            continue;
        tw_ckpt_name_as(v->tf[i], TW_OPT_SGD, a, names[*n]);
        t[*n] = (tw_bundle_tensor){.name = names[*n], .dtype = TW_BUNDLE_FLOAT, .rank = p->rank,
                                   .data = arena + p->offset};
        memcpy(t[*n].shape, p->shape, sizeof p->shape);
        (*n)++;
    }
}

/* The step, in the dtype the map gives it, as *t (its value in *s32 or *s64). An int32 step holds at most
 * INT32_MAX. */
static tw_status add_step(const tw_export_names *names, int64_t step, int32_t *s32, int64_t *s64,
                          tw_bundle_tensor *t, tw_error *err)
{
    tw_bundle_dtype d = tw_export_names_step_dtype(names);
    if (d == TW_BUNDLE_INT32 && step > INT32_MAX)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "step %lld is past int32's %d: the name map's step "
                            "'%s' is int32 (global_step.dtype), which cannot hold it", (long long)step, INT32_MAX,
                            tw_export_names_step(names));
    *s32 = (int32_t)step;
    *s64 = step;
    *t = (tw_bundle_tensor){.name = tw_export_names_step(names), .dtype = d, .rank = 0,
                            .data = d == TW_BUNDLE_INT32 ? (const void *)s32 : (const void *)s64};
    return TW_OK;
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

/* The bundle's tensors: the variables (and their EMA shadows) under v's names, then the step. */
static tw_status build(const char *path, const tw_inference *inf, const tw_export_names *names,
                       const tf_names *v, tw_bundle_bytes *out, tw_error *err)
{
    const int with_ema = tw_inference_config(inf)->ema_decay > 0;
    const size_t np = tw_model_n_params(v->m), P = tw_model_param_floats(v->m);
    tw_bundle_tensor *t = calloc(2 * np + 1, sizeof *t);
    char(*tensor_names)[TW_CKPT_TENSOR_NAME_BYTES] = calloc(2 * np + 1, sizeof *tensor_names);
    float *ema = with_ema ? malloc((P ? P : 1) * sizeof *ema) : NULL;
    tw_status s = t && tensor_names && (ema || !with_ema) ? TW_OK
                                                          : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    size_t n = 0;
    int32_t s32;
    int64_t s64;
    if (s == TW_OK) {
        add_variables(v, tw_inference_params(inf), TW_CKPT_PARAMS, t, tensor_names, &n);
        if (with_ema && (s = load_ema(path, inf, ema, err)) == TW_OK)
            add_variables(v, ema, TW_CKPT_EMA, t, tensor_names, &n);
    }
    if (s == TW_OK && (s = add_step(names, tw_inference_step(inf), &s32, &s64, &t[n], err)) == TW_OK)
        s = tw_bundle_build(t, n + 1, out, err);
    free(ema);
    free(tensor_names);
    free(t);
    return s;
}

/* The bundle of the checkpoint inf holds (read from path) under the names of names. */
static tw_status export_named(const char *path, const tw_inference *inf, const tw_export_names *names,
                              tw_bundle_bytes *out, tw_error *err)
{
    tf_names v;
    tw_status s = map_names(tw_inference_model(inf), names, &v, err);
    if (s == TW_OK)
        s = build(path, inf, names, &v, out, err);
    free(v.tf);
    return s;
}

tw_status tw_export_tf(const char *path, const tw_export_names *names, tw_bundle_bytes *out, int64_t *step,
                       tw_error *err)
{
    memset(out, 0, sizeof *out);
    tw_export_names *tower = NULL;
    if (!names)
        TW_TRY(tw_export_names_of_builtin("tower", &tower, err));
    tw_inference *inf;
    tw_status s = tw_inference_open(path, TW_WEIGHTS_RAW, 1, &inf, err);
    if (s == TW_OK) {
        if (step)
            *step = tw_inference_step(inf);
        s = export_named(path, inf, names ? names : tower, out, err);
        tw_inference_close(inf);
    }
    tw_export_names_destroy(tower);
    return s;
}

tw_status tw_export_tf_archive(const char *path, const tw_export_names *names, uint64_t mtime, uint8_t **bytes,
                               size_t *len, int64_t *step, tw_error *err)
{
    *bytes = NULL;
    *len = 0;
    tw_bundle_bytes b;
    int64_t at;
    TW_TRY(tw_export_tf(path, names, &b, &at, err));
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
