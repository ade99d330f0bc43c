/* test_hparams.c — the HParams summaries against the bytes docs/formats.md "HParams" gives (encoded
 * there with the protobuf library from TensorBoard's protos): the start info's content, the null
 * tensor, the end info's content, the plugin name and data class; bad hparams refused by name; the
 * group name's hash; and an end info appended in an event file of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

#include "event.pb-c.h"
#include "hparams.h"
#include "tfrecord.h"

/* The last record of path, unpacked as an Event (caller frees with twpb__event__free_unpacked). */
static Twpb__Event *last_event(const char *path)
{
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.compression = TW_COMPRESSION_NONE;
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(path, &o, &r, &err), TW_OK);
    const uint8_t *data;
    size_t len;
    Twpb__Event *ev = NULL;
    while (tw_tfrecord_read(r, &data, &len, &err) == TW_OK) {
        if (ev)
            twpb__event__free_unpacked(ev, NULL);
        ev = twpb__event__unpack(NULL, len, data);
        assert_non_null(ev);
    }
    tw_tfrecord_reader_close(r);
    return ev;
}

/* The event's one value: tag, null tensor, "hparams" plugin metadata with data_class TENSOR. */
static const Twpb__Summary__Value *hparams_value(const Twpb__Event *ev, const char *tag)
{
    assert_int_equal(ev->what_case, TWPB__EVENT__WHAT_SUMMARY);
    assert_int_equal(ev->step, 0);
    assert_int_equal(ev->summary->n_value, 1);
    const Twpb__Summary__Value *v = ev->summary->value[0];
    assert_string_equal(v->tag, tag);
    assert_int_equal(v->value_case, TWPB__SUMMARY__VALUE__VALUE_TENSOR);
    uint8_t tensor[16];
    static const uint8_t null_tensor[] = {0x08, 0x01, 0x12, 0x02, 0x12, 0x00};
    assert_int_equal(twpb__tensor_proto__pack(v->tensor, tensor), sizeof null_tensor);
    assert_memory_equal(tensor, null_tensor, sizeof null_tensor);
    assert_string_equal(v->metadata->plugin_data->plugin_name, "hparams");
    assert_int_equal(v->metadata->data_class, TWPB__DATA_CLASS__DATA_CLASS_TENSOR);
    return v;
}

static void test_start_and_end_bytes(void **state)
{
    (void)state;
    char dir[512];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "hparams"), 0);
    tw_events_options o;
    tw_events_options_default(&o);
    o.flush_secs = 0;
    tw_events_writer *w;
    tw_error err;
    assert_int_equal(tw_events_create(dir, &o, &w, &err), TW_OK);
    const tw_hparam hp[] = {{.name = "lr", .kind = TW_HPARAM_NUMBER, .number = 0.01},
                            {.name = "opt", .kind = TW_HPARAM_STRING, .string = "adam"}};
    tw_hparams_session s = {.hparams = hp, .n = 2, .group_name = "r1", .start_secs = 1.5};
    assert_int_equal(tw_hparams_add_session_start(w, &s, &err), TW_OK);
    assert_int_equal(tw_events_flush(w, &err), TW_OK);
    static const uint8_t start[] = {
        0x1a, 0x2d, 0x0a, 0x0f, 0x0a, 0x02, 'l', 'r', 0x12, 0x09, 0x11, 0x7b, 0x14, 0xae, 0x47, 0xe1, 0x7a,
        0x84, 0x3f, 0x0a, 0x0d, 0x0a, 0x03, 'o', 'p', 't', 0x12, 0x06, 0x1a, 0x04, 'a', 'd', 'a', 'm',
        0x22, 0x02, 'r', '1', 0x29, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f};
    Twpb__Event *ev = last_event(tw_events_path(w));
    const Twpb__Summary__Value *v = hparams_value(ev, "_hparams_/session_start_info");
    assert_int_equal(v->metadata->plugin_data->content.len, sizeof start);
    assert_memory_equal(v->metadata->plugin_data->content.data, start, sizeof start);
    twpb__event__free_unpacked(ev, NULL);

    assert_int_equal(tw_hparams_add_session_end(w, TW_HPARAMS_SUCCESS, 2.0, &err), TW_OK);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    static const uint8_t end[] = {0x22, 0x0b, 0x08, 0x01, 0x11, 0, 0, 0, 0, 0, 0, 0, 0x40};
    ev = last_event(tw_events_path(w));
    v = hparams_value(ev, "_hparams_/session_end_info");
    assert_int_equal(v->metadata->plugin_data->content.len, sizeof end);
    assert_memory_equal(v->metadata->plugin_data->content.data, end, sizeof end);
    twpb__event__free_unpacked(ev, NULL);
    tw_events_destroy(w);
    assert_int_equal(tw_test_rmdir(dir), 0);
}

static void test_bad_hparams_are_refused_by_name(void **state)
{
    (void)state;
    char dir[512];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "hparams"), 0);
    tw_events_writer *w;
    tw_error err;
    assert_int_equal(tw_events_create(dir, NULL, &w, &err), TW_OK);
    const tw_hparam twice[] = {{.name = "lr", .number = 1}, {.name = "lr", .number = 2}};
    tw_hparams_session s = {.hparams = twice, .n = 2};
    assert_int_equal(tw_hparams_add_session_start(w, &s, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "'lr' appears twice"));
    const tw_hparam no_string[] = {{.name = "model", .kind = TW_HPARAM_STRING}};
    s = (tw_hparams_session){.hparams = no_string, .n = 1};
    assert_int_equal(tw_hparams_add_session_start(w, &s, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "'model'"));
    tw_events_destroy(w);
    assert_int_equal(tw_test_rmdir(dir), 0);
}

static void test_group_name_is_fnv1a_hex(void **state)
{
    (void)state;
    char g[TW_HPARAMS_GROUP_BYTES];
    tw_hparams_group_name("", g);
    assert_string_equal(g, "cbf29ce484222325"); /* the FNV-1a 64 offset basis */
    tw_hparams_group_name("a", g);
    assert_string_equal(g, "af63dc4c8601ec8c"); /* FNV-1a 64 of "a" (the published test vector) */
}

static void test_append_session_writes_a_file_of_its_own(void **state)
{
    (void)state;
    char dir[512], pattern[600];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "hparams"), 0);
    tw_error err;
    const tw_hparam hp[] = {{.name = "lr", .kind = TW_HPARAM_NUMBER, .number = 0.1}};
    const tw_hparams_session s = {.hparams = hp, .n = 1, .group_name = "", .start_secs = 1.0};
    assert_int_equal(tw_hparams_append_session(dir, &s, TW_HPARAMS_FAILURE, 3.0, &err), TW_OK);
    assert_int_equal(tw_hparams_append_session(dir, &s, TW_HPARAMS_FAILURE, 3.0, &err), TW_OK);
    snprintf(pattern, sizeof pattern, "%s/events.out.tfevents.*", dir);
    glob_t g;
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_int_equal(g.gl_pathc, 2); /* never appended to an existing file */
    Twpb__Event *ev = last_event(g.gl_pathv[0]);
    const Twpb__Summary__Value *v = hparams_value(ev, "_hparams_/session_end_info");
    assert_int_equal(v->metadata->plugin_data->content.data[2], 0x08);
    assert_int_equal(v->metadata->plugin_data->content.data[3], 0x02); /* STATUS_FAILURE */
    twpb__event__free_unpacked(ev, NULL);
    globfree(&g);
    assert_int_equal(tw_test_rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_and_end_bytes),
        cmocka_unit_test(test_bad_hparams_are_refused_by_name),
        cmocka_unit_test(test_group_name_is_fnv1a_hex),
        cmocka_unit_test(test_append_session_writes_a_file_of_its_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
