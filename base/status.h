/* status.h — the error values every Tower module returns, and the tw_error a caller keeps on its stack.
 *
 * Owns: the tw_status codes, tw_error (message + file + offset/line), helpers to fill it, and the
 * TW_CHECK_* macro family that wraps foreign calls (zlib, protobuf-c, libc I/O) so that a failure records
 * the statement, file and line. Does not own: exiting (only cli/main.c exits) or logging. */
#ifndef TW_STATUS_H
#define TW_STATUS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TW_END = 1,               /* not an error: a stream ended cleanly (no more records) */
    TW_OK = 0,
    TW_ERR_INVALID = -1,      /* bad argument or bad user input (config, CLI, CSV cell) */
    TW_ERR_IO = -2,           /* open/read/write/fsync/rename failed; errno_value says why */
    TW_ERR_CORRUPT = -3,      /* a file's bytes are wrong: bad CRC, bad magic, not a protobuf */
    TW_ERR_TRUNCATED = -4,    /* a file ends inside a record or header */
    TW_ERR_TOO_LARGE = -5,    /* a length or size is past its cap or budget */
    TW_ERR_NOMEM = -6,        /* allocation failed */
    TW_ERR_UNSUPPORTED = -7,  /* well-formed but not something Tower handles (dtype, rank) */
    TW_ERR_INTERNAL = -8,     /* a foreign library failed in a way that is our bug or theirs */
} tw_status;

/* One error, filled by the function that failed. Lives on the caller's stack; holds no heap memory.
 * offset is a byte offset into `file` (or -1), line a 1-based line number (or 0). */
typedef struct {
    tw_status status;
    int errno_value;          /* errno at the failure, 0 if none */
    int64_t offset;           /* byte offset in file, -1 when not applicable */
    int64_t line;             /* 1-based line in file, 0 when not applicable */
    int64_t record;           /* 0-based record of a record file (TFRecord), -1 when not applicable */
    char file[512];           /* the file the error is about, "" if none */
    char message[512];        /* one human sentence, without the file/offset prefix */
} tw_error;

/* Resets *err (NULL-safe) to "no error". */
void tw_error_clear(tw_error *err);

/* Fills *err (NULL-safe) with status, file (may be NULL), offset (-1 = none) and a printf message.
 * Returns status so callers can write `return tw_error_set(...)`. */
tw_status tw_error_set(tw_error *err, tw_status status, const char *file, int64_t offset,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Like tw_error_set but for a line of a text file (CSV). */
tw_status tw_error_set_line(tw_error *err, tw_status status, const char *file, int64_t line,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Like tw_error_set for a failed system call: appends strerror(errno) and keeps errno. */
tw_status tw_error_errno(tw_error *err, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes "file: at byte N: message" / "file:LINE: message" / "message" into buf (always terminated). */
void tw_error_format(const tw_error *err, char *buf, size_t size);

/* Stable upper-case name of a status ("CORRUPT", "TRUNCATED", ...), for JSON and logs. */
const char *tw_status_name(tw_status status);

/* Wraps a foreign call that returns non-zero/NULL on failure: records the statement, file and line in
 * *err and returns `status` from the calling function. */
#define TW_CHECK_FOREIGN(ok_expr, err, status, what)                                               \
    do {                                                                                           \
        if (!(ok_expr))                                                                            \
            return tw_error_set((err), (status), NULL, -1, "%s failed: %s (%s:%d)", (what),        \
                                #ok_expr, __FILE__, __LINE__);                                     \
    } while (0)

/* Propagates a non-OK tw_status from a call. */
#define TW_TRY(expr)                                                                               \
    do {                                                                                           \
        tw_status tw_try_s_ = (expr);                                                              \
        if (tw_try_s_ != TW_OK)                                                                    \
            return tw_try_s_;                                                                      \
    } while (0)

#endif
