/* test_example.c — tf.train.Example: the exact bytes we write (one packed block per list, key then
 * value), and decoding of packed, unpacked, empty and malformed input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "example.h"

/* Example{features{feature{key:"a" value{int64_list{value:[1,300]}}}}} as TensorFlow serializes it,
 * built from the inside out: one packed block 0a 03 01 ac 02, map entry key (0a) then value (12). */
static void test_int64_wire_bytes(void **state)
{
    (void)state;
    tw_example_builder *b;
    assert_int_equal(tw_example_builder_create(&b, NULL), TW_OK);
    const int64_t v[2] = {1, 300};
    assert_int_equal(tw_example_add_int64s(b, "a", v, 2, NULL), TW_OK);
    const uint8_t *data;
    size_t len;
    assert_int_equal(tw_example_serialize(b, &data, &len, NULL), TW_OK);
    const uint8_t list[] = {0x0a, 0x03, 0x01, 0xac, 0x02};
    uint8_t feature[2 + sizeof list] = {0x1a, sizeof list};
    memcpy(feature + 2, list, sizeof list);
    uint8_t entry[3 + 2 + sizeof feature] = {0x0a, 0x01, 'a', 0x12, sizeof feature};
    memcpy(entry + 5, feature, sizeof feature);
    uint8_t features[2 + sizeof entry] = {0x0a, sizeof entry};
    memcpy(features + 2, entry, sizeof entry);
    uint8_t example[2 + sizeof features] = {0x0a, sizeof features};
    memcpy(example + 2, features, sizeof features);
    assert_int_equal(len, sizeof example);
    assert_memory_equal(data, example, len);
    tw_example_builder_destroy(b);
}

static void test_round_trip_all_kinds(void **state)
{
    (void)state;
    tw_example_builder *b;
    assert_int_equal(tw_example_builder_create(&b, NULL), TW_OK);
    uint8_t pixels[784];
    for (int i = 0; i < 784; i++)
        pixels[i] = (uint8_t)i;
    const float f[3] = {0.5f, -2.0f, 1e-30f};
    const int64_t label = -7;
    for (int round = 0; round < 2; round++) { /* the builder is reusable */
        tw_example_builder_reset(b);
        assert_int_equal(tw_example_add_bytes1(b, "image_raw", pixels, sizeof pixels, NULL), TW_OK);
        assert_int_equal(tw_example_add_floats(b, "f", f, 3, NULL), TW_OK);
        assert_int_equal(tw_example_add_int64s(b, "label", &label, 1, NULL), TW_OK);
        const void *items[2] = {"xy", ""};
        const size_t lens[2] = {2, 0};
        assert_int_equal(tw_example_add_bytes(b, "multi", items, lens, 2, NULL), TW_OK);
        assert_int_equal(tw_example_add_floats(b, "empty", NULL, 0, NULL), TW_OK);
        const uint8_t *data;
        size_t len;
        assert_int_equal(tw_example_serialize(b, &data, &len, NULL), TW_OK);

        tw_example *ex;
        assert_int_equal(tw_example_parse(data, len, "x", 0, &ex, NULL), TW_OK);
        assert_int_equal(tw_example_feature_count(ex), 5);
        tw_feature ft;
        assert_true(tw_example_find(ex, "image_raw", &ft));
        assert_int_equal(ft.kind, TW_FEATURE_BYTES);
        assert_int_equal(ft.count, 1);
        size_t n;
        const uint8_t *p = tw_feature_bytes_at(&ft, 0, &n);
        assert_int_equal(n, 784);
        assert_memory_equal(p, pixels, 784);
        assert_true(tw_example_find(ex, "f", &ft));
        assert_int_equal(ft.kind, TW_FEATURE_FLOAT);
        assert_memory_equal(ft.floats, f, sizeof f);
        assert_true(tw_example_find(ex, "label", &ft));
        assert_int_equal(ft.kind, TW_FEATURE_INT64);
        assert_int_equal(ft.int64s[0], -7);
        assert_true(tw_example_find(ex, "multi", &ft));
        assert_int_equal(ft.count, 2);
        tw_feature_bytes_at(&ft, 1, &n);
        assert_int_equal(n, 0);
        assert_true(tw_example_find(ex, "empty", &ft));
        assert_int_equal(ft.kind, TW_FEATURE_FLOAT);
        assert_int_equal(ft.count, 0);
        assert_false(tw_example_find(ex, "missing", &ft));
        tw_example_destroy(ex);
    }
    tw_example_builder_destroy(b);
}

/* Unpacked lists (one tag per element), an empty Feature (0x12 0x00) and a repeated key. */
static void test_decode_unpacked_and_empty(void **state)
{
    (void)state;
    const uint8_t msg[] = {
        0x0a, 0x29,                                   /* features, 41 bytes */
        0x0a, 0x11, 0x0a, 0x01, 'u', 0x12, 0x0c,      /* entry "u", Feature of 12 bytes */
        0x12, 0x0a, 0x0d, 0x00, 0x00, 0x80, 0x3f,     /* float_list, unpacked: 1.0f */
        0x0d, 0x00, 0x00, 0x00, 0x40,                 /* 2.0f */
        0x0a, 0x05, 0x0a, 0x01, 'e', 0x12, 0x00,      /* entry "e", empty Feature */
        0x0a, 0x0d, 0x0a, 0x01, 'u', 0x12, 0x08,      /* entry "u" again: the last one wins */
        0x1a, 0x06, 0x08, 0x05, 0x08, 0x7f, 0x08, 0x01, /* int64_list, unpacked: 5, 127, 1 */
    };
    tw_example *ex;
    tw_error err;
    assert_int_equal(tw_example_parse(msg, sizeof msg, "x", 0, &ex, &err), TW_OK);
    assert_int_equal(tw_example_feature_count(ex), 3);
    tw_feature ft;
    tw_example_feature_at(ex, 0, &ft);
    assert_int_equal(ft.kind, TW_FEATURE_FLOAT);
    assert_int_equal(ft.count, 2);
    assert_true(ft.floats[0] == 1.0f && ft.floats[1] == 2.0f);
    assert_true(tw_example_find(ex, "e", &ft));
    assert_int_equal(ft.kind, TW_FEATURE_NONE);
    assert_true(tw_example_find(ex, "u", &ft));
    assert_int_equal(ft.kind, TW_FEATURE_INT64);
    assert_int_equal(ft.count, 3);
    assert_int_equal(ft.int64s[1], 127);
    tw_example_destroy(ex);
}

static void test_not_a_protobuf(void **state)
{
    (void)state;
    tw_example *ex;
    tw_error err;
    const uint8_t junk[] = {0x0a, 0x50, 0x01}; /* length past the end */
    assert_int_equal(tw_example_parse(junk, sizeof junk, "d.tfrecord", 1234, &ex, &err),
                     TW_ERR_CORRUPT);
    assert_null(ex);
    assert_int_equal(err.offset, 1234);
    assert_string_equal(err.file, "d.tfrecord");
    assert_non_null(strstr(err.message, "not a valid tf.train.Example"));
    const uint8_t bad_wire[] = {0x0f, 0x00}; /* wire type 7 does not exist */
    assert_int_equal(tw_example_parse(bad_wire, sizeof bad_wire, "d", 0, &ex, &err),
                     TW_ERR_CORRUPT);
}

static void test_feature_limit(void **state)
{
    (void)state;
    tw_example_builder *b;
    assert_int_equal(tw_example_builder_create(&b, NULL), TW_OK);
    int64_t v = 1;
    for (int i = 0; i < TW_EXAMPLE_MAX_FEATURES; i++)
        assert_int_equal(tw_example_add_int64s(b, "k", &v, 1, NULL), TW_OK);
    tw_error err;
    assert_int_equal(tw_example_add_int64s(b, "k", &v, 1, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "at most"));
    tw_example_builder_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int64_wire_bytes),
        cmocka_unit_test(test_round_trip_all_kinds),
        cmocka_unit_test(test_decode_unpacked_and_empty),
        cmocka_unit_test(test_not_a_protobuf),
        cmocka_unit_test(test_feature_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
