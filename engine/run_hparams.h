/* run_hparams.h — what a run's config looks like to TensorBoard: its HParams row and its TEXT tab.
 *
 * Owns: the fixed, short hyperparameter list a run shows in the HPARAMS tab (optimizer, learning_rate,
 * lr_decay, batch_size, towers, l2, ema_decay, steps, model as a layer string, dataset, seed), its group
 * name (a hash of the canonical config without the seed, so runs that differ only in seed form one
 * row; a failed run keeps a row of its own), the model link (the checkpoint folder), and the config as readable markdown (indented JSON in a
 * code block). Does not own the summaries' bytes (eventlog/hparams.h), the config's canonical JSON
 * (config.h) or when they are written (trainer.c). */
#ifndef TW_RUN_HPARAMS_H
#define TW_RUN_HPARAMS_H

#include "config.h"
#include "hparams.h"

enum { TW_RUN_HPARAMS = 11, TW_RUN_HPARAM_TEXT = 256 };

typedef struct {
    tw_hparam list[TW_RUN_HPARAMS];
    char model[TW_RUN_HPARAM_TEXT];   /* e.g. "conv32k5-pool2-dense1024-drop0.4-dense10" */
    char lr_decay[TW_RUN_HPARAM_TEXT]; /* "none", "0.9/600[ staircase]", "cosine/600", "piecewise 1,0.1@300"
                                          (run_hparams.c: decay_text) */
    char dataset[TW_RUN_HPARAM_TEXT];  /* the training file's folder name */
    char group[TW_HPARAMS_GROUP_BYTES];
} tw_run_hparams;

/* Fills *h from c (borrowed while h is used: the strings point into h and c). Returns 0, or -1 when
 * the canonical config cannot be built (no memory). */
int tw_run_hparams_of(const tw_config *c, tw_run_hparams *h);

/* The run's HParams session once it has ended for good with status: h's list, the model and monitor links
 * and start_secs (borrowed), and the group: h's (the config's, seed left out) for a SUCCESS, so finished runs
 * that differ only in seed share a row; none for a FAILURE, which TensorBoard then shows in a row of its own.
 * TensorBoard keeps the first start info a run has, so it is written only with the end (a running or
 * cancelled run is not yet a session): an unfinished or failed run is never averaged with finished ones. */
tw_hparams_session tw_run_hparams_session(const tw_run_hparams *h, tw_hparams_status status,
                                          const char *model_uri, const char *monitor_url, double start_secs);

/* The run's checkpoint folder as an absolute path (checkpoint.h's tw_checkpoint_dir_of of logdir made
 * absolute; as given when that fails), into out[size]: the HParams model_uri. */
void tw_run_model_uri(const char *logdir, char *out, size_t size);

/* The config as markdown for the TEXT tab: "```json\n" + the canonical JSON indented by 2 + "\n```".
 * Caller frees; NULL when out of memory. */
char *tw_run_config_markdown(const tw_config *c);

#endif
