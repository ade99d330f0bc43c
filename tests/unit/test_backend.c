/* test_backend.c — the CPU backend op by op: forward results against naive references computed here in
 * double, gradients against central finite differences, the optimizer against TensorFlow 1's formulas
 * written out independently; the wrappers' argument checks, TensorFlow's SAME/VALID window arithmetic
 * and the backend registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_gemm.h"

static tw_backend *B; /* the CPU backend every test uses (group setup) */
static tw_error E;    /* the error of the last call that OK() checked */

/* Asserts that a call filling E succeeds, showing its message otherwise. */
#define OK(call)                                                                                   \
    do {                                                                                           \
        tw_error_clear(&E);                                                                        \
        if ((call) != TW_OK)                                                                       \
            fail_msg("%s failed: %s", #call, E.message);                                           \
    } while (0)

/* ---- helpers ---- */

static uint64_t rng = 0x853c49e6748fea9bull;

/* xorshift64*: deterministic across runs. */
static uint64_t next_u64(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

/* Uniform integer in [0, n). */
static size_t urand(size_t n) { return (size_t)(next_u64() % n); }

/* Uniform in [lo, hi). */
static float frand(float lo, float hi)
{
    return lo + (hi - lo) * (float)(next_u64() >> 40) * (1.0f / 16777216.0f);
}

static void fill(float *v, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = frand(lo, hi);
}

static float *floats(size_t n)
{
    float *v = calloc(n, sizeof *v);
    assert_non_null(v);
    return v;
}

static tw_tensor view(tw_buffer *b) { return tw_tensor_of(b); }

static tw_buffer *dev_new(size_t floats_n)
{
    tw_buffer *b = NULL;
    OK(tw_backend_alloc(B, floats_n * sizeof(float), &b, &E));
    return b;
}

static tw_buffer *dev_from(const void *v, size_t n) /* n values of 4 bytes: fp32 or int32 */
{
    tw_buffer *b = dev_new(n);
    OK(tw_backend_upload(B, view(b), v, n * 4, &E));
    return b;
}

static void dev_read(void *v, tw_buffer *b, size_t n)
{
    OK(tw_backend_download(B, v, view(b), n * 4, &E));
}

static void dev_fill_nan(tw_buffer *b, size_t n)
{
    float *v = floats(n);
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    OK(tw_backend_upload(B, view(b), v, n * 4, &E));
    free(v);
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

static void assert_near(double got, double want, double rel, double abs_tol, const char *what, size_t i)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol))
        fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, got, want);
}

static void assert_all_near(const float *got, const double *want, size_t n, double rel, double abs_tol,
                            const char *what)
{
    for (size_t i = 0; i < n; i++)
        assert_near(got[i], want[i], rel, abs_tol, what, i);
}

/* ---- finite differences ---- */

typedef double (*scalar_fn)(void *ctx);

static const float FD_EPS = 1e-3f;

/* Central differences of f with respect to each p[i] (restored after), against grad[i]. f reads p. */
static void check_fd(const char *what, float *p, size_t n, const float *grad, scalar_fn f, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        float v = p[i];
        float hi = v + FD_EPS, lo = v - FD_EPS;
        p[i] = hi;
        double lp = f(ctx);
        p[i] = lo;
        double lm = f(ctx);
        p[i] = v;
        double fd = (lp - lm) / ((double)hi - (double)lo);
        if (!(fabs(fd - grad[i]) <= 1e-2 * (fabs(fd) + fabs(grad[i])) + 2e-3))
            fail_msg("%s[%zu]: finite difference %.6g, analytic %.6g", what, i, fd, grad[i]);
    }
}

/* ---- gemm and dense ---- */

/* Naive C = alpha op(A) op(B) + beta C in double, storage as tw_gemm's. */
static void gemm_ref(int ta, int tb, int m, int n, int k, double alpha, const float *a, const float *b,
                     double beta, const float *c, double *out)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            out[i * n + j] = alpha * s + (beta != 0.0 ? beta * c[i * n + j] : 0.0);
        }
}

/* All four transpose combinations with alpha and beta, on views at offsets; beta 0 ignores a NaN C. */
static void test_gemm_transposes(void **state)
{
    (void)state;
    enum { M = 3, N = 4, K = 5, PAD = 3 };
    float a[M * K], b[K * N], c[M * N], got[M * N];
    double want[M * N];
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            fill(a, M * K, -1, 1);
            fill(b, K * N, -1, 1);
            fill(c, M * N, -1, 1);
            tw_buffer *buf = dev_new(PAD + M * K + K * N + M * N);
            tw_tensor va = tw_tensor_at(view(buf), PAD), vb = tw_tensor_at(va, M * K),
                      vc = tw_tensor_at(vb, K * N);
            OK(tw_backend_upload(B, va, a, sizeof a, &E));
            OK(tw_backend_upload(B, vb, b, sizeof b, &E));
            OK(tw_backend_upload(B, vc, c, sizeof c, &E));
            OK(tw_gemm(B, ta, tb, M, N, K, 0.5f, va, vb, 2.0f, vc, &E));
            OK(tw_backend_download(B, got, vc, sizeof got, &E));
            gemm_ref(ta, tb, M, N, K, 0.5, a, b, 2.0, c, want);
            assert_all_near(got, want, M * N, 1e-5, 1e-6, "gemm");
            for (int i = 0; i < M * N; i++)
                c[i] = NAN;
            OK(tw_backend_upload(B, vc, c, sizeof c, &E));
            OK(tw_gemm(B, ta, tb, M, N, K, 1.0f, va, vb, 0.0f, vc, &E));
            OK(tw_backend_download(B, got, vc, sizeof got, &E));
            gemm_ref(ta, tb, M, N, K, 1.0, a, b, 0.0, c, want);
            assert_all_near(got, want, M * N, 1e-5, 1e-6, "gemm beta 0");
            tw_backend_free(B, buf);
        }
}

/* A product large enough for the CPU backend's threaded GEMM (more than 32 M multiply-adds, with the
 * plan's share of the cores for one tower): near the reference in double, and the same bits on a second
 * run (a resumed run multiplies alike). */
static void test_gemm_large(void **state)
{
    (void)state;
    enum { M = 256, N = 520, K = 512 };
    int threads;
    OK(tw_backend_plan("cpu", 1, &threads, &E));
    assert_true(threads >= 1);
    float *a = floats(M * K), *b = floats(K * N), *got = floats(M * N), *again = floats(M * N);
    double *want = malloc(M * N * sizeof *want);
    assert_non_null(want);
    fill(a, M * K, -1, 1);
    fill(b, K * N, -1, 1);
    tw_buffer *va = dev_from(a, M * K), *vb = dev_from(b, K * N), *vc = dev_new(M * N);
    /* a weight gradient's shape: a transposed, the sum over the batch */
    OK(tw_gemm(B, 1, 0, M, N, K, 1.0f, view(va), view(vb), 0.0f, view(vc), &E));
    dev_read(got, vc, M * N);
    OK(tw_gemm(B, 1, 0, M, N, K, 1.0f, view(va), view(vb), 0.0f, view(vc), &E));
    dev_read(again, vc, M * N);
    assert_memory_equal(got, again, M * N * sizeof *got);
    gemm_ref(1, 0, M, N, K, 1.0, a, b, 0.0, NULL, want);
    assert_all_near(got, want, M * N, 1e-4, 1e-4, "large gemm");
    tw_backend_free(B, va);
    tw_backend_free(B, vb);
    tw_backend_free(B, vc);
    free(a);
    free(b);
    free(got);
    free(again);
    free(want);
}

enum { DR = 4, DI = 5, DO = 3 }; /* dense: rows, inputs, outputs */

typedef struct {
    float x[DR * DI]; /* [4, 5] */
    float w[DI * DO]; /* [5, 3] */
    float b[DO];      /* [3] */
    float r[DR * DO]; /* [4, 3]: the loss is <y, r>, so dL/dy = r */
} dense_case;

/* y[4, 3] = x w + b through the backend. */
static void dense_fwd(const dense_case *c, float *y)
{
    tw_buffer *x = dev_from(c->x, DR * DI), *w = dev_from(c->w, DI * DO), *b = dev_from(c->b, DO);
    tw_buffer *yb = dev_new(DR * DO);
    OK(tw_gemm(B, 0, 0, DR, DO, DI, 1.0f, view(x), view(w), 0.0f, view(yb), &E));
    OK(tw_bias_add(B, view(yb), view(b), DR, DO, &E));
    dev_read(y, yb, DR * DO);
    tw_backend_free(B, x);
    tw_backend_free(B, w);
    tw_backend_free(B, b);
    tw_backend_free(B, yb);
}

static double dense_loss(void *ctx)
{
    dense_case *c = ctx;
    float y[DR * DO];
    dense_fwd(c, y);
    return dot(y, c->r, DR * DO);
}

/* Dense forward against a naive product; dx = dy w^T, dw = x^T dy and db = sum of dy rows against
 * finite differences. */
static void test_dense_gradients(void **state)
{
    (void)state;
    dense_case c;
    fill(c.x, DR * DI, -1, 1);
    fill(c.w, DI * DO, -1, 1);
    fill(c.b, DO, -1, 1);
    fill(c.r, DR * DO, -1, 1);
    float y[DR * DO];
    double want[DR * DO];
    dense_fwd(&c, y);
    gemm_ref(0, 0, DR, DO, DI, 1.0, c.x, c.w, 0.0, NULL, want);
    for (int i = 0; i < DR * DO; i++)
        want[i] += c.b[i % DO];
    assert_all_near(y, want, DR * DO, 1e-5, 1e-6, "dense y");

    tw_buffer *x = dev_from(c.x, DR * DI), *w = dev_from(c.w, DI * DO), *dy = dev_from(c.r, DR * DO);
    tw_buffer *dx = dev_new(DR * DI), *dw = dev_new(DI * DO), *db = dev_new(DO);
    dev_fill_nan(db, DO);
    OK(tw_gemm(B, 0, 1, DR, DI, DO, 1.0f, view(dy), view(w), 0.0f, view(dx), &E));
    OK(tw_gemm(B, 1, 0, DI, DO, DR, 1.0f, view(x), view(dy), 0.0f, view(dw), &E));
    OK(tw_bias_grad(B, view(db), view(dy), DR, DO, &E));
    float gx[DR * DI], gw[DI * DO], gb[DO];
    dev_read(gx, dx, DR * DI);
    dev_read(gw, dw, DI * DO);
    dev_read(gb, db, DO);
    check_fd("dense dx", c.x, DR * DI, gx, dense_loss, &c);
    check_fd("dense dw", c.w, DI * DO, gw, dense_loss, &c);
    check_fd("dense db", c.b, DO, gb, dense_loss, &c);
    tw_buffer *bufs[] = {x, w, dy, dx, dw, db};
    for (size_t i = 0; i < 6; i++)
        tw_backend_free(B, bufs[i]);
}

/* bias_grad sums 1000 rows in row order in float: exactly the sequential float sum. */
static void test_bias_grad_order(void **state)
{
    (void)state;
    enum { R = 1000, C = 3 };
    float *dy = floats(R * C), got[C], want[C] = {0, 0, 0};
    fill(dy, R * C, -1, 1);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            want[c] += dy[r * C + c];
    tw_buffer *bdy = dev_from(dy, R * C), *bdb = dev_new(C);
    OK(tw_bias_grad(B, view(bdb), view(bdy), R, C, &E));
    dev_read(got, bdb, C);
    assert_memory_equal(got, want, sizeof want);
    tw_backend_free(B, bdy);
    tw_backend_free(B, bdb);
    free(dy);
}

/* ---- activations and dropout ---- */

enum { AN = 64 };

typedef struct {
    tw_activation a;
    float x[AN], r[AN];
} act_case;

static double act_loss(void *ctx)
{
    act_case *c = ctx;
    float y[AN];
    tw_buffer *b = dev_from(c->x, AN);
    OK(tw_act_fwd(B, c->a, view(b), view(b), AN, &E)); /* in place */
    dev_read(y, b, AN);
    tw_backend_free(B, b);
    return dot(y, c->r, AN);
}

static double act_ref(tw_activation a, double x)
{
    switch (a) {
    case TW_ACT_RELU: return x > 0 ? x : 0;
    case TW_ACT_TANH: return tanh(x);
    case TW_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return x;
    }
}

/* Each activation: forward against libm in double, backward (from the output) by finite differences;
 * inputs keep away from ReLU's kink. */
static void test_activations(void **state)
{
    (void)state;
    const tw_activation acts[] = {TW_ACT_NONE, TW_ACT_RELU, TW_ACT_TANH, TW_ACT_SIGMOID};
    for (size_t k = 0; k < 4; k++) {
        act_case c = {.a = acts[k]};
        for (int i = 0; i < AN; i++) {
            do
                c.x[i] = frand(-3, 3);
            while (fabsf(c.x[i]) < 0.01f);
        }
        fill(c.r, AN, -1, 1);
        tw_buffer *x = dev_from(c.x, AN), *y = dev_new(AN), *dy = dev_from(c.r, AN);
        tw_buffer *dx = dev_new(AN);
        OK(tw_act_fwd(B, c.a, view(y), view(x), AN, &E));
        OK(tw_act_bwd(B, c.a, view(dx), view(dy), view(y), AN, &E));
        float gy[AN], gdx[AN];
        double want[AN];
        dev_read(gy, y, AN);
        dev_read(gdx, dx, AN);
        for (int i = 0; i < AN; i++)
            want[i] = act_ref(c.a, c.x[i]);
        assert_all_near(gy, want, AN, 1e-6, 1e-7, "act y");
        check_fd("act dx", c.x, AN, gdx, act_loss, &c);
        tw_backend_free(B, x);
        tw_backend_free(B, y);
        tw_backend_free(B, dy);
        tw_backend_free(B, dx);
    }
}

/* Each activation in place (y = x, dx = dy, as every layer calls them) gives the same bits as out of
 * place, with NaN, infinities and signed zeros among the values. */
static void test_activations_in_place(void **state)
{
    (void)state;
    enum { IN = 1000 };
    const tw_activation acts[] = {TW_ACT_NONE, TW_ACT_RELU, TW_ACT_TANH, TW_ACT_SIGMOID};
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f};
    float x[IN], d[IN], out[IN], in_place[IN];
    fill(x, IN, -4, 4);
    fill(d, IN, -1, 1);
    for (size_t i = 0; i < 7; i++) {
        x[i * 3] = d[i * 5 + 1] = special[i];
        d[i * 3] = x[i * 5 + 1] = special[i];
    }
    for (size_t k = 0; k < 4; k++) {
        tw_buffer *bx = dev_from(x, IN), *by = dev_new(IN), *bd = dev_from(d, IN), *bdx = dev_new(IN);
        OK(tw_act_fwd(B, acts[k], view(by), view(bx), IN, &E));
        dev_read(out, by, IN);
        OK(tw_act_fwd(B, acts[k], view(bx), view(bx), IN, &E));
        dev_read(in_place, bx, IN);
        assert_memory_equal(out, in_place, sizeof out);
        OK(tw_act_bwd(B, acts[k], view(bdx), view(bd), view(by), IN, &E));
        dev_read(out, bdx, IN);
        OK(tw_act_bwd(B, acts[k], view(bd), view(bd), view(by), IN, &E));
        dev_read(in_place, bd, IN);
        assert_memory_equal(out, in_place, sizeof out);
        tw_backend_free(B, bx);
        tw_backend_free(B, by);
        tw_backend_free(B, bd);
        tw_backend_free(B, bdx);
    }
}

/* Dropout: one seed one mask (forward and backward), another seed another mask; kept values scaled
 * by 1/(1-rate); the kept fraction over 100k elements within 1% of 1 - rate. */
static void test_dropout(void **state)
{
    (void)state;
    enum { N = 100000 };
    const float rate = 0.3f;
    float *x = floats(N), *y = floats(N), *y2 = floats(N), *dx = floats(N);
    fill(x, N, 0.5f, 1.5f);
    tw_buffer *bx = dev_from(x, N), *by = dev_new(N), *bd = dev_from(x, N);
    OK(tw_dropout_fwd(B, view(by), view(bx), N, rate, 42, &E));
    dev_read(y, by, N);
    OK(tw_dropout_fwd(B, view(by), view(bx), N, rate, 42, &E));
    dev_read(y2, by, N);
    assert_memory_equal(y, y2, N * sizeof *y);
    OK(tw_dropout_bwd(B, view(bd), view(bd), N, rate, 42, &E)); /* in place, dy = x */
    dev_read(dx, bd, N);
    assert_memory_equal(dx, y, N * sizeof *y);
    size_t kept = 0;
    for (size_t i = 0; i < N; i++) {
        if (y[i] != 0.0f) {
            kept++;
            assert_near(y[i], x[i] / (1.0 - rate), 1e-6, 0, "dropout kept", i);
        }
    }
    assert_near((double)kept / N, 1.0 - rate, 0, 0.01, "kept fraction", 0);
    OK(tw_dropout_fwd(B, view(by), view(bx), N, rate, 43, &E));
    dev_read(y2, by, N);
    size_t differ = 0;
    for (size_t i = 0; i < N; i++)
        differ += (y[i] == 0.0f) != (y2[i] == 0.0f);
    assert_true(differ > N / 4);
    tw_backend_free(B, bx);
    tw_backend_free(B, by);
    tw_backend_free(B, bd);
    free(x);
    free(y);
    free(y2);
    free(dx);
}

/* ---- windows: convolution through im2col + gemm, max-pool ---- */

static size_t win_rows(const tw_window *w)
{
    return (size_t)w->batch * w->out_d * w->out_h * w->out_w;
}

static size_t win_taps(const tw_window *w) { return (size_t)w->k_d * w->k_h * w->k_w; }

static size_t win_x(const tw_window *w)
{
    return (size_t)w->batch * w->in_d * w->in_h * w->in_w * w->in_c;
}

/* Reference geometry, written independently of the backend: the flat index into x of channel 0 under
 * tap `tap` of output position `row`, or -1 in the padding. */
static long ref_tap(const tw_window *w, size_t row, size_t tap)
{
    int ow = (int)(row % w->out_w), oh = (int)(row / w->out_w % w->out_h);
    int od = (int)(row / w->out_w / w->out_h % w->out_d);
    long b = (long)(row / w->out_w / w->out_h / w->out_d);
    int kw = (int)(tap % w->k_w), kh = (int)(tap / w->k_w % w->k_h), kd = (int)(tap / w->k_w / w->k_h);
    int id = od * w->s_d + kd - w->pad_d, ih = oh * w->s_h + kh - w->pad_h;
    int iw = ow * w->s_w + kw - w->pad_w;
    if (id < 0 || id >= w->in_d || ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w)
        return -1;
    return (((b * w->in_d + id) * w->in_h + ih) * w->in_w + iw) * w->in_c;
}

static tw_window window2d(int batch, int h, int wd, int c, int k, int s, int same)
{
    tw_window w = {.batch = batch, .in_d = 1, .in_h = h, .in_w = wd, .in_c = c, .k_d = 1, .k_h = k,
                   .k_w = k, .s_d = 1, .s_h = s, .s_w = s};
    OK(tw_window_resolve(&w, same, &E));
    return w;
}

static tw_window window3d(int batch, int d, int h, int wd, int c, int kd, int kh, int kw, int s,
                          int same)
{
    tw_window w = {.batch = batch, .in_d = d, .in_h = h, .in_w = wd, .in_c = c, .k_d = kd,
                   .k_h = kh, .k_w = kw, .s_d = s, .s_h = s, .s_w = s};
    OK(tw_window_resolve(&w, same, &E));
    return w;
}

typedef struct {
    tw_window w;
    int filters;
    float *x; /* [batch, in_d, in_h, in_w, in_c] */
    float *f; /* [k_d * k_h * k_w * in_c, filters] (TensorFlow's [k_d, k_h, k_w, in_c, filters]) */
    float *b; /* [filters] bias */
    float *r; /* [rows, filters]: the loss is <y, r> */
    int direct; /* 1: the backend's direct convolution (tw_conv_*); 0: im2col + gemm */
} conv_case;

/* y[rows, filters] = conv(x, f) + b through the backend: tw_conv_fwd or im2col(x) f + bias_add. */
static void conv_fwd(const conv_case *c, float *y)
{
    size_t rows = win_rows(&c->w), k = win_taps(&c->w) * (size_t)c->w.in_c;
    tw_buffer *x = dev_from(c->x, win_x(&c->w)), *f = dev_from(c->f, k * c->filters);
    tw_buffer *cols = dev_new(rows * k), *yb = dev_new(rows * c->filters);
    tw_buffer *bb = dev_from(c->b, (size_t)c->filters);
    if (c->direct) {
        dev_fill_nan(yb, rows * c->filters); /* overwritten */
        OK(tw_conv_fwd(B, &c->w, c->filters, view(yb), view(x), view(f), view(bb), &E));
    } else {
        OK(tw_im2col(B, &c->w, view(cols), view(x), &E));
        OK(tw_gemm(B, 0, 0, (int)rows, c->filters, (int)k, 1.0f, view(cols), view(f), 0.0f, view(yb),
                   &E));
        OK(tw_bias_add(B, view(yb), view(bb), (int)rows, c->filters, &E));
    }
    tw_backend_free(B, bb);
    dev_read(y, yb, rows * c->filters);
    tw_backend_free(B, x);
    tw_backend_free(B, f);
    tw_backend_free(B, cols);
    tw_backend_free(B, yb);
}

static double conv_loss(void *ctx)
{
    conv_case *c = ctx;
    size_t n = win_rows(&c->w) * c->filters;
    float *y = floats(n);
    conv_fwd(c, y);
    double l = dot(y, c->r, n);
    free(y);
    return l;
}

/* Direct convolution in double with the reference geometry. */
static void conv_ref(const conv_case *c, double *y)
{
    const tw_window *w = &c->w;
    int F = c->filters, C = w->in_c;
    for (size_t row = 0; row < win_rows(w); row++)
        for (int fo = 0; fo < F; fo++) {
            double s = c->b[fo];
            for (size_t t = 0; t < win_taps(w); t++) {
                long at = ref_tap(w, row, t);
                for (int ch = 0; at >= 0 && ch < C; ch++)
                    s += (double)c->x[at + ch] * c->f[(t * C + ch) * F + fo];
            }
            y[row * F + fo] = s;
        }
}

/* The input, filter and bias gradients of conv_fwd for output gradient dy: tw_conv_bwd,
 * or dx = col2im(dy f^T), df = im2col(x)^T dy and bias_grad. */
static void conv_bwd(const conv_case *c, tw_buffer *x, tw_buffer *f, tw_buffer *dy, tw_buffer *dx,
                     tw_buffer *df, tw_buffer *db)
{
    const tw_window *w = &c->w;
    size_t rows = win_rows(w), k = win_taps(w) * (size_t)w->in_c;
    if (c->direct) {
        dev_fill_nan(dx, win_x(w)); /* all overwrite */
        dev_fill_nan(df, k * c->filters);
        dev_fill_nan(db, (size_t)c->filters);
        OK(tw_conv_bwd(B, w, c->filters, view(df), view(db), view(dx), view(x), view(dy), view(f), &E));
        return;
    }
    OK(tw_bias_grad(B, view(db), view(dy), (int)rows, c->filters, &E));
    tw_buffer *cols = dev_new(rows * k), *dcols = dev_new(rows * k);
    OK(tw_im2col(B, w, view(cols), view(x), &E));
    OK(tw_gemm(B, 1, 0, (int)k, c->filters, (int)rows, 1.0f, view(cols), view(dy), 0.0f, view(df),
               &E));
    OK(tw_gemm(B, 0, 1, (int)rows, (int)k, c->filters, 1.0f, view(dy), view(f), 0.0f, view(dcols),
               &E));
    OK(tw_col2im(B, w, view(dx), view(dcols), &E));
    tw_backend_free(B, cols);
    tw_backend_free(B, dcols);
}

/* A convolution case of random values in [-1, 1); conv_case_free frees it. */
static conv_case conv_case_new(tw_window w, int filters, int direct)
{
    conv_case c = {.w = w, .filters = filters, .direct = direct};
    size_t nx = win_x(&w), nf = win_taps(&w) * (size_t)w.in_c * filters, ny = win_rows(&w) * filters;
    c.x = floats(nx);
    c.f = floats(nf);
    c.b = floats((size_t)filters);
    c.r = floats(ny);
    fill(c.x, nx, -1, 1);
    fill(c.f, nf, -1, 1);
    fill(c.b, (size_t)filters, -1, 1);
    fill(c.r, ny, -1, 1);
    return c;
}

static void conv_case_free(conv_case *c)
{
    free(c->x);
    free(c->f);
    free(c->b);
    free(c->r);
}

/* c's forward into y and its input, filter and bias gradients for dy = c->r into gx, gf and gb. */
static void conv_run(const conv_case *c, float *y, float *gx, float *gf, float *gb)
{
    size_t nx = win_x(&c->w), nf = win_taps(&c->w) * (size_t)c->w.in_c * c->filters;
    size_t ny = win_rows(&c->w) * c->filters;
    conv_fwd(c, y);
    tw_buffer *x = dev_from(c->x, nx), *f = dev_from(c->f, nf), *dy = dev_from(c->r, ny);
    tw_buffer *dx = dev_new(nx), *df = dev_new(nf), *db = dev_new((size_t)c->filters);
    conv_bwd(c, x, f, dy, dx, df, db);
    dev_read(gx, dx, nx);
    dev_read(gf, df, nf);
    dev_read(gb, db, (size_t)c->filters);
    tw_buffer *bufs[] = {x, f, dy, dx, df, db};
    for (size_t i = 0; i < 6; i++)
        tw_backend_free(B, bufs[i]);
}

/* Convolution forward against the direct formula, its input, filter and bias gradients against finite
 * differences, by one route. */
static void check_conv_route(tw_window w, int filters, int direct)
{
    conv_case c = conv_case_new(w, filters, direct);
    size_t nx = win_x(&w), nf = win_taps(&w) * (size_t)w.in_c * filters, ny = win_rows(&w) * filters;
    float *y = floats(ny), *gx = floats(nx), *gf = floats(nf), *gb = floats((size_t)filters);
    double *want = calloc(ny, sizeof *want);
    conv_run(&c, y, gx, gf, gb);
    conv_ref(&c, want);
    assert_all_near(y, want, ny, 1e-5, 1e-5, "conv y");
    check_fd(direct ? "direct conv dx" : "conv dx", c.x, nx, gx, conv_loss, &c);
    check_fd(direct ? "direct conv df" : "conv df", c.f, nf, gf, conv_loss, &c);
    check_fd(direct ? "direct conv db" : "conv db", c.b, (size_t)filters, gb, conv_loss, &c);
    conv_case_free(&c);
    free(y);
    free(gx);
    free(gf);
    free(gb);
    free(want);
}

/* check_conv_route by both routes (the CPU backend has the direct one). */
static void check_conv(tw_window w, int filters)
{
    assert_true(tw_backend_has_conv(B));
    check_conv_route(w, filters, 0);
    check_conv_route(w, filters, 1);
}

/* 2-D SAME at stride 2, k3: 6x7 -> 3x4 (h pads 0 before and 1 after, w 1 and 1), and the transpose
 * 7x6 -> 4x3 (h 1 and 1, w 0 and 1). */
static void test_conv2d_same_stride2(void **state)
{
    (void)state;
    tw_window w = window2d(2, 6, 7, 3, 3, 2, 1);
    assert_int_equal(w.out_h, 3);
    assert_int_equal(w.out_w, 4);
    assert_int_equal(w.pad_h, 0);
    assert_int_equal(w.pad_w, 1);
    check_conv(w, 2);
    w = window2d(1, 7, 6, 2, 3, 2, 1);
    assert_int_equal(w.out_h, 4);
    assert_int_equal(w.out_w, 3);
    assert_int_equal(w.pad_h, 1);
    assert_int_equal(w.pad_w, 0);
    check_conv(w, 3);
}

/* 3-D VALID: 5x4x4 k2x3x2 stride 1 -> 4x2x3. */
static void test_conv3d_valid(void **state)
{
    (void)state;
    tw_window w = window3d(2, 5, 4, 4, 2, 2, 3, 2, 1, 0);
    assert_int_equal(w.out_d, 4);
    assert_int_equal(w.out_h, 2);
    assert_int_equal(w.out_w, 3);
    check_conv(w, 3);
}

/* 3-D SAME at stride 2 (asymmetric padding in d, h and w): 5x6x5 k3 -> 3x3x3; 2-D VALID at stride 2
 * that leaves a row and a column of the input over: 7x8 k2 -> 3x4 (the last row unused). */
static void test_conv_same3d_valid_leftover(void **state)
{
    (void)state;
    tw_window w = window3d(1, 5, 6, 5, 2, 3, 3, 3, 2, 1);
    assert_int_equal(w.out_d, 3);
    assert_int_equal(w.out_h, 3);
    check_conv(w, 4);
    w = window2d(2, 7, 8, 3, 2, 2, 0);
    assert_int_equal(w.out_h, 3);
    assert_int_equal(w.out_w, 4);
    check_conv(w, 5);
}

/* tw_conv_bwd without dx: the same filter and bias gradients, bit for bit, as with it. */
static void check_conv_bwd_without_dx(tw_window w, int filters)
{
    size_t nx = win_x(&w), nf = win_taps(&w) * (size_t)w.in_c * filters, ny = win_rows(&w) * filters;
    float *hx = floats(nx), *hf = floats(nf), *hy = floats(ny), *want = floats(nf + filters);
    float *got = floats(nf + filters);
    fill(hx, nx, -1, 1);
    fill(hf, nf, -1, 1);
    fill(hy, ny, -1, 1);
    tw_buffer *x = dev_from(hx, nx), *f = dev_from(hf, nf), *dy = dev_from(hy, ny), *dx = dev_new(nx);
    tw_buffer *df = dev_new(nf), *db = dev_new((size_t)filters);
    OK(tw_conv_bwd(B, &w, filters, view(df), view(db), view(dx), view(x), view(dy), view(f), &E));
    dev_read(want, df, nf);
    dev_read(want + nf, db, (size_t)filters);
    dev_fill_nan(df, nf);
    dev_fill_nan(db, (size_t)filters);
    OK(tw_conv_bwd(B, &w, filters, view(df), view(db), (tw_tensor){0}, view(x), view(dy), (tw_tensor){0}, &E));
    dev_read(got, df, nf);
    dev_read(got + nf, db, (size_t)filters);
    assert_memory_equal(got, want, (nf + filters) * sizeof *got);
    tw_buffer *bufs[] = {x, f, dy, dx, df, db};
    for (size_t i = 0; i < 6; i++)
        tw_backend_free(B, bufs[i]);
    free(hx);
    free(hf);
    free(hy);
    free(want);
    free(got);
}

/* Winograd's convolutions (tw_math.winograd; oneDNN's on AVX-512, direct elsewhere): the forward and the
 * three gradients of a 3x3 stride-1 window of 16 channels and filters (Winograd's) and of one at stride 2
 * (direct's: the same bits) against the direct route's (checked against the formula and finite
 * differences above; a finite difference of Winograd's forward is lost in its rounding), within 1e-5; the
 * backward without dx as with it; direct again once turned off. */
static void test_conv_winograd(void **state)
{
    (void)state;
    tw_math on = {.winograd = 1}, off = {0};
    const tw_window ws[] = {window2d(2, 9, 11, 16, 3, 1, 1), window2d(2, 9, 11, 16, 3, 2, 1)};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        conv_case c = conv_case_new(ws[i], 16, 1);
        size_t n[4] = {win_rows(&ws[i]) * 16, win_x(&ws[i]), win_taps(&ws[i]) * 16 * 16, 16};
        float *got[4], *want[4];
        for (int k = 0; k < 4; k++) {
            got[k] = floats(n[k]);
            want[k] = floats(n[k]);
        }
        conv_run(&c, want[0], want[1], want[2], want[3]);
        OK(tw_backend_set_math(B, &on, &E));
        conv_run(&c, got[0], got[1], got[2], got[3]);
        check_conv_bwd_without_dx(ws[i], 16);
        OK(tw_backend_set_math(B, &off, &E));
        for (int k = 0; k < 4; k++) {
            if (i == 1) /* not Winograd's window: direct's bits */
                assert_memory_equal(got[k], want[k], n[k] * sizeof *got[k]);
            double *w = calloc(n[k], sizeof *w);
            for (size_t j = 0; j < n[k]; j++)
                w[j] = want[k][j];
            assert_all_near(got[k], w, n[k], 1e-5, 1e-5, "winograd against direct");
            free(w);
            free(got[k]);
            free(want[k]);
        }
        conv_case_free(&c);
    }
    check_conv_route(ws[0], 16, 1);
}

/* <im2col(x), c> == <x, col2im(c)> for padded, strided, 2-D and 3-D windows; col2im zeroes dx first. */
static void test_col2im_adjoint(void **state)
{
    (void)state;
    const tw_window ws[] = {
        window2d(2, 7, 6, 3, 3, 2, 1),
        window2d(1, 9, 9, 2, 5, 1, 1),
        window3d(2, 5, 4, 4, 2, 2, 3, 2, 1, 0),
        window3d(1, 5, 6, 5, 2, 3, 3, 3, 2, 1),
    };
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        size_t nx = win_x(&ws[i]), nc = win_rows(&ws[i]) * win_taps(&ws[i]) * ws[i].in_c;
        float *x = floats(nx), *c = floats(nc), *ix = floats(nc), *cx = floats(nx);
        fill(x, nx, -1, 1);
        fill(c, nc, -1, 1);
        tw_buffer *bx = dev_from(x, nx), *bc = dev_from(c, nc), *bix = dev_new(nc), *bcx = dev_new(nx);
        dev_fill_nan(bcx, nx);
        OK(tw_im2col(B, &ws[i], view(bix), view(bx), &E));
        OK(tw_col2im(B, &ws[i], view(bcx), view(bc), &E));
        dev_read(ix, bix, nc);
        dev_read(cx, bcx, nx);
        assert_near(dot(ix, c, nc), dot(x, cx, nx), 1e-5, 1e-6, "adjoint", i);
        tw_backend_free(B, bx);
        tw_backend_free(B, bc);
        tw_backend_free(B, bix);
        tw_backend_free(B, bcx);
        free(x);
        free(c);
        free(ix);
        free(cx);
    }
}

typedef struct {
    tw_window w;
    float *x; /* [batch, in_d, in_h, in_w, in_c], distinct values 0.01 apart */
    float *r; /* [rows, in_c]: the loss is <y, r> */
    int relu; /* 1: y = maxpool(relu(x)), the ReLU through tw_act_fwd; 0: y = maxpool(x) */
} pool_case;

/* c->x: the values (i - n/2) * 0.01 + offset shuffled, c->r uniform in [-1, 1); caller frees both. */
static void pool_case_fill(pool_case *c, float offset)
{
    size_t nx = win_x(&c->w), ny = win_rows(&c->w) * c->w.in_c;
    c->x = floats(nx);
    c->r = floats(ny);
    for (size_t i = 0; i < nx; i++)
        c->x[i] = ((float)i - (float)nx / 2) * 0.01f + offset;
    for (size_t i = nx - 1; i > 0; i--) { /* shuffle */
        size_t j = urand(i + 1);
        float t = c->x[i];
        c->x[i] = c->x[j];
        c->x[j] = t;
    }
    fill(c->r, ny, -1, 1);
}

static double pool_loss(void *ctx)
{
    pool_case *c = ctx;
    size_t nx = win_x(&c->w), ny = win_rows(&c->w) * c->w.in_c;
    tw_buffer *x = dev_from(c->x, nx), *y = dev_new(ny), *am = dev_new(ny);
    float *hy = floats(ny);
    if (c->relu)
        OK(tw_act_fwd(B, TW_ACT_RELU, view(x), view(x), nx, &E));
    OK(tw_maxpool_fwd(B, &c->w, view(y), view(am), view(x), &E));
    dev_read(hy, y, ny);
    double l = dot(hy, c->r, ny);
    tw_backend_free(B, x);
    tw_backend_free(B, y);
    tw_backend_free(B, am);
    free(hy);
    return l;
}

/* Max and its index over each window with the reference geometry. */
static void pool_ref(const pool_case *c, float *y, int32_t *argmax)
{
    const tw_window *w = &c->w;
    for (size_t row = 0; row < win_rows(w); row++)
        for (int ch = 0; ch < w->in_c; ch++) {
            long best = -1;
            for (size_t t = 0; t < win_taps(w); t++) {
                long at = ref_tap(w, row, t);
                if (at >= 0 && (best < 0 || c->x[at + ch] > c->x[best]))
                    best = at + ch;
            }
            y[row * w->in_c + ch] = c->x[best];
            argmax[row * w->in_c + ch] = (int32_t)best;
        }
}

/* Max-pool forward (values and argmax) against the naive max; backward by finite differences, with
 * inputs 0.01 apart so that no step of 1e-3 changes a window's winner. */
static void check_pool(tw_window w)
{
    pool_case c = {.w = w};
    size_t nx = win_x(&w), ny = win_rows(&w) * w.in_c;
    pool_case_fill(&c, 0.0f);
    float *y = floats(ny), *want = floats(ny), *gx = floats(nx);
    int32_t *am = calloc(ny, sizeof *am), *want_am = calloc(ny, sizeof *want_am);
    tw_buffer *bx = dev_from(c.x, nx), *by = dev_new(ny), *bam = dev_new(ny), *bdy = dev_from(c.r, ny);
    tw_buffer *bdx = dev_new(nx);
    dev_fill_nan(bdx, nx);
    OK(tw_maxpool_fwd(B, &w, view(by), view(bam), view(bx), &E));
    OK(tw_maxpool_bwd(B, &w, view(bdx), view(bdy), view(bam), &E));
    dev_read(y, by, ny);
    dev_read(am, bam, ny);
    dev_read(gx, bdx, nx);
    pool_ref(&c, want, want_am);
    assert_memory_equal(y, want, ny * sizeof *y);
    assert_memory_equal(am, want_am, ny * sizeof *am);
    check_fd("maxpool dx", c.x, nx, gx, pool_loss, &c);
    tw_buffer *bufs[] = {bx, by, bam, bdy, bdx};
    for (size_t i = 0; i < 5; i++)
        tw_backend_free(B, bufs[i]);
    free(c.x);
    free(c.r);
    free(y);
    free(want);
    free(gx);
    free(am);
    free(want_am);
}

static void test_maxpool2d(void **state)
{
    (void)state;
    check_pool(window2d(2, 6, 5, 3, 2, 2, 1)); /* SAME, odd padding after in w */
    check_pool(window2d(2, 7, 5, 3, 3, 2, 1)); /* SAME, padding before, overlapping windows */
    check_pool(window2d(1, 7, 7, 2, 3, 2, 0)); /* VALID */
}

static void test_maxpool3d(void **state)
{
    (void)state;
    check_pool(window3d(2, 4, 4, 4, 2, 2, 2, 2, 2, 0)); /* VALID */
    check_pool(window3d(1, 5, 4, 5, 2, 3, 3, 3, 2, 1)); /* SAME, overlapping */
}

/* tw_maxpool_bwd_relu over window w: bit for bit tw_maxpool_bwd then tw_act_bwd(RELU) over all of dx
 * (dy holding infinities, signed zeros, NaN and values whose sum overflows where windows overlap), and
 * the gradient of <maxpool(relu(x)), r> against finite differences. x: distinct values 0.01 apart,
 * half of them negative, none within a step of 0, so no step moves a ReLU kink or a window's winner. */
static void check_pool_relu(tw_window w)
{
    pool_case c = {.w = w, .relu = 1};
    size_t nx = win_x(&w), ny = win_rows(&w) * w.in_c;
    pool_case_fill(&c, 0.005f);
    float *dy = floats(ny), *two = floats(nx), *one = floats(nx);
    memcpy(dy, c.r, ny * sizeof *dy);
    const float special[] = {INFINITY, -INFINITY, -0.0f, 0.0f, NAN, FLT_MAX, FLT_MAX};
    for (size_t i = 0; i < sizeof special / sizeof special[0] && i < ny; i++)
        dy[urand(ny)] = special[i];
    tw_buffer *bx = dev_from(c.x, nx), *by = dev_new(ny), *bam = dev_new(ny), *bdy = dev_from(dy, ny);
    tw_buffer *bdx = dev_new(nx), *bgx = dev_new(nx), *br = dev_from(c.r, ny);
    OK(tw_act_fwd(B, TW_ACT_RELU, view(bx), view(bx), nx, &E)); /* bx is now the pool's input */
    OK(tw_maxpool_fwd(B, &w, view(by), view(bam), view(bx), &E));
    dev_fill_nan(bdx, nx);
    OK(tw_maxpool_bwd(B, &w, view(bdx), view(bdy), view(bam), &E));
    OK(tw_act_bwd(B, TW_ACT_RELU, view(bdx), view(bdx), view(bx), nx, &E));
    dev_read(two, bdx, nx);
    dev_fill_nan(bdx, nx);
    OK(tw_maxpool_bwd_relu(B, &w, view(bdx), view(bdy), view(bam), view(bx), &E));
    dev_read(one, bdx, nx);
    assert_memory_equal(one, two, nx * sizeof *one);
    OK(tw_maxpool_bwd_relu(B, &w, view(bgx), view(br), view(bam), view(bx), &E));
    dev_read(one, bgx, nx);
    check_fd("maxpool relu dx", c.x, nx, one, pool_loss, &c);
    tw_buffer *bufs[] = {bx, by, bam, bdy, bdx, bgx, br};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tw_backend_free(B, bufs[i]);
    free(c.x);
    free(c.r);
    free(dy);
    free(two);
    free(one);
}

static void test_maxpool_bwd_relu(void **state)
{
    (void)state;
    assert_true(tw_backend_has_maxpool_bwd_relu(B));
    check_pool_relu(window2d(2, 6, 6, 3, 2, 2, 0));             /* the CNN's 2x2 at stride 2 */
    check_pool_relu(window2d(2, 7, 5, 3, 3, 2, 1));             /* SAME, overlapping windows */
    check_pool_relu(window3d(2, 4, 4, 4, 2, 2, 2, 2, 2, 0));    /* 3-D VALID */
    check_pool_relu(window3d(1, 5, 4, 5, 2, 3, 3, 3, 2, 1));    /* 3-D SAME, overlapping */
}

/* ---- average pooling, batch normalisation, graph joins ---- */

typedef struct {
    tw_window w;
    float *x, *r; /* input [win_x]; the weights of the loss <avgpool(x), r> [rows * in_c] */
} avg_case;

/* The mean of each window's input taps in double (the padding not counted). */
static void avgpool_ref(const avg_case *c, double *y)
{
    const tw_window *w = &c->w;
    size_t rows = win_rows(w);
    for (size_t row = 0; row < rows; row++) {
        size_t rr = row;
        int ow = (int)(rr % (size_t)w->out_w), oh = (int)(rr / (size_t)w->out_w % (size_t)w->out_h);
        rr /= (size_t)w->out_w * (size_t)w->out_h;
        int od = (int)(rr % (size_t)w->out_d);
        size_t b = rr / (size_t)w->out_d;
        for (int ci = 0; ci < w->in_c; ci++) {
            double s = 0.0;
            int n = 0;
            for (int kd = 0; kd < w->k_d; kd++)
                for (int kh = 0; kh < w->k_h; kh++)
                    for (int kw = 0; kw < w->k_w; kw++) {
                        int id = od * w->s_d - w->pad_d + kd, ih = oh * w->s_h - w->pad_h + kh,
                            iw = ow * w->s_w - w->pad_w + kw;
                        if (id < 0 || id >= w->in_d || ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w)
                            continue;
                        s += c->x[(((b * w->in_d + id) * w->in_h + ih) * w->in_w + iw) * w->in_c + ci];
                        n++;
                    }
            y[row * w->in_c + ci] = s / n;
        }
    }
}

static double avg_loss(void *ctx)
{
    avg_case *c = ctx;
    size_t ny = win_rows(&c->w) * c->w.in_c;
    double *y = calloc(ny, sizeof *y), s = 0.0;
    avgpool_ref(c, y);
    for (size_t i = 0; i < ny; i++)
        s += y[i] * c->r[i];
    free(y);
    return s;
}

static void check_avgpool(tw_window w)
{
    avg_case c = {.w = w};
    size_t nx = win_x(&w), ny = win_rows(&w) * w.in_c;
    c.x = floats(nx);
    c.r = floats(ny);
    fill(c.x, nx, -1, 1);
    fill(c.r, ny, -1, 1);
    float *y = floats(ny), *gx = floats(nx);
    double *want = calloc(ny, sizeof *want);
    tw_buffer *bx = dev_from(c.x, nx), *by = dev_new(ny), *bdy = dev_from(c.r, ny), *bdx = dev_new(nx);
    OK(tw_avgpool_fwd(B, &w, view(by), view(bx), &E));
    OK(tw_avgpool_bwd(B, &w, view(bdx), view(bdy), &E));
    dev_read(y, by, ny);
    dev_read(gx, bdx, nx);
    avgpool_ref(&c, want);
    assert_all_near(y, want, ny, 1e-6, 1e-7, "avgpool y");
    check_fd("avgpool dx", c.x, nx, gx, avg_loss, &c);
    tw_buffer *bufs[] = {bx, by, bdy, bdx};
    for (size_t i = 0; i < 4; i++)
        tw_backend_free(B, bufs[i]);
    free(c.x);
    free(c.r);
    free(y);
    free(gx);
    free(want);
}

/* Average pooling against the mean of the input taps (SAME windows count no padding), and its gradient by
 * finite differences; the global pool is the VALID window as large as the input. */
static void test_avgpool(void **state)
{
    (void)state;
    check_avgpool(window2d(2, 6, 5, 3, 3, 2, 1)); /* SAME, overlapping, padded on both sides */
    check_avgpool(window2d(1, 7, 7, 2, 2, 2, 0)); /* VALID */
    check_avgpool(window3d(1, 5, 4, 5, 2, 3, 3, 3, 2, 1));
    check_avgpool(window2d(3, 4, 4, 5, 4, 1, 0)); /* global: 4 x 4 over 4 x 4 */
}

enum { BR = 9, BC = 3 };

typedef struct {
    float x[BR * BC], gamma[BC], beta[BC], r[BR * BC];
} bn_case;

/* Keras' training batch norm in double: the batch's mean and biased variance per channel. */
static void bn_ref(const bn_case *c, double eps, double *y, double *mean, double *var)
{
    for (int ch = 0; ch < BC; ch++) {
        double s = 0.0, q = 0.0;
        for (int r = 0; r < BR; r++)
            s += c->x[r * BC + ch];
        mean[ch] = s / BR;
        for (int r = 0; r < BR; r++)
            q += (c->x[r * BC + ch] - mean[ch]) * (c->x[r * BC + ch] - mean[ch]);
        var[ch] = q / BR;
        for (int r = 0; r < BR; r++)
            y[r * BC + ch] = c->gamma[ch] * (c->x[r * BC + ch] - mean[ch]) / sqrt(var[ch] + eps) + c->beta[ch];
    }
}

static double bn_loss(void *ctx)
{
    bn_case *c = ctx;
    double y[BR * BC], mean[BC], var[BC], s = 0.0;
    bn_ref(c, 1e-3, y, mean, var);
    for (int i = 0; i < BR * BC; i++)
        s += y[i] * c->r[i];
    return s;
}

/* Training mode against the double reference (output, the moving statistics' update), the gradients of
 * x, gamma and beta by finite differences, and inference mode with the moving statistics. */
static void test_batch_norm(void **state)
{
    (void)state;
    bn_case c;
    fill(c.x, BR * BC, -2, 3);
    fill(c.gamma, BC, 0.5f, 1.5f);
    fill(c.beta, BC, -1, 1);
    fill(c.r, BR * BC, -1, 1);
    float moving[2 * BC] = {0.1f, 0.2f, 0.3f, 1.0f, 2.0f, 0.5f}, y[BR * BC], dx[BR * BC], dg[BC], db[BC], m2[2 * BC];
    double want[BR * BC], mean[BC], var[BC];
    tw_bn p = {.rows = BR, .channels = BC, .momentum = 0.9f, .epsilon = 1e-3f, .mode = TW_BN_TRAIN_UPDATE};
    tw_buffer *bx = dev_from(c.x, BR * BC), *bg = dev_from(c.gamma, BC), *bb = dev_from(c.beta, BC),
              *bs = dev_new(2 * BC), *bm = dev_from(moving, 2 * BC), *by = dev_new(BR * BC),
              *bdy = dev_from(c.r, BR * BC), *bdx = dev_new(BR * BC), *bdg = dev_new(BC), *bdb = dev_new(BC);
    OK(tw_bn_fwd(B, &p, view(by), view(bx), view(bg), view(bb), view(bs), view(bm), &E));
    OK(tw_bn_bwd(B, &p, view(bdx), view(bdg), view(bdb), view(bdy), view(bx), view(bg), view(bs), &E));
    dev_read(y, by, BR * BC);
    dev_read(m2, bm, 2 * BC);
    dev_read(dx, bdx, BR * BC);
    dev_read(dg, bdg, BC);
    dev_read(db, bdb, BC);
    bn_ref(&c, 1e-3, want, mean, var);
    assert_all_near(y, want, BR * BC, 1e-5, 1e-6, "batch norm y");
    for (int ch = 0; ch < BC; ch++) {
        assert_near(m2[ch], 0.9 * moving[ch] + 0.1 * mean[ch], 1e-5, 1e-6, "moving mean", (size_t)ch);
        assert_near(m2[BC + ch], 0.9 * moving[BC + ch] + 0.1 * var[ch], 1e-5, 1e-6, "moving variance", (size_t)ch);
    }
    check_fd("batch norm dx", c.x, BR * BC, dx, bn_loss, &c);
    check_fd("batch norm dgamma", c.gamma, BC, dg, bn_loss, &c);
    check_fd("batch norm dbeta", c.beta, BC, db, bn_loss, &c);
    /* the layer's activation applied as y is written: ReLU of the same outputs, the statistics untouched */
    float relu[BR * BC], m3[2 * BC];
    tw_bn pr = p;
    pr.mode = TW_BN_TRAIN;
    pr.activation = TW_ACT_RELU;
    OK(tw_bn_fwd(B, &pr, view(by), view(bx), view(bg), view(bb), view(bs), view(bm), &E));
    dev_read(relu, by, BR * BC);
    dev_read(m3, bm, 2 * BC);
    assert_memory_equal(m3, m2, sizeof m2);
    for (int i = 0; i < BR * BC; i++)
        assert_true(relu[i] == (y[i] < 0.0f ? 0.0f : y[i]));
    /* inference: (x - moving mean) / sqrt(moving variance + eps), the moving statistics untouched */
    p.mode = TW_BN_INFER;
    OK(tw_bn_fwd(B, &p, view(by), view(bx), view(bg), view(bb), view(bs), view(bm), &E));
    dev_read(y, by, BR * BC);
    for (int i = 0; i < BR * BC; i++) {
        int ch = i % BC;
        assert_near(y[i], c.gamma[ch] * (c.x[i] - m2[ch]) / sqrt(m2[BC + ch] + 1e-3) + c.beta[ch], 1e-5, 1e-6,
                    "batch norm inference", (size_t)i);
    }
    dev_read(moving, bm, 2 * BC);
    assert_memory_equal(moving, m2, sizeof m2);
    tw_buffer *bufs[] = {bx, bg, bb, bs, bm, by, bdy, bdx, bdg, bdb};
    for (size_t i = 0; i < 10; i++)
        tw_backend_free(B, bufs[i]);
}

/* Channels far from zero and a constant one: the batch statistics keep their precision (a channel at 100
 * with a spread of 1, one at -3000 with a spread of 2: the variance is not E[x^2] - E[x]^2 in float), and a
 * constant channel normalises to beta exactly, its variance 0. */
static void test_batch_norm_far_from_zero(void **state)
{
    (void)state;
    bn_case c;
    fill(c.x, BR * BC, -1, 1);
    for (int r = 0; r < BR; r++) {
        c.x[r * BC] += 100.0f;
        c.x[r * BC + 1] = -3000.0f + 2.0f * c.x[r * BC + 1];
        c.x[r * BC + 2] = 7.0f;
    }
    fill(c.gamma, BC, 0.5f, 1.5f);
    fill(c.beta, BC, -1, 1);
    float moving[2 * BC] = {0, 0, 0, 1, 1, 1}, y[BR * BC], m2[2 * BC];
    double want[BR * BC], mean[BC], var[BC];
    tw_bn p = {.rows = BR, .channels = BC, .momentum = 0.9f, .epsilon = 1e-3f, .mode = TW_BN_TRAIN_UPDATE};
    tw_buffer *bx = dev_from(c.x, BR * BC), *bg = dev_from(c.gamma, BC), *bb = dev_from(c.beta, BC),
              *bs = dev_new(2 * BC), *bm = dev_from(moving, 2 * BC), *by = dev_new(BR * BC);
    OK(tw_bn_fwd(B, &p, view(by), view(bx), view(bg), view(bb), view(bs), view(bm), &E));
    dev_read(y, by, BR * BC);
    dev_read(m2, bm, 2 * BC);
    bn_ref(&c, 1e-3, want, mean, var);
    assert_all_near(y, want, BR * BC, 1e-3, 1e-4, "batch norm y far from zero");
    for (int ch = 0; ch < BC; ch++)
        assert_near(m2[BC + ch], 0.9 + 0.1 * var[ch], 1e-6, 1e-7, "moving variance", (size_t)ch);
    assert_true(var[2] == 0.0);
    for (int r = 0; r < BR; r++)
        assert_true(y[r * BC + 2] == c.beta[2]);
    tw_buffer *bufs[] = {bx, bg, bb, bs, bm, by};
    for (size_t i = 0; i < 6; i++)
        tw_backend_free(B, bufs[i]);
}

/* add: a + c; copy_cols: a channel block copied, then added, at an offset (a concat and its gradient). */
static void test_joins(void **state)
{
    (void)state;
    float a[12], c[12], y[12], dst[4 * 5] = {0}, got[4 * 5];
    fill(a, 12, -1, 1);
    fill(c, 12, -1, 1);
    tw_buffer *ba = dev_from(a, 12), *bc = dev_from(c, 12), *by = dev_new(12), *bd = dev_from(dst, 20);
    OK(tw_add(B, view(by), view(ba), view(bc), 12, &E));
    dev_read(y, by, 12);
    for (int i = 0; i < 12; i++)
        assert_true(y[i] == a[i] + c[i]);
    /* a as 4 rows of 3: columns 1..2 into columns 3..4 of dst's rows of 5, then added once more */
    OK(tw_copy_cols(B, view(bd), 5, 3, view(ba), 3, 1, 4, 2, 0, &E));
    OK(tw_copy_cols(B, view(bd), 5, 3, view(ba), 3, 1, 4, 2, 1, &E));
    dev_read(got, bd, 20);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 5; k++)
            assert_true(got[r * 5 + k] == (k >= 3 ? a[r * 3 + k - 2] + a[r * 3 + k - 2] : 0.0f));
    assert_int_equal(tw_copy_cols(B, view(bd), 5, 4, view(ba), 3, 1, 4, 2, 0, &E), TW_ERR_INVALID);
    tw_buffer *bufs[] = {ba, bc, by, bd};
    for (size_t i = 0; i < 4; i++)
        tw_backend_free(B, bufs[i]);
}

/* ---- losses ---- */

enum { XR = 5, XC = 7 };

typedef struct {
    float logits[XR * XC]; /* [5, 7] */
    int32_t labels[XR];    /* [5] */
    float scale;           /* the loss is scale * sum of the rows' losses */
    float smoothing;       /* label smoothing, 0: none */
} xent_case;

static void xent_fwd(const xent_case *c, float *loss, float *probs)
{
    tw_buffer *lg = dev_from(c->logits, XR * XC), *lb = dev_from(c->labels, XR);
    tw_buffer *ls = dev_new(XR), *pr = dev_new(XR * XC);
    OK(tw_xent_fwd(B, view(ls), view(pr), view(lg), view(lb), XR, XC, c->smoothing, &E));
    dev_read(loss, ls, XR);
    dev_read(probs, pr, XR * XC);
    tw_backend_free(B, lg);
    tw_backend_free(B, lb);
    tw_backend_free(B, ls);
    tw_backend_free(B, pr);
}

static double xent_total(void *ctx)
{
    xent_case *c = ctx;
    float loss[XR], probs[XR * XC];
    xent_fwd(c, loss, probs);
    double s = 0.0;
    for (int r = 0; r < XR; r++)
        s += loss[r];
    return c->scale * s;
}

/* Naive loss and probabilities of one row in double: the sum over the classes of target * (log(sum exp(x -
 * m)) - (x - m)), the targets (1 - e) one-hot + e / classes (tf.losses.softmax_cross_entropy's smoothing). */
static double xent_ref(const float *x, int label, double e, double *probs)
{
    double m = x[0], s = 0.0;
    for (int j = 1; j < XC; j++)
        m = x[j] > m ? x[j] : m;
    for (int j = 0; j < XC; j++)
        s += exp(x[j] - m);
    double loss = 0.0;
    for (int j = 0; j < XC; j++) {
        probs[j] = exp(x[j] - m) / s;
        loss += ((j == label ? 1.0 - e : 0.0) + e / XC) * (log(s) - (x[j] - m));
    }
    return loss;
}

static void check_xent_fwd(const xent_case *c)
{
    float loss[XR], probs[XR * XC];
    double want_p[XR * XC];
    xent_fwd(c, loss, probs);
    for (int r = 0; r < XR; r++) {
        double want = xent_ref(c->logits + r * XC, c->labels[r], c->smoothing, want_p + r * XC);
        assert_true(isfinite(loss[r]));
        assert_near(loss[r], want, 1e-5, 1e-5, "xent loss", (size_t)r);
    }
    assert_all_near(probs, want_p, XR * XC, 1e-5, 1e-7, "xent probs");
}

/* Loss and probabilities against the naive formula; gradient (probs - targets) * scale by finite
 * differences; a row of logits in the thousands stays finite. */
static void check_xent(float smoothing)
{
    xent_case c = {.scale = 1.0f / XR, .smoothing = smoothing};
    fill(c.logits, XR * XC, -3, 3);
    for (int r = 0; r < XR; r++)
        c.labels[r] = (int32_t)urand(XC);
    check_xent_fwd(&c);

    float loss[XR], probs[XR * XC], grad[XR * XC];
    xent_fwd(&c, loss, probs);
    tw_buffer *pr = dev_from(probs, XR * XC), *lb = dev_from(c.labels, XR), *dl = dev_new(XR * XC);
    OK(tw_xent_bwd(B, view(dl), view(pr), view(lb), XR, XC, c.scale, c.smoothing, &E));
    dev_read(grad, dl, XR * XC);
    check_fd("xent dlogits", c.logits, XR * XC, grad, xent_total, &c);
    tw_backend_free(B, pr);
    tw_backend_free(B, lb);
    tw_backend_free(B, dl);

    const float big[XC] = {1000.0f, -1000.0f, 500.0f, 0.0f, 999.0f, 3e4f, -3e4f};
    memcpy(c.logits, big, sizeof big);
    c.labels[0] = 1;
    check_xent_fwd(&c);
}

static void test_xent(void **state)
{
    (void)state;
    check_xent(0.0f);
}

/* Label smoothing: the loss sums every class's log-probability, the gradient's targets are smoothed. */
static void test_xent_label_smoothing(void **state)
{
    (void)state;
    check_xent(0.1f);
    check_xent(0.9f);
}

/* A label outside [0, classes) is an error on the CPU (as in TensorFlow's CPU kernel), not a read. */
static void test_xent_bad_label(void **state)
{
    (void)state;
    float logits[2 * 3] = {0};
    int32_t labels[2] = {1, 3};
    tw_buffer *lg = dev_from(logits, 6), *lb = dev_from(labels, 2), *ls = dev_new(2), *pr = dev_new(6);
    assert_int_equal(tw_xent_fwd(B, view(ls), view(pr), view(lg), view(lb), 2, 3, 0.0f, &E), TW_ERR_INVALID);
    assert_non_null(strstr(E.message, "label 3"));
    assert_int_equal(tw_xent_bwd(B, view(pr), view(pr), view(lb), 2, 3, 1.0f, 0.0f, &E), TW_ERR_INVALID);
    tw_backend_free(B, lg);
    tw_backend_free(B, lb);
    tw_backend_free(B, ls);
    tw_backend_free(B, pr);
}

enum { MR = 3, MC = 4 };

typedef struct {
    float pred[MR * MC], target[MR * MC]; /* [3, 4] */
    float scale;                          /* the loss is scale * sum of the rows' losses */
} mse_case;

static void mse_fwd(const mse_case *c, float *loss)
{
    tw_buffer *p = dev_from(c->pred, MR * MC), *t = dev_from(c->target, MR * MC), *l = dev_new(MR);
    OK(tw_mse_fwd(B, view(l), view(p), view(t), MR, MC, &E));
    dev_read(loss, l, MR);
    tw_backend_free(B, p);
    tw_backend_free(B, t);
    tw_backend_free(B, l);
}

static double mse_total(void *ctx)
{
    mse_case *c = ctx;
    float loss[MR];
    mse_fwd(c, loss);
    return c->scale * ((double)loss[0] + loss[1] + loss[2]);
}

/* Squared error rows against the naive sum; dpred = 2 (pred - target) scale by finite differences. */
static void test_mse(void **state)
{
    (void)state;
    mse_case c = {.scale = 1.0f / (MR * MC)};
    fill(c.pred, MR * MC, -1, 1);
    fill(c.target, MR * MC, -1, 1);
    float loss[MR], grad[MR * MC];
    mse_fwd(&c, loss);
    for (int r = 0; r < MR; r++) {
        double want = 0.0;
        for (int j = 0; j < MC; j++)
            want += ((double)c.pred[r * MC + j] - c.target[r * MC + j]) *
                    ((double)c.pred[r * MC + j] - c.target[r * MC + j]);
        assert_near(loss[r], want, 1e-6, 1e-7, "mse loss", (size_t)r);
    }
    tw_buffer *p = dev_from(c.pred, MR * MC), *t = dev_from(c.target, MR * MC), *d = dev_new(MR * MC);
    OK(tw_mse_bwd(B, view(d), view(p), view(t), MR * MC, c.scale, &E));
    dev_read(grad, d, MR * MC);
    check_fd("mse dpred", c.pred, MR * MC, grad, mse_total, &c);
    tw_backend_free(B, p);
    tw_backend_free(B, t);
    tw_backend_free(B, d);
}

/* Sum of squares against double; 2^21 equal values, where a float accumulator would drift. */
static void test_sum_squares(void **state)
{
    (void)state;
    enum { N = 10001, BIG = 1 << 21 };
    float *x = floats(BIG), got;
    fill(x, N, -2, 2);
    tw_buffer *bx = dev_from(x, N), *out = dev_new(1);
    OK(tw_sum_squares(B, view(out), view(bx), N, &E));
    dev_read(&got, out, 1);
    assert_near(got, dot(x, x, N), 1e-6, 0, "sum_squares", 0);
    tw_backend_free(B, bx);
    for (size_t i = 0; i < BIG; i++)
        x[i] = 0.1f;
    bx = dev_from(x, BIG);
    OK(tw_sum_squares(B, view(out), view(bx), BIG, &E));
    dev_read(&got, out, 1);
    assert_near(got, (double)0.1f * 0.1f * BIG, 1e-7, 0, "sum_squares 2^21", 0);
    tw_backend_free(B, bx);
    tw_backend_free(B, out);
    free(x);
}

/* ---- update ---- */

enum { UN = 10, UL2 = 6, USTEPS = 3 };

/* TensorFlow 1's optimizers in double, written from docs/formats.md §6 without elementwise.h. */
typedef struct {
    double w[UN], s1[UN], s2[UN], ema[UN];
} ref_state;

typedef struct {
    tw_optimizer_kind kind;
    double lr, momentum, beta1, beta2, epsilon, l2, ema_decay;
    int nesterov;
    double weight_decay, grad_scale; /* grad_scale 0: none */
} ref_hyper;

static void ref_step(const ref_hyper *h, ref_state *s, const float *g, int t)
{
    double alpha = h->lr * sqrt(1.0 - pow(h->beta2, t)) / (1.0 - pow(h->beta1, t));
    for (int i = 0; i < UN; i++) {
        double gi = g[i] * (h->grad_scale ? h->grad_scale : 1.0) + (i < UL2 ? h->l2 * s->w[i] : 0.0);
        if (i < UL2) /* Keras' decoupled decay, before the step */
            s->w[i] -= s->w[i] * h->weight_decay * h->lr;
        if (h->kind == TW_OPT_SGD) {
            s->w[i] -= h->lr * gi;
        } else if (h->kind == TW_OPT_MOMENTUM) {
            s->s1[i] = s->s1[i] * h->momentum + gi;
            s->w[i] -= h->nesterov ? h->lr * (gi + h->momentum * s->s1[i]) : h->lr * s->s1[i];
        } else {
            s->s1[i] = h->beta1 * s->s1[i] + (1.0 - h->beta1) * gi;
            s->s2[i] = h->beta2 * s->s2[i] + (1.0 - h->beta2) * gi * gi;
            s->w[i] -= alpha * s->s1[i] / (sqrt(s->s2[i]) + h->epsilon);
        }
    }
    double decay = fmin(h->ema_decay, (1.0 + t) / (10.0 + t));
    for (int i = 0; i < UN; i++)
        s->ema[i] = decay * s->ema[i] + (1.0 - decay) * s->w[i];
}

/* USTEPS updates through the backend (arena [4, UN]: params, slot1, slot2, ema) against ref_step. */
static void check_update(const ref_hyper *h)
{
    float w0[UN], g[UN], got[4 * UN];
    fill(w0, UN, -1, 1);
    ref_state ref;
    memset(&ref, 0, sizeof ref);
    for (int i = 0; i < UN; i++)
        ref.w[i] = ref.ema[i] = w0[i];
    tw_buffer *arena = dev_new(4 * UN), *grads = dev_new(UN);
    tw_tensor params = view(arena), slot1 = tw_tensor_at(params, UN), slot2 = tw_tensor_at(params, 2 * UN),
              ema = tw_tensor_at(params, 3 * UN);
    OK(tw_backend_zero(B, view(arena), 4 * UN * sizeof(float), &E));
    OK(tw_backend_upload(B, params, w0, sizeof w0, &E));
    OK(tw_backend_upload(B, ema, w0, sizeof w0, &E));
    tw_tensor none = {NULL, 0};
    for (int t = 1; t <= USTEPS; t++) {
        fill(g, UN, -1, 1);
        OK(tw_backend_upload(B, view(grads), g, sizeof g, &E));
        tw_update u = {.kind = h->kind, .lr = (float)h->lr, .momentum = (float)h->momentum,
                       .nesterov = h->nesterov, .beta1 = (float)h->beta1, .beta2 = (float)h->beta2,
                       .epsilon = (float)h->epsilon, .l2 = (float)h->l2, .l2_count = UL2, .ema = 1,
                       .weight_decay = (float)h->weight_decay, .grad_scale = (float)h->grad_scale};
        u.adam_alpha = (float)(h->lr * sqrt(1.0 - pow(h->beta2, t)) / (1.0 - pow(h->beta1, t)));
        u.ema_decay = (float)fmin(h->ema_decay, (1.0 + t) / (10.0 + t));
        OK(tw_update_step(B, &u, params, view(grads), h->kind == TW_OPT_SGD ? none : slot1,
                          h->kind == TW_OPT_ADAM ? slot2 : none, ema, UN, &E));
        ref_step(h, &ref, g, t);
    }
    dev_read(got, arena, 4 * UN);
    assert_all_near(got, ref.w, UN, 1e-5, 1e-6, "params");
    assert_all_near(got + 3 * UN, ref.ema, UN, 1e-5, 1e-6, "ema");
    if (h->kind != TW_OPT_SGD)
        assert_all_near(got + UN, ref.s1, UN, 1e-5, 1e-6, "slot1");
    if (h->kind == TW_OPT_ADAM)
        assert_all_near(got + 2 * UN, ref.s2, UN, 1e-5, 1e-7, "slot2");
    tw_backend_free(B, arena);
    tw_backend_free(B, grads);
}

static void test_update_sgd(void **state)
{
    (void)state;
    check_update(&(ref_hyper){.kind = TW_OPT_SGD, .lr = 0.1, .l2 = 0.05, .ema_decay = 0.99});
}

static void test_update_momentum(void **state)
{
    (void)state;
    check_update(&(ref_hyper){.kind = TW_OPT_MOMENTUM, .lr = 0.1, .momentum = 0.9, .l2 = 0.05,
                              .ema_decay = 0.99});
}

/* Nesterov's momentum (TF's use_nesterov), with a clipping factor on the gradient. */
static void test_update_nesterov(void **state)
{
    (void)state;
    check_update(&(ref_hyper){.kind = TW_OPT_MOMENTUM, .lr = 0.1, .momentum = 0.9, .nesterov = 1,
                              .grad_scale = 0.4, .ema_decay = 0.99});
}

/* Decoupled weight decay on the weights only (the first UL2 values), with SGD and with Adam (AdamW). */
static void test_update_weight_decay(void **state)
{
    (void)state;
    check_update(&(ref_hyper){.kind = TW_OPT_SGD, .lr = 0.1, .weight_decay = 0.3, .ema_decay = 0.99});
    check_update(&(ref_hyper){.kind = TW_OPT_ADAM, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-7,
                              .weight_decay = 0.5, .grad_scale = 2.5, .ema_decay = 0.99});
}

/* Adam with TF's defaults, and with an epsilon large enough that adding it to sqrt(v-hat) instead of
 * sqrt(v) would fail the comparison. */
static void test_update_adam(void **state)
{
    (void)state;
    ref_hyper h = {.kind = TW_OPT_ADAM, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8,
                   .l2 = 0.05, .ema_decay = 0.9999};
    check_update(&h);
    h.epsilon = 0.1;
    check_update(&h);
}

/* With zero gradients only the first l2_count values decay, by exactly lr * l2 * w; no EMA: ema view
 * untouched. */
static void test_update_l2_range(void **state)
{
    (void)state;
    float w[UN], got[UN], zero[UN] = {0}, sentinel = 7.0f, ema;
    fill(w, UN, -1, 1);
    tw_buffer *p = dev_from(w, UN), *g = dev_from(zero, UN), *e = dev_from(&sentinel, 1);
    tw_update u = {.kind = TW_OPT_SGD, .lr = 0.5f, .l2 = 0.1f, .l2_count = UL2};
    OK(tw_update_step(B, &u, view(p), view(g), (tw_tensor){NULL, 0}, (tw_tensor){NULL, 0}, view(e), UN, &E));
    dev_read(got, p, UN);
    dev_read(&ema, e, 1);
    for (int i = 0; i < UN; i++) {
        float want = i < UL2 ? w[i] - 0.5f * (0.0f + 0.1f * w[i]) : w[i];
        assert_true(got[i] == want);
    }
    assert_true(ema == sentinel);
    tw_backend_free(B, p);
    tw_backend_free(B, g);
    tw_backend_free(B, e);
}

/* Momentum and Adam without EMA (the update's other loop): params and slots the same bits as with it,
 * the shadows untouched. */
static void test_update_without_ema(void **state)
{
    (void)state;
    for (int kind = TW_OPT_MOMENTUM; kind <= TW_OPT_ADAM; kind++) {
        float w[UN], g[UN], with[4 * UN], without[4 * UN];
        fill(w, UN, -1, 1);
        fill(g, UN, -1, 1);
        for (int ema = 1; ema >= 0; ema--) {
            tw_buffer *arena = dev_new(4 * UN), *grads = dev_from(g, UN);
            tw_tensor p = view(arena);
            OK(tw_backend_zero(B, p, 4 * UN * sizeof(float), &E));
            OK(tw_backend_upload(B, p, w, sizeof w, &E));
            OK(tw_backend_upload(B, tw_tensor_at(p, 3 * UN), w, sizeof w, &E));
            tw_update u = {.kind = kind, .lr = 0.1f, .momentum = 0.9f, .adam_alpha = 0.01f, .beta1 = 0.9f,
                           .beta2 = 0.999f, .epsilon = 1e-8f, .l2 = 0.05f, .l2_count = UL2, .ema = ema,
                           .ema_decay = 0.5f};
            OK(tw_update_step(B, &u, p, view(grads), tw_tensor_at(p, UN), tw_tensor_at(p, 2 * UN),
                              tw_tensor_at(p, 3 * UN), UN, &E));
            dev_read(ema ? with : without, arena, 4 * UN);
            tw_backend_free(B, arena);
            tw_backend_free(B, grads);
        }
        assert_memory_equal(with, without, 3 * UN * sizeof(float));
        assert_memory_equal(without + 3 * UN, w, sizeof w);
        assert_memory_not_equal(with + 3 * UN, w, sizeof w);
    }
}

/* ---- collectives ---- */

/* Three towers' buffers (one at an offset) all become ((b0 + b1) + b2) * (1/3) in float, bit for bit,
 * over more than one block. */
static void test_allreduce_avg(void **state)
{
    (void)state;
    enum { N = 2500, T = 3, OFF = 3 };
    tw_backend *towers[T] = {B, NULL, NULL};
    OK(tw_backend_create("cpu", 1, &towers[1], &E));
    OK(tw_backend_create("cpu", 2, &towers[2], &E));
    float *h[T], *got = floats(N);
    tw_buffer *bufs[T];
    tw_tensor views[T];
    for (int t = 0; t < T; t++) {
        h[t] = floats(N);
        fill(h[t], N, -10, 10);
        OK(tw_backend_alloc(towers[t], (N + OFF) * sizeof(float), &bufs[t], &E));
        views[t] = tw_tensor_at(view(bufs[t]), t == 1 ? OFF : 0);
        OK(tw_backend_upload(towers[t], views[t], h[t], N * sizeof(float), &E));
    }
    OK(tw_backend_allreduce_avg(towers, T, views, N, &E));
    for (int t = 0; t < T; t++) {
        OK(tw_backend_download(towers[t], got, views[t], N * sizeof(float), &E));
        for (size_t i = 0; i < N; i++) {
            float want = (h[0][i] + h[1][i] + h[2][i]) * (1.0f / 3.0f);
            assert_true(got[i] == want);
            assert_near(got[i], ((double)h[0][i] + h[1][i] + h[2][i]) / 3.0, 1e-5, 1e-5, "mean", i);
        }
    }
    for (int t = 0; t < T; t++) {
        tw_backend_free(towers[t], bufs[t]);
        free(h[t]);
    }
    tw_backend_destroy(towers[1]);
    tw_backend_destroy(towers[2]);
    free(got);
    OK(tw_backend_sync(B, &E));
}

/* ---- an instance's own threads ---- */

/* A batch normalization past the size it is cut at (512 rows of 40 channels: 8 blocks of rows over three
 * threads), training with the update then backward, on b3 and on the one-thread instance B: the same bits. */
static void instance_threads_bn(tw_backend *b3)
{
    enum { R = 512, C = 40, N = R * C, OUT = 2 * N + 6 * C }; /* y, dx, stats, moving, dgamma, dbeta */
    float *x = floats(N), *dy = floats(N), gb[2 * C], *out[2] = {floats(OUT), floats(OUT)};
    fill(x, N, -2, 3);
    fill(dy, N, -1, 1);
    fill(gb, 2 * C, 0.5f, 1.5f);
    tw_bn p = {.rows = R, .channels = C, .momentum = 0.9f, .epsilon = 1e-3f, .mode = TW_BN_TRAIN_UPDATE};
    for (int i = 0; i < 2; i++) {
        tw_backend *be = i ? b3 : B;
        tw_buffer *bx = dev_from(x, N), *bdy = dev_from(dy, N), *bgb = dev_from(gb, 2 * C), *bo = dev_new(OUT);
        tw_tensor o = view(bo), y = o, dx = tw_tensor_at(o, N), st = tw_tensor_at(o, 2 * N);
        tw_tensor mv = tw_tensor_at(o, 2 * N + 2 * C), dg = tw_tensor_at(o, 2 * N + 4 * C);
        OK(tw_backend_zero(be, o, OUT * sizeof(float), &E));
        OK(tw_bn_fwd(be, &p, y, view(bx), view(bgb), tw_tensor_at(view(bgb), C), st, mv, &E));
        OK(tw_bn_bwd(be, &p, dx, dg, tw_tensor_at(dg, C), view(bdy), view(bx), view(bgb), st, &E));
        dev_read(out[i], bo, OUT);
        tw_buffer *bufs[] = {bx, bdy, bgb, bo};
        for (size_t k = 0; k < 4; k++)
            tw_backend_free(be, bufs[k]);
    }
    assert_memory_equal(out[0], out[1], OUT * sizeof(float));
    free(x), free(dy), free(out[0]), free(out[1]);
}

/* An instance created with a share of three threads (tw_cpu_gemm_threads, as tw_backend_plan sets it for
 * one tower on three cores) cuts a mid-sized product over its threads, by columns or by rows (the longer
 * side), every transpose and a beta that reads c: near the reference in double, and the same bits on a
 * second run. Its update of a big arena, cut over its threads, gives the same bits as the one-thread
 * instance B's for every optimizer. */
static void test_instance_threads(void **state)
{
    (void)state;
    tw_backend *b3;
    tw_cpu_gemm_threads(3);
    OK(tw_backend_create("cpu", 0, &b3, &E));
    const int shapes[2][3] = {{37, 517, 97}, {517, 37, 97}}; /* 1.9 M multiply-adds: cut, not a team */
    for (int s = 0; s < 2; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                float *a = floats((size_t)m * k), *b = floats((size_t)k * n), *c = floats((size_t)m * n);
                float *got = floats((size_t)m * n), *again = floats((size_t)m * n);
                double *want = malloc((size_t)m * n * sizeof *want);
                assert_non_null(want);
                fill(a, (size_t)m * k, -1, 1);
                fill(b, (size_t)k * n, -1, 1);
                fill(c, (size_t)m * n, -1, 1);
                tw_buffer *va = dev_from(a, (size_t)m * k), *vb = dev_from(b, (size_t)k * n);
                tw_buffer *vc = dev_from(c, (size_t)m * n);
                OK(tw_gemm(b3, ta, tb, m, n, k, 0.5f, view(va), view(vb), 0.25f, view(vc), &E));
                dev_read(got, vc, (size_t)m * n);
                gemm_ref(ta, tb, m, n, k, 0.5, a, b, 0.25, c, want);
                assert_all_near(got, want, (size_t)m * n, 1e-5, 1e-5, "cut gemm");
                OK(tw_backend_upload(b3, view(vc), c, (size_t)m * n * sizeof(float), &E));
                OK(tw_gemm(b3, ta, tb, m, n, k, 0.5f, view(va), view(vb), 0.25f, view(vc), &E));
                dev_read(again, vc, (size_t)m * n);
                assert_memory_equal(got, again, (size_t)m * n * sizeof *got);
                tw_backend_free(b3, va);
                tw_backend_free(b3, vb);
                tw_backend_free(b3, vc);
                free(a), free(b), free(c), free(got), free(again), free(want);
            }
    enum { UN = 70001 }; /* past the size an update is cut at */
    float *w = floats(UN), *g = floats(2 * UN), *want = floats(4 * UN), *got = floats(4 * UN);
    fill(w, UN, -1, 1);
    fill(g, 2 * UN, -1, 1);
    for (int kind = TW_OPT_SGD; kind <= TW_OPT_ADAM; kind++)
        for (int i = 0; i < 2; i++) {
            tw_backend *be = i ? b3 : B;
            tw_buffer *arena = dev_new(4 * UN), *grads = dev_from(g, 2 * UN);
            tw_tensor p = view(arena), gv[2] = {view(grads), tw_tensor_at(view(grads), UN)};
            OK(tw_backend_zero(be, p, 4 * UN * sizeof(float), &E));
            OK(tw_backend_upload(be, p, w, UN * sizeof(float), &E));
            OK(tw_backend_upload(be, tw_tensor_at(p, 3 * UN), w, UN * sizeof(float), &E));
            tw_update u = {.kind = kind, .lr = 0.1f, .momentum = 0.9f, .adam_alpha = 0.01f, .beta1 = 0.9f,
                           .beta2 = 0.999f, .epsilon = 1e-8f, .l2 = 0.05f, .l2_count = 40009, .ema = 1,
                           .ema_decay = 0.7f};
            OK(tw_update_mean(be, &u, p, gv, 2, tw_tensor_at(p, UN), tw_tensor_at(p, 2 * UN),
                              tw_tensor_at(p, 3 * UN), UN, &E));
            dev_read(i ? got : want, arena, 4 * UN);
            tw_backend_free(be, arena);
            tw_backend_free(be, grads);
            if (i)
                assert_memory_equal(got, want, 4 * UN * sizeof(float));
        }
    free(w), free(g), free(want), free(got);
    instance_threads_bn(b3);
    tw_backend_destroy(b3);
    tw_cpu_gemm_threads(1);
}

/* ---- wrapper checks ---- */

/* The call failed with TW_ERR_INVALID and a message naming the op and the word `arg`. */
static void assert_invalid(tw_status s, const char *op, const char *arg)
{
    assert_int_equal(s, TW_ERR_INVALID);
    assert_int_equal(E.status, TW_ERR_INVALID);
    if (!strstr(E.message, op) || !strstr(E.message, arg))
        fail_msg("message '%s' does not name %s and %s", E.message, op, arg);
}

/* One step of kind `kind` on a fresh state: params w, slots 0, EMA w, from grads h[n_grads][N]. Either
 * the engine's old way (tw_backend_allreduce_avg over copies, then tw_update_step over the whole arena)
 * or the fused tw_update_mean over three uneven ranges, as train_step.c splits it (L2 counted from each
 * range's start). out[4N] = params, slot1, slot2, ema; mean[N] = grads[0] afterwards. */
enum { MN = 2500, ML2 = 1300, MAX_GRADS = 3 };

static void mean_step(int kind, int n_grads, float *const *h, const float *w, int fused, int keep_mean,
                      float *out, float *mean)
{
    tw_buffer *arena = dev_new(4 * MN), *g[MAX_GRADS];
    tw_tensor p = view(arena), gv[MAX_GRADS];
    tw_backend *group[MAX_GRADS] = {B, B, B};
    OK(tw_backend_zero(B, p, 4 * MN * sizeof(float), &E));
    OK(tw_backend_upload(B, p, w, MN * sizeof(float), &E));
    OK(tw_backend_upload(B, tw_tensor_at(p, 3 * MN), w, MN * sizeof(float), &E));
    for (int t = 0; t < n_grads; t++)
        gv[t] = view(g[t] = dev_from(h[t], MN));
    tw_update u = {.kind = kind, .lr = 0.1f, .momentum = 0.9f, .adam_alpha = 0.01f, .beta1 = 0.9f,
                   .beta2 = 0.999f, .epsilon = 1e-8f, .l2 = 0.05f, .l2_count = ML2, .ema = 1,
                   .ema_decay = 0.7f, .keep_mean = keep_mean};
    if (!fused) {
        if (n_grads > 1)
            OK(tw_backend_allreduce_avg(group, n_grads, gv, MN, &E));
        OK(tw_update_step(B, &u, p, gv[0], tw_tensor_at(p, MN), tw_tensor_at(p, 2 * MN),
                          tw_tensor_at(p, 3 * MN), MN, &E));
    }
    const size_t cuts[] = {0, 700, 1900, MN};
    for (int r = 0; fused && r < 3; r++) {
        size_t lo = cuts[r], len = cuts[r + 1] - lo;
        tw_update ur = u;
        ur.l2_count = ML2 > lo ? (ML2 - lo < len ? ML2 - lo : len) : 0;
        tw_tensor at[MAX_GRADS];
        for (int t = 0; t < n_grads; t++)
            at[t] = tw_tensor_at(gv[t], lo);
        OK(tw_update_mean(B, &ur, tw_tensor_at(p, lo), at, n_grads, tw_tensor_at(p, MN + lo),
                          tw_tensor_at(p, 2 * MN + lo), tw_tensor_at(p, 3 * MN + lo), len, &E));
    }
    dev_read(out, arena, 4 * MN);
    dev_read(mean, g[0], MN);
    tw_backend_free(B, arena);
    for (int t = 0; t < n_grads; t++)
        tw_backend_free(B, g[t]);
}

/* The fused mean + update, split in ranges, gives the same bits as the all-reduce followed by the
 * update, for every optimizer and 1 to 3 gradients; grads[0] holds the mean afterwards when keep_mean
 * asks for it, and its own values otherwise. */
static void test_update_mean(void **state)
{
    (void)state;
    float *h[MAX_GRADS], *w = floats(MN), *want = floats(4 * MN), *got = floats(4 * MN);
    float *want_mean = floats(MN), *got_mean = floats(MN);
    fill(w, MN, -1, 1);
    for (int t = 0; t < MAX_GRADS; t++)
        fill(h[t] = floats(MN), MN, -1, 1);
    assert_true(tw_backend_has_update_mean(B));
    for (int kind = TW_OPT_SGD; kind <= TW_OPT_ADAM; kind++)
        for (int n = 1; n <= MAX_GRADS; n++) {
            mean_step(kind, n, h, w, 0, 0, want, want_mean);
            mean_step(kind, n, h, w, 1, 1, got, got_mean);
            assert_memory_equal(got, want, 4 * MN * sizeof(float));
            assert_memory_equal(got_mean, want_mean, MN * sizeof(float));
            assert_memory_not_equal(got, w, MN * sizeof(float)); /* the step moved the weights */
            mean_step(kind, n, h, w, 1, 0, got, got_mean);
            assert_memory_equal(got, want, 4 * MN * sizeof(float));
            assert_memory_equal(got_mean, n > 1 ? h[0] : want_mean, MN * sizeof(float));
        }
    tw_buffer *a = dev_from(w, MN);
    tw_update u = {.kind = TW_OPT_SGD, .lr = 0.1f};
    tw_tensor twice[2] = {view(a), view(a)};
    assert_invalid(tw_update_mean(B, &u, view(a), twice, 0, (tw_tensor){0}, (tw_tensor){0},
                                  (tw_tensor){0}, MN, &E), "tw_update_mean", "n_grads");
    tw_buffer *p = dev_new(MN);
    assert_invalid(tw_update_mean(B, &u, view(p), twice, 2, (tw_tensor){0}, (tw_tensor){0},
                                  (tw_tensor){0}, MN, &E), "tw_update_mean", "grads");
    tw_backend_free(B, a);
    tw_backend_free(B, p);
    for (int t = 0; t < MAX_GRADS; t++)
        free(h[t]);
    free(w), free(want), free(got), free(want_mean), free(got_mean);
}

/* Out-of-range, misaligned, missing and overlapping views, bad sizes and bad windows: each refused with
 * TW_ERR_INVALID naming the wrapper and the argument, before the op runs. */
static void test_wrapper_checks(void **state)
{
    (void)state;
    tw_buffer *a = dev_new(6), *c = dev_new(4), *small = dev_new(3);
    tw_tensor va = view(a), vc = view(c), vs = view(small), none = {NULL, 0}, odd = {a, 2};
    tw_status s;
    s = tw_gemm(B, 0, 0, 2, 2, 3, 1, va, va, 0, vs, &E);
    assert_invalid(s, "tw_gemm", "argument c");
    tw_update sgd = {.kind = TW_OPT_SGD, .lr = 0.1f};
    assert_true(tw_backend_has_gemm_update(B));
    s = tw_gemm_update(B, &sgd, 0, 0, 2, 2, 3, va, va, vs, vc, none, none, none, &E);
    assert_invalid(s, "tw_gemm_update", "argument c");
    s = tw_gemm_update(B, &sgd, 0, 0, 2, 2, 3, va, va, vc, va, none, none, none, &E);
    assert_invalid(s, "tw_gemm_update", "params");
    s = tw_gemm_update(B, NULL, 0, 0, 2, 2, 3, va, va, vc, vc, none, none, none, &E);
    assert_invalid(s, "tw_gemm_update", "no update");
    s = tw_gemm(B, 0, 0, 2, 2, 3, 1, va, va, 0, tw_tensor_at(vc, 1), &E);
    assert_invalid(s, "tw_gemm", "argument c");
    s = tw_gemm(B, 0, 0, 2, 2, 3, 1, odd, va, 0, vc, &E);
    assert_invalid(s, "tw_gemm", "argument a: offset 2");
    s = tw_gemm(B, 0, 0, 2, 2, 3, 1, none, va, 0, vc, &E);
    assert_invalid(s, "tw_gemm", "argument a has no buffer");
    s = tw_gemm(B, 0, 0, 0, 2, 3, 1, va, va, 0, vc, &E);
    assert_invalid(s, "tw_gemm", "argument m");
    s = tw_gemm(B, 0, 0, 2, 2, 1, 1, va, va, 0, va, &E);
    assert_invalid(s, "tw_gemm", "argument c overlaps argument a");
    s = tw_gemm(NULL, 0, 0, 2, 2, 3, 1, va, va, 0, vc, &E);
    assert_invalid(s, "tw_gemm", "no backend");
    tw_window one = window2d(1, 1, 1, 1, 1, 1, 0); /* x, y and f of one value each */
    tw_tensor v1 = tw_tensor_at(va, 1), v2 = tw_tensor_at(va, 2), v3 = tw_tensor_at(va, 3);
    s = tw_conv_bwd(B, &one, 1, v1, v2, va, va, v3, vc, &E);
    assert_invalid(s, "tw_conv_bwd", "argument dx overlaps argument x");
    s = tw_conv_bwd(B, &one, 1, v1, v2, vc, va, v3, none, &E);
    assert_invalid(s, "tw_conv_bwd", "argument f has no buffer");
    assert_invalid(tw_act_fwd(B, (tw_activation)9, va, va, 6, &E), "tw_act_fwd", "activation 9");
    assert_invalid(tw_act_bwd(B, TW_ACT_RELU, va, va, vs, 6, &E), "tw_act_bwd", "argument y");
    assert_invalid(tw_dropout_fwd(B, va, va, 6, 1.0f, 1, &E), "tw_dropout_fwd", "rate");
    assert_invalid(tw_dropout_bwd(B, va, va, 0, 0.5f, 1, &E), "tw_dropout_bwd", "argument n");
    assert_invalid(tw_bias_add(B, va, vs, 1, 6, &E), "tw_bias_add", "argument bias");
    assert_invalid(tw_sum_squares(B, va, va, 6, &E), "tw_sum_squares", "argument out overlaps");
    s = tw_backend_upload(B, tw_tensor_at(vs, 1), "0123456789ab", 12, &E);
    assert_invalid(s, "tw_backend_upload", "argument dst");
    assert_invalid(tw_backend_zero(B, vs, 0, &E), "tw_backend_zero", "argument bytes");

    tw_update u = {.kind = TW_OPT_ADAM, .l2_count = 2};
    s = tw_update_step(B, &u, vc, vs, va, none, none, 3, &E);
    assert_invalid(s, "tw_update_step", "argument slot2");
    u.l2_count = 4;
    s = tw_update_step(B, &u, vc, vs, va, va, none, 3, &E);
    assert_invalid(s, "tw_update_step", "l2_count 4");
    u = (tw_update){.kind = TW_OPT_SGD, .ema = 1};
    s = tw_update_step(B, &u, vc, vs, none, none, none, 3, &E);
    assert_invalid(s, "tw_update_step", "argument ema");

    tw_window w = window2d(1, 4, 4, 1, 2, 2, 0);
    tw_buffer *x = dev_new(16), *cols = dev_new(16);
    OK(tw_im2col(B, &w, view(cols), view(x), &E));
    w.out_h = 3; /* the third window would start past the input */
    assert_invalid(tw_im2col(B, &w, view(cols), view(x), &E), "tw_im2col", "axis h");
    w.out_h = 2;
    w.pad_w = 2;
    assert_invalid(tw_maxpool_fwd(B, &w, vc, va, view(x), &E), "tw_maxpool_fwd", "padding 2");
    w.pad_w = 0;
    assert_invalid(tw_col2im(B, &w, view(x), vs, &E), "tw_col2im", "argument cols");
    s = tw_maxpool_bwd_relu(B, &w, view(cols), vc, va, vs, &E); /* x: 3 values of the 16 */
    assert_invalid(s, "tw_maxpool_bwd_relu", "argument x");
    s = tw_backend_allreduce_avg(&B, 0, &va, 6, &E);
    assert_invalid(s, "tw_backend_allreduce_avg", "argument n_towers");
    assert_invalid(tw_backend_sync(NULL, &E), "tw_backend_sync", "no backend");
    tw_buffer *bufs[] = {a, c, small, x, cols};
    for (size_t i = 0; i < 5; i++)
        tw_backend_free(B, bufs[i]);
    tw_backend_free(B, NULL);
}

/* ---- window arithmetic ---- */

static void test_window_resolve(void **state)
{
    (void)state;
    tw_window w = window2d(1, 28, 28, 1, 5, 1, 1);
    assert_int_equal(w.out_h, 28);
    assert_int_equal(w.out_w, 28);
    assert_int_equal(w.pad_h, 2);
    assert_int_equal(w.pad_w, 2);
    assert_int_equal(w.out_d, 1);
    assert_int_equal(w.pad_d, 0);
    w = window2d(1, 28, 28, 1, 2, 2, 1);
    assert_int_equal(w.out_h, 14);
    assert_int_equal(w.pad_h, 0);
    w = window2d(1, 7, 7, 1, 3, 2, 0);
    assert_int_equal(w.out_h, 3);
    assert_int_equal(w.out_w, 3);
    assert_int_equal(w.pad_w, 0);
    w = window3d(1, 9, 8, 7, 1, 3, 3, 3, 2, 1); /* SAME: 5x4x4, pad_total 2, 1, 2 */
    assert_int_equal(w.out_d, 5);
    assert_int_equal(w.out_h, 4);
    assert_int_equal(w.out_w, 4);
    assert_int_equal(w.pad_d, 1);
    assert_int_equal(w.pad_h, 0);
    assert_int_equal(w.pad_w, 1);
    w = (tw_window){.batch = 1, .in_d = 1, .in_h = 4, .in_w = 4, .in_c = 1, .k_d = 1, .k_h = 5,
                    .k_w = 3, .s_d = 1, .s_h = 1, .s_w = 1};
    assert_invalid(tw_window_resolve(&w, 0, &E), "tw_window_resolve", "larger");
    OK(tw_window_resolve(&w, 1, &E));
    assert_int_equal(w.out_h, 4);
    assert_int_equal(w.pad_h, 2);
    w.s_w = 0;
    assert_invalid(tw_window_resolve(&w, 1, &E), "tw_window_resolve", "stride");
}

/* ---- registry ---- */

static void test_registry(void **state)
{
    (void)state;
    tw_backend *b = NULL;
    OK(tw_backend_create("cpu", 0, &b, &E));
    assert_string_equal(tw_backend_name(b), "cpu");
    assert_string_equal(tw_backend_kind(b), "cpu");
    tw_backend_destroy(b);
    int gpus = tw_backend_devices("cuda"); /* 0 without a CUDA build, a driver or a device */
    OK(tw_backend_create("auto", 0, &b, &E));
    assert_string_equal(tw_backend_kind(b), gpus ? "cuda" : "cpu");
    tw_backend_destroy(b);
    b = B; /* a stale value: a failed create must reset it */
    assert_int_equal(tw_backend_create("cuda", gpus, &b, &E), TW_ERR_UNSUPPORTED);
    assert_null(b);
    assert_non_null(strstr(E.message, gpus ? "device" : "no CUDA backend"));
    assert_invalid(tw_backend_create("bogus", 0, &b, &E), "tw_backend_create", "bogus");
    assert_invalid(tw_backend_create(NULL, 0, &b, &E), "tw_backend_create", "kind");
    assert_int_equal(tw_backend_devices("cpu"), 1);
    assert_true(tw_backend_devices("cuda") >= 0);
    assert_int_equal(tw_backend_devices("bogus"), 0);
    tw_backend_destroy(NULL);
}

/* ---- optional ops: the CPU backend offers none and gets the plain behaviour ---- */

static void test_optional_ops(void **state)
{
    (void)state;
    void *p = NULL;
    OK(tw_backend_alloc_host(B, 64, &p, &E)); /* malloc */
    assert_non_null(p);
    memset(p, 0xab, 64);
    tw_backend_free_host(B, p);
    tw_backend_free_host(B, NULL);
    assert_invalid(tw_backend_alloc_host(B, 0, &p, &E), "tw_backend_alloc_host", "bytes");
    assert_invalid(tw_backend_alloc_host(B, 8, NULL, &E), "tw_backend_alloc_host", "out");
    tw_math tf32 = {.tf32 = 1}, none = {0};
    OK(tw_backend_set_math(B, &tf32, &E)); /* no TF32 on the CPU: ignored */
    OK(tw_backend_set_math(B, &none, &E));
    assert_int_equal(tw_backend_has_graphs(B), 0);
    assert_int_equal(tw_backend_has_graphs(NULL), 0);
    assert_int_equal(tw_backend_capture_begin(B, &E), TW_ERR_UNSUPPORTED);
    assert_non_null(strstr(E.message, "no graphs"));
    assert_int_equal(tw_backend_capture_end(B, 0, 1, &E), TW_ERR_UNSUPPORTED);
    assert_int_equal(tw_backend_replay(B, 0, &E), TW_ERR_UNSUPPORTED);
    assert_invalid(tw_backend_replay(NULL, 0, &E), "tw_backend_replay", "backend");
}

static int setup(void **state)
{
    (void)state;
    return tw_backend_create("cpu", 0, &B, &E) == TW_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tw_backend_destroy(B);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_transposes),
        cmocka_unit_test(test_gemm_large),
        cmocka_unit_test(test_dense_gradients),
        cmocka_unit_test(test_bias_grad_order),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_activations_in_place),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_conv2d_same_stride2),
        cmocka_unit_test(test_conv3d_valid),
        cmocka_unit_test(test_conv_same3d_valid_leftover),
        cmocka_unit_test(test_conv_winograd),
        cmocka_unit_test(test_col2im_adjoint),
        cmocka_unit_test(test_maxpool2d),
        cmocka_unit_test(test_maxpool3d),
        cmocka_unit_test(test_maxpool_bwd_relu),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_xent_bad_label),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_update_sgd),
        cmocka_unit_test(test_update_mean),
        cmocka_unit_test(test_instance_threads),
        cmocka_unit_test(test_update_momentum),
        cmocka_unit_test(test_update_adam),
        cmocka_unit_test(test_update_nesterov),
        cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_batch_norm),
        cmocka_unit_test(test_batch_norm_far_from_zero),
        cmocka_unit_test(test_joins),
        cmocka_unit_test(test_update_weight_decay),
        cmocka_unit_test(test_xent_label_smoothing),
        cmocka_unit_test(test_update_l2_range),
        cmocka_unit_test(test_update_without_ema),
        cmocka_unit_test(test_allreduce_avg),
        cmocka_unit_test(test_wrapper_checks),
        cmocka_unit_test(test_optional_ops),
        cmocka_unit_test(test_window_resolve),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
