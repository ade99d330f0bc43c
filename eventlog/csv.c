/* csv.c — CSV rows and numeric CSV datasets. See csv.h.
 *
 * libcsv (Debian) parses RFC 4180 but reports neither line numbers we can trust across quoted newlines
 * nor a way to refuse them; what Tower needs is a line splitter with exact line numbers, so it is ours.
 * Each line is copied into one growing buffer (capped) and split in place: fields are pointers into it. */
#include "csv.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gzfile.h"

struct tw_csv_reader {
    tw_gzfile *in;       /* owned */
    char *line;          /* [line_cap] owned: the current line, split in place */
    size_t line_len, line_cap;
    char **fields;       /* [fields_cap] owned: pointers into line */
    size_t n_fields, fields_cap;
    char *header;        /* owned copy of the split header line; names point into it */
    char **names;        /* [columns] owned */
    size_t columns;
    int64_t line_no;     /* 1-based number of the line last read */
    int64_t blank_line;  /* first empty line not yet followed by data, 0 if none */
    int allow_nonfinite; /* feature cells may be nan / inf (tw_csv_allow_nonfinite) */
};

/* =============================== lines =============================== */

static tw_status append(tw_csv_reader *r, const uint8_t *p, size_t n, tw_error *err)
{
    if (r->line_len + n + 1 > r->line_cap) {
        if (r->line_len + n + 1 > TW_CSV_MAX_LINE_BYTES)
            return tw_error_set_line(err, TW_ERR_TOO_LARGE, tw_gzfile_name(r->in), r->line_no + 1,
                                     "line is longer than %d bytes", TW_CSV_MAX_LINE_BYTES);
        size_t cap = (r->line_len + n + 1) * 2;
        char *q = realloc(r->line, cap);
        if (!q)
            return tw_error_set(err, TW_ERR_NOMEM, tw_gzfile_name(r->in), -1, "out of memory");
        r->line = q;
        r->line_cap = cap;
    }
    if (n)
        memcpy(r->line + r->line_len, p, n);
    r->line_len += n;
    return TW_OK;
}

/* Reads one line (without its "\n" or "\r\n") into r->line. TW_END when no bytes are left. */
static tw_status read_line(tw_csv_reader *r, tw_error *err)
{
    r->line_len = 0;
    int any = 0;
    for (;;) {
        const uint8_t *p;
        size_t avail;
        TW_TRY(tw_gzfile_peek(r->in, &p, &avail, err));
        if (avail == 0)
            break;
        any = 1;
        const uint8_t *nl = memchr(p, '\n', avail);
        size_t take = nl ? (size_t)(nl - p) : avail;
        TW_TRY(append(r, p, take, err));
        tw_gzfile_skip(r->in, take + (nl != NULL));
        if (nl)
            break;
    }
    if (!any)
        return TW_END;
    r->line_no++;
    if (r->line_len > 0 && r->line[r->line_len - 1] == '\r')
        r->line_len--;
    r->line[r->line_len] = 0;
    return TW_OK;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static int line_is_empty(const tw_csv_reader *r)
{
    for (size_t i = 0; i < r->line_len; i++)
        if (!is_blank(r->line[i]))
            return 0;
    return 1;
}

/* =============================== fields =============================== */

static tw_status push_field(tw_csv_reader *r, char *f, tw_error *err)
{
    if (r->n_fields == r->fields_cap) {
        if (r->fields_cap == TW_CSV_MAX_COLUMNS)
            return tw_error_set_line(err, TW_ERR_TOO_LARGE, tw_gzfile_name(r->in), r->line_no,
                                     "more than %d fields", TW_CSV_MAX_COLUMNS);
        size_t cap = r->fields_cap ? r->fields_cap * 2 : 64;
        char **q = realloc(r->fields, cap * sizeof *q);
        if (!q)
            return tw_error_set(err, TW_ERR_NOMEM, tw_gzfile_name(r->in), -1, "out of memory");
        r->fields = q;
        r->fields_cap = cap;
    }
    r->fields[r->n_fields++] = f;
    return TW_OK;
}

/* Unquotes a field starting at the opening quote s[*i]; writes it in place from s[*i]; leaves *i after
 * the closing quote and returns the end of the written text via *end. */
static tw_status unquote(tw_csv_reader *r, size_t *i, char **end, tw_error *err)
{
    char *s = r->line;
    size_t w = *i, k = *i + 1;
    for (;;) {
        if (k >= r->line_len)
            return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->line_no,
                                     "column %zu: unterminated quoted field (a quoted field cannot "
                                     "span lines)", r->n_fields + 1);
        if (s[k] == '"' && s[k + 1] == '"') {
            s[w++] = '"';
            k += 2;
        } else if (s[k] == '"') {
            break;
        } else {
            s[w++] = s[k++];
        }
    }
    *i = k + 1;
    *end = s + w;
    return TW_OK;
}

/* Splits one field starting at line[*i]; leaves *i at the ',' after it or at the end of the line. */
static tw_status split_field(tw_csv_reader *r, size_t *i, tw_error *err)
{
    char *s = r->line;
    while (*i < r->line_len && is_blank(s[*i]))
        (*i)++;
    char *start = s + *i, *end = start;
    if (*i < r->line_len && s[*i] == '"') {
        TW_TRY(unquote(r, i, &end, err));
        while (*i < r->line_len && is_blank(s[*i]))
            (*i)++;
        if (*i < r->line_len && s[*i] != ',')
            return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->line_no,
                                     "column %zu: unexpected text after a closing quote",
                                     r->n_fields + 1);
    } else {
        while (*i < r->line_len && s[*i] != ',')
            (*i)++;
        end = s + *i;
        while (end > start && is_blank(end[-1]))
            end--;
    }
    TW_TRY(push_field(r, start, err));
    *end = 0; /* may overwrite the ',' at s[*i]: the caller steps over it by position */
    return TW_OK;
}

/* Splits r->line into r->fields. */
static tw_status split(tw_csv_reader *r, tw_error *err)
{
    if (memchr(r->line, 0, r->line_len))
        return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->line_no,
                                 "the line contains a NUL byte");
    r->n_fields = 0;
    for (size_t i = 0;; i++) { /* i++ steps over the ',' that ended the field */
        TW_TRY(split_field(r, &i, err));
        if (i >= r->line_len)
            return TW_OK;
    }
}

tw_status tw_csv_next_row(tw_csv_reader *r, char *const **fields, size_t *n, tw_error *err)
{
    for (;;) {
        tw_status s = read_line(r, err);
        if (s == TW_END)
            return TW_END; /* empty lines at the end are fine */
        TW_TRY(s);
        if (line_is_empty(r)) {
            if (!r->blank_line)
                r->blank_line = r->line_no;
            continue;
        }
        if (r->blank_line)
            return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->blank_line,
                                     "empty line inside the data (only trailing empty lines are "
                                     "allowed)");
        TW_TRY(split(r, err));
        *fields = r->fields;
        *n = r->n_fields;
        return TW_OK;
    }
}

/* =============================== header =============================== */

/* Copies the split header line so that names outlive the next row. */
static tw_status keep_header(tw_csv_reader *r, tw_error *err)
{
    r->columns = r->n_fields;
    r->header = malloc(r->line_len + 1);
    r->names = malloc(r->columns * sizeof *r->names);
    if (!r->header || !r->names)
        return tw_error_set(err, TW_ERR_NOMEM, tw_gzfile_name(r->in), -1, "out of memory");
    memcpy(r->header, r->line, r->line_len + 1);
    for (size_t i = 0; i < r->columns; i++)
        r->names[i] = r->header + (r->fields[i] - r->line);
    return TW_OK;
}

static tw_status read_header(tw_csv_reader *r, tw_error *err)
{
    const char *name = tw_gzfile_name(r->in);
    tw_status s = read_line(r, err);
    if (s == TW_END)
        return tw_error_set_line(err, TW_ERR_INVALID, name, 1, "the file is empty: a header row is "
                                                               "needed");
    TW_TRY(s);
    if (r->line_len >= 3 && !memcmp(r->line, "\xEF\xBB\xBF", 3)) { /* UTF-8 BOM */
        memmove(r->line, r->line + 3, r->line_len - 2);
        r->line_len -= 3;
    }
    if (line_is_empty(r))
        return tw_error_set_line(err, TW_ERR_INVALID, name, 1, "the header row is empty");
    TW_TRY(split(r, err));
    return keep_header(r, err);
}

/* Opens src and reads the header. */
static tw_status reader_start(const tw_source *src, uint64_t max_bytes, tw_csv_reader **out, tw_error *err)
{
    *out = NULL;
    tw_csv_reader *r = calloc(1, sizeof *r);
    if (!r)
        return tw_error_set(err, TW_ERR_NOMEM, tw_source_name(src), -1, "out of memory");
    tw_status s = tw_gzfile_open_source(src, TW_COMPRESSION_AUTO, max_bytes, &r->in, err);
    if (s == TW_OK)
        s = read_header(r, err);
    if (s != TW_OK) {
        tw_csv_close(r);
        return s;
    }
    *out = r;
    return TW_OK;
}

tw_status tw_csv_open(const char *path, uint64_t max_bytes, tw_csv_reader **out, tw_error *err)
{
    const tw_source src = {.path = path};
    return reader_start(&src, max_bytes, out, err);
}

tw_status tw_csv_open_mem(const void *data, size_t n, const char *name, uint64_t max_bytes,
                          tw_csv_reader **out, tw_error *err)
{
    const tw_source src = {.data = data, .size = n, .name = name};
    return reader_start(&src, max_bytes, out, err);
}

size_t tw_csv_columns(const tw_csv_reader *r) { return r->columns; }

const char *tw_csv_column_name(const tw_csv_reader *r, size_t i) { return r->names[i]; }

const char *tw_csv_name(const tw_csv_reader *r) { return tw_gzfile_name(r->in); }

int64_t tw_csv_line(const tw_csv_reader *r) { return r->line_no; }

tw_status tw_csv_rewind(tw_csv_reader *r, tw_error *err)
{
    TW_TRY(tw_gzfile_rewind(r->in, err));
    r->line_no = 0;
    r->blank_line = 0;
    tw_status s = read_line(r, err); /* the header, already known */
    return s == TW_END ? TW_OK : s;
}

void tw_csv_close(tw_csv_reader *r)
{
    if (!r)
        return;
    tw_gzfile_close(r->in);
    free(r->line);
    free(r->fields);
    free(r->header);
    free(r->names);
    free(r);
}

/* =============================== numbers =============================== */

/* A decimal number: only digits, sign, point and exponent characters (no hex, nan, inf). */
static int decimal_syntax(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!strchr("0123456789+-.eE", *s))
            return 0;
    return 1;
}

static int integer_syntax(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static tw_status cell_error(const tw_csv_reader *r, size_t col, const char *cell, const char *why,
                            tw_error *err)
{
    return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->line_no,
                             "column %zu ('%.100s'): '%.40s' %s", col + 1, r->names[col], cell, why);
}

void tw_csv_allow_nonfinite(tw_csv_reader *r, int allow) { r->allow_nonfinite = allow; }

/* [+-]nan, [+-]inf or [+-]infinity in any case: the spellings of a non-finite cell. */
static int nonfinite_syntax(const char *s)
{
    s += *s == '+' || *s == '-';
    return !strcasecmp(s, "nan") || !strcasecmp(s, "inf") || !strcasecmp(s, "infinity");
}

/* A non-finite feature cell: kept when the reader allows them, else refused naming the data row. */
static tw_status parse_nonfinite(const tw_csv_reader *r, size_t col, const char *cell, float *out,
                                 tw_error *err)
{
    if (!r->allow_nonfinite)
        return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->line_no,
                                 "data row %lld, column %zu ('%.100s'): '%.40s' is not a finite "
                                 "number; non-finite features are refused unless allowed "
                                 "(--allow-nonfinite)",
                                 (long long)(r->line_no - 1), col + 1, r->names[col], cell);
    *out = strtof(cell, NULL);
    return TW_OK;
}

static tw_status parse_feature(const tw_csv_reader *r, size_t col, const char *cell, float *out,
                               tw_error *err)
{
    if (!*cell)
        return cell_error(r, col, cell, "is empty: every feature cell needs a number", err);
    if (nonfinite_syntax(cell))
        return parse_nonfinite(r, col, cell, out, err);
    char *end;
    errno = 0;
    float v = decimal_syntax(cell) ? strtof(cell, &end) : 0.0f;
    if (!decimal_syntax(cell) || *end)
        return cell_error(r, col, cell, "is not a number", err);
    if (errno == ERANGE && isinf(v))
        return cell_error(r, col, cell, "is out of float32 range", err);
    *out = v;
    return TW_OK;
}

static tw_status parse_label(const tw_csv_reader *r, size_t col, const char *cell,
                             tw_csv_label *out, tw_error *err)
{
    if (!*cell)
        return cell_error(r, col, cell, "is empty: every row needs a label", err);
    char *end;
    errno = 0;
    out->f = decimal_syntax(cell) ? strtod(cell, &end) : 0.0;
    if (!decimal_syntax(cell) || *end)
        return cell_error(r, col, cell, "is not a number", err);
    if (!(out->f >= -FLT_MAX && out->f <= FLT_MAX)) /* also refuses inf */
        return cell_error(r, col, cell, "is out of float32 range", err);
    errno = 0;
    out->is_int = integer_syntax(cell);
    if (out->is_int) {
        out->i = strtoll(cell, &end, 10);
        out->is_int = errno != ERANGE;
    }
    return TW_OK;
}

/* =============================== datasets =============================== */

tw_status tw_csv_next_example(tw_csv_reader *r, const tw_csv_schema *s, float *features,
                              tw_csv_label *label, tw_error *err)
{
    char *const *f;
    size_t n;
    TW_TRY(tw_csv_next_row(r, &f, &n, err));
    if (n != r->columns)
        return tw_error_set_line(err, TW_ERR_INVALID, tw_gzfile_name(r->in), r->line_no,
                                 "ragged row: %zu fields but the header has %zu columns", n,
                                 r->columns);
    for (size_t c = 0, k = 0; c < n; c++) {
        if (c == s->label_column)
            TW_TRY(parse_label(r, c, f[c], label, err));
        else
            TW_TRY(parse_feature(r, c, f[c], &features[k++], err));
    }
    return TW_OK;
}

/* The header's column names, "a, b, c", into buf (cut with "..." when they do not fit). */
static void column_list(const tw_csv_reader *r, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < r->columns; i++) {
        int n = snprintf(buf + len, size - len, "%s%s", i ? ", " : "", r->names[i]);
        if (n < 0 || (size_t)n >= size - len) {
            snprintf(buf + (len < size - 6 ? len : size - 6), 6, ", ...");
            return;
        }
        len += (size_t)n;
    }
}

/* Finds the label column by exact name; refuses a missing or repeated one and a label-only file. */
static tw_status find_label(const tw_csv_reader *r, const char *label_column, size_t *out,
                            tw_error *err)
{
    const char *name = tw_gzfile_name(r->in);
    size_t found = r->columns;
    for (size_t i = 0; i < r->columns; i++) {
        if (strcmp(r->names[i], label_column))
            continue;
        if (found != r->columns)
            return tw_error_set_line(err, TW_ERR_INVALID, name, 1,
                                     "label column '%s' appears twice (columns %zu and %zu)",
                                     label_column, found + 1, i + 1);
        found = i;
    }
    if (found == r->columns) {
        char list[300];
        column_list(r, list, sizeof list);
        return tw_error_set_line(err, TW_ERR_INVALID, name, 1,
                                 "no column named '%.64s' in the header; its %zu columns are %s: name the label "
                                 "column with --label-column (tower upload, tower convert) or label_column= (the API)",
                                 label_column, r->columns, list);
    }
    if (r->columns < 2)
        return tw_error_set_line(err, TW_ERR_INVALID, name, 1,
                                 "no feature columns: the header has only the label column");
    *out = found;
    return TW_OK;
}

tw_status tw_csv_scan(tw_csv_reader *r, const char *label_column, tw_csv_schema *s, tw_error *err)
{
    memset(s, 0, sizeof *s);
    TW_TRY(find_label(r, label_column, &s->label_column, err));
    s->n_features = r->columns - 1;
    s->int_labels = 1;
    float *scratch = malloc(s->n_features * sizeof *scratch);
    if (!scratch)
        return tw_error_set(err, TW_ERR_NOMEM, tw_gzfile_name(r->in), -1, "out of memory");
    tw_csv_label label;
    tw_status st;
    while ((st = tw_csv_next_example(r, s, scratch, &label, err)) == TW_OK) {
        s->rows++;
        s->int_labels &= label.is_int;
    }
    free(scratch);
    if (st != TW_END)
        return st;
    return tw_csv_rewind(r, err);
}
