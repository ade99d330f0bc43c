/* world.c — which world a process joins, and the dispatch of world.h's collectives to it (world_ops.h).
 *
 * Owns: the choice at tw_world_init (a launcher's environment: MPI, or the refusal of a build without it;
 * torchrun's variables of several processes: TCP; else a world of one), the world of one itself (every
 * collective leaves its buffer as it is, abort is _exit), and the one path every collective takes
 * (a world of one or of size 1 returns at once; else the table's op). Does not own MPI (world_mpi.c), the
 * TCP world (world_tcp.c), the variables (rendezvous.c) or the launcher's size and the accessors
 * (world_env.c). */
#include "world.h"

#include <stdio.h>
#include <unistd.h>

#include "world_ops.h"

static void world_of_one(tw_world *w)
{
    *w = (tw_world){.rank = 0, .size = 1, .local_size = 1};
    snprintf(w->kind, sizeof w->kind, "none");
}

/* A launcher started `launched` processes: MPI's world, or this build cannot join it. */
static tw_status join_launched(tw_world *w, int launched, tw_error *err)
{
#ifdef TW_HAVE_MPI
    (void)launched;
    return tw_world_mpi_init(w, err);
#else
    (void)w;
    if (launched > 1)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "started as one of %d processes (mpirun/srun), but this tower was built "
                            "without MPI: install libopenmpi-dev and rebuild with -DTW_MPI=ON, run one "
                            "process with --towers N, or start the processes with torchrun's variables "
                            "(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK: docs/scale-out.md)", launched);
    return TW_OK;
#endif
}

static tw_status join(tw_world *w, tw_error *err)
{
    int launched = tw_world_launched_size();
    if (launched > 0) /* mpirun, srun --mpi: MPI_Init only then (world.h) */
        return join_launched(w, launched, err);
    tw_rendezvous r;
    int present = 0;
    TW_TRY(tw_rendezvous_from_env(&r, &present, err));
    return present && r.size > 1 ? tw_world_tcp_init(w, &r, err) : TW_OK;
}

tw_status tw_world_init(tw_world *w, tw_error *err)
{
    world_of_one(w);
    tw_status s = join(w, err);
    if (s != TW_OK && !w->joined)
        world_of_one(w); /* a failed join leaves a world of one: its failure ends this process alone */
    return s;
}

void tw_world_finalize(tw_world *w)
{
    if (w->joined && w->ops)
        w->ops->finalize(w);
    w->joined = 0;
}

/* Whether a collective has anyone to talk to. */
static int several(const tw_world *w) { return w->joined && w->ops && w->size > 1; }

tw_status tw_world_allreduce_avg(tw_world *w, float *buf, size_t n, tw_error *err)
{
    return several(w) ? w->ops->allreduce_avg(w, buf, n, err) : TW_OK;
}

tw_status tw_world_sum(tw_world *w, double *buf, size_t n, tw_error *err)
{
    return several(w) ? w->ops->sum(w, buf, n, err) : TW_OK;
}

tw_status tw_world_bcast(tw_world *w, void *buf, size_t bytes, tw_error *err)
{
    return several(w) ? w->ops->bcast(w, buf, bytes, err) : TW_OK;
}

tw_status tw_world_any(tw_world *w, int *flag, tw_error *err)
{
    *flag = *flag != 0;
    return several(w) ? w->ops->any(w, flag, err) : TW_OK;
}

_Noreturn void tw_world_abort(tw_world *w, int exit_code)
{
    if (several(w))
        w->ops->abort(w, exit_code);
    _exit(exit_code);
}
