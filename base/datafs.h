/* datafs.h — file operations confined to the data folder: nothing under it is reached through a symlink.
 *
 * Owns: the process-wide confinement root (set once at start-up by `tower serve` and by the trainer it
 * starts, `tower train --data-root`) and the file operations every module uses on paths that may lie under
 * it: open (read, write, create, append), opendir, mkdir (and mkdir -p), unlink, stat, the folder that holds a path (for
 * atomic_file's create/rename/fsync) and remove-tree. Does not own: what is read or written, or error
 * reports (callers report against their own path and sentence; tw_fs_error words the two errnos below).
 *
 * A path at or under the root (absolute, or relative to the working folder) is resolved relative to a
 * descriptor of the root with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or, where the kernel lacks
 * openat2 (ENOSYS), by an openat walk with O_NOFOLLOW per component. A symlink met anywhere on the way
 * fails with ELOOP; a ".." component fails with EXDEV. Any other path (Debian's Fashion-MNIST, chart.js,
 * files named on a `tower train`/`tower convert` command line), and every path while no root is set, goes
 * to the plain libc call, as before.
 *
 * Written by hand: no library confines path resolution; this is a thin layer over the kernel's openat2
 * and the *at calls. The calls mirror the libc calls they replace (-1 and errno, a descriptor, a DIR *),
 * so each call site keeps its own error report. The root is set before any thread starts and read-only
 * after that. */
#ifndef TW_DATAFS_H
#define TW_DATAFS_H

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "status.h"

/* How a confined path is resolved: by openat2 when the kernel has it (falling back to the walk on
 * ENOSYS), or always by the O_NOFOLLOW walk (the unit test exercises the fallback with it). */
typedef enum { TW_FS_OPENAT2, TW_FS_WALK } tw_fs_mode;

/* Confines every later call to the folder root (which must exist; it is resolved once with realpath).
 * NULL lifts the confinement. Call before any thread starts. */
tw_status tw_fs_confine(const char *root, tw_error *err);

/* Chooses the resolution mode (default TW_FS_OPENAT2). */
void tw_fs_set_mode(tw_fs_mode mode);

/* open(2): a descriptor (O_CLOEXEC is always added) or -1 with errno. */
int tw_fs_open(const char *path, int flags, mode_t mode);

/* opendir(3): NULL with errno on failure. */
DIR *tw_fs_opendir(const char *path);

/* mkdir(2), unlink(2): 0 or -1 with errno. */
int tw_fs_mkdir(const char *path, mode_t mode);
int tw_fs_unlink(const char *path);

/* Creates the folder path and every missing folder above it (0755), as `mkdir -p` and TensorFlow's writers
 * do; one that exists is fine. Errors: tw_fs_error naming the folder that could not be made, in the words
 * `what` ("cannot create the log folder"); TW_ERR_INVALID for an empty path or one over PATH_MAX. */
tw_status tw_fs_mkdirs(const char *path, const char *what, tw_error *err);

/* stat(2) of path; under the root the final component is not followed either (a symlink is ELOOP). */
int tw_fs_stat(const char *path, struct stat *st);

/* Opens the folder that holds path (O_RDONLY | O_DIRECTORY, for the *at calls and fsync) and points
 * *name at path's last component. -1 with errno on failure. */
int tw_fs_open_dir_of(const char *path, const char **name);

/* Removes path and, if it is a folder, everything in it, never following a symlink (a link is removed,
 * not its target). A missing path is not an error. 0 or -1 with errno (the walk stops at the first
 * failure). */
int tw_fs_remove_tree(const char *path);

/* tw_error_errno for a failed tw_fs_* call (errno as it left it): ELOOP and EXDEV are worded as the
 * refusals they are ("a symbolic link under the data folder (not followed)"). Returns err->status. */
tw_status tw_fs_error(tw_error *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
