/* world_tcp.c — the world of processes over TCP (world.h, world_ops.h): the processes torchrun's variables
 * describe (rendezvous.h) train as one, with no MPI: a star through rank 0.
 *
 * Owns: the join (tw_rendezvous_connect, then every rank's host name to rank 0, which answers each rank
 * with the number of ranks on its host: local_size, unless LOCAL_WORLD_SIZE says), the messages over the
 * star, the collectives, the abort and the sockets' liveness options. Does not own the join's protocol or
 * the variables (rendezvous.c), the choice of this world (world.c), or what is reduced (train_step.c,
 * trainer.c).
 *
 * Messages: a 24-byte header (big-endian: op u32, arg u32 — an abort's exit status —, the collective's
 * sequence number u64, its payload bytes u64), then the payload in this host's byte order (the processes
 * of one world run one build on one architecture). In collective k every peer sends rank 0 its header
 * (op, k, bytes) and, for a reduction, its buffer; rank 0 reads the peers in rank order, checks each
 * header against its own call (a rank in another collective or with another size is an error naming
 * both ranks and both calls; a length is checked before anything is allocated), reduces, and sends every
 * peer the header and the result. The reductions are rank 0's, in rank order: fp32 buf0 + buf1 + ... then
 * times 1/size (cpu_backend.c's order over towers: 2 processes of 1 tower give exactly 1 process of 2
 * towers' numbers), fp64 sums, a logical OR; a broadcast is rank 0's buffer.
 *
 * Failure of one is failure of all: a connection that closes or resets (a process that died) fails the
 * collective with TW_ERR_IO, and the trainer's failure aborts the world with its exit status (1:
 * TW_EXIT_FAILED, retried by the server). An abort sends OP_ABORT with the status: a peer's to rank 0,
 * which sends it on to every peer; a rank that reads one exits with that status at once. The aborting
 * side then shuts its writing down and reads what is left until its peers close (at most ABORT_LINGER_MS),
 * so that no unread byte turns its close into a reset that could overtake the abort. Keep-alive probes
 * and TCP_USER_TIMEOUT notice a host that vanished (power, network) within about 20 s; a process that
 * hangs on a live host blocks the world as under MPI (the server's stall watch ends it). */
#define _GNU_SOURCE
#include "world_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum {
    HEADER_BYTES = 24,
    HOST_MAX = 256,          /* a host name's bytes, terminated */
    ABORT_LINGER_MS = 2000,  /* how long an abort waits for its peers to close */
    KEEPIDLE_S = 5,          /* keep-alive: first probe after 5 s of silence, then every 5 s, 3 unanswered */
    KEEPINTVL_S = 5,
    KEEPCNT = 3,
    USER_TIMEOUT_MS = 20000, /* sent data unacknowledged this long: the connection is dead */
};

enum op { OP_HOST = 1, OP_AVG, OP_SUM, OP_BCAST, OP_ANY, OP_ABORT, OP_COUNT };

static const char *const OP_NAMES[OP_COUNT] = {"?", "the host exchange", "allreduce_avg", "sum", "bcast",
                                               "any", "abort"};

typedef struct {
    uint32_t op, arg;
    uint64_t seq, bytes;
} header;

typedef struct {
    int rank, size;
    uint64_t seq;         /* the next collective's number (0: the host exchange) */
    int *fd;              /* rank 0: [size], peer r's connection (fd[0] = -1); a peer: fd[0], rank 0's */
    void *scratch;        /* rank 0: one peer's payload */
    size_t scratch_bytes;
} tcp;

static const char *op_name(uint32_t op) { return op < OP_COUNT ? OP_NAMES[op] : "an unknown op"; }

/* The connection to rank `peer` (rank 0: any peer; a peer: rank 0). */
static int fd_of(const tcp *t, int peer) { return t->rank == 0 ? t->fd[peer] : t->fd[0]; }

/* The connections this rank holds: size on rank 0 (fd[0] unused), 1 on a peer. */
static int n_fds(const tcp *t) { return t->rank == 0 ? t->size : 1; }

/* ---- bytes ---- */

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void encode(unsigned char *b, const header *h)
{
    put64(b, (uint64_t)h->op << 32 | h->arg);
    put64(b + 8, h->seq);
    put64(b + 16, h->bytes);
}

static header decode(const unsigned char *b)
{
    uint64_t w = get64(b);
    return (header){.op = (uint32_t)(w >> 32), .arg = (uint32_t)w, .seq = get64(b + 8),
                    .bytes = get64(b + 16)};
}

/* Writes h and payload[bytes] to fd, through short writes and EINTR. 0, or -1 with errno. */
static int send_msg(int fd, const header *h, const void *payload, size_t bytes)
{
    unsigned char b[HEADER_BYTES];
    encode(b, h);
    struct iovec iov[2] = {{.iov_base = b, .iov_len = sizeof b}, {.iov_base = (void *)payload, .iov_len = bytes}};
    struct iovec *v = iov;
    int n = bytes ? 2 : 1;
    while (n > 0) {
        ssize_t k = sendmsg(fd, &(struct msghdr){.msg_iov = v, .msg_iovlen = (size_t)n}, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        for (; n > 0 && (size_t)k >= v->iov_len; n--, v++)
            k -= (ssize_t)v->iov_len;
        if (n > 0) {
            v->iov_base = (char *)v->iov_base + k;
            v->iov_len -= (size_t)k;
        }
    }
    return 0;
}

/* Reads exactly buf[n] from fd, through short reads and EINTR: 1, 0 when the peer closed first, or -1
 * with errno. */
static int recv_all(int fd, void *buf, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = recv(fd, (char *)buf + done, n - done, 0);
        if (k > 0)
            done += (size_t)k;
        else if (k == 0)
            return 0;
        else if (errno != EINTR)
            return -1;
    }
    return 1;
}

/* ---- failures ---- */

/* The connection to `peer` failed (k: recv_all's or send_msg's result) during what. */
static tw_status lost(const tcp *t, int peer, int k, const char *what, tw_error *err)
{
    int e = k == 0 ? ECONNRESET : errno;
    tw_error_set(err, TW_ERR_IO, NULL, -1,
                 "world (tcp): rank %d of %d lost rank %d during %s: %s (the process %s)", t->rank,
                 t->size, peer, what, k == 0 ? "its connection closed" : strerror(e),
                 e == ETIMEDOUT ? "or its host stopped answering" : "ended, failed or was killed");
    if (err)
        err->errno_value = e;
    return TW_ERR_IO;
}

/* Reads what is left on every connection until each closes or ABORT_LINGER_MS pass (abort's header). */
static void linger(tcp *t)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct pollfd p[TW_RENDEZVOUS_MAX_SIZE];
        int n = 0, at[TW_RENDEZVOUS_MAX_SIZE];
        for (int i = 0; i < n_fds(t); i++)
            if (t->fd[i] >= 0)
                at[n] = i, p[n++] = (struct pollfd){.fd = t->fd[i], .events = POLLIN};
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = ABORT_LINGER_MS - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
        if (n == 0 || ms <= 0 || poll(p, (nfds_t)n, (int)ms) < 0)
            return;
        char sink[4096];
        for (int i = 0; i < n; i++) {
            ssize_t k = p[i].revents ? recv(p[i].fd, sink, sizeof sink, MSG_DONTWAIT) : 1;
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) { /* closed, or broken */
                close(t->fd[at[i]]);
                t->fd[at[i]] = -1;
            }
        }
    }
}

/* Sends OP_ABORT with exit_code on every connection (rank 0: to every peer; a peer: to rank 0), then
 * lingers; returns for the caller to _exit. */
static void send_abort(tcp *t, int exit_code)
{
    unsigned char b[HEADER_BYTES];
    encode(b, &(header){.op = OP_ABORT, .arg = (uint32_t)exit_code, .seq = t->seq});
    for (int i = 0; i < n_fds(t); i++)
        if (t->fd[i] >= 0) { /* never blocks: a rank that reads nothing (hung) must not hold the abort */
            (void)send(t->fd[i], b, sizeof b, MSG_NOSIGNAL | MSG_DONTWAIT);
            shutdown(t->fd[i], SHUT_WR);
        }
    linger(t);
}

static void tcp_abort(tw_world *w, int exit_code) { send_abort(w->impl, exit_code); }

/* `peer` sent OP_ABORT with code: rank 0 sends it on to every rank; every rank exits with it. */
static _Noreturn void aborted_by(tcp *t, int peer, uint32_t code)
{
    int status = code >= 1 && code <= 255 ? (int)code : 1;
    fprintf(stderr, "tower (rank %d of %d): rank %d ended the world with exit status %d\n", t->rank,
            t->size, peer, status);
    if (t->rank == 0)
        send_abort(t, status);
    _exit(status);
}

/* Reads the next header from `peer` into *h; an abort ends this process (aborted_by). */
static tw_status read_header(tcp *t, int peer, const char *what, header *h, tw_error *err)
{
    unsigned char b[HEADER_BYTES];
    int k = recv_all(fd_of(t, peer), b, sizeof b);
    if (k != 1)
        return lost(t, peer, k, what, err);
    *h = decode(b);
    if (h->op == OP_ABORT)
        aborted_by(t, peer, h->arg);
    return TW_OK;
}

/* Reads `peer`'s header, which must be want's (op, collective, bytes): else both calls are named. */
static tw_status expect(tcp *t, int peer, const header *want, tw_error *err)
{
    header h;
    TW_TRY(read_header(t, peer, op_name(want->op), &h, err));
    if (h.op == want->op && h.seq == want->seq && h.bytes == want->bytes)
        return TW_OK;
    return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                        "world (tcp): the ranks do not call the same collectives: rank %d is in "
                        "collective #%llu, %s of %llu bytes, but rank %d in #%llu, %s of %llu bytes",
                        t->rank, (unsigned long long)want->seq, op_name(want->op),
                        (unsigned long long)want->bytes, peer, (unsigned long long)h.seq, op_name(h.op),
                        (unsigned long long)h.bytes);
}

/* ---- the collectives ---- */

/* Folds a peer's payload src into acc, in place: acc[i] = acc[i] op src[i]. */
typedef void (*fold_fn)(void *acc, const void *src, size_t bytes);

static void fold_f32(void *acc, const void *src, size_t bytes)
{
    float *a = acc;
    const float *s = src;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        a[i] = a[i] + s[i];
}

static void fold_f64(void *acc, const void *src, size_t bytes)
{
    double *a = acc;
    const double *s = src;
    for (size_t i = 0; i < bytes / sizeof(double); i++)
        a[i] = a[i] + s[i];
}

static void fold_or(void *acc, const void *src, size_t bytes)
{
    (void)bytes;
    *(int *)acc = *(int *)acc || *(const int *)src;
}

static tw_status scratch_for(tcp *t, size_t bytes, tw_error *err)
{
    if (bytes <= t->scratch_bytes)
        return TW_OK;
    void *p = realloc(t->scratch, bytes);
    if (!p)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "world (tcp): out of memory for %zu bytes", bytes);
    t->scratch = p;
    t->scratch_bytes = bytes;
    return TW_OK;
}

/* Rank 0: every peer's header for h, in rank order, and (fold != NULL) its payload folded into buf. */
static tw_status gather(tcp *t, const header *h, void *buf, fold_fn fold, tw_error *err)
{
    if (fold)
        TW_TRY(scratch_for(t, h->bytes, err));
    for (int peer = 1; peer < t->size; peer++) {
        TW_TRY(expect(t, peer, h, err));
        if (!fold)
            continue;
        int k = recv_all(t->fd[peer], t->scratch, h->bytes);
        if (k != 1)
            return lost(t, peer, k, op_name(h->op), err);
        fold(buf, t->scratch, h->bytes);
    }
    return TW_OK;
}

/* Rank 0: h and buf to every peer. */
static tw_status scatter(tcp *t, const header *h, const void *buf, tw_error *err)
{
    for (int peer = 1; peer < t->size; peer++)
        if (send_msg(t->fd[peer], h, buf, h->bytes) != 0)
            return lost(t, peer, -1, op_name(h->op), err);
    return TW_OK;
}

/* A peer: rank 0's answer h into buf[h->bytes] (the length checked before anything is read into buf). */
static tw_status answer(tcp *t, const header *h, void *buf, tw_error *err)
{
    TW_TRY(expect(t, 0, h, err));
    int k = recv_all(t->fd[0], buf, h->bytes);
    return k == 1 ? TW_OK : lost(t, 0, k, op_name(h->op), err);
}

/* A peer: h (and, when it sends, buf) to rank 0, then rank 0's answer into buf. */
static tw_status ask(tcp *t, const header *h, void *buf, int sends, tw_error *err)
{
    if (send_msg(t->fd[0], h, buf, sends ? h->bytes : 0) != 0)
        return lost(t, 0, -1, op_name(h->op), err);
    return answer(t, h, buf, err);
}

/* One collective of op over buf[bytes]: fold reduces (NULL: rank 0's buf is broadcast), finish (or NULL)
 * runs on rank 0's result before it is sent. */
static tw_status collective(tw_world *w, enum op op, void *buf, size_t bytes, fold_fn fold,
                            void (*finish)(tw_world *w, void *buf, size_t bytes), tw_error *err)
{
    tcp *t = w->impl;
    header h = {.op = op, .seq = t->seq++, .bytes = bytes};
    if (t->rank != 0)
        return ask(t, &h, buf, fold != NULL, err);
    TW_TRY(gather(t, &h, buf, fold, err));
    if (finish)
        finish(w, buf, bytes);
    return scatter(t, &h, buf, err);
}

/* The sum becomes the mean: times 1/size in fp32, as cpu_allreduce_avg scales its towers' sum. */
static void scale_mean(tw_world *w, void *buf, size_t bytes)
{
    float *f = buf;
    const float inv = 1.0f / (float)w->size;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        f[i] *= inv;
}

static tw_status tcp_allreduce_avg(tw_world *w, float *buf, size_t n, tw_error *err)
{
    return collective(w, OP_AVG, buf, n * sizeof *buf, fold_f32, scale_mean, err);
}

static tw_status tcp_sum(tw_world *w, double *buf, size_t n, tw_error *err)
{
    return collective(w, OP_SUM, buf, n * sizeof *buf, fold_f64, NULL, err);
}

static tw_status tcp_bcast(tw_world *w, void *buf, size_t bytes, tw_error *err)
{
    return collective(w, OP_BCAST, buf, bytes, NULL, NULL, err);
}

static tw_status tcp_any(tw_world *w, int *flag, tw_error *err)
{
    return collective(w, OP_ANY, flag, sizeof *flag, fold_or, NULL, err);
}

static void close_all(tcp *t)
{
    for (int i = 0; i < n_fds(t); i++)
        if (t->fd[i] >= 0)
            close(t->fd[i]);
}

static void free_tcp(tcp *t)
{
    if (!t)
        return;
    free(t->fd);
    free(t->scratch);
    free(t);
}

static void tcp_finalize(tw_world *w)
{
    close_all(w->impl);
    free_tcp(w->impl);
    w->impl = NULL;
}

static const tw_world_ops TCP_OPS = {
    .allreduce_avg = tcp_allreduce_avg,
    .sum = tcp_sum,
    .bcast = tcp_bcast,
    .any = tcp_any,
    .abort = tcp_abort,
    .finalize = tcp_finalize,
};

/* ---- the join ---- */

/* Blocking I/O, no Nagle delay (a header then its payload), and the liveness options (this file's
 * header). The keep-alive options are best effort (a kernel without one still runs). */
static tw_status prepare_socket(int fd, tw_error *err)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        return tw_error_errno(err, NULL, "world (tcp): fcntl on a rank's connection");
    int one = 1, idle = KEEPIDLE_S, intvl = KEEPINTVL_S, cnt = KEEPCNT;
    unsigned user = USER_TIMEOUT_MS;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
    return TW_OK;
}

static void host_name(char *out)
{
    if (gethostname(out, HOST_MAX) != 0)
        snprintf(out, HOST_MAX, "?");
    out[HOST_MAX - 1] = '\0';
}

/* Rank 0: the ranks on the host of each rank, from every peer's host name (rank order). */
static tw_status count_hosts(tcp *t, char (*hosts)[HOST_MAX], uint32_t *local, tw_error *err)
{
    header h;
    for (int peer = 1; peer < t->size; peer++) {
        TW_TRY(read_header(t, peer, op_name(OP_HOST), &h, err));
        if (h.op != OP_HOST || h.seq != 0 || h.bytes == 0 || h.bytes >= HOST_MAX)
            return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                                "world (tcp): rank %d sent %s of %llu bytes where its host name was due",
                                peer, op_name(h.op), (unsigned long long)h.bytes);
        int k = recv_all(t->fd[peer], hosts[peer], h.bytes);
        if (k != 1)
            return lost(t, peer, k, op_name(OP_HOST), err);
        hosts[peer][h.bytes] = '\0';
    }
    for (int a = 0; a < t->size; a++) {
        local[a] = 0;
        for (int b = 0; b < t->size; b++)
            local[a] += strcmp(hosts[a], hosts[b]) == 0;
    }
    return TW_OK;
}

/* Collective 0: every rank's host name to rank 0, each rank's count of ranks on its host back. */
static tw_status exchange_hosts(tcp *t, int *local_size, tw_error *err)
{
    char me[HOST_MAX];
    host_name(me);
    uint32_t mine;
    header h = {.op = OP_HOST, .seq = 0, .bytes = sizeof mine};
    if (t->rank != 0) {
        header hello = {.op = OP_HOST, .seq = 0, .bytes = strlen(me)};
        if (send_msg(t->fd[0], &hello, me, hello.bytes) != 0)
            return lost(t, 0, -1, op_name(OP_HOST), err);
        TW_TRY(answer(t, &h, &mine, err));
    } else {
        char(*hosts)[HOST_MAX] = calloc((size_t)t->size, sizeof *hosts);
        uint32_t *local = calloc((size_t)t->size, sizeof *local);
        tw_status s = hosts && local ? TW_OK
                                     : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "world (tcp): out of memory");
        if (s == TW_OK) {
            memcpy(hosts[0], me, HOST_MAX);
            s = count_hosts(t, hosts, local, err);
        }
        for (int peer = 1; s == TW_OK && peer < t->size; peer++)
            if (send_msg(t->fd[peer], &h, &local[peer], sizeof local[peer]) != 0)
                s = lost(t, peer, -1, op_name(OP_HOST), err);
        mine = local ? local[0] : 1;
        free(hosts);
        free(local);
        TW_TRY(s);
    }
    *local_size = mine >= 1 && mine <= (uint32_t)t->size ? (int)mine : 1;
    t->seq = 1;
    return TW_OK;
}

tw_status tw_world_tcp_init(tw_world *w, const tw_rendezvous *r, tw_error *err)
{
    tcp *t = calloc(1, sizeof *t);
    int *fd = malloc((size_t)r->size * sizeof *fd);
    if (!t || !fd) {
        free(t);
        free(fd);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "world (tcp): out of memory");
    }
    *t = (tcp){.rank = r->rank, .size = r->size, .fd = fd};
    for (int i = 0; i < r->size; i++)
        fd[i] = -1;
    int local = 1;
    tw_status s = tw_rendezvous_connect(r, r->timeout_s, fd, err);
    for (int i = 0; s == TW_OK && i < n_fds(t); i++)
        if (fd[i] >= 0)
            s = prepare_socket(fd[i], err);
    if (s == TW_OK)
        s = exchange_hosts(t, &local, err);
    if (s != TW_OK) {
        close_all(t);
        free_tcp(t);
        return s;
    }
    *w = (tw_world){.rank = r->rank, .size = r->size, .local_size = r->local_size ? r->local_size : local,
                    .joined = 1, .ops = &TCP_OPS, .impl = t};
    snprintf(w->kind, sizeof w->kind, "tcp");
    return TW_OK;
}
