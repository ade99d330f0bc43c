/* convert_classes.c — a dataset's class names: parsing them from text (a JSON array, lines or a comma
 * list) and checking them. See convert.h ("class names").
 *
 * Owns: the accepted spellings of a class-names text, the rules for one name (non-empty, length cap, no
 * control characters, UTF-8 — jansson refuses strings that are not) and uniqueness. Does not own: the check
 * of the names' count against the labels, writing them into the meta or reading them back (convert.c), nor
 * where a text comes from (the command line, an upload's form field or file). */
#include "convert.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datafs.h"

/* "name I <what>": the error about the I-th name (from 1). */
static tw_status bad_name(tw_error *err, size_t i, const char *what)
{
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name %zu %s", i, what);
}

/* A control character: C0, DEL, or C1 (U+0080..U+009F, UTF-8 0xC2 0x80..0x9F). */
static int has_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] < 0xa0))
            return 1;
    }
    return 0;
}

static int by_text(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    size_t nx = json_string_length(x), ny = json_string_length(y);
    int c = memcmp(json_string_value(x), json_string_value(y), nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

/* Names the first duplicate (by position) of the sorted copy. */
static tw_status check_unique(const json_t *names, tw_error *err)
{
    size_t n = json_array_size(names);
    const json_t **sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    for (size_t i = 0; i < n; i++)
        sorted[i] = json_array_get(names, i);
    qsort(sorted, n, sizeof *sorted, by_text);
    const json_t *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (!by_text(&sorted[i - 1], &sorted[i]))
            dup = sorted[i];
    free(sorted);
    if (!dup)
        return TW_OK;
    size_t first = 0, second = 0;
    for (size_t i = 0; i < n; i++)
        if (!by_text(&dup, (const json_t *const[]){json_array_get(names, i)})) {
            if (first)
                second = i + 1;
            else
                first = i + 1;
            if (second)
                break;
        }
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name %zu ('%s') repeats name %zu: class names must differ",
                        second, json_string_value(dup), first);
}

tw_status tw_convert_class_names_check(const json_t *names, tw_error *err)
{
    if (!json_is_array(names))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "class names must be an array of strings");
    size_t n = json_array_size(names);
    if (n == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "no class names given");
    if (n > TW_CONVERT_MAX_CLASS_NAMES)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%zu class names: at most %d are allowed", n,
                            TW_CONVERT_MAX_CLASS_NAMES);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(names, i);
        if (!json_is_string(v))
            return bad_name(err, i + 1, "is not a string");
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (len == 0)
            return bad_name(err, i + 1, "is empty");
        if (len > TW_CONVERT_MAX_CLASS_NAME)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "name %zu is %zu bytes long: at most %d are allowed",
                                i + 1, len, TW_CONVERT_MAX_CLASS_NAME);
        if (has_control(s, len))
            return bad_name(err, i + 1, "has a control character");
    }
    return check_unique(names, err);
}

static int blank(char c) { return c == ' ' || c == '\t'; }

/* Appends text[a, b) trimmed of spaces and tabs as a string (position `pos` for errors). */
static tw_status append_item(json_t *names, const char *text, size_t a, size_t b, size_t pos, tw_error *err)
{
    while (a < b && blank(text[a]))
        a++;
    while (b > a && blank(text[b - 1]))
        b--;
    if (json_array_size(names) >= TW_CONVERT_MAX_CLASS_NAMES)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "more than %d class names", TW_CONVERT_MAX_CLASS_NAMES);
    json_t *s = json_stringn(text + a, b - a);
    if (!s)
        return bad_name(err, pos, "is not UTF-8 text");
    if (json_array_append_new(names, s))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    return TW_OK;
}

/* One name per line, or comma-separated (sep); a last empty line is no name. */
static tw_status parse_list(const char *text, size_t len, char sep, json_t *names, tw_error *err)
{
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] != sep)
            continue;
        size_t end = i;
        if (sep == '\n' && end > start && text[end - 1] == '\r')
            end--;
        if (!(i == len && end == start && sep == '\n' && json_array_size(names) > 0))
            TW_TRY(append_item(names, text, start, end, json_array_size(names) + 1, err));
        start = i + 1;
    }
    return TW_OK;
}

tw_status tw_convert_class_names_parse(const char *text, size_t len, json_t **names, tw_error *err)
{
    *names = NULL;
    size_t i = 0;
    while (i < len && (blank(text[i]) || text[i] == '\n' || text[i] == '\r'))
        i++;
    json_t *out = NULL;
    tw_status s = TW_OK;
    if (i == len)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "no class names given");
    if (text[i] == '[') {
        json_error_t je;
        out = json_loadb(text, len, 0, &je);
        if (!out)
            s = tw_error_set(err, TW_ERR_INVALID, NULL, -1, "not a JSON array of names: %s (line %d, column %d)",
                             je.text, je.line, je.column);
    } else if (!(out = json_array())) {
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    } else {
        size_t n = len; /* a single line ends in a newline or not: a comma list either way */
        while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
            n--;
        s = parse_list(text, memchr(text, '\n', n) ? len : n, memchr(text, '\n', n) ? '\n' : ',', out, err);
    }
    if (s == TW_OK)
        s = tw_convert_class_names_check(out, err);
    if (s != TW_OK) {
        json_decref(out);
        return s;
    }
    *names = out;
    return TW_OK;
}

tw_status tw_convert_class_names_read(const char *path, json_t **names, tw_error *err)
{
    *names = NULL;
    int fd = tw_fs_open(path, O_RDONLY, 0);
    if (fd < 0)
        return tw_fs_error(err, path, "cannot open the class names file");
    char *buf = malloc(TW_CONVERT_MAX_CLASS_TEXT + 1);
    size_t len = 0;
    tw_status s = buf ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    while (s == TW_OK) {
        ssize_t n = read(fd, buf + len, TW_CONVERT_MAX_CLASS_TEXT + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            s = tw_error_errno(err, path, "cannot read the class names file");
        else if (n == 0)
            break;
        else if ((len += (size_t)n) > TW_CONVERT_MAX_CLASS_TEXT)
            s = tw_error_set(err, TW_ERR_TOO_LARGE, path, -1, "the class names file is over %d bytes",
                             TW_CONVERT_MAX_CLASS_TEXT);
    }
    close(fd);
    if (s == TW_OK && (s = tw_convert_class_names_parse(buf, len, names, err)) != TW_OK && err)
        snprintf(err->file, sizeof err->file, "%s", path); /* name the file the names came from */
    free(buf);
    return s;
}
