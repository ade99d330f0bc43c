/* dir_archive.c — a folder streamed as a tar archive. See dir_archive.h.
 *
 * libarchive writes the tar through a callback into `out`; each read asks it for the next piece (an entry's
 * header, a chunk of its file, the end) until `out` holds bytes, so the archive is pulled by the upload
 * rather than pushed, and no thread or temporary file is needed. */
#define _GNU_SOURCE
#include "dir_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CHUNK = 1 << 16 };

struct tw_dir_archive {
    const char *dir;
    char **files;               /* paths relative to dir, sorted */
    size_t n, cap, skipped, next;
    struct archive *ar;
    int fd;                     /* the entry being written, -1 between entries */
    int done;
    char *out;                  /* archive bytes not yet read: [out_at, out_len) */
    size_t out_len, out_at, out_cap;
    char chunk[CHUNK];
    tw_error err;
};

/* ---- the walk ---- */

static tw_dir_archive *walking; /* nftw has no context argument: the walk in progress (one at a time) */
static size_t root_len;

static int add_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    tw_dir_archive *a = walking;
    if (type == FTW_D || type == FTW_DP)
        return 0;
    if (type == FTW_DNR)
        return tw_error_errno(&a->err, path, "cannot read the folder"), 1;
    if (type != FTW_F) {
        a->skipped++;
        return 0;
    }
    if (a->n == TW_DIR_ARCHIVE_MAX_FILES)
        return tw_error_set(&a->err, TW_ERR_TOO_LARGE, a->dir, -1, "more than %d files", TW_DIR_ARCHIVE_MAX_FILES), 1;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        char **more = realloc(a->files, cap * sizeof *more);
        if (!more)
            return tw_error_set(&a->err, TW_ERR_NOMEM, a->dir, -1, "out of memory"), 1;
        a->files = more;
        a->cap = cap;
    }
    if (!(a->files[a->n] = strdup(path + root_len + 1)))
        return tw_error_set(&a->err, TW_ERR_NOMEM, a->dir, -1, "out of memory"), 1;
    a->n++;
    return 0;
}

static int by_name(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* ---- the tar ---- */

static la_ssize_t to_out(struct archive *ar, void *ctx, const void *buf, size_t len)
{
    (void)ar;
    tw_dir_archive *a = ctx;
    if (a->out_len + len > a->out_cap) {
        size_t cap = (a->out_len + len) * 2;
        char *more = realloc(a->out, cap);
        if (!more)
            return -1;
        a->out = more;
        a->out_cap = cap;
    }
    memcpy(a->out + a->out_len, buf, len);
    a->out_len += len;
    return (la_ssize_t)len;
}

static tw_status ar_failed(tw_dir_archive *a, const char *what)
{
    return tw_error_set(&a->err, TW_ERR_IO, a->dir, -1, "%s: %s", what, archive_error_string(a->ar));
}

/* The next file's header (or the archive's end). */
static tw_status next_entry(tw_dir_archive *a)
{
    if (a->next == a->n) {
        a->done = 1;
        return archive_write_close(a->ar) == ARCHIVE_OK ? TW_OK : ar_failed(a, "cannot end the archive");
    }
    const char *rel = a->files[a->next++];
    struct stat st;
    int dfd = open(a->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    a->fd = dfd < 0 ? -1 : openat(dfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* a file swapped for a link: refused */
    if (dfd >= 0)
        close(dfd);
    if (a->fd < 0 || fstat(a->fd, &st) != 0 || !S_ISREG(st.st_mode))
        return tw_error_errno(&a->err, rel, "cannot read the file");
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return tw_error_set(&a->err, TW_ERR_NOMEM, rel, -1, "out of memory");
    archive_entry_set_pathname(e, rel);
    archive_entry_set_size(e, st.st_size);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_mtime(e, st.st_mtim.tv_sec, 0);
    int r = archive_write_header(a->ar, e);
    archive_entry_free(e);
    return r == ARCHIVE_OK ? TW_OK : ar_failed(a, "cannot write an entry");
}

/* The next piece of the archive into out. */
static tw_status step(tw_dir_archive *a)
{
    if (a->fd < 0)
        return next_entry(a);
    ssize_t got = read(a->fd, a->chunk, sizeof a->chunk);
    if (got < 0)
        return tw_error_errno(&a->err, a->files[a->next - 1], "cannot read the file");
    if (got == 0) { /* the entry's end: libarchive pads a file that shrank meanwhile */
        close(a->fd);
        a->fd = -1;
        return archive_write_finish_entry(a->ar) == ARCHIVE_OK ? TW_OK : ar_failed(a, "cannot end an entry");
    }
    return archive_write_data(a->ar, a->chunk, (size_t)got) >= 0 ? TW_OK : ar_failed(a, "cannot write a file");
}

tw_status tw_dir_archive_open(const char *dir, tw_dir_archive **out, tw_error *err)
{
    tw_dir_archive *a = calloc(1, sizeof *a);
    if (!a)
        return tw_error_set(err, TW_ERR_NOMEM, dir, -1, "out of memory");
    a->dir = dir;
    a->fd = -1;
    tw_error_clear(&a->err);
    root_len = strlen(dir);
    while (root_len > 1 && dir[root_len - 1] == '/')
        root_len--;
    walking = a;
    int r = nftw(dir, add_file, 16, FTW_PHYS);
    walking = NULL;
    if (r != 0 && a->err.status == TW_OK)
        tw_error_errno(&a->err, dir, "cannot read the folder");
    if (a->err.status == TW_OK && a->n == 0)
        tw_error_set(&a->err, TW_ERR_INVALID, dir, -1, "no files in the folder (an image folder holds one folder of "
                     "images per class)");
    if (a->err.status == TW_OK && !(a->ar = archive_write_new()))
        tw_error_set(&a->err, TW_ERR_NOMEM, dir, -1, "out of memory");
    if (a->err.status == TW_OK &&
        (archive_write_set_format_pax_restricted(a->ar) != ARCHIVE_OK ||
         archive_write_set_bytes_per_block(a->ar, 0) != ARCHIVE_OK ||
         archive_write_open(a->ar, a, NULL, to_out, NULL) != ARCHIVE_OK))
        ar_failed(a, "cannot start the archive");
    if (a->err.status != TW_OK) {
        *err = a->err;
        tw_dir_archive_close(a);
        return err->status;
    }
    qsort(a->files, a->n, sizeof *a->files, by_name);
    *out = a;
    return TW_OK;
}

size_t tw_dir_archive_files(const tw_dir_archive *a) { return a->n; }

size_t tw_dir_archive_skipped(const tw_dir_archive *a) { return a->skipped; }

size_t tw_dir_archive_read(tw_dir_archive *a, char *buf, size_t size)
{
    while (a->out_at == a->out_len && !a->done && a->err.status == TW_OK) {
        a->out_at = a->out_len = 0;
        step(a);
    }
    if (a->out_at == a->out_len)
        return a->err.status == TW_OK ? 0 : (size_t)-1;
    size_t n = a->out_len - a->out_at < size ? a->out_len - a->out_at : size;
    memcpy(buf, a->out + a->out_at, n);
    a->out_at += n;
    return n;
}

const tw_error *tw_dir_archive_error(const tw_dir_archive *a) { return &a->err; }

void tw_dir_archive_close(tw_dir_archive *a)
{
    if (!a)
        return;
    if (a->fd >= 0)
        close(a->fd);
    if (a->ar)
        archive_write_free(a->ar);
    for (size_t i = 0; i < a->n; i++)
        free(a->files[i]);
    free(a->files);
    free(a->out);
    free(a);
}
