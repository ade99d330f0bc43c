/* names.c — the name rule of names.h. */
#include "names.h"

#include <stdio.h>
#include <string.h>

static int name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

int tw_name_valid(const char *s, char *why, size_t size)
{
    size_t n = strlen(s);
    if (n == 0 || n > TW_NAME_MAX) {
        snprintf(why, size, "must be 1 to %d characters long, got %zu", TW_NAME_MAX, n);
        return 0;
    }
    if (!name_char((unsigned char)s[0]) || s[0] == '.' || s[0] == '-' || s[0] == '_') {
        snprintf(why, size, "must start with a letter or a digit");
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!name_char((unsigned char)s[i])) {
            snprintf(why, size, "character %zu is not one of A-Z a-z 0-9 . _ -", i + 1);
            return 0;
        }
    if (strstr(s, "..")) {
        snprintf(why, size, "must not contain \"..\"");
        return 0;
    }
    return 1;
}
