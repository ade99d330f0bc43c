/* test_crc32c.c — CRC-32C on both paths against RFC 3720 B.4 vectors, and TensorFlow's mask. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "crc32c.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static void check_rfc3720(crc_fn f)
{
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    assert_int_equal(f(0, buf, 32), 0x8a9136aa);
    memset(buf, 0xff, sizeof buf);
    assert_int_equal(f(0, buf, 32), 0x62a8ab43);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    assert_int_equal(f(0, buf, 32), 0x46dd794e);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    assert_int_equal(f(0, buf, 32), 0x113fdb5c);
}

static void test_portable_vectors(void **state)
{
    (void)state;
    check_rfc3720(tw_crc32c_extend_portable);
}

static void test_hw_vectors(void **state)
{
    (void)state;
    if (!tw_crc32c_have_hw())
        skip();
    check_rfc3720(tw_crc32c_extend_hw);
}

/* Extending piecewise at every split point and alignment equals one pass, on both paths. */
static void test_extend_splits_agree(void **state)
{
    (void)state;
    uint8_t buf[1031];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    uint32_t whole = tw_crc32c_extend_portable(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= 64; cut++) {
        uint32_t a = tw_crc32c_extend_portable(0, buf, cut);
        assert_int_equal(tw_crc32c_extend_portable(a, buf + cut, sizeof buf - cut), whole);
        uint32_t b = tw_crc32c_extend(0, buf + 0, cut);
        assert_int_equal(tw_crc32c_extend(b, buf + cut, sizeof buf - cut), whole);
    }
    for (size_t off = 1; off < 9; off++)
        assert_int_equal(tw_crc32c(buf + off, 100),
                         tw_crc32c_extend_portable(0, buf + off, 100));
}

/* docs/formats.md §1.2: Event{file_version:"CRC test, one two"} has masked data CRC 0x5794d08a and its
 * 8-byte length field (19) masked CRC 0x1b32910c. */
static void test_mask_vectors(void **state)
{
    (void)state;
    const char payload[] = "\x1a\x11" "CRC test, one two";
    assert_int_equal(tw_crc32c_mask(tw_crc32c(payload, 19)), 0x5794d08a);
    const uint8_t len[8] = {19, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(tw_crc32c_mask(tw_crc32c(len, 8)), 0x1b32910c);
    for (uint32_t v = 1; v < 0xF0000000u; v += 0x01234567u)
        assert_int_equal(tw_crc32c_unmask(tw_crc32c_mask(v)), v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portable_vectors),
        cmocka_unit_test(test_hw_vectors),
        cmocka_unit_test(test_extend_splits_agree),
        cmocka_unit_test(test_mask_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
