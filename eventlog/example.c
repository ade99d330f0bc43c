/* example.c — tf.train.Example via protobuf-c. See example.h.
 *
 * The builder fills fixed arrays of protobuf-c structs that point at the caller's data, so encoding an
 * Example costs one pass of protobuf-c packing and no copies of the pixel bytes. */
#include "example.h"

#include <stdlib.h>
#include <string.h>

#include "example.pb-c.h"

struct tw_example_builder {
    size_t n;
    Twpb__Example example;
    Twpb__Features features;
    Twpb__Features__FeatureEntry entries[TW_EXAMPLE_MAX_FEATURES];
    Twpb__Features__FeatureEntry *entry_ptrs[TW_EXAMPLE_MAX_FEATURES];
    Twpb__Feature feature[TW_EXAMPLE_MAX_FEATURES];
    Twpb__BytesList bytes[TW_EXAMPLE_MAX_FEATURES];
    Twpb__FloatList floats[TW_EXAMPLE_MAX_FEATURES];
    Twpb__Int64List int64s[TW_EXAMPLE_MAX_FEATURES];
    size_t bytes_first[TW_EXAMPLE_MAX_FEATURES]; /* index into items of each bytes list */
    ProtobufCBinaryData *items;     /* scratch for bytes items, owned */
    size_t items_len, items_cap;
    uint8_t *out;                   /* serialized bytes, owned */
    size_t out_cap;
};

const char *tw_feature_kind_name(tw_feature_kind k)
{
    switch (k) {
    case TW_FEATURE_BYTES: return "bytes";
    case TW_FEATURE_FLOAT: return "float";
    case TW_FEATURE_INT64: return "int64";
    case TW_FEATURE_NONE: return "none";
    }
    return "?";
}

tw_status tw_example_builder_create(tw_example_builder **out, tw_error *err)
{
    tw_example_builder *b = calloc(1, sizeof *b);
    if (!b)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    *out = b;
    return TW_OK;
}

void tw_example_builder_destroy(tw_example_builder *b)
{
    if (!b)
        return;
    free(b->items);
    free(b->out);
    free(b);
}

void tw_example_builder_reset(tw_example_builder *b)
{
    b->n = 0;
    b->items_len = 0;
}

/* Claims the next feature slot, initialised and named. */
static tw_status next_slot(tw_example_builder *b, const char *name, Twpb__Feature **f,
                           tw_error *err)
{
    if (b->n == TW_EXAMPLE_MAX_FEATURES)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "an Example may have at most %d features", TW_EXAMPLE_MAX_FEATURES);
    size_t i = b->n++;
    twpb__features__feature_entry__init(&b->entries[i]);
    twpb__feature__init(&b->feature[i]);
    b->entries[i].key = (char *)name;
    b->entries[i].value = &b->feature[i];
    b->entry_ptrs[i] = &b->entries[i];
    *f = &b->feature[i];
    return TW_OK;
}

tw_status tw_example_add_bytes(tw_example_builder *b, const char *name, const void *const *items,
                               const size_t *lens, size_t n, tw_error *err)
{
    if (b->items_len + n > b->items_cap) {
        size_t cap = (b->items_len + n) * 2;
        ProtobufCBinaryData *p = realloc(b->items, cap * sizeof *p);
        if (!p)
            return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        b->items = p;
        b->items_cap = cap;
    }
    Twpb__Feature *f = NULL;
    TW_TRY(next_slot(b, name, &f, err));
    size_t i = b->n - 1;
    twpb__bytes_list__init(&b->bytes[i]);
    for (size_t k = 0; k < n; k++) {
        b->items[b->items_len + k].data = (uint8_t *)items[k];
        b->items[b->items_len + k].len = lens[k];
    }
    b->bytes[i].n_value = n;
    b->bytes_first[i] = b->items_len; /* items may move until serialize; point there */
    b->items_len += n;
    f->kind_case = TWPB__FEATURE__KIND_BYTES_LIST;
    f->bytes_list = &b->bytes[i];
    return TW_OK;
}

tw_status tw_example_add_bytes1(tw_example_builder *b, const char *name, const void *data,
                                size_t len, tw_error *err)
{
    return tw_example_add_bytes(b, name, &data, &len, 1, err);
}

tw_status tw_example_add_floats(tw_example_builder *b, const char *name, const float *values,
                                size_t n, tw_error *err)
{
    Twpb__Feature *f = NULL;
    TW_TRY(next_slot(b, name, &f, err));
    Twpb__FloatList *list = &b->floats[b->n - 1];
    twpb__float_list__init(list);
    list->n_value = n;
    list->value = (float *)values;
    f->kind_case = TWPB__FEATURE__KIND_FLOAT_LIST;
    f->float_list = list;
    return TW_OK;
}

tw_status tw_example_add_int64s(tw_example_builder *b, const char *name, const int64_t *values,
                                size_t n, tw_error *err)
{
    Twpb__Feature *f = NULL;
    TW_TRY(next_slot(b, name, &f, err));
    Twpb__Int64List *list = &b->int64s[b->n - 1];
    twpb__int64_list__init(list);
    list->n_value = n;
    list->value = (int64_t *)values;
    f->kind_case = TWPB__FEATURE__KIND_INT64_LIST;
    f->int64_list = list;
    return TW_OK;
}

tw_status tw_example_serialize(tw_example_builder *b, const uint8_t **data, size_t *len,
                               tw_error *err)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->feature[i].kind_case == TWPB__FEATURE__KIND_BYTES_LIST)
            b->bytes[i].value = b->items + b->bytes_first[i];
    twpb__example__init(&b->example);
    twpb__features__init(&b->features);
    b->features.n_feature = b->n;
    b->features.feature = b->entry_ptrs;
    b->example.features = &b->features;
    size_t need = twpb__example__get_packed_size(&b->example);
    if (need > b->out_cap) {
        uint8_t *p = realloc(b->out, need);
        if (!p)
            return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        b->out = p;
        b->out_cap = need;
    }
    *len = twpb__example__pack(&b->example, b->out);
    *data = b->out;
    return TW_OK;
}

/* ================================ parsing ================================ */

struct tw_example {
    Twpb__Example *msg; /* owned, from protobuf-c unpack */
};

tw_status tw_example_parse(const void *data, size_t len, const char *source, int64_t offset,
                           tw_example **out, tw_error *err)
{
    *out = NULL;
    tw_example *ex = calloc(1, sizeof *ex);
    if (!ex)
        return tw_error_set(err, TW_ERR_NOMEM, source, offset, "out of memory");
    ex->msg = twpb__example__unpack(NULL, len, data);
    if (!ex->msg) {
        free(ex);
        return tw_error_set(err, TW_ERR_CORRUPT, source, offset,
                            "record of %zu bytes is not a valid tf.train.Example protobuf", len);
    }
    *out = ex;
    return TW_OK;
}

void tw_example_destroy(tw_example *ex)
{
    if (!ex)
        return;
    twpb__example__free_unpacked(ex->msg, NULL);
    free(ex);
}

size_t tw_example_feature_count(const tw_example *ex)
{
    return ex->msg->features ? ex->msg->features->n_feature : 0;
}

void tw_example_feature_at(const tw_example *ex, size_t i, tw_feature *out)
{
    const Twpb__Features__FeatureEntry *e = ex->msg->features->feature[i];
    const Twpb__Feature *f = e->value;
    memset(out, 0, sizeof *out);
    out->name = e->key;
    if (!f)
        return;
    switch (f->kind_case) {
    case TWPB__FEATURE__KIND_BYTES_LIST:
        out->kind = TW_FEATURE_BYTES;
        out->count = f->bytes_list->n_value;
        out->bytes_impl = f->bytes_list->value;
        break;
    case TWPB__FEATURE__KIND_FLOAT_LIST:
        out->kind = TW_FEATURE_FLOAT;
        out->count = f->float_list->n_value;
        out->floats = f->float_list->value;
        break;
    case TWPB__FEATURE__KIND_INT64_LIST:
        out->kind = TW_FEATURE_INT64;
        out->count = f->int64_list->n_value;
        out->int64s = f->int64_list->value;
        break;
    default:
        break;
    }
}

int tw_example_find(const tw_example *ex, const char *name, tw_feature *out)
{
    for (size_t i = tw_example_feature_count(ex); i-- > 0;)
        if (!strcmp(ex->msg->features->feature[i]->key, name)) {
            tw_example_feature_at(ex, i, out);
            return 1;
        }
    return 0;
}

const uint8_t *tw_feature_bytes_at(const tw_feature *f, size_t i, size_t *len)
{
    const ProtobufCBinaryData *items = f->bytes_impl;
    *len = items[i].len;
    return items[i].data;
}
