/* npy.c — .npy preamble, header dict and streaming example reader. See npy.h.
 *
 * There is no C library for .npy in Debian (cnpy loads whole arrays and evaluates nothing strictly), and
 * the format is a preamble plus a one-line Python dict, so the parser is ours: a cursor over the dict
 * text that accepts exactly the literals numpy's own header check accepts. */
#include "npy.h"

#include <stdlib.h>
#include <string.h>

#include "gzfile.h"

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

enum { MAX_DESCR = 32, PREAMBLE_V1 = 10, PREAMBLE_V2 = 12 };

static const struct {
    const char *descr;
    tw_npy_dtype dtype;
} DTYPES[] = {
    {"|u1", TW_NPY_UINT8}, {"<u1", TW_NPY_UINT8}, {"<i4", TW_NPY_INT32},
    {"<i8", TW_NPY_INT64}, {"<f4", TW_NPY_FLOAT32}, {"<f8", TW_NPY_FLOAT64},
};

struct tw_npy_reader {
    tw_gzfile *in;         /* owned */
    tw_npy_header h;
    tw_gzfile_items items; /* the data section: h.count examples of h.item_bytes */
};

const char *tw_npy_dtype_name(tw_npy_dtype d)
{
    switch (d) {
    case TW_NPY_UINT8: return "uint8";
    case TW_NPY_INT32: return "int32";
    case TW_NPY_INT64: return "int64";
    case TW_NPY_FLOAT32: return "float32";
    case TW_NPY_FLOAT64: return "float64";
    }
    return "?";
}

size_t tw_npy_dtype_size(tw_npy_dtype d)
{
    return d == TW_NPY_UINT8 ? 1 : (d == TW_NPY_INT32 || d == TW_NPY_FLOAT32) ? 4 : 8;
}

/* =============================== preamble =============================== */

tw_status tw_npy_parse_preamble(const uint8_t *p, size_t n, const char *name, tw_npy_header *h,
                                size_t *dict_len, tw_error *err)
{
    memset(h, 0, sizeof *h);
    if (memcmp(p, MAGIC, n < sizeof MAGIC ? n : sizeof MAGIC) != 0)
        return tw_error_set(err, TW_ERR_CORRUPT, name, 0,
                            "bad magic: not a .npy file (it must start with \\x93NUMPY)");
    if (n < PREAMBLE_V1)
        return tw_error_set(err, TW_ERR_TRUNCATED, name, (int64_t)n,
                            "the file ends inside the .npy preamble");
    if (p[6] != 1 && p[6] != 2)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, name, 6,
                            ".npy format version %d.%d is not supported (only 1.0 and 2.0)", p[6],
                            p[7]);
    if (p[6] == 2 && n < PREAMBLE_V2)
        return tw_error_set(err, TW_ERR_TRUNCATED, name, (int64_t)n,
                            "the file ends inside the .npy preamble");
    h->major = p[6];
    uint64_t len = (uint64_t)p[8] | (uint64_t)p[9] << 8;
    if (h->major == 2)
        len |= (uint64_t)p[10] << 16 | (uint64_t)p[11] << 24;
    if (len == 0 || len > TW_NPY_MAX_HEADER_BYTES)
        return tw_error_set(err, len ? TW_ERR_TOO_LARGE : TW_ERR_CORRUPT, name, 8,
                            "header length %llu is not in 1..%d", (unsigned long long)len,
                            TW_NPY_MAX_HEADER_BYTES);
    *dict_len = (size_t)len;
    h->header_bytes = (h->major == 1 ? PREAMBLE_V1 : PREAMBLE_V2) + len;
    return TW_OK;
}

/* ================================ dict ================================ */

typedef struct {
    const char *s;    /* the dict text [n], borrowed */
    size_t n, i;      /* length and read position */
    const char *name; /* file name, for errors */
    int64_t at;       /* file offset of s[0] */
    tw_error *err;
    size_t shape_at;  /* where the shape tuple starts: size errors point there */
} cursor;

static tw_status bad_at(cursor *c, size_t pos, tw_status s, const char *what)
{
    return tw_error_set(c->err, s, c->name, c->at + (int64_t)pos, "bad .npy header: %s", what);
}

static tw_status bad(cursor *c, tw_status s, const char *what) { return bad_at(c, c->i, s, what); }

static void skip_ws(cursor *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t'))
        c->i++;
}

/* Skips blanks, then consumes ch if it is next. */
static int eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == ch) {
        c->i++;
        return 1;
    }
    return 0;
}

static int peek_is(cursor *c, char ch)
{
    skip_ws(c);
    return c->i < c->n && c->s[c->i] == ch;
}

/* A Python string literal in '...' or "..." without escapes, at most cap-1 bytes. */
static tw_status parse_string(cursor *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->i == c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"'))
        return bad(c, TW_ERR_CORRUPT, "expected a quoted string");
    char q = c->s[c->i++];
    size_t len = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        char ch = c->s[c->i];
        if (ch == '\\' || ch == '\n' || len + 1 == cap)
            return bad(c, TW_ERR_CORRUPT, "string with an escape, a newline or too long");
        out[len++] = ch;
        c->i++;
    }
    if (c->i == c->n)
        return bad(c, TW_ERR_CORRUPT, "unterminated string");
    c->i++;
    out[len] = 0;
    return TW_OK;
}

static tw_status parse_descr(cursor *c, tw_npy_header *h)
{
    if (peek_is(c, '['))
        return bad(c, TW_ERR_UNSUPPORTED, "structured dtypes are not supported");
    char d[MAX_DESCR];
    size_t start = c->i;
    TW_TRY(parse_string(c, d, sizeof d));
    for (size_t k = 0; k < sizeof DTYPES / sizeof DTYPES[0]; k++)
        if (!strcmp(d, DTYPES[k].descr)) {
            h->dtype = DTYPES[k].dtype;
            return TW_OK;
        }
    c->i = start;
    skip_ws(c);
    return tw_error_set(c->err, TW_ERR_UNSUPPORTED, c->name, c->at + (int64_t)c->i,
                        "dtype '%s' is not supported (supported: |u1, <i4, <i8, <f4, <f8)", d);
}

static tw_status parse_fortran(cursor *c)
{
    skip_ws(c);
    const char *rest = c->s + c->i;
    size_t left = c->n - c->i;
    if (left >= 5 && !memcmp(rest, "False", 5)) {
        c->i += 5;
        return TW_OK;
    }
    if (left >= 4 && !memcmp(rest, "True", 4))
        return bad(c, TW_ERR_UNSUPPORTED, "fortran_order True (column-major) is not supported");
    return bad(c, TW_ERR_CORRUPT, "fortran_order must be True or False");
}

/* A non-negative Python int (an 'L' suffix from Python 2 is accepted), at most 2^62. */
static tw_status parse_dim(cursor *c, uint64_t *out)
{
    skip_ws(c);
    uint64_t v = 0;
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        uint64_t digit = (uint64_t)(c->s[c->i] - '0');
        if (v > ((1ull << 62) - digit) / 10)
            return bad(c, TW_ERR_TOO_LARGE, "a dimension is larger than 2^62");
        v = v * 10 + digit;
        c->i++;
    }
    if (c->i == start)
        return bad(c, TW_ERR_CORRUPT, "expected an integer in shape");
    if (c->i < c->n && c->s[c->i] == 'L')
        c->i++;
    *out = v;
    return TW_OK;
}

/* A Python tuple of ints: (), (3,), (3, 4) or (3, 4,). */
static tw_status parse_shape(cursor *c, tw_npy_header *h)
{
    skip_ws(c);
    c->shape_at = c->i;
    if (!eat(c, '('))
        return bad(c, TW_ERR_CORRUPT, "shape must be a tuple");
    h->rank = 0;
    int comma = 0;
    while (!eat(c, ')')) {
        if (h->rank == TW_NPY_MAX_RANK)
            return bad(c, TW_ERR_UNSUPPORTED, "more dimensions than Tower supports (16)");
        TW_TRY(parse_dim(c, &h->shape[h->rank++]));
        comma = eat(c, ',');
        if (!comma && !peek_is(c, ')'))
            return bad(c, TW_ERR_CORRUPT, "expected ',' or ')' in shape");
    }
    if (h->rank == 1 && !comma)
        return bad(c, TW_ERR_CORRUPT, "shape must be a tuple: a 1-tuple needs a trailing comma");
    return TW_OK;
}

static const char *const KEYS[] = {"descr", "fortran_order", "shape"};

static tw_status parse_value(cursor *c, int key, tw_npy_header *h)
{
    if (key == 0)
        return parse_descr(c, h);
    if (key == 1)
        return parse_fortran(c);
    return parse_shape(c, h);
}

/* One "'key': value" pair; seen[] marks the keys already read. */
static tw_status parse_entry(cursor *c, int seen[3], tw_npy_header *h)
{
    char key[32];
    size_t start = c->i;
    TW_TRY(parse_string(c, key, sizeof key));
    int k = 0;
    while (k < 3 && strcmp(key, KEYS[k]))
        k++;
    if (k == 3 || seen[k]) {
        c->i = start;
        skip_ws(c);
        return tw_error_set(c->err, TW_ERR_CORRUPT, c->name, c->at + (int64_t)c->i,
                            "bad .npy header: %s key '%s'", k == 3 ? "unknown" : "duplicate", key);
    }
    seen[k] = 1;
    if (!eat(c, ':'))
        return bad(c, TW_ERR_CORRUPT, "expected ':' after a key");
    return parse_value(c, k, h);
}

/* After '}': blanks, then exactly one '\n' that ends the header. */
static tw_status parse_tail(cursor *c)
{
    skip_ws(c);
    if (c->i + 1 != c->n || c->s[c->i] != '\n')
        return bad(c, TW_ERR_CORRUPT, "the dict must be followed only by spaces and a newline");
    return TW_OK;
}

/* Derives count, item_bytes and total_bytes from the shape, capping each product before the next. */
static tw_status derive_sizes(cursor *c, tw_npy_header *h)
{
    h->item_bytes = tw_npy_dtype_size(h->dtype);
    for (int i = 1; i < h->rank; i++) {
        if (h->shape[i] == 0)
            return bad_at(c, c->shape_at, TW_ERR_UNSUPPORTED, "a per-example dimension is 0");
        if (h->shape[i] > TW_NPY_MAX_ITEM_BYTES / h->item_bytes)
            return bad_at(c, c->shape_at, TW_ERR_TOO_LARGE, "one example is larger than 256 MiB");
        h->item_bytes *= h->shape[i];
    }
    h->count = h->rank ? h->shape[0] : 1;
    if (h->count > (UINT64_MAX - h->header_bytes) / h->item_bytes)
        return bad_at(c, c->shape_at, TW_ERR_TOO_LARGE, "the array is larger than 2^64 bytes");
    h->total_bytes = h->header_bytes + h->count * h->item_bytes;
    return TW_OK;
}

tw_status tw_npy_parse_dict(const char *text, size_t n, const char *name, int64_t at,
                            tw_npy_header *h, tw_error *err)
{
    cursor c = {text, n, 0, name, at, err, 0};
    int seen[3] = {0, 0, 0};
    if (!eat(&c, '{'))
        return bad(&c, TW_ERR_CORRUPT, "expected '{'");
    while (!eat(&c, '}')) {
        TW_TRY(parse_entry(&c, seen, h));
        if (!eat(&c, ',') && !peek_is(&c, '}'))
            return bad(&c, TW_ERR_CORRUPT, "expected ',' or '}'");
    }
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return tw_error_set(err, TW_ERR_CORRUPT, name, at, "bad .npy header: missing key '%s'",
                                KEYS[k]);
    TW_TRY(parse_tail(&c));
    return derive_sizes(&c, h);
}

/* =============================== reader =============================== */

static tw_status read_header(tw_npy_reader *r, tw_error *err)
{
    const char *name = tw_gzfile_name(r->in);
    uint8_t pre[PREAMBLE_V2];
    size_t got = 0, more = 0, dict_len = 0;
    TW_TRY(tw_gzfile_read(r->in, pre, PREAMBLE_V1, &got, err));
    if (got == PREAMBLE_V1 && pre[6] == 2)
        TW_TRY(tw_gzfile_read(r->in, pre + PREAMBLE_V1, PREAMBLE_V2 - PREAMBLE_V1, &more, err));
    TW_TRY(tw_npy_parse_preamble(pre, got + more, name, &r->h, &dict_len, err));
    char *dict = malloc(dict_len);
    if (!dict)
        return tw_error_set(err, TW_ERR_NOMEM, name, -1, "out of memory");
    int64_t at = (int64_t)(got + more);
    tw_status s = tw_gzfile_read(r->in, dict, dict_len, &got, err);
    if (s == TW_OK && got < dict_len)
        s = tw_error_set(err, TW_ERR_TRUNCATED, name, at + (int64_t)got,
                         "the file ends inside the .npy header");
    if (s == TW_OK)
        s = tw_npy_parse_dict(dict, dict_len, name, at, &r->h, err);
    free(dict);
    if (s == TW_OK && r->h.rank == 0)
        s = tw_error_set(err, TW_ERR_UNSUPPORTED, name, at,
                         "a 0-d array has no examples: the shape needs at least one dimension");
    TW_TRY(s);
    return tw_gzfile_items_init(&r->items, r->in, r->h.count, r->h.item_bytes, r->h.total_bytes, at,
                                err);
}

/* Opens src and reads the header. */
static tw_status reader_start(const tw_source *src, uint64_t max_bytes, tw_npy_reader **out, tw_error *err)
{
    *out = NULL;
    tw_npy_reader *r = calloc(1, sizeof *r);
    if (!r)
        return tw_error_set(err, TW_ERR_NOMEM, tw_source_name(src), -1, "out of memory");
    tw_status s = tw_gzfile_open_source(src, TW_COMPRESSION_AUTO, max_bytes, &r->in, err);
    if (s == TW_OK)
        s = read_header(r, err);
    if (s != TW_OK) {
        tw_npy_close(r);
        return s;
    }
    *out = r;
    return TW_OK;
}

tw_status tw_npy_open(const char *path, uint64_t max_bytes, tw_npy_reader **out, tw_error *err)
{
    const tw_source src = {.path = path};
    return reader_start(&src, max_bytes, out, err);
}

tw_status tw_npy_open_mem(const void *data, size_t n, const char *name, uint64_t max_bytes,
                          tw_npy_reader **out, tw_error *err)
{
    const tw_source src = {.data = data, .size = n, .name = name};
    return reader_start(&src, max_bytes, out, err);
}

const tw_npy_header *tw_npy_reader_header(const tw_npy_reader *r) { return &r->h; }

const char *tw_npy_reader_name(const tw_npy_reader *r) { return tw_gzfile_name(r->in); }

tw_status tw_npy_next(tw_npy_reader *r, const uint8_t **item, tw_error *err)
{
    return tw_gzfile_next_item(r->in, &r->items, item, err);
}

void tw_npy_close(tw_npy_reader *r)
{
    if (!r)
        return;
    tw_gzfile_close(r->in);
    tw_gzfile_items_cleanup(&r->items);
    free(r);
}
