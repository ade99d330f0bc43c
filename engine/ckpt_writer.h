/* ckpt_writer.h — checkpoints saved off the training step: one save at a time on a background thread.
 *
 * Owns: the thread that runs tw_checkpoint_save (checkpoint.h: write, fsync, rename, switch `latest`,
 * prune — atomic as ever) for the trainer while training goes on, the one save in flight, and its
 * outcome until the trainer collects it. Does not own: the folder or the file (checkpoint.h), what the
 * tensors mean or when a checkpoint is due (trainer.c), the snapshot itself (the trainer's host copies of
 * the arenas: the caller leaves them untouched until the save is collected).
 *
 * At most one save is in flight: submitting waits for the previous one first (a disk slower than the
 * checkpoint cadence stalls the step at the next save, never more than one save behind). A save that
 * failed is reported by the next call (poll, wait or submit) with the error tw_checkpoint_save set, so the
 * run ends with the exit status an inline save would have given (child.h). When no thread can be started
 * (pthread_create fails: e.g. an address-space limit) the save runs inline, as before.
 *
 * Thread-safety: one caller thread (the trainer's); the writer's thread touches only the submitted job. */
#ifndef TW_CKPT_WRITER_H
#define TW_CKPT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "status.h"

typedef struct tw_ckpt_writer tw_ckpt_writer;

/* A writer for the checkpoint folder dir (copied). Errors: TW_ERR_NOMEM, TW_ERR_INVALID (dir too long). */
tw_status tw_ckpt_writer_create(const char *dir, tw_ckpt_writer **out, tw_error *err);

/* Waits for the save in flight (its outcome is lost: call tw_ckpt_writer_wait first) and frees. NULL-safe. */
void tw_ckpt_writer_destroy(tw_ckpt_writer *w);

/* Saves one checkpoint (tw_checkpoint_save(dir, step, keep, tensors, n, meta, n_meta)) in the
 * background, after waiting for the previous save. Takes ownership of tensors ([n], malloc'd) and names
 * (malloc'd storage the tensors' names point into): freed when the save ends, also on error. The
 * tensors' data stay borrowed: the caller keeps them unchanged until the save is collected (poll says
 * done, or wait). meta is copied. Errors: the previous save's, TW_ERR_NOMEM; a save that ran inline: its own. */
tw_status tw_ckpt_writer_submit(tw_ckpt_writer *w, int64_t step, int keep, tw_ckpt_tensor *tensors,
                                void *names, size_t n, const tw_ckpt_meta *meta, size_t n_meta,
                                tw_error *err);

/* Without blocking: the outcome of a save that has ended (collected: the tensors' data are free again),
 * TW_OK when none has ended or none was submitted. *busy (may be NULL) = 1 while one is in flight. */
tw_status tw_ckpt_writer_poll(tw_ckpt_writer *w, int *busy, tw_error *err);

/* Waits for the save in flight, if any, and returns its outcome. */
tw_status tw_ckpt_writer_wait(tw_ckpt_writer *w, tw_error *err);

#endif
