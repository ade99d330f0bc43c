/* api_evaluations.c — a run's evaluation routes (see evaluations.h).
 *
 * GET /api/v1/runs/{id}/evaluation serves the run's evaluation.json as the trainer last wrote it (the
 * engine owns the file, its name and its format: engine/evaluation.h), or 404 with the envelope when the
 * run has not evaluated yet. */
#include "evaluations.h"

#include <limits.h>

#include "evaluation.h"
#include "reply.h"
#include "store.h"

void tw_api_run_evaluation(tw_server *S, tw_req *r)
{
    json_t *row = tw_api_row_or_404(S, r, "run", tw_store_run_get);
    json_decref(row);
    if (!row)
        return;
    const char *id = tw_req_param(r, "id");
    char path[PATH_MAX];
    json_t *doc = NULL;
    tw_error err;
    tw_status s = tw_run_path(S, id, TW_EVALUATION_FILE, path, sizeof path) != 0
                      ? tw_error_set(&err, TW_ERR_INVALID, id, -1, "the run folder's path is too long")
                      : tw_evaluation_read(path, &doc, &err);
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "run '%s' has no evaluation yet", id);
    else if (s != TW_OK)
        tw_api_reply_logged(r, &err);
    else
        tw_reply_json(r, 200, doc);
}
