/* api_export.h — GET /api/v1/runs/{id}/export (api_export.c): a run's checkpoint as a TensorFlow checkpoint
 * (one ustar archive) or an ONNX graph, the bytes `tower export` writes.
 *
 * Owns: the route's query parameters (format, step, weights) and its replies. Does not own the formats
 * (engine/export.h) or the checkpoint folder (engine/checkpoint.h). */
#ifndef TW_API_EXPORT_H
#define TW_API_EXPORT_H

#include "http.h"

void tw_api_run_export(tw_server *S, tw_req *r);

#endif
