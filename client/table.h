/* table.h — a plain text table for the client commands: rows of cells, columns padded to their widest
 * cell, a header row first. Owns its cells (copies). Does not own what goes in them. */
#ifndef TW_TABLE_H
#define TW_TABLE_H

#include <stdio.h>

typedef struct {
    int cols;
    int rows;
    char **cells; /* [rows * cols], owned */
} tw_table;

/* A table of cols columns whose first row is header[cols] (borrowed; NULL: no header row). Returns -1
 * out of memory. */
int tw_table_init(tw_table *t, int cols, const char *const *header);
/* Appends a row of cells[cols] (borrowed; NULL prints "-"). Returns -1 out of memory. */
int tw_table_add(tw_table *t, const char *const *cells);
/* Prints every row, two spaces between columns, the last column unpadded. */
void tw_table_print(const tw_table *t, FILE *out);
void tw_table_free(tw_table *t);

#endif
