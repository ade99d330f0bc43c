/* idx.c — IDX header parsing and the streaming item reader. See idx.h.
 *
 * No library reads IDX (it is a 4-byte magic and a few big-endian integers), so this is ours; the byte
 * stream underneath, raw or gzip, comes from gzfile.c. */
#include "idx.h"

#include <stdlib.h>
#include <string.h>

#include "gzfile.h"

struct tw_idx_reader {
    tw_gzfile *in;            /* owned */
    tw_idx_header h;
    tw_gzfile_items items;    /* the data section: h.count items of h.item_bytes */
};

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

const char *tw_idx_type_name(uint8_t type)
{
    switch (type) {
    case TW_IDX_UBYTE: return "ubyte";
    case TW_IDX_SBYTE: return "sbyte";
    case TW_IDX_INT16: return "int16";
    case TW_IDX_INT32: return "int32";
    case TW_IDX_FLOAT32: return "float32";
    case TW_IDX_FLOAT64: return "float64";
    }
    return "unknown";
}

/* Checks the four magic bytes; fills type and rank. */
static tw_status parse_magic(const uint8_t *p, const char *name, tw_idx_header *h, tw_error *err)
{
    if (p[0] != 0 || p[1] != 0)
        return tw_error_set(err, TW_ERR_CORRUPT, name, 0,
                            "bad magic 0x%08x: not an IDX file (it must start with two zero bytes)",
                            get_be32(p));
    if (!strcmp(tw_idx_type_name(p[2]), "unknown"))
        return tw_error_set(err, TW_ERR_CORRUPT, name, 2,
                            "bad magic 0x%08x: unknown IDX element type 0x%02x", get_be32(p), p[2]);
    if (p[2] != TW_IDX_UBYTE)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, name, 2,
                            "IDX element type 0x%02x (%s) is not supported: only 0x08 (ubyte)", p[2],
                            tw_idx_type_name(p[2]));
    if (p[3] == 0)
        return tw_error_set(err, TW_ERR_CORRUPT, name, 3, "bad magic 0x%08x: zero dimensions",
                            get_be32(p));
    if (p[3] > TW_IDX_MAX_RANK)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, name, 3,
                            "%d dimensions are not supported (at most %d)", p[3], TW_IDX_MAX_RANK);
    h->type = p[2];
    h->rank = p[3];
    return TW_OK;
}

/* Fills dims and the derived sizes, each checked against its cap before the next multiply. */
static tw_status parse_dims(const uint8_t *p, const char *name, tw_idx_header *h, tw_error *err)
{
    h->item_bytes = 1;
    for (int i = 0; i < h->rank; i++) {
        h->dims[i] = get_be32(p + 4 + 4 * i);
        if (i == 0)
            continue;
        if (h->dims[i] == 0)
            return tw_error_set(err, TW_ERR_CORRUPT, name, 4 + 4 * i, "dimension %d is 0", i);
        h->item_bytes *= h->dims[i];
        if (h->item_bytes > TW_IDX_MAX_ITEM_BYTES)
            return tw_error_set(err, TW_ERR_TOO_LARGE, name, 4 + 4 * i,
                                "one item is larger than %d bytes", TW_IDX_MAX_ITEM_BYTES);
    }
    h->count = h->dims[0];
    h->header_bytes = 4 + 4 * (uint64_t)h->rank;
    /* count < 2^32 and item_bytes <= 2^28, so the product fits in 64 bits. */
    h->total_bytes = h->header_bytes + h->count * h->item_bytes;
    return TW_OK;
}

tw_status tw_idx_parse_header(const uint8_t *p, size_t n, const char *name, tw_idx_header *h,
                              tw_error *err)
{
    memset(h, 0, sizeof *h);
    if (n < 4)
        return tw_error_set(err, TW_ERR_TRUNCATED, name, (int64_t)n,
                            "the file ends inside the 4-byte IDX magic");
    TW_TRY(parse_magic(p, name, h, err));
    if (n < 4 + 4 * (size_t)h->rank)
        return tw_error_set(err, TW_ERR_TRUNCATED, name, (int64_t)n,
                            "the file ends inside the IDX header (%d bytes for %d dimensions)",
                            4 + 4 * h->rank, h->rank);
    return parse_dims(p, name, h, err);
}

static tw_status read_header(tw_idx_reader *r, tw_error *err)
{
    uint8_t buf[4 + 4 * TW_IDX_MAX_RANK];
    size_t got = 0, more = 0;
    TW_TRY(tw_gzfile_read(r->in, buf, 4, &got, err));
    if (got == 4 && buf[3] <= TW_IDX_MAX_RANK)
        TW_TRY(tw_gzfile_read(r->in, buf + 4, 4 * (size_t)buf[3], &more, err));
    TW_TRY(tw_idx_parse_header(buf, got + more, tw_gzfile_name(r->in), &r->h, err));
    return tw_gzfile_items_init(&r->items, r->in, r->h.count, r->h.item_bytes, r->h.total_bytes, 4,
                                err);
}

/* Opens src and reads the header. */
static tw_status reader_start(const tw_source *src, uint64_t max_bytes, tw_idx_reader **out, tw_error *err)
{
    *out = NULL;
    tw_idx_reader *r = calloc(1, sizeof *r);
    if (!r)
        return tw_error_set(err, TW_ERR_NOMEM, tw_source_name(src), -1, "out of memory");
    tw_status s = tw_gzfile_open_source(src, TW_COMPRESSION_AUTO, max_bytes, &r->in, err);
    if (s == TW_OK)
        s = read_header(r, err);
    if (s != TW_OK) {
        tw_idx_close(r);
        return s;
    }
    *out = r;
    return TW_OK;
}

tw_status tw_idx_open(const char *path, uint64_t max_bytes, tw_idx_reader **out, tw_error *err)
{
    const tw_source src = {.path = path};
    return reader_start(&src, max_bytes, out, err);
}

tw_status tw_idx_open_mem(const void *data, size_t n, const char *name, uint64_t max_bytes,
                          tw_idx_reader **out, tw_error *err)
{
    const tw_source src = {.data = data, .size = n, .name = name};
    return reader_start(&src, max_bytes, out, err);
}

const tw_idx_header *tw_idx_reader_header(const tw_idx_reader *r) { return &r->h; }

const char *tw_idx_reader_name(const tw_idx_reader *r) { return tw_gzfile_name(r->in); }

int tw_idx_reader_is_gzip(const tw_idx_reader *r) { return tw_gzfile_compression(r->in) == TW_COMPRESSION_GZIP; }

uint64_t tw_idx_reader_items(const tw_idx_reader *r) { return r->items.done; }

tw_status tw_idx_next(tw_idx_reader *r, const uint8_t **item, tw_error *err)
{
    return tw_gzfile_next_item(r->in, &r->items, item, err);
}

void tw_idx_close(tw_idx_reader *r)
{
    if (!r)
        return;
    tw_gzfile_close(r->in);
    tw_gzfile_items_cleanup(&r->items);
    free(r);
}
