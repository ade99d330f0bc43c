/* api.h — the handlers of the route table that are not runs (runs.h): datasets, system, static files. */
#ifndef TW_API_H
#define TW_API_H

#include "http.h"

void tw_api_datasets_list(tw_server *S, tw_req *r);
void tw_api_dataset_get(tw_server *S, tw_req *r);
void tw_api_dataset_delete(tw_server *S, tw_req *r);
void tw_api_dataset_samples(tw_server *S, tw_req *r);

/* The row (new) of the `kind` ("run", "dataset") the path's {id} names, from get; NULL after replying 404. */
json_t *tw_api_row_or_404(tw_server *S, tw_req *r, const char *kind, json_t *(*get)(tw_store *, const char *));

/* The reply to a DELETE whose store call returned s: 404 (TW_END), 409 (TW_ERR_INVALID: in use or not
 * finished), the error, or 204 after removing the folder dir_of names. */
void tw_api_reply_deleted(tw_server *S, tw_req *r, tw_status s, const tw_error *err, const char *kind,
                          int (*dir_of)(const tw_server *, const char *, char *, size_t));

void tw_api_health(tw_server *S, tw_req *r);
void tw_api_devices(tw_server *S, tw_req *r);
void tw_api_openapi(tw_server *S, tw_req *r);
void tw_api_prometheus(tw_server *S, tw_req *r);
void tw_api_index(tw_server *S, tw_req *r);
void tw_api_static(tw_server *S, tw_req *r);

/* The OpenAPI 3.0 document of TW_ROUTES (new JSON). */
json_t *tw_openapi(void);

#endif
