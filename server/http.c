/* http.c — libmicrohttpd under the route table: limits, matching, auth, bodies, replies, the envelope.
 *
 * Owns the daemon and the per-request state (tw_req, freed in the completion callback). One thread per
 * connection: a blocking event stream or a long upload holds only its own thread, and the connection
 * limit bounds the threads. libmicrohttpd's PostProcessor is not used (docs/reliability.md rule 5): upload bodies go
 * to the route's own streaming callbacks. A reply is stored by the tw_reply_* helpers and queued by the
 * dispatcher at the end of the callback (libmicrohttpd accepts a response only at those points). */
#define _GNU_SOURCE
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "deadlines.h"
#include "logtext.h"
#include "resolve.h"

enum {
    JSON_BODY_CAP = 1 << 20, /* bytes of a JSON request body */
    MAX_PARAMS = 4,
    MAX_QUERY_ARGS = 16,    /* query parameters of one request */
    QUERY_VALUE_BYTES = 1024,
    MAX_SEGMENTS = 12,
    PARAM_BYTES = 128,
    CONNECTION_MEMORY = 256 * 1024, /* per connection: headers plus the read buffer uploads arrive in (256 KiB:
                                      * 4x fewer syscalls than 64 KiB; 1 MiB was no faster) */
};

/* The bytes an upload may still send after crossing the cap, discarded, so that the client can read the
 * 413 (libmicrohttpd queues a reply only once the body is complete); past it the connection is closed. */
static const uint64_t DISCARD_ALLOWANCE = 64ull << 20;

static const struct {
    const char *name;
    int http;
} API_CODES[TW_API_CODES] = {
    [TW_API_INVALID_ARGUMENT] = {"INVALID_ARGUMENT", 400},
    [TW_API_JSON_TOO_DEEP] = {"JSON_TOO_DEEP", 400},
    [TW_API_UNAUTHENTICATED] = {"UNAUTHENTICATED", 401},
    [TW_API_PERMISSION_DENIED] = {"PERMISSION_DENIED", 403},
    [TW_API_NOT_FOUND] = {"NOT_FOUND", 404},
    [TW_API_METHOD_NOT_ALLOWED] = {"METHOD_NOT_ALLOWED", 405},
    [TW_API_CONFLICT] = {"CONFLICT", 409},
    [TW_API_PAYLOAD_TOO_LARGE] = {"PAYLOAD_TOO_LARGE", 413},
    [TW_API_UNSUPPORTED_MEDIA_TYPE] = {"UNSUPPORTED_MEDIA_TYPE", 415},
    [TW_API_DATASET_CORRUPT] = {"DATASET_CORRUPT", 422},
    [TW_API_IDEMPOTENCY_MISMATCH] = {"IDEMPOTENCY_MISMATCH", 422},
    [TW_API_RESOURCE_EXHAUSTED] = {"RESOURCE_EXHAUSTED", 429},
    [TW_API_INSUFFICIENT_STORAGE] = {"INSUFFICIENT_STORAGE", 507},
    [TW_API_UNAVAILABLE] = {"UNAVAILABLE", 503},
    [TW_API_INTERNAL] = {"INTERNAL", 500},
};

const char *tw_api_code_name(tw_api_code c) { return API_CODES[c].name; }

/* The statuses /metrics counts one by one; the last slot counts every other. */
static const struct {
    int status;
    const char *label;
} STATUS_SLOTS[TW_STATUS_SLOTS] = {
    {200, "200"}, {201, "201"}, {202, "202"}, {204, "204"}, {304, "304"}, {400, "400"},
    {401, "401"}, {403, "403"}, {404, "404"}, {405, "405"}, {409, "409"}, {413, "413"},
    {415, "415"}, {422, "422"}, {500, "500"}, {0, "other"},
};

int tw_http_status_slot(int status)
{
    for (int i = 0; i < TW_STATUS_SLOTS - 1; i++)
        if (STATUS_SLOTS[i].status == status)
            return i;
    return TW_STATUS_SLOTS - 1;
}

const char *tw_http_status_label(int slot) { return STATUS_SLOTS[slot].label; }

/* Open event streams of one client address. */
typedef struct {
    struct sockaddr_storage addr;
    unsigned n;
} stream_count;

struct tw_http {
    struct MHD_Daemon *daemon;
    atomic_int port;          /* the bound port, stored once MHD has bound it (its threads read it: admit) */
    int loopback;
    pthread_mutex_t mu;       /* guards streams */
    tw_deadlines *deadlines;  /* each connection's (deadlines.h) */
    stream_count *streams;    /* opt.conn_limit entries; n == 0 is free */
};

struct tw_req {
    tw_server *S;
    struct MHD_Connection *conn;
    const char *method;
    const tw_route *route;
    char params[MAX_PARAMS][2][PARAM_BYTES]; /* name, value */
    int n_params;
    char *body;            /* JSON body, NUL-terminated; owned */
    size_t body_len;
    json_t *json;          /* decoded body; owned */
    void *upload;          /* the upload ops' state */
    uint64_t received;     /* body bytes seen */
    uint64_t discarded;    /* body bytes dropped after an error */
    int began;             /* upload begin ran */
    int status;            /* of the stored reply */
    struct MHD_Response *response; /* stored reply, queued by the dispatcher */
};

/* ================================ replies ================================ */

static void store_reply(tw_req *r, int status, struct MHD_Response *resp, const char *content_type)
{
    if (!resp)
        return;
    if (r->response) { /* one reply per request: keep the first */
        MHD_destroy_response(resp);
        return;
    }
    if (content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    r->response = resp;
    r->status = status;
}

void tw_reply_text(tw_req *r, int status, const char *content_type, char *text, size_t n)
{
    store_reply(r, status, MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE),
                content_type);
}

void tw_reply_static(tw_req *r, const char *content_type, const void *data, size_t n)
{
    store_reply(r, 200, MHD_create_response_from_buffer(n, (void *)data, MHD_RESPMEM_PERSISTENT),
                content_type);
}

void tw_reply_json(tw_req *r, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":\"out of memory\"}}";
        tw_reply_static(r, "application/json", oom, sizeof oom - 1);
        r->status = 503;
        return;
    }
    tw_reply_text(r, status, "application/json", text, strlen(text));
}

void tw_reply_error_json(tw_req *r, tw_api_code code, json_t *error)
{
    if (error)
        json_object_set_new(error, "code", json_string(API_CODES[code].name));
    atomic_fetch_add(&r->S->errors[code], 1);
    tw_reply_json(r, API_CODES[code].http, json_pack("{s:o*}", "error", error));
}

/* The bytes of the UTF-8 sequence at s (1 to 4), or 0 when it is not one (RFC 3629: no overlong form, no
 * surrogate, nothing past U+10FFFF), as jansson checks. */
static int utf8_sequence(const unsigned char *s)
{
    int n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
          : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    unsigned char lo = s[0] == 0xe0 ? 0xa0 : s[0] == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = s[0] == 0xed ? 0x9f : s[0] == 0xf4 ? 0x8f : 0xbf;
    for (int i = 1; i < n; i++)
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
            return 0;
    return n;
}

/* {"message": msg} with every byte that is not UTF-8 in msg made '?' (new): a message quotes what the
 * client sent (a query key, a file's bytes) and may cut it inside a character, and jansson refuses a
 * string that is not UTF-8, which left the envelope empty ({}). */
static json_t *message_json(char *msg)
{
    for (unsigned char *p = (unsigned char *)msg; *p;) {
        int n = utf8_sequence(p);
        if (!n)
            *p = '?';
        p += n ? n : 1;
    }
    return json_pack("{s:s}", "message", msg);
}

void tw_reply_error(tw_req *r, tw_api_code code, const char *fmt, ...)
{
    char msg[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tw_reply_error_json(r, code, message_json(msg));
}

void tw_reply_empty(tw_req *r, int status)
{
    store_reply(r, status, MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT), NULL);
}

void tw_reply_file(tw_req *r, int fd, uint64_t n, const char *content_type, const char *download_name)
{
    struct MHD_Response *resp = MHD_create_response_from_fd64(n, fd);
    if (!resp) {
        close(fd);
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    if (download_name) {
        char cd[300];
        snprintf(cd, sizeof cd, "attachment; filename=\"%s\"", download_name);
        MHD_add_response_header(resp, "Content-Disposition", cd);
    }
    store_reply(r, 200, resp, content_type);
}

/* 1 when a and b are the same client address (the port aside). */
static int same_address(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return 0;
}

/* Takes a stream slot for the client of conn: its entry in h->streams, or NULL when the address has
 * opt.sse_limit streams open already. */
static stream_count *stream_take(tw_server *S, struct MHD_Connection *conn)
{
    tw_http *h = S->http;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return NULL;
    stream_count *mine = NULL, *free_slot = NULL;
    pthread_mutex_lock(&h->mu);
    for (unsigned i = 0; i < S->opt.conn_limit && !mine; i++) {
        stream_count *e = &h->streams[i];
        if (e->n && same_address(ci->client_addr, &e->addr))
            mine = e;
        else if (!e->n && !free_slot)
            free_slot = e;
    }
    if (!mine && free_slot) {
        mine = free_slot;
        memset(&mine->addr, 0, sizeof mine->addr);
        memcpy(&mine->addr, ci->client_addr,
               ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    }
    if (mine && mine->n >= S->opt.sse_limit)
        mine = NULL;
    if (mine)
        mine->n++;
    pthread_mutex_unlock(&h->mu);
    return mine;
}

typedef struct {
    tw_http *h;
    stream_count *slot;
    tw_stream_next next;
    void (*done)(void *);
    void *ctx;
} stream;

static ssize_t stream_next(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *st = cls;
    return st->next(st->ctx, pos, buf, max);
}

static void stream_done(void *cls)
{
    stream *st = cls;
    pthread_mutex_lock(&st->h->mu);
    st->slot->n--;
    pthread_mutex_unlock(&st->h->mu);
    st->done(st->ctx);
    free(st);
}

void tw_reply_stream(tw_req *r, const char *content_type, tw_stream_next next, void (*done)(void *),
                     void *ctx)
{
    stream *st = malloc(sizeof *st);
    stream_count *slot = st ? stream_take(r->S, r->conn) : NULL;
    if (!slot) {
        done(ctx);
        free(st);
        if (st)
            tw_reply_error(r, TW_API_RESOURCE_EXHAUSTED,
                           "this client address has %u event streams open, the server's limit (--sse-limit)",
                           r->S->opt.sse_limit);
        else
            tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    *st = (stream){r->S->http, slot, next, done, ctx};
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_next, st,
                                                                  stream_done);
    if (!resp) {
        stream_done(st);
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    store_reply(r, 200, resp, content_type);
}

void tw_reply_pieces(tw_req *r, const char *content_type, tw_stream_next next, void (*done)(void *), void *ctx)
{
    _Static_assert(TW_STREAM_END == MHD_CONTENT_READER_END_OF_STREAM, "the end of a stream is libmicrohttpd's");
    _Static_assert(TW_STREAM_ABORT == MHD_CONTENT_READER_END_WITH_ERROR, "an aborted stream is libmicrohttpd's");
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, next, ctx, done);
    if (!resp) {
        done(ctx);
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory");
        return;
    }
    store_reply(r, 200, resp, content_type);
}

tw_api_code tw_api_code_for(const tw_error *err)
{
    switch (err->status) {
    case TW_ERR_INVALID:
    case TW_ERR_UNSUPPORTED: return TW_API_INVALID_ARGUMENT;
    case TW_ERR_CORRUPT:
    case TW_ERR_TRUNCATED: return TW_API_DATASET_CORRUPT;
    case TW_ERR_TOO_LARGE: return TW_API_PAYLOAD_TOO_LARGE;
    case TW_ERR_NOMEM: return TW_API_UNAVAILABLE;
    case TW_ERR_IO:
        return err->errno_value == ENOSPC || err->errno_value == EDQUOT ? TW_API_INSUFFICIENT_STORAGE
                                                                       : TW_API_INTERNAL;
    default: return TW_API_INTERNAL;
    }
}

void tw_error_where(json_t *e, const tw_error *err)
{
    if (err->offset >= 0)
        json_object_set_new(e, "offset", json_integer(err->offset));
    if (err->record >= 0)
        json_object_set_new(e, "record", json_integer(err->record));
}

void tw_reply_status(tw_req *r, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    json_t *e = message_json(msg);
    tw_error_where(e, err);
    tw_reply_error_json(r, tw_api_code_for(err), e);
}

void tw_api_reply_logged(tw_req *r, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    tw_log("tower serve: a %s request failed: %s", r->method, msg);
    tw_reply_status(r, err);
}

/* ================================ the request ================================ */

json_t *tw_req_json(const tw_req *r) { return r->json; }
void *tw_req_upload(const tw_req *r) { return r->upload; }
void tw_req_set_upload(tw_req *r, void *state) { r->upload = state; }

const char *tw_req_param(const tw_req *r, const char *name)
{
    for (int i = 0; i < r->n_params; i++)
        if (!strcmp(r->params[i][0], name))
            return r->params[i][1];
    return NULL;
}

const char *tw_req_query(const tw_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *tw_req_header(const tw_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

int tw_req_query_int(tw_req *r, const char *name, long lo, long hi, long def, long *out)
{
    const char *v = tw_req_query(r, name);
    *out = def;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter '%s' must be an integer from %ld to %ld",
                       name, lo, hi);
        return -1;
    }
    *out = n;
    return 0;
}

/* ================================ routing ================================ */

/* Splits path at '/' into at most MAX_SEGMENTS segments (pointers into buf). Returns the count, or -1. */
static int split_path(const char *path, char *buf, size_t size, char **seg)
{
    if (strlen(path) >= size || path[0] != '/')
        return -1;
    strcpy(buf, path + 1);
    int n = 0;
    for (char *s = buf, *save = NULL, *t; (t = strtok_r(s, "/", &save)); s = NULL) {
        if (n == MAX_SEGMENTS)
            return -1;
        seg[n++] = t;
    }
    return n;
}

/* Matches url against pattern; fills r's parameters. Returns 1 on a match. */
static int match(const char *pattern, const char *url, tw_req *r)
{
    char pbuf[256], ubuf[1024], *ps[MAX_SEGMENTS], *us[MAX_SEGMENTS];
    int np = split_path(pattern, pbuf, sizeof pbuf, ps), nu = split_path(url, ubuf, sizeof ubuf, us);
    if (np < 0 || np != nu)
        return 0;
    r->n_params = 0;
    for (int i = 0; i < np; i++) {
        size_t pl = strlen(ps[i]);
        if (ps[i][0] == '{' && ps[i][pl - 1] == '}') {
            if (r->n_params == MAX_PARAMS || pl - 2 >= PARAM_BYTES || strlen(us[i]) >= PARAM_BYTES)
                return 0;
            snprintf(r->params[r->n_params][0], PARAM_BYTES, "%.*s", (int)(pl - 2), ps[i] + 1);
            snprintf(r->params[r->n_params][1], PARAM_BYTES, "%s", us[i]);
            r->n_params++;
        } else if (strcmp(ps[i], us[i])) {
            return 0;
        }
    }
    return 1;
}

/* Appends ", NAME" (or "NAME" first) to the Allow list in allow[size]. */
static void allow_add(char *allow, size_t size, const char *name)
{
    size_t n = strlen(allow);
    snprintf(allow + n, size - n, "%s%s", n ? ", " : "", name);
}

/* Finds the route for method + url; replies 404/405 when there is none. A 405 carries the Allow header
 * RFC 9110 §15.5.6 requires: the methods the table has for that path (GET brings HEAD). */
static const tw_route *route_for(tw_req *r, const char *method, const char *url)
{
    char allow[128] = "";
    for (const tw_route *rt = r->S->routes; rt->method; rt++) {
        if (!match(rt->pattern, url, r))
            continue;
        if (!strcmp(rt->method, method) || (!strcmp(method, "HEAD") && !strcmp(rt->method, "GET")))
            return rt;
        allow_add(allow, sizeof allow, rt->method);
        if (!strcmp(rt->method, "GET"))
            allow_add(allow, sizeof allow, "HEAD");
    }
    if (!allow[0]) {
        tw_reply_error(r, TW_API_NOT_FOUND, "no route %s %s", method, url);
        return NULL;
    }
    tw_reply_error(r, TW_API_METHOD_NOT_ALLOWED, "%s is not allowed on %s (allowed: %s)", method, url, allow);
    if (r->response)
        MHD_add_response_header(r->response, "Allow", allow);
    return NULL;
}

/* ================================ checks ================================ */

static int loopback_host(const char *host, int port)
{
    static const char *const names[] = {"127.0.0.1", "localhost", "[::1]"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        if (strncasecmp(host, names[i], n))
            continue;
        if (!host[n])
            return 1;
        char *end;
        if (host[n] == ':' && strtol(host + n + 1, &end, 10) == port && !*end)
            return 1;
    }
    return 0;
}

/* Constant-time comparison of the bearer token. */
static int token_ok(const char *header, const char *token)
{
    static const char prefix[] = "Bearer ";
    if (!header || strncmp(header, prefix, sizeof prefix - 1))
        return 0;
    header += sizeof prefix - 1;
    size_t a = strlen(header), b = strlen(token);
    unsigned char diff = a != b;
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)header[i < a ? i : 0] ^ (unsigned char)token[i];
    return diff == 0;
}

/* 1 when origin (an Origin header) is this server's own: http:// or https:// and the request's Host, or
 * the one --origin the server was given. */
static int own_origin(const tw_req *r, const char *origin)
{
    const char *host = tw_req_header(r, MHD_HTTP_HEADER_HOST), *rest = NULL;
    if (!strncasecmp(origin, "http://", 7))
        rest = origin + 7;
    else if (!strncasecmp(origin, "https://", 8))
        rest = origin + 8;
    if (host && rest && !strcasecmp(rest, host))
        return 1;
    return r->S->opt.origin && !strcasecmp(origin, r->S->opt.origin);
}

/* The origin rule: a request that changes something acts only when a browser says it comes from this
 * server's own page (Sec-Fetch-Site same-origin or none, Origin our own) or says nothing (curl, scripts).
 * Browsers send Origin on every cross-origin POST, so a foreign page's form, fetch or beacon never acts,
 * whatever its Content-Type; "Origin: null" (sandboxed frames, file: pages) is refused too. Returns 0 or
 * -1 (replied 403). */
static int check_origin(tw_req *r)
{
    const char *site = tw_req_header(r, "Sec-Fetch-Site"), *origin = tw_req_header(r, "Origin");
    if (site && strcasecmp(site, "same-origin") && strcasecmp(site, "none")) {
        tw_reply_error(r, TW_API_PERMISSION_DENIED,
                       "%s %s from another site (Sec-Fetch-Site: %.40s) is refused: only this server's own page "
                       "may change things",
                       r->route->method, r->route->pattern, site);
        return -1;
    }
    if (origin && !own_origin(r, origin)) {
        tw_reply_error(r, TW_API_PERMISSION_DENIED,
                       "%s %s from the origin '%.200s' is refused: only this server's own page (or --origin) may "
                       "change things",
                       r->route->method, r->route->pattern, origin);
        return -1;
    }
    return 0;
}

/* 1 when the space-separated list (words may start with '!') names key[0, n). */
static int declared(const char *list, const char *key, size_t n)
{
    for (const char *w = list; w && *w;) {
        w += *w == '!';
        size_t len = strcspn(w, " ");
        if (len == n && !memcmp(w, key, n))
            return 1;
        w += len;
        w += *w == ' ';
    }
    return 0;
}

typedef struct {
    tw_req *r;
    int count;
} query_scan;

/* 400 for a query parameter the route does not declare, listing those it does ("it takes: name,
 * label_column"; the route table marks required ones "!name"). */
static void unknown_arg(tw_req *r, const char *key)
{
    const tw_route *rt = r->route;
    char list[512] = "";
    size_t len = 0;
    for (const char *c = rt->query ? rt->query : ""; *c && len + 3 < sizeof list; c++)
        if (*c == ' ')
            len += (size_t)snprintf(list + len, sizeof list - len, ", ");
        else if (*c != '!')
            list[len++] = *c, list[len] = 0;
    tw_reply_error(r, TW_API_INVALID_ARGUMENT, "unknown query parameter '%.64s' for %s %s (it takes%s%s)", key,
                   rt->method, rt->pattern, rt->query ? ": " : " none", list);
}

/* One query argument: declared by the route, no NUL, capped. Stops the scan after replying 400. */
static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                 const char *value, size_t value_size)
{
    (void)kind;
    query_scan *q = cls;
    const tw_route *rt = q->r->route;
    if (++q->count > MAX_QUERY_ARGS)
        tw_reply_error(q->r, TW_API_INVALID_ARGUMENT, "more than %d query parameters", MAX_QUERY_ARGS);
    else if (strlen(key) != key_size || (value && strlen(value) != value_size))
        tw_reply_error(q->r, TW_API_INVALID_ARGUMENT, "query parameter '%.64s' contains a NUL byte", key);
    else if (!declared(rt->query, key, key_size))
        unknown_arg(q->r, key);
    else if (value_size > QUERY_VALUE_BYTES)
        tw_reply_error(q->r, TW_API_INVALID_ARGUMENT, "query parameter '%.64s' is over %d bytes", key,
                       QUERY_VALUE_BYTES);
    else
        return MHD_YES;
    return MHD_NO;
}

/* Every query argument against the route's list; then its required ones ("!name"). Returns 0 or -1. */
static int check_query(tw_req *r)
{
    query_scan q = {r, 0};
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, check_arg, &q);
    if (r->response)
        return -1;
    for (const char *w = r->route->query; w && (w = strchr(w, '!'));) {
        size_t len = strcspn(++w, " ");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, w);
        if (!tw_req_query(r, name)) {
            tw_reply_error(r, TW_API_INVALID_ARGUMENT, "query parameter '%s' is required for %s %s", name,
                           r->route->method, r->route->pattern);
            return -1;
        }
    }
    return 0;
}

/* A JSON route's body must say it is JSON: text/plain or a form (what a foreign page can send without a
 * preflight) is refused with 415. Returns 0 or -1. */
static int check_json_type(tw_req *r)
{
    static const char want[] = "application/json";
    const char *ct = tw_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = sizeof want - 1;
    if (!(r->route->flags & TW_ROUTE_JSON_BODY) ||
        (ct && !strncasecmp(ct, want, n) && (!ct[n] || ct[n] == ';' || ct[n] == ' ')))
        return 0;
    tw_reply_error(r, TW_API_UNSUPPORTED_MEDIA_TYPE, "%s %s takes a JSON body: Content-Type must be %s (got %s%.100s%s)",
                   r->route->method, r->route->pattern, want, ct ? "'" : "none", ct ? ct : "", ct ? "'" : "");
    return -1;
}

/* Host, origin, auth, query and size checks before any body byte is read. Returns 0 or -1 (replied). */
static int admit(tw_req *r)
{
    tw_server *S = r->S;
    const char *host = tw_req_header(r, MHD_HTTP_HEADER_HOST);
    int mutating = strcmp(r->route->method, "GET") != 0;
    if (S->http->loopback && host && !loopback_host(host, atomic_load(&S->http->port))) {
        tw_reply_error(r, TW_API_PERMISSION_DENIED,
                       "Host '%.200s' is not this server's loopback address", host);
        return -1;
    }
    if (mutating && check_origin(r))
        return -1;
    if (S->opt.token && mutating &&
        !token_ok(tw_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION), S->opt.token)) {
        tw_reply_error(r, TW_API_UNAUTHENTICATED,
                       "%s %s needs the header 'Authorization: Bearer <token>' with the server's token",
                       r->route->method, r->route->pattern);
        return -1;
    }
    if (atomic_load(&S->fatal)) {
        tw_reply_error(r, TW_API_UNAVAILABLE, "the server is stopping: its state cannot be saved");
        return -1;
    }
    const char *ct = NULL;
    size_t ct_len = 0;
    if (MHD_lookup_connection_value_n(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE,
                                      sizeof MHD_HTTP_HEADER_CONTENT_TYPE - 1, &ct, &ct_len) == MHD_YES &&
        strlen(ct) != ct_len) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "the Content-Type header contains a NUL byte");
        return -1;
    }
    if (check_query(r) || check_json_type(r))
        return -1;
    struct statvfs fs;
    if (!strcmp(r->route->method, "POST") && statvfs(S->data, &fs) == 0 &&
        (uint64_t)fs.f_bavail * fs.f_frsize < S->opt.min_free) {
        tw_reply_error(r, TW_API_INSUFFICIENT_STORAGE,
                       "the data folder has %llu bytes free, under the %llu the server keeps: new work is "
                       "refused until there is space",
                       (unsigned long long)fs.f_bavail * fs.f_frsize, (unsigned long long)S->opt.min_free);
        return -1;
    }
    const char *cl = tw_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t cap = r->route->flags & TW_ROUTE_UPLOAD ? S->opt.max_upload : JSON_BODY_CAP;
    if (cl && strtoull(cl, NULL, 10) > cap) {
        tw_reply_error(r, TW_API_PAYLOAD_TOO_LARGE, "the body (%s bytes) is over the cap of %llu bytes", cl,
                       (unsigned long long)cap);
        return -1;
    }
    return 0;
}

/* ================================ bodies ================================ */

static void body_too_large(tw_req *r, uint64_t cap)
{
    tw_reply_error(r, TW_API_PAYLOAD_TOO_LARGE, "the body is over the cap of %llu bytes",
                   (unsigned long long)cap);
}

/* Takes one chunk of the body. Returns 0 to go on, -1 once a reply is stored. */
static int take_body(tw_req *r, const char *data, size_t n)
{
    r->received += n;
    if (r->route->flags & TW_ROUTE_UPLOAD) {
        if (r->received > r->S->opt.max_upload) {
            body_too_large(r, r->S->opt.max_upload);
            return -1;
        }
        return r->route->upload->data(r->S, r, data, n);
    }
    if (r->received > JSON_BODY_CAP) {
        body_too_large(r, JSON_BODY_CAP);
        return -1;
    }
    char *grown = realloc(r->body, r->body_len + n + 1);
    if (!grown) {
        tw_reply_error(r, TW_API_UNAVAILABLE, "out of memory reading the body");
        return -1;
    }
    r->body = grown;
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = 0;
    return 0;
}

/* The integer a real that is a whole number stands for (new), else NULL. */
static json_t *whole_number(const json_t *v)
{
    if (!json_is_real(v))
        return NULL;
    double x = json_real_value(v);
    return x == floor(x) && fabs(x) <= 9007199254740992.0 ? json_integer((json_int_t)x) : NULL; /* 2^53: exact */
}

/* Replaces every real of v that is a whole number (-62.0, 100.0) by the integer: JSON has one number type,
 * and where the API declares an integer, JSON Schema's "integer" takes 100.0 as it does 100. */
static void integral_reals(json_t *v)
{
    const char *key;
    json_t *item, *n;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, key, item) {
            if ((n = whole_number(item)))
                json_object_set_new(v, key, n);
            else
                integral_reals(item);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, item) {
            if ((n = whole_number(item)))
                json_array_set_new(v, i, n);
            else
                integral_reals(item);
        }
    }
}

/* Decodes the JSON body strictly. Returns 0, or -1 after replying 400. */
static int decode_json(tw_req *r)
{
    json_error_t e;
    r->json = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!r->json) {
        tw_api_code code = json_error_code(&e) == json_error_stack_overflow ? TW_API_JSON_TOO_DEEP
                                                                             : TW_API_INVALID_ARGUMENT;
        tw_reply_error(r, code, "request body: %s (line %d, column %d, byte %d)", e.text, e.line,
                       e.column, e.position);
        return -1;
    }
    if (!json_is_object(r->json)) {
        tw_reply_error(r, TW_API_INVALID_ARGUMENT, "request body: expected a JSON object");
        return -1;
    }
    integral_reals(r->json);
    return 0;
}

/* ================================ deadlines ================================ */

/* Each connection is watched from its opening to its closing (deadlines.h); the request's phase moves its
 * deadline: headers due, body due, none while the handler works and the reply goes out. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    tw_http *h = ((tw_server *)cls)->http;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = fd ? tw_deadlines_open(h->deadlines, fd->connect_fd, addr ? addr->client_addr : NULL)
                             : NULL;
    } else { /* closed: libmicrohttpd closes the socket after this returns */
        tw_deadlines_close(h->deadlines, *socket_context);
        *socket_context = NULL;
    }
}

static tw_conn *conn_of(tw_req *r)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void phase(tw_req *r, tw_conn_phase p) { tw_deadlines_phase(r->S->http->deadlines, conn_of(r), p); }

/* ================================ dispatch ================================ */

static enum MHD_Result queue(tw_req *r)
{
    if (r->began && r->route->upload->cleanup) { /* before the client hears back: no debris visible */
        r->route->upload->cleanup(r->S, r);
        r->began = 0;
    }
    if (!r->response)
        tw_reply_error(r, TW_API_INTERNAL, "the route %s %s gave no reply", r->method,
                       r->route ? r->route->pattern : "?");
    enum MHD_Result ok = MHD_queue_response(r->conn, r->status, r->response);
    atomic_fetch_add(&r->S->requests[tw_http_status_slot(r->status)], 1);
    MHD_destroy_response(r->response);
    r->response = NULL;
    r->status = -1; /* queued */
    return ok;
}

/* First call: the headers are in. Routes, admits, and begins an upload. */
static enum MHD_Result first_call(tw_req *r, const char *url)
{
    phase(r, TW_CONN_BODY); /* the headers are in: the body is due (an empty one at once) */
    r->route = route_for(r, r->method, url);
    if (r->route && admit(r) == 0 && (r->route->flags & TW_ROUTE_UPLOAD)) {
        r->began = 1;
        r->route->upload->begin(r->S, r); /* replies itself on refusal */
    }
    return r->response ? queue(r) : MHD_YES;
}

/* Names work wherever ids do: a route's {id} becomes the id of the run or dataset it names (resolve.h);
 * a name several rows share is answered 409 with their ids, one no row has 404 with the closest name. */
static void resolve_id(tw_req *r)
{
    for (int i = 0; i < r->n_params; i++) {
        char id[TW_ID_BYTES];
        tw_error err;
        if (strcmp(r->params[i][0], "id"))
            continue;
        tw_status s = tw_api_resolve_id(r->S, r->route->pattern, r->params[i][1], id, &err);
        if (s == TW_OK)
            snprintf(r->params[i][1], PARAM_BYTES, "%s", id);
        else if (s == TW_ERR_INVALID)
            tw_reply_error(r, TW_API_CONFLICT, "%s", err.message);
        else if (s == TW_END && err.message[0])
            tw_reply_error(r, TW_API_NOT_FOUND, "%s", err.message);
        else if (s != TW_END)
            tw_reply_status(r, &err);
    }
}

static enum MHD_Result last_call(tw_req *r)
{
    phase(r, TW_CONN_IDLE); /* the handler works and the reply goes out under the idle timeout */
    if (!r->response)
        resolve_id(r);
    if (!r->response && (r->route->flags & TW_ROUTE_JSON_BODY) && decode_json(r) != 0)
        return queue(r);
    if (!r->response)
        r->route->handler(r->S, r);
    return queue(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    tw_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->S = cls;
        r->conn = conn;
        r->method = method;
        *con_cls = r;
        return first_call(r, url);
    }
    if (r->status == -1) /* a reply already went out: drop what the client still sends */
        return MHD_NO;
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        tw_deadlines_body(r->S->http->deadlines, conn_of(r), n);
        *upload_data_size = 0;
        if (!r->response)
            take_body(r, upload_data, n);
        else if ((r->discarded += n) > DISCARD_ALLOWANCE)
            return MHD_NO; /* close: the client keeps sending after its error */
        return MHD_YES;
    }
    return last_call(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    tw_req *r = *con_cls;
    if (!r)
        return;
    phase(r, TW_CONN_HEADERS); /* the next request's headers are due */
    if (r->began && r->route->upload->cleanup)
        r->route->upload->cleanup(cls, r);
    if (r->response)
        MHD_destroy_response(r->response);
    json_decref(r->json);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* ================================ the daemon ================================ */

static tw_status parse_listen(const char *listen, struct sockaddr_in *sa, tw_error *err)
{
    char host[64];
    const char *colon = strrchr(listen, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host || !colon[1] || *end ||
        port < 0 || port > 65535)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "--listen: expected HOST:PORT with an IPv4 address, got '%s'", listen);
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost"))
        strcpy(host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--listen: '%s' is not an IPv4 address", host);
    return TW_OK;
}

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[2000];
    vsnprintf(line, sizeof line, fmt, ap);
    tw_log("tower serve: http: %s", line);
}

tw_status tw_http_start(tw_server *S, const tw_route *routes, int *port, tw_error *err)
{
    S->routes = routes;
    struct sockaddr_in sa;
    TW_TRY(parse_listen(S->opt.listen, &sa, err));
    int loopback = (ntohl(sa.sin_addr.s_addr) >> 24) == 127;
    if (!loopback && !S->opt.token && !S->opt.insecure)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "--listen %s is not a loopback address: give --token (or TOWER_TOKEN), or "
                            "--insecure to serve without authentication",
                            S->opt.listen);
    tw_http *h = calloc(1, sizeof *h);
    if (!h || !(h->streams = calloc(S->opt.conn_limit, sizeof *h->streams))) {
        free(h);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    }
    h->loopback = loopback;
    pthread_mutex_init(&h->mu, NULL);
    S->http = h;
    tw_status st = tw_deadlines_start(S->opt.header_timeout, S->opt.body_min_rate, S->opt.conn_limit, &h->deadlines,
                                      err);
    if (st != TW_OK) {
        tw_http_stop(S);
        return st;
    }
    h->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, S, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, S->opt.conn_limit + S->opt.conn_limit / 2, /* room for those closing */
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        S->opt.per_ip_limit, MHD_OPTION_CONNECTION_TIMEOUT, S->opt.conn_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, S, MHD_OPTION_NOTIFY_CONNECTION, on_connection, S, MHD_OPTION_END);
    if (!h->daemon) {
        tw_http_stop(S);
        return tw_error_set(err, TW_ERR_IO, NULL, -1, "cannot listen on %s (in use, or not an address of "
                            "this machine)", S->opt.listen);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : ntohs(sa.sin_port);
    atomic_store(&h->port, *port);
    return TW_OK;
}

void tw_http_stop(tw_server *S)
{
    tw_http *h = S->http;
    if (!h)
        return;
    if (h->daemon)
        MHD_stop_daemon(h->daemon); /* closes every connection: the deadlines' list is empty after it */
    tw_deadlines_stop(h->deadlines);
    pthread_mutex_destroy(&h->mu);
    free(h->streams);
    free(h);
    S->http = NULL;
}
