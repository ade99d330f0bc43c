/* test_cuda_backend.c — the registry's side of the CUDA backend, on any machine: without a usable device
 * (a CPU-only build, or no GPU or driver) "cuda" has 0 devices, creating it fails with
 * TW_ERR_UNSUPPORTED and a message that says why and never crashes, and "auto" is the CPU; with a
 * device, "cuda" instances exist for each index below the count and nowhere else, "auto" picks cuda, and
 * a round trip through device memory works. The op-by-op parity with the CPU is tests/gpu/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "backend.h"

static void test_without_device(void **state)
{
    (void)state;
    if (tw_backend_devices("cuda") > 0)
        skip();
    tw_error e;
    tw_error_clear(&e);
    tw_backend *b = (tw_backend *)&e; /* a stale value: a failed create must reset it */
    assert_int_equal(tw_backend_create("cuda", 0, &b, &e), TW_ERR_UNSUPPORTED);
    assert_null(b);
    assert_non_null(strstr(e.message, "CUDA"));
    assert_int_equal(tw_backend_create("cuda", 3, &b, &e), TW_ERR_UNSUPPORTED);
    assert_int_equal(tw_backend_devices("auto"), 1);
    assert_int_equal(tw_backend_create("auto", 0, &b, &e), TW_OK);
    assert_string_equal(tw_backend_kind(b), "cpu");
    tw_backend_destroy(b);
    /* planning for cuda is harmless even without a device: creation is what fails */
    tw_error_clear(&e);
    int threads;
    tw_status s = tw_backend_plan("cuda", 2, &threads, &e);
    assert_true(s == TW_OK || s == TW_ERR_UNSUPPORTED);
}

static void test_with_device(void **state)
{
    (void)state;
    int n = tw_backend_devices("cuda");
    if (n == 0)
        skip();
    tw_error e;
    tw_error_clear(&e);
    tw_backend *b = NULL;
    assert_int_equal(tw_backend_create("cuda", 0, &b, &e), TW_OK);
    assert_string_equal(tw_backend_name(b), "cuda:0");
    assert_string_equal(tw_backend_kind(b), "cuda");
    tw_buffer *buf = NULL;
    float in[5] = {1, -2, 3.5f, 0, 1e-30f}, out[5] = {0};
    assert_int_equal(tw_backend_alloc(b, sizeof in + 8, &buf, &e), TW_OK);
    assert_int_equal(tw_backend_upload(b, tw_tensor_at(tw_tensor_of(buf), 2), in, sizeof in, &e), TW_OK);
    assert_int_equal(tw_backend_download(b, out, tw_tensor_at(tw_tensor_of(buf), 2), sizeof out, &e),
                     TW_OK);
    assert_memory_equal(in, out, sizeof in);
    assert_int_equal(tw_backend_sync(b, &e), TW_OK);
    tw_backend_free(b, buf);
    tw_backend_destroy(b);
    assert_int_equal(tw_backend_create("cuda", n, &b, &e), TW_ERR_UNSUPPORTED);
    assert_null(b);
    assert_int_equal(tw_backend_create("auto", 0, &b, &e), TW_OK);
    assert_string_equal(tw_backend_kind(b), "cuda");
    tw_backend_destroy(b);
    assert_int_equal(tw_backend_devices("auto"), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_device),
        cmocka_unit_test(test_with_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
