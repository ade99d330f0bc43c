/* fuzz_request.c — libFuzzer harness for what a run submission's body meets (the request JSON
 * validator and the name validator; docs/reliability.md rows H4-H7).
 *
 * The input is decoded the way http.c decodes a request body (json_loadb, JSON_REJECT_DUPLICATES). An
 * object is written back as compact text (as api_runs.c does) and given to the engine's tw_config_parse
 * with base_dir NULL; the raw bytes are given to it too, so its own depth scan and syntax-error offsets
 * meet arbitrary text. Every top-level string (object keys and values, array elements) goes through
 * tw_name_valid, and so does the raw input (a NUL-terminated copy of its first 256 bytes).
 *
 * Invariants (abort on violation): a name tw_name_valid accepts is 1 to TW_NAME_MAX bytes of
 * [A-Za-z0-9._-], starts with a letter or digit (so never with '.'), and holds no '/' and no ".."; a
 * refusal leaves a non-empty, terminated reason. tw_config_parse fails with a negative status and a
 * message; a config it accepts is written out canonically by tw_config_to_json, and that text parses
 * again to the same canonical text. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "names.h"

enum { RAW_NAME_BYTES = 256, WHY_BYTES = 200 };

static void violated(const char *what, const char *subject)
{
    fprintf(stderr, "fuzz_request: invariant violated: %s: \"%s\"\n", what, subject);
    abort();
}

static void check_name(const char *s)
{
    char why[WHY_BYTES + 1];
    memset(why, 'X', sizeof why);
    if (!tw_name_valid(s, why, WHY_BYTES)) {
        if (why[WHY_BYTES] != 'X' || memchr(why, '\0', WHY_BYTES) == NULL)
            violated("refusal reason not terminated inside its buffer", s);
        if (why[0] == '\0')
            violated("refused without a reason", s);
        return;
    }
    size_t n = strlen(s);
    if (n < 1 || n > TW_NAME_MAX)
        violated("accepted a name of bad length", s);
    if (s[0] == '.')
        violated("accepted a name starting with '.'", s);
    if (strchr(s, '/'))
        violated("accepted a name holding '/'", s);
    if (strstr(s, ".."))
        violated("accepted a name holding \"..\"", s);
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= '0' && s[0] <= '9')))
        violated("accepted a name not starting with a letter or a digit", s);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            violated("accepted a name with a byte outside [A-Za-z0-9._-]", s);
    }
}

/* Parses text as a config; checks the error shape, or the canonical round trip on success. */
static void check_config(const char *text, size_t len)
{
    static tw_config c, again; /* large: off the stack */
    tw_error err;
    memset(&err, 0, sizeof err);
    tw_status s = tw_config_parse(text, len, NULL, &c, &err);
    if (s != TW_OK) {
        if (s > 0)
            violated("tw_config_parse failed with a non-negative status", tw_status_name(s));
        if (err.message[0] == '\0' || !memchr(err.message, '\0', sizeof err.message))
            violated("tw_config_parse failed without a message", tw_status_name(s));
        return;
    }
    char *canon = tw_config_to_json(&c);
    if (!canon)
        return; /* out of memory */
    memset(&err, 0, sizeof err);
    if (tw_config_parse(canon, strlen(canon), NULL, &again, &err) != TW_OK) {
        fprintf(stderr, "fuzz_request: re-parse error: %s\n", err.message);
        violated("the canonical form of an accepted config is refused", canon);
    }
    char *canon2 = tw_config_to_json(&again);
    if (canon2 && strcmp(canon, canon2)) {
        fprintf(stderr, "fuzz_request: second canonical form: %s\n", canon2);
        violated("the canonical form is not stable", canon);
    }
    free(canon2);
    free(canon);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char raw[RAW_NAME_BYTES + 1];
    size_t n = size < RAW_NAME_BYTES ? size : RAW_NAME_BYTES;
    memcpy(raw, data, n);
    raw[n] = '\0';
    check_name(raw);

    check_config((const char *)data, size);

    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!body)
        return 0;
    const char *key;
    json_t *v;
    size_t i;
    if (json_is_object(body)) {
        json_object_foreach(body, key, v) {
            check_name(key);
            if (json_is_string(v))
                check_name(json_string_value(v));
        }
        char *text = json_dumps(body, JSON_COMPACT);
        if (text) {
            check_config(text, strlen(text));
            free(text);
        }
    } else {
        json_array_foreach(body, i, v)
            if (json_is_string(v))
                check_name(json_string_value(v));
    }
    json_decref(body);
    return 0;
}
