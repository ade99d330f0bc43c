/* convert_archive.c — the converter's image-folder source: a .tar, .tar.gz or .zip archive (read with
 * libarchive, which also tells the formats and filters apart by content) whose top-level folders are the
 * classes and whose PNG and JPEG files under them are the examples, each decoded (image.c), resized to the
 * stored size with FFmpeg's libswscale (bicubic, Catmull-Rom's kernel as Pillow's BICUBIC; one context per
 * thread, kept from image to image) and given the stored channel count.
 *
 * Owns: which entries are examples, the class of each (its top-level folder; the classes sorted by name,
 * class 0 the first, as Keras' image_dataset_from_directory orders them), the refusals (each naming the
 * entry inside the archive) and the skips, the resize rule (convert.h: TW_CONVERT_FIT_*). Nothing is ever
 * written to disk from the archive: entries are read into memory (each capped, a bounded number at a
 * time), and the whole archive's unpacked size is capped by the conversion's max_bytes (a decompression
 * bomb stops there).
 *
 * Two passes over the archive: the first reads only the headers (and the first bytes of each file, to
 * refuse a file that is no image before anything is written), the second decodes. The class counts a
 * stratified split needs come from the first (next_label).
 *
 * The second pass starts while the first runs: a thread of its own, on a handle of its own, decodes the
 * first examples (by the same rule for what is an example; up to EARLY_BYTES of stored pixels) into
 * memory, and the writing pass takes that handle over where it stopped once the listing has said the
 * archive is sound (its first entries must be the early ones: else the archive changed between the
 * passes, refused as such). Then batches of entries are read in archive order (the archive is a stream),
 * decoded and resized on every core (base/tower_pool.h: libpng, libjpeg and the resizer keep no shared
 * state), and handed out in order. A feeder thread drives the pool: while it decodes batch h, its pool's
 * first job reads h + 1 before it joins the decoding (the jobs take the slots from a shared counter), and
 * the writer (the caller of next()) hands out h - 1 meanwhile; each job also serializes the
 * tf.train.Example of what it decoded, so the writer only frames and writes the records. A batch is
 * bounded in entries and bytes, so memory stays bounded whatever the archive (the early examples and
 * BATCHES batches at most), and the first bad entry is the one named, as without batches: an entry that
 * cannot be read ends its batch, and nothing after it is read. */
#include "convert_source.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavutil/log.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
#include <pthread.h>
#include <stdatomic.h>

#include "image.h"
#include "tower_pool.h"

enum {
    MAX_ENTRY_BYTES = 64 << 20, /* one file of the archive */
    SNIFF_BYTES = 16,
    MAX_CLASSES = TW_CONVERT_MAX_CLASS_NAMES,
    BATCH_ENTRIES = 256,        /* the most entries of a batch */
    BATCH_BYTES = 32 << 20,     /* a batch stops taking entries past this many of their bytes, and its
                                   records fit in this many */
    RECORD_SLACK = 256,         /* an Example's bytes beyond its pixels: five features' names, framing and
                                   int64 values (under 150) */
    MAX_THREADS = 8,
    EARLY_BYTES = 16 << 20,     /* the stored pixels the early examples may take */
    EARLY_ENTRIES = 1 << 14,    /* the most early examples */
    BATCHES = 4,                /* batches in memory: one handed out, one decoded and waiting, one being
                                   decoded, one being read */
};

typedef struct {
    char *path; /* as the archive names it */
    int label;
} entry;

/* One entry of the batch: its bytes (at off in the batch's data), its serialized Example, and how reading
 * or decoding it ended. */
typedef struct {
    const entry *en;
    size_t off, len;
    int64_t label;
    uint8_t *record; /* [record_cap], the batch's: the Example's record_len bytes */
    size_t record_len;
    tw_status status;
    tw_error err;
} slot;

/* An example decoded while the listing pass ran: its path, its stored pixels, how decoding it ended. */
typedef struct {
    char *path;
    uint8_t *pixels; /* [height * width * channels], early_pass.pixels' */
    tw_status status;
    tw_error err;
} early_entry;

/* A batch: up to batch_cap entries read one after another, their bytes and their Examples. */
typedef struct {
    uint8_t *data;       /* [data_cap] the entries' bytes, one after another */
    size_t data_cap;
    uint8_t *records;    /* [batch_cap * record_cap]: the slots' */
    slot slots[BATCH_ENTRIES];
    size_t n;            /* slots read (the last one's status says whether it could be) */
    atomic_size_t taken; /* slots a decoding thread has taken */
} batch;

/* The early part of the writing pass (see the top): its thread, what it decoded, and its scratch. */
typedef struct {
    pthread_t thread;
    int running, failed;         /* failed: a header it could not read, or a path the listing would refuse */
    atomic_int stop;             /* the listing pass has ended: take no further entry */
    early_entry *e;              /* [cap] in archive order, [n] decoded; handed out up to at */
    size_t n, cap, at;
    uint8_t *pixels;             /* [cap * height * width * channels] */
    uint8_t *resized;            /* [height * width * 3] */
    struct SwsContext *sws;
    uint8_t *data;               /* [data_cap] one entry's bytes */
    size_t data_cap;
} early_pass;

typedef struct {
    tw_convert_src base;
    const char *file;               /* borrowed */
    int height, width, channels, fit;
    uint64_t max_bytes, read_bytes; /* the unpacked budget, and what the writing pass read so far */
    struct archive *a;              /* the writing pass */
    entry *entries;                 /* [n] the images, in archive order */
    size_t n, cap, at;              /* at: the next the writing pass reads */
    size_t label_at;                /* the next archive_next_label gives */
    early_pass early;
    char **classes;                 /* [n_classes] sorted; classes[k] is class k's name */
    size_t n_classes;
    uint64_t skipped;               /* hidden files, and files outside a class folder */
    char **folders;                 /* [n_folders] top-level folders the archive lists: each must hold images */
    size_t n_folders;
    batch batches[BATCHES];         /* batch h in batches[h % BATCHES] */
    int stopped;                    /* an entry could not be read: the writing pass reads no further */
    size_t batch_cap, batch_at, record_cap;
    uint64_t hand;                  /* the batch handed out (up to batch_at) */
    /* The feeder thread decodes batch h (the pool's caller), its first job reading h + 1, while the writer
     * hands out earlier ones: it may decode up to want - 1, so the batch it reads never is one the writer
     * still hands out. Under mu: want (the writer's), made (batches decoded: the feeder's), quit. */
    pthread_t feeder;
    int feeder_running, quit;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t want, made;
    uint64_t decoding;              /* the batch the feeder's pool decodes (the feeder's) */
    uint8_t *resized;               /* [threads * height * width * 3]: each thread's resize scratch */
    uint8_t *stored;                /* [threads * height * width * channels]: each thread's stored pixels */
    tw_example_builder *builders[MAX_THREADS]; /* each thread's */
    tw_tower_pool *pool;
    struct SwsContext *sws[MAX_THREADS]; /* each thread's scaler, made for the last size it scaled */
    int threads;
    int64_t dims[3];
} archive_source;

static tw_status nomem(tw_error *err) { return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory"); }

static tw_status entry_error(const archive_source *x, tw_status code, const char *path, const char *why,
                             tw_error *err)
{
    return tw_error_set(err, code, x->file, -1, "archive entry '%.200s': %s", path, why);
}

static tw_status open_archive(const archive_source *x, struct archive **out, tw_error *err)
{
    struct archive *a = archive_read_new();
    if (!a)
        return nomem(err);
    archive_read_support_format_tar(a);
    archive_read_support_format_zip(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_bzip2(a);
    archive_read_support_filter_xz(a);
    if (archive_read_open_filename(a, x->file, 1 << 16) != ARCHIVE_OK) {
        tw_status s = tw_error_set(err, TW_ERR_INVALID, x->file, -1, "not a .tar, .tar.gz or .zip archive: %s",
                                   archive_error_string(a) ? archive_error_string(a) : "unreadable");
        archive_read_free(a);
        return s;
    }
    *out = a;
    return TW_OK;
}

/* What the entry at path is to the conversion: 1 an example, 0 skipped (a hidden file, or a file outside
 * a class folder), else a refusal. */
static tw_status classify_path(const archive_source *x, const char *path, int *example, tw_error *err)
{
    if (path[0] == '/')
        return entry_error(x, TW_ERR_INVALID, path, "an absolute path: an archive must hold relative paths", err);
    *example = 1;
    const char *part = path;
    while (*part) {
        const char *end = strchr(part, '/');
        size_t len = end ? (size_t)(end - part) : strlen(part);
        if (len == 2 && part[0] == '.' && part[1] == '.')
            return entry_error(x, TW_ERR_INVALID, path, "a path out of the archive ('..')", err);
        if ((len > 0 && part[0] == '.' && !(len == 1)) || (len == 8 && !strncmp(part, "__MACOSX", 8)))
            *example = 0; /* .DS_Store, ._x, .git, __MACOSX: not data */
        part = end ? end + 1 : part + len;
    }
    if (!strchr(path, '/'))
        *example = 0; /* a file at the top level belongs to no class */
    return TW_OK;
}

/* "./cats/x.png" -> "cats/x.png". */
static const char *relative(const char *path)
{
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    return path;
}

/* The length of path's top-level folder name. */
static size_t top_len(const char *path) { return (size_t)(strchr(path, '/') - path); }

static tw_status add_class(archive_source *x, const char *path, tw_error *err)
{
    size_t len = top_len(path);
    for (size_t k = 0; k < x->n_classes; k++)
        if (strlen(x->classes[k]) == len && !strncmp(x->classes[k], path, len))
            return TW_OK;
    if (x->n_classes == MAX_CLASSES)
        return tw_error_set(err, TW_ERR_TOO_LARGE, x->file, -1, "more than %d class folders", MAX_CLASSES);
    char **grown = realloc(x->classes, (x->n_classes + 1) * sizeof *grown);
    if (!grown)
        return nomem(err);
    x->classes = grown;
    if (!(x->classes[x->n_classes] = strndup(path, len)))
        return nomem(err);
    x->n_classes++;
    return TW_OK;
}

static tw_status add_entry(archive_source *x, const char *path, tw_error *err)
{
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 256;
        entry *grown = realloc(x->entries, cap * sizeof *grown);
        if (!grown)
            return nomem(err);
        x->entries = grown;
        x->cap = cap;
    }
    if (!(x->entries[x->n].path = strdup(path)))
        return nomem(err);
    x->entries[x->n++].label = -1;
    return add_class(x, path, err);
}

/* A top-level folder the archive lists ("cats/"), to check that it holds images. */
static tw_status note_folder(archive_source *x, const char *path, tw_error *err)
{
    size_t len = top_len(path);
    if (path[len + 1] != '\0')
        return TW_OK; /* a folder inside a class */
    char **grown = realloc(x->folders, (x->n_folders + 1) * sizeof *grown);
    if (!grown)
        return nomem(err);
    x->folders = grown;
    return (x->folders[x->n_folders++] = strndup(path, len)) ? TW_OK : nomem(err);
}

/* Every listed top-level folder is a class (holds images). */
static tw_status folders_hold_images(const archive_source *x, tw_error *err)
{
    for (size_t f = 0; f < x->n_folders; f++) {
        int found = 0;
        for (size_t k = 0; k < x->n_classes && !found; k++)
            found = !strcmp(x->folders[f], x->classes[k]);
        if (!found)
            return tw_error_set(err, TW_ERR_INVALID, x->file, -1, "class folder '%.200s' holds no PNG or JPEG "
                                "images: remove it, or add its images", x->folders[f]);
    }
    return TW_OK;
}

/* The first bytes of the current entry must start a PNG or a JPEG. */
static tw_status sniff(archive_source *x, struct archive *a, const char *path, tw_error *err)
{
    uint8_t head[SNIFF_BYTES];
    la_ssize_t got = archive_read_data(a, head, sizeof head);
    if (got < 0)
        return entry_error(x, TW_ERR_CORRUPT, path, archive_error_string(a), err);
    if (tw_image_sniff(head, (size_t)got) == TW_IMAGE_NONE)
        return entry_error(x, TW_ERR_INVALID, path, "not a PNG or JPEG image (class folders hold images only)", err);
    return TW_OK;
}

/* One header of the listing pass: refused, skipped or listed. *declared sums the unpacked sizes. */
static tw_status list_entry(archive_source *x, struct archive *a, struct archive_entry *e, uint64_t *declared,
                            tw_error *err)
{
    const char *raw = archive_entry_pathname(e);
    if (!raw)
        return tw_error_set(err, TW_ERR_CORRUPT, x->file, -1, "an archive entry without a name");
    const char *path = relative(raw);
    int example = 0;
    TW_TRY(classify_path(x, path, &example, err));
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFDIR)
        return example ? note_folder(x, path, err) : TW_OK;
    if (archive_entry_hardlink(e) || type != AE_IFREG)
        return entry_error(x, TW_ERR_INVALID, path, type == AE_IFLNK ? "a symbolic link: an archive of images "
                           "holds plain files" : "a link or special file: an archive of images holds plain files",
                           err);
    int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (size > MAX_ENTRY_BYTES)
        return entry_error(x, TW_ERR_TOO_LARGE, path, "larger than 64 MiB", err);
    if ((*declared += (uint64_t)(size > 0 ? size : 0)) > x->max_bytes)
        return tw_error_set(err, TW_ERR_TOO_LARGE, x->file, -1, "the archive unpacks to more than %llu bytes "
                            "(at '%.200s')", (unsigned long long)x->max_bytes, path);
    if (!example) {
        x->skipped++;
        return TW_OK;
    }
    TW_TRY(sniff(x, a, path, err));
    return add_entry(x, path, err);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Classes sorted by name, and each entry's label: the index of its top-level folder. */
static void label_entries(archive_source *x)
{
    qsort(x->classes, x->n_classes, sizeof *x->classes, by_name);
    for (size_t i = 0; i < x->n; i++) {
        size_t len = top_len(x->entries[i].path);
        for (size_t k = 0; k < x->n_classes; k++)
            if (strlen(x->classes[k]) == len && !strncmp(x->classes[k], x->entries[i].path, len))
                x->entries[i].label = (int)k;
    }
}

/* The listing pass. */
static tw_status list_entries(archive_source *x, tw_error *err)
{
    struct archive *a;
    TW_TRY(open_archive(x, &a, err));
    struct archive_entry *e;
    uint64_t declared = 0;
    tw_status s = TW_OK;
    int r;
    while (s == TW_OK && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK)
        s = list_entry(x, a, e, &declared, err);
    if (s == TW_OK && r != ARCHIVE_EOF)
        s = tw_error_set(err, TW_ERR_CORRUPT, x->file, -1, "a damaged or truncated archive: %s",
                         archive_error_string(a) ? archive_error_string(a) : "unknown error");
    archive_read_free(a);
    TW_TRY(s);
    if (!x->n)
        return tw_error_set(err, TW_ERR_INVALID, x->file, -1, "no images: an image archive holds one folder per "
                            "class at its top level, with the class's PNG and JPEG files in it");
    label_entries(x);
    x->base.count = x->n;
    return folders_hold_images(x, err);
}

/* The current entry's bytes into *data (grown as needed: *cap) from off; *len. */
static tw_status read_data(archive_source *x, uint8_t **data, size_t *cap, const char *path, size_t off, size_t *len,
                           tw_error *err)
{
    *len = 0;
    for (;;) {
        if (off + *len == *cap) {
            size_t more = *cap ? 2 * *cap : 1 << 16;
            uint8_t *grown = realloc(*data, more);
            if (!grown)
                return nomem(err);
            *data = grown;
            *cap = more;
        }
        la_ssize_t got = archive_read_data(x->a, *data + off + *len, *cap - off - *len);
        if (got < 0)
            return entry_error(x, TW_ERR_CORRUPT, path, archive_error_string(x->a), err);
        if (got == 0)
            return TW_OK;
        if ((*len += (size_t)got) > MAX_ENTRY_BYTES)
            return entry_error(x, TW_ERR_TOO_LARGE, path, "larger than 64 MiB", err);
        if ((x->read_bytes += (uint64_t)got) > x->max_bytes)
            return tw_error_set(err, TW_ERR_TOO_LARGE, x->file, -1, "the archive unpacks to more than %llu bytes "
                                "(at '%.200s')", (unsigned long long)x->max_bytes, path);
    }
}

/* The refusal of an archive whose entries the writing pass finds other than the listing pass did (at:
 * where). */
static tw_status changed(const archive_source *x, const char *at, tw_error *err)
{
    return tw_error_set(err, TW_ERR_CORRUPT, x->file, -1, "the archive changed between the listing pass and the "
                        "writing pass (at '%.200s')", at);
}

/* The next listed entry's header in the writing pass (the ones between were skipped or are folders). */
static tw_status seek_entry(archive_source *x, const char *want, tw_error *err)
{
    struct archive_entry *e;
    int r;
    while ((r = archive_read_next_header(x->a, &e)) == ARCHIVE_OK) {
        const char *raw = archive_entry_pathname(e);
        if (raw && !strcmp(relative(raw), want) && archive_entry_filetype(e) == AE_IFREG)
            return TW_OK;
    }
    return changed(x, want, err);
}

/* FFmpeg's messages (a warning about an unaligned row is a speed note) are kept off stderr. */
static void quiet_ffmpeg(void) { av_log_set_level(AV_LOG_ERROR); }

static pthread_once_t ffmpeg_once = PTHREAD_ONCE_INIT;

/* The c-channel image src (w x h) scaled to dst (dw x dh) with *sws: each channel as a grey plane,
 * bicubic with B = 0, C = 0.5 (Catmull-Rom, Pillow's BICUBIC), widened when shrinking, bit-exact (the same
 * bytes on every CPU). Returns 0, or -1 when no scaler can be made (or out of memory). */
static int scale(struct SwsContext **sws, const uint8_t *src, int w, int h, int c, uint8_t *dst, int dw, int dh)
{
    static const double CATMULL_ROM[2] = {0.0, 0.5};
    *sws = sws_getCachedContext(*sws, w, h, AV_PIX_FMT_GRAY8, dw, dh, AV_PIX_FMT_GRAY8,
                                SWS_BICUBIC | SWS_ACCURATE_RND | SWS_BITEXACT, NULL, NULL, CATMULL_ROM);
    size_t n = (size_t)w * h, dn = (size_t)dw * dh;
    uint8_t *plane = c == 1 ? NULL : malloc(n + dn);
    if (!*sws || (c > 1 && !plane)) {
        free(plane);
        return -1;
    }
    for (int k = 0; k < c; k++) {
        const uint8_t *in = src;
        uint8_t *out = c == 1 ? dst : plane + n;
        for (size_t i = 0; c > 1 && i < n; i++)
            plane[i] = src[i * c + (size_t)k];
        if (c > 1)
            in = plane;
        sws_scale(*sws, (const uint8_t *const[4]){in}, (const int[4]){w}, 0, h, (uint8_t *const[4]){out},
                  (const int[4]){dw});
        for (size_t i = 0; c > 1 && i < dn; i++)
            dst[i * c + (size_t)k] = out[i];
    }
    free(plane);
    return 0;
}

/* img resized to height x width by the source's fit into out[height * width * img's channels] with the
 * scaler *sws (a thread's): crop scales the shorter side to the target and cuts the middle; pad scales the
 * longer side to it and centres the image on zeros. An image of the stored size is copied as it is. */
static tw_status fit_image(const archive_source *x, struct SwsContext **sws, const tw_image *img, const char *path,
                           uint8_t *out, tw_error *err)
{
    int H = x->height, W = x->width, c = img->channels;
    double sy = (double)H / img->height, sx = (double)W / img->width;
    double s = x->fit == TW_CONVERT_FIT_CROP ? (sy > sx ? sy : sx) : (sy < sx ? sy : sx);
    int rh = (int)(img->height * s + 0.5), rw = (int)(img->width * s + 0.5);
    rh = rh < 1 ? 1 : rh;
    rw = rw < 1 ? 1 : rw;
    if (x->fit == TW_CONVERT_FIT_CROP) {
        rh = rh < H ? H : rh;
        rw = rw < W ? W : rw;
    }
    int same = rh == img->height && rw == img->width, exact = rh == H && rw == W;
    uint8_t *tmp = same ? img->pixels : exact ? out : malloc((size_t)rh * rw * c);
    if (!tmp)
        return nomem(err);
    if (!same && scale(sws, img->pixels, img->width, img->height, c, tmp, rw, rh) != 0) {
        if (tmp != out)
            free(tmp);
        return entry_error(x, TW_ERR_INTERNAL, path, "the resize failed", err);
    }
    if (tmp == out)
        return TW_OK;
    if (x->fit != TW_CONVERT_FIT_CROP) /* pad's margins; a crop covers out */
        memset(out, 0, (size_t)H * W * c);
    int oy = (rh - H) / 2, ox = (rw - W) / 2; /* crop: where the middle starts; pad: negative, the margin */
    int j0 = ox < 0 ? -ox : 0, j1 = rw - ox < W ? rw - ox : W; /* the columns of out the image covers */
    for (int i = 0; i < H; i++) {
        int si = i + oy;
        if (si >= 0 && si < rh)
            memcpy(out + ((size_t)i * W + j0) * c, tmp + ((size_t)si * rw + j0 + ox) * c, (size_t)(j1 - j0) * c);
    }
    if (tmp != img->pixels)
        free(tmp);
    return TW_OK;
}

/* An example's features into b: image_raw (stored pixels), label, height, width, depth (b borrows them). */
static tw_status add_features(const archive_source *x, tw_example_builder *b, const uint8_t *stored,
                              const int64_t *label, tw_error *err)
{
    TW_TRY(tw_example_add_bytes1(b, "image_raw", stored, (size_t)(x->height * x->width * x->channels), err));
    TW_TRY(tw_example_add_int64s(b, "label", label, 1, err));
    TW_TRY(tw_example_add_int64s(b, "height", &x->dims[0], 1, err));
    TW_TRY(tw_example_add_int64s(b, "width", &x->dims[1], 1, err));
    return tw_example_add_int64s(b, "depth", &x->dims[2], 1, err);
}

/* Slot k's Example from thread t's stored pixels, serialized with the thread's builder into the slot's
 * record. */
static tw_status serialize_slot(archive_source *x, int t, slot *k, const uint8_t *stored, tw_error *err)
{
    tw_example_builder *b = x->builders[t];
    tw_example_builder_reset(b);
    TW_TRY(add_features(x, b, stored, &k->label, err));
    const uint8_t *data;
    TW_TRY(tw_example_serialize(b, &data, &k->record_len, err));
    if (k->record_len > x->record_cap)
        return entry_error(x, TW_ERR_INTERNAL, k->en->path, "its Example is larger than its room", err);
    memcpy(k->record, data, k->record_len);
    return TW_OK;
}

/* The entry at path (data[len]) decoded, fitted and given the stored channels into stored with the scaler
 * *sws (resized: scratch, for an image whose channels differ from the stored ones). */
static tw_status decode_entry(const archive_source *x, struct SwsContext **sws, const uint8_t *data, size_t len,
                              const char *path, uint8_t *resized, uint8_t *stored, tw_error *err)
{
    tw_image img;
    tw_error e;
    if (tw_image_decode(data, len, path, &img, &e) != TW_OK)
        return entry_error(x, e.status, path, e.message, err);
    int direct = img.channels == x->channels;
    tw_status s = fit_image(x, sws, &img, path, direct ? stored : resized, err);
    tw_image fitted = {.width = x->width, .height = x->height, .channels = img.channels, .pixels = resized};
    if (s == TW_OK && !direct)
        s = tw_image_fit(&fitted, x->height, x->width, x->channels, stored, path, err);
    tw_image_free(&img);
    return s;
}

/* Slot k's bytes (in b's data) decoded and serialized, the outcome in its status and err; resized and
 * stored: thread t's scratch. */
static void decode_slot(archive_source *x, int t, const batch *b, slot *k, uint8_t *resized, uint8_t *stored)
{
    k->status = decode_entry(x, &x->sws[t], b->data + k->off, k->len, k->en->path, resized, stored, &k->err);
    if (k->status == TW_OK)
        k->status = serialize_slot(x, t, k, stored, &k->err);
}

/* Reads the next entries into b in archive order (up to batch_cap, or past BATCH_BYTES of their bytes); an
 * entry that cannot be read ends the batch, its error kept in its slot, and stops the pass. */
static void read_batch(archive_source *x, batch *b)
{
    size_t off = 0;
    b->n = 0;
    atomic_store(&b->taken, 0);
    while (b->n < x->batch_cap && x->at < x->n && off <= BATCH_BYTES) {
        slot *k = &b->slots[b->n];
        *k = (slot){.en = &x->entries[x->at], .label = x->entries[x->at].label, .off = off,
                    .record = b->records + b->n++ * x->record_cap};
        x->at++;
        k->status = seek_entry(x, k->en->path, &k->err);
        if (k->status == TW_OK)
            k->status = read_data(x, &b->data, &b->data_cap, k->en->path, off, &k->len, &k->err);
        if (k->status != TW_OK) {
            x->stopped = 1;
            return;
        }
        off += k->len;
    }
}

/* Thread t of the feeder's pool: the first reads the batch after the one it decodes (an empty one when
 * nothing is left to read); then each takes slots of the decoded batch until none is left. */
static void decode_part(void *arg, int t)
{
    archive_source *x = arg;
    batch *b = &x->batches[x->decoding % BATCHES], *next = &x->batches[(x->decoding + 1) % BATCHES];
    if (t == 0) {
        next->n = 0;
        if (!x->stopped && x->at < x->n)
            read_batch(x, next);
    }
    size_t px = (size_t)x->height * (size_t)x->width;
    uint8_t *resized = x->resized + (size_t)t * px * 3, *stored = x->stored + (size_t)t * px * (size_t)x->channels;
    for (size_t k; (k = atomic_fetch_add(&b->taken, 1)) < b->n;)
        if (b->slots[k].status == TW_OK)
            decode_slot(x, t, b, &b->slots[k], resized, stored);
}

/* The feeder thread: decodes batch 0, 1, ... as want allows, each on the pool, and says so in made. */
static void *feeder_main(void *arg)
{
    archive_source *x = arg;
    for (uint64_t h = 0;; h++) {
        pthread_mutex_lock(&x->mu);
        while (!x->quit && x->want <= h)
            pthread_cond_wait(&x->go, &x->mu);
        int quit = x->quit;
        pthread_mutex_unlock(&x->mu);
        if (quit)
            return NULL;
        x->decoding = h;
        size_t n = x->batches[h % BATCHES].n;
        tw_tower_pool_run(x->pool, n < 1 ? 1 : n < (size_t)x->threads ? (int)n : x->threads, decode_part, x);
        pthread_mutex_lock(&x->mu);
        x->made = h + 1;
        pthread_cond_signal(&x->done);
        pthread_mutex_unlock(&x->mu);
    }
}

/* The batches' room (their records, each thread's scratch and builder), the pool of one thread per core
 * (at most MAX_THREADS) and the feeder; batch_cap, set last, says they are made. */
static tw_status batch_create(archive_source *x, tw_error *err)
{
    pthread_once(&ffmpeg_once, quiet_ffmpeg);
    size_t px = (size_t)x->height * (size_t)x->width;
    x->record_cap = px * (size_t)x->channels + RECORD_SLACK;
    size_t cap = BATCH_BYTES / x->record_cap;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    x->threads = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores;
    cap = cap < 1 ? 1 : cap > BATCH_ENTRIES ? BATCH_ENTRIES : cap;
    if (!(x->resized = malloc(px * 3 * (size_t)x->threads)) ||
        !(x->stored = malloc(px * (size_t)x->channels * (size_t)x->threads)))
        return nomem(err);
    for (int i = 0; i < BATCHES; i++)
        if (!(x->batches[i].records = malloc(x->record_cap * cap)))
            return nomem(err);
    for (int t = 0; t < x->threads; t++)
        TW_TRY(tw_example_builder_create(&x->builders[t], err));
    TW_TRY(tw_tower_pool_create(x->threads, &x->pool, err));
    x->batch_cap = cap;
    read_batch(x, &x->batches[0]); /* the first, here; the feeder reads the others */
    x->want = BATCHES - 1;
    if (pthread_create(&x->feeder, NULL, feeder_main, x) != 0)
        return tw_error_set(err, TW_ERR_INTERNAL, x->file, -1, "cannot start a thread to decode");
    x->feeder_running = 1;
    return TW_OK;
}

/* Moves the writer to the next batch once the feeder has decoded it (the first: made here), and lets the
 * feeder go on to the batch whose room the writer has left. *end: there is none (nothing left to read). */
static tw_status next_batch(archive_source *x, int *end, tw_error *err)
{
    uint64_t h = x->batch_cap ? x->hand + 1 : 0;
    if (!x->batch_cap) /* the first example: only the writing pass needs the batches (not a counting one) */
        TW_TRY(batch_create(x, err));
    pthread_mutex_lock(&x->mu);
    while (x->made <= h)
        pthread_cond_wait(&x->done, &x->mu);
    x->want = h + BATCHES - 1;
    pthread_cond_signal(&x->go);
    pthread_mutex_unlock(&x->mu);
    x->hand = h;
    x->batch_at = 0;
    *end = x->batches[h % BATCHES].n == 0;
    return TW_OK;
}

/* Stops and joins the feeder (after its current batch). */
static void feeder_stop(archive_source *x)
{
    if (!x->feeder_running)
        return;
    pthread_mutex_lock(&x->mu);
    x->quit = 1;
    pthread_cond_signal(&x->go);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->feeder, NULL);
    x->feeder_running = 0;
}

/* ====================== the early part of the writing pass ====================== */

/* The thread: takes the entries of the writing handle (x->a) that are examples, in order, reads and
 * decodes each, until the listing ends (stop), the room is full, or an entry cannot be read (its error
 * kept in it, handed out in its turn, and the writing pass stops there: x->stopped). It touches only x->a,
 * x->read_bytes, x->stopped and the early pass; the listing, on the caller, owns the rest. */
static void *early_main(void *arg)
{
    archive_source *x = arg;
    early_pass *p = &x->early;
    size_t px = (size_t)x->height * (size_t)x->width * (size_t)x->channels;
    pthread_once(&ffmpeg_once, quiet_ffmpeg);
    while (!atomic_load(&p->stop) && p->n < p->cap) {
        struct archive_entry *e;
        int r = archive_read_next_header(x->a, &e), example = 0;
        if (r == ARCHIVE_EOF)
            break;
        const char *raw = r == ARCHIVE_OK ? archive_entry_pathname(e) : NULL;
        tw_error ignored;
        if (!raw || classify_path(x, relative(raw), &example, &ignored) != TW_OK) {
            p->failed = 1;
            break;
        }
        if (!example || archive_entry_filetype(e) != AE_IFREG)
            continue;
        early_entry *k = &p->e[p->n];
        if (!(k->path = strdup(relative(raw)))) {
            p->failed = 1;
            break;
        }
        k->pixels = p->pixels + p->n++ * px;
        size_t len;
        k->status = read_data(x, &p->data, &p->data_cap, k->path, 0, &len, &k->err);
        if (k->status != TW_OK) {
            x->stopped = 1;
            break;
        }
        k->status = decode_entry(x, &p->sws, p->data, len, k->path, p->resized, k->pixels, &k->err);
    }
    return NULL;
}

/* Opens the writing handle and starts the early thread (its room: EARLY_BYTES of pixels, at least one
 * example). */
static tw_status early_start(archive_source *x, tw_error *err)
{
    early_pass *p = &x->early;
    size_t px = (size_t)x->height * (size_t)x->width * (size_t)x->channels;
    TW_TRY(open_archive(x, &x->a, err));
    p->cap = EARLY_BYTES / px < 1 ? 1 : EARLY_BYTES / px > EARLY_ENTRIES ? EARLY_ENTRIES : EARLY_BYTES / px;
    if (!(p->e = calloc(p->cap, sizeof *p->e)) || !(p->pixels = malloc(p->cap * px)) ||
        !(p->resized = malloc((size_t)x->height * (size_t)x->width * 3)))
        return nomem(err);
    if (pthread_create(&p->thread, NULL, early_main, x) != 0)
        return tw_error_set(err, TW_ERR_INTERNAL, x->file, -1, "cannot start a thread to decode");
    p->running = 1;
    return TW_OK;
}

/* The early examples and their scratch freed (NULL-safe parts). */
static void early_free(early_pass *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->e[i].path);
    free(p->e);
    free(p->pixels);
    free(p->resized);
    free(p->data);
    sws_freeContext(p->sws);
    *p = (early_pass){.n = 0};
}

/* Stops and joins the early thread once the listing has ended (listed: how). The early examples must be
 * the listing's first ones; the writing pass goes on from them on the same handle. */
static tw_status early_finish(archive_source *x, tw_status listed, tw_error *err)
{
    early_pass *p = &x->early;
    atomic_store(&p->stop, 1);
    if (p->running)
        pthread_join(p->thread, NULL);
    p->running = 0;
    TW_TRY(listed);
    if (p->failed || p->n > x->n)
        return changed(x, p->n ? p->e[p->n - 1].path : "its first entry", err);
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->e[i].path, x->entries[i].path))
            return changed(x, p->e[i].path, err);
    x->at = p->n;
    return TW_OK;
}

/* The next early example, its features built into b. */
static tw_status early_next(archive_source *x, tw_example_builder *b, tw_label_value *label, tw_error *err)
{
    const early_entry *k = &x->early.e[x->early.at];
    const entry *en = &x->entries[x->early.at++];
    if (k->status != TW_OK) {
        *err = k->err;
        return k->status;
    }
    label->i = en->label;
    label->f = en->label;
    x->base.label_i = en->label;
    return add_features(x, b, k->pixels, &x->base.label_i, err);
}

/* The next Example: an early one, built into b, or one serialized when its batch was decoded (s->record; b
 * stays empty). */
static tw_status archive_next(tw_convert_src *s, tw_example_builder *b, tw_label_value *label, tw_error *err)
{
    archive_source *x = (archive_source *)s;
    if (x->early.at < x->early.n) /* built into b, which convert.c serializes */
        return early_next(x, b, label, err);
    if (!x->batch_cap && (x->stopped || x->at == x->n)) /* every example was an early one */
        return TW_END;
    if (!x->batch_cap || x->batch_at == x->batches[x->hand % BATCHES].n) {
        int end = 0;
        TW_TRY(next_batch(x, &end, err));
        if (end)
            return TW_END;
    }
    const slot *k = &x->batches[x->hand % BATCHES].slots[x->batch_at++];
    if (k->status != TW_OK) {
        *err = k->err;
        return k->status;
    }
    label->i = k->label;
    label->f = k->label;
    s->record = k->record;
    s->record_len = k->record_len;
    return TW_OK;
}

static tw_status archive_next_label(tw_convert_src *s, tw_label_value *label, tw_error *err)
{
    (void)err;
    archive_source *x = (archive_source *)s;
    if (x->label_at == x->n)
        return TW_END;
    label->i = x->entries[x->label_at].label;
    label->f = x->entries[x->label_at++].label;
    return TW_OK;
}

static tw_status archive_describe(const tw_convert_src *s, json_t *meta, tw_error *err)
{
    const archive_source *x = (const archive_source *)s;
    json_t *names = json_array();
    for (size_t k = 0; names && k < x->n_classes; k++)
        if (json_array_append_new(names, json_string(x->classes[k])) != 0) {
            json_decref(names);
            names = NULL;
        }
    json_t *keys = json_pack("{s:{s:s, s:s, s:s, s:s, s:s}, s:[I, I, I], s:s, s:o, s:s, s:I}", "features",
                             "image_raw", "bytes", "label", "int64", "height", "int64", "width", "int64", "depth",
                             "int64", "shape", (json_int_t)x->height, (json_int_t)x->width, (json_int_t)x->channels,
                             "dtype", "uint8", "class_names", names, "resize",
                             x->fit == TW_CONVERT_FIT_CROP ? "crop" : "pad", "skipped_files", (json_int_t)x->skipped);
    int ok = keys && json_object_update(meta, keys) == 0;
    json_decref(keys);
    return ok ? TW_OK : nomem(err);
}

static void archive_close(tw_convert_src *s)
{
    archive_source *x = (archive_source *)s;
    feeder_stop(x); /* first: its pool may be reading x->a and the entries */
    early_free(&x->early); /* its thread is joined by early_finish */
    if (x->a)
        archive_read_free(x->a);
    for (size_t i = 0; i < x->n; i++)
        free(x->entries[i].path);
    for (size_t k = 0; k < x->n_classes; k++)
        free(x->classes[k]);
    for (size_t f = 0; f < x->n_folders; f++)
        free(x->folders[f]);
    free(x->folders);
    free(x->entries);
    free(x->classes);
    for (int i = 0; i < BATCHES; i++) {
        free(x->batches[i].data);
        free(x->batches[i].records);
    }
    free(x->resized);
    free(x->stored);
    for (int t = 0; t < MAX_THREADS; t++)
        tw_example_builder_destroy(x->builders[t]);
    tw_tower_pool_destroy(x->pool);
    for (int t = 0; t < MAX_THREADS; t++)
        sws_freeContext(x->sws[t]);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->go);
    pthread_cond_destroy(&x->done);
    free(x);
}

tw_status tw_convert_archive_open(const tw_convert_options *o, tw_convert_src **out, tw_error *err)
{
    archive_source *x = calloc(1, sizeof *x);
    if (!x)
        return nomem(err);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->go, NULL);
    pthread_cond_init(&x->done, NULL);
    x->base = (tw_convert_src){.kind = "archive", .int_labels = 1, .next = archive_next,
                               .describe = archive_describe, .close = archive_close,
                               .next_label = archive_next_label};
    *out = &x->base;
    x->file = o->image_archive;
    x->height = o->image_height;
    x->width = o->image_width;
    x->channels = o->image_channels;
    x->fit = o->image_fit;
    x->max_bytes = o->max_bytes;
    x->dims[0] = x->height;
    x->dims[1] = x->width;
    x->dims[2] = x->channels;
    TW_TRY(early_start(x, err));
    return early_finish(x, list_entries(x, err), err);
}
