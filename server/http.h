/* http.h — the HTTP side of `tower serve`: libmicrohttpd, the request state, the reply helpers and the
 * one error envelope.
 *
 * Owns: the daemon (thread per connection, explicit connection, per-IP, memory and timeout limits, a
 * deadline for each request's headers, a per-address cap on event streams), route matching against the
 * table tw_http_start is given (404/405 from it, and 400 for a query parameter the route does not take),
 * the Host check on loopback, the origin rule and bearer-token auth for mutating routes, the body: JSON
 * bodies (Content-Type application/json, else 415) buffered up to 1 MiB and decoded strictly, upload
 * bodies streamed to the route's upload callbacks with the upload cap enforced before (Content-Length)
 * and while (chunked) reading, and every reply: JSON, error envelope, text, file, event stream. Never a
 * CORS grant. Does not own what a route does (api_*.c) nor the table (routes.c): it names no handler.
 * Thread-safety: each request is handled by one thread; the helpers below touch only their request. */
#ifndef TW_HTTP_H
#define TW_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server.h"

/* The stable error codes of the envelope, each with its HTTP status (one table in http.c). */
typedef enum {
    TW_API_INVALID_ARGUMENT = 0,
    TW_API_JSON_TOO_DEEP,
    TW_API_UNAUTHENTICATED,
    TW_API_PERMISSION_DENIED,
    TW_API_NOT_FOUND,
    TW_API_METHOD_NOT_ALLOWED,
    TW_API_CONFLICT,
    TW_API_PAYLOAD_TOO_LARGE,
    TW_API_UNSUPPORTED_MEDIA_TYPE,
    TW_API_DATASET_CORRUPT,
    TW_API_IDEMPOTENCY_MISMATCH,
    TW_API_RESOURCE_EXHAUSTED,
    TW_API_INSUFFICIENT_STORAGE,
    TW_API_UNAVAILABLE,
    TW_API_INTERNAL,
    TW_API_CODES
} tw_api_code;

const char *tw_api_code_name(tw_api_code c);

typedef struct tw_req tw_req;

/* Upload routes stream their body: begin runs after the headers (and may refuse with a reply), data per
 * chunk, and cleanup always, after the reply or when the connection dies. Each returns 0 to go on or -1
 * after it replied with an error. The handler of the route runs when the body is complete. */
typedef struct {
    int (*begin)(tw_server *S, tw_req *r);
    int (*data)(tw_server *S, tw_req *r, const char *chunk, size_t n);
    void (*cleanup)(tw_server *S, tw_req *r);
} tw_upload_ops;

enum {
    TW_ROUTE_JSON_BODY = 1, /* the body is a JSON object, decoded strictly before the handler runs */
    TW_ROUTE_UPLOAD = 2,    /* the body streams through the route's upload ops */
};

typedef void (*tw_handler)(tw_server *S, tw_req *r);

typedef struct tw_route {
    const char *method;           /* "GET", "POST", "DELETE" */
    const char *pattern;          /* "/api/v1/runs/{id}": {name} matches one non-empty segment */
    tw_handler handler;
    unsigned flags;
    const tw_upload_ops *upload;  /* TW_ROUTE_UPLOAD only */
    int status;                   /* the usual 2xx reply, for the OpenAPI document */
    const char *summary;          /* one line, for the OpenAPI document */
    const char *reply;            /* what a 2xx reply holds, for the OpenAPI document */
    const char *query;            /* the query parameters it accepts, space-separated ("!name": required);
                                   * any other is refused with 400; NULL: none */
} tw_route;

/* Starts the daemon on S->opt.listen, serving routes (borrowed for the server's life, terminated by a
 * zeroed entry: routes.c's TW_ROUTES), which S->routes then points at. *port receives the bound port.
 * Errors: TW_ERR_INVALID for a bad address, TW_ERR_IO when the socket cannot be bound. */
tw_status tw_http_start(tw_server *S, const tw_route *routes, int *port, tw_error *err);
void tw_http_stop(tw_server *S); /* NULL-safe; waits for the connection threads */

/* --- the request (all strings borrowed for the request's lifetime) --- */
const char *tw_req_param(const tw_req *r, const char *name);   /* path parameter, or NULL */
const char *tw_req_query(const tw_req *r, const char *name);   /* query argument, or NULL */
const char *tw_req_header(const tw_req *r, const char *name);  /* header, or NULL */
json_t *tw_req_json(const tw_req *r);                          /* the decoded body (borrowed) */
void *tw_req_upload(const tw_req *r);                          /* the upload state (borrowed) */
void tw_req_set_upload(tw_req *r, void *state);                /* stored for the upload ops */

/* Reads a non-negative integer query argument in [lo, hi] into *out (def when absent). Returns 0, or -1
 * after replying 400 naming the argument. */
int tw_req_query_int(tw_req *r, const char *name, long lo, long hi, long def, long *out);

/* --- replies (one per request; a second is ignored) --- */
void tw_reply_json(tw_req *r, int status, json_t *body);      /* steals body */
void tw_reply_error(tw_req *r, tw_api_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tw_reply_error_json(tw_req *r, tw_api_code code, json_t *error); /* steals: {"message", extras} */
void tw_reply_empty(tw_req *r, int status);
void tw_reply_text(tw_req *r, int status, const char *content_type, char *text, size_t n); /* takes text */
void tw_reply_static(tw_req *r, const char *content_type, const void *data, size_t n);   /* borrowed, static */
/* Takes fd; sends n bytes from offset 0; `download_name` (may be NULL) sets Content-Disposition. */
void tw_reply_file(tw_req *r, int fd, uint64_t n, const char *content_type, const char *download_name);

/* An event stream (Server-Sent Events). next() is called on the connection's thread whenever the client
 * can take more (pos: bytes sent so far); it may block, writes at most max bytes into buf and returns the
 * count (> 0), or -1 to end the stream; done() frees ctx when the stream ends for any reason. At most
 * opt.sse_limit streams are open per client address: one more is refused with 429 RESOURCE_EXHAUSTED
 * (done(ctx) runs at once), so streams never fill the per-address connection limit. */
typedef ssize_t (*tw_stream_next)(void *ctx, uint64_t pos, char *buf, size_t max);
void tw_reply_stream(tw_req *r, const char *content_type, tw_stream_next next, void (*done)(void *),
                     void *ctx);

/* A 200 body made piece by piece (a long list: api_runs_list.c), never held whole: next() as above, or -2
 * to abort the reply (the connection closes before the body's end, so the client sees it incomplete,
 * never a shorter well-formed body); done(ctx) runs when the reply ends for any reason, or at once when
 * it cannot be made. Not an event stream: not counted against opt.sse_limit. */
enum { TW_STREAM_END = -1, TW_STREAM_ABORT = -2 };
void tw_reply_pieces(tw_req *r, const char *content_type, tw_stream_next next, void (*done)(void *), void *ctx);

/* The envelope code for an engine/eventlog error (TW_ERR_CORRUPT -> DATASET_CORRUPT, ...). */
tw_api_code tw_api_code_for(const tw_error *err);

/* Maps an engine/eventlog status to the envelope (TW_ERR_INVALID -> INVALID_ARGUMENT, ...) and replies
 * with the formatted error. */
void tw_reply_status(tw_req *r, const tw_error *err);
/* The envelope's fields saying where in a file err is: "offset" (bytes) and "record" (0-based), when known. */
void tw_error_where(json_t *e, const tw_error *err);

/* Replies err (tw_reply_status) and logs it on stderr: for a failure on the server's own files (a
 * symlink met under the data folder) that the operator must see. */
void tw_api_reply_logged(tw_req *r, const tw_error *err);

/* The index of an HTTP status in tw_server.requests and its label ("200", ..., "other"). */
int tw_http_status_slot(int status);
const char *tw_http_status_label(int slot);

#endif
