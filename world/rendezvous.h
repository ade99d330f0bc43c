/* rendezvous.h — a world of processes found without MPI: its coordinates from torchrun's environment
 * variables, and a small TCP rendezvous that either hands one blob (the NCCL unique id) from rank 0 to every
 * rank or leaves every rank connected to rank 0 (the TCP world's star, world/world_tcp.c).
 *
 * Owns: the reading and validation of the world variables (the table is docs/rendezvous.md's, the one
 * place the user guide points to) and the rendezvous protocol (world/rendezvous.c's header). Does not own
 * what travels (the CUDA backend makes the NCCL id: backend.h's world ops; the collectives over the
 * connections: world_tcp.c), the MPI world (world/world_mpi.c), or the training; nothing here touches a
 * device.
 *
 * Thread-safety: none needed: tw_rendezvous_from_env reads the environment (call it before threads that
 * change it start), tw_rendezvous_share uses only its own sockets. */
#ifndef TW_RENDEZVOUS_H
#define TW_RENDEZVOUS_H

#include <stddef.h>

#include "status.h"

enum {
    TW_RENDEZVOUS_MAX_SIZE = 4096,       /* processes in one world */
    TW_RENDEZVOUS_MAX_BLOB = 64 * 1024,  /* bytes one share may hand out */
    TW_RENDEZVOUS_ADDR_MAX = 256,        /* MASTER_ADDR, terminated */
    TW_RENDEZVOUS_TIMEOUT_S = 600,       /* the join's default time-out (TOWER_RENDEZVOUS_TIMEOUT) */
};

/* The world's coordinates, as the environment gives them. */
typedef struct {
    char addr[TW_RENDEZVOUS_ADDR_MAX]; /* MASTER_ADDR: rank 0's host name or address */
    int port;                          /* MASTER_PORT, 1..65535 */
    int rank;                          /* 0 .. size-1 */
    int size;                          /* 1 .. TW_RENDEZVOUS_MAX_SIZE */
    const char *rank_from;             /* the variable the rank came from: "RANK", "SLURM_PROCID",
                                          "OMPI_COMM_WORLD_RANK" or "JOB_COMPLETION_INDEX" (static) */
    const char *size_from;             /* "WORLD_SIZE", "SLURM_NTASKS" or "OMPI_COMM_WORLD_SIZE" */
    double timeout_s;                  /* TOWER_RENDEZVOUS_TIMEOUT, 1..86400 s; TW_RENDEZVOUS_TIMEOUT_S
                                          when not set */
    int local_size;                    /* LOCAL_WORLD_SIZE, 1..size; 0 when not set */
} tw_rendezvous;

/* Reads the world from the environment. *present = 0 (and r untouched) when none of MASTER_ADDR,
 * MASTER_PORT, WORLD_SIZE and RANK is set: no world was asked for (a launcher's SLURM_PROCID or
 * OMPI_COMM_WORLD_RANK alone does not ask for one). Else *present = 1 and every variable must be valid:
 * MASTER_ADDR (non-empty, printable, < TW_RENDEZVOUS_ADDR_MAX bytes), MASTER_PORT (a decimal 1..65535),
 * the rank from RANK, else SLURM_PROCID, else OMPI_COMM_WORLD_RANK, else JOB_COMPLETION_INDEX, and the
 * size from WORLD_SIZE, else the launcher's own (SLURM_NTASKS, OMPI_COMM_WORLD_SIZE; an Indexed Job has
 * none: WORLD_SIZE is needed), 1..TW_RENDEZVOUS_MAX_SIZE, rank < size; optional: TOWER_RENDEZVOUS_TIMEOUT
 * (1..86400 s) and LOCAL_WORLD_SIZE (1..size). Numbers are plain decimal digits (no sign, space or suffix). Errors: TW_ERR_INVALID naming the variable and its value. */
tw_status tw_rendezvous_from_env(tw_rendezvous *r, int *present, tw_error *err);

/* Hands rank 0's blob[bytes] to every rank of r's world: on rank 0 blob is read, on the others it is
 * written (only when the whole blob arrived). Every rank passes the same bytes (1..TW_RENDEZVOUS_MAX_BLOB).
 * Rank 0 listens on MASTER_ADDR:MASTER_PORT until the size-1 other ranks have joined, then answers them
 * all; the others connect, with retries, until timeout_s. A world of one returns at once. Returns when
 * this rank is done: rank 0 once every rank has its blob queued, a peer once it has it.
 * Errors: TW_ERR_IO with errno_value ETIMEDOUT when the world was not complete within timeout_s (saying
 * which ranks were missing, that rank 0 never answered, or that rank 0 gave up before the world was
 * complete); TW_ERR_IO for a socket failure (MASTER_PORT taken, ...); TW_ERR_INVALID when MASTER_ADDR does
 * not resolve, for bad arguments, or when rank 0 refused this rank (another world size, another blob
 * size, a rank that already joined, another version), with rank 0's reason. */
tw_status tw_rendezvous_share(const tw_rendezvous *r, void *blob, size_t bytes, double timeout_s,
                              tw_error *err);

/* The same join with nothing shared, the connections left open: on rank 0 fds[size] receives each peer's
 * connected socket (fds[0] = -1), on a peer fds[0] its socket to rank 0; non-blocking, close-on-exec, the
 * caller's to close. A world of one leaves fds at -1. Errors as tw_rendezvous_share's (a rank that shares
 * a blob is refused: BAD_BYTES); on error no socket is left open. */
tw_status tw_rendezvous_connect(const tw_rendezvous *r, double timeout_s, int *fds, tw_error *err);

#endif
