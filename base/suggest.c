/* suggest.c — the edit distance and the closest name (see suggest.h). */
#include "suggest.h"

#include <stdio.h>
#include <string.h>

int tw_edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return 1000;
    int row[64];
    for (size_t j = 0; j <= m; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[m];
}

const char *tw_suggest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    int best_d = 1000;
    for (size_t i = 0; i < n; i++) {
        int d = tw_edit_distance(s, names[i]);
        if (d < best_d && d <= (strlen(names[i]) >= 5 ? 2 : 1)) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

void tw_suggest_hint(const char *s, const char *const *names, size_t n, char *out, size_t size)
{
    const char *best = tw_suggest(s, names, n);
    if (best) {
        snprintf(out, size, "did you mean '%s'?", best);
        return;
    }
    size_t at = (size_t)snprintf(out, size, "expected one of:");
    for (size_t i = 0; i < n && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "%s %s", i ? "," : "", names[i]);
}
