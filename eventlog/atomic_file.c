/* atomic_file.c — temporary file, fsync, rename, fsync of the folder. See atomic_file.h. */
#define _GNU_SOURCE
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tw_atomic_file {
    int fd;           /* -1 once closed */
    int committed;
    char *path;       /* final name, owned */
    char *tmp_path;   /* temporary name, owned */
};

tw_status tw_atomic_file_create(const char *path, tw_atomic_file **out, tw_error *err)
{
    *out = NULL;
    tw_atomic_file *f = calloc(1, sizeof *f);
    if (!f)
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path || asprintf(&f->tmp_path, "%s.tmp.XXXXXX", path) < 0) {
        f->tmp_path = NULL;
        tw_atomic_file_destroy(f);
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    }
    f->fd = mkostemp(f->tmp_path, O_CLOEXEC);
    if (f->fd < 0) {
        tw_status s = tw_error_errno(err, path, "cannot create temporary file");
        free(f->tmp_path);
        f->tmp_path = NULL;
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
    char *copy = strdup(path);
    if (!copy)
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (dfd < 0)
        return tw_error_errno(err, path, "cannot open folder to fsync");
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
    if (rename(f->tmp_path, f->path) != 0)
        return tw_error_errno(err, f->path, "rename of temporary file failed");
    f->committed = 1;
    return tw_fsync_dir_of(f->path, err);
}

void tw_atomic_file_destroy(tw_atomic_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp_path && !f->committed)
        unlink(f->tmp_path);
    free(f->tmp_path);
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
