/* world_env.c — what every world (world.h) shares: the number of processes a launcher started, read from
 * its environment, and the accessors of tw_world. Not the choice of a world or its collectives (world.c,
 * world_mpi.c, world_tcp.c), nor torchrun's variables (rendezvous.c). */
#include "world.h"

#include <stdlib.h>

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

int tw_world_rank(const tw_world *w) { return w->rank; }

int tw_world_size(const tw_world *w) { return w->size; }

int tw_world_local_size(const tw_world *w) { return w->local_size; }

int tw_world_tower_offset(const tw_world *w, int local_towers) { return w->rank * local_towers; }
