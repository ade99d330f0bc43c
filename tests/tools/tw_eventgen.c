/* tw_eventgen.c — writes one event file through the public eventlog API, for the TensorBoard tests
 * (tests/integration/test_tensorboard.py). Owns nothing but its arguments.
 *
 *   tw_eventgen LOGDIR [--steps N] [--resume-at K]
 *
 * Prints the event file's path on stdout. Exit status 0 ok, 1 failure, 2 usage. What it writes, so
 * a test can recompute every value (all arithmetic in float32 unless said otherwise):
 *   - scalar `loss` at every step s: 2 / (1 + 0.1·s), computed in double then rounded to float; a
 *     resumed run (--resume-at) writes half of that, to tell the runs apart.
 *   - scalar `eval/accuracy` at every step s: 1 - 0.5 / (1 + s), double then float.
 *   - histogram `layer1/weights` at every step s with s % 5 == 0: HISTO_VALUES values; value i is
 *     k_i / 2^24 · (1 + s) where k_i = (x_i >> 8) - 2^23 and x_i is the 32-bit LCG
 *     x_{i+1} = 1664525·x_i + 1013904223 (mod 2^32), x_0 = 12345 + s, stepped before each value.
 *   - the graph of a 784-500-10 MLP (Placeholder → MatMul → BiasAdd → Relu → MatMul → BiasAdd →
 *     Softmax, variables under layer1/ and layer2/) and the text summary `config` (CONFIG_JSON) at
 *     step 0 — first run only.
 *   - with --resume-at K: a SessionLog START at step K first, then steps K..N-1 (else 0..N-1).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "graph.h"

enum { HISTO_VALUES = 1000, HISTO_EVERY = 5, INPUTS = 784, HIDDEN = 500, CLASSES = 10 };

static const char CONFIG_JSON[] =
    "{\"model\": \"mlp\", \"hidden\": [500], \"lr\": 0.01, \"towers\": 2}";

static void histo_values(int64_t step, float *out)
{
    uint32_t x = 12345u + (uint32_t)step;
    for (int i = 0; i < HISTO_VALUES; i++) {
        x = 1664525u * x + 1013904223u;
        int32_t k = (int32_t)(x >> 8) - 8388608;
        out[i] = (float)k / 16777216.0f * (float)(1 + step);
    }
}

/* One node whose single output has the given shape. */
static tw_status node(tw_graph *g, const char *name, const char *op, const char *const *inputs,
                      size_t n_inputs, const int64_t *dims, size_t rank, tw_error *err)
{
    const tw_graph_attr attrs[] = {
        tw_graph_attr_type(n_inputs ? "T" : "dtype", TW_GRAPH_DT_FLOAT),
        tw_graph_attr_shapes("_output_shapes", dims, &rank, 1),
    };
    return tw_graph_add_node(g, name, op, inputs, n_inputs, attrs, 2, err);
}

/* scope/weights [in, out], scope/biases [out], scope/MatMul, scope/BiasAdd (+ scope/Relu). Writes
 * the name of the layer's output node into out_name. */
static tw_status layer(tw_graph *g, const char *scope, const char *input, int64_t in, int64_t out,
                       int relu, char *out_name, size_t size, tw_error *err)
{
    char w[64], b[64], mm[64], add[64];
    snprintf(w, sizeof w, "%s/weights", scope);
    snprintf(b, sizeof b, "%s/biases", scope);
    snprintf(mm, sizeof mm, "%s/MatMul", scope);
    snprintf(add, sizeof add, "%s/BiasAdd", scope);
    const int64_t wdims[] = {in, out}, act[] = {-1, out};
    const char *const mm_in[] = {input, w}, *const add_in[] = {mm, b}, *const relu_in[] = {add};
    TW_TRY(node(g, w, "VariableV2", NULL, 0, wdims, 2, err));
    TW_TRY(node(g, b, "VariableV2", NULL, 0, &out, 1, err));
    TW_TRY(node(g, mm, "MatMul", mm_in, 2, act, 2, err));
    TW_TRY(node(g, add, "BiasAdd", add_in, 2, act, 2, err));
    snprintf(out_name, size, "%s", add);
    if (!relu)
        return TW_OK;
    snprintf(out_name, size, "%s/Relu", scope);
    return node(g, out_name, "Relu", relu_in, 1, act, 2, err);
}

static tw_status build_mlp(tw_graph *g, tw_error *err)
{
    const int64_t x_dims[] = {-1, INPUTS}, y_dims[] = {-1, CLASSES};
    char h1[64], logits[64];
    TW_TRY(node(g, "input/x", "Placeholder", NULL, 0, x_dims, 2, err));
    TW_TRY(layer(g, "layer1", "input/x", INPUTS, HIDDEN, 1, h1, sizeof h1, err));
    TW_TRY(layer(g, "layer2", h1, HIDDEN, CLASSES, 0, logits, sizeof logits, err));
    const char *const sm_in[] = {logits};
    return node(g, "output/Softmax", "Softmax", sm_in, 1, y_dims, 2, err);
}

static tw_status write_graph(tw_events_writer *w, tw_error *err)
{
    tw_graph *g;
    TW_TRY(tw_graph_create(&g, err));
    uint8_t *bytes = NULL;
    size_t len = 0;
    tw_status s = build_mlp(g, err);
    if (s == TW_OK)
        s = tw_graph_serialize(g, &bytes, &len, err);
    if (s == TW_OK)
        s = tw_events_add_graph(w, bytes, len, err);
    free(bytes);
    tw_graph_destroy(g);
    return s;
}

static tw_status write_step(tw_events_writer *w, int64_t s, int resumed, tw_error *err)
{
    double loss = 2.0 / (1.0 + 0.1 * (double)s);
    TW_TRY(tw_events_add_scalar(w, "loss", s, (float)(resumed ? loss / 2 : loss), err));
    double accuracy = 1.0 - 0.5 / (1.0 + (double)s);
    TW_TRY(tw_events_add_scalar(w, "eval/accuracy", s, (float)accuracy, err));
    if (s % HISTO_EVERY != 0)
        return TW_OK;
    float values[HISTO_VALUES];
    histo_values(s, values);
    return tw_events_add_histogram(w, "layer1/weights", s, values, HISTO_VALUES, err);
}

static tw_status generate(tw_events_writer *w, int64_t steps, int64_t resume_at, tw_error *err)
{
    int resumed = resume_at >= 0;
    if (resumed)
        TW_TRY(tw_events_add_session_start(w, resume_at, err));
    else {
        TW_TRY(write_graph(w, err));
        TW_TRY(tw_events_add_text(w, "config", 0, CONFIG_JSON, err));
    }
    for (int64_t s = resumed ? resume_at : 0; s < steps; s++)
        TW_TRY(write_step(w, s, resumed, err));
    return TW_OK;
}

static int parse_count(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1000000)
        return 0;
    *out = v;
    return 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: tw_eventgen LOGDIR [--steps N] [--resume-at K]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int64_t steps = 20, resume_at = -1;
    if (argc < 2)
        return usage();
    for (int i = 2; i < argc; i++) {
        int64_t *target = !strcmp(argv[i], "--steps") ? &steps
                          : !strcmp(argv[i], "--resume-at") ? &resume_at : NULL;
        if (!target || i + 1 == argc || !parse_count(argv[++i], target))
            return usage();
    }
    tw_events_writer *w;
    tw_error err;
    tw_status s = tw_events_create(argv[1], NULL, &w, &err);
    if (s == TW_OK) {
        s = generate(w, steps, resume_at, &err);
        tw_error close_err;
        tw_status c = tw_events_close(w, &close_err);
        if (s == TW_OK && c != TW_OK) {
            s = c;
            err = close_err;
        }
        if (s == TW_OK)
            printf("%s\n", tw_events_path(w));
        tw_events_destroy(w);
    }
    if (s != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tw_eventgen: %s\n", msg);
        return 1;
    }
    return 0;
}
