/* names.h — user-given names (datasets, runs): labels, never path components.
 *
 * A valid name is 1 to TW_NAME_MAX bytes of [A-Za-z0-9._-], starting with a letter or digit: no slash,
 * no "..", no leading dot, no NUL, no percent sign, nothing a shell or a path could read specially. */
#ifndef TW_NAMES_H
#define TW_NAMES_H

#include <stddef.h>

enum { TW_NAME_MAX = 64 };

/* 1 when s is a valid name; else 0 and why[size] says which rule it broke. */
int tw_name_valid(const char *s, char *why, size_t size);

#endif
