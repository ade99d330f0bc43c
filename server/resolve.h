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
 * the route names no run or dataset or no row has that id or name (the handler answers 404 as before);
 * TW_ERR_INVALID when several rows share the name (err lists their ids: 409); TW_ERR_IO when the store
 * could not be read. */
tw_status tw_api_resolve_id(tw_server *S, const char *pattern, const char *ref, char id[TW_ID_BYTES],
                            tw_error *err);

#endif
