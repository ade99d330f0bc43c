/* tf_bundle.c — TensorFlow checkpoint V2 writer. See tf_bundle.h.
 *
 * The .index file is an SSTable in the format of tensorflow/tsl/lib/io (table_builder.cc, block_builder.cc,
 * format.cc), written here by hand: no library in Debian writes that table format (libleveldb writes a
 * database folder, not one table file, uses its own comparator name and footer handling through its DB
 * layer, and would be a runtime dependency for ~150 lines), and TensorFlow's own writer is C++ inside
 * TensorFlow. What this writer emits, and why it is enough for TensorFlow's reader:
 *   - one data block holding every entry (the reader takes blocks of any size; 256 KiB is only the
 *     builder's target, and Tower's tables are a few KiB), keys prefix-compressed against the previous key
 *     with a restart point every 16 entries, then the restart offsets and their count (uint32 LE each);
 *   - every block followed by its trailer: type byte 0 (no compression) and the masked CRC32C of the block
 *     bytes plus that type byte;
 *   - an empty metaindex block (no filter), an index block (restart interval 1) with one entry: the last
 *     key of the data block (a valid separator: >= every key of the block) and the data block's handle
 *     (varint64 offset, varint64 size without the trailer);
 *   - the footer: the metaindex and index handles, zero-padded to 40 bytes, then the magic
 *     0xdb4775248b80fb57 as two uint32 LE, low word first: 48 bytes. */
#include "tf_bundle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "crc32c.h"
#include "tensor_bundle.pb-c.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the bundle is written in host byte order");

enum { RESTART_INTERVAL = 16, FOOTER_HANDLES = 40, TRAILER = 5 };
static const uint64_t TABLE_MAGIC = 0xdb4775248b80fb57ull;

/* ---- a growable byte buffer; a failed allocation sticks (checked once at the end) ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const void *data, size_t n)
{
    if (b->failed || n == 0)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }

static void put_varint(buf *b, uint64_t v)
{
    uint8_t out[10];
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        out[n++] = (uint8_t)(v | 0x80);
    out[n++] = (uint8_t)v;
    put(b, out, n);
}

/* ---- blocks ---- */

typedef struct {
    buf b;
    uint32_t restarts[1 + 4096]; /* a block here holds at most TW_BUNDLE_MAX_ENTRIES / interval + 1 */
    size_t n_restarts, since_restart, interval;
    const char *last;            /* the previous key (borrowed) */
} block;

static void block_start(block *k, size_t interval)
{
    memset(&k->b, 0, sizeof k->b);
    k->restarts[0] = 0;
    k->n_restarts = 1;
    k->since_restart = 0;
    k->interval = interval;
    k->last = "";
}

/* Appends key (after the previous one, bytewise) with its value: shared, non-shared and value lengths as
 * varint32, the key's new suffix, the value. */
static void block_add(block *k, const char *key, const void *value, size_t value_len)
{
    size_t shared = 0, len = strlen(key);
    if (k->since_restart == k->interval) {
        k->restarts[k->n_restarts++] = (uint32_t)k->b.n;
        k->since_restart = 0;
    } else {
        while (k->last[shared] && k->last[shared] == key[shared])
            shared++;
    }
    put_varint(&k->b, shared);
    put_varint(&k->b, len - shared);
    put_varint(&k->b, value_len);
    put(&k->b, key + shared, len - shared);
    put(&k->b, value, value_len);
    k->last = key;
    k->since_restart++;
}

/* Ends the block (restart array and count), appends it and its trailer to file; *handle_offset and
 * *handle_size receive its handle. Frees the block's buffer. */
static void block_finish(block *k, buf *file, uint64_t *handle_offset, uint64_t *handle_size)
{
    for (size_t i = 0; i < k->n_restarts; i++)
        put_u32(&k->b, k->restarts[i]);
    put_u32(&k->b, (uint32_t)k->n_restarts);
    *handle_offset = file->n;
    *handle_size = k->b.n;
    const uint8_t type = 0; /* no compression */
    uint32_t crc = tw_crc32c_extend(tw_crc32c(k->b.p, k->b.n), &type, 1);
    put(file, k->b.p, k->b.n);
    put(file, &type, 1);
    put_u32(file, tw_crc32c_mask(crc));
    file->failed |= k->b.failed;
    free(k->b.p);
}

/* ---- the bundle ---- */

static size_t dtype_size(tw_bundle_dtype d)
{
    switch (d) {
    case TW_BUNDLE_FLOAT: return 4;
    case TW_BUNDLE_INT32: return 4;
    case TW_BUNDLE_INT64: return 8;
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const tw_bundle_tensor *const *)a)->name, (*(const tw_bundle_tensor *const *)b)->name);
}

/* Checks one tensor; its byte count into *bytes. */
static tw_status check_tensor(const tw_bundle_tensor *t, size_t *bytes, tw_error *err)
{
    if (!t->name || !*t->name)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "a bundle tensor has no name");
    if (!dtype_size(t->dtype))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tensor '%s': dtype %d is not float32, int32 or int64",
                            t->name, (int)t->dtype);
    if (t->rank < 0 || t->rank > TW_BUNDLE_MAX_RANK)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tensor '%s': rank %d is outside [0, %d]", t->name,
                            t->rank, TW_BUNDLE_MAX_RANK);
    uint64_t count = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] < 0 || t->shape[d] > (int64_t)1 << 40 || (count *= (uint64_t)t->shape[d]) > (1ull << 40))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tensor '%s': dimension %d is out of range",
                                t->name, d);
    }
    if (count && !t->data)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tensor '%s' has values but no data", t->name);
    *bytes = (size_t)count * dtype_size(t->dtype);
    return TW_OK;
}

/* The packed BundleEntryProto of t at offset in the data file, into *value (caller frees). */
static tw_status entry_value(const tw_bundle_tensor *t, uint64_t offset, size_t bytes, uint8_t **value,
                             size_t *len, tw_error *err)
{
    Twpb__TensorShapeProto__Dim dims[TW_BUNDLE_MAX_RANK], *dimp[TW_BUNDLE_MAX_RANK];
    Twpb__TensorShapeProto shape = TWPB__TENSOR_SHAPE_PROTO__INIT;
    for (int d = 0; d < t->rank; d++) {
        twpb__tensor_shape_proto__dim__init(&dims[d]);
        dims[d].size = t->shape[d];
        dimp[d] = &dims[d];
    }
    shape.n_dim = (size_t)t->rank;
    shape.dim = dimp;
    Twpb__BundleEntryProto e = TWPB__BUNDLE_ENTRY_PROTO__INIT;
    e.dtype = (Twpb__DataType)t->dtype;
    e.shape = &shape;
    e.offset = (int64_t)offset;
    e.size = (int64_t)bytes;
    e.crc32c = tw_crc32c_mask(tw_crc32c(t->data, bytes));
    *len = twpb__bundle_entry_proto__get_packed_size(&e);
    if (!(*value = malloc(*len ? *len : 1)))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    twpb__bundle_entry_proto__pack(&e, *value);
    return TW_OK;
}

/* The header under key "": one shard, little-endian, producer kTensorBundleVersion (1). */
static void add_header(block *k)
{
    Twpb__VersionDef v = TWPB__VERSION_DEF__INIT;
    v.producer = 1;
    Twpb__BundleHeaderProto h = TWPB__BUNDLE_HEADER_PROTO__INIT;
    h.num_shards = 1;
    h.endianness = TWPB__BUNDLE_HEADER_PROTO__ENDIANNESS__LITTLE;
    h.version = &v;
    uint8_t packed[32];
    size_t len = twpb__bundle_header_proto__pack(&h, packed);
    block_add(k, "", packed, len);
}

/* The data block: the header, then each tensor's entry, sorted; the data shard grows alongside. */
static tw_status fill(block *k, const tw_bundle_tensor *const *sorted, size_t n, buf *data, tw_error *err)
{
    add_header(k);
    for (size_t i = 0; i < n; i++) {
        size_t bytes = 0, len = 0;
        uint8_t *value = NULL;
        TW_TRY(check_tensor(sorted[i], &bytes, err));
        if (i && !strcmp(sorted[i - 1]->name, sorted[i]->name))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tensor '%s' is named twice", sorted[i]->name);
        TW_TRY(entry_value(sorted[i], data->n, bytes, &value, &len, err));
        block_add(k, sorted[i]->name, value, len);
        free(value);
        put(data, sorted[i]->data, bytes);
    }
    return TW_OK;
}

/* The metaindex and index blocks and the footer after the data block at (off, size). */
static void finish_table(buf *file, const char *last_key, uint64_t off, uint64_t size)
{
    block meta, index;
    uint64_t meta_off, meta_size, index_off, index_size;
    block_start(&meta, RESTART_INTERVAL);
    block_finish(&meta, file, &meta_off, &meta_size);
    buf handle = {0};
    put_varint(&handle, off);
    put_varint(&handle, size);
    block_start(&index, 1);
    block_add(&index, last_key, handle.p, handle.n);
    index.b.failed |= handle.failed;
    free(handle.p);
    block_finish(&index, file, &index_off, &index_size);
    buf footer = {0};
    put_varint(&footer, meta_off);
    put_varint(&footer, meta_size);
    put_varint(&footer, index_off);
    put_varint(&footer, index_size);
    static const uint8_t zeros[FOOTER_HANDLES];
    put(&footer, zeros, FOOTER_HANDLES - footer.n);
    put_u32(&footer, (uint32_t)TABLE_MAGIC);
    put_u32(&footer, (uint32_t)(TABLE_MAGIC >> 32));
    put(file, footer.p, footer.n);
    file->failed |= footer.failed;
    free(footer.p);
}

tw_status tw_bundle_build(const tw_bundle_tensor *t, size_t n, tw_bundle_bytes *out, tw_error *err)
{
    memset(out, 0, sizeof *out);
    if (n > 4096 * RESTART_INTERVAL - 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "a bundle holds at most %d tensors",
                            4096 * RESTART_INTERVAL - 1);
    const tw_bundle_tensor **sorted = malloc((n ? n : 1) * sizeof *sorted);
    block *k = malloc(sizeof *k);
    if (!sorted || !k) {
        free(sorted);
        free(k);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        sorted[i] = &t[i];
    qsort(sorted, n, sizeof *sorted, by_name);
    buf data = {0}, file = {0};
    block_start(k, RESTART_INTERVAL);
    tw_status s = fill(k, sorted, n, &data, err);
    const char *last_key = n ? sorted[n - 1]->name : "";
    uint64_t off = 0, size = 0;
    if (s == TW_OK) {
        block_finish(k, &file, &off, &size);
        finish_table(&file, last_key, off, size);
    } else {
        free(k->b.p);
    }
    if (s == TW_OK && (file.failed || data.failed || k->b.failed))
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    free(sorted);
    free(k);
    if (s != TW_OK) {
        free(file.p);
        free(data.p);
        return s;
    }
    *out = (tw_bundle_bytes){file.p, file.n, data.p, data.n};
    return TW_OK;
}

void tw_bundle_bytes_free(tw_bundle_bytes *b)
{
    if (!b)
        return;
    free(b->index);
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* name as a text-format string literal's contents: '"' and '\\' escaped. */
static void put_escaped(buf *b, const char *name)
{
    for (const char *c = name; *c; c++) {
        if (*c == '"' || *c == '\\')
            put(b, "\\", 1);
        put(b, c, 1);
    }
}

char *tw_bundle_state_text(const char *name)
{
    buf b = {0};
    put(&b, "model_checkpoint_path: \"", 24);
    put_escaped(&b, name);
    put(&b, "\"\nall_model_checkpoint_paths: \"", 31);
    put_escaped(&b, name);
    put(&b, "\"\n", 3); /* with the NUL */
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return (char *)b.p;
}

int tw_bundle_file_names(const char *prefix, char *index, char *data, size_t size)
{
    int a = snprintf(index, size, "%s.index", prefix);
    int b = snprintf(data, size, "%s.data-00000-of-00001", prefix);
    return a < 0 || b < 0 || (size_t)a >= size || (size_t)b >= size ? -1 : 0;
}

tw_status tw_bundle_write(const char *prefix, const tw_bundle_bytes *b, tw_error *err)
{
    char index[4096], data[4096], state[4096];
    size_t len = strlen(prefix);
    if (!len || prefix[len - 1] == '/' || tw_bundle_file_names(prefix, index, data, sizeof index) != 0)
        return tw_error_set(err, TW_ERR_INVALID, prefix, -1, "not a checkpoint prefix (PATH/NAME, under 4 KiB)");
    const char *slash = strrchr(prefix, '/');
    const char *name = slash ? slash + 1 : prefix;
    snprintf(state, sizeof state, "%.*scheckpoint", (int)(name - prefix), prefix);
    char *text = tw_bundle_state_text(name);
    if (!text)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_status s = tw_atomic_write_file(data, b->data, b->data_len, err); /* the index commits the bundle */
    if (s == TW_OK)
        s = tw_atomic_write_file(index, b->index, b->index_len, err);
    if (s == TW_OK)
        s = tw_atomic_write_file(state, text, strlen(text), err);
    free(text);
    return s;
}
