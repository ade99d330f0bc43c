/* suggest.h — "did you mean": the closest of a few known names to a misspelt one.
 *
 * Owns: the edit distance and the rule for "close" (at most 1 edit for a name under 5 bytes, 2 for a longer
 * one), shared by the config decoder's key and value hints and the server's run and dataset names. Written
 * here: no library Tower links offers it, and it is a few lines. */
#ifndef TW_SUGGEST_H
#define TW_SUGGEST_H

#include <stddef.h>

/* Levenshtein distance of a and b; a large number when either is longer than 63 bytes. */
int tw_edit_distance(const char *a, const char *b);

/* The name of names[n] closest to s within the rule above (the first of equals), or NULL (borrowed). */
const char *tw_suggest(const char *s, const char *const *names, size_t n);

/* The hint for a name s that is none of names[n], into out[size]: "did you mean 'x'?" for a close one
 * (tw_suggest), else "expected one of: a, b, c". */
void tw_suggest_hint(const char *s, const char *const *names, size_t n, char *out, size_t size);

#endif
