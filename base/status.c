/* status.c — filling and formatting tw_error. Owns nothing else. */
#include "status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tw_error_clear(tw_error *err)
{
    if (!err)
        return;
    memset(err, 0, sizeof *err);
    err->offset = -1;
    err->record = -1;
}

static tw_status set_v(tw_error *err, tw_status status, const char *file, int64_t offset,
                       int64_t line, const char *fmt, va_list ap)
{
    if (!err)
        return status;
    int saved_errno = err->errno_value;
    tw_error_clear(err);
    err->status = status;
    err->errno_value = saved_errno;
    err->offset = offset;
    err->line = line;
    if (file)
        snprintf(err->file, sizeof err->file, "%s", file);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    return status;
}

tw_status tw_error_set(tw_error *err, tw_status status, const char *file, int64_t offset,
                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err)
        err->errno_value = 0;
    tw_status s = set_v(err, status, file, offset, 0, fmt, ap);
    va_end(ap);
    return s;
}

tw_status tw_error_set_line(tw_error *err, tw_status status, const char *file, int64_t line,
                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err)
        err->errno_value = 0;
    tw_status s = set_v(err, status, file, -1, line, fmt, ap);
    va_end(ap);
    return s;
}

tw_status tw_error_errno(tw_error *err, const char *file, const char *fmt, ...)
{
    int e = errno;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    tw_status s = tw_error_set(err, TW_ERR_IO, file, -1, "%s: %s", what, strerror(e));
    if (err)
        err->errno_value = e;
    return s;
}

void tw_error_format(const tw_error *err, char *buf, size_t size)
{
    if (!err->file[0])
        snprintf(buf, size, "%s", err->message);
    else if (err->line > 0)
        snprintf(buf, size, "%s:%lld: %s", err->file, (long long)err->line, err->message);
    else if (err->offset >= 0)
        snprintf(buf, size, "%s: at byte %lld: %s", err->file, (long long)err->offset,
                 err->message);
    else
        snprintf(buf, size, "%s: %s", err->file, err->message);
}

const char *tw_status_name(tw_status status)
{
    switch (status) {
    case TW_END: return "END";
    case TW_OK: return "OK";
    case TW_ERR_INVALID: return "INVALID_ARGUMENT";
    case TW_ERR_IO: return "IO_ERROR";
    case TW_ERR_CORRUPT: return "CORRUPT";
    case TW_ERR_TRUNCATED: return "TRUNCATED";
    case TW_ERR_TOO_LARGE: return "TOO_LARGE";
    case TW_ERR_NOMEM: return "OUT_OF_MEMORY";
    case TW_ERR_UNSUPPORTED: return "UNSUPPORTED";
    case TW_ERR_INTERNAL: return "INTERNAL";
    }
    return "UNKNOWN";
}
