/* inspect.c — `tower inspect FILE [--json]`: what is inside a TFRecord, tfevents or safetensors file.
 *
 * Owns: the inspect subcommand. For a TFRecord of tf.train.Example: record count, the feature schema
 * (kind and value counts per feature name) and the first records' values. For a tfevents file: the
 * file version, every tag with its kind, point count and step range, the graph and session-log
 * events. Both are streamed once in constant memory. For a safetensors file (recognised by its bytes,
 * not its name; read whole, as its reader does): the metadata and each tensor's dtype, shape and
 * place, with count, min, max, mean, sum, NaN/Inf counts and the first values of F32 tensors. Does not
 * own the formats (tfrecord.c, example.c, the generated event protos, safetensors.c) — it only reads
 * them. */
#include "inspect.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "event.pb-c.h"
#include "events_read.h"
#include "example.h"
#include "options.h"
#include "safetensors.h"
#include "tfrecord.h"

enum { MAX_SCHEMA = 256, MAX_SHOWN_BYTES = 65536 };

typedef struct {
    const char *path;
    int json;
    int limit;                /* records shown in full */
    tw_tfrecord_options opts;
} options;

/* --compression's values: the reader's (auto included). */
static int compression_of(const char *value, void *field)
{
    tw_error err;
    return tw_compression_parse(value, 1, field, &err) == TW_OK ? 0 : -1;
}

static const tw_opt OPTIONS[] = {
    {.name = "json", .kind = TW_OPT_FLAG, .offset = offsetof(options, json),
     .help = "print one JSON object instead of text"},
    {.name = "limit", .kind = TW_OPT_INT, .offset = offsetof(options, limit), .arg = "N", .min = 0,
     .max = INT_MAX, .help = "records shown in full, or values shown per tensor (default 3)"},
    {.name = "compression", .kind = TW_OPT_CUSTOM, .offset = offsetof(options, opts.compression), .arg = "C",
     .parse = compression_of, .wants = "auto, none, gzip or zlib",
     .help = "auto (default: detected from the first bytes), none, gzip or zlib"},
    {.name = "max-record-bytes", .kind = TW_OPT_BYTES, .offset = offsetof(options, opts.max_record_bytes),
     .arg = "N", .min = 1, .max = 1e18, .help = "refuse records longer than N bytes (default 268435456)"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower inspect",
    .usage = "FILE [--json] [--limit N] [--compression auto|none|gzip|zlib]\n"
             "                          [--max-record-bytes N]",
    .about = "Describes a TFRecord file of tf.train.Example (record count, feature schema, first records), a\n"
             "TensorBoard event file (tags with their kinds and step ranges, graph, session log) or a\n"
             "safetensors file (metadata; per tensor dtype, shape and, for F32, count, min, max, mean, sum and\n"
             "the first values).\n",
    .opts = OPTIONS,
    .operands = "FILE",
    .min_args = 1,
    .max_args = 1,
};

/* Offset of the record just read, whose payload had len bytes. */
static int64_t record_offset(const tw_tfrecord_reader *r, size_t len)
{
    return (int64_t)tw_tfrecord_reader_offset(r) -
           (int64_t)(len + TW_TFRECORD_HEADER_BYTES + TW_TFRECORD_FOOTER_BYTES);
}

/* ------------------------------------------------------------------ Examples */

static json_t *feature_values(const tw_feature *f)
{
    json_t *values = json_array();
    for (size_t i = 0; i < f->count; i++) {
        if (f->kind == TW_FEATURE_FLOAT)
            json_array_append_new(values, json_real(f->floats[i]));
        else if (f->kind == TW_FEATURE_INT64)
            json_array_append_new(values, json_integer(f->int64s[i]));
        else {
            size_t len;
            const uint8_t *p = tw_feature_bytes_at(f, i, &len);
            size_t shown = len < MAX_SHOWN_BYTES ? len : MAX_SHOWN_BYTES;
            char *hex = malloc(2 * shown + 1);
            for (size_t k = 0; hex && k < shown; k++)
                snprintf(hex + 2 * k, 3, "%02x", p[k]);
            if (hex)
                hex[2 * shown] = 0;
            json_array_append_new(values, json_string(hex ? hex : ""));
            free(hex);
        }
    }
    return values;
}

static json_t *example_json(const tw_example *ex)
{
    json_t *obj = json_object();
    for (size_t i = 0; i < tw_example_feature_count(ex); i++) {
        tw_feature f;
        tw_example_feature_at(ex, i, &f);
        json_object_set_new(obj, f.name, json_pack("{s:s, s:o}", "kind", tw_feature_kind_name(f.kind),
                                                   "values", feature_values(&f)));
    }
    return obj;
}

/* Folds one Example into schema: {name: {kind, min_count, max_count, present}}. */
static tw_status schema_add(json_t *schema, const tw_example *ex, const char *path, int64_t at,
                            tw_error *err)
{
    for (size_t i = 0; i < tw_example_feature_count(ex); i++) {
        tw_feature f;
        tw_example_feature_at(ex, i, &f);
        json_t *s = json_object_get(schema, f.name);
        if (!s) {
            if (json_object_size(schema) >= MAX_SCHEMA)
                return tw_error_set(err, TW_ERR_TOO_LARGE, path, at,
                                    "more than %d distinct feature names", MAX_SCHEMA);
            s = json_pack("{s:s, s:I, s:I, s:I}", "kind", tw_feature_kind_name(f.kind), "min_count",
                          (json_int_t)f.count, "max_count", (json_int_t)f.count, "present",
                          (json_int_t)0);
            json_object_set_new(schema, f.name, s);
        }
        if (strcmp(json_string_value(json_object_get(s, "kind")), tw_feature_kind_name(f.kind)))
            json_object_set_new(s, "kind", json_string("mixed"));
        json_int_t n = (json_int_t)f.count;
        if (n < json_integer_value(json_object_get(s, "min_count")))
            json_object_set_new(s, "min_count", json_integer(n));
        if (n > json_integer_value(json_object_get(s, "max_count")))
            json_object_set_new(s, "max_count", json_integer(n));
        json_object_set_new(s, "present",
                            json_integer(json_integer_value(json_object_get(s, "present")) + 1));
    }
    return TW_OK;
}

static tw_status scan_examples(tw_tfrecord_reader *r, const options *o, json_t *out,
                               const uint8_t *first, size_t first_len, tw_error *err)
{
    json_t *schema = json_object(), *shown = json_array();
    json_object_set_new(out, "schema", schema);
    json_object_set_new(out, "first_records", shown);
    const uint8_t *data = first;
    size_t len = first_len;
    tw_status s = TW_OK;
    for (uint64_t i = 0; s == TW_OK; i++) {
        int64_t at = record_offset(r, len);
        tw_example *ex;
        TW_TRY(tw_example_parse(data, len, o->path, at, &ex, err));
        s = schema_add(schema, ex, o->path, at, err);
        if (s == TW_OK && (long)i < o->limit)
            json_array_append_new(shown, example_json(ex));
        tw_example_destroy(ex);
        if (s == TW_OK)
            s = tw_tfrecord_read(r, &data, &len, err);
    }
    return s == TW_END ? TW_OK : s;
}

/* ------------------------------------------------------------------ Events */

static const char *value_kind(const Twpb__Summary__Value *v)
{
    switch (v->value_case) {
    case TWPB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE: return "scalar";
    case TWPB__SUMMARY__VALUE__VALUE_HISTO: return "histogram";
    case TWPB__SUMMARY__VALUE__VALUE_IMAGE: return "image";
    case TWPB__SUMMARY__VALUE__VALUE_TENSOR:
        if (v->metadata && v->metadata->plugin_data && v->metadata->plugin_data->plugin_name[0])
            return v->metadata->plugin_data->plugin_name;
        return "tensor";
    default: return "other";
    }
}

static void tag_add(json_t *tags, const char *tag, const char *kind, int64_t step)
{
    json_t *t = json_object_get(tags, tag);
    if (!t) {
        json_object_set_new(tags, tag, json_pack("{s:s, s:I, s:I, s:I}", "kind", kind, "count",
                                                 (json_int_t)0, "first_step", (json_int_t)step,
                                                 "last_step", (json_int_t)step));
        t = json_object_get(tags, tag);
    }
    json_object_set_new(t, "count", json_integer(json_integer_value(json_object_get(t, "count")) + 1));
    json_object_set_new(t, "last_step", json_integer(step));
}

static void add_event(json_t *out, const Twpb__Event *ev)
{
    json_t *tags = json_object_get(out, "tags");
    switch (ev->what_case) {
    case TWPB__EVENT__WHAT_FILE_VERSION:
        json_object_set_new(out, "file_version", json_string(ev->file_version));
        break;
    case TWPB__EVENT__WHAT_GRAPH_DEF:
        json_object_set_new(out, "graph_bytes", json_integer((json_int_t)ev->graph_def.len));
        break;
    case TWPB__EVENT__WHAT_SESSION_LOG:
        if (ev->session_log->status == TWPB__SESSION_LOG__SESSION_STATUS__START)
            json_array_append_new(json_object_get(out, "session_starts"), json_integer(ev->step));
        break;
    case TWPB__EVENT__WHAT_SUMMARY:
        for (size_t i = 0; i < ev->summary->n_value; i++)
            tag_add(tags, ev->summary->value[i]->tag, value_kind(ev->summary->value[i]), ev->step);
        break;
    default:
        break;
    }
}

static tw_status scan_events(tw_tfrecord_reader *r, const options *o, json_t *out,
                             const uint8_t *first, size_t first_len, tw_error *err)
{
    json_object_set_new(out, "tags", json_object());
    json_object_set_new(out, "session_starts", json_array());
    const uint8_t *data = first;
    size_t len = first_len;
    tw_status s = TW_OK;
    while (s == TW_OK) {
        Twpb__Event *ev = twpb__event__unpack(NULL, len, data);
        if (!ev)
            return tw_error_set(err, TW_ERR_CORRUPT, o->path, record_offset(r, len),
                                "record of %zu bytes is not a valid Event protobuf", len);
        add_event(out, ev);
        twpb__event__free_unpacked(ev, NULL);
        s = tw_tfrecord_read(r, &data, &len, err);
    }
    return s == TW_END ? TW_OK : s;
}

/* An event file: the name says so, or the first record is an Event carrying a file_version. */
static int looks_like_events(const char *path, const uint8_t *data, size_t len)
{
    const char *base = strrchr(path, '/');
    if (strstr(base ? base + 1 : path, "tfevents"))
        return 1;
    Twpb__Event *ev = twpb__event__unpack(NULL, len, data);
    int yes = ev && ev->what_case == TWPB__EVENT__WHAT_FILE_VERSION &&
              !strncmp(ev->file_version, "brain.Event:", 12);
    twpb__event__free_unpacked(ev, NULL);
    return yes;
}

/* ------------------------------------------------------------------ safetensors */

/* A safetensors file starts with an 8-byte length and a JSON object: '{' then '"', '}' or white space.
 * A TFRecord has the masked CRC32C of its first 8 bytes at bytes 8..11 instead, a gzip file 0, 2 or 4
 * at byte 8; only an automatic --compression looks. */
static int looks_like_safetensors(const options *o)
{
    uint8_t p[12];
    FILE *f = o->opts.compression == TW_COMPRESSION_AUTO ? fopen(o->path, "rb") : NULL;
    size_t n = f ? fread(p, 1, sizeof p, f) : 0;
    if (f)
        fclose(f);
    if (n < 10 || p[8] != '{' || !p[9] || !strchr("\"} \t\r\n", p[9]))
        return 0;
    uint32_t crc = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
    return n < 12 || crc != tw_crc32c_mask(tw_crc32c(p, 8));
}

/* Adds count, min, max, mean, sum (NaNs left out of all but count, and counted in nan), inf and the
 * first `limit` values of an F32 tensor to obj. */
static void f32_stats(const tw_st_info *t, long limit, json_t *obj)
{
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    uint64_t nan = 0, inf = 0;
    json_t *first = json_array();
    for (uint64_t i = 0; i < t->count; i++) {
        float v;
        memcpy(&v, t->data + i * sizeof v, sizeof v);
        if ((long)i < limit)
            json_array_append_new(first, tw_events_read_json_number(v));
        nan += isnan(v) != 0;
        inf += isinf(v) != 0;
        if (isnan(v))
            continue;
        sum += v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    int any = t->count > nan;
    json_object_set_new(obj, "min", any ? tw_events_read_json_number(lo) : json_null());
    json_object_set_new(obj, "max", any ? tw_events_read_json_number(hi) : json_null());
    json_object_set_new(obj, "mean",
                        any ? tw_events_read_json_number(sum / (double)(t->count - nan)) : json_null());
    json_object_set_new(obj, "sum", tw_events_read_json_number(sum));
    json_object_set_new(obj, "nan", json_integer((json_int_t)nan));
    json_object_set_new(obj, "inf", json_integer((json_int_t)inf));
    json_object_set_new(obj, "first", first);
}

static json_t *tensor_json(const tw_st_info *t, long limit)
{
    json_t *shape = json_array();
    for (int i = 0; i < t->rank; i++)
        json_array_append_new(shape, json_integer((json_int_t)t->shape[i]));
    json_t *obj = json_pack("{s:s, s:o, s:I, s:I, s:I}", "dtype", tw_st_dtype_name(t->dtype), "shape",
                            shape, "count", (json_int_t)t->count, "offset", (json_int_t)t->offset,
                            "bytes", (json_int_t)t->nbytes);
    if (obj && t->dtype == TW_ST_F32)
        f32_stats(t, limit, obj);
    return obj;
}

static tw_status inspect_safetensors(const options *o, json_t *out, tw_error *err)
{
    tw_safetensors *st;
    TW_TRY(tw_safetensors_read(o->path, &st, err));
    json_t *meta = json_object(), *tensors = json_object();
    for (size_t i = 0; i < tw_safetensors_meta_count(st); i++)
        json_object_set_new(meta, tw_safetensors_meta_at(st, i)->key,
                            json_string(tw_safetensors_meta_at(st, i)->value));
    for (size_t i = 0; i < tw_safetensors_count(st); i++)
        json_object_set_new(tensors, tw_safetensors_at(st, i)->name,
                            tensor_json(tw_safetensors_at(st, i), o->limit));
    json_object_set_new(out, "type", json_string("safetensors"));
    json_object_set_new(out, "header_bytes", json_integer((json_int_t)tw_safetensors_header_bytes(st)));
    json_object_set_new(out, "metadata", meta);
    json_object_set_new(out, "tensors", tensors);
    tw_safetensors_free(st);
    return TW_OK;
}

/* ------------------------------------------------------------------ dispatch */

static tw_status inspect_file(const options *o, json_t *out, tw_error *err)
{
    if (looks_like_safetensors(o))
        return inspect_safetensors(o, out, err);
    tw_tfrecord_reader *r;
    TW_TRY(tw_tfrecord_reader_open(o->path, &o->opts, &r, err));
    const uint8_t *data;
    size_t len;
    tw_status s = tw_tfrecord_read(r, &data, &len, err);
    int events = s == TW_OK && looks_like_events(o->path, data, len);
    json_object_set_new(out, "type", json_string(events ? "tfevents" : "tfrecord"));
    json_object_set_new(out, "compression",
                        json_string(tw_compression_name(tw_tfrecord_reader_compression(r))));
    if (s == TW_OK)
        s = events ? scan_events(r, o, out, data, len, err)
                   : scan_examples(r, o, out, data, len, err);
    else if (s == TW_END)
        s = TW_OK;
    json_object_set_new(out, "records", json_integer((json_int_t)tw_tfrecord_reader_records(r)));
    tw_tfrecord_reader_close(r);
    return s;
}

/* ------------------------------------------------------------------ output */

/* A JSON number or the string standing for a non-finite one, as text. */
static void print_number(const char *label, const json_t *v)
{
    if (json_is_number(v))
        printf(" %s %.9g", label, json_number_value(v));
    else if (json_is_string(v))
        printf(" %s %s", label, json_string_value(v));
}

static void print_safetensors(const json_t *out)
{
    const json_t *tensors = json_object_get(out, "tensors");
    printf("%s: safetensors, %zu tensors, header %lld bytes\n",
           json_string_value(json_object_get(out, "file")), json_object_size(tensors),
           (long long)json_integer_value(json_object_get(out, "header_bytes")));
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(out, "metadata"), key, v)
        printf("  metadata %s = %.200s%s\n", key, json_string_value(v),
               strlen(json_string_value(v)) > 200 ? "..." : "");
    json_object_foreach((json_t *)tensors, key, v) {
        char *shape = json_dumps(json_object_get(v, "shape"), JSON_COMPACT);
        printf("  tensor %-30s %-5s %-16s %lld values", key,
               json_string_value(json_object_get(v, "dtype")), shape ? shape : "?",
               (long long)json_integer_value(json_object_get(v, "count")));
        free(shape);
        print_number("min", json_object_get(v, "min"));
        print_number("max", json_object_get(v, "max"));
        print_number("mean", json_object_get(v, "mean"));
        print_number("sum", json_object_get(v, "sum"));
        json_int_t nan = json_integer_value(json_object_get(v, "nan"));
        json_int_t inf = json_integer_value(json_object_get(v, "inf"));
        if (nan || inf)
            printf(" nan %lld inf %lld", (long long)nan, (long long)inf);
        const json_t *values = json_object_get(v, "first");
        char *first = values ? json_dumps(values, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
        printf("%s%.300s%s\n", first ? " first " : "", first ? first : "",
               first && strlen(first) > 300 ? "..." : "");
        free(first);
    }
}

static void print_text(const json_t *out)
{
    if (!strcmp(json_string_value(json_object_get(out, "type")), "safetensors")) {
        print_safetensors(out);
        return;
    }
    printf("%s: %s, compression %s, %lld records\n", json_string_value(json_object_get(out, "file")),
           json_string_value(json_object_get(out, "type")),
           json_string_value(json_object_get(out, "compression")),
           (long long)json_integer_value(json_object_get(out, "records")));
    const char *key;
    json_t *v;
    json_t *schema = json_object_get(out, "schema");
    json_object_foreach(schema, key, v)
        printf("  feature %-20s %-6s values per record %lld..%lld, in %lld records\n", key,
               json_string_value(json_object_get(v, "kind")),
               (long long)json_integer_value(json_object_get(v, "min_count")),
               (long long)json_integer_value(json_object_get(v, "max_count")),
               (long long)json_integer_value(json_object_get(v, "present")));
    size_t i;
    json_array_foreach(json_object_get(out, "first_records"), i, v) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9));
        printf("  record %zu: %.400s%s\n", i, s, strlen(s) > 400 ? "..." : "");
        free(s);
    }
    json_t *fv = json_object_get(out, "file_version");
    if (fv)
        printf("  file_version %s\n", json_string_value(fv));
    if (json_object_get(out, "graph_bytes"))
        printf("  graph: %lld bytes\n",
               (long long)json_integer_value(json_object_get(out, "graph_bytes")));
    json_object_foreach(json_object_get(out, "tags"), key, v)
        printf("  tag %-40s %-10s %lld points, steps %lld..%lld\n", key,
               json_string_value(json_object_get(v, "kind")),
               (long long)json_integer_value(json_object_get(v, "count")),
               (long long)json_integer_value(json_object_get(v, "first_step")),
               (long long)json_integer_value(json_object_get(v, "last_step")));
    json_array_foreach(json_object_get(out, "session_starts"), i, v)
        printf("  session START at step %lld\n", (long long)json_integer_value(v));
}

int tw_inspect_main(int argc, char **argv)
{
    options o = {.limit = 3};
    tw_tfrecord_options_default(&o.opts);
    int nargs, rc = tw_options_parse(&COMMAND, &o, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    o.path = argv[1];
    json_t *out = json_pack("{s:s}", "file", o.path);
    tw_error err;
    tw_error_clear(&err);
    tw_status s = inspect_file(&o, out, &err);
    if (s == TW_OK) {
        if (o.json) {
            json_dumpf(out, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
            putchar('\n');
        } else
            print_text(out);
    } else {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tower inspect: %s\n", msg);
    }
    json_decref(out);
    return s == TW_OK ? 0 : 1;
}
