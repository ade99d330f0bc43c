/* hparams.c — HParamsPluginData packed with protobuf-c and written as a plugin tensor. See hparams.h.
 *
 * Each summary builds its message on the stack (pointing at the caller's strings), packs it into a
 * heap buffer and hands the bytes to tw_events_add_plugin_tensor. */
#include "hparams.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hparams.pb-c.h"

static const char PLUGIN[] = "hparams";
static const char START_TAG[] = "_hparams_/session_start_info";
static const char END_TAG[] = "_hparams_/session_end_info";

void tw_hparams_group_name(const char *text, char out[TW_HPARAMS_GROUP_BYTES])
{
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    snprintf(out, TW_HPARAMS_GROUP_BYTES, "%016llx", (unsigned long long)h);
}

/* Packs d and appends it under tag. */
static tw_status add(tw_events_writer *w, const char *tag, const Twpb__HParamsPluginData *d,
                     tw_error *err)
{
    size_t len = twpb__hparams_plugin_data__get_packed_size(d);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return tw_error_set(err, TW_ERR_NOMEM, tag, -1, "out of memory");
    twpb__hparams_plugin_data__pack(d, buf);
    tw_status s = tw_events_add_plugin_tensor(w, tag, 0, PLUGIN, buf, len, err);
    free(buf);
    return s;
}

/* Fills value from hp; TW_ERR_INVALID names a bad entry. */
static tw_status to_value(const tw_hparam *hp, Twpb__HParamValue *value, tw_error *err)
{
    twpb__hparam_value__init(value);
    switch (hp->kind) {
    case TW_HPARAM_NUMBER:
        value->kind_case = TWPB__HPARAM_VALUE__KIND_NUMBER_VALUE;
        value->number_value = hp->number;
        return TW_OK;
    case TW_HPARAM_BOOL:
        value->kind_case = TWPB__HPARAM_VALUE__KIND_BOOL_VALUE;
        value->bool_value = hp->number != 0;
        return TW_OK;
    case TW_HPARAM_STRING:
        if (!hp->string)
            break;
        value->kind_case = TWPB__HPARAM_VALUE__KIND_STRING_VALUE;
        value->string_value = (char *)hp->string;
        return TW_OK;
    }
    return tw_error_set(err, TW_ERR_INVALID, hp->name, -1, "hparam '%s': no value", hp->name);
}

static tw_status check_names(const tw_hparams_session *s, tw_error *err)
{
    for (size_t i = 0; i < s->n; i++) {
        if (!s->hparams[i].name || !*s->hparams[i].name)
            return tw_error_set(err, TW_ERR_INVALID, START_TAG, -1, "hparam %zu has no name", i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->hparams[i].name, s->hparams[j].name))
                return tw_error_set(err, TW_ERR_INVALID, START_TAG, -1, "hparam '%s' appears twice",
                                    s->hparams[i].name);
    }
    return TW_OK;
}

tw_status tw_hparams_add_session_start(tw_events_writer *w, const tw_hparams_session *s, tw_error *err)
{
    TW_TRY(check_names(s, err));
    Twpb__HParamValue *values = calloc(s->n ? s->n : 1, sizeof *values);
    Twpb__SessionStartInfo__HparamsEntry *entries = calloc(s->n ? s->n : 1, sizeof *entries);
    Twpb__SessionStartInfo__HparamsEntry **ptrs = calloc(s->n ? s->n : 1, sizeof *ptrs);
    tw_status st = values && entries && ptrs ? TW_OK
                                             : tw_error_set(err, TW_ERR_NOMEM, START_TAG, -1, "out of memory");
    for (size_t i = 0; st == TW_OK && i < s->n; i++) {
        st = to_value(&s->hparams[i], &values[i], err);
        twpb__session_start_info__hparams_entry__init(&entries[i]);
        entries[i].key = (char *)s->hparams[i].name;
        entries[i].value = &values[i];
        ptrs[i] = &entries[i];
    }
    if (st == TW_OK) {
        Twpb__SessionStartInfo info = TWPB__SESSION_START_INFO__INIT;
        info.n_hparams = s->n;
        info.hparams = ptrs;
        info.group_name = (char *)(s->group_name ? s->group_name : "");
        info.model_uri = (char *)(s->model_uri ? s->model_uri : "");
        info.monitor_url = (char *)(s->monitor_url ? s->monitor_url : "");
        info.start_time_secs = s->start_secs;
        Twpb__HParamsPluginData d = TWPB__HPARAMS_PLUGIN_DATA__INIT;
        d.data_case = TWPB__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
        d.session_start_info = &info;
        st = add(w, START_TAG, &d, err);
    }
    free(ptrs);
    free(entries);
    free(values);
    return st;
}

tw_status tw_hparams_add_session_end(tw_events_writer *w, tw_hparams_status status, double end_secs,
                                     tw_error *err)
{
    Twpb__SessionEndInfo info = TWPB__SESSION_END_INFO__INIT;
    info.status = status == TW_HPARAMS_SUCCESS ? TWPB__HPARAMS_STATUS__STATUS_SUCCESS
                                               : TWPB__HPARAMS_STATUS__STATUS_FAILURE;
    info.end_time_secs = end_secs;
    Twpb__HParamsPluginData d = TWPB__HPARAMS_PLUGIN_DATA__INIT;
    d.data_case = TWPB__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO;
    d.session_end_info = &info;
    return add(w, END_TAG, &d, err);
}

typedef struct {
    const tw_hparams_session *s;
    tw_hparams_status status;
    double end_secs;
} whole_session;

static tw_status add_whole_session(tw_events_writer *w, void *ctx, tw_error *err)
{
    const whole_session *ws = ctx;
    TW_TRY(tw_hparams_add_session_start(w, ws->s, err));
    return tw_hparams_add_session_end(w, ws->status, ws->end_secs, err);
}

tw_status tw_hparams_append_session(const char *logdir, const tw_hparams_session *s, tw_hparams_status status,
                                    double end_secs, tw_error *err)
{
    whole_session ws = {s, status, end_secs};
    return tw_events_write_file(logdir, add_whole_session, &ws, err);
}
