/* tar.h — a POSIX ustar archive of a few regular files, built in memory (a download of several files in
 * one reply: the TensorFlow checkpoint export).
 *
 * Owns: the 512-byte ustar header (name, mode 0644, size and mtime in octal, the checksum, type '0', magic
 * "ustar\0" "00"), the zero padding of each member to 512 bytes and the two zero blocks that end the
 * archive. Written by hand: three files with short names need ~60 lines, where libarchive would be a new
 * runtime dependency of the server. Does not own what the members are. Not thread-safe per archive. */
#ifndef TW_TAR_H
#define TW_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct {
    uint8_t *bytes; /* owned; tw_tar_free */
    size_t len, cap;
} tw_tar;

/* Appends one regular file: name (1 to 99 bytes, relative, no "..": else TW_ERR_INVALID), n bytes of
 * data (under 8 GiB), mtime in seconds since the epoch. Errors: TW_ERR_INVALID, TW_ERR_NOMEM. */
tw_status tw_tar_add(tw_tar *t, const char *name, const void *data, size_t n, uint64_t mtime, tw_error *err);

/* Ends the archive (two zero blocks). Errors: TW_ERR_NOMEM. */
tw_status tw_tar_finish(tw_tar *t, tw_error *err);

void tw_tar_free(tw_tar *t); /* NULL-safe; leaves *t empty */

#endif
