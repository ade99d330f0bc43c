/* tar.c — an in-memory ustar archive. See tar.h. */
#include "tar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 512 };

/* Room for n more bytes, zeroed. */
static uint8_t *grow(tw_tar *t, size_t n)
{
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 64 * 1024;
        while (cap < t->len + n)
            cap *= 2;
        uint8_t *p = realloc(t->bytes, cap);
        if (!p)
            return NULL;
        t->bytes = p;
        t->cap = cap;
    }
    uint8_t *at = t->bytes + t->len;
    memset(at, 0, n);
    t->len += n;
    return at;
}

static int name_ok(const char *name)
{
    size_t n = strlen(name);
    return n >= 1 && n <= 99 && name[0] != '/' && !strstr(name, "..");
}

tw_status tw_tar_add(tw_tar *t, const char *name, const void *data, size_t n, uint64_t mtime, tw_error *err)
{
    if (!name_ok(name))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tar member name '%s' is not 1 to 99 bytes, relative", name);
    if ((uint64_t)n >= 1ull << 33 || mtime >= 1ull << 33)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tar member '%s' is too large for ustar", name);
    size_t padded = (n + BLOCK - 1) / BLOCK * BLOCK;
    uint8_t *h = grow(t, BLOCK + padded);
    if (!h)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);                     /* uid */
    memcpy(h + 116, "0000000", 7);                     /* gid */
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)n);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)mtime);
    h[156] = '0';                                      /* a regular file */
    memcpy(h + 257, "ustar", 6);                       /* with its NUL */
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);                           /* the checksum counts its own field as spaces */
    unsigned sum = 0;
    for (int i = 0; i < BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);         /* six digits, NUL, then the space kept */
    if (n)
        memcpy(h + BLOCK, data, n);
    return TW_OK;
}

tw_status tw_tar_finish(tw_tar *t, tw_error *err)
{
    return grow(t, 2 * BLOCK) ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

void tw_tar_free(tw_tar *t)
{
    if (!t)
        return;
    free(t->bytes);
    memset(t, 0, sizeof *t);
}
