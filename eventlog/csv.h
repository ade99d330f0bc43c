/* csv.h — numeric CSV files with a header row: a streaming row reader and the numeric-dataset layer the
 * converter uses (pass 1 validates every cell and counts rows, pass 2 yields examples).
 *
 * Owns: splitting lines into fields (commas; a field may be double-quoted, with "" for a quote inside;
 * blanks around fields are trimmed; a quoted field cannot span lines), CRLF and LF line ends, a UTF-8 BOM
 * before the header, a missing final newline, and empty lines — allowed only at the end of the file, an
 * empty line followed by data is an error. On top of rows: finding the label column, checking every row
 * has as many fields as the header (ragged rows are errors), parsing feature cells as finite float32
 * decimals (nan and inf only when the caller allows non-finite features) and labels as integers or
 * finite floats, and deciding the label type over the whole file.
 * Does not own: writing anything (convert.c), or non-numeric features.
 *
 * Every error names the file and the 1-based line (the header is line 1) and, for a cell, the 1-based
 * column and its name. Lines are capped at TW_CSV_MAX_LINE_BYTES and rows at TW_CSV_MAX_COLUMNS fields.
 * Raw and gzip files are both read (gzfile.h). Not thread-safe: one reader per thread. */
#ifndef TW_CSV_H
#define TW_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum {
    TW_CSV_MAX_LINE_BYTES = 16 * 1024 * 1024, /* a longer line is TW_ERR_TOO_LARGE */
    TW_CSV_MAX_COLUMNS = 65536                /* more fields in a row is TW_ERR_TOO_LARGE */
};

typedef struct tw_csv_reader tw_csv_reader;

/* Opens path (raw or gzip) and reads the header row. max_bytes budgets content bytes (0 = none).
 * Caller owns *out. Errors: TW_ERR_INVALID (empty file, empty header, a bad quoted name), those of
 * tw_gzfile_open, TW_ERR_TOO_LARGE. */
tw_status tw_csv_open(const char *path, uint64_t max_bytes, tw_csv_reader **out, tw_error *err);

/* Like tw_csv_open over memory (borrowed: must outlive the reader); name (copied) labels errors. */
tw_status tw_csv_open_mem(const void *data, size_t n, const char *name, uint64_t max_bytes,
                          tw_csv_reader **out, tw_error *err);

/* Header columns and their names (unquoted; borrowed from r, valid until close). */
size_t tw_csv_columns(const tw_csv_reader *r);
const char *tw_csv_column_name(const tw_csv_reader *r, size_t i);

/* The file name errors are reported against (borrowed from r). */
const char *tw_csv_name(const tw_csv_reader *r);

/* Reads the next data row: TW_OK with *fields pointing at *n NUL-terminated, unquoted, trimmed fields
 * (all borrowed, valid until the next call on r); TW_END at the end of the file (trailing empty lines
 * skipped). Errors: TW_ERR_INVALID (empty line inside the data, NUL byte, bad quoting),
 * TW_ERR_TOO_LARGE, and I/O or gzip errors. */
tw_status tw_csv_next_row(tw_csv_reader *r, char *const **fields, size_t *n, tw_error *err);

/* 1-based line number of the row last returned. */
int64_t tw_csv_line(const tw_csv_reader *r);

/* Goes back to the first data row. Errors: TW_ERR_IO. */
tw_status tw_csv_rewind(tw_csv_reader *r, tw_error *err);

/* ---- numeric datasets ---- */

/* Lets feature cells spelled [+-]nan, [+-]inf or [+-]infinity (any case) through as NaN / ±Inf
 * (allow != 0); by default (0) such a cell is TW_ERR_INVALID naming the line, the data row (1-based),
 * the column and its name. Labels must be finite either way. Set before tw_csv_scan. */
void tw_csv_allow_nonfinite(tw_csv_reader *r, int allow);

typedef struct {
    size_t label_column; /* index of the label column among tw_csv_columns() */
    size_t n_features;   /* tw_csv_columns() - 1: every other column, in file order */
    uint64_t rows;       /* data rows */
    int int_labels;      /* 1 when every label cell is an integer literal that fits int64 */
} tw_csv_schema;

typedef struct {
    int is_int; /* the cell was an integer literal ([+-]digits, fits int64) */
    int64_t i;  /* its value when is_int */
    double f;   /* its value as a double, always */
} tw_csv_label;

/* Pass 1: finds label_column by exact name, then reads every row checking it as
 * tw_csv_next_example does, counts rows and decides int_labels; ends rewound to the first data row.
 * Errors: TW_ERR_INVALID (no such column, the name twice, no feature column, any bad row or cell),
 * TW_ERR_NOMEM, and those of tw_csv_next_row. */
tw_status tw_csv_scan(tw_csv_reader *r, const char *label_column, tw_csv_schema *s, tw_error *err);

/* Pass 2 (and the check of pass 1): reads the next row into features (caller's, [s->n_features]
 * float32, file column order without the label) and *label. TW_END at the end. Errors (naming line,
 * column number and column name): TW_ERR_INVALID for a row with the wrong number of fields (ragged), an
 * empty cell, a cell that is not a decimal number (hex is refused; nan and inf are too unless allowed,
 * above), or a value out of float32 range. */
tw_status tw_csv_next_example(tw_csv_reader *r, const tw_csv_schema *s, float *features,
                              tw_csv_label *label, tw_error *err);

/* Closes the file and frees r (NULL-safe). */
void tw_csv_close(tw_csv_reader *r);

#endif
