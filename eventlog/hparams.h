/* hparams.h — TensorBoard's HParams summaries: what makes a run a "session" in the HPARAMS tab.
 *
 * Owns: the two summaries Tower writes (docs/formats.md "HParams"): `_hparams_/session_start_info`
 * (the hyperparameters, the group name, the model and monitor links, the start time) and
 * `_hparams_/session_end_info` (SUCCESS or FAILURE, the end time), each a HParamsPluginData
 * (proto/hparams.proto, version 0) in the plugin metadata of a null-tensor value at step 0; the group
 * name's hash; and appending a whole session (start and end) to a run folder in a small event file of
 * its own.
 * Does not own: which hyperparameters a run has, when a run starts or ends, or who writes the end
 * (engine/trainer.c writes the start and the ends it knows to be final, server/scheduler.c the ends only
 * the server knows), nor the event file (events.h).
 *
 * TensorBoard keeps the metadata of a (run, tag)'s first value only: write each summary once per run.
 * Thread-safety: as the events writer. */
#ifndef TW_HPARAMS_H
#define TW_HPARAMS_H

#include <stddef.h>

#include "events.h"
#include "status.h"

typedef enum { TW_HPARAM_NUMBER = 0, TW_HPARAM_STRING, TW_HPARAM_BOOL } tw_hparam_kind;

/* One hyperparameter: a name and a scalar (number, string or bool). Strings are borrowed. */
typedef struct {
    const char *name;
    tw_hparam_kind kind;
    double number; /* NUMBER; BOOL: 0 or 1 */
    const char *string; /* STRING */
} tw_hparam;

typedef struct {
    const tw_hparam *hparams; /* [n], names unique */
    size_t n;
    const char *group_name;   /* sessions with one group name form one row (metrics averaged); "" = none */
    const char *model_uri;    /* e.g. the checkpoint folder; NULL or "" = none */
    const char *monitor_url;  /* e.g. the run's status page; NULL or "" = none */
    double start_secs;        /* wall-clock seconds */
} tw_hparams_session;

/* api.proto's Status values Tower writes. */
typedef enum { TW_HPARAMS_SUCCESS = 1, TW_HPARAMS_FAILURE = 2 } tw_hparams_status;

enum { TW_HPARAMS_GROUP_BYTES = 17 };

/* The group name of a text (e.g. a canonical config without its seed): 16 hex digits of its 64-bit
 * FNV-1a hash, into out[TW_HPARAMS_GROUP_BYTES]. */
void tw_hparams_group_name(const char *text, char out[TW_HPARAMS_GROUP_BYTES]);

/* Appends `_hparams_/session_start_info` at step 0. Errors: TW_ERR_INVALID (no name, a duplicate
 * name, NULL string), TW_ERR_NOMEM, the writer's (events.h). */
tw_status tw_hparams_add_session_start(tw_events_writer *w, const tw_hparams_session *s, tw_error *err);

/* Appends `_hparams_/session_end_info` at step 0. Errors: the writer's. */
tw_status tw_hparams_add_session_end(tw_events_writer *w, tw_hparams_status status, double end_secs,
                                     tw_error *err);

/* Writes the start info s and the end info (status, end_secs) into a new event file of its own in logdir
 * (which must exist), flushed with fsync and closed: for a writer that is not the run's (the server at a
 * state only it knows). Errors: tw_hparams_add_session_start's, tw_events_create's and the writer's. */
tw_status tw_hparams_append_session(const char *logdir, const tw_hparams_session *s, tw_hparams_status status,
                                    double end_secs, tw_error *err);

#endif
