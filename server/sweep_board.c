/* sweep_board.c — a sweep's HParams experiment on disk. See sweep_board.h. */
#include "sweep_board.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "datafs.h"
#include "events.h"
#include "hparams.h"
#include "searcher.h"

/* DATA/sweeps/<folder>[/<trial>] of the sweep row into buf[PATH_MAX]. */
static int sweep_path(tw_server *S, const json_t *sweep, const char *trial, char *buf)
{
    char folder[TW_RUN_FOLDER_BYTES];
    if (tw_run_folder_name(json_string_value(json_object_get(sweep, "id")),
                           json_string_value(json_object_get(sweep, "name")), 0, folder, sizeof folder) != 0)
        return -1;
    return tw_sweep_dir(S, folder, trial, buf, PATH_MAX);
}

/* DATA/sweeps, the sweep's folder and the trial's, each made when missing, the trial's path into dir. */
static tw_status make_dirs(tw_server *S, const json_t *sweep, const char *trial, char *dir, tw_error *err)
{
    const char *levels[] = {NULL, NULL, trial};
    for (int k = 0; k < 3; k++) {
        int r = k == 0 ? tw_data_path(S, TW_DATA_SWEEPS, dir, PATH_MAX) : sweep_path(S, sweep, levels[k], dir);
        if (r != 0)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the data folder's path is too long");
        if (tw_fs_mkdir(dir, 0755) != 0 && errno != EEXIST)
            return tw_fs_error(err, dir, "cannot create the sweep's folder");
    }
    return TW_OK;
}

/* The trial's values as hparams (a number, string or bool as it is; anything else as its JSON text, which
 * texts[] holds). Returns the count. */
static size_t hparams_of(const json_t *values, tw_hparam *out, char **texts)
{
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)values, key, v) {
        if (n == TW_SWEEP_MAX_PARAMS)
            break;
        tw_hparam *h = &out[n];
        texts[n] = NULL;
        *h = (tw_hparam){.name = key, .kind = TW_HPARAM_NUMBER, .number = json_number_value(v)};
        if (json_is_boolean(v))
            *h = (tw_hparam){.name = key, .kind = TW_HPARAM_BOOL, .number = json_is_true(v)};
        else if (json_is_string(v))
            *h = (tw_hparam){.name = key, .kind = TW_HPARAM_STRING, .string = json_string_value(v)};
        else if (!json_is_number(v))
            *h = (tw_hparam){.name = key, .kind = TW_HPARAM_STRING,
                             .string = (texts[n] = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)) ? texts[n] : "?"};
        n++;
    }
    return n;
}

static tw_status write_session(const char *dir, const json_t *values, int ok, const char *model_uri, tw_error *err)
{
    tw_hparam list[TW_SWEEP_MAX_PARAMS];
    char *texts[TW_SWEEP_MAX_PARAMS];
    size_t n = hparams_of(values, list, texts);
    double now = tw_now_wall();
    tw_hparams_session s = {.hparams = list, .n = n, .group_name = "", .model_uri = model_uri, .start_secs = now};
    tw_status st = tw_hparams_append_session(dir, &s, ok ? TW_HPARAMS_SUCCESS : TW_HPARAMS_FAILURE, now, err);
    for (size_t i = 0; i < n; i++)
        free(texts[i]);
    return st;
}

typedef struct {
    const char *tag;
    int64_t step;
    double value;
} point;

static tw_status add_point(tw_events_writer *w, void *ctx, tw_error *err)
{
    const point *p = ctx;
    return tw_events_add_scalar(w, p->tag, p->step, (float)p->value, err);
}

tw_status tw_sweep_board_result(tw_server *S, const json_t *sweep, const char *trial_name, const json_t *values,
                                int rung, int64_t step, double metric, const char *model_uri, tw_error *err)
{
    char dir[PATH_MAX];
    TW_TRY(make_dirs(S, sweep, trial_name, dir, err));
    if (rung == 0) /* the session once, with its first result (a FAILURE when that has none) */
        TW_TRY(write_session(dir, values, !isnan(metric), model_uri, err));
    if (isnan(metric))
        return TW_OK;
    const char *tag = json_string_value(json_object_get(json_object_get(sweep, "spec"), "metric"));
    point p = {tag, step, metric};
    return tw_events_write_file(dir, add_point, &p, err);
}

int tw_sweep_board_dir(tw_server *S, const json_t *sweep, char *buf) { return sweep_path(S, sweep, NULL, buf); }

void tw_sweep_board_remove(tw_server *S, const json_t *sweep)
{
    char dir[PATH_MAX];
    if (sweep_path(S, sweep, NULL, dir) == 0)
        tw_remove_tree(dir);
}
