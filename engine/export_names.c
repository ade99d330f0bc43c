/* export_names.c — the TF export's name maps: decoding, the built-in ones, a model's names mapped. See
 * export_names.h.
 *
 * The built-in maps are JSON text decoded by the same decoder a map file goes through, so both follow one
 * set of rules. A name TF accepts is the intersection of TensorFlow's two checks of an op's name (Python's
 * _VALID_OP_NAME_REGEX, C++'s IsValidNodeName): a letter, digit or '.', then letters, digits, '_', '.', '-'
 * and '/'; an empty path component ("a//b", "a/") is refused too, as no variable scope makes one. */
#include "export_names.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_contents.h"
#include "suggest.h"

typedef struct {
    char from[TW_EXPORT_NAME_BYTES], to[TW_EXPORT_NAME_BYTES];
} rename_pair;

struct tw_export_names {
    rename_pair *leaves, *vars;
    size_t n_leaves, n_vars;
    char step[TW_EXPORT_NAME_BYTES];
    tw_bundle_dtype step_dtype;
};

const char *const tw_export_names_builtin[] = {"tower", "seed", NULL};

/* The built-in maps' text, by tw_export_names_builtin's index. */
static const char *const BUILTIN_JSON[] = {
    "{}",
    "{\"leaves\": {\"weights\": \"w\", \"biases\": \"bias\"},"
    " \"global_step\": {\"name\": \"Variable\", \"dtype\": \"int32\"}}",
};

static const char *const TOP_KEYS[] = {"leaves", "variables", "global_step", NULL};
static const char *const STEP_KEYS[] = {"name", "dtype", NULL};

/* tw_suggest_hint over the NULL-ended list names. */
static void hint(const char *s, const char *const *names, char *out, size_t size)
{
    size_t n = 0;
    while (names[n])
        n++;
    tw_suggest_hint(s, names, n, out, size);
}

/* ---- names TF accepts ---------------------------------------------------------------------------- */

static int tf_name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           (!first && (c == '_' || c == '-' || c == '/'));
}

/* Why s is not a TF name (one path component when leaf), into why[size]: 0 when it is one. */
static int name_fault(const char *s, int leaf, char *why, size_t size)
{
    size_t len = strlen(s);
    why[0] = '\0';
    if (!len)
        snprintf(why, size, "an empty name");
    else if (len >= TW_EXPORT_NAME_BYTES)
        snprintf(why, size, "a name of %zu characters, over the %d allowed", len, TW_EXPORT_NAME_BYTES - 1);
    else if (leaf && strchr(s, '/'))
        snprintf(why, size, "'%s', more than one path component (a leaf has no '/')", s);
    else if (s[len - 1] == '/' || strstr(s, "//"))
        snprintf(why, size, "'%s', which has an empty path component", s);
    else
        for (size_t i = 0; i < len; i++)
            if (!tf_name_char(s[i], i == 0)) {
                snprintf(why, size, "'%s', whose character %zu ('%c', 0x%02x) TF refuses in a name (letters, "
                         "digits, '_', '.', '-', '/'; a letter, a digit or '.' first)", s, i + 1,
                         s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?', (unsigned char)s[i]);
                break;
            }
    return why[0] != '\0';
}

/* value (at key path) as a TF name into out[TW_EXPORT_NAME_BYTES]. */
static tw_status take_name(const json_t *value, const char *path, int leaf, char *out, tw_error *err)
{
    if (!json_is_string(value))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: must be a string (a TF name)", path);
    char why[300];
    if (name_fault(json_string_value(value), leaf, why, sizeof why))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: %s", path, why);
    snprintf(out, TW_EXPORT_NAME_BYTES, "%s", json_string_value(value));
    return TW_OK;
}

/* ---- decoding ------------------------------------------------------------------------------------ */

/* Every key of obj (at path; "" for the top) is one of allowed[]. */
static tw_status check_keys(const json_t *obj, const char *path, const char *const *allowed, tw_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], key))
            i++;
        if (!allowed[i]) {
            char h[200];
            hint(key, allowed, h, sizeof h);
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s%s%.100s: unknown key (%s)", path,
                                *path ? "." : "", key, h);
        }
    }
    return TW_OK;
}

/* The object at key of doc, or NULL when absent (TW_OK) or not an object (an error). */
static tw_status object_at(const json_t *doc, const char *key, const json_t **out, tw_error *err)
{
    *out = json_object_get(doc, key);
    if (*out && !json_is_object(*out))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: must be an object", key);
    return TW_OK;
}

/* The pairs of obj (at key "leaves" or "variables") into *pairs, *n: keys non-empty, values TF names (one
 * component for leaves); no two variables given one name. */
static tw_status decode_pairs(const json_t *obj, const char *key, int leaf, rename_pair **pairs, size_t *n,
                              tw_error *err)
{
    if (!obj || !json_object_size(obj))
        return TW_OK;
    if (!(*pairs = calloc(json_object_size(obj), sizeof **pairs)))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    const char *from;
    json_t *to;
    json_object_foreach((json_t *)obj, from, to) {
        char path[300], why[300];
        snprintf(path, sizeof path, "%s[\"%.100s\"]", key, from);
        rename_pair *p = &(*pairs)[*n];
        if (name_fault(from, leaf, why, sizeof why))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: the key is %s", path, why);
        TW_TRY(take_name(to, path, leaf, p->to, err));
        snprintf(p->from, sizeof p->from, "%s", from);
        for (size_t i = 0; !leaf && i < *n; i++)
            if (!strcmp((*pairs)[i].to, p->to))
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: '%s' and '%s' are both mapped to '%s'",
                                    key, (*pairs)[i].from, p->from, p->to);
        (*n)++;
    }
    return TW_OK;
}

/* "global_step" of doc into m: {"name": NAME, "dtype": "int32" | "int64"}, each optional. */
static tw_status decode_step(const json_t *doc, tw_export_names *m, tw_error *err)
{
    const json_t *step, *v;
    TW_TRY(object_at(doc, "global_step", &step, err));
    if (!step)
        return TW_OK;
    TW_TRY(check_keys(step, "global_step", STEP_KEYS, err));
    if ((v = json_object_get(step, "name")))
        TW_TRY(take_name(v, "global_step.name", 0, m->step, err));
    if (!(v = json_object_get(step, "dtype")))
        return TW_OK;
    const char *d = json_string_value(v);
    if (!d || (strcmp(d, "int32") && strcmp(d, "int64")))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "global_step.dtype: must be \"int32\" or \"int64\"%s%.40s%s",
                            d ? ", got \"" : " (a string)", d ? d : "", d ? "\"" : "");
    m->step_dtype = strcmp(d, "int32") ? TW_BUNDLE_INT64 : TW_BUNDLE_INT32;
    return TW_OK;
}

static tw_status decode_into(const json_t *doc, tw_export_names *m, tw_error *err)
{
    if (!json_is_object(doc))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "names: a map must be a JSON object");
    TW_TRY(check_keys(doc, "", TOP_KEYS, err));
    const json_t *leaves, *vars;
    TW_TRY(object_at(doc, "leaves", &leaves, err));
    TW_TRY(object_at(doc, "variables", &vars, err));
    TW_TRY(decode_pairs(leaves, "leaves", 1, &m->leaves, &m->n_leaves, err));
    TW_TRY(decode_pairs(vars, "variables", 0, &m->vars, &m->n_vars, err));
    return decode_step(doc, m, err);
}

tw_status tw_export_names_decode(const json_t *doc, tw_export_names **out, tw_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    snprintf((*out)->step, sizeof (*out)->step, "global_step");
    (*out)->step_dtype = TW_BUNDLE_INT64;
    tw_status s = decode_into(doc, *out, err);
    if (s != TW_OK) {
        tw_export_names_destroy(*out);
        *out = NULL;
    }
    return s;
}

void tw_export_names_destroy(tw_export_names *m)
{
    if (!m)
        return;
    free(m->leaves);
    free(m->vars);
    free(m);
}

/* ---- the built-in maps and map files ------------------------------------------------------------- */

/* JSON text (at path, or a built-in's when path is NULL) decoded into *out. */
static tw_status decode_text(const char *text, size_t len, const char *path, tw_export_names **out,
                             tw_error *err)
{
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return tw_error_set(err, TW_ERR_INVALID, path, je.position, "names: not JSON: %s", je.text);
    tw_status s = tw_export_names_decode(doc, out, err);
    json_decref(doc);
    if (s != TW_OK && err && path)
        snprintf(err->file, sizeof err->file, "%s", path);
    return s;
}

static int builtin_index(const char *name)
{
    for (int i = 0; tw_export_names_builtin[i]; i++)
        if (!strcmp(tw_export_names_builtin[i], name))
            return i;
    return -1;
}

tw_status tw_export_names_of_builtin(const char *name, tw_export_names **out, tw_error *err)
{
    *out = NULL;
    int i = builtin_index(name);
    if (i < 0) {
        char h[200];
        hint(name, tw_export_names_builtin, h, sizeof h);
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "names: '%.100s' is not a built-in name map (%s)", name,
                            h);
    }
    return decode_text(BUILTIN_JSON[i], strlen(BUILTIN_JSON[i]), NULL, out, err);
}

enum { MAX_MAP_FILE = 1 << 20 };

/* The map file at path (at most MAX_MAP_FILE bytes) decoded into *out. */
static tw_status read_map_file(const char *path, tw_export_names **out, tw_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        char h[200];
        hint(path, tw_export_names_builtin, h, sizeof h);
        return tw_error_set(err, errno == ENOENT ? TW_ERR_INVALID : TW_ERR_IO, path, -1,
                            "names: neither a built-in name map (%s) nor a map file that opens: %s", h,
                            strerror(errno));
    }
    char *text = malloc(MAX_MAP_FILE + 1);
    size_t len = text ? fread(text, 1, MAX_MAP_FILE + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    tw_status s = !text  ? tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory")
                  : bad ? tw_error_set(err, TW_ERR_IO, path, -1, "names: cannot read the map file")
                  : len > MAX_MAP_FILE
                      ? tw_error_set(err, TW_ERR_INVALID, path, -1, "names: a map file of over %d bytes", MAX_MAP_FILE)
                      : decode_text(text, len, path, out, err);
    free(text);
    return s;
}

tw_status tw_export_names_open(const char *arg, tw_export_names **out, tw_error *err)
{
    *out = NULL;
    return builtin_index(arg) >= 0 ? tw_export_names_of_builtin(arg, out, err) : read_map_file(arg, out, err);
}

/* ---- mapping a model's names --------------------------------------------------------------------- */

const char *tw_export_names_step(const tw_export_names *m)
{
    return m->step;
}

tw_bundle_dtype tw_export_names_step_dtype(const tw_export_names *m)
{
    return m->step_dtype;
}

/* The TF name of the Tower variable name into out: its "variables" entry, else its leaf renamed. */
static tw_status map_one(const tw_export_names *m, const char *name, char *out, tw_error *err)
{
    for (size_t i = 0; i < m->n_vars; i++)
        if (!strcmp(m->vars[i].from, name)) {
            snprintf(out, TW_EXPORT_NAME_BYTES, "%s", m->vars[i].to);
            return TW_OK;
        }
    const char *slash = strrchr(name, '/'), *leaf = slash ? slash + 1 : name;
    const char *to = leaf;
    for (size_t i = 0; i < m->n_leaves; i++)
        if (!strcmp(m->leaves[i].from, leaf))
            to = m->leaves[i].to;
    int n = snprintf(out, TW_EXPORT_NAME_BYTES, "%.*s%s", (int)(leaf - name), name, to);
    if (n >= TW_EXPORT_NAME_BYTES)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "names: '%s' would be named '%.*s%s', over the %d "
                            "characters allowed", name, (int)(leaf - name), name, to, TW_EXPORT_NAME_BYTES - 1);
    return TW_OK;
}

/* 1 when the TF name a is b, or b's EMA shadow ("b/ExponentialMovingAverage"). */
static int clashes(const char *a, const char *b)
{
    char shadow[TW_CKPT_TENSOR_NAME_BYTES];
    tw_ckpt_name_as(b, TW_OPT_SGD, TW_CKPT_EMA, shadow);
    return !strcmp(a, b) || !strcmp(a, shadow);
}

/* No two of the n mapped names out[] clash, nor one with the step's name. */
static tw_status check_distinct(const tw_export_names *m, const char *const *names, size_t n,
                                char (*out)[TW_EXPORT_NAME_BYTES], tw_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (clashes(m->step, out[i]))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "names: '%s' would be named '%s', which is the "
                                "step's name (global_step.name)", names[i], out[i]);
        for (size_t j = i + 1; j < n; j++)
            if (clashes(out[i], out[j]) || clashes(out[j], out[i]))
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "names: '%s' and '%s' would both be named "
                                    "'%s'", names[i], names[j], clashes(out[i], out[j]) ? out[i] : out[j]);
    }
    return TW_OK;
}

tw_status tw_export_names_map(const tw_export_names *m, const char *const *names, size_t n,
                              char (*out)[TW_EXPORT_NAME_BYTES], tw_error *err)
{
    for (size_t v = 0; v < m->n_vars; v++) {
        size_t i = 0;
        while (i < n && strcmp(names[i], m->vars[v].from))
            i++;
        if (i == n)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "names: variables[\"%s\"]: the model has no "
                                "variable of that name", m->vars[v].from);
    }
    for (size_t i = 0; i < n; i++)
        TW_TRY(map_one(m, names[i], out[i], err));
    return check_distinct(m, names, n, out, err);
}
