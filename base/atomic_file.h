/* atomic_file.h — durable "write to a temporary name, fsync, rename, fsync the folder" output files.
 *
 * Owns: the temporary file's name, descriptor and the commit/abort protocol (docs/reliability.md rule 1).
 * Does not own: what is written (callers write to tw_atomic_file_fd). A file that is neither committed
 * nor aborted is aborted by tw_atomic_file_destroy, so an error path leaves no partial output behind.
 * Not thread-safe: one owner at a time. */
#ifndef TW_ATOMIC_FILE_H
#define TW_ATOMIC_FILE_H

#include "status.h"

typedef struct tw_atomic_file tw_atomic_file;

/* Creates "<path>.tmp.XXXXXX" beside path (mode 0644). Caller owns *out. */
tw_status tw_atomic_file_create(const char *path, tw_atomic_file **out, tw_error *err);

/* The open descriptor of the temporary file (borrowed; valid until commit/destroy). */
int tw_atomic_file_fd(const tw_atomic_file *f);

/* The final path given to create (borrowed). */
const char *tw_atomic_file_path(const tw_atomic_file *f);

/* fsyncs the data, renames the temporary over the final path and fsyncs the folder. On failure the
 * temporary is removed and the final path is untouched. Either way the descriptor is closed. */
tw_status tw_atomic_file_commit(tw_atomic_file *f, tw_error *err);

/* Removes the temporary file if it was not committed, closes it and frees f. NULL-safe. */
void tw_atomic_file_destroy(tw_atomic_file *f);

/* fsyncs the folder that holds path, so a new or renamed entry in it is durable. */
tw_status tw_fsync_dir_of(const char *path, tw_error *err);

/* Writes all n bytes to fd, retrying on EINTR and short writes. Reports errors against `name`. */
tw_status tw_write_all(int fd, const void *data, size_t n, const char *name, tw_error *err);

/* Writes a whole small file atomically (create, write, commit). */
tw_status tw_atomic_write_file(const char *path, const void *data, size_t n, tw_error *err);

#endif
