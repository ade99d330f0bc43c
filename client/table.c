/* table.c — plain text tables. See table.h. */
#include "table.h"

#include <stdlib.h>
#include <string.h>

int tw_table_init(tw_table *t, int cols, const char *const *header)
{
    t->cols = cols;
    t->rows = 0;
    t->cells = NULL;
    return header ? tw_table_add(t, header) : 0;
}

int tw_table_add(tw_table *t, const char *const *cells)
{
    char **grown = realloc(t->cells, sizeof *grown * (size_t)(t->rows + 1) * (size_t)t->cols);
    if (!grown)
        return -1;
    t->cells = grown;
    char **row = grown + (size_t)t->rows * (size_t)t->cols;
    int ok = 1;
    for (int c = 0; c < t->cols; c++)
        ok &= (row[c] = strdup(cells[c] ? cells[c] : "-")) != NULL;
    t->rows++;
    return ok ? 0 : -1;
}

void tw_table_print(const tw_table *t, FILE *out)
{
    for (int r = 0; r < t->rows; r++) {
        for (int c = 0; c < t->cols; c++) {
            int width = 0;
            for (int k = 0; k < t->rows; k++) {
                int w = (int)strlen(t->cells[(size_t)k * (size_t)t->cols + (size_t)c]);
                width = w > width ? w : width;
            }
            const char *cell = t->cells[(size_t)r * (size_t)t->cols + (size_t)c];
            if (c + 1 < t->cols)
                fprintf(out, "%-*s  ", width, cell);
            else
                fprintf(out, "%s\n", cell);
        }
    }
}

void tw_table_free(tw_table *t)
{
    for (size_t i = 0; i < (size_t)t->rows * (size_t)t->cols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->rows = 0;
}
