/* atomic_file.c — temporary file, fsync, rename, fsync of the folder. See atomic_file.h.
 *
 * The folder is opened once (tw_fs_open_dir_of: never through a symlink under the data folder) and the
 * temporary is created, renamed and removed relative to it, so the final name stays in that folder. */
#define _GNU_SOURCE
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datafs.h"

enum { TMP_TRIES = 100 };

struct tw_atomic_file {
    int fd;           /* -1 once closed */
    int dfd;          /* the folder holding path, -1 once closed */
    int committed;
    char *path;       /* final name, owned */
    const char *name; /* path's last component (points into path) */
    char *tmp_name;   /* the temporary's name in dfd ("<name>.tmp.XXXXXX"), owned */
};

/* Creates "<name>.tmp.XXXXXX" in f->dfd with a random suffix, never reusing an existing name. */
static int create_temporary(tw_atomic_file *f)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char *x = f->tmp_name + strlen(f->tmp_name) - 6;
    for (int t = 0; t < TMP_TRIES; t++) {
        unsigned char r[6];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
            return -1;
        for (int i = 0; i < 6; i++)
            x[i] = chars[r[i] % (sizeof chars - 1)];
        int fd = openat(f->dfd, f->tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

tw_status tw_atomic_file_create(const char *path, tw_atomic_file **out, tw_error *err)
{
    *out = NULL;
    tw_atomic_file *f = calloc(1, sizeof *f);
    if (!f)
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    f->fd = f->dfd = -1;
    f->path = strdup(path);
    if (!f->path || (f->dfd = tw_fs_open_dir_of(f->path, &f->name)) < 0 ||
        asprintf(&f->tmp_name, "%s.tmp.XXXXXX", f->name) < 0 || (f->fd = create_temporary(f)) < 0) {
        tw_status s = !f->path ? tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory")
                               : tw_fs_error(err, path, "cannot create temporary file");
        free(f->tmp_name); /* never created: nothing to remove */
        f->tmp_name = NULL;
        tw_atomic_file_destroy(f);
        return s;
    }
    fchmod(f->fd, 0644);
    *out = f;
    return TW_OK;
}

int tw_atomic_file_fd(const tw_atomic_file *f) { return f->fd; }

const char *tw_atomic_file_path(const tw_atomic_file *f) { return f->path; }

tw_status tw_fsync_dir_of(const char *path, tw_error *err)
{
    const char *name;
    int dfd = tw_fs_open_dir_of(path, &name);
    if (dfd < 0)
        return tw_fs_error(err, path, "cannot open folder to fsync");
    int rc = fsync(dfd);
    close(dfd);
    return rc == 0 ? TW_OK : tw_error_errno(err, path, "fsync of folder failed");
}

tw_status tw_atomic_file_commit(tw_atomic_file *f, tw_error *err)
{
    tw_status s = TW_OK;
    if (fsync(f->fd) != 0)
        s = tw_error_errno(err, f->path, "fsync failed");
    if (close(f->fd) != 0 && s == TW_OK)
        s = tw_error_errno(err, f->path, "close failed");
    f->fd = -1;
    if (s != TW_OK)
        return s;
    if (renameat(f->dfd, f->tmp_name, f->dfd, f->name) != 0)
        return tw_error_errno(err, f->path, "rename of temporary file failed");
    f->committed = 1;
    return fsync(f->dfd) == 0 ? TW_OK : tw_error_errno(err, f->path, "fsync of folder failed");
}

void tw_atomic_file_destroy(tw_atomic_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp_name && !f->committed)
        unlinkat(f->dfd, f->tmp_name, 0);
    if (f->dfd >= 0)
        close(f->dfd);
    free(f->tmp_name);
    free(f->path);
    free(f);
}

tw_status tw_write_all(int fd, const void *data, size_t n, const char *name, tw_error *err)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return tw_error_errno(err, name, "write failed");
        p += w;
        n -= (size_t)w;
    }
    return TW_OK;
}

tw_status tw_atomic_write_file(const char *path, const void *data, size_t n, tw_error *err)
{
    tw_atomic_file *f;
    TW_TRY(tw_atomic_file_create(path, &f, err));
    tw_status s = tw_write_all(tw_atomic_file_fd(f), data, n, path, err);
    if (s == TW_OK)
        s = tw_atomic_file_commit(f, err);
    tw_atomic_file_destroy(f);
    return s;
}
