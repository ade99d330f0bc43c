/* api.h — the route table (routes.c) and its handlers that are not runs (runs.h): datasets (with the
 * upload's HTTP side), system, static files. */
#ifndef TW_API_H
#define TW_API_H

#include "http.h"

/* routes.c: the one route table, terminated by a zeroed entry (served by tw_http_start). */
extern const tw_route TW_ROUTES[];

/* POST /api/v1/datasets: the upload ops (multipart, or a raw CSV / TFRecord body) and the handler that
 * runs when the body is complete: converts (TFRecord: now, else queued). */
extern const tw_upload_ops TW_API_DATASET_UPLOAD;
void tw_api_dataset_upload(tw_server *S, tw_req *r);

void tw_api_datasets_list(tw_server *S, tw_req *r);
void tw_api_dataset_get(tw_server *S, tw_req *r);
void tw_api_dataset_delete(tw_server *S, tw_req *r);
void tw_api_dataset_samples(tw_server *S, tw_req *r);

void tw_api_health(tw_server *S, tw_req *r);
void tw_api_devices(tw_server *S, tw_req *r);
void tw_api_openapi(tw_server *S, tw_req *r);
void tw_api_prometheus(tw_server *S, tw_req *r);
void tw_api_index(tw_server *S, tw_req *r);
void tw_api_static(tw_server *S, tw_req *r);

#endif
