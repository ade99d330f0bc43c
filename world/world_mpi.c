/* world_mpi.c — the world of processes on MPI (world.h, world_ops.h): MPI_COMM_WORLD, joined when a
 * launcher (mpirun, srun --mpi) started the process (world.c decides). Built only with TW_HAVE_MPI
 * (engine/CMakeLists.txt); the only file that includes mpi.h.
 *
 * Owns: MPI_Init_thread (FUNNELED: the towers' threads never call MPI) only when the environment names a
 * launcher, MPI_ERRORS_RETURN on the communicator (a failed collective becomes a tw_status the trainer
 * can report before it aborts the world), the collectives in chunks of at most INT_MAX elements (MPI's
 * counts are int), MPI_Abort. A rank that dies is noticed by mpirun, which ends the others (docs/
 * reliability.md). Does not own what is reduced (train_step.c, trainer.c). */
#include "world_ops.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


enum { CHUNK = INT_MAX / 2 }; /* elements per MPI call: MPI's counts are int */

/* TW_OK, or err filled with MPI's message for rc naming the call. */
static tw_status mpi_check(int rc, const char *what, tw_error *err)
{
    if (rc == MPI_SUCCESS)
        return TW_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "%s failed: %s", what, msg);
}

/* w->local_size: the processes of the world that share this machine (MPI_COMM_TYPE_SHARED). */
static tw_status count_local(tw_world *w, tw_error *err)
{
    MPI_Comm node;
    TW_TRY(mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &node),
                     "MPI_Comm_split_type", err));
    tw_status s = mpi_check(MPI_Comm_size(node, &w->local_size), "MPI_Comm_size", err);
    MPI_Comm_free(&node);
    return s;
}

static const tw_world_ops MPI_OPS;

tw_status tw_world_mpi_init(tw_world *w, tw_error *err)
{
    int provided;
    TW_TRY(mpi_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", err));
    w->joined = 1;
    w->ops = &MPI_OPS;
    snprintf(w->kind, sizeof w->kind, "mpi");
    TW_TRY(mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
                     err));
    TW_TRY(mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &w->rank), "MPI_Comm_rank", err));
    TW_TRY(mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &w->size), "MPI_Comm_size", err));
    TW_TRY(count_local(w, err));
    if (provided < MPI_THREAD_FUNNELED)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "the MPI library does not support MPI_THREAD_FUNNELED (provided %d)", provided);
    return TW_OK;
}

static void mpi_finalize(tw_world *w)
{
    (void)w;
    MPI_Finalize();
}

static tw_status mpi_allreduce_avg(tw_world *w, float *buf, size_t n, tw_error *err)
{
    const float inv = 1.0f / (float)w->size;
    for (size_t at = 0; at < n; at += CHUNK) {
        int len = (int)(n - at < CHUNK ? n - at : CHUNK);
        TW_TRY(mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + at, len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                         "MPI_Allreduce of the gradients", err));
        for (int i = 0; i < len; i++)
            buf[at + (size_t)i] *= inv;
    }
    return TW_OK;
}

static tw_status mpi_sum(tw_world *w, double *buf, size_t n, tw_error *err)
{
    (void)w;
    for (size_t at = 0; at < n; at += CHUNK) {
        int len = (int)(n - at < CHUNK ? n - at : CHUNK);
        TW_TRY(mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + at, len, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                         "MPI_Allreduce of the metrics", err));
    }
    return TW_OK;
}

static tw_status mpi_bcast(tw_world *w, void *buf, size_t bytes, tw_error *err)
{
    (void)w;
    for (size_t at = 0; at < bytes; at += CHUNK) {
        int len = (int)(bytes - at < CHUNK ? bytes - at : CHUNK);
        TW_TRY(mpi_check(MPI_Bcast((char *)buf + at, len, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast", err));
    }
    return TW_OK;
}

static tw_status mpi_any(tw_world *w, int *flag, tw_error *err)
{
    (void)w; /* a failure is the caller's to report: it aborts the world with its exit status */
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, flag, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD),
                     "MPI_Allreduce of the stop flag", err);
}

static void mpi_abort(tw_world *w, int exit_code)
{
    (void)w;
    MPI_Abort(MPI_COMM_WORLD, exit_code);
}

static const tw_world_ops MPI_OPS = {
    .allreduce_avg = mpi_allreduce_avg,
    .sum = mpi_sum,
    .bcast = mpi_bcast,
    .any = mpi_any,
    .abort = mpi_abort,
    .finalize = mpi_finalize,
};
