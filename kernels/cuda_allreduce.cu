/* cuda_allreduce.cu — the all-reduce of the CUDA backend: gradient averaging across towers with NCCL.
 *
 * Owns: the NCCL clique of a group of instances (struct tw_cuda_group: ncclCommInitAll over their
 * devices, created on the group's first all-reduce and kept while its members live), the averaging
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

/* *out = the group of ctxs[0..n), created (ncclCommInitAll) if they are not one yet; any group a
 * member was in before ends first (groups_lock held). */
static tw_status group_of(tw_cuda_ctx *const *ctxs, int n, tw_cuda_group **out, tw_error *err)
{
    if (same_members(ctxs[0]->group, ctxs, n)) {
        *out = ctxs[0]->group;
        return TW_OK;
    }
    if (n > MAX_MEMBERS)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "cuda: an all-reduce over %d towers; at most %d are supported", n,
                            MAX_MEMBERS);
    int devs[MAX_MEMBERS];
    for (int i = 0; i < n; i++) {
        devs[i] = ctxs[i]->device;
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i])
                return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                                    "cuda: towers %d and %d are both on %s; NCCL needs one GPU per "
                                    "tower", j, i, ctxs[i]->name);
    }
    for (int i = 0; i < n; i++)
        if (ctxs[i]->group)
            group_end(ctxs[i]->group);
    ncclComm_t comms[MAX_MEMBERS];
    TW_NCCL_CHECK(ctxs[0], ncclCommInitAll(comms, n, devs), err);
    tw_cuda_group *g = (tw_cuda_group *)calloc(1, sizeof *g);
    if (!g) {
        for (int i = 0; i < n; i++)
            (void)ncclCommDestroy(comms[i]);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cuda: out of memory for an NCCL group");
    }
    memcpy(g->comms, comms, (size_t)n * sizeof comms[0]);
    g->n = n;
    for (int i = 0; i < n; i++) {
        g->members[i] = ctxs[i];
        ctxs[i]->group = g;
    }
    *out = g;
    return TW_OK;
}

/* Every bufs[i] ([n] fp32 on ctxs[i]'s device) becomes the mean over the group, in place, queued on
 * each instance's stream behind its backward pass (stream order: no host wait). ncclAvg sums in NCCL's
 * order and scales, so the result differs from the CPU's ordered float sum by rounding only; every
 * tower gets the same bits. */
tw_status tw_cuda_allreduce_avg(void *const *ctxs_v, int n_ctx, const tw_tensor *bufs, size_t n,
                                tw_error *err)
{
    if (n_ctx == 1)
        return TW_OK; /* the mean of one */
    tw_cuda_ctx *const *ctxs = (tw_cuda_ctx *const *)ctxs_v;
    for (int i = 0; i < n_ctx; i++)
        if (ctxs[i]->capturing) /* step graphs hold each tower's own work; the collective runs between */
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "%s: all-reduce while a graph is being captured", ctxs[i]->name);
    pthread_mutex_lock(&groups_lock);
    tw_cuda_group *g = NULL;
    tw_status s = group_of(ctxs, n_ctx, &g, err);
    if (s != TW_OK) {
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
