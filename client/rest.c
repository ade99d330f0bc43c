/* rest.c — libcurl requests to a `tower serve`. See rest.h. */
#include "rest.h"

#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

/* Where a reply's body goes while it arrives. */
typedef struct {
    CURL *h;
    tw_rest_reply *reply;
    FILE *out;          /* 2xx bodies of a download, or NULL */
    tw_rest_line_fn fn; /* 2xx bodies of a stream, or NULL */
    void *ctx;
    char *line;         /* the stream's unfinished line (owned) */
    size_t line_len;
    int stopped;        /* fn asked to stop */
} sink;

tw_status tw_rest_init(tw_rest *c, const char *server, tw_error *err)
{
    const char *url = server ? server : getenv("TOWER_URL");
    const char *token = getenv("TOWER_TOKEN");
    if (!url || !*url)
        url = TW_REST_DEFAULT_URL;
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        n--;
    if ((strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) || n >= sizeof c->base)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "--server: '%s' is not an http:// or https:// URL", url);
    memcpy(c->base, url, n);
    c->base[n] = '\0';
    c->auth[0] = '\0';
    if (token && *token &&
        (size_t)snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", token) >= sizeof c->auth)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "TOWER_TOKEN is too long");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "curl_global_init failed");
    return TW_OK;
}

static int append(char **buf, size_t *len, const char *data, size_t n)
{
    char *grown = realloc(*buf, *len + n + 1);
    if (!grown)
        return -1;
    memcpy(grown + *len, data, n);
    *len += n;
    grown[*len] = '\0';
    *buf = grown;
    return 0;
}

/* Hands every complete line of the stream's buffer to fn, keeping the rest. */
static int feed_lines(sink *s)
{
    char *start = s->line, *nl;
    while (!s->stopped && (nl = memchr(start, '\n', s->line_len - (size_t)(start - s->line)))) {
        *nl = '\0';
        if (nl > start && nl[-1] == '\r')
            nl[-1] = '\0';
        s->stopped = s->fn(start, s->ctx);
        start = nl + 1;
    }
    s->line_len -= (size_t)(start - s->line);
    memmove(s->line, start, s->line_len);
    return s->stopped;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    sink *s = user;
    size_t n = size * nmemb;
    long http = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &http);
    int ok = http >= 200 && http < 300;
    if (ok && s->out)
        return fwrite(data, 1, n, s->out);
    if (ok && s->fn) {
        if (append(&s->line, &s->line_len, data, n))
            return 0;
        return feed_lines(s) ? 0 : n; /* 0: curl stops the transfer (CURLE_WRITE_ERROR) */
    }
    return append(&s->reply->body, &s->reply->len, data, n) ? 0 : n;
}

/* Runs the prepared handle h against path, the reply into s. */
static tw_status perform(const tw_rest *c, CURL *h, const char *path, struct curl_slist *headers,
                         sink *s, tw_error *err)
{
    char url[2048];
    if ((size_t)snprintf(url, sizeof url, "%s%s", c->base, path) >= sizeof url)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the URL of %s is too long", path);
    if (c->auth[0])
        headers = curl_slist_append(headers, c->auth);
    s->h = h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "tower-client/" TW_VERSION);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s->reply->http);
    curl_slist_free_all(headers);
    free(s->line);
    if (rc == CURLE_WRITE_ERROR && s->stopped)
        rc = CURLE_OK;
    if (rc != CURLE_OK)
        return tw_error_set(err, TW_ERR_IO, NULL, -1, "cannot reach the server at %s: %s", c->base,
                            curl_easy_strerror(rc));
    return TW_OK;
}

static tw_status run(const tw_rest *c, CURL *h, const char *path, struct curl_slist *headers, sink *s,
                     tw_error *err)
{
    memset(s->reply, 0, sizeof *s->reply);
    if (!h)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "curl_easy_init failed");
    tw_status st = perform(c, h, path, headers, s, err);
    curl_easy_cleanup(h);
    return st;
}

tw_status tw_rest_call(const tw_rest *c, const char *method, const char *path, const json_t *body,
                       tw_rest_reply *reply, tw_error *err)
{
    CURL *h = curl_easy_init();
    struct curl_slist *headers = NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (h) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (!strcmp(method, "POST")) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, text ? text : "");
            headers = curl_slist_append(headers, "Content-Type: application/json");
        }
    }
    sink s = {.reply = reply};
    tw_status st = run(c, h, path, headers, &s, err);
    free(text);
    return st;
}

/* curl's read callback over a part's reader. */
static size_t read_part(char *buf, size_t size, size_t nitems, void *arg)
{
    const tw_rest_part *p = arg;
    size_t n = p->read(buf, size * nitems, p->ctx);
    return n == (size_t)-1 ? CURL_READFUNC_ABORT : n;
}

tw_status tw_rest_upload(const tw_rest *c, const char *path, const tw_rest_part *parts, int n,
                         tw_rest_reply *reply, tw_error *err)
{
    for (int i = 0; i < n; i++) { /* curl opens them only while sending: name a missing file now */
        if (parts[i].read)
            continue;
        FILE *f = fopen(parts[i].path, "rb");
        if (!f)
            return tw_error_errno(err, parts[i].path, "cannot read the file");
        fclose(f);
    }
    CURL *h = curl_easy_init();
    curl_mime *mime = h ? curl_mime_init(h) : NULL;
    for (int i = 0; mime && i < n; i++) {
        curl_mimepart *part = curl_mime_addpart(mime);
        curl_mime_name(part, parts[i].field);
        if (parts[i].read ? curl_mime_data_cb(part, -1, read_part, NULL, NULL, (void *)&parts[i]) != CURLE_OK ||
                                curl_mime_filename(part, parts[i].path) != CURLE_OK
                          : curl_mime_filedata(part, parts[i].path) != CURLE_OK) {
            curl_mime_free(mime);
            curl_easy_cleanup(h);
            return tw_error_set(err, TW_ERR_IO, parts[i].path, -1, "cannot attach the file");
        }
    }
    if (mime)
        curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
    sink s = {.reply = reply};
    tw_status st = run(c, h, path, NULL, &s, err);
    curl_mime_free(mime);
    return st;
}

tw_status tw_rest_download(const tw_rest *c, const char *path, FILE *out, tw_rest_reply *reply,
                           tw_error *err)
{
    sink s = {.reply = reply, .out = out};
    return run(c, curl_easy_init(), path, NULL, &s, err);
}

tw_status tw_rest_stream(const tw_rest *c, const char *path, tw_rest_line_fn fn, void *ctx,
                         tw_rest_reply *reply, tw_error *err)
{
    sink s = {.reply = reply, .fn = fn, .ctx = ctx};
    struct curl_slist *headers = curl_slist_append(NULL, "Accept: text/event-stream");
    return run(c, curl_easy_init(), path, headers, &s, err);
}

json_t *tw_rest_json(const tw_rest_reply *reply, const char *path, tw_error *err)
{
    json_error_t je;
    json_t *j = reply->body ? json_loadb(reply->body, reply->len, 0, &je) : NULL;
    if (!j)
        tw_error_set(err, TW_ERR_CORRUPT, NULL, -1, "the reply to %s is not JSON (HTTP %ld)", path,
                     reply->http);
    return j;
}

int tw_rest_ok(const tw_rest_reply *reply)
{
    return reply->http >= 200 && reply->http < 300;
}

void tw_rest_error_text(const tw_rest_reply *reply, char *buf, size_t size)
{
    json_t *j = reply->body ? json_loadb(reply->body, reply->len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *message = json_string_value(json_object_get(e, "message"));
    const char *code = json_string_value(json_object_get(e, "code"));
    if (message)
        snprintf(buf, size, "%s (HTTP %ld %s)", message, reply->http, code ? code : "");
    else
        snprintf(buf, size, "HTTP %ld: %.200s", reply->http, reply->body ? reply->body : "(no body)");
    json_decref(j);
}

void tw_rest_reply_free(tw_rest_reply *reply)
{
    free(reply->body);
    reply->body = NULL;
    reply->len = 0;
}

char *tw_rest_escape(const char *s)
{
    static const char HEX[] = "0123456789ABCDEF";
    char *out = malloc(strlen(s) * 3 + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; out && *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p)) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = HEX[*p >> 4];
            *o++ = HEX[*p & 15];
        }
    }
    if (out)
        *o = '\0';
    return out;
}
