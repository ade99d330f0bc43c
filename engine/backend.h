/* backend.h — the engine <-> backend interface: one table of operations, one instance per tower.
 *
 * Owns: the operation table a backend implements (CPU here, CUDA in kernels/), the checked wrappers the
 * engine calls (backend.c), and the registry that finds a backend by name (backend_reg.c). Tensors cross the
 * interface as tw_tensor views (a buffer handle plus a byte offset), never as raw device pointers: only
 * the backend dereferences tw_buffer.data. Every operation returns a tw_status; asynchronous failures of
 * a device surface at the latest from tw_backend_sync.
 *
 * Layouts: row-major; images and volumes channels-last (NHWC / NDHWC, as TensorFlow); fp32 unless an
 * argument says int32. Shapes are in each wrapper's comment.
 *
 * Thread-safety: one backend instance is used by one thread at a time (its tower's); different
 * instances may run concurrently. tw_backend_allreduce_avg is called by one thread for the whole group;
 * where the table sets allreduce_split (the CPU), calls over disjoint ranges of the buffers may also run
 * from several threads at once (each tower's thread averaging its share). */
#ifndef TW_BACKEND_H
#define TW_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "elementwise.h"
#include "status.h"

/* A block of backend memory. bytes is the size; data is the backend's own address (host or device). */
typedef struct tw_buffer {
    size_t bytes;
    void *data;
} tw_buffer;

/* A view into a buffer at a byte offset. */
typedef struct {
    tw_buffer *buf;
    size_t offset;
} tw_tensor;

static inline tw_tensor tw_tensor_of(tw_buffer *b) { return (tw_tensor){b, 0}; }

/* The view `floats` fp32 values further on. */
static inline tw_tensor tw_tensor_at(tw_tensor t, size_t floats)
{
    t.offset += floats * sizeof(float);
    return t;
}

/* The window of a convolution or pooling over 2-D images or 3-D volumes (2-D: every *_d field 1, pads 0).
 * Input [batch, in_d, in_h, in_w, in_c], output [batch, out_d, out_h, out_w, ...]. pad_* is the padding
 * before the first element of each spatial dimension (TensorFlow's SAME puts the odd one after). */
typedef struct {
    int batch;
    int in_d, in_h, in_w, in_c;
    int k_d, k_h, k_w;
    int s_d, s_h, s_w;
    int pad_d, pad_h, pad_w;
    int out_d, out_h, out_w;
} tw_window;

/* Fills out_* and pad_* of w from the input, kernel and strides: SAME (same != 0) or VALID, as
 * TensorFlow computes them. Returns TW_ERR_INVALID when a VALID window does not fit. */
tw_status tw_window_resolve(tw_window *w, int same, tw_error *err);

typedef enum { TW_OPT_SGD = 0, TW_OPT_MOMENTUM = 1, TW_OPT_ADAM = 2 } tw_optimizer_kind;

/* One fused update over the flat parameter arena (n values), for this step. */
typedef struct {
    tw_optimizer_kind kind;
    float lr;                   /* learning rate of this step (after decay) */
    float momentum;             /* MOMENTUM */
    int nesterov;               /* MOMENTUM: 1 steps by g + momentum * accum (use_nesterov) */
    float adam_alpha;           /* ADAM: lr * sqrt(1 - beta2^t) / (1 - beta1^t) for this step t */
    float beta1, beta2, epsilon;
    float grad_scale;           /* g *= grad_scale first (global-norm clipping's factor); 0 stands for 1, so a
                                   zeroed tw_update scales nothing (clipping never gives 0: TF's factor for
                                   a non-finite norm is NaN) */
    float l2;                   /* g += l2 * w on the first l2_count values (the weights), before the step */
    float weight_decay;         /* w -= w * weight_decay * lr on the same values, before the step (Keras'
                                   decoupled decay, AdamW); 0: none */
    size_t l2_count;
    float ema_decay;            /* effective decay of this step; the shadows follow the new weights */
    int ema;                    /* 1: update the EMA shadows */
    int keep_mean;              /* tw_update_mean: 1 leaves the mean in grads[0] (a histogram reads it) */
} tw_update;

/* Batch normalisation over x[rows, channels] (every position of every example; channels last). */
typedef enum {
    TW_BN_INFER = 0,        /* normalise by the moving statistics */
    TW_BN_TRAIN = 1,        /* by the batch's: stats = its mean and 1 / sqrt(variance + epsilon) */
    TW_BN_TRAIN_UPDATE = 2, /* TRAIN, and moving = moving * momentum + batch * (1 - momentum) */
} tw_bn_mode;

typedef struct {
    int rows, channels;
    float momentum, epsilon;
    tw_bn_mode mode;
    tw_activation activation; /* the forward applies it to y as it writes it (the layer's own: one pass over
                                 memory fewer than tw_act_fwd after it); the backward ignores it */
} tw_bn;

/* Faster arithmetic that rounds differently, each off (0) by default (tw_backend_set_math). */
typedef struct {
    int tf32;     /* CUDA: TF32 tensor-core GEMMs */
    int winograd; /* CPU: Winograd 3x3 convolutions */
} tw_math;

typedef struct tw_backend_ops tw_backend_ops;
typedef struct tw_backend tw_backend;

/* The table a backend fills in. ctx is the backend's own state. Argument checks are done by the
 * wrappers below before an op is called, so ops may assume valid views and sizes. */
struct tw_backend_ops {
    const char *kind; /* "cpu", "cuda" */
    /* How many instances will compute at once; returns the threads each may use (may be NULL: 1). */
    int (*plan)(int concurrent);
    tw_status (*create)(int device, void **ctx, char *name, size_t name_size, tw_error *err);
    void (*destroy)(void *ctx);
    tw_status (*alloc)(void *ctx, size_t bytes, tw_buffer **out, tw_error *err);
    void (*free)(void *ctx, tw_buffer *b);
    tw_status (*upload)(void *ctx, tw_tensor dst, const void *src, size_t bytes, tw_error *err);
    tw_status (*download)(void *ctx, void *dst, tw_tensor src, size_t bytes, tw_error *err);
    tw_status (*zero)(void *ctx, tw_tensor t, size_t bytes, tw_error *err);
    tw_status (*gemm)(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                      tw_tensor a, tw_tensor b, float beta, tw_tensor c, tw_error *err);
    tw_status (*bias_add)(void *ctx, tw_tensor y, tw_tensor bias, int rows, int cols, tw_error *err);
    tw_status (*bias_grad)(void *ctx, tw_tensor dbias, tw_tensor dy, int rows, int cols,
                           tw_error *err);
    tw_status (*act_fwd)(void *ctx, tw_activation a, tw_tensor y, tw_tensor x, size_t n,
                         tw_error *err);
    tw_status (*act_bwd)(void *ctx, tw_activation a, tw_tensor dx, tw_tensor dy, tw_tensor y,
                         size_t n, tw_error *err);
    tw_status (*dropout_fwd)(void *ctx, tw_tensor y, tw_tensor x, size_t n, float rate,
                             uint64_t seed, tw_error *err);
    tw_status (*dropout_bwd)(void *ctx, tw_tensor dx, tw_tensor dy, size_t n, float rate,
                             uint64_t seed, tw_error *err);
    tw_status (*im2col)(void *ctx, const tw_window *w, tw_tensor cols, tw_tensor x, tw_error *err);
    tw_status (*col2im)(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor cols, tw_error *err);
    tw_status (*maxpool_fwd)(void *ctx, const tw_window *w, tw_tensor y, tw_tensor argmax,
                             tw_tensor x, tw_error *err);
    tw_status (*maxpool_bwd)(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy,
                             tw_tensor argmax, tw_error *err);
    tw_status (*xent_fwd)(void *ctx, tw_tensor loss, tw_tensor probs, tw_tensor logits,
                          tw_tensor labels, int rows, int classes, float smoothing, tw_error *err);
    tw_status (*xent_bwd)(void *ctx, tw_tensor dlogits, tw_tensor probs, tw_tensor labels,
                          int rows, int classes, float scale, float smoothing, tw_error *err);
    tw_status (*mse_fwd)(void *ctx, tw_tensor loss, tw_tensor pred, tw_tensor target, int rows,
                         int cols, tw_error *err);
    tw_status (*mse_bwd)(void *ctx, tw_tensor dpred, tw_tensor pred, tw_tensor target, size_t n,
                         float scale, tw_error *err);
    tw_status (*sum_squares)(void *ctx, tw_tensor out, tw_tensor x, size_t n, tw_error *err);
    tw_status (*add)(void *ctx, tw_tensor y, tw_tensor a, tw_tensor c, size_t n, tw_error *err);
    tw_status (*copy_cols)(void *ctx, tw_tensor dst, int dst_cols, int dst_at, tw_tensor src, int src_cols,
                           int src_at, int rows, int cols, int accumulate, tw_error *err);
    tw_status (*avgpool_fwd)(void *ctx, const tw_window *w, tw_tensor y, tw_tensor x, tw_error *err);
    tw_status (*avgpool_bwd)(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy, tw_error *err);
    tw_status (*bn_fwd)(void *ctx, const tw_bn *p, tw_tensor y, tw_tensor x, tw_tensor gamma, tw_tensor beta,
                        tw_tensor stats, tw_tensor moving, tw_error *err);
    tw_status (*bn_bwd)(void *ctx, const tw_bn *p, tw_tensor dx, tw_tensor dgamma, tw_tensor dbeta, tw_tensor dy,
                        tw_tensor x, tw_tensor gamma, tw_tensor stats, tw_error *err);
    tw_status (*update)(void *ctx, const tw_update *u, tw_tensor params, tw_tensor grads,
                        tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err);
    tw_status (*allreduce_avg)(void *const *ctxs, int n_ctx, const tw_tensor *bufs, size_t n,
                               tw_error *err);
    /* Optional (NULL: not offered; the CPU offers it): the all-reduce and the update in one pass over
     * host memory (tw_update_mean says what). */
    tw_status (*update_mean)(void *ctx, const tw_update *u, tw_tensor params, const tw_tensor *grads,
                             int n_grads, tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n,
                             tw_error *err);
    /* Optional (NULL: not offered; the CPU offers it): a weight gradient's product and the update of
     * those weights in one pass (tw_gemm_update says what). */
    tw_status (*gemm_update)(void *ctx, const tw_update *u, int trans_a, int trans_b, int m, int n, int k,
                             tw_tensor a, tw_tensor b, tw_tensor grads, tw_tensor params, tw_tensor slot1,
                             tw_tensor slot2, tw_tensor ema, tw_error *err);
    int allreduce_split; /* 1: allreduce_avg over disjoint ranges may run concurrently (host memory) */
    tw_status (*sync)(void *ctx, tw_error *err);
    /* Optional (NULL: nothing of tw_math taken; the CPU takes winograd, CUDA tf32). */
    tw_status (*set_math)(void *ctx, const tw_math *m, tw_error *err);
    /* Optional (NULL: not offered; the CPU backend offers none of them). */
    tw_status (*alloc_host)(void *ctx, size_t bytes, void **out, tw_error *err);
    void (*free_host)(void *ctx, void *p);
    tw_status (*capture_begin)(void *ctx, tw_error *err);
    tw_status (*capture_end)(void *ctx, int slot, int ok, tw_error *err);
    tw_status (*replay)(void *ctx, int slot, tw_error *err);
    /* Optional direct convolution (NULL: the engine convolves through im2col + gemm; the CPU backend
     * offers it through oneDNN, the CUDA backend does not). */
    tw_status (*conv_fwd)(void *ctx, const tw_window *w, int filters, tw_tensor y, tw_tensor x,
                          tw_tensor f, tw_tensor bias, tw_error *err);
    tw_status (*conv_bwd)(void *ctx, const tw_window *w, int filters, tw_tensor df, tw_tensor dbias,
                          tw_tensor dx, tw_tensor x, tw_tensor dy, tw_tensor f, tw_error *err);
    /* Optional world of processes (NULL: not offered; the CPU backend's processes average through MPI,
     * world/world.h). The wrappers below check the arguments. */
    tw_status (*world_id)(void *ctx, void *id, tw_error *err);
    tw_status (*world_join)(void *const *ctxs, int n_ctx, const void *id, int node, int nodes,
                            tw_error *err);
    /* Optional max-pool backward with the ReLU before the pool folded in (NULL: the engine calls
     * maxpool_bwd and then act_bwd; the CPU backend offers it). */
    tw_status (*maxpool_bwd_relu)(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy,
                                  tw_tensor argmax, tw_tensor x, tw_error *err);
};

/* ---- lifecycle (backend.c) and registry (backend_reg.c: the one file that loads the CUDA module) ---- */

/* The table for kind: "cuda" is the CUDA backend when its module (tower-cuda.so) loads (creating an
 * instance then fails with TW_ERR_UNSUPPORTED, naming why, where no device is usable); "auto" is "cuda"
 * when the NVIDIA driver is there and a device exists, else "cpu". *ops is a static table. Errors:
 * TW_ERR_INVALID for an unknown kind, TW_ERR_UNSUPPORTED for "cuda" without the module (saying why:
 * not found, not loadable, or from another build). */
tw_status tw_backend_find(const char *kind, const tw_backend_ops **ops, tw_error *err);

/* Creates a backend instance. kind: "cpu", "cuda" or "auto" (cuda when a device exists, else cpu);
 * device: the GPU index (ignored by "cpu"). Caller owns *out. Errors: TW_ERR_UNSUPPORTED when the kind
 * is not built in or has no such device. */
tw_status tw_backend_create(const char *kind, int device, tw_backend **out, tw_error *err);
void tw_backend_destroy(tw_backend *b); /* NULL-safe */
const char *tw_backend_name(const tw_backend *b);  /* "cpu", "cuda:0" */
const char *tw_backend_kind(const tw_backend *b);  /* "cpu", "cuda" */

/* The kinds a command line may ask for (--backend), NULL-terminated: "auto", "cpu", "cuda". */
extern const char *const tw_backend_choices[];

/* The kind `kind` stands for here: "auto" is "cuda" where the NVIDIA driver is loaded and a device
 * exists, else "cpu"; any other kind is returned as given. Loads the CUDA module only in the first case. */
const char *tw_backend_resolve(const char *kind);

/* Number of devices a kind offers (cpu: 1). For "cuda" the first call loads the CUDA module and
 * initialises the CUDA runtime; "auto" does so only where the NVIDIA driver is loaded. */
int tw_backend_devices(const char *kind);

/* 1 when this installation has the backend kind ("cpu" always; "cuda" when the module file is found,
 * without loading it). Touches no device and maps no CUDA library: the server asks this, never the CUDA
 * runtime, so that it holds no CUDA state. */
int tw_backend_built(const char *kind);

/* One GPU as `tower devices` shows it. */
typedef struct {
    char name[96];             /* "NVIDIA H200" */
    size_t memory_bytes;       /* total device memory */
    int cc_major, cc_minor;    /* compute capability */
    int driver_version;        /* CUDA encoding: 1000 * major + 10 * minor (13000 = 13.0) */
    int runtime_version;       /* the same, of the runtime this build links */
} tw_device_info;

/* Describes CUDA device `device`. Errors: TW_ERR_UNSUPPORTED saying why there is none (this build has
 * no CUDA backend; no driver, or one older than the runtime; no GPU; no such index). */
tw_status tw_backend_device_info(int device, tw_device_info *out, tw_error *err);

/* Tells a kind that `concurrent` instances will compute at the same time (one per tower), before they
 * are created, so it can share the machine among them (the CPU backend gives each tower its share of the
 * cores for OpenBLAS instead of letting every tower's GEMMs oversubscribe them). Process-wide.
 * *threads (unless NULL) = the threads each instance may use (its share of the cores; 1 on a device
 * backend; the CPU backend's instances start that many of their own). */
tw_status tw_backend_plan(const char *kind, int concurrent, int *threads, tw_error *err);

/* ---- memory ---- */

tw_status tw_backend_alloc(tw_backend *b, size_t bytes, tw_buffer **out, tw_error *err);
void tw_backend_free(tw_backend *b, tw_buffer *buf); /* NULL-safe */
tw_status tw_backend_upload(tw_backend *b, tw_tensor dst, const void *src, size_t bytes,
                            tw_error *err);
tw_status tw_backend_download(tw_backend *b, void *dst, tw_tensor src, size_t bytes,
                              tw_error *err);
tw_status tw_backend_zero(tw_backend *b, tw_tensor t, size_t bytes, tw_error *err);

/* ---- compute ---- */

/* C[m,n] = alpha * op(A) op(B) + beta * C; op(A) is [m,k] (A stored [k,m] when trans_a), op(B) is [k,n]
 * (B stored [n,k] when trans_b). All row-major fp32, leading dimensions packed. */
tw_status tw_gemm(tw_backend *b, int trans_a, int trans_b, int m, int n, int k, float alpha,
                  tw_tensor a, tw_tensor bm, float beta, tw_tensor c, tw_error *err);

/* y[rows, cols] += bias[cols]. */
tw_status tw_bias_add(tw_backend *b, tw_tensor y, tw_tensor bias, int rows, int cols, tw_error *err);

/* dbias[cols] = sum over rows of dy[rows, cols] (overwrites). */
tw_status tw_bias_grad(tw_backend *b, tw_tensor dbias, tw_tensor dy, int rows, int cols,
                       tw_error *err);

/* y[n] = act(x[n]) (y may be x); dx[n] = act'(y) * dy[n] (dx may be dy). */
tw_status tw_act_fwd(tw_backend *b, tw_activation a, tw_tensor y, tw_tensor x, size_t n,
                     tw_error *err);
tw_status tw_act_bwd(tw_backend *b, tw_activation a, tw_tensor dx, tw_tensor dy, tw_tensor y,
                     size_t n, tw_error *err);

/* y[n] = x[n] * tw_dropout_scale(seed, i, rate); dx[n] = dy[n] * the same scale. */
tw_status tw_dropout_fwd(tw_backend *b, tw_tensor y, tw_tensor x, size_t n, float rate,
                         uint64_t seed, tw_error *err);
tw_status tw_dropout_bwd(tw_backend *b, tw_tensor dx, tw_tensor dy, size_t n, float rate,
                         uint64_t seed, tw_error *err);

/* cols[batch*out_d*out_h*out_w, k_d*k_h*k_w*in_c] from x[batch, in_d, in_h, in_w, in_c] (zeros where
 * the window hangs over the padding); col2im adds cols back into dx (which it zeroes first). */
tw_status tw_im2col(tw_backend *b, const tw_window *w, tw_tensor cols, tw_tensor x, tw_error *err);
tw_status tw_col2im(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor cols, tw_error *err);

/* 1 when the backend convolves directly (tw_conv_*); else a convolution is im2col + gemm. */
int tw_backend_has_conv(const tw_backend *b);

/* Direct convolution over window w with `filters` outputs per position, bias included, activation not
 * (tw_act_fwd follows, as after the GEMM): y[batch, out_d, out_h, out_w, filters] from
 * x[batch, in_d, in_h, in_w, in_c], f[k_d, k_h, k_w, in_c, filters] (TensorFlow's layout) and
 * bias[filters]; bwd overwrites df (f's shape) and dbias[filters] from x and dy (y's shape) and then,
 * unless dx is (tw_tensor){0} (f is then unused), dx (x's shape) from dy and f: one op, so that a backend
 * which copies dy into another layout does so once. Equal to im2col + gemm + bias_add (+ bias_grad) up
 * to float summation order (Winograd's rounding where tw_backend_set_math turned it on). Errors:
 * TW_ERR_UNSUPPORTED when the backend has no direct convolution; the backend's own. */
tw_status tw_conv_fwd(tw_backend *b, const tw_window *w, int filters, tw_tensor y, tw_tensor x,
                      tw_tensor f, tw_tensor bias, tw_error *err);
tw_status tw_conv_bwd(tw_backend *b, const tw_window *w, int filters, tw_tensor df, tw_tensor dbias,
                      tw_tensor dx, tw_tensor x, tw_tensor dy, tw_tensor f, tw_error *err);

/* y[batch, out_d, out_h, out_w, in_c] = max over each window of x; argmax (int32, same shape as y)
 * holds the flat index into x of each maximum (padding never wins). bwd: dx (zeroed first) gets dy
 * at the argmax positions. */
tw_status tw_maxpool_fwd(tw_backend *b, const tw_window *w, tw_tensor y, tw_tensor argmax,
                         tw_tensor x, tw_error *err);
tw_status tw_maxpool_bwd(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor dy,
                         tw_tensor argmax, tw_error *err);

/* 1 when the backend folds a ReLU into the max-pool backward (tw_maxpool_bwd_relu). */
int tw_backend_has_maxpool_bwd_relu(const tw_backend *b);

/* tw_maxpool_bwd followed by tw_act_bwd(TW_ACT_RELU, dx, dx, x) over all of dx, bit for bit, where x is
 * the pool's input (a ReLU's output, so the pool's forward read it), in one pass over the outputs
 * instead of a second one over every input. Errors: TW_ERR_UNSUPPORTED when the backend does not offer
 * it; the argument checks of both. */
tw_status tw_maxpool_bwd_relu(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor dy,
                              tw_tensor argmax, tw_tensor x, tw_error *err);

/* y[n] = a[n] + c[n] (y may be a or c). */
tw_status tw_add(tw_backend *b, tw_tensor y, tw_tensor a, tw_tensor c, size_t n, tw_error *err);

/* For each of `rows` rows: dst[r, dst_at .. dst_at + cols) = (or, accumulate: +=) src[r, src_at .. src_at +
 * cols), dst rows dst_cols wide and src rows src_cols wide (a channel concat and its gradient, in NHWC). */
tw_status tw_copy_cols(tw_backend *b, tw_tensor dst, int dst_cols, int dst_at, tw_tensor src, int src_cols,
                       int src_at, int rows, int cols, int accumulate, tw_error *err);

/* y[batch, out_d, out_h, out_w, in_c] = the mean over each window of x's values inside the input (the
 * padding is not counted: TensorFlow's avg_pool, ONNX's count_include_pad 0); bwd: dx (overwritten) gets
 * each dy spread evenly over its window's inputs. */
tw_status tw_avgpool_fwd(tw_backend *b, const tw_window *w, tw_tensor y, tw_tensor x, tw_error *err);
tw_status tw_avgpool_bwd(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor dy, tw_error *err);

/* Batch normalisation (docs/formats.md §6.12), p->mode as tw_bn_mode says: y[rows, channels] = act(gamma
 * (x - mean) / sqrt(variance + epsilon) + beta), act p->activation, the variance the batch's biased one
 * (Keras'); gamma, beta [channels]; stats [2 * channels] (TRAIN: written, the batch's mean then
 * 1 / sqrt(var + eps)); moving [2 * channels] (the moving mean then the moving variance: read by INFER,
 * updated by TRAIN_UPDATE). bwd (after a TRAIN forward): dgamma, dbeta [channels] overwritten,
 * dx[rows, channels] overwritten unless dx is empty ({NULL, 0}: not needed). */
tw_status tw_bn_fwd(tw_backend *b, const tw_bn *p, tw_tensor y, tw_tensor x, tw_tensor gamma, tw_tensor beta,
                    tw_tensor stats, tw_tensor moving, tw_error *err);
tw_status tw_bn_bwd(tw_backend *b, const tw_bn *p, tw_tensor dx, tw_tensor dgamma, tw_tensor dbeta, tw_tensor dy,
                    tw_tensor x, tw_tensor gamma, tw_tensor stats, tw_error *err);

/* Sparse softmax cross-entropy with the max-shift (docs/formats.md §6.3): loss[rows], probs[rows, classes]
 * from logits[rows, classes] and labels[rows] (int32, each in [0, classes): the caller checks), the
 * targets smoothed by smoothing in [0, 1) (§6.11; 0: the one-hot labels). bwd: dlogits = (probs -
 * targets) * scale. */
tw_status tw_xent_fwd(tw_backend *b, tw_tensor loss, tw_tensor probs, tw_tensor logits,
                      tw_tensor labels, int rows, int classes, float smoothing, tw_error *err);
tw_status tw_xent_bwd(tw_backend *b, tw_tensor dlogits, tw_tensor probs, tw_tensor labels,
                      int rows, int classes, float scale, float smoothing, tw_error *err);

/* Squared error: loss[rows] = sum over cols of (pred - target)^2; bwd: dpred[n] = 2 (pred - target) *
 * scale. (tf.losses.mean_squared_error's mean is loss summed / (rows*cols), i.e. scale 1/(rows*cols).) */
tw_status tw_mse_fwd(tw_backend *b, tw_tensor loss, tw_tensor pred, tw_tensor target, int rows,
                     int cols, tw_error *err);
tw_status tw_mse_bwd(tw_backend *b, tw_tensor dpred, tw_tensor pred, tw_tensor target, size_t n,
                     float scale, tw_error *err);

/* out[1] = sum of x[n]^2. */
tw_status tw_sum_squares(tw_backend *b, tw_tensor out, tw_tensor x, size_t n, tw_error *err);

/* ---- update and collectives ---- */

/* The step over the flat arenas, all [n] fp32: params updated from grads (plus L2 on the first
 * u->l2_count values); slot1 = momentum accumulator or Adam m, slot2 = Adam v (unused slots may be any
 * view); then, when u->ema, ema = shadow of the new params. */
tw_status tw_update_step(tw_backend *b, const tw_update *u, tw_tensor params, tw_tensor grads,
                         tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err);

/* 1 when b offers tw_update_mean (the CPU). */
int tw_backend_has_update_mean(const tw_backend *b);

/* 1 when b offers tw_gemm_update (the CPU). */
int tw_backend_has_gemm_update(const tw_backend *b);

/* grads[m, n] = op(a)[m, k] op(b)[k, n] (tw_gemm's layouts, alpha 1, beta 0: a weight gradient), then
 * tw_update_step over those m·n values (params, slots and ema: views at the same place in their
 * arenas; u->l2_count counted from their start), each block of the product updated by the thread that
 * computed it, while it is in the cache. Bit for bit tw_gemm followed by tw_update_step. For a step
 * whose gradient is final when its product is (one tower, no world of processes), the weights of a
 * layer that passes no gradient on (model.c). TW_ERR_UNSUPPORTED where b does not offer it. */
tw_status tw_gemm_update(tw_backend *b, const tw_update *u, int trans_a, int trans_b, int m, int n, int k,
                         tw_tensor a, tw_tensor bm, tw_tensor grads, tw_tensor params, tw_tensor slot1,
                         tw_tensor slot2, tw_tensor ema, tw_error *err);

/* tw_update_step from the mean of grads[0..n_grads) (each [n] fp32): the mean is summed in that order in
 * float and scaled by 1/n_grads exactly as tw_backend_allreduce_avg does (one gradient: itself), and
 * applied in the same pass; it is written into grads[0] when u->keep_mean (else grads[0] may keep its
 * own values: a byte stream fewer). The towers share params, slots and ema (one update for all); calls
 * over disjoint ranges may run from several threads at once, each on its own instance (each its share
 * of the arenas, with u->l2_count counted from the range's start; an instance may cut its call over
 * threads of its own). TW_ERR_UNSUPPORTED where b does not offer it. */
tw_status tw_update_mean(tw_backend *b, const tw_update *u, tw_tensor params, const tw_tensor *grads,
                         int n_grads, tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n,
                         tw_error *err);

/* 1 when b's all-reduce may run over disjoint ranges from several threads at once (allreduce_split). */
int tw_backend_allreduce_splits(const tw_backend *b);

/* Every backend's bufs[i] ([n] fp32) becomes the mean over the group (all of one kind). */
tw_status tw_backend_allreduce_avg(tw_backend *const *towers, int n_towers, const tw_tensor *bufs,
                                   size_t n, tw_error *err);

/* Waits for the backend's queued work; reports an asynchronous failure. */
tw_status tw_backend_sync(tw_backend *b, tw_error *err);

/* ---- host memory, math mode and step graphs (optional ops: a backend without them, like the CPU, gets
 * the plain behaviour) ---- */

/* *out = bytes of host memory for batches that are uploaded to b (and, for a CUDA backend, to any other
 * CUDA instance): page-locked (cudaHostAlloc, portable) where b offers it, so that uploads from it are
 * asynchronous, on the backend's copy stream; else malloc. Caller owns *out and frees it with
 * tw_backend_free_host on the same b, before b is destroyed. While an upload from the memory may still
 * be in flight (until the next download or sync of the backend that uploads it) the caller must not
 * write it: alternate two buffers. Errors: TW_ERR_NOMEM. */
tw_status tw_backend_alloc_host(tw_backend *b, size_t bytes, void **out, tw_error *err);
void tw_backend_free_host(tw_backend *b, void *p); /* NULL-safe (p) */

/* How an instance computes where faster ways round differently; each backend takes what it has and ignores
 * the rest (TW_OK), and both default to 0. tf32 = 1: the GEMMs use TF32 tensor cores (10-bit mantissa
 * inputs, fp32 accumulation: about 1e-3 relative error per product; CUDA, kernels/cuda/README.md).
 * winograd = 1: 3x3 stride-1 convolutions through oneDNN's Winograd kernels where it has them (about 1e-6
 * relative; CPU, kernels/cpu/cpu_conv.h). */
tw_status tw_backend_set_math(tw_backend *b, const tw_math *m, tw_error *err);

/* 1 when the backend can record ops as a graph and replay it (capture_begin/end and replay). */
int tw_backend_has_graphs(const tw_backend *b);

enum { TW_GRAPH_SLOTS = 4 }; /* graphs one instance keeps, slot 0 .. TW_GRAPH_SLOTS - 1 */

/* Graphs of one instance. Between tw_backend_capture_begin and tw_backend_capture_end every compute op,
 * zero and update queued on b is recorded instead of run. Uploads, downloads, syncs and all-reduces are
 * refused in between (TW_ERR_INVALID): a graph holds device work only, so inputs are uploaded before it
 * and results downloaded after its replay. capture_end with ok = 1 turns the record into the executable
 * graph of `slot`: the first time by instantiating it, later by updating the executable graph in place
 * with the new record's arguments (same ops and shapes, other scalars: learning rate, EMA decay, Adam's
 * alpha, dropout seeds), or by instantiating it anew when the ops changed. ok = 0 ends the capture and
 * drops the record; call it after any failure in between, so that b is never left capturing. replay
 * queues slot's graph on b's stream: the recorded ops, with the arguments of the last capture, in their
 * order. Errors: TW_ERR_UNSUPPORTED when b has no graphs; TW_ERR_INVALID for a slot outside
 * [0, TW_GRAPH_SLOTS), a capture already (or not) in progress, or a replay of an empty slot; the
 * backend's own. One thread at a time per instance, as every op. */
tw_status tw_backend_capture_begin(tw_backend *b, tw_error *err);
tw_status tw_backend_capture_end(tw_backend *b, int slot, int ok, tw_error *err);
tw_status tw_backend_replay(tw_backend *b, int slot, tw_error *err);

/* ---- a world of processes (optional ops: the CUDA backend's NCCL communicators across nodes) ----
 *
 * One process per node drives its G local towers; a world of `nodes` such processes has nodes*G ranks,
 * tower i of node k being rank k*G + i (PyTorch's ProcessGroupNCCL map), and tw_backend_allreduce_avg over
 * the G towers then averages over all nodes*G. The id (TW_WORLD_ID_BYTES, NCCL's unique id) is made by
 * node 0 and reaches every node by tw_world_bcast (world/world.h: MPI_Bcast, or the TCP world's star
 * through rank 0) or the TCP rendezvous alone (world/rendezvous.h); docs/rendezvous.md. */

enum {
    TW_WORLD_ID_BYTES = 128,  /* NCCL_UNIQUE_ID_BYTES (the CUDA module asserts it) */
    TW_WORLD_MAX_NODES = 4096, /* processes in one world */
};

/* 1 when b's kind can join a world of processes (world_id and world_join). */
int tw_backend_has_world(const tw_backend *b);

/* id[TW_WORLD_ID_BYTES] = a new world's id (ncclGetUniqueId), made on node 0 only, before any node
 * joins. Errors: TW_ERR_UNSUPPORTED when b's kind has no worlds; the backend's own. */
tw_status tw_backend_world_id(tw_backend *b, void *id, tw_error *err);

/* Makes towers[0..n_towers) (one process's towers, one GPU each, every node with the same n_towers) ranks
 * node*n_towers + i of the world `id` of `nodes` nodes; every node calls it at the same time with the
 * same id (NCCL's ncclCommInitRank inside ncclGroupStart/End: it returns once the whole world is
 * connected). From then on tw_backend_allreduce_avg over exactly these towers, in this order, averages
 * over the whole world (even for one tower), and an all-reduce over any other set of them is refused;
 * the world ends when one of them is destroyed. An asynchronous failure of the world is a sticky error
 * of the backend (kernels/cuda/cuda_backend.h), and the communicators are aborted so no rank hangs.
 * Errors: TW_ERR_INVALID for bad arguments (node outside [0, nodes), nodes outside
 * [1, TW_WORLD_MAX_NODES], towers of different kinds or repeated); TW_ERR_UNSUPPORTED when the
 * kind has no worlds or two towers share a GPU; the backend's own. */
tw_status tw_backend_world_join(tw_backend *const *towers, int n_towers, const void *id, int node,
                                int nodes, tw_error *err);

/* Prepares this process for computing with a backend, before anything else runs: called by main for the
 * commands that train, evaluate, predict or convert (the CPU backend's thread libraries may re-execute the
 * process with the environment they need: cpu_conv.h; without it OpenBLAS's idle thread spins a core for
 * its first 2^28 cycles even in a conversion, which calls no BLAS). argv is main's. */
void tw_backend_process_init(char **argv);

#endif
