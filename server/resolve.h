/* resolve.h — names wherever ids are: the {id} of a route under /api/v1/runs/ or /api/v1/datasets/ may be
 * the name of a run or dataset (when one row has it) instead of its id.
 *
 * Owns: which kind of row a route's {id} names (from its pattern). Does not own the lookups (store.h:
 * tw_store_run_resolve, tw_store_dataset_resolve_unique) or the replies (http.c, the handlers). */
#ifndef TW_RESOLVE_H
#define TW_RESOLVE_H

#include "server.h"
#include "store.h"

/* The id that ref names on the route `pattern`, into id: TW_OK (ref itself when it is an id); TW_END when
 * the route names no run or dataset (err's message empty) or no row has that id or name (err's message is
 * the 404's: "no run 'x' (did you mean 'y'?)"); TW_ERR_INVALID when several rows share the name (err lists
 * their ids: 409); TW_ERR_IO when the store could not be read. */
/* " (did you mean 'NAME'?)" into out when a run's (kind 'r') or dataset's ('d') name is close to ref, else
 * "". */
void tw_api_suggest_name(tw_server *S, char kind, const char *ref, char *out, size_t size);

tw_status tw_api_resolve_id(tw_server *S, const char *pattern, const char *ref, char id[TW_ID_BYTES],
                            tw_error *err);

#endif
