/* safetensors.c — the safetensors layout, its header JSON, the writer and the validating reader. See
 * safetensors.h.
 *
 * Written by hand because Debian packages no C library for safetensors (the reference implementation is
 * Rust, with Python bindings). The format is a length, a JSON header and raw bytes; jansson parses and
 * prints the JSON, so what is ours is the layout and the validation rules, which follow the Rust reader.
 * Differences: duplicate keys are refused (serde keeps the last one), and a rank above TW_ST_MAX_RANK is
 * TW_ERR_UNSUPPORTED (Rust has no cap). */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "datafs.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian and is written and read as stored");

enum { LEN_BYTES = 8, F32_BYTES = 4 };

static const struct {
    const char *name;
    unsigned bits;
} DTYPES[] = {
    [TW_ST_BOOL] = {"BOOL", 8},               [TW_ST_U8] = {"U8", 8},
    [TW_ST_I8] = {"I8", 8},                   [TW_ST_I16] = {"I16", 16},
    [TW_ST_U16] = {"U16", 16},                [TW_ST_F16] = {"F16", 16},
    [TW_ST_BF16] = {"BF16", 16},              [TW_ST_I32] = {"I32", 32},
    [TW_ST_U32] = {"U32", 32},                [TW_ST_F32] = {"F32", 32},
    [TW_ST_C64] = {"C64", 64},                [TW_ST_F64] = {"F64", 64},
    [TW_ST_I64] = {"I64", 64},                [TW_ST_U64] = {"U64", 64},
    [TW_ST_F8_E5M2] = {"F8_E5M2", 8},         [TW_ST_F8_E4M3] = {"F8_E4M3", 8},
    [TW_ST_F8_E8M0] = {"F8_E8M0", 8},         [TW_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [TW_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8}, [TW_ST_F4] = {"F4", 4},
    [TW_ST_F6_E2M3] = {"F6_E2M3", 6},         [TW_ST_F6_E3M2] = {"F6_E3M2", 6},
};
enum { N_DTYPES = sizeof DTYPES / sizeof DTYPES[0] };

struct tw_safetensors {
    char *name;              /* owned: labels errors */
    uint8_t *alloc;          /* owned: holds the file bytes at `file` */
    const uint8_t *file;     /* [size]: the file, placed so that its data buffer is 8-aligned */
    uint64_t size;           /* file bytes */
    uint64_t header_len;     /* N */
    json_t *header;          /* owned; tensor names and metadata strings point into it */
    tw_st_info *tensors;     /* [n] owned, sorted by offset */
    size_t n;
    tw_st_meta *meta;        /* [n_meta] owned, header order */
    size_t n_meta;
};

const char *tw_st_dtype_name(tw_st_dtype d)
{
    return (unsigned)d < N_DTYPES ? DTYPES[d].name : "?";
}

unsigned tw_st_dtype_bits(tw_st_dtype d)
{
    return (unsigned)d < N_DTYPES ? DTYPES[d].bits : 0;
}

static int dtype_parse(const char *s, tw_st_dtype *d)
{
    for (unsigned i = 0; i < N_DTYPES; i++)
        if (!strcmp(s, DTYPES[i].name)) {
            *d = (tw_st_dtype)i;
            return 1;
        }
    return 0;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < LEN_BYTES; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = LEN_BYTES - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void tw_st_shape_text(const uint64_t *shape, int rank, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

/* =============================== writer =============================== */

static int tensor_by_name(const void *a, const void *b)
{
    return strcmp(((const tw_st_tensor *)a)->name, ((const tw_st_tensor *)b)->name);
}

static int meta_by_key(const void *a, const void *b)
{
    return strcmp(((const tw_st_meta *)a)->key, ((const tw_st_meta *)b)->key);
}

/* Checks one tensor to write (its name is not NULL); *nbytes gets its data size. */
static tw_status check_tensor(const tw_st_tensor *t, const char *path, uint64_t *nbytes,
                              tw_error *err)
{
    if (!strcmp(t->name, "__metadata__"))
        return tw_error_set(err, TW_ERR_INVALID, path, -1,
                            "'__metadata__' is reserved and cannot name a tensor");
    if (t->rank < 0 || t->rank > TW_ST_MAX_RANK)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "tensor '%s': rank %d is not in 0..%d",
                            t->name, t->rank, TW_ST_MAX_RANK);
    uint64_t count = 1;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(count, (uint64_t)t->shape[i], &count))
            return tw_error_set(err, TW_ERR_INVALID, path, -1,
                                "tensor '%s': dimension %d (%lld) is negative or too large", t->name,
                                i, (long long)t->shape[i]);
    if (count > (uint64_t)INT64_MAX / F32_BYTES)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "tensor '%s' is too large", t->name);
    if (count && !t->data)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "tensor '%s' has no data", t->name);
    *nbytes = count * F32_BYTES;
    return TW_OK;
}

/* A sorted copy of the n items of `size` bytes at base (caller frees *out); *dup is the index of the
 * first item that compares equal to the one before it, or SIZE_MAX. */
static tw_status sorted_copy(const void *base, size_t n, size_t size,
                             int (*cmp)(const void *, const void *), void **out, size_t *dup,
                             tw_error *err)
{
    char *copy = malloc(n ? n * size : 1);
    if (!copy)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (n)
        memcpy(copy, base, n * size);
    qsort(copy, n, size, cmp);
    *dup = SIZE_MAX;
    for (size_t i = 1; i < n && *dup == SIZE_MAX; i++)
        if (cmp(copy + (i - 1) * size, copy + i * size) == 0)
            *dup = i;
    *out = copy;
    return TW_OK;
}

static json_t *shape_json(const tw_st_tensor *t)
{
    json_t *a = json_array();
    for (int i = 0; a && i < t->rank; i++)
        json_array_append_new(a, json_integer(t->shape[i]));
    return a;
}

/* The header object: `__metadata__` first, then the tensors with their offsets, in the given order. */
static tw_status header_json(const tw_st_tensor *t, const uint64_t *nbytes, size_t n,
                             const tw_st_meta *meta, size_t n_meta, const char *path, json_t **out,
                             tw_error *err)
{
    json_t *root = json_object(), *m = n_meta ? json_object() : NULL;
    int bad = !root || (n_meta && json_object_set_new(root, "__metadata__", m));
    for (size_t i = 0; !bad && i < n_meta; i++)
        bad = json_object_set_new(m, meta[i].key, json_string(meta[i].value));
    if (bad) {
        json_decref(root);
        return tw_error_set(err, TW_ERR_INVALID, path, -1,
                            "a metadata key or value is not valid UTF-8");
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", DTYPES[TW_ST_F32].name, "shape",
                              shape_json(&t[i]), "data_offsets", (json_int_t)at,
                              (json_int_t)(at + nbytes[i]));
        if (!e || json_object_set_new(root, t[i].name, e)) {
            json_decref(root);
            return tw_error_set(err, TW_ERR_INVALID, path, -1,
                                "tensor name '%s' is not valid UTF-8", t[i].name);
        }
        at += nbytes[i];
    }
    *out = root;
    return TW_OK;
}

/* The 8-byte length and the header text padded with spaces to a multiple of 8: caller frees *out. */
static tw_status header_bytes(const json_t *root, const char *path, char **out, size_t *len,
                              tw_error *err)
{
    char *text = json_dumps(root, JSON_COMPACT);
    size_t n = text ? strlen(text) : 0, padded = (n + 7) / 8 * 8;
    char *buf = text ? malloc(LEN_BYTES + padded) : NULL;
    if (!buf) {
        free(text);
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    }
    put_le64((uint8_t *)buf, padded);
    memcpy(buf + LEN_BYTES, text, n);
    memset(buf + LEN_BYTES + n, ' ', padded - n);
    free(text);
    *out = buf;
    *len = LEN_BYTES + padded;
    return TW_OK;
}

/* Writes one tensor's bytes. finite_only: in chunks that are checked just before they are written, so
 * the check and the write are one pass over memory (a chunk is still in cache when write() copies it);
 * a NaN or Inf stops the write with TW_ERR_INVALID, errno_value EDOM, naming the tensor and element. */
static tw_status write_tensor(int fd, const tw_st_tensor *t, uint64_t nbytes, int finite_only,
                              const char *path, tw_error *err)
{
    enum { CHUNK = 1 << 16 }; /* floats: 256 KiB */
    if (!finite_only)
        return tw_write_all(fd, t->data, nbytes, path, err);
    uint64_t count = nbytes / sizeof(float);
    for (uint64_t at = 0; at < count; at += CHUNK) {
        uint64_t m = count - at < CHUNK ? count - at : CHUNK;
        for (uint64_t k = 0; k < m; k++) {
            float v = t->data[at + k];
            if (isfinite(v))
                continue;
            tw_status s = tw_error_set(err, TW_ERR_INVALID, path, -1,
                                       "tensor '%s' element %llu is %s: a checkpoint holds no non-finite "
                                       "value, so it was not written", t->name, (unsigned long long)(at + k),
                                       isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
            if (err)
                err->errno_value = EDOM;
            return s;
        }
        TW_TRY(tw_write_all(fd, t->data + at, m * sizeof(float), path, err));
    }
    return TW_OK;
}

static tw_status write_file(const char *path, const char *head, size_t head_len, const tw_st_tensor *t,
                            const uint64_t *nbytes, size_t n, int finite_only, tw_error *err)
{
    tw_atomic_file *f;
    TW_TRY(tw_atomic_file_create(path, &f, err));
    int fd = tw_atomic_file_fd(f);
    tw_status s = tw_write_all(fd, head, head_len, path, err);
    for (size_t i = 0; s == TW_OK && i < n; i++)
        s = write_tensor(fd, &t[i], nbytes[i], finite_only, path, err);
    if (s == TW_OK)
        s = tw_atomic_file_commit(f, err);
    tw_atomic_file_destroy(f);
    return s;
}

/* The writer's inputs, checked and sorted by name; release with prepared_free. */
typedef struct {
    tw_st_tensor *t;      /* [n] sorted copy */
    uint64_t *nbytes;     /* [n] data bytes of t[i] */
    tw_st_meta *meta;     /* [n_meta] sorted copy */
} prepared;

static void prepared_free(prepared *p)
{
    free(p->t);
    free(p->nbytes);
    free(p->meta);
}

static tw_status prepare(const char *path, const tw_st_tensor *tensors, size_t n,
                         const tw_st_meta *meta, size_t n_meta, prepared *p, tw_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (!tensors[i].name)
            return tw_error_set(err, TW_ERR_INVALID, path, -1, "tensor %zu has a NULL name", i);
    for (size_t i = 0; i < n_meta; i++)
        if (!meta[i].key || !meta[i].value)
            return tw_error_set(err, TW_ERR_INVALID, path, -1,
                                "metadata entry %zu has a NULL key or value", i);
    size_t dup = SIZE_MAX;
    void *copy = NULL;
    TW_TRY(sorted_copy(tensors, n, sizeof *tensors, tensor_by_name, &copy, &dup, err));
    p->t = copy;
    if (dup != SIZE_MAX)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "duplicate tensor name '%s'",
                            p->t[dup].name);
    TW_TRY(sorted_copy(meta, n_meta, sizeof *meta, meta_by_key, &copy, &dup, err));
    p->meta = copy;
    if (dup != SIZE_MAX)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "duplicate metadata key '%s'",
                            p->meta[dup].key);
    if (!(p->nbytes = malloc((n ? n : 1) * sizeof *p->nbytes)))
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    for (size_t i = 0; i < n; i++)
        TW_TRY(check_tensor(&p->t[i], path, &p->nbytes[i], err));
    return TW_OK;
}

static tw_status write_safetensors(const char *path, const tw_st_tensor *tensors, size_t n,
                                   const tw_st_meta *meta, size_t n_meta, int finite_only, tw_error *err)
{
    prepared p = {0};
    json_t *root = NULL;
    char *head = NULL;
    size_t head_len = 0;
    tw_status s = prepare(path, tensors, n, meta, n_meta, &p, err);
    if (s == TW_OK)
        s = header_json(p.t, p.nbytes, n, p.meta, n_meta, path, &root, err);
    if (s == TW_OK)
        s = header_bytes(root, path, &head, &head_len, err);
    if (s == TW_OK)
        s = write_file(path, head, head_len, p.t, p.nbytes, n, finite_only, err);
    free(head);
    json_decref(root);
    prepared_free(&p);
    return s;
}

tw_status tw_safetensors_write(const char *path, const tw_st_tensor *tensors, size_t n,
                               const tw_st_meta *meta, size_t n_meta, tw_error *err)
{
    return write_safetensors(path, tensors, n, meta, n_meta, 0, err);
}

tw_status tw_safetensors_write_finite(const char *path, const tw_st_tensor *tensors, size_t n,
                                      const tw_st_meta *meta, size_t n_meta, tw_error *err)
{
    return write_safetensors(path, tensors, n, meta, n_meta, 1, err);
}

/* =============================== reader =============================== */

/* Fills err with `status` (TW_ERR_CORRUPT mostly) about st's file at byte `at`. */
static tw_status fail(const tw_safetensors *st, tw_status status, int64_t at, tw_error *err,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static tw_status fail(const tw_safetensors *st, tw_status status, int64_t at, tw_error *err,
                      const char *fmt, ...)
{
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tw_error_set(err, status, st->name, at, "%s", msg);
}

/* A file offset for error reports: 8 + N + a data-relative position, saturated. */
static int64_t data_at(const tw_safetensors *st, uint64_t rel)
{
    uint64_t base = LEN_BYTES + st->header_len;
    return rel > (uint64_t)INT64_MAX - base ? INT64_MAX : (int64_t)(base + rel);
}

/* The file offset of the k-th top-level key of the (valid JSON) header; jansson keeps keys in
 * insertion order, so k is the entry's position in json_object_foreach. Used on error paths only. */
static int64_t key_offset(const tw_safetensors *st, size_t k)
{
    const char *p = (const char *)st->file + LEN_BYTES;
    int depth = 0, in_string = 0;
    char prev = 0;
    for (uint64_t i = 0; i < st->header_len; i++) {
        char c = p[i];
        if (in_string) {
            i += c == '\\';
            in_string = c != '"';
            continue;
        }
        if (c == '"' && depth == 1 && (prev == '{' || prev == ',') && k-- == 0)
            return (int64_t)(LEN_BYTES + i);
        in_string = c == '"';
        depth += (c == '{' || c == '[') - (c == '}' || c == ']');
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            prev = c;
    }
    return LEN_BYTES;
}

/* Fails about header entry k (tensor `name`) at the entry's key. */
static tw_status entry_fail(const tw_safetensors *st, tw_status status, size_t k, const char *name,
                            tw_error *err, const char *what)
{
    return fail(st, status, key_offset(st, k), err, "tensor '%s': %s", name, what);
}

/* A JSON integer >= 0. */
static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static tw_status parse_shape(const tw_safetensors *st, size_t k, const char *name,
                             const json_t *shape, tw_st_info *t, tw_error *err)
{
    if (!json_is_array(shape))
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err,
                          "\"shape\" is missing or not an array");
    if (json_array_size(shape) > TW_ST_MAX_RANK)
        return entry_fail(st, TW_ERR_UNSUPPORTED, k, name, err,
                          "rank above the supported maximum of 16");
    t->rank = (int)json_array_size(shape);
    t->count = 1;
    for (int i = 0; i < t->rank; i++) {
        if (!get_u64(json_array_get(shape, (size_t)i), &t->shape[i]))
            return entry_fail(st, TW_ERR_CORRUPT, k, name, err,
                              "\"shape\" holds something other than an integer >= 0");
        if (__builtin_mul_overflow(t->count, t->shape[i], &t->count))
            return entry_fail(st, TW_ERR_CORRUPT, k, name, err, "the shape overflows 64 bits");
    }
    return TW_OK;
}

/* Checks that [begin, end) holds exactly prod(shape) elements of the dtype. */
static tw_status check_size(const tw_safetensors *st, size_t k, const char *name, uint64_t begin,
                            uint64_t end, const tw_st_info *t, tw_error *err)
{
    uint64_t bits;
    char shape[256], msg[400];
    tw_st_shape_text(t->shape, t->rank, shape, sizeof shape);
    if (__builtin_mul_overflow(t->count, (uint64_t)tw_st_dtype_bits(t->dtype), &bits))
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err, "the shape overflows 64 bits");
    if (bits % 8) {
        snprintf(msg, sizeof msg, "%s %s does not fill a whole number of bytes",
                 tw_st_dtype_name(t->dtype), shape);
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err, msg);
    }
    if (end - begin != bits / 8) {
        snprintf(msg, sizeof msg, "data_offsets [%llu, %llu] hold %llu bytes but %s %s needs %llu",
                 (unsigned long long)begin, (unsigned long long)end,
                 (unsigned long long)(end - begin), tw_st_dtype_name(t->dtype), shape,
                 (unsigned long long)(bits / 8));
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err, msg);
    }
    return TW_OK;
}

static tw_status parse_offsets(const tw_safetensors *st, size_t k, const char *name,
                               const json_t *offs, tw_st_info *t, tw_error *err)
{
    uint64_t begin, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !get_u64(json_array_get(offs, 0), &begin) || !get_u64(json_array_get(offs, 1), &end) ||
        end < begin)
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err,
                          "\"data_offsets\" is not [BEGIN, END] with 0 <= BEGIN <= END");
    TW_TRY(check_size(st, k, name, begin, end, t, err));
    t->offset = LEN_BYTES + st->header_len + begin; /* begin <= INT64_MAX: no overflow */
    t->nbytes = end - begin;
    return TW_OK;
}

/* Entry k of the header, a tensor called name: {dtype, shape, data_offsets} (other keys are ignored, as
 * the Rust reader ignores them). */
static tw_status parse_entry(const tw_safetensors *st, size_t k, const char *name,
                             const json_t *entry, tw_st_info *t, tw_error *err)
{
    if (!json_is_object(entry))
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err, "the entry is not a JSON object");
    const json_t *dtype = json_object_get(entry, "dtype");
    if (!json_is_string(dtype))
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err, "\"dtype\" is missing or not a string");
    if (!dtype_parse(json_string_value(dtype), &t->dtype)) {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown dtype '%.200s'", json_string_value(dtype));
        return entry_fail(st, TW_ERR_CORRUPT, k, name, err, msg);
    }
    t->name = name;
    TW_TRY(parse_shape(st, k, name, json_object_get(entry, "shape"), t, err));
    return parse_offsets(st, k, name, json_object_get(entry, "data_offsets"), t, err);
}

/* Entry k: `__metadata__`, a map of strings (or null, as the Rust reader allows). */
static tw_status parse_meta(tw_safetensors *st, size_t k, const json_t *m, tw_error *err)
{
    if (json_is_null(m))
        return TW_OK;
    if (!json_is_object(m))
        return fail(st, TW_ERR_CORRUPT, key_offset(st, k), err,
                    "__metadata__ is not an object of strings");
    st->meta = calloc(json_object_size(m) + 1, sizeof *st->meta);
    if (!st->meta)
        return fail(st, TW_ERR_NOMEM, -1, err, "out of memory");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)m, key, v) {
        if (!json_is_string(v))
            return fail(st, TW_ERR_CORRUPT, key_offset(st, k), err,
                        "__metadata__ value of '%.200s' is not a string", key);
        st->meta[st->n_meta].key = key;
        st->meta[st->n_meta++].value = json_string_value(v);
    }
    return TW_OK;
}

static tw_status parse_header(tw_safetensors *st, tw_error *err)
{
    json_error_t je;
    st->header = json_loadb((const char *)st->file + LEN_BYTES, st->header_len,
                            JSON_REJECT_DUPLICATES, &je);
    if (!st->header)
        return fail(st, TW_ERR_CORRUPT, LEN_BYTES + je.position, err,
                    "the header is not valid JSON: %s", je.text);
    if (!json_is_object(st->header))
        return fail(st, TW_ERR_CORRUPT, LEN_BYTES, err, "the header is a JSON array, not an object");
    st->tensors = calloc(json_object_size(st->header) + 1, sizeof *st->tensors);
    if (!st->tensors)
        return fail(st, TW_ERR_NOMEM, -1, err, "out of memory");
    const char *key;
    const json_t *v;
    size_t k = 0;
    json_object_foreach(st->header, key, v) {
        if (!strcmp(key, "__metadata__"))
            TW_TRY(parse_meta(st, k, v, err));
        else
            TW_TRY(parse_entry(st, k, key, v, &st->tensors[st->n++], err));
        k++;
    }
    return TW_OK;
}

static int by_offset(const void *a, const void *b)
{
    const tw_st_info *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors sorted by offsets must tile [0, last end) and 8 + N + last end must be the file size. */
static tw_status check_layout(tw_safetensors *st, tw_error *err)
{
    qsort(st->tensors, st->n, sizeof *st->tensors, by_offset);
    uint64_t base = LEN_BYTES + st->header_len, end = 0;
    for (size_t i = 0; i < st->n; i++) {
        const tw_st_info *t = &st->tensors[i];
        uint64_t begin = t->offset - base;
        if (begin > end)
            return fail(st, TW_ERR_CORRUPT, data_at(st, end), err,
                        "tensor '%s' starts at data byte %llu, leaving a gap of %llu bytes after "
                        "data byte %llu", t->name, (unsigned long long)begin,
                        (unsigned long long)(begin - end), (unsigned long long)end);
        if (begin < end)
            return fail(st, TW_ERR_CORRUPT, data_at(st, begin), err,
                        "tensor '%s' at data bytes [%llu, %llu) overlaps tensor '%s', which ends "
                        "at data byte %llu", t->name, (unsigned long long)begin,
                        (unsigned long long)(begin + t->nbytes), st->tensors[i - 1].name,
                        (unsigned long long)end);
        end = begin + t->nbytes;
    }
    for (size_t i = 0; base + end > st->size && i < st->n; i++)
        if (st->tensors[i].offset + st->tensors[i].nbytes > st->size)
            return fail(st, TW_ERR_CORRUPT, (int64_t)st->size, err,
                        "tensor '%s' ends at byte %llu but the file has only %llu bytes "
                        "(truncated)", st->tensors[i].name,
                        (unsigned long long)(st->tensors[i].offset + st->tensors[i].nbytes),
                        (unsigned long long)st->size);
    if (base + end < st->size)
        return fail(st, TW_ERR_CORRUPT, data_at(st, end), err,
                    "%llu trailing bytes after the data, which ends at byte %llu",
                    (unsigned long long)(st->size - base - end), (unsigned long long)(base + end));
    for (size_t i = 0; i < st->n; i++)
        st->tensors[i].data = st->file + st->tensors[i].offset;
    return TW_OK;
}

/* Checks the 8-byte length of a file of `size` bytes whose first min(size, 8) bytes are at p. */
static tw_status check_length(const uint8_t *p, uint64_t size, const char *name, uint64_t *n,
                              tw_error *err)
{
    if (size < LEN_BYTES)
        return tw_error_set(err, TW_ERR_CORRUPT, name, (int64_t)size,
                            "the file has %llu bytes, fewer than the 8-byte header length",
                            (unsigned long long)size);
    *n = get_le64(p);
    if (*n > TW_ST_MAX_HEADER_BYTES)
        return tw_error_set(err, TW_ERR_CORRUPT, name, 0,
                            "header length %llu is above the cap of %d bytes",
                            (unsigned long long)*n, TW_ST_MAX_HEADER_BYTES);
    if (*n > size - LEN_BYTES)
        return tw_error_set(err, TW_ERR_CORRUPT, name, 0,
                            "header length %llu runs past the end of the file (%llu bytes)",
                            (unsigned long long)*n, (unsigned long long)size);
    return TW_OK;
}

/* A buffer for a file of size bytes with header length n: *file is where to put the file so that its
 * data buffer (at 8 + n) is 8-aligned. Caller frees the return value. */
static uint8_t *aligned_buffer(uint64_t size, uint64_t n, uint8_t **file)
{
    uint8_t *alloc = size <= SIZE_MAX - 8 ? malloc((size_t)size + 8) : NULL;
    if (alloc)
        *file = alloc + (8 - (uintptr_t)(alloc + LEN_BYTES + n) % 8) % 8;
    return alloc;
}

/* Validates the file held at file[0..size) inside alloc (ownership of alloc passes to *out or is
 * released). */
static tw_status parse_owned(uint8_t *alloc, const uint8_t *file, uint64_t size, uint64_t n,
                             const char *name, tw_safetensors **out, tw_error *err)
{
    tw_safetensors *st = calloc(1, sizeof *st);
    char *copy = strdup(name);
    if (!st || !copy) {
        free(st);
        free(copy);
        free(alloc);
        return tw_error_set(err, TW_ERR_NOMEM, name, -1, "out of memory");
    }
    *st = (tw_safetensors){.name = copy, .alloc = alloc, .file = file, .size = size, .header_len = n};
    tw_status s = parse_header(st, err);
    if (s == TW_OK)
        s = check_layout(st, err);
    if (s != TW_OK) {
        tw_safetensors_free(st);
        return s;
    }
    *out = st;
    return TW_OK;
}

tw_status tw_safetensors_parse(const void *data, size_t size, const char *name,
                               tw_safetensors **out, tw_error *err)
{
    *out = NULL;
    uint64_t n = 0;
    uint8_t *file;
    TW_TRY(check_length(data, size, name, &n, err));
    uint8_t *alloc = aligned_buffer(size, n, &file);
    if (!alloc)
        return tw_error_set(err, TW_ERR_NOMEM, name, -1, "out of memory");
    memcpy(file, data, size);
    return parse_owned(alloc, file, size, n, name, out, err);
}

/* Reads n bytes at offset; a short read (the file shrank meanwhile) is an error. */
static tw_status pread_all(int fd, uint8_t *buf, size_t n, off_t offset, const char *path,
                           tw_error *err)
{
    while (n > 0) {
        ssize_t r = pread(fd, buf, n, offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return tw_error_errno(err, path, "read failed");
        if (r == 0)
            return tw_error_set(err, TW_ERR_IO, path, (int64_t)offset,
                                "the file became shorter while it was read");
        buf += r;
        n -= (size_t)r;
        offset += r;
    }
    return TW_OK;
}

static tw_status read_fd(int fd, const char *path, tw_safetensors **out, tw_error *err)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return tw_error_errno(err, path, "cannot stat");
    if (!S_ISREG(sb.st_mode))
        return tw_error_set(err, TW_ERR_IO, path, -1, "not a regular file");
    uint64_t size = (uint64_t)sb.st_size, n = 0;
    uint8_t head[LEN_BYTES], *file;
    TW_TRY(pread_all(fd, head, size < LEN_BYTES ? (size_t)size : LEN_BYTES, 0, path, err));
    TW_TRY(check_length(head, size, path, &n, err));
    uint8_t *alloc = aligned_buffer(size, n, &file);
    if (!alloc)
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory for %llu bytes",
                            (unsigned long long)size);
    tw_status s = pread_all(fd, file, (size_t)size, 0, path, err);
    if (s != TW_OK) {
        free(alloc);
        return s;
    }
    return parse_owned(alloc, file, size, n, path, out, err);
}

tw_status tw_safetensors_read(const char *path, tw_safetensors **out, tw_error *err)
{
    *out = NULL;
    int fd = tw_fs_open(path, O_RDONLY, 0);
    if (fd < 0)
        return tw_fs_error(err, path, "cannot open");
    tw_status s = read_fd(fd, path, out, err);
    close(fd);
    return s;
}

void tw_safetensors_free(tw_safetensors *st)
{
    if (!st)
        return;
    free(st->meta);
    free(st->tensors);
    json_decref(st->header);
    free(st->alloc);
    free(st->name);
    free(st);
}

const char *tw_safetensors_name(const tw_safetensors *st) { return st->name; }

uint64_t tw_safetensors_header_bytes(const tw_safetensors *st) { return st->header_len; }

size_t tw_safetensors_count(const tw_safetensors *st) { return st->n; }

const tw_st_info *tw_safetensors_at(const tw_safetensors *st, size_t i) { return &st->tensors[i]; }

const tw_st_info *tw_safetensors_find(const tw_safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (!strcmp(st->tensors[i].name, name))
            return &st->tensors[i];
    return NULL;
}

size_t tw_safetensors_meta_count(const tw_safetensors *st) { return st->n_meta; }

const tw_st_meta *tw_safetensors_meta_at(const tw_safetensors *st, size_t i) { return &st->meta[i]; }

const char *tw_safetensors_meta(const tw_safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, key))
            return st->meta[i].value;
    return NULL;
}
