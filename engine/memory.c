/* memory.c — the memory estimate, the host's memory and the check. See memory.h.
 *
 * The estimate follows the allocations: per tower, tw_replica_size_of (the replica's arenas, activations
 * and device batch); on the host, trainer.c's setup (CKPT_ARENAS host arenas of the parameters) and train_step.c's (the two
 * alternating host batches of towers × batch_size rows, the evaluation outputs and labels), the whole
 * checkpoint file a resume reads (safetensors holds it in memory), and the input pipelines trainer.c's
 * open_inputs opens (train: shuffled, prefetching; test: in order, no prefetch thread). The cgroup limit
 * is read along the process's own cgroup path and its ancestors (the smallest wins): memory.max under
 * cgroup v2, memory.limit_in_bytes under v1 ("max" and v1's near-2^63 "unlimited" do not limit). */
#include "memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "input.h"
#include "ckpt_contents.h"
#include "model.h"

enum {
    HOST_ARENAS = 4, /* trainer.c's CKPT_ARENAS: params, ema, slot1, slot2 downloads */
};
static const uint64_t CUDA_RESERVE = 512ull << 20; /* context, cuBLAS workspace, scratch, NCCL */

/* ================================ the estimate ================================ */

/* Checked arithmetic: *ok turns 0 for good on the first result past 2^64. */
static uint64_t mul(uint64_t a, uint64_t b, int *ok)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        *ok = 0;
    return r;
}

static uint64_t add(uint64_t a, uint64_t b, int *ok)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        *ok = 0;
    return r;
}


/* The input pipelines as trainer.c's open_inputs opens them. */
static uint64_t input_bytes(const tw_config *c, const tw_model *m, const tw_memory_data *d, int *ok)
{
    tw_input_options io;
    tw_input_options_default(&io);
    io.example_size = tw_model_input_size(m);
    io.shuffle_buffer = c->shuffle_buffer;
    uint64_t sum = tw_input_memory_bytes(&io, d->train_examples, c->batch_size);
    if (!c->test_path[0])
        return sum;
    io.shuffle = 0;
    io.prefetch_batches = 0;
    return add(sum, tw_input_memory_bytes(&io, d->test_examples, c->batch_size), ok);
}

/* The host side: trainer.c's host arenas, batches and evaluation buffers, a resumed checkpoint. */
static void host_parts(const tw_config *c, const tw_model *m, uint64_t arena, tw_memory *out,
                       int *ok)
{
    uint64_t rows = mul((uint64_t)c->towers, (uint64_t)c->batch_size, ok);
    uint64_t outs = (uint64_t)tw_model_output_size(m);
    uint64_t labels = c->loss == TW_LOSS_MSE ? outs : 1;
    uint64_t row = add(tw_model_input_size(m), labels, ok) * sizeof(float);
    out->part[TW_MEM_HOST_COPIES] = mul(arena, HOST_ARENAS + (uint64_t)tw_ckpt_arena_count(c->optimizer), ok);
    out->part[TW_MEM_HOST_BATCHES] =
        add(mul(2 * rows, row, ok), (uint64_t)c->batch_size * (outs + labels) * sizeof(float), ok);
}

tw_status tw_memory_estimate(const tw_config *c, const tw_memory_data *data, tw_memory *out,
                             tw_error *err)
{
    *out = (tw_memory){.towers = c->towers, .optimizer = c->optimizer};
    tw_model *m;
    TW_TRY(tw_model_create(c, &m, err));
    tw_replica_size r;
    tw_status s = tw_replica_size_of(m, c->batch_size, &r, err);
    int ok = 1;
    if (s == TW_OK) {
        const uint64_t one[TW_MEM_DEVICE_PARTS] = {
            [TW_MEM_PARAMS] = r.arena, [TW_MEM_GRADS] = r.arena,
            [TW_MEM_SLOTS] = mul(r.arena, (uint64_t)(r.arenas - 3), &ok), [TW_MEM_EMA] = r.arena,
            [TW_MEM_ACTIVATIONS] = r.activations, [TW_MEM_BATCH] = r.batch};
        for (int p = 0; p < TW_MEM_DEVICE_PARTS; p++) {
            out->part[p] = mul(one[p], (uint64_t)c->towers, &ok);
            out->device = add(out->device, one[p], &ok);
        }
        host_parts(c, m, r.arena, out, &ok);
        if (data)
            out->part[TW_MEM_INPUT] = input_bytes(c, m, data, &ok);
        for (int p = TW_MEM_DEVICE_PARTS; p < TW_MEM_PARTS; p++)
            out->host = add(out->host, out->part[p], &ok);
        (void)add(mul(out->device, (uint64_t)c->towers, &ok), out->host, &ok); /* the CPU's total */
    }
    tw_model_destroy(m);
    if (s == TW_OK && !ok)
        s = tw_error_set(err, TW_ERR_INVALID, NULL, -1, "model: the memory this run needs is too "
                         "large to count (over 2^64 bytes): use smaller layers or batch_size");
    return s;
}

/* ================================ the host's memory ================================ */

/* The number in path, or UINT64_MAX when it is absent, "max" or not a number. */
static uint64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "re");
    unsigned long long v;
    int got = f && fscanf(f, "%llu", &v) == 1;
    if (f)
        fclose(f);
    return got ? (uint64_t)v : UINT64_MAX;
}

/* The smallest limit file along root/rel and its ancestors up to root. */
static uint64_t walk_limits(const char *root, const char *rel, const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s", root, rel);
    uint64_t least = UINT64_MAX;
    size_t keep = strlen(root);
    for (;;) {
        char file_path[4096 + 64];
        snprintf(file_path, sizeof file_path, "%s/%s", path, file);
        uint64_t v = read_limit(file_path);
        least = v < least ? v : least;
        char *slash = strrchr(path, '/');
        if (!slash || (size_t)(slash - path) < keep)
            return least;
        *slash = 0;
    }
}

/* The memory limit of this process's cgroup (v2 "0::PATH", v1 "N:...memory...:PATH"), or UINT64_MAX. */
static uint64_t cgroup_limit(void)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    uint64_t least = UINT64_MAX;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *ctrl = strchr(line, ':'), *rel = ctrl ? strchr(ctrl + 1, ':') : NULL;
        if (!rel)
            continue;
        *rel++ = 0;
        uint64_t v = UINT64_MAX;
        if (!strcmp(ctrl + 1, ""))
            v = walk_limits("/sys/fs/cgroup", rel, "memory.max");
        else if (strstr(ctrl + 1, "memory"))
            v = walk_limits("/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes");
        least = v < least ? v : least;
    }
    if (f)
        fclose(f);
    return least;
}

tw_status tw_memory_host_limit(tw_memory_limit *out, tw_error *err)
{
    struct sysinfo si;
    if (sysinfo(&si) != 0)
        return tw_error_errno(err, NULL, "sysinfo");
    uint64_t ram = (uint64_t)si.totalram * si.mem_unit, cg = cgroup_limit();
    char a[32], b[32];
    tw_memory_format(ram, a, sizeof a);
    tw_memory_format(cg, b, sizeof b);
    out->bytes = cg < ram ? cg : ram;
    if (cg < ram)
        snprintf(out->what, sizeof out->what, "the CPU has %s (the cgroup's memory limit; RAM %s)", b, a);
    else
        snprintf(out->what, sizeof out->what, "the CPU has %s (total RAM)", a);
    return TW_OK;
}

void tw_memory_limit_given(uint64_t bytes, tw_memory_limit *out)
{
    char a[32];
    tw_memory_format(bytes, a, sizeof a);
    out->bytes = bytes;
    snprintf(out->what, sizeof out->what, "the memory limit is %s (--memory-limit)", a);
}

/* ================================ the check ================================ */

void tw_memory_format(uint64_t bytes, char *out, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(out, size, "%llu B", (unsigned long long)bytes);
        return;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(out, size, "%.1f %s", v, units[u]);
}

static const char *part_name(const tw_memory *m, int p)
{
    static const char *const names[TW_MEM_PARTS] = {
        [TW_MEM_PARAMS] = "weights",          [TW_MEM_GRADS] = "gradients",
        [TW_MEM_EMA] = "EMA shadows",         [TW_MEM_ACTIVATIONS] = "activations",
        [TW_MEM_BATCH] = "device batch",      [TW_MEM_HOST_COPIES] = "host copies",
        [TW_MEM_HOST_BATCHES] = "host batches", [TW_MEM_INPUT] = "input pipeline"};
    if (p == TW_MEM_SLOTS)
        return m->optimizer == TW_OPT_ADAM ? "Adam slots" : "momentum slots";
    return names[p];
}

/* Appends the parts in [from, to) (each scaled down to one tower by per_tower), biggest first, as
 * "(weights 4.0 GiB, gradients 4.0 GiB, ...)". */
static void list_parts(const tw_memory *m, int from, int to, int per_tower, char *out, size_t size)
{
    int done[TW_MEM_PARTS] = {0};
    size_t n = strlen(out);
    for (int k = from; k < to; k++) {
        int best = -1;
        for (int p = from; p < to; p++)
            if (!done[p] && m->part[p] && (best < 0 || m->part[p] > m->part[best]))
                best = p;
        if (best < 0)
            break;
        done[best] = 1;
        char b[32];
        tw_memory_format(m->part[best] / (uint64_t)(per_tower ? m->towers : 1), b, sizeof b);
        n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s %s", k > from ? ", " : " (",
                              part_name(m, best), b);
    }
    if (n < size)
        snprintf(out + n, size - n, ")");
}

static tw_status refuse(const char *where, uint64_t need, const tw_memory_limit *limit,
                        const char *parts, tw_error *err)
{
    char b[32];
    tw_memory_format(need, b, sizeof b);
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "model: the run needs ~%s of memory%s%s, but %s; "
                        "use smaller layers, a smaller batch_size or fewer towers", b, where, parts,
                        limit->what);
}

tw_status tw_memory_check(const tw_memory *m, int on_gpu, const tw_memory_limit *host,
                          const tw_memory_limit *device, tw_error *err)
{
    char parts[320] = "";
    if (!on_gpu) {
        uint64_t need = m->host, d;
        int ok = !__builtin_mul_overflow(m->device, (uint64_t)m->towers, &d) &&
                 !__builtin_add_overflow(need, d, &need);
        char where[32] = "";
        if (m->towers > 1)
            snprintf(where, sizeof where, " for %d towers", m->towers);
        list_parts(m, 0, TW_MEM_PARTS, 0, parts, sizeof parts);
        return ok && need <= host->bytes ? TW_OK : refuse(where, ok ? need : UINT64_MAX, host, parts, err);
    }
    if (device && (m->device > device->bytes || device->bytes - m->device < CUDA_RESERVE)) {
        list_parts(m, 0, TW_MEM_DEVICE_PARTS, 1, parts, sizeof parts);
        return refuse(" on each GPU (and 512 MiB for the CUDA runtime)", m->device, device, parts,
                      err);
    }
    if (m->host <= host->bytes)
        return TW_OK;
    list_parts(m, TW_MEM_DEVICE_PARTS, TW_MEM_PARTS, 0, parts, sizeof parts);
    return refuse(" on the host", m->host, host, parts, err);
}
