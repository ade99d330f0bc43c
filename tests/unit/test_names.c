/* test_names.c — the name rule (names.h): a table of names accepted and refused, each refusal checked
 * for the rule its `why` text names (length, first character, or the 1-based position of a bad
 * character), plus the edges: exactly TW_NAME_MAX vs TW_NAME_MAX + 1 bytes, an embedded NUL (only the
 * prefix before it can be seen through a C string), and a `why` buffer too small for the message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "names.h"

/* The rule a refusal must name: a fragment its why text contains. */
#define LENGTH_RULE "must be 1 to 64 characters long"
#define START_RULE "must start with a letter or a digit"
#define CHAR_RULE "is not one of A-Z a-z 0-9 . _ -"

static void expect_valid(const char *s)
{
    char why[200] = "untouched";
    if (!tw_name_valid(s, why, sizeof why))
        fail_msg("refused \"%s\": %s", s, why);
}

/* Refused, and why contains `rule` (and `detail`, when not NULL). */
static void expect_refused(const char *s, const char *rule, const char *detail)
{
    char why[200] = "";
    if (tw_name_valid(s, why, sizeof why))
        fail_msg("accepted \"%s\"", s);
    if (!strstr(why, rule))
        fail_msg("\"%s\": why is \"%s\", expected the rule \"%s\"", s, why, rule);
    if (detail && !strstr(why, detail))
        fail_msg("\"%s\": why is \"%s\", expected it to say \"%s\"", s, why, detail);
}

static void test_accepts_plain_labels(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "a", "Z", "0", "9lives", "mnist", "Fashion-MNIST", "fashion_mnist", "v1.2.3", "run-2024-01-01",
        "a.", "a-", "a_", "a.b-c_d", "ABCdef012", "x.tfrecord", "model.ckpt-1000",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        expect_valid(ok[i]);
}

static void test_length_64_accepted_65_refused(void **state)
{
    (void)state;
    char s[TW_NAME_MAX + 2];
    memset(s, 'a', sizeof s);
    s[TW_NAME_MAX] = '\0';
    assert_int_equal(strlen(s), 64);
    expect_valid(s);
    s[TW_NAME_MAX] = 'a';
    s[TW_NAME_MAX + 1] = '\0';
    expect_refused(s, LENGTH_RULE, "got 65");
    expect_refused("", LENGTH_RULE, "got 0");
    char big[4097];
    memset(big, '7', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    expect_refused(big, LENGTH_RULE, "got 4096");
}

/* Things a path or a URL decoder could read as a location: refused whichever rule trips first. */
static void test_refuses_paths(void **state)
{
    (void)state;
    expect_refused(".", START_RULE, NULL);
    expect_refused("..", START_RULE, NULL);
    expect_refused("../x", START_RULE, NULL);
    expect_refused("../../etc/passwd", START_RULE, NULL);
    expect_refused(".hidden", START_RULE, NULL);
    expect_refused("/etc/passwd", START_RULE, NULL);
    expect_refused("/", START_RULE, NULL);
    expect_refused("~root", START_RULE, NULL);
    expect_refused("a/b", CHAR_RULE, "character 2 ");
    expect_refused("x/../y", CHAR_RULE, "character 2 ");
    expect_refused("x/..", CHAR_RULE, "character 2 ");
    expect_refused("a\\b", CHAR_RULE, "character 2 ");
    expect_refused("C:x", CHAR_RULE, "character 2 ");
    expect_refused("%2e%2e", START_RULE, NULL);
    expect_refused("%2e%2e%2fx", START_RULE, NULL);
    expect_refused("a%2fb", CHAR_RULE, "character 2 ");
    expect_refused("a%00", CHAR_RULE, "character 2 ");
}

/* names.h: "no ..": a name must not hold two dots in a row anywhere, not only at its start. */
static void test_refuses_double_dot_inside(void **state)
{
    (void)state;
    static const char *const bad[] = {"a..b", "a..", "v1..2", "x...y"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[200] = "";
        if (tw_name_valid(bad[i], why, sizeof why))
            fail_msg("accepted \"%s\" although names.h says a valid name has no \"..\"", bad[i]);
        assert_true(why[0] != '\0');
    }
}

static void test_refuses_bad_first_character(void **state)
{
    (void)state;
    static const char *const bad[] = {"-rf", "-", "_x", "_", ".x", " x", " ", "\tx", "\nx", "$x", "*"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refused(bad[i], START_RULE, NULL);
}

static void test_refuses_spaces_and_control_bytes(void **state)
{
    (void)state;
    expect_refused("a b", CHAR_RULE, "character 2 ");
    expect_refused("ab ", CHAR_RULE, "character 3 ");
    expect_refused("a\tb", CHAR_RULE, "character 2 ");
    expect_refused("a\nb", CHAR_RULE, "character 2 ");
    expect_refused("a\rb", CHAR_RULE, "character 2 ");
    expect_refused("a\x01", CHAR_RULE, "character 2 ");
    expect_refused("a\x7f", CHAR_RULE, "character 2 ");
}

static void test_refuses_utf8(void **state)
{
    (void)state;
    expect_refused("caf\xc3\xa9", CHAR_RULE, "character 4 "); /* café: the first byte of é */
    expect_refused("\xc3\xa9t\xc3\xa9", START_RULE, NULL);     /* été */
    expect_refused("a\xe2\x80\x8b", CHAR_RULE, "character 2 "); /* a + zero-width space */
    expect_refused("a\xef\xbc\x8f" "b", CHAR_RULE, "character 2 "); /* fullwidth solidus */
    expect_refused("a\xff", CHAR_RULE, "character 2 ");          /* not UTF-8 at all */
    expect_refused("\x80", START_RULE, NULL);
}

static void test_refuses_shell_metacharacters(void **state)
{
    (void)state;
    static const char meta[] = ";|&$`'\"<>()[]{}*?!#~=%^,:@+\\";
    for (size_t i = 0; i < sizeof meta - 1; i++) {
        char s[4] = {'a', meta[i], 'b', '\0'};
        expect_refused(s, CHAR_RULE, "character 2 ");
        char t[3] = {meta[i], 'a', '\0'};
        expect_refused(t, START_RULE, NULL);
    }
    expect_refused("a;rm -rf x", CHAR_RULE, "character 2 ");
    expect_refused("a$(id)", CHAR_RULE, "character 2 ");
}

/* A C string ends at its first NUL: what follows is invisible, so only the prefix is judged. Callers
 * must refuse NULs before (jansson does: \u0000 is refused unless JSON_ALLOW_NUL). */
static void test_embedded_nul_judges_the_prefix(void **state)
{
    (void)state;
    static const char with_nul[] = "ok\0/../../etc/passwd";
    assert_int_equal(sizeof with_nul, 21);
    expect_valid(with_nul);
    static const char bad_prefix[] = "a/\0b";
    expect_refused(bad_prefix, CHAR_RULE, "character 2 ");
    static const char empty_prefix[] = "\0abc";
    expect_refused(empty_prefix, LENGTH_RULE, "got 0");
}

/* why is always terminated, however small; an accepted name leaves it alone. */
static void test_why_buffer(void **state)
{
    (void)state;
    char why[8];
    memset(why, 'X', sizeof why);
    assert_int_equal(tw_name_valid("../x", why, sizeof why), 0);
    assert_int_equal(strlen(why), sizeof why - 1);
    assert_memory_equal(why, START_RULE, sizeof why - 1);
    char one[1] = {'X'};
    assert_int_equal(tw_name_valid("a b", one, sizeof one), 0);
    assert_int_equal(one[0], '\0');
    char keep[16] = "untouched";
    assert_int_equal(tw_name_valid("fine", keep, sizeof keep), 1);
    assert_string_equal(keep, "untouched");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_plain_labels),
        cmocka_unit_test(test_length_64_accepted_65_refused),
        cmocka_unit_test(test_refuses_paths),
        cmocka_unit_test(test_refuses_double_dot_inside),
        cmocka_unit_test(test_refuses_bad_first_character),
        cmocka_unit_test(test_refuses_spaces_and_control_bytes),
        cmocka_unit_test(test_refuses_utf8),
        cmocka_unit_test(test_refuses_shell_metacharacters),
        cmocka_unit_test(test_embedded_nul_judges_the_prefix),
        cmocka_unit_test(test_why_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
