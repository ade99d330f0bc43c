/* test_options.c — the option tables of base/options.h: every spelling of an option and its value, each
 * kind's checks, lists, the arguments moved to the front of argv, every usage error's message (caught
 * through the table's log), and the help page printed from the table. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "options.h"

/* What a test command's options go into. */
typedef struct {
    const char *out, *names[3];
    int json, color, towers, backend, level, n_names;
    uint64_t seed, memory;
    double rate;
} fields;

static const char *const BACKENDS[] = {"auto", "cpu", "cuda", NULL};

/* A custom check: "low" or "high" as 1 or 2. */
static int level_of(const char *value, void *field)
{
    int v = !strcmp(value, "low") ? 1 : !strcmp(value, "high") ? 2 : 0;
    *(int *)field = v ? v : *(int *)field;
    return v ? 0 : -1;
}

static const tw_opt OPTS[] = {
    {.name = "output", .letter = 'o', .kind = TW_OPT_STRING, .offset = offsetof(fields, out), .arg = "FILE",
     .help = "where it goes", .required = 1, .min = 1},
    {.name = "json", .kind = TW_OPT_FLAG, .offset = offsetof(fields, json), .help = "JSON\ninstead of text"},
    {.name = "no-color", .kind = TW_OPT_CLEAR, .offset = offsetof(fields, color), .help = "plain",
     .section = "looks"},
    {.name = "towers", .kind = TW_OPT_INT, .offset = offsetof(fields, towers), .arg = "N", .help = "replicas",
     .min = 1, .max = 64},
    {.name = "backend", .kind = TW_OPT_CHOICE, .offset = offsetof(fields, backend), .arg = "B", .help = "where",
     .names = BACKENDS},
    {.name = "seed", .kind = TW_OPT_U64, .offset = offsetof(fields, seed), .arg = "S", .help = "seed",
     .min = 0, .max = INFINITY, .needs = "rate"},
    {.name = "rate", .kind = TW_OPT_DOUBLE, .offset = offsetof(fields, rate), .arg = "F", .help = "a fraction",
     .min = 0, .max = 1},
    {.name = "memory", .kind = TW_OPT_BYTES, .offset = offsetof(fields, memory), .arg = "BYTES", .help = "cap",
     .min = 1, .max = 1e18},
    {.name = "level", .kind = TW_OPT_CUSTOM, .offset = offsetof(fields, level), .arg = "L", .help = "how much",
     .parse = level_of, .wants = "low or high"},
    {.name = "name", .kind = TW_OPT_STRING, .offset = offsetof(fields, names), .arg = "N", .help = "a name",
     .repeat = 3, .count = offsetof(fields, n_names)},
    {0},
};

static char logged[4096]; /* the messages of the last parse, one a line */

static void log_line(const char *fmt, va_list ap)
{
    size_t len = strlen(logged);
    vsnprintf(logged + len, sizeof logged - len, fmt, ap);
    strncat(logged, "\n", sizeof logged - strlen(logged) - 1);
}

static const tw_options SPEC = {
    .command = "tower thing", .usage = "ARG... -o FILE [options]", .about = "Does a thing.\n",
    .epilog = "Exit status: 0 done, 2 usage error.\n", .opts = OPTS, .operands = "ARG...", .min_args = 1,
    .max_args = 3, .logv = log_line,
};

/* Parses the NULL-terminated words after the command's name with spec into *f (its defaults first). */
static int parse_with(const tw_options *spec, fields *f, int *nargs, char **words)
{
    static char *argv[32];
    int argc = 1;
    argv[0] = "thing";
    for (; words[argc - 1]; argc++)
        argv[argc] = words[argc - 1];
    *f = (fields){.color = 1, .backend = -1};
    logged[0] = 0;
    return tw_options_parse(spec, f, argc, argv, nargs);
}

#define PARSE(f, n, ...) parse_with(&SPEC, f, n, (char *[]){__VA_ARGS__, NULL})

static void test_every_spelling_and_kind(void **state)
{
    (void)state;
    fields f;
    int n = 0;
    char *argv[] = {"thing", "a", "--output=x", "--json", "-", "--no-color", "--towers", "64", "--backend", "cuda",
                    "--seed", "18446744073709551615", "--rate", "2.5e-1", "--memory", "1.5G", "--level", "high",
                    "--", "--not-an-option"};
    f = (fields){.color = 1};
    assert_int_equal(tw_options_parse(&SPEC, &f, 20, argv, &n), TW_OPT_GO);
    assert_int_equal(n, 3);
    assert_string_equal(argv[1], "a");
    assert_string_equal(argv[2], "-");
    assert_string_equal(argv[3], "--not-an-option");
    assert_string_equal(f.out, "x");
    assert_int_equal(f.json, 1);
    assert_int_equal(f.color, 0);
    assert_int_equal(f.towers, 64);
    assert_int_equal(f.backend, 2);
    assert_true(f.seed == UINT64_MAX);
    assert_true(f.rate == 0.25);
    assert_true(f.memory == 3ull << 29);
    assert_int_equal(f.level, 2);
    assert_string_equal(logged, "");
    assert_int_equal(PARSE(&f, &n, "-o", "y", "b", "--memory", "512M", "--memory=7"), TW_OPT_USAGE);
    assert_int_equal(PARSE(&f, &n, "-o", "y", "b", "--memory", "1e9"), TW_OPT_GO);
    assert_true(f.memory == 1000000000ull && n == 1 && !strcmp(f.out, "y"));
}

static void test_a_list_collects_its_values(void **state)
{
    (void)state;
    fields f;
    int n;
    assert_int_equal(PARSE(&f, &n, "-o", "x", "--name", "p", "a", "--name=q"), TW_OPT_GO);
    assert_int_equal(f.n_names, 2);
    assert_string_equal(f.names[0], "p");
    assert_string_equal(f.names[1], "q");
    assert_int_equal(PARSE(&f, &n, "-o", "x", "a", "--name", "1", "--name", "2", "--name", "3", "--name", "4"),
                     TW_OPT_USAGE);
    assert_string_equal(logged, "tower thing: option --name given more than 3 times\n(see 'tower thing --help')\n");
}

/* Each malformed command line → its message (the first line). */
static void test_usage_errors_name_what_is_wrong(void **state)
{
    (void)state;
    static const struct {
        char *words[8];
        const char *message;
    } CASES[] = {
        {{"a", "--bogus"}, "unknown option '--bogus'"},
        {{"a", "--towrs", "2"}, "unknown option '--towrs' (did you mean --towers?)"},
        {{"a", "-x"}, "unknown option '-x'"},
        {{"a", "-o", "x", "--json", "--json"}, "option --json given twice"},
        {{"a", "--json=1"}, "option --json takes no value"},
        {{"a", "--towers"}, "option --towers needs a value (N)"},
        {{"a", "--towers", "0"}, "--towers wants an integer from 1 to 64, got '0'"},
        {{"a", "--towers", "1.5"}, "--towers wants an integer from 1 to 64, got '1.5'"},
        {{"a", "--towers", "-3"}, "--towers wants an integer from 1 to 64, got '-3'"},
        {{"a", "--seed", "x"}, "--seed wants an integer >= 0, got 'x'"},
        {{"a", "--rate", "1.5"}, "--rate wants a number from 0 to 1, got '1.5'"},
        {{"a", "--rate", "nan"}, "--rate wants a number from 0 to 1, got 'nan'"},
        {{"a", "--memory", "12Q"}, "--memory wants a number of bytes from 1 to 1e+18 (K, M, G, T: powers of 1024), "
                                   "got '12Q'"},
        {{"a", "--memory", "0x10"}, "--memory wants a number of bytes from 1 to 1e+18 (K, M, G, T: powers of "
                                    "1024), got '0x10'"},
        {{"a", "--backend", "gpu"}, "--backend wants auto, cpu or cuda, got 'gpu'"},
        {{"a", "--level", "mid"}, "--level wants low or high, got 'mid'"},
        {{"a", "-o", ""}, "--output wants a value that is not empty, got ''"},
        {{"a", "--rate", "0.5"}, "--output is required"},
        {{"a", "-o", "x", "--seed", "3"}, "--seed needs --rate"},
        {{"-o", "x"}, "expected ARG... (0 given)"},
        {{"a", "b", "c", "d"}, "unexpected argument 'd'"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        fields f;
        int n;
        char want[512];
        snprintf(want, sizeof want, "tower thing: %s\n(see 'tower thing --help')\n", CASES[i].message);
        assert_int_equal(parse_with(&SPEC, &f, &n, (char **)CASES[i].words), TW_OPT_USAGE);
        assert_string_equal(logged, want);
    }
}

static void test_the_other_wording(void **state)
{
    (void)state;
    tw_options spec = SPEC;
    spec.wording = TW_OPT_SAY_BAD_VALUE;
    fields f;
    int n;
    assert_int_equal(parse_with(&spec, &f, &n, (char *[]){"a", "--rate", "2", NULL}), TW_OPT_USAGE);
    assert_string_equal(logged, "tower thing: --rate: bad value '2': expected a number from 0 to 1\n"
                                "(see 'tower thing --help')\n");
    assert_int_equal(tw_options_error(&spec, "give %d", 2), TW_OPT_USAGE);
    assert_string_equal(logged + strlen("tower thing: --rate: bad value '2': expected a number from 0 to 1\n"
                                        "(see 'tower thing --help')\n"),
                        "tower thing: give 2\n(see 'tower thing --help')\n");
}

/* A required choice that is missing: the message lists what it may be. */
static void test_a_required_choice_names_its_values(void **state)
{
    (void)state;
    static const tw_opt REQUIRED[] = {
        {.name = "backend", .kind = TW_OPT_CHOICE, .offset = offsetof(fields, backend), .arg = "B",
         .help = "where", .names = BACKENDS, .required = 1},
        {0},
    };
    tw_options spec = SPEC;
    spec.opts = REQUIRED;
    fields f;
    int n;
    assert_int_equal(parse_with(&spec, &f, &n, (char *[]){"a", NULL}), TW_OPT_USAGE);
    assert_string_equal(logged, "tower thing: --backend is required (auto, cpu or cuda)\n"
                                "(see 'tower thing --help')\n");
    assert_int_equal(parse_with(&spec, &f, &n, (char *[]){"a", "--backend=cpu", NULL}), TW_OPT_GO);
    assert_int_equal(f.backend, 1);
}

static void test_the_help_page_comes_from_the_table(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    tw_options_help(&SPEC, out);
    fclose(out);
    assert_string_equal(text,
                        "usage: tower thing ARG... -o FILE [options]\n"
                        "\n"
                        "Does a thing.\n"
                        "\n"
                        "  -o, --output FILE  where it goes\n"
                        "  --json             JSON\n"
                        "                     instead of text\n"
                        "\n"
                        "looks:\n"
                        "  --no-color         plain\n"
                        "  --towers N         replicas\n"
                        "  --backend B        where\n"
                        "  --seed S           seed\n"
                        "  --rate F           a fraction\n"
                        "  --memory BYTES     cap\n"
                        "  --level L          how much\n"
                        "  --name N           a name\n"
                        "  -h, --help         show this help\n"
                        "\n"
                        "Exit status: 0 done, 2 usage error.\n");
    free(text);
    fields f;
    int n;
    assert_int_equal(PARSE(&f, &n, "--bogus-later-unread", "-h"), TW_OPT_USAGE); /* in order: the error first */
    assert_int_equal(PARSE(&f, &n, "-h", "--bogus"), 0);
    assert_string_equal(logged, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_spelling_and_kind),
        cmocka_unit_test(test_a_list_collects_its_values),
        cmocka_unit_test(test_usage_errors_name_what_is_wrong),
        cmocka_unit_test(test_the_other_wording),
        cmocka_unit_test(test_a_required_choice_names_its_values),
        cmocka_unit_test(test_the_help_page_comes_from_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
