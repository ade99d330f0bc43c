/* rest.h — the HTTP side of the `tower` client commands: one libcurl request to a `tower serve`, its reply
 * and the server's error envelope.
 *
 * Owns: the server URL and token (--server, TOWER_URL, TOWER_TOKEN; the token goes as
 * `Authorization: Bearer`), requests with a JSON body, multipart uploads, downloads to a file, and
 * Server-Sent Event streams read line by line; turning a transport failure into a tw_error and a non-2xx
 * reply into its envelope's message. Does not own: what the routes mean (server/API.md) nor what the
 * commands print (client_main.c). */
#ifndef TW_REST_H
#define TW_REST_H

#include <stdio.h>

#include <jansson.h>

#include "status.h"

#define TW_REST_DEFAULT_URL "http://127.0.0.1:8080"

typedef struct {
    char base[1024];  /* the server URL without a trailing slash */
    char auth[1100];  /* "Authorization: Bearer TOKEN", or "" */
} tw_rest;

/* A reply: the HTTP status and, unless it went to a file or a stream, the body (owned, NUL-terminated). */
typedef struct {
    long http;
    char *body;
    size_t len;
} tw_rest_reply;

/* Bytes made as an upload sends them: up to size into buf; returns the count, 0 at the end, (size_t)-1 to
 * abort the upload. */
typedef size_t (*tw_rest_read_fn)(char *buf, size_t size, void *ctx);

/* One part of a multipart upload: a form field named `field` holding the file `path` (borrowed), or, when
 * read is set, the bytes read makes (of unknown length: the body is sent chunked), named `path` to the
 * server. */
typedef struct {
    const char *field;
    const char *path;
    tw_rest_read_fn read;
    void *ctx;
} tw_rest_part;

/* Called with each line of an event stream (without its newline; borrowed). Returns 0 to go on, 1 to
 * stop reading. */
typedef int (*tw_rest_line_fn)(const char *line, void *ctx);

/* server NULL: $TOWER_URL, else TW_REST_DEFAULT_URL; the token from $TOWER_TOKEN. TW_ERR_INVALID when the
 * URL is not http(s) or is too long. */
tw_status tw_rest_init(tw_rest *c, const char *server, tw_error *err);

/* method path [JSON body] → *reply (caller frees with tw_rest_reply_free). TW_ERR_IO when the server
 * cannot be reached; any HTTP status is TW_OK (the caller checks reply->http). */
tw_status tw_rest_call(const tw_rest *c, const char *method, const char *path, const json_t *body,
                       tw_rest_reply *reply, tw_error *err);
/* POST path as multipart/form-data with parts[n]. */
tw_status tw_rest_upload(const tw_rest *c, const char *path, const tw_rest_part *parts, int n,
                         tw_rest_reply *reply, tw_error *err);
/* GET path; a 2xx body goes to out, any other to reply->body. */
tw_status tw_rest_download(const tw_rest *c, const char *path, FILE *out, tw_rest_reply *reply,
                           tw_error *err);
/* GET path as a stream: each line of a 2xx body goes to fn as it arrives; any other to reply->body. */
tw_status tw_rest_stream(const tw_rest *c, const char *path, tw_rest_line_fn fn, void *ctx,
                         tw_rest_reply *reply, tw_error *err);

/* The reply body as JSON (new reference), or NULL with err set naming the path. */
json_t *tw_rest_json(const tw_rest_reply *reply, const char *path, tw_error *err);
/* Writes "MESSAGE (HTTP N CODE)" from a non-2xx reply's error envelope (or its raw body) into buf. */
void tw_rest_error_text(const tw_rest_reply *reply, char *buf, size_t size);
/* s percent-encoded for a URL path segment or query value (malloc'd; NULL out of memory). */
char *tw_rest_escape(const char *s);
int tw_rest_ok(const tw_rest_reply *reply);
void tw_rest_reply_free(tw_rest_reply *reply);

#endif
