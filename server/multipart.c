/* multipart.c — the streaming multipart/form-data parser. See multipart.h for the grammar, caps and errors.
 *
 * Owns: the Content-Type boundary parameter, delimiter search, header blocks and their caps. Does not own:
 * the bytes of a part (they go to the caller's callbacks) or the request (the server reads it).
 *
 * Written by hand (house style 14) because no kept library does this strictly in constant memory:
 * libmicrohttpd's MHD_PostProcessor had CVE-2023-27371 (a NUL in the boundary read out of bounds), takes
 * sloppy bodies silently, caps neither parts nor header blocks and reports no offsets; the stand-alone C
 * parsers (multipart-parser-c and its forks) are unmaintained and leave the part headers to the caller.
 *
 * A byte-driven state machine, no recursion. The delimiter is "\r\n--" boundary; the body is scanned as if
 * "\r\n" came before its first byte, so a first delimiter without CRLF at the very start needs no special
 * case. Matching needs no KMP table: '\r' occurs in the delimiter only at index 0 (bchars have no CR), so
 * on a mismatch no suffix of the matched bytes can begin a new match, except the mismatching byte itself
 * when it is '\r'. The matched bytes are therefore always the delimiter's first `held` bytes, and when a
 * match fails they are re-sent as data from the delimiter itself: nothing of the body is copied. */
#include "multipart.h"

#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { DELIM_MAX = 4 + TW_MULTIPART_MAX_BOUNDARY };

typedef enum {
    ST_PREAMBLE, /* before the first delimiter: bytes are dropped */
    ST_TAIL,     /* after "--" boundary: "--" (close), transport padding, or CR */
    ST_LF,       /* after a delimiter line's CR */
    ST_CLOSE,    /* after "--" boundary "-" */
    ST_HEADERS,  /* in a part's header block */
    ST_DATA,     /* in a part's data */
    ST_EPILOGUE, /* after the close delimiter: bytes are dropped */
} state;

struct tw_multipart {
    tw_multipart_callbacks cb;                    /* copied; cb.ctx borrowed */
    state st;
    char delim[DELIM_MAX + 1];                    /* "\r\n--" boundary, NUL-terminated */
    size_t delim_len;                             /* 5 .. DELIM_MAX */
    size_t held;                                  /* delim[0, held) matched at the end of the input so far, not
                                                   * yet passed on; < delim_len */
    size_t pad;                                   /* transport padding bytes after the current delimiter */
    int parts;                                    /* parts begun */
    uint64_t offset;                              /* body bytes consumed */
    uint64_t hdr_start;                           /* body offset of the current header block */
    size_t hdr_len;
    char hdr[TW_MULTIPART_MAX_HEADER_BYTES + 1];  /* the current header block, NUL-terminated when parsed */
    char name[TW_MULTIPART_MAX_NAME + 1];         /* the current part's field name */
    char filename[TW_MULTIPART_MAX_FILENAME + 1]; /* the current part's file name, "" if none */
    tw_error failure;                             /* sticky; status TW_OK while healthy */
};

/* ================================ errors ================================ */

static tw_status fail(tw_multipart *m, tw_error *err, tw_status s, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Records the sticky failure (a parse error at body byte `offset`) and copies it to *err. */
static tw_status fail(tw_multipart *m, tw_error *err, tw_status s, uint64_t offset, const char *fmt, ...)
{
    char msg[sizeof m->failure.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tw_error_set(&m->failure, s, NULL, (int64_t)offset, "%s", msg);
    if (err)
        *err = m->failure;
    return s;
}

static tw_status sticky(const tw_multipart *m, tw_error *err)
{
    if (err)
        *err = m->failure;
    return m->failure.status;
}

/* A callback returned s with *cb_err (filled by it, or still clear): make it the sticky failure. */
static tw_status callback_failed(tw_multipart *m, tw_error *err, tw_status s, tw_error *cb_err,
                                 const char *which)
{
    if (cb_err->status == TW_OK)
        tw_error_set(cb_err, s, NULL, (int64_t)m->offset, "multipart part %d: %s callback failed (%s)",
                     m->parts, which, tw_status_name(s));
    m->failure = *cb_err;
    m->failure.status = s;
    return sticky(m, err);
}

/* ================================ lexical ================================ */

/* RFC 9110 tchar. */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 2046 bchars. */
static int is_bchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c && strchr("'()+_,-./:=? ", c) != NULL;
}

static const char *skip_ows(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* One `name=value` parameter of a header value; value is raw (between the quotes when quoted, escapes
 * still in). Both point into the header string. */
typedef struct {
    const char *name;
    size_t name_len;
    const char *val;
    size_t val_len;
    int quoted;
} param;

/* Reads the next `; name=value` (RFC 9110 parameters: OWS around ';', none around '='; value a token or a
 * quoted string) from *pos. Returns 1 with *p filled and *pos advanced, 0 at the end of the string, or -1
 * with *why (a static phrase) for a syntax error. Empty parameters (";;", a trailing ';') are skipped, as
 * RFC 9110 allows. */
static int next_param(const char **pos, param *p, const char **why)
{
    const char *s = *pos;
    for (;;) {
        s = skip_ows(s);
        if (!*s)
            return 0;
        if (*s != ';') {
            *why = "expected ';' before a parameter (a value with characters outside a token must be quoted)";
            return -1;
        }
        s = skip_ows(s + 1);
        if (*s && *s != ';')
            break;
    }
    p->name = s;
    while (is_tchar((unsigned char)*s))
        s++;
    p->name_len = (size_t)(s - p->name);
    if (!p->name_len) {
        *why = "a parameter without a name";
        return -1;
    }
    if (*s != '=') {
        *why = "a parameter without '=' right after its name";
        return -1;
    }
    s++;
    if (*s == '"') {
        p->val = ++s;
        for (;;) {
            if (*s == '\\' && s[1])
                s += 2;
            else if (*s && *s != '\\' && *s != '"')
                s++;
            else
                break;
        }
        if (*s != '"') {
            *why = "an unterminated quoted string";
            return -1;
        }
        p->val_len = (size_t)(s - p->val);
        p->quoted = 1;
        s++;
    } else {
        p->val = s;
        while (is_tchar((unsigned char)*s))
            s++;
        p->val_len = (size_t)(s - p->val);
        p->quoted = 0;
        if (!p->val_len) {
            *why = "a parameter with an empty unquoted value";
            return -1;
        }
    }
    *pos = s;
    return 1;
}

static int param_is(const param *p, const char *name)
{
    size_t n = strlen(name);
    return p->name_len == n && !strncasecmp(p->name, name, n);
}

/* Decodes p's value (quoted-pair escapes removed) into dst[0, cap] as a C string. Returns the decoded
 * length, or (size_t)-1 when it would pass cap bytes. */
static size_t param_value(const param *p, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t j = 0; j < p->val_len; j++) {
        char c = p->val[j];
        if (p->quoted && c == '\\')
            c = p->val[++j]; /* next_param guarantees a byte after each backslash */
        if (o == cap)
            return (size_t)-1;
        dst[o++] = c;
    }
    dst[o] = 0;
    return o;
}

/* ================================ create ================================ */

tw_status tw_multipart_create(const char *content_type, const tw_multipart_callbacks *cb, tw_multipart **out,
                              tw_error *err)
{
    assert(cb && cb->part_begin && cb->part_data && cb->part_end && out);
    *out = NULL;
    const char *s = skip_ows(content_type ? content_type : "");
    const char *type = s;
    while (is_tchar((unsigned char)*s))
        s++;
    if (*s == '/')
        for (s++; is_tchar((unsigned char)*s);)
            s++;
    int ends = !*s || *s == ';' || *s == ' ' || *s == '\t';
    if (s - type != 19 || strncasecmp(type, "multipart/form-data", 19) || !ends)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "Content-Type '%.100s' is not multipart/form-data", content_type ? content_type : "");

    char boundary[TW_MULTIPART_MAX_BOUNDARY + 1];
    int have_boundary = 0;
    param p;
    const char *why = NULL;
    int r;
    while ((r = next_param(&s, &p, &why)) > 0) {
        if (!param_is(&p, "boundary"))
            continue;
        if (have_boundary)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "Content-Type: the boundary parameter appears twice");
        have_boundary = 1;
        size_t n = param_value(&p, boundary, TW_MULTIPART_MAX_BOUNDARY);
        if (n == (size_t)-1)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "Content-Type: boundary over %d bytes",
                                TW_MULTIPART_MAX_BOUNDARY);
        if (n == 0)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "Content-Type: empty boundary");
        for (size_t i = 0; i < n; i++)
            if (!is_bchar((unsigned char)boundary[i]))
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                    "Content-Type: boundary byte %zu is 0x%02x, not one of RFC 2046's bchars "
                                    "(letters, digits and '()+_,-./:=? and space)",
                                    i, (unsigned char)boundary[i]);
        if (boundary[n - 1] == ' ')
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "Content-Type: boundary ends in a space");
    }
    if (r < 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "Content-Type: %s", why);
    if (!have_boundary)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "Content-Type: multipart/form-data without a boundary parameter");

    tw_multipart *m = calloc(1, sizeof *m);
    if (!m)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory for a multipart parser");
    m->cb = *cb;
    m->st = ST_PREAMBLE;
    m->delim_len = (size_t)snprintf(m->delim, sizeof m->delim, "\r\n--%s", boundary);
    m->held = 2; /* the "\r\n" before the body, so that "--" boundary may open it */
    tw_error_clear(&m->failure);
    *out = m;
    return TW_OK;
}

void tw_multipart_destroy(tw_multipart *m)
{
    free(m);
}

int tw_multipart_parts(const tw_multipart *m)
{
    return m->parts;
}

/* ================================ part headers ================================ */

/* Parses Content-Disposition's value v (of the header line at body offset `at`) into m->name and
 * m->filename. */
static tw_status parse_disposition(tw_multipart *m, const char *v, uint64_t at, tw_error *err)
{
    const char *s = v;
    while (is_tchar((unsigned char)*s))
        s++;
    if (s - v != 9 || strncasecmp(v, "form-data", 9))
        return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: Content-Disposition is '%.*s', not form-data",
                    m->parts, (int)(s - v), v);
    int have_name = 0, have_filename = 0;
    param p;
    const char *why = NULL;
    int r;
    while ((r = next_param(&s, &p, &why)) > 0) {
        int is_name = param_is(&p, "name");
        if (!is_name && !param_is(&p, "filename"))
            continue;
        const char *what = is_name ? "field name" : "file name";
        int *have = is_name ? &have_name : &have_filename;
        if (*have)
            return fail(m, err, TW_ERR_INVALID, at,
                        "multipart part %d: Content-Disposition has the %s parameter twice", m->parts,
                        is_name ? "name" : "filename");
        *have = 1;
        char *dst = is_name ? m->name : m->filename;
        size_t cap = is_name ? TW_MULTIPART_MAX_NAME : TW_MULTIPART_MAX_FILENAME;
        size_t n = param_value(&p, dst, cap);
        if (n == (size_t)-1)
            return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: %s over %zu bytes", m->parts, what, cap);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)dst[i];
            if (c < 0x20 || c == 0x7f)
                return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: %s holds control byte 0x%02x",
                            m->parts, what, c);
        }
    }
    if (r < 0)
        return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: Content-Disposition: %s", m->parts, why);
    if (!have_name)
        return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: Content-Disposition without a name parameter",
                    m->parts);
    if (!m->name[0])
        return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: empty field name", m->parts);
    return TW_OK;
}

/* The header block m->hdr[0, hdr_len) is complete (it ends in an empty line; every CR is followed by LF
 * and every LF preceded by CR; no NUL): parse it and begin the part. */
static tw_status begin_part(tw_multipart *m, tw_error *err)
{
    m->hdr[m->hdr_len] = 0;
    m->name[0] = m->filename[0] = 0;
    const char *ctype = NULL;
    int have_disposition = 0;
    for (char *line = m->hdr;;) {
        char *cr = strchr(line, '\r');
        uint64_t at = m->hdr_start + (uint64_t)(line - m->hdr);
        assert(cr && cr[1] == '\n');
        *cr = 0;
        if (cr == line)
            break;
        /* A folded line is refused before the line it continues is read, so the error names the fold. */
        if (*line == ' ' || *line == '\t' || cr[2] == ' ' || cr[2] == '\t')
            return fail(m, err, TW_ERR_INVALID, *line == ' ' || *line == '\t' ? at : at + (uint64_t)(cr + 2 - line),
                        "multipart part %d: a folded header line (obsolete line folding is refused)", m->parts);
        char *colon = line;
        while (is_tchar((unsigned char)*colon))
            colon++;
        if (colon == line || *colon != ':')
            return fail(m, err, TW_ERR_INVALID, at,
                        "multipart part %d: a header line that is not 'Name: value'", m->parts);
        size_t name_len = (size_t)(colon - line);
        char *v = (char *)skip_ows(colon + 1);
        char *end = cr;
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        *end = 0;
        if (name_len == 19 && !strncasecmp(line, "Content-Disposition", 19)) {
            if (have_disposition)
                return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: Content-Disposition appears twice",
                            m->parts);
            have_disposition = 1;
            TW_TRY(parse_disposition(m, v, at, err));
        } else if (name_len == 12 && !strncasecmp(line, "Content-Type", 12)) {
            if (ctype)
                return fail(m, err, TW_ERR_INVALID, at, "multipart part %d: Content-Type appears twice", m->parts);
            ctype = v;
        }
        line = cr + 2;
    }
    if (!have_disposition)
        return fail(m, err, TW_ERR_INVALID, m->hdr_start,
                    "multipart part %d: no Content-Disposition header (form-data needs one naming the field)",
                    m->parts);
    tw_error e;
    tw_error_clear(&e);
    tw_status s = m->cb.part_begin(m->cb.ctx, m->name, m->filename, ctype ? ctype : "", &e);
    return s == TW_OK ? TW_OK : callback_failed(m, err, s, &e, "part_begin");
}

/* Appends p[*pos, n) to the header block up to its end (then begins the part and enters ST_DATA);
 * advances *pos and m->offset past the bytes taken. */
static tw_status take_headers(tw_multipart *m, const uint8_t *p, size_t n, size_t *pos, tw_error *err)
{
    for (size_t i = *pos; i < n; i++) {
        unsigned char c = p[i];
        size_t len = m->hdr_len;
        char prev = len ? m->hdr[len - 1] : 0;
        if (len == TW_MULTIPART_MAX_HEADER_BYTES)
            return fail(m, err, TW_ERR_TOO_LARGE, m->offset, "multipart part %d: header block over %d bytes",
                        m->parts, TW_MULTIPART_MAX_HEADER_BYTES);
        if (c == 0)
            return fail(m, err, TW_ERR_INVALID, m->offset, "multipart part %d: NUL byte in the header block",
                        m->parts);
        if (prev == '\r' && c != '\n')
            return fail(m, err, TW_ERR_INVALID, m->offset - 1,
                        "multipart part %d: CR without LF in the header block", m->parts);
        if (c == '\n' && prev != '\r')
            return fail(m, err, TW_ERR_INVALID, m->offset, "multipart part %d: LF without CR in the header block",
                        m->parts);
        m->hdr[m->hdr_len++] = (char)c;
        m->offset++;
        if (c == '\n' && (m->hdr_len == 2 || (m->hdr_len >= 4 && m->hdr[m->hdr_len - 3] == '\n'))) {
            *pos = i + 1;
            TW_TRY(begin_part(m, err));
            m->st = ST_DATA;
            m->held = 0;
            return TW_OK;
        }
    }
    *pos = n;
    return TW_OK;
}

/* ================================ data ================================ */

/* Passes n bytes of part data on (in the preamble: drops them). */
static tw_status emit(tw_multipart *m, const void *data, size_t n, tw_error *err)
{
    if (n == 0 || m->st != ST_DATA)
        return TW_OK;
    tw_error e;
    tw_error_clear(&e);
    tw_status s = m->cb.part_data(m->cb.ctx, data, n, &e);
    return s == TW_OK ? TW_OK : callback_failed(m, err, s, &e, "part_data");
}

/* Looks for the delimiter in p[0, n), continuing a match of m->held bytes, and passes on every byte that
 * can no longer be part of it: the held bytes (re-sent from m->delim) and p's, each as one slice. Sets
 * *used to the bytes consumed (through the delimiter's last byte when *found, else n) and advances
 * m->offset by as many. */
static tw_status scan(tw_multipart *m, const uint8_t *p, size_t n, size_t *used, int *found, tw_error *err)
{
    const uint8_t *d = (const uint8_t *)m->delim;
    size_t k = m->held, i = 0;
    *found = 0;
    while (i < n) {
        if (k == 0) {
            const uint8_t *cr = memchr(p + i, '\r', n - i);
            if (!cr) {
                i = n;
                break;
            }
            i = (size_t)(cr - p) + 1;
            k = 1;
        } else if (p[i] == d[k]) {
            i++;
            if (++k == m->delim_len) {
                *found = 1;
                break;
            }
        } else {
            k = p[i] == '\r';
            i++;
        }
    }
    /* The input so far ends in delim[0, held) ++ p[0, i); its last k bytes are the (possibly whole)
     * delimiter, everything before them is data. */
    size_t data = m->held + i - k;
    size_t from_held = data < m->held ? data : m->held;
    m->held = *found ? 0 : k;
    m->offset += i;
    *used = i;
    TW_TRY(emit(m, d, from_held, err));
    return emit(m, p, data - from_held, err);
}

/* ================================ feed / finish ================================ */

tw_status tw_multipart_feed(tw_multipart *m, const void *data, size_t n, tw_error *err)
{
    if (m->failure.status != TW_OK)
        return sticky(m, err);
    const uint8_t *p = data;
    size_t i = 0;
    while (i < n) {
        switch (m->st) {
        case ST_PREAMBLE:
        case ST_DATA: {
            size_t used;
            int found;
            tw_status s = scan(m, p + i, n - i, &used, &found, err);
            i += used;
            if (s != TW_OK)
                return s;
            if (found) {
                if (m->st == ST_DATA) {
                    tw_error e;
                    tw_error_clear(&e);
                    s = m->cb.part_end(m->cb.ctx, &e);
                    if (s != TW_OK)
                        return callback_failed(m, err, s, &e, "part_end");
                }
                m->st = ST_TAIL;
                m->pad = 0;
            }
            break;
        }
        case ST_TAIL:
            if (p[i] == '-' && m->pad == 0)
                m->st = ST_CLOSE;
            else if (p[i] == '\r')
                m->st = ST_LF;
            else if ((p[i] == ' ' || p[i] == '\t') && m->pad < TW_MULTIPART_MAX_PADDING)
                m->pad++;
            else if (p[i] == ' ' || p[i] == '\t')
                return fail(m, err, TW_ERR_INVALID, m->offset,
                            "multipart part %d: transport padding after the boundary over %d bytes", m->parts + 1,
                            TW_MULTIPART_MAX_PADDING);
            else
                return fail(m, err, TW_ERR_INVALID, m->offset,
                            "multipart part %d: the boundary is followed by byte 0x%02x, not CRLF or \"--\" "
                            "(no line may start with the boundary)",
                            m->parts + 1, p[i]);
            m->offset++;
            i++;
            break;
        case ST_CLOSE:
            if (p[i] != '-')
                return fail(m, err, TW_ERR_INVALID, m->offset,
                            "multipart part %d: the boundary is followed by '-' and byte 0x%02x, not CRLF or \"--\"",
                            m->parts + 1, p[i]);
            if (m->parts == 0)
                return fail(m, err, TW_ERR_INVALID, m->offset,
                            "multipart body closes before its first part (a form needs at least one)");
            m->st = ST_EPILOGUE;
            m->offset++;
            i++;
            break;
        case ST_LF:
            if (p[i] != '\n')
                return fail(m, err, TW_ERR_INVALID, m->offset,
                            "multipart part %d: the boundary line ends in CR without LF", m->parts + 1);
            m->offset++;
            i++;
            if (m->parts == TW_MULTIPART_MAX_PARTS)
                return fail(m, err, TW_ERR_TOO_LARGE, m->offset, "multipart part %d: more than %d parts",
                            m->parts + 1, TW_MULTIPART_MAX_PARTS);
            m->parts++;
            m->st = ST_HEADERS;
            m->hdr_len = 0;
            m->hdr_start = m->offset;
            break;
        case ST_HEADERS:
            TW_TRY(take_headers(m, p, n, &i, err));
            break;
        case ST_EPILOGUE:
            m->offset += n - i;
            i = n;
            break;
        }
    }
    return TW_OK;
}

tw_status tw_multipart_finish(tw_multipart *m, tw_error *err)
{
    if (m->failure.status != TW_OK)
        return sticky(m, err);
    switch (m->st) {
    case ST_EPILOGUE:
        return TW_OK;
    case ST_PREAMBLE:
        return fail(m, err, TW_ERR_TRUNCATED, m->offset,
                    "multipart body ended before its first delimiter (a \"--\" boundary line)");
    case ST_HEADERS:
        return fail(m, err, TW_ERR_TRUNCATED, m->offset, "multipart part %d: body ended inside the header block",
                    m->parts);
    case ST_DATA:
        return fail(m, err, TW_ERR_TRUNCATED, m->offset,
                    "multipart part %d: body ended inside the part's data, before the closing delimiter", m->parts);
    case ST_TAIL:
    case ST_LF:
    case ST_CLOSE:
        break;
    }
    return fail(m, err, TW_ERR_TRUNCATED, m->offset,
                "multipart part %d: body ended inside a delimiter line, before the closing delimiter", m->parts + 1);
}
