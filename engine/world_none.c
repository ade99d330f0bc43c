/* world_none.c — the world of one (world.h), for builds without MPI (TW_MPI=OFF or no MPI found;
 * engine/CMakeLists.txt). Every collective leaves its buffer as it is. Owns only the refusal to start
 * when a launcher started several processes: N independent runs writing into one log folder would each
 * think they are the run. */
#include "world.h"

#include <stdio.h>
#include <unistd.h>

tw_status tw_world_init(tw_world *w, tw_error *err)
{
    *w = (tw_world){.rank = 0, .size = 1, .local_size = 1};
    snprintf(w->kind, sizeof w->kind, "none");
    int n = tw_world_launched_size();
    if (n > 1)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "started as one of %d processes (mpirun/srun), but this tower was built "
                            "without MPI: install libopenmpi-dev and rebuild with -DTW_MPI=ON, or run one "
                            "process with --towers N", n);
    return n == 0 ? tw_world_refuse_rendezvous(err) : TW_OK;
}

void tw_world_finalize(tw_world *w) { w->joined = 0; }

tw_status tw_world_allreduce_avg(tw_world *w, float *buf, size_t n, tw_error *err)
{
    (void)w, (void)buf, (void)n, (void)err;
    return TW_OK;
}

tw_status tw_world_sum(tw_world *w, double *buf, size_t n, tw_error *err)
{
    (void)w, (void)buf, (void)n, (void)err;
    return TW_OK;
}

tw_status tw_world_bcast(tw_world *w, void *buf, size_t bytes, tw_error *err)
{
    (void)w, (void)buf, (void)bytes, (void)err;
    return TW_OK;
}

int tw_world_any(tw_world *w, int flag)
{
    (void)w;
    return flag != 0;
}

_Noreturn void tw_world_abort(tw_world *w, int exit_code)
{
    (void)w;
    _exit(exit_code);
}
