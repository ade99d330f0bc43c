/* memory.h — the memory a run needs, estimated from its config before anything is allocated; the memory
 * the machine has; and the check between the two that `tower train` and `tower serve` share (so a model
 * that cannot fit is refused with one message naming the estimate, before a run is queued or started).
 *
 * Owns: the breakdown (each part from its owner's own rule: the replica's buffers from
 * tw_replica_size_of, the input pipeline's from tw_input_memory_bytes, the trainer's host copies as
 * trainer.c allocates them), every sum checked against overflow; the host's memory (sysinfo's total RAM,
 * capped by the memory limit of the process's cgroup, v2 or v1, the real ceiling inside Docker); the
 * check and its message. Does not own which devices a run gets (the scheduler, the trainer), a GPU's
 * memory (tw_backend_device_info; the server, which never touches the CUDA runtime, does not know it)
 * or small fixed costs (the binary, the libraries, OpenBLAS's own buffers, event files).
 *
 * Why total RAM and not MemAvailable: the check refuses a config that can never fit, and `tower train`
 * exits 2 (a config error the server does not retry) when it fails; what is free right now depends on
 * other runs and the page cache and would turn a passing shortage into a permanent failure. */
#ifndef TW_MEMORY_H
#define TW_MEMORY_H

#include <stdint.h>

#include "config.h"
#include "status.h"

typedef enum {
    /* on each tower's device (the host for the CPU backend), summed over the towers */
    TW_MEM_PARAMS,      /* the parameter arena */
    TW_MEM_GRADS,       /* the gradient arena */
    TW_MEM_SLOTS,       /* the optimizer's slots: none (SGD), 1 arena (momentum), 2 (Adam) */
    TW_MEM_EMA,         /* the EMA shadows (always held: evaluation and checkpoints read them) */
    TW_MEM_ACTIVATIONS, /* layer outputs and their gradients, conv columns (the CPU, which convolves
                           directly, holds none: an upper bound there), pool argmax */
    TW_MEM_BATCH,       /* the device batch: inputs, labels, losses, probabilities */
    /* on the host */
    TW_MEM_HOST_COPIES, /* the trainer's 4 host arenas and a checkpoint read on resume */
    TW_MEM_HOST_BATCHES,/* the two alternating host batches of every tower, evaluation buffers */
    TW_MEM_INPUT,       /* the input pipeline: decoded set or shuffle buffer, prefetch ring (train, test) */
    TW_MEM_PARTS
} tw_memory_part;

enum { TW_MEM_DEVICE_PARTS = TW_MEM_HOST_COPIES }; /* parts [0, this) live on the towers' devices */

typedef struct {
    uint64_t part[TW_MEM_PARTS]; /* bytes */
    uint64_t device;             /* bytes one tower's device holds (its share of the device parts) */
    uint64_t host;               /* bytes of the host parts */
    int towers;
    tw_optimizer_kind optimizer; /* names the slots in messages */
} tw_memory;

/* What is known of the data. */
typedef struct {
    uint64_t train_examples;     /* 0: not known (counted at the input's streaming size) */
    uint64_t test_examples;      /* 0: not known, or no test split */
} tw_memory_data;

/* Estimates what c needs. data NULL: no input pipeline (the bench). Errors: the model's (a layer that
 * does not fit; TW_ERR_INVALID "too large" when a size passes the backends' int sizes or 2^64 bytes). */
tw_status tw_memory_estimate(const tw_config *c, const tw_memory_data *data, tw_memory *out,
                             tw_error *err);

/* Memory a run may use, and what it is, for the message ("the CPU has", "cuda:0 has"). */
typedef struct {
    uint64_t bytes;
    char what[160];
} tw_memory_limit;

/* The host's memory: total RAM, capped by the cgroup limit when one is set. Errors: TW_ERR_IO when
 * sysinfo fails. */
tw_status tw_memory_host_limit(tw_memory_limit *out, tw_error *err);

/* An explicit limit (`--memory-limit BYTES`) in place of what the machine has. */
void tw_memory_limit_given(uint64_t bytes, tw_memory_limit *out);

/* Refuses (TW_ERR_INVALID) an estimate over the limits, with a message naming the estimate, its parts
 * from the biggest down, and the limit: "model: the run needs ~48.6 GiB of memory (parameters 16.2 GiB,
 * ...) but the CPU has 23.5 GiB (...)". on_gpu 0: every part lives on the host (the CPU backend), checked
 * against host. on_gpu 1: one tower's device parts plus the CUDA runtime's allowance against device
 * (skipped when device is NULL: not known), the host parts against host. */
tw_status tw_memory_check(const tw_memory *m, int on_gpu, const tw_memory_limit *host,
                          const tw_memory_limit *device, tw_error *err);

/* The bytes in the unit that suits them: "512 B", "1.5 MiB", "16.0 GiB", "2.1 TiB". */
void tw_memory_format(uint64_t bytes, char *out, size_t size);

#endif
