/* dir_archive.h — a folder of class folders read as a tar archive, made as it is read: `tower upload NAME DIR/`
 * streams it to the server's image-folder upload (server/API.md, "Image folders") without writing it anywhere,
 * in memory of one chunk whatever the folder's size.
 *
 * Owns: the walk of DIR (every regular file under it, by its path relative to DIR, sorted, so the archive is
 * the same for the same folder; symbolic links and special files are not followed but named in
 * tw_dir_archive_skipped) and the tar's bytes, written by libarchive (pax restricted format). Does not own what
 * the server does with the entries (it takes the top-level folders as the classes). */
#ifndef TW_DIR_ARCHIVE_H
#define TW_DIR_ARCHIVE_H

#include <stddef.h>

#include "status.h"

typedef struct tw_dir_archive tw_dir_archive;

enum { TW_DIR_ARCHIVE_MAX_FILES = 10000000 };

/* Walks dir (borrowed while the archive lives). Errors: TW_ERR_IO naming a folder that cannot be read,
 * TW_ERR_INVALID for a folder without files, TW_ERR_TOO_LARGE past TW_DIR_ARCHIVE_MAX_FILES, TW_ERR_NOMEM. */
tw_status tw_dir_archive_open(const char *dir, tw_dir_archive **out, tw_error *err);

/* The files the archive holds, and the entries the walk left out (links, sockets, ...). */
size_t tw_dir_archive_files(const tw_dir_archive *a);
size_t tw_dir_archive_skipped(const tw_dir_archive *a);

/* Up to size bytes of the archive into buf: the count, 0 at its end, (size_t)-1 on an error (a file that
 * vanished or cannot be read: tw_dir_archive_error says which). */
size_t tw_dir_archive_read(tw_dir_archive *a, char *buf, size_t size);
const tw_error *tw_dir_archive_error(const tw_dir_archive *a);

void tw_dir_archive_close(tw_dir_archive *a);

#endif
