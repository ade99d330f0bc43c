/* cpu_conv.c — the CPU backend's convolutions through oneDNN. See cpu_conv.h.
 *
 * Why a library: oneDNN's JIT kernels (the ones TensorFlow and PyTorch run on CPUs) convolve without
 * materialising im2col's columns and use every core in each direction; a loop of our own would be the
 * im2col + sgemm this replaces, at half of TensorFlow's speed on the Fashion CNN (BENCHMARKS.md).
 *
 * Primitives: forward (with the bias), backward data and backward weights (with the bias gradient), direct
 * ones with the activations in NHWC / NDHWC as they lie and the filters in the layout the primitive prefers
 * (format "any"); a cached reorder turns Tower's DHWIO filters into it or the filter gradient back. With
 * Winograd on (tw_cpu_conv_set_winograd) a window it takes uses Winograd's primitives, whose activations
 * too are "any" (blocked by 16 channels) and reordered both ways: on the Fashion ResNet's 3x3 layers its
 * kernels are 1.5x faster than direct ones, and the reorders take back a third of that (BENCHMARKS.md);
 * the backward weights' copy of dy serves the backward data too (tw_cpu_conv_bwd). A 2-D window is
 * described in 2-D. Padding: pad_* before, and after whatever completes the last window (never negative).
 * Scratchpads are user-managed and, with the copies, live in one arena per instance (its regions below), so
 * instances never share memory and the primitives of one share theirs (200 MB less at the Fashion ResNet's
 * peak than a copy per primitive; BENCHMARKS.md).
 *
 * Determinism: for a fixed thread count and machine, oneDNN's CPU convolutions reduce in a fixed order, so
 * a step gives the same bits run to run (bit-exact resume, test_trainer.c).
 *
 * Threads: libdnnl runs on OpenMP (libgomp), whose thread count is per calling thread; each call sets it
 * (tw_cpu_omp_team). libgomp's default wait policy spins idle threads for milliseconds on the cores
 * OpenBLAS's worker and the next op need, and that worker spins on sched_yield after each sgemm:
 * tw_cpu_conv_process_init has main re-execute with OMP_WAIT_POLICY=passive and OPENBLAS_THREAD_TIMEOUT=4.
 * With 2 towers each tower's libraries run one thread (tw_backend_plan).
 *
 * Not used, measured (BENCHMARKS.md, "Convolutions"): blocked activation layouts for direct convolutions
 * (a blocked layout through the whole network would spare Winograd's reorders, but every op would need to
 * read it), oneDNN's max pooling (it skips NaNs, and its workspace is not the argmax the CUDA backend
 * shares) and the ReLU post-op (it turns a NaN into 0, where Tower and TensorFlow keep it for the loss
 * check). The ReLU's backward rides on the pool's instead (tw_maxpool_bwd_relu). */
#define _GNU_SOURCE
#include "cpu_conv.h"
#include "cpu_gemm.h"

#include <dnnl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CACHE_MAX = 64 }; /* primitives one instance keeps: 3 per conv layer and batch size */

typedef enum { TW_CONV_FWD = 0, TW_CONV_BWD_DATA = 1, TW_CONV_BWD_FILTER = 2 } tw_conv_dir;

/* Where the primitives' copies of their operands and their scratchpads live during a call: one arena per
 * instance in REGIONS regions, one per tensor (x or dx, y or dy, the filters or their gradient, the
 * scratchpad), each as large as the largest any cached primitive needs. A call copies its inputs into their
 * regions and its output out of its region before it returns, so the primitives share them: memory for one
 * layer's copies, not one per window, and the backward weights' copy of dy stays in REGION_Y where the
 * backward data reads it (tw_cpu_conv_bwd). */
enum { REGION_X, REGION_Y, REGION_F, REGION_SCRATCH, REGIONS };

/* One tensor argument of a primitive: Tower's array (its handle set per call) and, where the primitive
 * wants another layout, the primitive's copy (in region `region` of the arena, its handle set per call)
 * and the reorder between the two. */
typedef struct {
    dnnl_memory_t user;       /* Tower's layout */
    dnnl_memory_t prim;       /* the primitive's (== user when they agree) */
    dnnl_primitive_t reorder; /* user -> prim for an input, prim -> user for an output; NULL when they agree */
    int region;               /* REGION_X, _Y or _F */
} operand;

/* One cached primitive. Its operands by direction (tw_conv_dir): FWD x, f, y; BWD_DATA dy, f, dx;
 * BWD_FILTER x, dy, df. */
typedef struct entry {
    tw_window w;
    int filters;
    tw_conv_dir dir;
    dnnl_primitive_t prim;
    operand a, b, out;
    dnnl_memory_t bias;     /* FWD: the bias, BWD_FILTER: its gradient; else NULL */
    dnnl_memory_t scratch;  /* in REGION_SCRATCH; NULL when the primitive needs none */
    struct entry *next;
} entry;

struct tw_cpu_conv {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    entry *cache; /* most recently used first */
    int cached;
    int winograd; /* tw_cpu_conv_set_winograd */
    size_t need[REGIONS]; /* each region's bytes: the most one primitive built since the last clear needs */
    void *arena;          /* the regions, in order, each a multiple of 64 bytes; owned */
    size_t arena_bytes;
};

static atomic_int conv_threads;

void tw_cpu_conv_threads(int threads) { atomic_store(&conv_threads, threads); }

/* The wait settings libgomp and OpenBLAS read once, as they load, and Tower's value for each where the
 * user set neither it nor `also`. */
static const struct {
    const char *name, *value, *also;
} WAIT_ENV[] = {
    {"OMP_WAIT_POLICY", "passive", "GOMP_SPINCOUNT"}, /* an idle OpenMP thread sleeps at once */
    {"OPENBLAS_THREAD_TIMEOUT", "4", NULL},           /* an idle OpenBLAS thread sleeps after 2^4
                                                         cycles of sched_yield, not 2^28 */
};

void tw_cpu_conv_process_init(char **argv)
{
    int set = 0;
    for (size_t i = 0; i < sizeof WAIT_ENV / sizeof WAIT_ENV[0]; i++)
        if (!getenv(WAIT_ENV[i].name) && !(WAIT_ENV[i].also && getenv(WAIT_ENV[i].also)) &&
            setenv(WAIT_ENV[i].name, WAIT_ENV[i].value, 1) == 0)
            set = 1;
    if (set)
        execv("/proc/self/exe", argv);
}

/* Sets this thread's OpenMP team size for oneDNN (no-op before tw_cpu_conv_threads or without OpenMP). */
static void apply_threads(void)
{
    int n = atomic_load(&conv_threads);
    if (n > 0)
        tw_cpu_omp_team(n);
}

#define DN(call)                                                                                     \
    do {                                                                                             \
        dnnl_status_t st_ = (call);                                                                  \
        if (st_ != dnnl_success)                                                                     \
            return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "oneDNN: %s failed (status %d)",    \
                                #call, (int)st_);                                                    \
    } while (0)

tw_status tw_cpu_conv_create(tw_cpu_conv **out, tw_error *err)
{
    tw_cpu_conv *c = calloc(1, sizeof *c);
    if (!c)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: out of memory for oneDNN state");
    dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (st == dnnl_success)
        st = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        tw_cpu_conv_destroy(c);
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "oneDNN: no CPU engine (status %d)", st);
    }
    *out = c;
    return TW_OK;
}

static void operand_destroy(operand *o)
{
    dnnl_primitive_destroy(o->reorder);
    if (o->prim != o->user)
        dnnl_memory_destroy(o->prim);
    dnnl_memory_destroy(o->user);
}

static void entry_destroy(entry *e)
{
    dnnl_primitive_destroy(e->prim);
    operand_destroy(&e->a);
    operand_destroy(&e->b);
    operand_destroy(&e->out);
    dnnl_memory_destroy(e->bias);
    dnnl_memory_destroy(e->scratch);
    free(e);
}

static void cache_clear(tw_cpu_conv *c)
{
    for (entry *e = c->cache, *next; e; e = next) {
        next = e->next;
        entry_destroy(e);
    }
    c->cache = NULL;
    c->cached = 0;
    memset(c->need, 0, sizeof c->need);
}

void tw_cpu_conv_destroy(tw_cpu_conv *c)
{
    if (!c)
        return;
    cache_clear(c);
    free(c->arena);
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->engine);
    free(c);
}

/* The oneDNN descriptions of one window: activations x [N, C, (D,) H, W] and y [N, F, (D,) OH, OW] in
 * NHWC / NDHWC (x_any, y_any: in the layout the primitive prefers), filters [F, C, (KD,) KH, KW] in
 * (D)HWIO, and the spatial strides and paddings. */
typedef struct {
    int nd; /* 4 (2-D) or 5 */
    dnnl_memory_desc_t x, y, x_any, y_any, f_user, f_any, bias; /* bias [F] */
    dnnl_dims_t strides, pad_l, pad_r;
} geometry;

static long pad_after(int in, int k, int s, int pad, int out)
{
    long r = (long)(out - 1) * s + k - in - pad;
    return r > 0 ? r : 0;
}

static tw_status geometry_of(const tw_window *w, int filters, geometry *g, tw_error *err)
{
    int three = w->in_d != 1 || w->k_d != 1 || w->out_d != 1;
    int sp = three ? 3 : 2, at = 0;
    int in[3] = {w->in_d, w->in_h, w->in_w}, k[3] = {w->k_d, w->k_h, w->k_w};
    int s[3] = {w->s_d, w->s_h, w->s_w}, p[3] = {w->pad_d, w->pad_h, w->pad_w};
    int o[3] = {w->out_d, w->out_h, w->out_w};
    dnnl_dims_t xd = {w->batch, w->in_c}, yd = {w->batch, filters}, fd = {filters, w->in_c};
    g->nd = sp + 2;
    for (int i = 3 - sp; i < 3; i++, at++) {
        xd[2 + at] = in[i];
        yd[2 + at] = o[i];
        fd[2 + at] = k[i];
        g->strides[at] = s[i];
        g->pad_l[at] = p[i];
        g->pad_r[at] = pad_after(in[i], k[i], s[i], p[i], o[i]);
    }
    dnnl_format_tag_t act = three ? dnnl_ndhwc : dnnl_nhwc, fil = three ? dnnl_dhwio : dnnl_hwio;
    DN(dnnl_memory_desc_init_by_tag(&g->x, g->nd, xd, dnnl_f32, act));
    DN(dnnl_memory_desc_init_by_tag(&g->y, g->nd, yd, dnnl_f32, act));
    DN(dnnl_memory_desc_init_by_tag(&g->x_any, g->nd, xd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&g->y_any, g->nd, yd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&g->f_user, g->nd, fd, dnnl_f32, fil));
    DN(dnnl_memory_desc_init_by_tag(&g->f_any, g->nd, fd, dnnl_f32, dnnl_format_tag_any));
    const dnnl_dims_t bd = {filters};
    DN(dnnl_memory_desc_init_by_tag(&g->bias, 1, bd, dnnl_f32, dnnl_a));
    return TW_OK;
}

/* oneDNN's Winograd kernels (F(4x4, 3x3), on AVX-512 only) take 2-D 3x3 windows at stride 1, in blocks of
 * WINO_BLOCK channels: fewer input channels or filters are padded to a block, and the stem convolution of
 * a grey image (1 channel) ran 3x slower than direct (BENCHMARKS.md). */
enum { WINO_BLOCK = 16 };

static int winograd_fits(const tw_window *w, int filters)
{
    return w->in_d == 1 && w->k_d == 1 && w->out_d == 1 && w->k_h == 3 && w->k_w == 3 && w->s_h == 1 &&
           w->s_w == 1 && w->in_c >= WINO_BLOCK && filters >= WINO_BLOCK;
}

#define DS(call)                                                                                     \
    do {                                                                                             \
        dnnl_status_t st_ = (call);                                                                  \
        if (st_ != dnnl_success)                                                                     \
            return st_;                                                                              \
    } while (0)

/* The primitive descriptor of direction dir with algorithm alg (backward ones with the forward one as
 * their hint). Winograd's activations are in the layout it prefers (blocked), direct's in Tower's. */
static dnnl_status_t describe(const tw_cpu_conv *c, tw_conv_dir dir, const geometry *g, dnnl_alg_kind_t alg,
                              dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd)
{
    int any = alg == dnnl_convolution_winograd;
    const dnnl_memory_desc_t *x = any ? &g->x_any : &g->x, *y = any ? &g->y_any : &g->y;
    dnnl_convolution_desc_t fwd, bwd;
    dnnl_primitive_desc_t hint = NULL;
    DS(dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training, alg, x, &g->f_any, &g->bias, y,
                                          g->strides, g->pad_l, g->pad_r));
    if (dir == TW_CONV_FWD)
        return dnnl_primitive_desc_create(pd, &fwd, attr, c->engine, NULL);
    if (dir == TW_CONV_BWD_DATA)
        DS(dnnl_convolution_backward_data_desc_init(&bwd, alg, x, &g->f_any, y, g->strides, g->pad_l,
                                                    g->pad_r));
    else
        DS(dnnl_convolution_backward_weights_desc_init(&bwd, alg, x, &g->f_any, &g->bias, y, g->strides,
                                                       g->pad_l, g->pad_r));
    DS(dnnl_primitive_desc_create(&hint, &fwd, NULL, c->engine, NULL));
    dnnl_status_t st = dnnl_primitive_desc_create(pd, &bwd, attr, c->engine, hint);
    dnnl_primitive_desc_destroy(hint);
    return st;
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* A memory of md whose data lives in region r (its handle set per call), and r's need raised to hold it. */
static tw_status region_memory(tw_cpu_conv *c, int r, const dnnl_memory_desc_t *md, dnnl_memory_t *mem,
                               tw_error *err)
{
    size_t bytes = round64(dnnl_memory_desc_get_size(md));
    c->need[r] = bytes > c->need[r] ? bytes : c->need[r];
    DN(dnnl_memory_create(mem, md, c->engine, DNNL_MEMORY_NONE));
    return TW_OK;
}

/* The arena grown to the regions' needs (its contents are not kept: only lookups grow it, between calls). */
static tw_status arena_fit(tw_cpu_conv *c, tw_error *err)
{
    size_t total = 0;
    for (int r = 0; r < REGIONS; r++)
        total += c->need[r];
    if (total <= c->arena_bytes)
        return TW_OK;
    free(c->arena);
    c->arena_bytes = 0;
    if (!(c->arena = aligned_alloc(64, total)))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: cannot allocate %zu bytes for convolutions",
                            total);
    c->arena_bytes = total;
    return TW_OK;
}

static void *region_at(const tw_cpu_conv *c, int r)
{
    size_t at = 0;
    for (int k = 0; k < r; k++)
        at += c->need[k];
    return (char *)c->arena + at;
}

/* o's memories for Tower's layout `user` and the primitive's `prim` (a copy in region r where they differ),
 * and the reorder between them (from prim to user when the operand is an output). */
static tw_status operand_bind(tw_cpu_conv *c, operand *o, const dnnl_memory_desc_t *user,
                              const dnnl_memory_desc_t *prim, int r, int output, tw_error *err)
{
    DN(dnnl_memory_create(&o->user, user, c->engine, DNNL_MEMORY_NONE));
    o->region = r;
    if (dnnl_memory_desc_equal(prim, user)) {
        o->prim = o->user;
        return TW_OK;
    }
    TW_TRY(region_memory(c, r, prim, &o->prim, err));
    dnnl_primitive_desc_t rpd;
    DN(dnnl_reorder_primitive_desc_create(&rpd, output ? prim : user, c->engine, output ? user : prim,
                                          c->engine, NULL));
    dnnl_status_t st = dnnl_primitive_create(&o->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    DN(st);
    return TW_OK;
}

/* The operands, bias and scratchpad of e, whose primitive descriptor is pd. */
static tw_status bind(tw_cpu_conv *c, entry *e, const geometry *g, const_dnnl_primitive_desc_t pd,
                      tw_error *err)
{
    static const dnnl_query_t query[3][3] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
        {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
        {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
    const dnnl_memory_desc_t *user[3][3] = {
        {&g->x, &g->f_user, &g->y}, {&g->y, &g->f_user, &g->x}, {&g->x, &g->y, &g->f_user}};
    static const int region[3][3] = {
        {REGION_X, REGION_F, REGION_Y}, {REGION_Y, REGION_F, REGION_X}, {REGION_X, REGION_Y, REGION_F}};
    operand *o[3] = {&e->a, &e->b, &e->out};
    for (int i = 0; i < 3; i++)
        TW_TRY(operand_bind(c, o[i], user[e->dir][i], dnnl_primitive_desc_query_md(pd, query[e->dir][i], 0),
                            region[e->dir][i], i == 2, err));
    if (e->dir != TW_CONV_BWD_DATA)
        DN(dnnl_memory_create(&e->bias, &g->bias, c->engine, DNNL_MEMORY_NONE));
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp && dnnl_memory_desc_get_size(sp) > 0)
        TW_TRY(region_memory(c, REGION_SCRATCH, sp, &e->scratch, err));
    return TW_OK;
}

/* The primitive descriptor of e: Winograd's where it is on and oneDNN has it for e's window, else
 * direct's. */
static tw_status choose(const tw_cpu_conv *c, const entry *e, const geometry *g, dnnl_primitive_attr_t attr,
                        dnnl_primitive_desc_t *pd, tw_error *err)
{
    dnnl_status_t st = dnnl_unimplemented;
    if (c->winograd && winograd_fits(&e->w, e->filters))
        st = describe(c, e->dir, g, dnnl_convolution_winograd, attr, pd);
    if (st != dnnl_success)
        st = describe(c, e->dir, g, dnnl_convolution_direct, attr, pd);
    if (st != dnnl_success)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                            "oneDNN: no convolution primitive for this window (status %d)", (int)st);
    return TW_OK;
}

/* Creates e's primitive, memories and reorders. */
static tw_status build(tw_cpu_conv *c, entry *e, tw_error *err)
{
    geometry g;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd = NULL;
    TW_TRY(geometry_of(&e->w, e->filters, &g, err));
    DN(dnnl_primitive_attr_create(&attr));
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    tw_status s = st == dnnl_success ? choose(c, e, &g, attr, &pd, err)
                                     : tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                                                    "oneDNN: scratchpad mode failed (status %d)", st);
    dnnl_primitive_attr_destroy(attr);
    if (s == TW_OK)
        s = bind(c, e, &g, pd, err);
    if (s == TW_OK && (st = dnnl_primitive_create(&e->prim, pd)) != dnnl_success)
        s = tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "oneDNN: primitive creation failed (status %d)",
                         st);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

/* The cached entry of (w, filters, dir), built on first use and moved to the front of the cache; the least
 * recently used goes when the cache is full. */
static tw_status lookup(tw_cpu_conv *c, tw_conv_dir dir, const tw_window *w, int filters, entry **out,
                        tw_error *err)
{
    for (entry **at = &c->cache; *at; at = &(*at)->next) {
        entry *e = *at;
        if (e->dir == dir && e->filters == filters && memcmp(&e->w, w, sizeof *w) == 0) {
            *at = e->next;
            e->next = c->cache;
            c->cache = e;
            *out = e;
            return TW_OK;
        }
    }
    if (c->cached == CACHE_MAX) { /* drop the least recently used, the last in the list */
        entry **last = &c->cache;
        while ((*last)->next)
            last = &(*last)->next;
        entry_destroy(*last);
        *last = NULL;
        c->cached--;
    }
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: out of memory for a oneDNN primitive");
    e->w = *w;
    e->filters = filters;
    e->dir = dir;
    tw_status s = build(c, e, err);
    if (s == TW_OK)
        s = arena_fit(c, err);
    if (s != TW_OK) {
        entry_destroy(e);
        return s;
    }
    e->next = c->cache;
    c->cache = e;
    c->cached++;
    *out = e;
    return TW_OK;
}

static tw_status exec(tw_cpu_conv *c, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                      tw_error *err)
{
    DN(dnnl_primitive_execute(p, c->stream, nargs, args));
    return TW_OK;
}

/* Copies o between Tower's layout and the primitive's: into the primitive's for an input, back for an
 * output. No-op where they agree. */
static tw_status reorder(tw_cpu_conv *c, const operand *o, int output, tw_error *err)
{
    if (!o->reorder)
        return TW_OK;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, output ? o->prim : o->user},
                              {DNNL_ARG_TO, output ? o->user : o->prim}};
    return exec(c, o->reorder, 2, args, err);
}

void tw_cpu_conv_set_winograd(tw_cpu_conv *c, int on)
{
    if (c->winograd == (on != 0))
        return;
    c->winograd = on != 0;
    cache_clear(c); /* its primitives were chosen the other way */
}

/* Points o's copy (where it has one) at its region of the arena. */
static tw_status place(const tw_cpu_conv *c, const operand *o, tw_error *err)
{
    if (o->prim != o->user)
        DN(dnnl_memory_set_data_handle(o->prim, region_at(c, o->region)));
    return TW_OK;
}

/* Runs e on Tower's arrays a, b, out (and bias). a_ready: a's copy is already in its region (the same
 * values as a, in the layout e wants). */
static tw_status execute(tw_cpu_conv *c, entry *e, const float *a, const float *b, float *out, float *bias,
                         int a_ready, tw_error *err)
{
    DN(dnnl_memory_set_data_handle(e->a.user, (void *)a));
    DN(dnnl_memory_set_data_handle(e->b.user, (void *)b));
    DN(dnnl_memory_set_data_handle(e->out.user, out));
    TW_TRY(place(c, &e->a, err));
    TW_TRY(place(c, &e->b, err));
    TW_TRY(place(c, &e->out, err));
    if (e->bias)
        DN(dnnl_memory_set_data_handle(e->bias, bias));
    if (e->scratch)
        DN(dnnl_memory_set_data_handle(e->scratch, region_at(c, REGION_SCRATCH)));
    if (!a_ready)
        TW_TRY(reorder(c, &e->a, 0, err));
    TW_TRY(reorder(c, &e->b, 0, err));
    static const int arg_a[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_SRC};
    static const int arg_b[] = {DNNL_ARG_WEIGHTS, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST};
    static const int arg_out[] = {DNNL_ARG_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_WEIGHTS};
    tw_conv_dir dir = e->dir;
    dnnl_exec_arg_t args[5] = {{arg_a[dir], e->a.prim}, {arg_b[dir], e->b.prim}, {arg_out[dir], e->out.prim}};
    int n = 3;
    if (e->bias)
        args[n++] = (dnnl_exec_arg_t){dir == TW_CONV_BWD_FILTER ? DNNL_ARG_DIFF_BIAS : DNNL_ARG_BIAS, e->bias};
    if (e->scratch)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    TW_TRY(exec(c, e->prim, n, args, err));
    TW_TRY(reorder(c, &e->out, 1, err));
    DN(dnnl_stream_wait(c->stream));
    return TW_OK;
}

tw_status tw_cpu_conv_fwd(tw_cpu_conv *c, const tw_window *w, int filters, const float *x, const float *f,
                          float *y, float *bias, tw_error *err)
{
    entry *e = NULL;
    apply_threads();
    TW_TRY(lookup(c, TW_CONV_FWD, w, filters, &e, err));
    return execute(c, e, x, f, y, bias, 0, err);
}

/* 1 when g (BWD_FILTER) leaves in REGION_Y the copy of dy that d (BWD_DATA) wants: both copy it, to the same
 * layout. */
static int shares_dy(const entry *g, const entry *d)
{
    const dnnl_memory_desc_t *gm, *dm;
    if (!g->b.reorder || !d->a.reorder || dnnl_memory_get_memory_desc(g->b.prim, &gm) != dnnl_success ||
        dnnl_memory_get_memory_desc(d->a.prim, &dm) != dnnl_success)
        return 0;
    return dnnl_memory_desc_equal(gm, dm);
}

tw_status tw_cpu_conv_bwd(tw_cpu_conv *c, const tw_window *w, int filters, const float *x, const float *dy,
                          const float *f, float *df, float *dbias, float *dx, tw_error *err)
{
    entry *g = NULL, *d = NULL;
    apply_threads();
    TW_TRY(lookup(c, TW_CONV_BWD_FILTER, w, filters, &g, err));
    /* both looked up (the arena grown) before either runs, so g's copy of dy is still there for d; and the
       second lookup cannot evict the first, the most recently used */
    if (dx)
        TW_TRY(lookup(c, TW_CONV_BWD_DATA, w, filters, &d, err));
    TW_TRY(execute(c, g, x, dy, df, dbias, 0, err));
    return d ? execute(c, d, dy, f, dx, NULL, shares_dy(g, d), err) : TW_OK;
}
