/* world.h — the world of processes one run trains in: `mpirun -np N tower train ...` (or srun), or N
 * processes started with torchrun's variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK: torchrun, srun
 * without PMIx, a Kubernetes Indexed Job), train as one data-parallel run; without either the world is one
 * process.
 *
 * Owns: joining the world and leaving it (tw_world_init, tw_world_finalize), this process's rank and the
 * world's size, where this process's towers sit among all towers of the world (tw_world_tower_offset:
 * global tower = rank * local towers + local tower), and the few collectives a run needs across
 * processes: the average of a flat fp32 buffer (the gradient arena), the sum of a few doubles (the
 * step's loss, metrics), a broadcast from rank 0, a logical OR (the world-wide "stop now"), and the
 * abort that ends every process of the world with one exit status. Does not own the towers inside a
 * process and their all-reduce (train_step.c, the backends), what is averaged, or who writes (trainer.c:
 * only rank 0 writes files and progress lines).
 *
 * world.c picks the world at tw_world_init and dispatches to it (world_ops.h's table):
 *   - a launcher's environment (OMPI_COMM_WORLD_SIZE or PMI_SIZE): MPI (world_mpi.c, built with TW_MPI=ON
 *     and an MPI found; without it, several processes are refused: N independent runs writing into one
 *     folder would be worse than an error). MPI is joined only then: a plain `tower train` (the server's,
 *     the tests') never calls MPI_Init (Open MPI's singleton start forks a daemon);
 *   - else torchrun's variables (rendezvous.h) of a world of several: TCP (world_tcp.c, no MPI needed), a
 *     star through rank 0;
 *   - else a world of one (world.c itself: every collective leaves its buffer as it is).
 *
 * Collectives are called by every process of the world in the same order (a process that skips one
 * blocks the others; the TCP world checks each collective's kind and size and names both ranks when they
 * differ); errors come back as statuses, and a process that cannot go on calls tw_world_abort so that no
 * other process waits forever. A process that dies is noticed by the launcher (mpirun ends the job) or by
 * its TCP peers (the connection closes: every rank fails with TW_EXIT_FAILED, which the server retries).
 * Thread-safety: one thread calls the collectives (MPI_THREAD_FUNNELED). */
#ifndef TW_WORLD_H
#define TW_WORLD_H

#include <stddef.h>

#include "status.h"

struct tw_world_ops;

typedef struct tw_world {
    int rank;    /* this process, 0..size-1; 0 writes the run's files */
    int size;    /* processes in the world, >= 1 */
    int local_size; /* processes of the world on this machine, >= 1: they share its cores */
    int joined;  /* tw_world_init succeeded and tw_world_finalize has not run */
    char kind[8]; /* "mpi", "tcp" or "none": what joined the processes */
    const struct tw_world_ops *ops; /* the world's collectives (world_ops.h); NULL: a world of one */
    void *impl;  /* the implementation's state (world_tcp.c's connections); NULL for MPI and one */
} tw_world;

/* Joins the world (MPI_Init under a launcher; the TCP rendezvous under torchrun's variables). Once per
 * process, before any thread is started. On error w is a world of one. Errors: TW_ERR_UNSUPPORTED when a
 * launcher started several processes and this build has no MPI (the message names the build option,
 * TW_MPI); TW_ERR_INTERNAL when MPI cannot start; the torchrun variables' and the TCP join's own
 * (rendezvous.h: TW_ERR_INVALID for a malformed variable or a rank 0 refused, naming it; TW_ERR_IO with
 * ETIMEDOUT when the world was not complete in time). tw_child_exit_code maps them (UNSUPPORTED: 2). */
tw_status tw_world_init(tw_world *w, tw_error *err);

/* The processes a launcher started, from its environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE); 0 when not
 * started by one. world_env.c, as the accessors below. */
int tw_world_launched_size(void);

/* Leaves the world (MPI_Finalize, or closes the TCP connections); a no-op when not joined. Every process calls it on a normal exit. */
void tw_world_finalize(tw_world *w);

int tw_world_rank(const tw_world *w);
int tw_world_size(const tw_world *w);
int tw_world_local_size(const tw_world *w);

/* The global index of this process's first tower when every process runs local_towers towers:
 * rank * local_towers. Tower t of this process is global tower offset + t of size * local_towers. */
int tw_world_tower_offset(const tw_world *w, int local_towers);

/* buf[n] becomes the mean over the processes of every process's buf[n] (summed in fp32, by the MPI or in
 * rank order by TCP's rank 0, then scaled by 1/size). Every process calls it with the same n. A world of one leaves buf as it is. */
tw_status tw_world_allreduce_avg(tw_world *w, float *buf, size_t n, tw_error *err);

/* buf[n] becomes the sum over the processes of every process's buf[n], in fp64 (TCP: in rank order). */
tw_status tw_world_sum(tw_world *w, double *buf, size_t n, tw_error *err);

/* buf[bytes] becomes rank 0's buf on every process. */
tw_status tw_world_bcast(tw_world *w, void *buf, size_t bytes, tw_error *err);

/* *flag becomes the logical OR of every process's *flag (the world agrees on "stop now"). A failed
 * collective is a status like any other (the caller fails, and its failure aborts the world). */
tw_status tw_world_any(tw_world *w, int *flag, tw_error *err);

/* Ends every process of the world with exit_code (MPI_Abort; TCP: an abort message through rank 0 to every
 * rank; _exit in a world of one). Never returns. */
_Noreturn void tw_world_abort(tw_world *w, int exit_code);

#endif
