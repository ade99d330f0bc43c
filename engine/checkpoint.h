/* checkpoint.h — training checkpoints: the folder of safetensors files (docs/formats.md §7.1) and reading
 * one back for the trainer.
 *
 * Owns: the checkpoint folder — `ckpt-<step>.safetensors` files (the step zero-padded to 10 digits so
 * names sort; larger steps still work, ordering is always by the parsed number), a `latest` pointer
 * file (one line: the checkpoint's file name) switched atomically only after the checkpoint is durable,
 * pruning to the newest K only after the pointer moved (docs/reliability.md rule 1, rows P3, P5), and
 * removing temporaries an interrupted save left (tw_checkpoint_remove_temporaries, which the server
 * also runs before it starts a trainer), a read-only listing for the server (steps, file names, sizes,
 * which one `latest` names), the folder's place in a run's log folder (logdir/checkpoints); and a
 * checkpoint reader that hands out fp32 tensors by name and metadata by key. No other module reads or
 * names the folder's files. Does not own: the file format (eventlog/safetensors.h: tw_st_tensor and
 * tw_st_meta describe what to save), or what the tensors and metadata mean (the trainer names them).
 *
 * The pointer is the commit record. A checkpoint file newer than the one `latest` names was never
 * committed (a save died between its rename and the pointer switch): it is ignored, and deleted by the
 * next save. A `latest` that is malformed or names a missing file is an error (TW_ERR_CORRUPT), never a
 * silent fallback to an older checkpoint: resuming from an older step without saying so would hide
 * lost data and rewind the run; an operator decides (docs/reliability.md: nothing lost, a clear error).
 *
 * Not thread-safe: one writer per folder (one trainer per run). A tw_checkpoint may be read from
 * several threads once opened. */
#ifndef TW_CHECKPOINT_H
#define TW_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include "status.h"

enum {
    TW_CKPT_MAX_PATH = 4096,
    TW_CKPT_NAME_BYTES = 64, /* a checkpoint file's name with its NUL: "ckpt-" + up to 19 digits + ".safetensors" */
};

/* The checkpoint folder of the run that writes to logdir (logdir/checkpoints) into buf[size]. Returns 0,
 * or -1 when it does not fit. */
int tw_checkpoint_dir_of(const char *logdir, char *buf, size_t size);

/* Removes the temporaries an interrupted save left in dir (ckpt-*.safetensors.tmp.* and latest.tmp.*;
 * nothing else). A missing dir has none. Errors: TW_ERR_IO (dir or a file reached through a symlink under
 * a confined data folder, base/datafs.h: nothing is deleted through it; an unlink that failed). */
tw_status tw_checkpoint_remove_temporaries(const char *dir, tw_error *err);

/* One checkpoint file of a folder. */
typedef struct {
    int64_t step;
    char file[TW_CKPT_NAME_BYTES]; /* "ckpt-0000000100.safetensors" */
    uint64_t bytes;
} tw_ckpt_entry;

/* What a checkpoint folder holds, as the server shows it. */
typedef struct {
    tw_ckpt_entry *entries;                /* [n] by step, oldest first; owned */
    size_t n;
    int64_t latest;                        /* the step of the listed file `latest` names, or -1 */
    char latest_file[TW_CKPT_NAME_BYTES];  /* the file `latest` names; "" when there is no valid pointer */
} tw_ckpt_listing;

/* Lists dir without changing anything in it (a save may be in progress: temporaries are not files of
 * the listing, and a checkpoint pruned meanwhile is left out). A missing dir lists empty; a `latest`
 * that is missing or malformed leaves latest -1. Caller frees with tw_checkpoint_listing_free (also
 * after an error). Errors: TW_ERR_IO (a symlink on the way under a confined data folder, a folder
 * that cannot be read), TW_ERR_NOMEM. */
tw_status tw_checkpoint_list(const char *dir, tw_ckpt_listing *out, tw_error *err);

/* The listed checkpoint of step (step < 0: the one `latest` names), borrowed from l; NULL when l holds
 * none (no such step, or no valid `latest`). */
const tw_ckpt_entry *tw_checkpoint_listing_find(const tw_ckpt_listing *l, int64_t step);
void tw_checkpoint_listing_free(tw_ckpt_listing *l);

/* The file name dir/latest holds into name[TW_CKPT_NAME_BYTES], read without touching anything (nor
 * checking that the file exists: the caller opens it). TW_END when there is no pointer or it is not one
 * line naming a checkpoint file. Errors: TW_ERR_IO. */
tw_status tw_checkpoint_latest_name(const char *dir, char *name, tw_error *err);

/* The engine's names for what a checkpoint holds: a tensor to save (name and fp32 data borrowed) and a
 * metadata entry (borrowed strings). The format module defines them. */
typedef tw_st_tensor tw_ckpt_tensor;
typedef tw_st_meta tw_ckpt_meta;

/* Saves one checkpoint into dir (created if missing, one level): writes dir/ckpt-<step>.safetensors
 * through tw_safetensors_write_finite (atomic and durable; every value checked for NaN and Inf in the
 * pass that writes it), then switches dir/latest to it (atomic, durable),
 * then deletes every other checkpoint file except the newest `keep` at or below step (files above step
 * are uncommitted leftovers of an abandoned run; see above). tensors and meta are borrowed.
 * Errors: TW_ERR_INVALID (step < 0, keep < 1, dir too long, tensors refused by the writer; no file
 * written, though dir may have been created; with errno_value EDOM: a NaN or Inf value, the message
 * names the tensor and the element, the temporary is removed and `latest` is untouched), TW_ERR_IO (a
 * write, fsync, rename, mkdir or unlink failed: if the checkpoint or the pointer
 * failed, `latest` and the checkpoint it names are untouched — the caller may retry with a new save,
 * never by re-fsyncing (P8); if only pruning failed, the message says the checkpoint is saved),
 * TW_ERR_NOMEM. */
tw_status tw_checkpoint_save(const char *dir, int64_t step, int keep, const tw_ckpt_tensor *tensors,
                             size_t n, const tw_ckpt_meta *meta, size_t n_meta, tw_error *err);

/* Finds the committed checkpoint of dir: its path into buf[size]. First removes leftover temporaries of
 * an interrupted save (ckpt-*.safetensors.tmp.* and latest.tmp.*; nothing else). Returns TW_END when
 * there is none (no dir, or no `latest`). Errors: TW_ERR_CORRUPT (`latest` is not one line naming a
 * checkpoint file, or names a missing file; err.file is dir/latest), TW_ERR_INVALID (buf too small),
 * TW_ERR_IO. Does not read the checkpoint itself (tw_checkpoint_read does, or use open_latest). */
tw_status tw_checkpoint_latest(const char *dir, char *buf, size_t size, tw_error *err);

typedef struct tw_checkpoint tw_checkpoint; /* a checkpoint file read into memory */

/* The value of a Tower checkpoint's "format" metadata: the one format this Tower writes and reads. A file
 * without "format" is a plain safetensors file (another tool's), read for its tensors alone. */
#define TW_CHECKPOINT_FORMAT "tower-checkpoint-1"

/* Reads and validates path (tw_safetensors_read); every tensor must be F32, and a "format" other than
 * TW_CHECKPOINT_FORMAT is refused by name (a newer Tower's checkpoint is never misread). Caller owns *out.
 * Errors: those of tw_safetensors_read, TW_ERR_UNSUPPORTED (a tensor of another dtype, or F32 data not
 * 4-byte aligned in the file: Tower never writes either; an unknown format). */
tw_status tw_checkpoint_read(const char *path, tw_checkpoint **out, tw_error *err);

/* tw_checkpoint_latest then tw_checkpoint_read: TW_END when dir holds no checkpoint; a corrupt file
 * that `latest` names is an error naming that file. Caller owns *out. */
tw_status tw_checkpoint_open_latest(const char *dir, tw_checkpoint **out, tw_error *err);

void tw_checkpoint_free(tw_checkpoint *c); /* NULL-safe */

/* The path the checkpoint was read from (borrowed from c). */
const char *tw_checkpoint_path(const tw_checkpoint *c);

/* The tensor called name: its values (borrowed from c, [count] fp32) and element count (may be NULL);
 * NULL when absent. */
const float *tw_checkpoint_tensor(const tw_checkpoint *c, const char *name, size_t *count);

/* Copies the tensor called name into dst ([prod(shape)] fp32, caller-owned) after checking that it
 * exists with exactly this rank and shape. Errors: TW_ERR_CORRUPT naming the file and the tensor
 * (absent, or stored with another shape), TW_ERR_INVALID (rank out of range). */
tw_status tw_checkpoint_fetch(const tw_checkpoint *c, const char *name, int rank,
                              const int64_t *shape, float *dst, tw_error *err);

/* A `__metadata__` value (borrowed from c), NULL when absent. */
const char *tw_checkpoint_meta(const tw_checkpoint *c, const char *key);

#endif
