/* world_env.c — what both worlds (world.h) share: the number of processes a launcher started, read from
 * its environment, the refusal of a world only the torchrun variables describe, and the accessors of
 * tw_world. Not joining a world or its collectives (world.c,
 * world_none.c). */
#include "world.h"

#include <stdlib.h>

#include "rendezvous.h"

/* The variables a launcher sets to the world's size: Open MPI's mpirun, and PMI (MPICH's Hydra, Slurm's
 * srun --mpi=pmi2). */
static const char *const SIZE_VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};

int tw_world_launched_size(void)
{
    for (size_t i = 0; i < sizeof SIZE_VARS / sizeof SIZE_VARS[0]; i++) {
        const char *v = getenv(SIZE_VARS[i]);
        char *end;
        long n = v && *v ? strtol(v, &end, 10) : 0;
        if (v && *v && !*end && n > 0)
            return n > 1 << 20 ? 1 << 20 : (int)n;
    }
    return 0;
}

tw_status tw_world_refuse_rendezvous(tw_error *err)
{
    tw_rendezvous r;
    int present = 0;
    TW_TRY(tw_rendezvous_from_env(&r, &present, err));
    if (present && r.size > 1)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "%s=%d says this is one of %d processes, but `tower train` joins a world of "
                            "processes through MPI only (mpirun, or srun --mpi=pmix): the torchrun-variable "
                            "rendezvous is not wired into training yet, and %d independent runs would share "
                            "one log folder (docs/scale-out.md)", r.size_from, r.size, r.size, r.size);
    return TW_OK;
}

int tw_world_rank(const tw_world *w) { return w->rank; }

int tw_world_size(const tw_world *w) { return w->size; }

int tw_world_local_size(const tw_world *w) { return w->local_size; }

int tw_world_tower_offset(const tw_world *w, int local_towers) { return w->rank * local_towers; }
