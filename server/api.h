/* api.h — the handlers of the route table that are not runs (runs.h): datasets, system, static files. */
#ifndef TW_API_H
#define TW_API_H

#include "http.h"
#include "store.h"

void tw_api_datasets_list(tw_server *S, tw_req *r);
void tw_api_dataset_get(tw_server *S, tw_req *r);
void tw_api_dataset_delete(tw_server *S, tw_req *r);
void tw_api_dataset_samples(tw_server *S, tw_req *r);

/* The row (new) of the `kind` ("run", "dataset") the path's {id} names, from get; NULL after replying
 * 404 (no such row) or 500 with the store's message (the read failed). */
json_t *tw_api_row_or_404(tw_server *S, tw_req *r, const char *kind, tw_store_get_fn get);

/* The reply to a DELETE whose store call returned s: 404 (TW_END), 409 (TW_ERR_INVALID: in use or not
 * finished), the error, or 204 after removing the folder dir_of names. */
void tw_api_reply_deleted(tw_server *S, tw_req *r, tw_status s, const tw_error *err, const char *kind,
                          int (*dir_of)(const tw_server *, const char *, char *, size_t));

/* Replies err (tw_reply_status) and logs it on stderr: for a failure on the server's own files (a
 * symlink met under the data folder) that the operator must see. */
void tw_api_reply_logged(tw_req *r, const tw_error *err);

void tw_api_health(tw_server *S, tw_req *r);
void tw_api_devices(tw_server *S, tw_req *r);
void tw_api_openapi(tw_server *S, tw_req *r);
void tw_api_prometheus(tw_server *S, tw_req *r);
void tw_api_index(tw_server *S, tw_req *r);
void tw_api_static(tw_server *S, tw_req *r);

/* The OpenAPI 3.0 document of TW_ROUTES (new JSON). */
json_t *tw_openapi(void);

#endif
