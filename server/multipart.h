/* multipart.h — a streaming, strict multipart/form-data parser (RFC 7578 over RFC 2046) for uploads.
 *
 * Owns: reading the boundary out of the request's Content-Type, finding delimiters in the body, the
 * part header blocks (Content-Disposition name and filename, Content-Type), the caps below, and byte
 * offsets for every error. Does not own: what a part means, where its bytes go (the callbacks decide:
 * uploads stream them to files), the request's total size cap (the server's --max-upload), or
 * percent-decoding of file names (names and file names are handed over exactly as sent).
 *
 * The body is fed in chunks of any size (one byte to gigabytes) and may be split anywhere, a delimiter
 * included. Memory is constant: one struct of about 9 KiB (the delimiter, one header block, the current
 * field's name and file name), nothing proportional to the body. Part data is handed to part_data
 * zero-copy, as slices of the caller's chunk wherever possible; only the at most boundary + 4 bytes that
 * might begin a delimiter are held back across calls (as a count: they are always a prefix of the
 * delimiter, so they are re-sent from it).
 *
 * Grammar, as accepted:
 *   body      = preamble ["\r\n"] "--" boundary delimiter-tail *(part "\r\n--" boundary delimiter-tail)
 *               ... until a delimiter is followed by "--" (the close delimiter); then the epilogue.
 *   delimiter-tail = *(SP / HTAB) "\r\n" (transport padding, at most TW_MULTIPART_MAX_PADDING bytes)
 *   part      = header-lines "\r\n" data   (data: any bytes; the CRLF before the next "--" boundary
 *               belongs to the delimiter, not the data)
 * The first delimiter may lack its leading CRLF only at the very start of the body. The preamble and the
 * epilogue are ignored. A delimiter followed by anything else (a longer line that starts with
 * "--" boundary) is an error, as RFC 2046 forbids the boundary inside a part. A body without parts
 * ("--" boundary "--") is an error too. Header lines end in CRLF exactly (a bare CR or LF, a NUL, a
 * folded line or a line without ':' is TW_ERR_INVALID); header names are case-insensitive, unknown headers
 * are ignored, Content-Disposition and Content-Type may appear once each. Every part needs
 * `Content-Disposition: form-data; name=...`; parameter values are tokens or quoted strings with
 * backslash escapes; unknown parameters are ignored, a repeated name or filename parameter is refused.
 *
 * Errors (tw_error.offset: the byte offset in the body of the byte that broke the rule, or of the header
 * line; the message names the part, 1-based, and the rule, e.g. "multipart part 2: header block over 8192
 * bytes"): TW_ERR_INVALID for syntax, TW_ERR_TOO_LARGE for a header block or part count past its cap,
 * TW_ERR_TRUNCATED from finish when the close delimiter never came, or whatever a callback returned.
 * Errors are sticky: after one, every call returns the same status and error and no callback runs again.
 * A part that began may not see part_end after an error: the caller cleans up its own per-part state.
 *
 * Not thread-safe: one parser per request, fed from one thread at a time. */
#ifndef TW_MULTIPART_H
#define TW_MULTIPART_H

#include <stddef.h>

#include "status.h"

enum {
    TW_MULTIPART_MAX_BOUNDARY = 70,       /* RFC 2046 */
    TW_MULTIPART_MAX_HEADER_BYTES = 8192, /* one part's header lines, blank line included */
    TW_MULTIPART_MAX_PARTS = 64,
    TW_MULTIPART_MAX_NAME = 64,           /* bytes of a form field name */
    TW_MULTIPART_MAX_FILENAME = 255,      /* bytes of a file name */
    TW_MULTIPART_MAX_PADDING = 256,       /* transport padding (SP/HTAB) after a delimiter */
};

typedef struct tw_multipart tw_multipart;

typedef struct {
    /* A part begins. name: the form field name (non-empty, <= 64 bytes); filename: "" when absent
     * (<= 255 bytes); content_type: "" when absent. Borrowed for the call. name and filename hold no
     * control bytes (0x00-0x1f, 0x7f); bytes >= 0x80 (UTF-8) pass through. A non-OK return stops the
     * parser and is returned from tw_multipart_feed. */
    tw_status (*part_begin)(void *ctx, const char *name, const char *filename, const char *content_type,
                            tw_error *err);
    /* The part's next n >= 1 bytes (borrowed for the call), in any chunking: the caller's chunks are
     * sliced, and bytes held back at a chunk's end come in a separate call. */
    tw_status (*part_data)(void *ctx, const void *data, size_t n, tw_error *err);
    /* The part's data is complete (its closing delimiter was seen). */
    tw_status (*part_end)(void *ctx, tw_error *err);
    void *ctx; /* borrowed; passed to every callback */
} tw_multipart_callbacks;

/* Creates a parser for a body whose Content-Type header value is content_type (borrowed for the call;
 * a C string: a header holding a NUL must be refused by the caller, as this sees only the part before it).
 * cb is copied; cb->ctx is borrowed for the parser's life. The callbacks must all be non-NULL.
 * Caller owns *out (tw_multipart_destroy).
 * Errors: TW_ERR_UNSUPPORTED unless the media type is multipart/form-data (case-insensitive, parameters
 * allowed; a NULL or empty content_type too); TW_ERR_INVALID for malformed parameters, a missing,
 * repeated, empty or >70-byte boundary, or a boundary with a byte outside RFC 2046 bchars (DIGIT ALPHA
 * ' ( ) + _ , - . / : = ? and inner spaces; so never a NUL or control byte), quoted or not; TW_ERR_NOMEM. */
tw_status tw_multipart_create(const char *content_type, const tw_multipart_callbacks *cb, tw_multipart **out,
                              tw_error *err);

/* Parses the body's next n bytes (borrowed for the call; data may be NULL when n is 0), calling the
 * callbacks as parts begin, carry data and end. Bytes after the close delimiter are ignored.
 * Errors: see the file comment; sticky. */
tw_status tw_multipart_feed(tw_multipart *m, const void *data, size_t n, tw_error *err);

/* Call after the last byte: TW_OK when the close delimiter was seen, else TW_ERR_TRUNCATED (at the
 * body's length) naming where the body stopped. Sticky like feed; calling it again returns the same. */
tw_status tw_multipart_finish(tw_multipart *m, tw_error *err);

/* Parts begun so far (1-based number of the current part; 0 before the first). */
int tw_multipart_parts(const tw_multipart *m);

/* Frees the parser (NULL-safe). Calls no callback. */
void tw_multipart_destroy(tw_multipart *m);

#endif
