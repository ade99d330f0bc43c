/* cuda_allreduce.cu — the all-reduce of the CUDA backend: gradient averaging across towers with NCCL,
 * within one process or across a world of processes.
 *
 * Owns: the NCCL clique of a group of instances (struct tw_cuda_group: ncclCommInitAll over their
 * devices, created on the group's first all-reduce and kept while its members live), the world's
 * communicators (backend.h's world_id: ncclGetUniqueId; world_join: ncclCommInitRank of every local
 * instance inside one ncclGroupStart/End, node*G + i of nodes*G ranks, the rank map of PyTorch's
 * ProcessGroupNCCL::getNCCLComm: the group is then a world group), the averaging
 * itself (ncclAllReduce with ncclAvg, in place, one call per instance on that instance's stream, inside
 * ncclGroupStart/End because one thread drives every GPU), the asynchronous-error poll that the waits of
 * cuda_backend.cu run while a collective is in flight (ncclCommGetAsyncError; on an error every
 * communicator of the group is aborted with ncclCommAbort, so no tower hangs on a dead peer), and the
 * group's end. NCCL does the collective because nothing of ours would match its NVLink/PCIe rings.
 * Does not own streams or waiting (cuda_backend.cu).
 *
 * Thread-safety: groups_lock guards every group's membership, communicators and abort state, because
 * the tower threads poll while another thread may destroy an instance or abort the group. */
#include "cuda_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_MEMBERS = 64 };

struct tw_cuda_group {
    int n;                              /* members, in the order of the all-reduce's ctxs */
    int world;                          /* 0: a clique of this process's members (ncclCommInitAll);
                                           else the ranks of the world the members are part of */
    tw_cuda_ctx *members[MAX_MEMBERS];  /* borrowed; each points back here */
    ncclComm_t comms[MAX_MEMBERS];      /* comms[i]: rank i, on members[i]'s device */
    int aborted;                        /* 1 after ncclCommAbort: comms are gone */
};

static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;

/* Tears g down and detaches its members (groups_lock held). Communicators are destroyed (NCCL waits
 * for their queued work) unless the group was aborted. */
static void group_end(tw_cuda_group *g)
{
    if (!g->aborted)
        for (int i = 0; i < g->n; i++)
            (void)ncclCommDestroy(g->comms[i]);
    for (int i = 0; i < g->n; i++)
        g->members[i]->group = NULL;
    free(g);
}

void tw_cuda_group_leave(tw_cuda_ctx *ctx)
{
    pthread_mutex_lock(&groups_lock);
    if (ctx->group)
        group_end(ctx->group);
    pthread_mutex_unlock(&groups_lock);
}

/* True when ctxs[0..n) are exactly g's members in order. */
static int same_members(const tw_cuda_group *g, tw_cuda_ctx *const *ctxs, int n)
{
    if (!g || g->aborted || g->n != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (g->members[i] != ctxs[i])
            return 0;
    return 1;
}

/* TW_OK when ctxs[0..n) can form one NCCL group: at most MAX_MEMBERS, each on its own GPU. */
static tw_status check_members(tw_cuda_ctx *const *ctxs, int n, tw_error *err)
{
    if (n > MAX_MEMBERS)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "cuda: an all-reduce over %d towers; at most %d are supported", n,
                            MAX_MEMBERS);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (ctxs[j]->device == ctxs[i]->device)
                return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                                    "cuda: towers %d and %d are both on %s; NCCL needs one GPU per "
                                    "tower", j, i, ctxs[i]->name);
    return TW_OK;
}

/* Makes comms[0..n) the group of ctxs[0..n) (world: as tw_cuda_group.world), after ending any group a
 * member was in (groups_lock held). On failure the communicators are destroyed. */
static tw_status group_install(tw_cuda_ctx *const *ctxs, int n, const ncclComm_t *comms, int world,
                               tw_error *err)
{
    tw_cuda_group *g = (tw_cuda_group *)calloc(1, sizeof *g);
    if (!g) {
        for (int i = 0; i < n; i++)
            (void)ncclCommDestroy(comms[i]);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cuda: out of memory for an NCCL group");
    }
    for (int i = 0; i < n; i++)
        if (ctxs[i]->group)
            group_end(ctxs[i]->group);
    memcpy(g->comms, comms, (size_t)n * sizeof comms[0]);
    g->n = n;
    g->world = world;
    for (int i = 0; i < n; i++) {
        g->members[i] = ctxs[i];
        ctxs[i]->group = g;
    }
    return TW_OK;
}

/* *out = the group of ctxs[0..n), created (ncclCommInitAll) if they are not one yet, or NULL for one
 * instance outside a world (the mean of one); any group a member was in before ends first. A member of
 * a world is never moved into another group: the other nodes would wait for it (groups_lock held). */
static tw_status group_of(tw_cuda_ctx *const *ctxs, int n, tw_cuda_group **out, tw_error *err)
{
    *out = NULL;
    if (same_members(ctxs[0]->group, ctxs, n)) {
        *out = ctxs[0]->group;
        return TW_OK;
    }
    for (int i = 0; i < n; i++) {
        const tw_cuda_group *w = ctxs[i]->group;
        if (w && w->world && w->aborted) /* the world is gone for good: a fresh process rejoins */
            return tw_nccl_fail(err, ctxs[i], ncclRemoteError, 1,
                                "the world's all-reduce (its communicators were aborted)", __FILE__,
                                __LINE__);
        if (w && w->world)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "%s: an all-reduce over %d towers, but it is one of the %d of a world "
                                "of %d ranks (world_join): the all-reduce must name those, in order",
                                ctxs[i]->name, n, w->n, w->world);
    }
    if (n == 1)
        return TW_OK;
    TW_TRY(check_members(ctxs, n, err));
    int devs[MAX_MEMBERS];
    for (int i = 0; i < n; i++)
        devs[i] = ctxs[i]->device;
    ncclComm_t comms[MAX_MEMBERS];
    TW_NCCL_CHECK(ctxs[0], ncclCommInitAll(comms, n, devs), err);
    TW_TRY(group_install(ctxs, n, comms, 0, err));
    *out = ctxs[0]->group;
    return TW_OK;
}

/* Every bufs[i] ([n] fp32 on ctxs[i]'s device) becomes the mean over the group, in place, queued on
 * each instance's stream behind its backward pass (stream order: no host wait). ncclAvg sums in NCCL's
 * order and scales, so the result differs from the CPU's ordered float sum by rounding only; every
 * tower gets the same bits. */
tw_status tw_cuda_allreduce_avg(void *const *ctxs_v, int n_ctx, const tw_tensor *bufs, size_t n,
                                tw_error *err)
{
    tw_cuda_ctx *const *ctxs = (tw_cuda_ctx *const *)ctxs_v;
    for (int i = 0; i < n_ctx; i++)
        if (ctxs[i]->capturing) /* step graphs hold each tower's own work; the collective runs between */
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "%s: all-reduce while a graph is being captured", ctxs[i]->name);
    pthread_mutex_lock(&groups_lock);
    tw_cuda_group *g = NULL;
    tw_status s = group_of(ctxs, n_ctx, &g, err);
    if (s != TW_OK || !g) { /* no group: one instance outside a world, the mean of one */
        pthread_mutex_unlock(&groups_lock);
        return s;
    }
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
        pthread_mutex_unlock(&groups_lock);
        return tw_nccl_fail(err, ctxs[0], r, 0, "ncclGroupStart()", __FILE__, __LINE__);
    }
    int at = 0;
    for (; at < n_ctx && r == ncclSuccess; at++) {
        float *p = tw_cuda_f32(bufs[at]);
        r = ncclAllReduce(p, p, n, ncclFloat, ncclAvg, g->comms[at], ctxs[at]->stream);
    }
    ncclResult_t end = ncclGroupEnd(); /* always closes the group, even after a failed call */
    if (r == ncclSuccess && end == ncclSuccess)
        for (int i = 0; i < n_ctx; i++)
            ctxs[i]->nccl_pending = 1;
    pthread_mutex_unlock(&groups_lock);
    if (r != ncclSuccess)
        return tw_nccl_fail(err, ctxs[at - 1], r, 0,
                            "ncclAllReduce(p, p, n, ncclFloat, ncclAvg, g->comms[at], stream)",
                            __FILE__, __LINE__);
    if (end != ncclSuccess)
        return tw_nccl_fail(err, ctxs[0], end, 0, "ncclGroupEnd()", __FILE__, __LINE__);
    return TW_OK;
}

tw_status tw_cuda_group_poll(tw_cuda_ctx *ctx, tw_error *err)
{
    pthread_mutex_lock(&groups_lock);
    tw_cuda_group *g = ctx->group;
    if (!g) {
        pthread_mutex_unlock(&groups_lock);
        return TW_OK; /* ended meanwhile: its communicators drained before they were destroyed */
    }
    int rank = 0;
    while (rank < g->n && g->members[rank] != ctx)
        rank++;
    ncclResult_t async = ncclSuccess, r = ncclSuccess;
    if (g->aborted)
        async = ncclRemoteError;
    else
        r = ncclCommGetAsyncError(g->comms[rank], &async);
    if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) {
        pthread_mutex_unlock(&groups_lock);
        return TW_OK;
    }
    int was_aborted = g->aborted;
    if (!g->aborted) {
        for (int i = 0; i < g->n; i++)
            (void)ncclCommAbort(g->comms[i]);
        g->aborted = 1;
    }
    pthread_mutex_unlock(&groups_lock);
    if (r != ncclSuccess)
        return tw_nccl_fail(err, ctx, r, 1, "ncclCommGetAsyncError(comm, &async)", __FILE__, __LINE__);
    return tw_nccl_fail(err, ctx, async, 1,
                        was_aborted ? "the all-reduce (another tower's NCCL error aborted the group)"
                                    : "the all-reduce (asynchronous NCCL error; group aborted)",
                        __FILE__, __LINE__);
}

/* ---- a world of processes ---- */

static_assert(sizeof(ncclUniqueId) == TW_WORLD_ID_BYTES, "backend.h's TW_WORLD_ID_BYTES is NCCL's id");

/* backend.h's world_id: node 0's ncclGetUniqueId (it opens NCCL's bootstrap listener on this host,
 * on the interface NCCL_SOCKET_IFNAME names, else the first usable one). */
tw_status tw_cuda_world_id(void *p, void *id, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(tw_cuda_enter(ctx, err));
    ncclUniqueId u;
    TW_NCCL_CHECK(ctx, ncclGetUniqueId(&u), err);
    memcpy(id, &u, sizeof u);
    return TW_OK;
}

/* comms[i] = rank node*n + i of a world of nodes*n, for every local instance, inside one
 * ncclGroupStart/End (one thread initialises several GPUs: without the group the first
 * ncclCommInitRank would wait for the others forever). On failure every communicator made is aborted. */
static tw_status init_ranks(tw_cuda_ctx *const *ctxs, int n, ncclUniqueId id, int node, int nodes,
                            ncclComm_t *comms, tw_error *err)
{
    for (int i = 0; i < n; i++)
        comms[i] = NULL;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return tw_nccl_fail(err, ctxs[0], r, 0, "ncclGroupStart()", __FILE__, __LINE__);
    tw_status s = TW_OK;
    int at = 0;
    for (; at < n && s == TW_OK && r == ncclSuccess; at++) {
        s = tw_cuda_enter(ctxs[at], err);
        if (s == TW_OK)
            r = ncclCommInitRank(&comms[at], nodes * n, id, node * n + at);
    }
    ncclResult_t end = ncclGroupEnd(); /* always closes the group; it is where the ranks connect */
    if (s == TW_OK && r == ncclSuccess && end == ncclSuccess)
        return TW_OK;
    for (int i = 0; i < n; i++)
        if (comms[i])
            (void)ncclCommAbort(comms[i]);
    if (s != TW_OK)
        return s;
    if (r != ncclSuccess)
        return tw_nccl_fail(err, ctxs[at - 1], r, 0,
                            "ncclCommInitRank(&comm, nodes * n, id, node * n + i)", __FILE__,
                            __LINE__);
    return tw_nccl_fail(err, ctxs[0], end, 0, "ncclGroupEnd() after ncclCommInitRank", __FILE__,
                        __LINE__);
}

/* backend.h's world_join: the members' communicators of world id, replacing any group they were in. */
tw_status tw_cuda_world_join(void *const *ctxs_v, int n_ctx, const void *id, int node, int nodes,
                             tw_error *err)
{
    tw_cuda_ctx *const *ctxs = (tw_cuda_ctx *const *)ctxs_v;
    for (int i = 0; i < n_ctx; i++)
        if (ctxs[i]->capturing)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "%s: joining a world while a graph is being captured", ctxs[i]->name);
    TW_TRY(check_members(ctxs, n_ctx, err));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t comms[MAX_MEMBERS];
    pthread_mutex_lock(&groups_lock);
    tw_status s = init_ranks(ctxs, n_ctx, u, node, nodes, comms, err);
    if (s == TW_OK)
        s = group_install(ctxs, n_ctx, comms, nodes * n_ctx, err);
    pthread_mutex_unlock(&groups_lock);
    return s;
}
