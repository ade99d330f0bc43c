/* resolve.c — a route's {id} given as a name becomes the id it names; a name that matches nothing gets the
 * closest known name as a hint (see resolve.h). */
#include "resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "suggest.h"

static const struct {
    const char *prefix; /* the route's pattern starts with it */
    char kind;          /* tw_store_names' kind */
    const char *noun;
    tw_status (*resolve)(tw_store *st, const char *ref, json_t **out, tw_error *err);
} KINDS[] = {
    {"/api/v1/runs/{id}", 'r', "run", tw_store_run_resolve},
    {"/api/v1/datasets/{id}", 'd', "dataset", tw_store_dataset_resolve_unique},
};

void tw_api_suggest_name(tw_server *S, char kind, const char *ref, char *out, size_t size)
{
    json_t *rows, *row;
    tw_error err;
    out[0] = 0;
    if (tw_store_names(S->store, kind, &rows, &err) != TW_OK)
        return; /* a hint only: the reply says "no such" all the same */
    size_t n = json_array_size(rows), i;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    json_array_foreach(rows, i, row) if (names) names[i] = json_string_value(json_object_get(row, "name"));
    const char *best = names ? tw_suggest(ref, names, n) : NULL;
    if (best)
        snprintf(out, size, " (did you mean '%s'?)", best);
    free(names);
    json_decref(rows);
}

tw_status tw_api_resolve_id(tw_server *S, const char *pattern, const char *ref, char id[TW_ID_BYTES],
                            tw_error *err)
{
    tw_error_clear(err);
    for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
        if (strncmp(pattern, KINDS[k].prefix, strlen(KINDS[k].prefix)))
            continue;
        json_t *row;
        tw_status s = KINDS[k].resolve(S->store, ref, &row, err);
        if (s == TW_OK)
            snprintf(id, TW_ID_BYTES, "%s", json_string_value(json_object_get(row, "id")));
        json_decref(row); /* on TW_ERR_INVALID: the candidates, already named in err */
        if (s == TW_END) {
            char hint[TW_NAME_MAX + 32];
            tw_api_suggest_name(S, KINDS[k].kind, ref, hint, sizeof hint);
            tw_error_set(err, TW_END, NULL, -1, "no %s '%.100s'%s", KINDS[k].noun, ref, hint);
        }
        return s;
    }
    return TW_END;
}
