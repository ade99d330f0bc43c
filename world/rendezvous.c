/* rendezvous.c — the world from torchrun's variables, and the TCP rendezvous that either hands rank 0's
 * blob (the 128-byte NCCL unique id) to every rank (tw_rendezvous_share) or leaves the world's ranks
 * connected to rank 0 (tw_rendezvous_connect: the TCP world's star, world/world_tcp.c) (rendezvous.h).
 *
 * Owns: the variables' parsing and checks, and the protocol below (the join only: what travels over the
 * connections tw_rendezvous_connect hands back is world_tcp.c's). Does not own what the blob means or
 * the MPI route (world/world_mpi.c: MPI_Bcast does the same job where mpirun or srun+PMIx start the
 * world).
 *
 * Why hand-written: NCCL leaves the id's journey to the caller ("broadcasting it to other processes using
 * MPI or another parallel environment using, for example, sockets": NCCL's user guide, "Creating a
 * communicator"), and no library packaged here does it without MPI: PyTorch's TCPStore is C++ inside
 * libtorch, Gloo wants a store of its own, PMIx is the very piece missing from the Slurm installs this path
 * serves (llm.c's README; llm.c's own llmc/zero.cuh get_nccl_id_via_tcp is the same ~100 lines). It is one
 * listening socket, one message each way.
 *
 * Protocol (every integer a big-endian uint32):
 *   peer -> rank 0   hello:  "TWRZ", version 1, world size, rank, blob bytes             (20 bytes)
 *   rank 0 -> peer   answer: "TWRZ", version 1, verdict, detail                          (16 bytes)
 *                    then, when verdict is 0, the blob (blob bytes)
 * tw_rendezvous_connect is the same join with blob bytes 0 (nothing follows the answer): the connections stay
 * open and are handed back, and a rank sharing a blob and one connecting never join one world (BAD_BYTES).
 * verdict: 0 joined, else a refusal (enum verdict, detail = rank 0's value that differed), after which
 * rank 0 closes the connection; ranks that joined a world that never completed get INCOMPLETE. Rank 0 serves every connection at once from one poll(2): a connection
 * that sends something else than a hello (a port scan, a health check, garbage) is closed without
 * disturbing the others, one that sends nothing is dropped when MAX_PENDING newer ones arrive or at the
 * deadline, and a joined rank whose connection closes (it died) leaves its place free again. Rank 0 answers
 * only once all size-1 ranks are there, so a peer's answer also says that the whole world exists. Every
 * wait is a poll bounded by the one deadline; nothing blocks. */
#define _GNU_SOURCE
#include "rendezvous.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    VERSION = 1,
    HELLO_BYTES = 20,
    ANSWER_BYTES = 16,
    MAX_PENDING = 64,     /* connections that have not said who they are */
    BACKOFF_MIN_MS = 50,  /* a peer's first retry; doubled up to BACKOFF_MAX_MS */
    BACKOFF_MAX_MS = 1000,
};

static const unsigned char MAGIC[4] = {'T', 'W', 'R', 'Z'};

/* An answer's verdict; for a refusal, detail is rank 0's value that differed. */
enum verdict {
    JOINED = 0,
    BAD_VERSION = 1, /* detail: rank 0's version */
    BAD_SIZE = 2,    /* detail: rank 0's world size */
    BAD_RANK = 3,    /* detail: rank 0's world size (the rank is 0 or past it) */
    DUPLICATE = 4,   /* detail: the rank, which another connection holds */
    BAD_BYTES = 5,   /* detail: rank 0's blob bytes */
    INCOMPLETE = 6,  /* rank 0 timed out before the world was complete; detail: ranks joined */
};

/* ---- the environment ---- */

/* One launcher's pair of variables; the first whose rank variable is set gives the rank. */
static const struct {
    const char *rank, *size;
} SOURCES[] = {
    {"RANK", "WORLD_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"JOB_COMPLETION_INDEX", NULL}, /* a Kubernetes Indexed Job: WORLD_SIZE gives the size */
};

/* value, or a placeholder when it holds bytes a message should not carry. */
static const char *shown(const char *value)
{
    for (const char *p = value; *p; p++)
        if (!isprint((unsigned char)*p))
            return "(unprintable)";
    return value;
}

/* *out = name's value, plain decimal digits in [min, max]. */
static tw_status parse_int(const char *name, const char *value, long min, long max, int *out,
                           tw_error *err)
{
    size_t len = strlen(value);
    int digits = len > 0 && len <= 10;
    for (size_t i = 0; digits && i < len; i++)
        digits = value[i] >= '0' && value[i] <= '9';
    if (!digits)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "%s='%.40s' is not a decimal number (digits only, %ld..%ld)", name,
                            shown(value), min, max);
    long v = strtol(value, NULL, 10);
    if (v < min || v > max)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s=%s is outside %ld..%ld", name, value,
                            min, max);
    *out = (int)v;
    return TW_OK;
}

static tw_status parse_addr(const char *value, char *out, tw_error *err)
{
    if (!value || !*value)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "MASTER_ADDR is %s: it names rank 0's host", value ? "empty" : "not set");
    size_t len = strlen(value);
    int ok = len < TW_RENDEZVOUS_ADDR_MAX;
    for (size_t i = 0; ok && i < len; i++)
        ok = isgraph((unsigned char)value[i]);
    if (!ok)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "MASTER_ADDR='%.40s' is not a host name or address (printable, no spaces, "
                            "under %d bytes)", shown(value), TW_RENDEZVOUS_ADDR_MAX);
    memcpy(out, value, len + 1);
    return TW_OK;
}

/* r->rank, r->size and where they came from. */
static tw_status parse_coordinates(tw_rendezvous *r, tw_error *err)
{
    size_t src = 0, n = sizeof SOURCES / sizeof SOURCES[0];
    while (src < n && !getenv(SOURCES[src].rank))
        src++;
    if (src == n)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "RANK is not set (nor SLURM_PROCID, OMPI_COMM_WORLD_RANK or "
                            "JOB_COMPLETION_INDEX): this process's rank is unknown");
    const char *size_var = getenv("WORLD_SIZE") ? "WORLD_SIZE" : SOURCES[src].size;
    if (!size_var || !getenv(size_var))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "WORLD_SIZE is not set (%s=%s gives the rank, not the number of "
                            "processes)", SOURCES[src].rank, shown(getenv(SOURCES[src].rank)));
    TW_TRY(parse_int(size_var, getenv(size_var), 1, TW_RENDEZVOUS_MAX_SIZE, &r->size, err));
    TW_TRY(parse_int(SOURCES[src].rank, getenv(SOURCES[src].rank), 0, TW_RENDEZVOUS_MAX_SIZE - 1,
                     &r->rank, err));
    if (r->rank >= r->size)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s=%d is not below %s=%d",
                            SOURCES[src].rank, r->rank, size_var, r->size);
    r->rank_from = SOURCES[src].rank;
    r->size_from = size_var;
    return TW_OK;
}

/* r->timeout_s from TOWER_RENDEZVOUS_TIMEOUT (default TW_RENDEZVOUS_TIMEOUT_S) and r->local_size from
 * LOCAL_WORLD_SIZE (0 when not set), both optional. */
static tw_status parse_options(tw_rendezvous *r, tw_error *err)
{
    const char *t = getenv("TOWER_RENDEZVOUS_TIMEOUT"), *l = getenv("LOCAL_WORLD_SIZE");
    int seconds = TW_RENDEZVOUS_TIMEOUT_S;
    if (t)
        TW_TRY(parse_int("TOWER_RENDEZVOUS_TIMEOUT", t, 1, 86400, &seconds, err));
    r->timeout_s = seconds;
    r->local_size = 0;
    return l ? parse_int("LOCAL_WORLD_SIZE", l, 1, r->size, &r->local_size, err) : TW_OK;
}

tw_status tw_rendezvous_from_env(tw_rendezvous *r, int *present, tw_error *err)
{
    if (!r || !present)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_rendezvous_from_env: NULL argument");
    *present = getenv("MASTER_ADDR") || getenv("MASTER_PORT") || getenv("WORLD_SIZE") ||
               getenv("RANK");
    if (!*present)
        return TW_OK;
    tw_rendezvous w = {0};
    TW_TRY(parse_addr(getenv("MASTER_ADDR"), w.addr, err));
    if (!getenv("MASTER_PORT"))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "MASTER_PORT is not set: it names rank 0's rendezvous port");
    TW_TRY(parse_int("MASTER_PORT", getenv("MASTER_PORT"), 1, 65535, &w.port, err));
    TW_TRY(parse_coordinates(&w, err));
    TW_TRY(parse_options(&w, err));
    *r = w;
    return TW_OK;
}

/* ---- time and bytes ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Milliseconds left until deadline, at least 0, at most max_ms. */
static int left_ms(double deadline, int max_ms)
{
    double ms = (deadline - now_s()) * 1000.0;
    return ms <= 0 ? 0 : ms >= max_ms ? max_ms : (int)ms + 1;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A header: MAGIC, VERSION, a, b, c (c only in a hello). */
static void put_header(unsigned char *p, uint32_t a, uint32_t b, uint32_t c)
{
    memcpy(p, MAGIC, 4);
    put32(p + 4, VERSION);
    put32(p + 8, a);
    put32(p + 12, b);
    put32(p + 16, c);
}

/* Moves all of buf[n] through non-blocking fd (out: send, else recv) by deadline. Returns 1 done, 0
 * the peer closed first (recv), -1 an error or the deadline (errno says which: ETIMEDOUT). */
static int transfer(int fd, void *buf, size_t n, int out, double deadline)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = out ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                        : recv(fd, (char *)buf + done, n - done, 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
        int ms = left_ms(deadline, 1000);
        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (poll(&p, 1, ms) < 0 && errno != EINTR)
            return -1;
    }
    return 1;
}

static int nonblocking_socket(int family)
{
    return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

/* ---- rank 0 ---- */

typedef struct {
    int fd;
    size_t got;
    unsigned char hello[HELLO_BYTES];
} pending;

typedef struct {
    const tw_rendezvous *r;
    size_t bytes;
    int listen_fd;
    int *member;            /* [size]: the joined connection of each rank, or -1 (member[0] unused) */
    int joined;
    pending wait[MAX_PENDING];
    int n_wait;
    struct pollfd fds[1 + MAX_PENDING + TW_RENDEZVOUS_MAX_SIZE]; /* one round's poll set */
    int ranks[TW_RENDEZVOUS_MAX_SIZE];                           /* the rank of each member's pollfd */
} server;

/* Binds and listens on addrs' first usable address; *fd = -1 when none is local (EADDRNOTAVAIL). */
static tw_status listen_on(const tw_rendezvous *r, struct addrinfo *addrs, int *fd, tw_error *err)
{
    *fd = -1;
    for (struct addrinfo *a = addrs; a; a = a->ai_next) {
        int s = nonblocking_socket(a->ai_family);
        int one = 1;
        if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) {
            if (s >= 0)
                close(s);
            return tw_error_errno(err, NULL, "rendezvous: socket for MASTER_PORT=%d", r->port);
        }
        if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 128) == 0) {
            *fd = s;
            return TW_OK;
        }
        int e = errno;
        close(s);
        if (e != EADDRNOTAVAIL && e != EAFNOSUPPORT) {
            errno = e;
            return tw_error_errno(err, NULL, "rendezvous: rank 0 cannot listen on %s:%d "
                                  "(MASTER_ADDR:MASTER_PORT)", r->addr, r->port);
        }
    }
    return TW_OK;
}

/* Rank 0's listening socket: MASTER_ADDR:MASTER_PORT when MASTER_ADDR is one of this host's addresses,
 * else every address on MASTER_PORT (MASTER_ADDR may be a name that reaches this host through a
 * forwarder, such as a Kubernetes Service). */
static tw_status server_listen(server *sv, tw_error *err)
{
    char port[8];
    snprintf(port, sizeof port, "%d", sv->r->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *addrs = NULL;
    int gai = getaddrinfo(sv->r->addr, port, &hints, &addrs);
    if (gai != 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "rendezvous: MASTER_ADDR=%s does not resolve on rank 0: %s", sv->r->addr,
                            gai_strerror(gai));
    tw_status s = listen_on(sv->r, addrs, &sv->listen_fd, err);
    freeaddrinfo(addrs);
    if (s != TW_OK || sv->listen_fd >= 0)
        return s;
    gai = getaddrinfo(NULL, port, &hints, &addrs);
    if (gai != 0)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "rendezvous: the wildcard address: %s",
                            gai_strerror(gai));
    s = listen_on(sv->r, addrs, &sv->listen_fd, err);
    freeaddrinfo(addrs);
    if (s == TW_OK && sv->listen_fd < 0)
        return tw_error_set(err, TW_ERR_IO, NULL, -1, "rendezvous: no address to listen on for port %d",
                            sv->r->port);
    return s;
}

static void drop_pending(server *sv, int i)
{
    close(sv->wait[i].fd);
    sv->wait[i] = sv->wait[--sv->n_wait];
}

static void accept_one(server *sv)
{
    int fd = accept4(sv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return; /* gone before it was accepted, or out of descriptors: it can try again */
    if (sv->n_wait == MAX_PENDING)
        drop_pending(sv, 0); /* a connection still silent makes room (a rank says hello at once) */
    sv->wait[sv->n_wait++] = (pending){.fd = fd};
}

/* The verdict on a complete hello h; *rank = the rank it claims. */
static uint32_t judge(const server *sv, const unsigned char *h, uint32_t *rank)
{
    *rank = get32(h + 12);
    if (get32(h + 4) != VERSION)
        return BAD_VERSION;
    if (get32(h + 8) != (uint32_t)sv->r->size)
        return BAD_SIZE;
    if (*rank == 0 || *rank >= (uint32_t)sv->r->size)
        return BAD_RANK;
    if (get32(h + 16) != sv->bytes)
        return BAD_BYTES;
    return sv->member[*rank] >= 0 ? DUPLICATE : JOINED;
}

/* What a refusal's answer carries besides the verdict. */
static uint32_t detail_of(const server *sv, uint32_t verdict, uint32_t rank)
{
    switch (verdict) {
    case BAD_VERSION: return VERSION;
    case BAD_SIZE:
    case BAD_RANK: return (uint32_t)sv->r->size;
    case BAD_BYTES: return (uint32_t)sv->bytes;
    case DUPLICATE: return rank;
    default: return (uint32_t)sv->joined + 1;
    }
}

/* Sends a refusal (best effort, non-blocking: 16 bytes fit in any socket buffer). */
static void send_refusal(const server *sv, int fd, uint32_t verdict, uint32_t rank)
{
    unsigned char a[HELLO_BYTES];
    put_header(a, verdict, detail_of(sv, verdict, rank), 0);
    (void)send(fd, a, ANSWER_BYTES, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Reads what pending connection i sent; a complete hello joins or is refused. */
static void read_pending(server *sv, int i)
{
    pending *p = &sv->wait[i];
    ssize_t k = recv(p->fd, p->hello + p->got, HELLO_BYTES - p->got, 0);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (k <= 0) {
        drop_pending(sv, i); /* closed or failed before saying who it is */
        return;
    }
    p->got += (size_t)k;
    if (memcmp(p->hello, MAGIC, p->got < 4 ? p->got : 4) != 0) {
        drop_pending(sv, i); /* not a rank of a Tower world */
        return;
    }
    if (p->got < HELLO_BYTES)
        return;
    uint32_t rank, verdict = judge(sv, p->hello, &rank);
    if (verdict == JOINED) {
        sv->member[rank] = p->fd;
        sv->joined++;
        sv->wait[i] = sv->wait[--sv->n_wait];
        return;
    }
    send_refusal(sv, p->fd, verdict, rank);
    drop_pending(sv, i);
}

/* A joined rank's connection became readable: it closed (the process died) or broke the protocol. */
static void lose_member(server *sv, int rank)
{
    char c;
    ssize_t k = recv(sv->member[rank], &c, 1, MSG_PEEK);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    close(sv->member[rank]);
    sv->member[rank] = -1;
    sv->joined--;
}

/* err = ETIMEDOUT as a TW_ERR_IO status (err may be NULL). */
static tw_status timed_out(tw_error *err)
{
    if (err)
        err->errno_value = ETIMEDOUT;
    return TW_ERR_IO;
}

/* The world was not complete by the deadline: the joined ranks are told (INCOMPLETE), and err says which
 * ranks were missing. */
static tw_status timeout_error(const server *sv, double timeout_s, tw_error *err)
{
    for (int rank = 1; rank < sv->r->size; rank++)
        if (sv->member[rank] >= 0)
            send_refusal(sv, sv->member[rank], INCOMPLETE, (uint32_t)rank);
    char missing[160] = "";
    size_t at = 0;
    int listed = 0;
    for (int rank = 1; rank < sv->r->size && at < sizeof missing - 16; rank++)
        if (sv->member[rank] < 0)
            at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%d", listed++ ? ", " : "",
                                   rank);
    int left = sv->r->size - 1 - sv->joined - listed;
    tw_error_set(err, TW_ERR_IO, NULL, -1,
                 "rendezvous: timed out after %gs on %s:%d: %d of %d ranks came (rank 0 included); "
                 "missing rank %s%s", timeout_s, sv->r->addr, sv->r->port, sv->joined + 1, sv->r->size,
                 missing, left > 0 ? ", ..." : "");
    return timed_out(err);
}

/* One round of waiting: every socket in one poll, bounded by the deadline. */
static void serve_round(server *sv, double deadline)
{
    struct pollfd *fds = sv->fds;
    int *ranks = sv->ranks;
    int n = 0;
    fds[n++] = (struct pollfd){.fd = sv->listen_fd, .events = POLLIN};
    for (int i = 0; i < sv->n_wait; i++)
        fds[n++] = (struct pollfd){.fd = sv->wait[i].fd, .events = POLLIN};
    int n_members = 0;
    for (int rank = 1; rank < sv->r->size; rank++)
        if (sv->member[rank] >= 0) {
            ranks[n_members++] = rank;
            fds[n++] = (struct pollfd){.fd = sv->member[rank], .events = POLLIN};
        }
    int n_wait = sv->n_wait;
    if (poll(fds, (nfds_t)n, left_ms(deadline, 1000)) <= 0)
        return;
    for (int i = 0; i < n_members; i++)
        if (fds[1 + n_wait + i].revents)
            lose_member(sv, ranks[i]);
    for (int i = n_wait - 1; i >= 0; i--) /* backwards: dropping i moves the last one into its place */
        if (fds[1 + i].revents)
            read_pending(sv, i);
    if (fds[0].revents & POLLIN)
        accept_one(sv);
}

/* Answers every rank: the verdict JOINED and the blob (none when bytes is 0: a connect). */
static tw_status answer_all(server *sv, void *blob, double deadline, tw_error *err)
{
    unsigned char a[HELLO_BYTES];
    put_header(a, JOINED, 0, 0);
    for (int rank = 1; rank < sv->r->size; rank++) {
        int fd = sv->member[rank];
        if (transfer(fd, a, ANSWER_BYTES, 1, deadline) != 1 ||
            (sv->bytes && transfer(fd, blob, sv->bytes, 1, deadline) != 1))
            return tw_error_errno(err, NULL, "rendezvous: rank 0 could not hand the id to rank %d",
                                  rank);
    }
    return TW_OK;
}

/* Rank 0's side. keep: NULL, or [size] that receives each peer's connection (keep[0] = -1) when the world
 * is complete, instead of closing them. */
static tw_status serve(const tw_rendezvous *r, void *blob, size_t bytes, double timeout_s,
                       double deadline, int *keep, tw_error *err)
{
    server *sv = calloc(1, sizeof *sv);
    int *member = malloc((size_t)r->size * sizeof *member);
    if (!sv || !member) {
        free(sv);
        free(member);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "rendezvous: out of memory");
    }
    *sv = (server){.r = r, .bytes = bytes, .listen_fd = -1, .member = member};
    for (int i = 0; i < r->size; i++)
        member[i] = -1;
    tw_status s = server_listen(sv, err);
    while (s == TW_OK && sv->joined < r->size - 1) {
        if (now_s() >= deadline)
            s = timeout_error(sv, timeout_s, err);
        else
            serve_round(sv, deadline);
    }
    if (s == TW_OK)
        s = answer_all(sv, blob, deadline, err);
    for (int i = 0; i < sv->n_wait; i++)
        close(sv->wait[i].fd);
    for (int rank = 0; s == TW_OK && keep && rank < r->size; rank++) {
        keep[rank] = member[rank];
        member[rank] = -1; /* handed over, not closed */
    }
    for (int rank = 1; rank < r->size; rank++)
        if (member[rank] >= 0)
            close(member[rank]);
    if (sv->listen_fd >= 0)
        close(sv->listen_fd);
    free(member);
    free(sv);
    return s;
}

/* ---- the other ranks ---- */

/* Why rank 0 refused this rank, as a sentence. */
static tw_status refused(const tw_rendezvous *r, size_t bytes, uint32_t verdict, uint32_t detail,
                         tw_error *err)
{
    const char *fmt = "rendezvous: rank 0 refused %s=%d: %s";
    char why[160];
    size_t n = sizeof why;
    if (verdict == BAD_VERSION)
        snprintf(why, n, "it speaks rendezvous version %u, this rank %d", detail, VERSION);
    else if (verdict == BAD_SIZE)
        snprintf(why, n, "its world has %u processes, this rank's %s=%d", detail, r->size_from, r->size);
    else if (verdict == BAD_RANK)
        snprintf(why, n, "not a peer rank of its world of %u", detail);
    else if (verdict == DUPLICATE)
        snprintf(why, n, "another process with rank %u already joined (two processes given one rank?)",
                 detail);
    else if (verdict == BAD_BYTES)
        snprintf(why, n, "it shares %u bytes, this rank expects %zu", detail, bytes);
    else if (verdict == INCOMPLETE)
        snprintf(why, n, "its rendezvous timed out with %u of %d ranks", detail, r->size);
    else
        snprintf(why, n, "unknown verdict %u", verdict);
    tw_error_set(err, verdict == INCOMPLETE ? TW_ERR_IO : TW_ERR_INVALID, NULL, -1, fmt, r->rank_from,
                 r->rank, why);
    return verdict == INCOMPLETE ? timed_out(err) : err ? err->status : TW_ERR_INVALID;
}

/* The status of a transfer to or from rank 0 that returned k (0: closed, -1: errno). */
static tw_status lost(const tw_rendezvous *r, int k, tw_error *err)
{
    if (k == 0 || errno == ECONNRESET || errno == EPIPE || errno == ETIMEDOUT)
        return TW_END;
    return tw_error_errno(err, NULL, "rendezvous: talking to rank 0 at %s:%d", r->addr, r->port);
}

/* One attempt over connected fd: hello, answer, blob (none when bytes is 0). Returns TW_OK with blob
 * filled; TW_END when rank 0
 * closed before its answer or the deadline came first (the caller retries or reports the time-out); or
 * an error. */
static tw_status ask(const tw_rendezvous *r, int fd, void *blob, size_t bytes, double deadline,
                     tw_error *err)
{
    unsigned char h[HELLO_BYTES], a[ANSWER_BYTES];
    put_header(h, (uint32_t)r->size, (uint32_t)r->rank, (uint32_t)bytes);
    int k = transfer(fd, h, HELLO_BYTES, 1, deadline);
    if (k == 1)
        k = transfer(fd, a, ANSWER_BYTES, 0, deadline);
    if (k != 1)
        return lost(r, k, err);
    if (memcmp(a, MAGIC, 4) != 0 || get32(a + 4) != VERSION)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "rendezvous: %s:%d (MASTER_ADDR:MASTER_PORT) answered, but not as a "
                            "Tower rank 0", r->addr, r->port);
    if (get32(a + 8) != JOINED)
        return refused(r, bytes, get32(a + 8), get32(a + 12), err);
    if (bytes == 0)
        return TW_OK;
    unsigned char *got = malloc(bytes);
    if (!got)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "rendezvous: out of memory");
    k = transfer(fd, got, bytes, 0, deadline);
    if (k == 1)
        memcpy(blob, got, bytes);
    free(got);
    return k == 1 ? TW_OK : lost(r, k, err);
}

/* Connects a non-blocking socket to a by deadline: the fd, or -1 (errno set). */
static int connect_by(const struct addrinfo *a, double deadline)
{
    int fd = nonblocking_socket(a->ai_family);
    if (fd < 0)
        return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
        return fd;
    int e = errno, so = 0;
    socklen_t len = sizeof so;
    if (e == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int ready = poll(&p, 1, left_ms(deadline, 60000));
        if (ready > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) == 0 && so == 0)
            return fd;
        e = ready == 0 ? ETIMEDOUT : so ? so : errno;
    }
    close(fd);
    errno = e;
    return -1;
}

/* One pass over MASTER_ADDR's addresses. TW_END: nobody answered yet (why in *why). keep: NULL, or where
 * the joined connection goes instead of being closed. */
static tw_status try_once(const tw_rendezvous *r, void *blob, size_t bytes, double deadline, int *keep,
                          char *why, size_t why_size, tw_error *err)
{
    char port[8];
    snprintf(port, sizeof port, "%d", r->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *addrs = NULL;
    int gai = getaddrinfo(r->addr, port, &hints, &addrs);
    if (gai != 0) {
        snprintf(why, why_size, "MASTER_ADDR=%s does not resolve: %s", r->addr, gai_strerror(gai));
        return TW_END; /* a pod's name appears in DNS only once it runs */
    }
    tw_status s = TW_END;
    for (struct addrinfo *a = addrs; a && s == TW_END; a = a->ai_next) {
        int fd = connect_by(a, deadline);
        if (fd < 0) {
            snprintf(why, why_size, "connecting to %s:%d: %s", r->addr, r->port, strerror(errno));
            continue;
        }
        s = ask(r, fd, blob, bytes, deadline, err);
        if (s == TW_END)
            snprintf(why, why_size, "connected to %s:%d, but no answer came (rank 0 answers once every "
                     "rank has joined)", r->addr, r->port);
        if (s == TW_OK && keep)
            *keep = fd;
        else
            close(fd);
    }
    freeaddrinfo(addrs);
    return s;
}

/* A peer's side; keep as try_once's. */
static tw_status join(const tw_rendezvous *r, void *blob, size_t bytes, double timeout_s,
                      double deadline, int *keep, tw_error *err)
{
    char why[768] = "rank 0 was never reached"; /* room for MASTER_ADDR and a strerror */
    int backoff_ms = BACKOFF_MIN_MS;
    for (;;) {
        tw_status s = try_once(r, blob, bytes, deadline, keep, why, sizeof why, err);
        if (s != TW_END)
            return s;
        int ms = left_ms(deadline, backoff_ms);
        if (ms == 0)
            break;
        (void)poll(NULL, 0, ms); /* the retry's back-off, bounded by the deadline */
        backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
    }
    tw_error_set(err, TW_ERR_IO, NULL, -1,
                 "rendezvous: timed out after %gs: %s=%d had no answer from rank 0 at %s:%d "
                 "(MASTER_ADDR:MASTER_PORT); last: %s", timeout_s, r->rank_from, r->rank, r->addr,
                 r->port, why);
    return timed_out(err);
}

/* The arguments every join checks: a time-out in (0, 86400] s, a rank of a world of valid size. */
static tw_status check_world(const tw_rendezvous *r, double timeout_s, const char *fn, tw_error *err)
{
    if (!r)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: NULL world", fn);
    if (!(timeout_s > 0 && timeout_s <= 86400))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: timeout %g s is outside (0, 86400]", fn,
                            timeout_s);
    if (r->size < 1 || r->size > TW_RENDEZVOUS_MAX_SIZE || r->rank < 0 || r->rank >= r->size)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: rank %d of a world of %d", fn, r->rank,
                            r->size);
    return TW_OK;
}

tw_status tw_rendezvous_share(const tw_rendezvous *r, void *blob, size_t bytes, double timeout_s,
                              tw_error *err)
{
    if (!r || !blob || bytes == 0 || bytes > TW_RENDEZVOUS_MAX_BLOB)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "tw_rendezvous_share: a blob of 1..%d bytes is needed (got %zu%s)",
                            TW_RENDEZVOUS_MAX_BLOB, bytes, blob ? "" : ", NULL");
    TW_TRY(check_world(r, timeout_s, "tw_rendezvous_share", err));
    if (r->size == 1)
        return TW_OK;
    double deadline = now_s() + timeout_s;
    return r->rank == 0 ? serve(r, blob, bytes, timeout_s, deadline, NULL, err)
                        : join(r, blob, bytes, timeout_s, deadline, NULL, err);
}

tw_status tw_rendezvous_connect(const tw_rendezvous *r, double timeout_s, int *fds, tw_error *err)
{
    if (!fds)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_rendezvous_connect: NULL fds");
    TW_TRY(check_world(r, timeout_s, "tw_rendezvous_connect", err));
    for (int i = 0; i < (r->rank == 0 ? r->size : 1); i++)
        fds[i] = -1;
    if (r->size == 1)
        return TW_OK;
    double deadline = now_s() + timeout_s;
    char none;
    return r->rank == 0 ? serve(r, &none, 0, timeout_s, deadline, fds, err)
                        : join(r, &none, 0, timeout_s, deadline, fds, err);
}
