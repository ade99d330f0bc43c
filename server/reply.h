/* reply.h — the replies every resource's handlers share (api_datasets.c, api_runs.c): the row a path's
 * {id} names or 404, and the answer to a DELETE.
 *
 * Owns: the mapping of a store read or delete's status to the reply (404 / 409 / the error / 204).
 * Does not own the HTTP plumbing or the envelope (http.c) nor any resource's routes (api_*.c). */
#ifndef TW_REPLY_H
#define TW_REPLY_H

#include <jansson.h>

#include "http.h"
#include "store.h"

/* The row (new) of the `kind` ("run", "dataset") the path's {id} names, from get; NULL after replying
 * 404 (no such row) or 500 with the store's message (the read failed). */
json_t *tw_api_row_or_404(tw_server *S, tw_req *r, const char *kind, tw_store_get_fn get);

/* The reply to a DELETE whose store call returned s: 404 (TW_END), 409 (TW_ERR_INVALID: in use or not
 * finished), the error, or 204 after removing the folder dir (read before the row went; "" = none). */
void tw_api_reply_deleted(tw_server *S, tw_req *r, tw_status s, const tw_error *err, const char *kind,
                          const char *dir);

#endif
