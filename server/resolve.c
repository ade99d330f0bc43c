/* resolve.c — a route's {id} given as a name becomes the id it names (see resolve.h). */
#include "resolve.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *prefix; /* the route's pattern starts with it */
    tw_status (*resolve)(tw_store *st, const char *ref, json_t **out, tw_error *err);
} KINDS[] = {
    {"/api/v1/runs/{id}", tw_store_run_resolve},
    {"/api/v1/datasets/{id}", tw_store_dataset_resolve_unique},
};

tw_status tw_api_resolve_id(tw_server *S, const char *pattern, const char *ref, char id[TW_ID_BYTES],
                            tw_error *err)
{
    for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
        if (strncmp(pattern, KINDS[k].prefix, strlen(KINDS[k].prefix)))
            continue;
        json_t *row;
        tw_status s = KINDS[k].resolve(S->store, ref, &row, err);
        if (s == TW_OK)
            snprintf(id, TW_ID_BYTES, "%s", json_string_value(json_object_get(row, "id")));
        json_decref(row); /* on TW_ERR_INVALID: the candidates, already named in err */
        return s;
    }
    return TW_END;
}
