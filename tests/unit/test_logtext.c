/* test_logtext.c — the log-text rule (logtext.h): every control byte (0x00-0x1f, 0x7f) comes out as a
 * visible escape and everything else unchanged; an output buffer too small cuts at a whole escape, never
 * inside one, and is always terminated; tw_log writes one escaped line to stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "logtext.h"

static void expect_escaped(const char *in, size_t n, const char *want)
{
    char out[256];
    size_t w = tw_log_escape(in, n, out, sizeof out);
    if (strcmp(out, want) || w != strlen(want))
        fail_msg("escaped to \"%s\" (%zu bytes), expected \"%s\"", out, w, want);
}

static void test_control_bytes_become_visible(void **state)
{
    (void)state;
    expect_escaped("a\nb\rc\td", 7, "a\\nb\\rc\\td");
    expect_escaped("\x1b[2J\x07\x7f", 6, "\\x1b[2J\\x07\\x7f");
    expect_escaped("nul\0end", 7, "nul\\x00end");
    expect_escaped("\x01\x1f", 2, "\\x01\\x1f");
}

static void test_other_bytes_pass_unchanged(void **state)
{
    (void)state;
    const char *json = "{\"message\":\"a\\nb \\u001b\",\"path\":\"C:\\\\x\"} \xc3\xa9 ~ ";
    expect_escaped(json, strlen(json), json);
    expect_escaped("", 0, "");
}

static void test_small_buffer_cuts_at_a_whole_escape(void **state)
{
    (void)state;
    char out[6];
    memset(out, 'X', sizeof out);
    size_t w = tw_log_escape("ab\x1b" "c", 4, out, sizeof out); /* "ab\x1b" needs 6 + NUL */
    assert_int_equal(w, 2);
    assert_string_equal(out, "ab");
    w = tw_log_escape("abc\n", 4, out, sizeof out); /* "abc\n" is 5 + NUL: fits */
    assert_int_equal(w, 5);
    assert_string_equal(out, "abc\\n");
    assert_int_equal(tw_log_escape("abc", 3, out, 0), 0);
    assert_int_equal(out[0], 'a'); /* size 0: nothing written */
}

static void test_tw_log_writes_one_escaped_line(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(dup2(fds[1], STDERR_FILENO) >= 0);
    tw_log("tower serve: value '%s' (%d)\n", "x\n== forged ==\x1b[2J", 7);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    char got[256] = "";
    ssize_t n = read(fds[0], got, sizeof got - 1);
    close(fds[0]);
    assert_true(n > 0);
    assert_string_equal(got, "tower serve: value 'x\\n== forged ==\\x1b[2J' (7)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_bytes_become_visible),
        cmocka_unit_test(test_other_bytes_pass_unchanged),
        cmocka_unit_test(test_small_buffer_cuts_at_a_whole_escape),
        cmocka_unit_test(test_tw_log_writes_one_escaped_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
