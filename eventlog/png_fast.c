/* png_fast.c — the common PNG decoded without libpng. See png_fast.h.
 *
 * Why by hand: libpng inflates the image data through zlib a row at a time and cannot be given another
 * inflater; zlib and libpng's per-row work were over half of the CPU an image-folder conversion of small
 * PNGs took (BENCHMARKS.md, image-folder conversion). Here the whole stream goes through ISA-L's inflate
 * (libisal, as gzfile.c uses it) in one call, about 1.5x zlib's speed on such files, and the per-row
 * machinery is skipped.
 *
 * What is written here is only the plain case of the PNG specification: the chunk walk (every chunk's
 * name, CRC-32 and length — within libpng's caps — checked), the one zlib stream of consecutive IDAT
 * chunks, the five row filters (None, Sub, Up, Average, Paeth) and dropping the alpha samples. Any
 * departure — another bit depth or colour type, interlacing, a palette, any critical chunk but IHDR, IDAT
 * and IEND, a CRC mismatch, a zlib window smaller than both 32 KiB and the image, a stream that is short,
 * long or followed by more data, a filter type over 4 — returns UNDECIDED before anything is kept, and
 * libpng decodes the file or refuses it with its own message. So a file is accepted exactly when libpng
 * accepts it (libpng treats every ancillary chunk's fault as a warning, and image.c ignores those), and,
 * PNG decoding being exact, to the same pixels. */
#include "png_fast.h"

#include <stdlib.h>
#include <string.h>
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>

enum {
    CHUNK_MAX = 8000000, /* libpng's cap on a chunk's length (PNG_USER_CHUNK_MALLOC_MAX), IDAT's aside */
};

typedef struct {
    const uint8_t *data;
    uint32_t len;
    const uint8_t *type; /* its 4 name bytes */
} chunk;

typedef struct {
    uint32_t width, height;
    int bpp;       /* bytes a pixel in the file: 1, 2 (gray + alpha), 3 or 4 (RGBA) */
    int keep;      /* of which the first `keep` are kept: 1 or 3 */
    size_t stride; /* bytes an inflated row: its filter type, then width · bpp */
} header;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int is_letter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* The longest chunk libpng reads in an image of header h (NULL: before IHDR): CHUNK_MAX, or for IDAT as
 * much as the whole image's data with deflate's overhead, as libpng's png_check_chunk_length allows. */
static size_t chunk_cap(const header *h, const uint8_t *type)
{
    if (!h || memcmp(type, "IDAT", 4))
        return CHUNK_MAX;
    size_t block = h->stride > 32566 ? 32566 : h->stride;
    size_t idat = (size_t)h->height * h->stride;
    idat += 6 + 5 * (idat / block + 1); /* zlib's header and sum, 5 bytes a stored block (libpng's sum) */
    return idat > CHUNK_MAX ? idat : CHUNK_MAX;
}

/* The chunk at *at of an image of header h (NULL: its IHDR): 1 with *c and *at moved past it when it is
 * whole, its name four letters, its length within chunk_cap and its CRC right; else 0. */
static int next_chunk(const uint8_t *p, size_t n, size_t *at, const header *h, chunk *c)
{
    if (n - *at < 12)
        return 0;
    const uint8_t *q = p + *at;
    uint32_t len = be32(q);
    if (len > chunk_cap(h, q + 4) || len > n - *at - 12)
        return 0;
    for (int i = 4; i < 8; i++)
        if (!is_letter(q[i]))
            return 0;
    if (crc32_gzip_refl(0, q + 4, (uint64_t)len + 4) != be32(q + 8 + len))
        return 0;
    *c = (chunk){q + 8, len, q + 4};
    *at += 12 + (size_t)len;
    return 1;
}

static int named(const chunk *c, const char *name) { return !memcmp(c->type, name, 4); }

/* IHDR of a plain 8-bit gray, gray + alpha, RGB or RGBA image, not interlaced, within the caps: 1, else 0. */
static int plain_header(const chunk *c, header *h)
{
    static const int bpp_of[7] = {[0] = 1, [2] = 3, [4] = 2, [6] = 4}; /* colour type -> bytes a pixel */
    if (!named(c, "IHDR") || c->len != 13)
        return 0;
    const uint8_t *d = c->data;
    h->width = be32(d);
    h->height = be32(d + 4);
    int depth = d[8], type = d[9];
    if (depth != 8 || type > 6 || !bpp_of[type] || d[10] || d[11] || d[12])
        return 0;
    if (!h->width || !h->height || h->width > TW_IMAGE_MAX_SIDE || h->height > TW_IMAGE_MAX_SIDE ||
        (uint64_t)h->width * h->height > TW_IMAGE_MAX_PIXELS)
        return 0;
    h->bpp = bpp_of[type];
    h->keep = type & 2 ? 3 : 1;
    h->stride = 1 + (size_t)h->width * (size_t)h->bpp;
    return 1;
}

/* Inflates the IDAT chunks from *at on (the first is c) into out, h's height rows of h->stride bytes: 1
 * when they are consecutive and hold one zlib stream, in a window zlib accepts, that fills out exactly and
 * ends with the last of them; then *at is past the last IDAT and *c the chunk after it. Else 0. */
static int inflate_idats(const uint8_t *p, size_t n, size_t *at, const header *h, chunk *c, uint8_t *out,
                         struct inflate_state *zs)
{
    size_t size = h->stride * h->height;
    /* zlib's header: deflate, its check bits right, no preset dictionary, and a window (zlib refuses a
     * distance past it, igzip only one past the start) of 32 KiB or at least the image's size, as encoders
     * declare for small images: either way the two inflaters accept the same streams */
    if (c->len < 2 || (c->data[0] & 15) != 8 || (c->data[0] * 256 + c->data[1]) % 31 || c->data[1] & 0x20)
        return 0;
    int window_log = (c->data[0] >> 4) + 8;
    if (window_log > 15 || (window_log < 15 && size > (size_t)1 << window_log))
        return 0;
    isal_inflate_init(zs);
    zs->crc_flag = ISAL_ZLIB;
    zs->next_out = out;
    zs->avail_out = (uint32_t)size;
    for (;;) {
        zs->next_in = (uint8_t *)c->data;
        zs->avail_in = c->len;
        if (isal_inflate(zs) != ISAL_DECOMP_OK || zs->avail_in)
            return 0; /* a fault, output full before the stream's end, or bytes after it */
        int ended = zs->block_state == ISAL_BLOCK_FINISH;
        /* at the end, whole bytes left in igzip's bit buffer were read past it: more data */
        if ((ended && zs->read_in_length >= 8) || !next_chunk(p, n, at, h, c))
            return 0;
        if (!named(c, "IDAT"))
            return ended && zs->avail_out == 0;
        if (ended)
            return 0; /* another IDAT after the stream's end */
    }
}

/* One row's filter undone: x[i] = f[i] + the prediction of filter type `type` from x's earlier bytes and
 * the row above, up (zeros above the first row). x may be f. 0 when the type is not one of the five. */
static int unfilter_row(uint8_t *x, const uint8_t *f, const uint8_t *up, size_t len, size_t bpp, int type)
{
    switch (type) {
    case 0:
        memmove(x, f, len);
        return 1;
    case 1:
        for (size_t i = 0; i < len; i++)
            x[i] = (uint8_t)(f[i] + (i >= bpp ? x[i - bpp] : 0));
        return 1;
    case 2:
        for (size_t i = 0; i < len; i++)
            x[i] = (uint8_t)(f[i] + up[i]);
        return 1;
    case 3:
        for (size_t i = 0; i < len; i++)
            x[i] = (uint8_t)(f[i] + (((i >= bpp ? x[i - bpp] : 0) + up[i]) >> 1));
        return 1;
    case 4:
        for (size_t i = 0; i < len; i++) {
            int a = i >= bpp ? x[i - bpp] : 0, b = up[i], c = i >= bpp ? up[i - bpp] : 0;
            int pa = abs(b - c), pb = abs(a - c), pc = abs(a + b - 2 * c);
            x[i] = (uint8_t)(f[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c));
        }
        return 1;
    default:
        return 0;
    }
}

/* The inflated rows raw (a zero row first, then height rows of a filter byte and width · bpp bytes) into
 * h's pixels: 1, or 0 at a filter type that is not one of the five. Without alpha, each row is undone
 * straight into pixels (a copy after undoing it in place would reread bytes just stored one at a time);
 * with it, in place, then every pixel's colour copied. */
static int unfilter(uint8_t *raw, const header *h, uint8_t *pixels)
{
    size_t stride = h->stride, len = stride - 1, bpp = (size_t)h->bpp;
    for (uint32_t y = 0; y < h->height; y++) {
        uint8_t *row = raw + (size_t)(y + 1) * stride;
        uint8_t *dst = pixels + (size_t)y * h->width * (size_t)h->keep;
        if (h->keep == h->bpp) {
            if (!unfilter_row(dst, row + 1, y ? dst - len : raw + 1, len, bpp, row[0]))
                return 0;
            continue;
        }
        if (!unfilter_row(row + 1, row + 1, row + 1 - stride, len, bpp, row[0]))
            return 0;
        for (uint32_t i = 0; i < h->width; i++)
            memcpy(dst + (size_t)i * h->keep, row + 1 + (size_t)i * bpp, (size_t)h->keep);
    }
    return 1;
}

/* The chunks between IHDR and IEND: ancillary ones skipped, the IDAT run inflated into raw's rows. */
static int image_data(const uint8_t *p, size_t n, size_t at, const header *h, uint8_t *raw,
                      struct inflate_state *zs)
{
    chunk c;
    int seen = 0; /* the IDAT run */
    while (next_chunk(p, n, &at, h, &c)) {
        if (named(&c, "IDAT") && !seen) {
            if (!inflate_idats(p, n, &at, h, &c, raw + h->stride, zs))
                return 0;
            seen = 1;
        }
        if (named(&c, "IEND"))
            return seen && c.len == 0;
        if (!(c.type[0] & 0x20)) /* critical: PLTE, a second IDAT run, one we do not know */
            return 0;
    }
    return 0;
}

tw_png_fast_result tw_png_fast_decode(const uint8_t *p, size_t n, tw_image *out)
{
    memset(out, 0, sizeof *out);
    size_t at = 8;
    chunk c;
    header h;
    if (n < 8 || memcmp(p, "\x89PNG\r\n\x1a\n", 8) || !next_chunk(p, n, &at, NULL, &c) || !plain_header(&c, &h))
        return TW_PNG_FAST_UNDECIDED;
    uint8_t *raw = malloc(h.stride * ((size_t)h.height + 1));
    uint8_t *pixels = malloc((size_t)h.width * h.height * (size_t)h.keep);
    struct inflate_state *zs = malloc(sizeof *zs);
    tw_png_fast_result r = TW_PNG_FAST_NOMEM;
    if (raw && pixels && zs) {
        memset(raw, 0, h.stride);
        r = image_data(p, n, at, &h, raw, zs) && unfilter(raw, &h, pixels) ? TW_PNG_FAST_DONE
                                                                             : TW_PNG_FAST_UNDECIDED;
    }
    free(zs);
    free(raw);
    if (r != TW_PNG_FAST_DONE) {
        free(pixels);
        return r;
    }
    *out = (tw_image){(int)h.width, (int)h.height, h.keep, pixels};
    return r;
}
