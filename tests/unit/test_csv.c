/* test_csv.c — CSV rows (quoting, CRLF, BOM, missing final newline, empty lines) and numeric datasets
 * (label column, int vs float labels, every bad cell with its line, column number and name; NaN and Inf
 * features refused unless allowed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zlib.h>

#include "csv.h"

static tw_csv_reader *open_text(const char *text, tw_error *err)
{
    tw_csv_reader *r = NULL;
    assert_int_equal(tw_csv_open_mem(text, strlen(text), "d.csv", 0, &r, err), TW_OK);
    return r;
}

/* Opens text, scans it with label column `label`; returns the scan status. */
static tw_status scan(const char *text, const char *label, tw_csv_schema *s, tw_error *err)
{
    tw_csv_reader *r = NULL;
    tw_status st = tw_csv_open_mem(text, strlen(text), "d.csv", 0, &r, err);
    if (st == TW_OK)
        st = tw_csv_scan(r, label, s, err);
    tw_csv_close(r);
    return st;
}

static void test_rows_and_header(void **state)
{
    (void)state;
    tw_error err;
    tw_csv_reader *r = open_text("\xEF\xBB\xBF" "a, \"b \"\"q\"\"\" ,\"c,d\"\r\n1,2,3\r\n 4 ,\"5\",6", &err);
    assert_int_equal(tw_csv_columns(r), 3);
    assert_string_equal(tw_csv_column_name(r, 0), "a");
    assert_string_equal(tw_csv_column_name(r, 1), "b \"q\"");
    assert_string_equal(tw_csv_column_name(r, 2), "c,d");
    char *const *f;
    size_t n;
    assert_int_equal(tw_csv_next_row(r, &f, &n, &err), TW_OK);
    assert_int_equal(n, 3);
    assert_string_equal(f[2], "3");
    assert_int_equal(tw_csv_line(r), 2);
    assert_int_equal(tw_csv_next_row(r, &f, &n, &err), TW_OK);
    assert_string_equal(f[0], "4");
    assert_string_equal(f[1], "5");
    assert_int_equal(tw_csv_line(r), 3);
    assert_int_equal(tw_csv_next_row(r, &f, &n, &err), TW_END);
    /* names survive rows */
    assert_string_equal(tw_csv_column_name(r, 2), "c,d");
    tw_csv_close(r);
}

static void test_trailing_empty_lines_skipped(void **state)
{
    (void)state;
    tw_csv_schema s;
    tw_error err;
    assert_int_equal(scan("x,y\n1,2\n3,4\n\n\r\n  \n", "y", &s, &err), TW_OK);
    assert_int_equal(s.rows, 2);
}

static void test_empty_line_inside_data(void **state)
{
    (void)state;
    tw_csv_schema s;
    tw_error err;
    assert_int_equal(scan("x,y\n1,2\n\n3,4\n", "y", &s, &err), TW_ERR_INVALID);
    assert_int_equal(err.line, 3);
    assert_non_null(strstr(err.message, "empty line"));
}

static void test_scan_int_and_float_labels(void **state)
{
    (void)state;
    tw_csv_schema s;
    tw_error err;
    assert_int_equal(scan("f1,label,f2\n0.5,3,1e3\n-1,-7,+2\n", "label", &s, &err), TW_OK);
    assert_int_equal(s.label_column, 1);
    assert_int_equal(s.n_features, 2);
    assert_int_equal(s.rows, 2);
    assert_true(s.int_labels);
    assert_int_equal(scan("f1,label\n0.5,3\n1,2.5\n", "label", &s, &err), TW_OK);
    assert_false(s.int_labels);
    assert_int_equal(scan("f1,label\n0.5,3.0\n", "label", &s, &err), TW_OK);
    assert_false(s.int_labels); /* "3.0" is not an integer literal */
    assert_int_equal(scan("f1,label\n0.5,99999999999999999999\n", "label", &s, &err), TW_OK);
    assert_false(s.int_labels); /* does not fit int64 */
}

static void test_examples_pass_two(void **state)
{
    (void)state;
    tw_error err;
    tw_csv_reader *r = open_text("f1,label,f2\n0.5,3,1e3\n-1,-7,+2\n", &err);
    tw_csv_schema s;
    assert_int_equal(tw_csv_scan(r, "label", &s, &err), TW_OK);
    float f[2];
    tw_csv_label l;
    assert_int_equal(tw_csv_next_example(r, &s, f, &l, &err), TW_OK);
    assert_true(f[0] == 0.5f && f[1] == 1000.0f);
    assert_true(l.is_int);
    assert_int_equal(l.i, 3);
    assert_int_equal(tw_csv_line(r), 2);
    assert_int_equal(tw_csv_next_example(r, &s, f, &l, &err), TW_OK);
    assert_true(f[0] == -1.0f && f[1] == 2.0f);
    assert_int_equal(l.i, -7);
    assert_true(l.f == -7.0);
    assert_int_equal(tw_csv_next_example(r, &s, f, &l, &err), TW_END);
    tw_csv_close(r);
}

/* Scans text and expects TW_ERR_INVALID at line with message containing want. */
static void expect_bad(const char *text, const char *label, int64_t line, const char *want)
{
    tw_csv_schema s;
    tw_error err;
    assert_int_equal(scan(text, label, &s, &err), TW_ERR_INVALID);
    assert_int_equal(err.line, line);
    assert_string_equal(err.file, "d.csv");
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
}

static void test_bad_cells(void **state)
{
    (void)state;
    expect_bad("a,b,y\n1,2,0\n1,abc,0\n", "y", 3, "column 2 ('b'): 'abc' is not a number");
    expect_bad("a,b,y\n1,,0\n", "y", 2, "column 2 ('b'): '' is empty");
    expect_bad("a,b,y\n1,2,0\n3,nan,0\n", "y", 3,
               "data row 2, column 2 ('b'): 'nan' is not a finite number; non-finite features are "
               "refused unless allowed (--allow-nonfinite)");
    expect_bad("a,y\n-Infinity,0\n", "y", 2, "data row 1, column 1 ('a'): '-Infinity' is not a finite");
    expect_bad("a,y\n1,nan\n", "y", 2, "column 2 ('y'): 'nan' is not a number"); /* labels: never */
    expect_bad("a,y\nnano,0\n", "y", 2, "'nano' is not a number");
    expect_bad("a,y\n0x10,0\n", "y", 2, "is not a number");
    expect_bad("a,y\n1e,0\n", "y", 2, "is not a number");
    expect_bad("a,y\n1e39,0\n", "y", 2, "out of float32 range");
    expect_bad("a,y\n1,\n", "y", 2, "column 2 ('y'): '' is empty: every row needs a label");
    expect_bad("a,y\n1,cat\n", "y", 2, "column 2 ('y'): 'cat' is not a number");
    expect_bad("a,y\n1,1e300\n", "y", 2, "out of float32 range");
}

/* Allowed, the spellings of NaN and ±Inf become those values; labels must still be finite. */
static void test_nonfinite_features_when_allowed(void **state)
{
    (void)state;
    static const char text[] = "a,b,c,d,y\nNaN,inf,-INF,+Infinity,1\n";
    tw_error err;
    tw_csv_reader *r = open_text(text, &err);
    tw_csv_allow_nonfinite(r, 1);
    tw_csv_schema s;
    assert_int_equal(tw_csv_scan(r, "y", &s, &err), TW_OK);
    float f[4];
    tw_csv_label l;
    assert_int_equal(tw_csv_next_example(r, &s, f, &l, &err), TW_OK);
    assert_true(isnan(f[0]));
    assert_true(f[1] == INFINITY && f[2] == -INFINITY && f[3] == INFINITY);
    tw_csv_close(r);
    r = open_text("a,y\n1,inf\n", &err);
    tw_csv_allow_nonfinite(r, 1);
    assert_int_equal(tw_csv_scan(r, "y", &s, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "'inf' is not a number"));
    tw_csv_close(r);
}

static void test_ragged_and_structure(void **state)
{
    (void)state;
    expect_bad("a,b,y\n1,2,3\n1,2\n", "y", 3, "ragged row: 2 fields but the header has 3 columns");
    expect_bad("a,b,y\n1,2,3,\n", "y", 2, "ragged row: 4 fields");
    expect_bad("a,b,y\n1,2,3\n", "label", 1, "no column named 'label'");
    expect_bad("y,b,y\n1,2,3\n", "y", 1, "appears twice (columns 1 and 3)");
    expect_bad("y\n1\n", "y", 1, "no feature columns");
    expect_bad("a,y\n\"1,0\n", "y", 2, "unterminated quoted field");
    expect_bad("a,y\n\"1\"x,0\n", "y", 2, "unexpected text after a closing quote");
}

static void test_empty_and_nul(void **state)
{
    (void)state;
    tw_csv_reader *r = NULL;
    tw_error err;
    assert_int_equal(tw_csv_open_mem("", 0, "d.csv", 0, &r, &err), TW_ERR_INVALID);
    assert_int_equal(err.line, 1);
    assert_null(r);
    assert_int_equal(tw_csv_open_mem("\n1,2\n", 5, "d.csv", 0, &r, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "header row is empty"));
    static const char nul[] = "a,y\n1\0,2\n";
    assert_int_equal(tw_csv_open_mem(nul, sizeof nul - 1, "d.csv", 0, &r, &err), TW_OK);
    tw_csv_schema s;
    assert_int_equal(tw_csv_scan(r, "y", &s, &err), TW_ERR_INVALID);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.message, "NUL"));
    tw_csv_close(r);
}

static void test_error_format(void **state)
{
    (void)state;
    tw_csv_schema s;
    tw_error err;
    assert_int_equal(scan("a,b,y\n1,2,0\n1,2,0\n1,x,0\n", "y", &s, &err), TW_ERR_INVALID);
    char buf[700];
    tw_error_format(&err, buf, sizeof buf);
    assert_string_equal(buf, "d.csv:4: column 2 ('b'): 'x' is not a number");
}

static void test_gzip_and_budget(void **state)
{
    (void)state;
    const char *text = "a,y\n1,2\n3,4\n";
    uLongf zlen = 256;
    uint8_t z[256];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (Bytef *)text;
    zs.avail_in = (uInt)strlen(text);
    zs.next_out = z;
    zs.avail_out = (uInt)zlen;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    zlen = zs.total_out;
    deflateEnd(&zs);
    tw_csv_reader *r;
    tw_error err;
    tw_csv_schema s;
    assert_int_equal(tw_csv_open_mem(z, zlen, "z.csv.gz", 0, &r, &err), TW_OK);
    assert_int_equal(tw_csv_scan(r, "y", &s, &err), TW_OK);
    assert_int_equal(s.rows, 2);
    float f[1];
    tw_csv_label l;
    assert_int_equal(tw_csv_next_example(r, &s, f, &l, &err), TW_OK);
    assert_true(f[0] == 1.0f);
    tw_csv_close(r);
    assert_int_equal(tw_csv_open_mem(text, strlen(text), "d.csv", 9, &r, &err), TW_OK);
    assert_int_equal(tw_csv_scan(r, "y", &s, &err), TW_ERR_TOO_LARGE);
    tw_csv_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_and_header),
        cmocka_unit_test(test_trailing_empty_lines_skipped),
        cmocka_unit_test(test_empty_line_inside_data),
        cmocka_unit_test(test_scan_int_and_float_labels),
        cmocka_unit_test(test_examples_pass_two),
        cmocka_unit_test(test_bad_cells),
        cmocka_unit_test(test_nonfinite_features_when_allowed),
        cmocka_unit_test(test_ragged_and_structure),
        cmocka_unit_test(test_empty_and_nul),
        cmocka_unit_test(test_error_format),
        cmocka_unit_test(test_gzip_and_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
