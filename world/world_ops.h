/* world_ops.h — the table a world of several processes fills (world.h): its collectives, its abort and its
 * leaving, and the joins that fill it. Private to the worlds: world.c dispatches through it, world_mpi.c
 * and world_tcp.c each own one table; nothing else of the engine includes this file.
 *
 * Owns: the contract between the dispatch and an implementation. The dispatch (world.c) calls an op only
 * on a joined world of size > 1, with arguments already checked by world.h's callers' contract; the op
 * returns a status (no exits) except abort, which must not return. */
#ifndef TW_WORLD_OPS_H
#define TW_WORLD_OPS_H

#include "rendezvous.h"
#include "world.h"

typedef struct tw_world_ops {
    tw_status (*allreduce_avg)(tw_world *w, float *buf, size_t n, tw_error *err);
    tw_status (*sum)(tw_world *w, double *buf, size_t n, tw_error *err);
    tw_status (*bcast)(tw_world *w, void *buf, size_t bytes, tw_error *err);
    tw_status (*any)(tw_world *w, int *flag, tw_error *err); /* *flag: this rank's in, the OR out */
    void (*abort)(tw_world *w, int exit_code);               /* ends the world; never returns */
    void (*finalize)(tw_world *w);                           /* leaves it; frees w->impl */
} tw_world_ops;

/* world_mpi.c (built with TW_HAVE_MPI only): MPI_Init_thread and MPI_COMM_WORLD; fills w (kind "mpi"). */
tw_status tw_world_mpi_init(tw_world *w, tw_error *err);

/* world_tcp.c: joins r's world (r->size > 1) through rank 0 (tw_rendezvous_connect), exchanges host names
 * (local_size), fills w (kind "tcp"). Errors: the rendezvous's, TW_ERR_IO for a connection lost during
 * the join, TW_ERR_NOMEM. On error nothing is left open and w is untouched. */
tw_status tw_world_tcp_init(tw_world *w, const tw_rendezvous *r, tw_error *err);

#endif
