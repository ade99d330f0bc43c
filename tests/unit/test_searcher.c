/* test_searcher.c — server/searcher.c: the spec decoded strictly (errors name the key), a grid visits every
 * point once, random trials are reproducible from the seed and inside their ranges, values go into the
 * config by dotted key, the rungs' steps, and ASHA's promotions equal those of the published algorithm
 * (Li et al. 2020, Algorithm 2), written again below from the paper, step for step on a simulated sweep
 * of workers finishing in a recorded order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "searcher.h"

static json_t *parse(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("bad JSON in the test: %s", je.text);
    return j;
}

static tw_status decode(const char *text, tw_sweep_spec *s, tw_error *err)
{
    json_t *doc = parse(text);
    tw_status st = tw_sweep_spec_decode(doc, NULL, s, err); /* the engine's default steps: 1000 */
    json_decref(doc);
    return st;
}

static void test_bad_specs_name_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *text, *words;
    } cases[] = {
        {"{\"metric\": \"eval_loss\", \"searcher\": {\"type\": \"grid\"}}", "space: must be an object"},
        {"{\"space\": {\"a\": []}, \"metric\": \"m\", \"searcher\": {\"type\": \"grid\"}}", "space.a: a choice needs"},
        {"{\"space\": {\"a\": {\"type\": \"log_uniform\", \"min\": 0, \"max\": 1}}, \"metric\": \"m\", "
         "\"searcher\": {\"type\": \"random\"}}", "space.a: a log_uniform range needs min > 0"},
        {"{\"space\": {\"a\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}, \"metric\": \"m\", "
         "\"searcher\": {\"type\": \"grid\"}}", "a grid needs points for space.a"},
        {"{\"space\": {\"a\": [1]}, \"metric\": \"m\", \"searcher\": {\"type\": \"asha\", \"reduction_factor\": 1}}",
         "searcher.reduction_factor: must be an integer from 2 to 16"},
        {"{\"space\": {\"a\": [1]}, \"metric\": \"m\", \"searcher\": {\"type\": \"bayes\"}}",
         "searcher.type: must be grid, random or asha"},
        {"{\"space\": {\"a\": [1]}, \"searcher\": {\"type\": \"grid\"}}", "metric: name the run metric"},
        {"{\"space\": {\"a\": [1]}, \"metric\": \"m\", \"searcher\": {\"type\": \"grid\", \"rung\": 2}}",
         "searcher.rung: unknown key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tw_sweep_spec s;
        tw_error err;
        assert_int_equal(decode(cases[i].text, &s, &err), TW_ERR_INVALID);
        if (!strstr(err.message, cases[i].words))
            fail_msg("case %zu: '%s' does not say '%s'", i, err.message, cases[i].words);
        tw_sweep_spec_clear(&s);
    }
}

static void test_grid_visits_every_point_once(void **state)
{
    (void)state;
    tw_sweep_spec s;
    tw_error err;
    assert_int_equal(decode("{\"space\": {\"opt\": [\"sgd\", \"adam\"], \"units\": {\"type\": \"int\", \"min\": 1, "
                            "\"max\": 3}, \"lr\": {\"type\": \"log_uniform\", \"min\": 0.001, \"max\": 0.1, \"count\": 3}},"
                            " \"metric\": \"eval_accuracy\", \"searcher\": {\"type\": \"grid\"}}", &s, &err), TW_OK);
    assert_int_equal(tw_sweep_trials(&s), 18);
    assert_true(s.maximize); /* an accuracy */
    char seen[18][96];
    for (int i = 0; i < 18; i++) {
        json_t *v = tw_sweep_trial_values(&s, i);
        char *text = json_dumps(v, JSON_COMPACT);
        snprintf(seen[i], sizeof seen[i], "%s", text);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(seen[i], seen[j]);
        double lr = json_real_value(json_object_get(v, "lr"));
        assert_true(fabs(lr - 0.001) < 1e-12 || fabs(lr - 0.01) < 1e-12 || fabs(lr - 0.1) < 1e-12);
        free(text);
        json_decref(v);
    }
    assert_string_equal(seen[0], "{\"opt\":\"sgd\",\"units\":1,\"lr\":0.001}"); /* the last key fastest */
    assert_string_equal(seen[1], "{\"opt\":\"sgd\",\"units\":1,\"lr\":0.01}");
    tw_sweep_spec_clear(&s);
}

/* ASHA sampling the grid: every point once, in an order the seed draws (another seed, another order). */
static void test_sampling_the_grid_takes_each_point_once(void **state)
{
    (void)state;
    const char *spec = "{\"space\": {\"lr\": [0.001, 0.01, 0.1, 1], \"w\": [32, 64, 128, 500]}, \"metric\": "
                       "\"eval_loss\", \"searcher\": {\"type\": \"asha\", \"sample\": \"grid\", \"seed\": %d}}";
    char text[512];
    tw_sweep_spec a, b, grid;
    tw_error err;
    snprintf(text, sizeof text, spec, 1);
    assert_int_equal(decode(text, &a, &err), TW_OK);
    snprintf(text, sizeof text, spec, 2);
    assert_int_equal(decode(text, &b, &err), TW_OK);
    assert_int_equal(decode("{\"space\": {\"lr\": [0.001, 0.01, 0.1, 1], \"w\": [32, 64, 128, 500]}, \"metric\": "
                            "\"eval_loss\", \"searcher\": {\"type\": \"grid\"}}", &grid, &err), TW_OK);
    assert_int_equal(tw_sweep_trials(&a), 16); /* the grid's size by default */
    int used_a[16] = {0}, used_b[16] = {0}, same_order = 1;
    for (int i = 0; i < 16; i++) {
        json_t *va = tw_sweep_trial_values(&a, i), *vb = tw_sweep_trial_values(&b, i);
        for (int j = 0; j < 16; j++) {
            json_t *g = tw_sweep_trial_values(&grid, j);
            used_a[j] += json_equal(va, g);
            used_b[j] += json_equal(vb, g);
            json_decref(g);
        }
        same_order &= json_equal(va, vb);
        json_decref(va);
        json_decref(vb);
    }
    for (int j = 0; j < 16; j++) {
        assert_int_equal(used_a[j], 1);
        assert_int_equal(used_b[j], 1);
    }
    assert_false(same_order);
    tw_sweep_spec_clear(&a);
    tw_sweep_spec_clear(&b);
    tw_sweep_spec_clear(&grid);
    assert_int_not_equal(decode("{\"space\": {\"lr\": [0.1, 1]}, \"metric\": \"eval_loss\", \"searcher\": "
                                "{\"type\": \"random\", \"sample\": \"grid\", \"max_trials\": 3}}", &a, &err), TW_OK);
    assert_non_null(strstr(err.message, "searcher.max_trials: must be an integer from 1 to 2"));
    tw_sweep_spec_clear(&a);
}

static void test_random_is_seeded_and_in_range(void **state)
{
    (void)state;
    const char *spec = "{\"space\": {\"lr\": {\"type\": \"log_uniform\", \"min\": 0.0001, \"max\": 0.1}, "
                       "\"drop\": {\"type\": \"uniform\", \"min\": 0, \"max\": 0.5}, \"w\": [32, 64, 128]}, "
                       "\"metric\": \"eval_loss\", \"searcher\": {\"type\": \"random\", \"max_trials\": 40, "
                       "\"seed\": %d}}";
    char text[512];
    tw_sweep_spec a, b, c;
    tw_error err;
    snprintf(text, sizeof text, spec, 7);
    assert_int_equal(decode(text, &a, &err), TW_OK);
    assert_int_equal(decode(text, &b, &err), TW_OK);
    snprintf(text, sizeof text, spec, 8);
    assert_int_equal(decode(text, &c, &err), TW_OK);
    assert_false(a.maximize);
    int differ = 0, small = 0;
    for (int i = 0; i < 40; i++) {
        json_t *va = tw_sweep_trial_values(&a, i), *vb = tw_sweep_trial_values(&b, i), *vc = tw_sweep_trial_values(&c, i);
        assert_true(json_equal(va, vb));
        differ += !json_equal(va, vc);
        double lr = json_real_value(json_object_get(va, "lr")), drop = json_real_value(json_object_get(va, "drop"));
        assert_true(lr >= 0.0001 && lr <= 0.1 && drop >= 0 && drop <= 0.5); /* 6 digits may reach an end */
        small += lr < 0.001 * 3.2; /* log-uniform: about half below the geometric middle */
        json_int_t w = json_integer_value(json_object_get(va, "w"));
        assert_true(w == 32 || w == 64 || w == 128);
        json_decref(va);
        json_decref(vb);
        json_decref(vc);
    }
    assert_true(differ == 40);
    assert_in_range(small, 10, 30);
    tw_sweep_spec_clear(&a);
    tw_sweep_spec_clear(&b);
    tw_sweep_spec_clear(&c);
}

static void test_values_go_into_the_config(void **state)
{
    (void)state;
    json_t *base = parse("{\"optimizer\": {\"type\": \"sgd\"}, \"model\": {\"layers\": [{\"type\": \"flatten\"}, "
                         "{\"type\": \"dense\", \"units\": 10}]}}");
    json_t *values = parse("{\"optimizer.learning_rate\": 0.5, \"model.layers[1].units\": 64, \"lr_decay.type\": "
                           "\"cosine\"}");
    json_t *out;
    tw_error err;
    assert_int_equal(tw_sweep_apply(base, values, &out, &err), TW_OK);
    assert_true(json_real_value(json_object_get(json_object_get(out, "optimizer"), "learning_rate")) == 0.5);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(json_object_get(out, "model"),
                                                                                       "layers"), 1), "units")), 64);
    assert_string_equal(json_string_value(json_object_get(json_object_get(out, "lr_decay"), "type")), "cosine");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(json_object_get(base, "model"),
                                                                                       "layers"), 1), "units")), 10);
    json_decref(out);
    json_decref(values);
    values = parse("{\"model.layers[5].units\": 1}");
    assert_int_equal(tw_sweep_apply(base, values, &out, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "space.model.layers[5]: the config has no element 5 there"));
    json_decref(values);
    json_decref(base);
}

static void test_rung_steps(void **state)
{
    (void)state;
    tw_sweep_spec s;
    tw_error err;
    assert_int_equal(decode("{\"space\": {\"a\": [1]}, \"metric\": \"m\", \"searcher\": {\"type\": \"asha\", "
                            "\"max_steps\": 3000, \"reduction_factor\": 4, \"rungs\": 3}}", &s, &err), TW_OK);
    assert_int_equal(tw_sweep_rung_count(&s), 3);
    assert_int_equal(tw_sweep_rung_steps(&s, 0), 187);
    assert_int_equal(tw_sweep_rung_steps(&s, 1), 750);
    assert_int_equal(tw_sweep_rung_steps(&s, 2), 3000);
    tw_sweep_spec_clear(&s);
}

/* ---- ASHA against the paper ---- */

enum { TRIALS = 60, ETA = 3, RUNGS = 4, WORKERS = 5 };

/* Algorithm 2, as the paper writes it: rungs hold (trial, loss) in completion order; get_job looks for the
 * highest k with a trial in top_k(rung k, |rung k| / eta) not yet promoted, else a new trial. */
typedef struct {
    int trial[RUNGS][TRIALS];
    double loss[RUNGS][TRIALS];
    int size[RUNGS];
    int promoted[RUNGS][TRIALS]; /* promoted[k][t]: trial t was promoted out of rung k */
    int started;
} paper;

static void paper_get_job(paper *p, int *trial, int *rung)
{
    for (int k = RUNGS - 2; k >= 0; k--) {
        int n = p->size[k], top = n / ETA, used[TRIALS] = {0};
        for (int j = 0; j < top; j++) { /* the j-th best of rung k: smallest loss, the earlier trial on a tie */
            int best = -1;
            for (int i = 0; i < n; i++) {
                int t = p->trial[k][i];
                if (!used[t] && (best < 0 || p->loss[k][i] < p->loss[k][best] ||
                                 (p->loss[k][i] == p->loss[k][best] && t < p->trial[k][best])))
                    best = i;
            }
            used[p->trial[k][best]] = 1;
            if (!p->promoted[k][p->trial[k][best]]) {
                p->promoted[k][p->trial[k][best]] = 1;
                *trial = p->trial[k][best];
                *rung = k + 1;
                return;
            }
        }
    }
    *trial = p->started < TRIALS ? p->started++ : -1;
    *rung = 0;
}

/* The recorded result of trial t at rung k: a loss that mostly keeps its order from rung to rung. */
static double result(int t, int k) { return fmod(t * 0.37, 1.0) / (1 + k) + 0.01 * ((t * 7 + k * 3) % 5); }

static void test_asha_follows_the_paper(void **state)
{
    (void)state;
    tw_sweep_spec s;
    tw_error err;
    char text[256];
    snprintf(text, sizeof text, "{\"space\": {\"a\": [1]}, \"metric\": \"eval_loss\", \"searcher\": {\"type\": "
             "\"asha\", \"max_trials\": %d, \"reduction_factor\": %d, \"rungs\": %d, \"max_concurrent\": %d}}",
             TRIALS, ETA, RUNGS, WORKERS);
    assert_int_equal(decode(text, &s, &err), TW_OK);
    static paper p;
    static tw_sweep_trial trials[TRIALS];
    memset(&p, 0, sizeof p);
    memset(trials, 0, sizeof trials);
    int n = 0, queue[WORKERS][2], qn = 0, decisions = 0, promotions = 0;
    for (;;) {
        while (qn < WORKERS) { /* a free worker asks both */
            int pt, pk;
            paper_get_job(&p, &pt, &pk);
            tw_sweep_action a = tw_sweep_next(&s, trials, n);
            if (pt < 0) {
                assert_true(a.kind == TW_SWEEP_WAIT || a.kind == TW_SWEEP_DONE);
                break;
            }
            assert_int_equal(a.kind, pk ? TW_SWEEP_PROMOTE : TW_SWEEP_START);
            assert_int_equal(a.trial, pt);
            assert_int_equal(a.rung, pk);
            decisions++;
            promotions += pk > 0;
            if (pk == 0)
                n++;
            trials[pt].rung = pk;
            trials[pt].running = 1;
            trials[pt].done = 0;
            queue[qn][0] = pt;
            queue[qn++][1] = pk;
        }
        if (!qn)
            break;
        /* the recorded order: every running job finishes before the workers ask again (a busy server),
         * the smallest trial index plus rung first, so several rungs have a trial to promote at once */
        while (qn) {
            int f = 0;
            for (int j = 1; j < qn; j++)
                if (queue[j][0] + 7 * queue[j][1] < queue[f][0] + 7 * queue[f][1])
                    f = j;
            int t = queue[f][0], k = queue[f][1];
            queue[f][0] = queue[qn - 1][0];
            queue[f][1] = queue[--qn][1];
            trials[t].running = 0;
            trials[t].done = 1;
            trials[t].metric[k] = result(t, k);
            p.trial[k][p.size[k]] = t;
            p.loss[k][p.size[k]++] = result(t, k);
        }
    }
    assert_int_equal(tw_sweep_next(&s, trials, n).kind, TW_SWEEP_DONE);
    assert_int_equal(n, TRIALS);
    assert_true(promotions >= TRIALS / ETA); /* both promoted the same, and did promote */
    assert_int_equal(decisions, TRIALS + promotions);
    int best = tw_sweep_best(&s, trials, n);
    assert_int_equal(trials[best].rung, RUNGS - 1);
    tw_sweep_spec_clear(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_specs_name_the_key),
        cmocka_unit_test(test_grid_visits_every_point_once),
        cmocka_unit_test(test_random_is_seeded_and_in_range),
        cmocka_unit_test(test_sampling_the_grid_takes_each_point_once),
        cmocka_unit_test(test_values_go_into_the_config),
        cmocka_unit_test(test_rung_steps),
        cmocka_unit_test(test_asha_follows_the_paper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
