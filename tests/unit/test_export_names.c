/* test_export_names.c — the TF export's name maps (engine/export_names.h): the built-in maps (tower, seed)
 * applied to a model's names, a map's leaves and variables, each refusal of the decoder and of the mapping
 * asserted by its message, and map files read through tw_export_names_open (their errors carrying the
 * file). TensorFlow restores an export made with them in tests/integration/test_export_seed.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "export_names.h"
#include "testutil.h"

/* The seed MLP's variables as Tower names them, and a batch norm's. */
static const char *const MLP[] = {"layer1/weights", "layer1/biases", "layer2/weights", "layer2/biases",
                                  "bn/BatchNorm/gamma"};
enum { N_MLP = sizeof MLP / sizeof *MLP };

/* The map text decodes; the caller destroys it. */
static tw_export_names *decoded(const char *text)
{
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(doc);
    tw_export_names *m = NULL;
    tw_error err;
    tw_status s = tw_export_names_decode(doc, &m, &err);
    json_decref(doc);
    if (s != TW_OK)
        fail_msg("%s: %s", text, err.message);
    return m;
}

/* The map text is refused with a message containing says. */
static void refused(const char *text, const char *says)
{
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(doc);
    tw_export_names *m = (tw_export_names *)1;
    tw_error err;
    assert_int_equal(tw_export_names_decode(doc, &m, &err), TW_ERR_INVALID);
    json_decref(doc);
    assert_null(m);
    if (!strstr(err.message, says))
        fail_msg("%s: got \"%s\", expected \"%s\"", text, err.message, says);
}

/* m maps MLP's names to want[], in order. */
static void maps_to(const tw_export_names *m, const char *const *want)
{
    char out[N_MLP][TW_EXPORT_NAME_BYTES];
    tw_error err;
    assert_int_equal(tw_export_names_map(m, MLP, N_MLP, out, &err), TW_OK);
    for (size_t i = 0; i < N_MLP; i++)
        assert_string_equal(out[i], want[i]);
}

/* The map text does not fit the names[n]: the message contains says. */
static void map_refused(const char *text, const char *const *names, size_t n, const char *says)
{
    tw_export_names *m = decoded(text);
    char out[8][TW_EXPORT_NAME_BYTES];
    tw_error err;
    assert_int_equal(tw_export_names_map(m, names, n, out, &err), TW_ERR_INVALID);
    tw_export_names_destroy(m);
    if (!strstr(err.message, says))
        fail_msg("%s: got \"%s\", expected \"%s\"", text, err.message, says);
}

static void test_builtin_tower_keeps_the_names(void **state)
{
    (void)state;
    tw_export_names *m;
    tw_error err;
    assert_int_equal(tw_export_names_of_builtin("tower", &m, &err), TW_OK);
    maps_to(m, MLP);
    assert_string_equal(tw_export_names_step(m), "global_step");
    assert_int_equal(tw_export_names_step_dtype(m), TW_BUNDLE_INT64);
    tw_export_names_destroy(m);
}

static void test_builtin_seed_is_the_seed_graphs(void **state)
{
    (void)state;
    tw_export_names *m;
    tw_error err;
    assert_int_equal(tw_export_names_open("seed", &m, &err), TW_OK);
    static const char *const want[] = {"layer1/w", "layer1/bias", "layer2/w", "layer2/bias", "bn/BatchNorm/gamma"};
    maps_to(m, want);
    assert_string_equal(tw_export_names_step(m), "Variable");
    assert_int_equal(tw_export_names_step_dtype(m), TW_BUNDLE_INT32);
    tw_export_names_destroy(m);
    assert_int_equal(tw_export_names_of_builtin("sed", &m, &err), TW_ERR_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.message, "names: 'sed' is not a built-in name map (did you mean 'seed'?)"));
    assert_int_equal(tw_export_names_of_builtin("keras", &m, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "expected one of: tower, seed"));
}

static void test_variables_win_over_leaves(void **state)
{
    (void)state;
    tw_export_names *m = decoded("{\"leaves\": {\"weights\": \"kernel\", \"gamma\": \"scale\"},"
                                 " \"variables\": {\"layer2/weights\": \"logits/W\", \"layer2/biases\": \"logits/b\"},"
                                 " \"global_step\": {\"name\": \"step\"}}");
    static const char *const want[] = {"layer1/kernel", "layer1/biases", "logits/W", "logits/b",
                                       "bn/BatchNorm/scale"};
    maps_to(m, want);
    assert_string_equal(tw_export_names_step(m), "step");
    assert_int_equal(tw_export_names_step_dtype(m), TW_BUNDLE_INT64); /* the dtype not named: int64 */
    tw_export_names_destroy(m);
    m = decoded("{}");
    maps_to(m, MLP);
    tw_export_names_destroy(m);
}

static void test_decoding_refusals(void **state)
{
    (void)state;
    refused("[]", "names: a map must be a JSON object");
    refused("{\"leafs\": {}}", "leafs: unknown key (did you mean 'leaves'?)");
    refused("{\"colour\": 1}", "colour: unknown key (expected one of: leaves, variables, global_step)");
    refused("{\"global_step\": {\"nme\": \"x\"}}", "global_step.nme: unknown key (did you mean 'name'?)");
    refused("{\"global_step\": {\"size\": 4}}", "global_step.size: unknown key (expected one of: name, dtype)");
    refused("{\"leaves\": []}", "leaves: must be an object");
    refused("{\"variables\": \"x\"}", "variables: must be an object");
    refused("{\"global_step\": \"Variable\"}", "global_step: must be an object");
    refused("{\"leaves\": {\"weights\": 3}}", "leaves[\"weights\"]: must be a string (a TF name)");
    refused("{\"variables\": {\"layer1/weights\": null}}", "variables[\"layer1/weights\"]: must be a string");
    refused("{\"global_step\": {\"name\": 1}}", "global_step.name: must be a string");
    refused("{\"leaves\": {\"weights\": \"\"}}", "leaves[\"weights\"]: an empty name");
    refused("{\"leaves\": {\"\": \"w\"}}", "leaves[\"\"]: the key is an empty name");
    refused("{\"global_step\": {\"name\": \"\"}}", "global_step.name: an empty name");
    refused("{\"leaves\": {\"weights\": \"a/w\"}}", "leaves[\"weights\"]: 'a/w', more than one path component");
    refused("{\"leaves\": {\"a/weights\": \"w\"}}", "leaves[\"a/weights\"]: the key is 'a/weights', more than one");
    refused("{\"variables\": {\"layer1/weights\": \"my w\"}}",
            "variables[\"layer1/weights\"]: 'my w', whose character 3 (' ', 0x20) TF refuses in a name");
    refused("{\"variables\": {\"layer1/weights\": \"_w\"}}", "'_w', whose character 1 ('_', 0x5f) TF refuses");
    refused("{\"variables\": {\"layer1/weights\": \"w:0\"}}", "'w:0', whose character 2 (':', 0x3a)");
    refused("{\"variables\": {\"layer1/weights\": \"a\\u00e9\"}}", "whose character 2 ('?', 0xc3)");
    refused("{\"variables\": {\"layer1/weights\": \"a//w\"}}", "'a//w', which has an empty path component");
    refused("{\"global_step\": {\"name\": \"step/\"}}", "global_step.name: 'step/', which has an empty path");
    char text[300], says[100];
    snprintf(text, sizeof text, "{\"global_step\": {\"name\": \"%0*d\"}}", TW_EXPORT_NAME_BYTES, 0);
    snprintf(says, sizeof says, "a name of %d characters, over the %d allowed", TW_EXPORT_NAME_BYTES,
             TW_EXPORT_NAME_BYTES - 1);
    refused(text, says);
    refused("{\"variables\": {\"layer1/weights\": \"w\", \"layer2/weights\": \"w\"}}",
            "variables: 'layer1/weights' and 'layer2/weights' are both mapped to 'w'");
    refused("{\"global_step\": {\"dtype\": \"float32\"}}",
            "global_step.dtype: must be \"int32\" or \"int64\", got \"float32\"");
    refused("{\"global_step\": {\"dtype\": 32}}", "global_step.dtype: must be \"int32\" or \"int64\" (a string)");
}

static void test_mapping_refusals(void **state)
{
    (void)state;
    map_refused("{\"variables\": {\"layer3/weights\": \"w3\"}}", MLP, N_MLP,
                "names: variables[\"layer3/weights\"]: the model has no variable of that name");
    map_refused("{\"leaves\": {\"weights\": \"w\", \"biases\": \"w\"}}", MLP, N_MLP,
                "names: 'layer1/weights' and 'layer1/biases' would both be named 'layer1/w'");
    map_refused("{\"variables\": {\"layer1/weights\": \"layer1/biases\"}}", MLP, N_MLP,
                "'layer1/weights' and 'layer1/biases' would both be named 'layer1/biases'");
    map_refused("{\"variables\": {\"layer1/biases\": \"layer1/weights/ExponentialMovingAverage\"}}", MLP, N_MLP,
                "'layer1/weights' and 'layer1/biases' would both be named 'layer1/weights/ExponentialMovingAverage'");
    map_refused("{\"variables\": {\"layer2/biases\": \"Variable\"}, \"global_step\": {\"name\": \"Variable\"}}",
                MLP, N_MLP, "names: 'layer2/biases' would be named 'Variable', which is the step's name");
    char layer[100]; /* a name of 95 characters, the most there is; its leaf renamed longer */
    snprintf(layer, sizeof layer, "%0*d/weights", TW_EXPORT_NAME_BYTES - 9, 0);
    const char *const names[] = {layer};
    map_refused("{\"leaves\": {\"weights\": \"kernel_weights\"}}", names, 1, "would be named '000");
    map_refused("{\"leaves\": {\"weights\": \"kernel_weights\"}}", names, 1,
                "0/kernel_weights', over the 95 characters allowed");
}

static void test_map_files(void **state)
{
    (void)state;
    char dir[512], path[600];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "export_names"), 0);
    snprintf(path, sizeof path, "%s/map.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"leaves\": {\"weights\": \"w\"}, \"global_step\": {\"dtype\": \"int32\"}}\n", f);
    fclose(f);
    tw_export_names *m;
    tw_error err;
    assert_int_equal(tw_export_names_open(path, &m, &err), TW_OK);
    static const char *const want[] = {"layer1/w", "layer1/biases", "layer2/w", "layer2/biases",
                                       "bn/BatchNorm/gamma"};
    maps_to(m, want);
    assert_string_equal(tw_export_names_step(m), "global_step");
    assert_int_equal(tw_export_names_step_dtype(m), TW_BUNDLE_INT32);
    tw_export_names_destroy(m);

    static const struct {
        const char *text, *says;
    } bad[] = {{"{\"leaves\": {\"weights\": \"w\", \"weights\": \"v\"}}", "names: not JSON: duplicate object key"},
               {"{\"leaves\": ", "names: not JSON"},
               {"{\"global_step\": {\"dtype\": \"int16\"}}", "global_step.dtype: must be"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i].text, f);
        fclose(f);
        assert_int_equal(tw_export_names_open(path, &m, &err), TW_ERR_INVALID);
        assert_null(m);
        assert_non_null(strstr(err.message, bad[i].says));
        assert_string_equal(err.file, path);
    }
    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(tw_export_names_open(path, &m, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "names: neither a built-in name map (expected one of: tower, seed) nor a "
                                        "map file that opens"));
    assert_string_equal(err.file, path);
    assert_int_equal(tw_export_names_open("seeed", &m, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "did you mean 'seed'?"));
    assert_int_equal(tw_test_rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_tower_keeps_the_names),
        cmocka_unit_test(test_builtin_seed_is_the_seed_graphs),
        cmocka_unit_test(test_variables_win_over_leaves),
        cmocka_unit_test(test_decoding_refusals),
        cmocka_unit_test(test_mapping_refusals),
        cmocka_unit_test(test_map_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
