/* reply.c — the replies every resource's handlers share (see reply.h). */
#include "reply.h"

json_t *tw_api_row_or_404(tw_server *S, tw_req *r, const char *kind, tw_store_get_fn get)
{
    const char *id = tw_req_param(r, "id");
    json_t *row;
    tw_error err;
    tw_status s = get(S->store, id, &row, &err);
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "no %s '%s'", kind, id);
    else if (s != TW_OK)
        tw_reply_status(r, &err);
    return row;
}

void tw_api_reply_deleted(tw_server *S, tw_req *r, tw_status s, const tw_error *err, const char *kind,
                          const char *dir)
{
    const char *id = tw_req_param(r, "id");
    if (s == TW_END)
        tw_reply_error(r, TW_API_NOT_FOUND, "no %s '%s'", kind, id);
    else if (s == TW_ERR_INVALID)
        tw_reply_error(r, TW_API_CONFLICT, "%s", err->message);
    else if (s != TW_OK)
        tw_reply_status(r, err);
    else {
        if (dir[0])
            tw_remove_tree(dir);
        tw_server_changed(S);
        tw_reply_empty(r, 204);
    }
}
