/* datafs.c — file operations confined to the data folder. See datafs.h. */
#define _GNU_SOURCE
#include "datafs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The confinement root: set by tw_fs_confine before threads start, read-only after. */
static struct {
    int fd;               /* O_PATH | O_DIRECTORY descriptor of the root; -1 while unconfined */
    char path[PATH_MAX];  /* the resolved root without a trailing '/' ("" for "/") */
    size_t len;
    tw_fs_mode mode;
} root = {.fd = -1};

static atomic_int no_openat2; /* the kernel answered ENOSYS once: walk from then on (any thread) */

tw_status tw_fs_confine(const char *dir, tw_error *err)
{
    if (root.fd >= 0)
        close(root.fd);
    root.fd = -1;
    root.len = 0;
    if (!dir)
        return TW_OK;
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return tw_error_errno(err, dir, "cannot resolve the data folder");
    int fd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tw_error_errno(err, real, "cannot open the data folder");
    root.fd = fd;
    root.len = strcmp(real, "/") ? strlen(real) : 0;
    memcpy(root.path, real, root.len);
    root.path[root.len] = 0;
    return TW_OK;
}

void tw_fs_set_mode(tw_fs_mode mode) { root.mode = mode; }

/* Appends the components of s to rel[PATH_MAX] (length *n), dropping "" and "."; ".." is EXDEV. */
static int add_components(const char *s, char *rel, size_t *n)
{
    while (*s) {
        size_t k = strcspn(s, "/");
        if (k == 2 && !strncmp(s, "..", 2)) {
            errno = EXDEV;
            return -1;
        }
        if (k && !(k == 1 && s[0] == '.')) {
            if (*n + k + 2 > PATH_MAX) {
                errno = ENAMETOOLONG;
                return -1;
            }
            if (*n)
                rel[(*n)++] = '/';
            memcpy(rel + *n, s, k);
            *n += k;
        }
        s += k + (s[k] == '/');
    }
    rel[*n] = 0;
    return 0;
}

/* 1 with path's place relative to the root in rel[PATH_MAX] ("." for the root itself) when path is at or
 * under the root; 0 when it is elsewhere or nothing is confined; -1 with errno. A relative path is taken
 * from the working folder. */
static int beneath(const char *path, char *rel)
{
    if (root.fd < 0)
        return 0;
    char abs[PATH_MAX];
    if (path[0] != '/') {
        if (!getcwd(abs, sizeof abs))
            return -1;
        size_t n = strlen(abs);
        if (n + 1 + strlen(path) >= sizeof abs) {
            errno = ENAMETOOLONG;
            return -1;
        }
        abs[n] = '/';
        strcpy(abs + n + 1, path);
        path = abs;
    }
    if (strncmp(path, root.path, root.len) || (path[root.len] && path[root.len] != '/'))
        return 0;
    size_t n = 0;
    if (add_components(path + root.len, rel, &n) != 0)
        return -1;
    if (!n)
        strcpy(rel, ".");
    return 1;
}

/* fd, unless it is a symlink (opened with O_PATH | O_NOFOLLOW): then ELOOP and fd is closed. */
static int refuse_link(int fd)
{
    struct stat st;
    if (fd < 0)
        return fd;
    int e = fstat(fd, &st) != 0 ? errno : S_ISLNK(st.st_mode) ? ELOOP : 0;
    if (!e)
        return fd;
    close(fd);
    errno = e;
    return -1;
}

/* After ENOTDIR for name in dfd (O_DIRECTORY meets a symlink so too): ELOOP for a symlink, else ENOTDIR.
 * Always -1. */
static int not_a_folder(int dfd, const char *name)
{
    struct stat st;
    errno = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR;
    return -1;
}

/* The fallback: rel (clean, as beneath makes it) opened one component at a time, none followed. */
static int walk(const char *rel, int flags, mode_t mode)
{
    int dfd = root.fd;
    const char *s = rel;
    for (size_t k; s[k = strcspn(s, "/")] == '/'; s += k + 1) {
        char name[NAME_MAX + 1];
        if (k > NAME_MAX) {
            if (dfd != root.fd)
                close(dfd);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(name, s, k);
        name[k] = 0;
        int fd = refuse_link(openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (dfd != root.fd)
            close(dfd);
        if (fd < 0)
            return -1;
        dfd = fd;
    }
    int fd = openat(dfd, s, flags | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno == ENOTDIR && (flags & O_DIRECTORY))
        fd = not_a_folder(dfd, s);
    else if (flags & O_PATH)
        fd = refuse_link(fd);
    int e = errno;
    if (dfd != root.fd)
        close(dfd);
    errno = e;
    return fd;
}

static int open_beneath(const char *rel, int flags, mode_t mode)
{
    if (root.mode == TW_FS_OPENAT2 && !atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                               .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
        long fd = syscall(SYS_openat2, root.fd, rel, &how, sizeof how);
        if (fd >= 0 || errno != ENOSYS)
            return (int)fd;
        atomic_store_explicit(&no_openat2, 1, memory_order_relaxed);
    }
    return walk(rel, flags, mode);
}

int tw_fs_open(const char *path, int flags, mode_t mode)
{
    char rel[PATH_MAX];
    int b = beneath(path, rel);
    return b < 0 ? -1 : b ? open_beneath(rel, flags, mode) : open(path, flags | O_CLOEXEC, mode);
}

DIR *tw_fs_opendir(const char *path)
{
    int fd = tw_fs_open(path, O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (fd >= 0 && !d) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

/* The folder of rel under the root (O_PATH) and rel's last component; -1 with errno. */
static int parent_beneath(const char *rel, const char **name)
{
    const char *slash = strrchr(rel, '/');
    *name = slash ? slash + 1 : rel;
    if (!slash)
        return open_beneath(".", O_PATH | O_DIRECTORY, 0);
    char dir[PATH_MAX];
    memcpy(dir, rel, (size_t)(slash - rel));
    dir[slash - rel] = 0;
    return open_beneath(dir, O_PATH | O_DIRECTORY, 0);
}

/* beneath() for an operation on path's entry in its folder: the root's own entry lies outside it (0). */
static int entry_beneath(const char *path, char *rel)
{
    int b = beneath(path, rel);
    return b > 0 && !strcmp(rel, ".") ? 0 : b;
}

/* Runs op on the last component of rel (a path under the root, not the root itself); -1 with errno. */
static int at_parent(const char *rel, int (*op)(int dfd, const char *name, mode_t mode), mode_t mode)
{
    const char *name;
    int dfd = parent_beneath(rel, &name);
    if (dfd < 0)
        return -1;
    int rc = op(dfd, name, mode);
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

static int mkdir_at(int dfd, const char *name, mode_t mode) { return mkdirat(dfd, name, mode); }

static int unlink_at(int dfd, const char *name, mode_t mode)
{
    (void)mode;
    return unlinkat(dfd, name, 0);
}

int tw_fs_mkdir(const char *path, mode_t mode)
{
    char rel[PATH_MAX];
    int b = entry_beneath(path, rel);
    return b < 0 ? -1 : b ? at_parent(rel, mkdir_at, mode) : mkdir(path, mode);
}

tw_status tw_fs_mkdirs(const char *path, const char *what, tw_error *err)
{
    char dir[PATH_MAX];
    if (!path[0])
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: the path is empty", what);
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "%s: the path is too long", what);
    for (char *p = dir + 1;; p++) { /* each prefix ending before a '/', then the whole path */
        if (*p && *p != '/')
            continue;
        char end = *p;
        *p = '\0';
        if (tw_fs_mkdir(dir, 0755) != 0 && errno != EEXIST)
            return tw_fs_error(err, dir, "%s", what);
        if (!(*p = end))
            return TW_OK;
    }
}

int tw_fs_unlink(const char *path)
{
    char rel[PATH_MAX];
    int b = entry_beneath(path, rel);
    return b < 0 ? -1 : b ? at_parent(rel, unlink_at, 0) : unlink(path);
}

int tw_fs_stat(const char *path, struct stat *st)
{
    char rel[PATH_MAX];
    int b = beneath(path, rel);
    if (b <= 0)
        return b < 0 ? -1 : stat(path, st);
    int fd = open_beneath(rel, O_PATH, 0);
    if (fd < 0)
        return -1;
    int rc = fstat(fd, st);
    close(fd);
    return rc;
}

int tw_fs_open_dir_of(const char *path, const char **name)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    const char *slash = memrchr(path, '/', n);
    *name = slash ? slash + 1 : path;
    char dir[PATH_MAX];
    size_t k = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    if (k >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, slash ? path : ".", k);
    dir[k] = 0;
    return tw_fs_open(dir, O_RDONLY | O_DIRECTORY, 0);
}

/* Removes name in dfd and everything under it, following nothing. */
static int remove_at(int dfd, const char *name)
{
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rc = remove_at(dirfd(d), e->d_name);
    closedir(d);
    return rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT ? -1 : rc;
}

int tw_fs_remove_tree(const char *path)
{
    const char *name;
    int dfd = tw_fs_open_dir_of(path, &name);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = remove_at(dfd, name);
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

tw_status tw_fs_error(tw_error *err, const char *path, const char *fmt, ...)
{
    int e = errno;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    errno = e;
    if (e != ELOOP && e != EXDEV)
        return tw_error_errno(err, path, "%s", what);
    tw_error_set(err, TW_ERR_IO, path, -1, "%s: %s", what,
                 e == ELOOP ? "a symbolic link under the data folder (not followed)"
                            : "a path that leads out of the data folder (refused)");
    if (err)
        err->errno_value = e;
    return TW_ERR_IO;
}
