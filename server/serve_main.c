/* serve_main.c — `tower serve`: options, the data folder, start-up recovery, the threads, shutdown.
 *
 * Start-up order: split the --launcher template (launch.h; malformed: exit 2), refuse a data folder
 * on NFS (SQLite locking), lock it (one server per data folder:
 * DIR/tower.lock), open the store, requeue runs a dead server left running (they resume from their
 * checkpoints), remove folders of uploads and submissions that never committed, restart interrupted
 * conversions, optionally register the demo, then start the scheduler and the HTTP daemon and print one
 * JSON line {"listening": URL} on stdout. SIGTERM/SIGINT
 * stop it cleanly; a store that cannot persist stops it with status 1 (to be restarted by a supervisor). */
#define _GNU_SOURCE
#include "serve_main.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "api.h"
#include "clock.h"
#include "datafs.h"
#include "datasets.h"
#include "http.h"
#include "launch.h"
#include "logtext.h"
#include "predict_cache.h"
#include "scalars_cache.h"
#include "runs.h"
#include "scheduler.h"
#include "sweeps.h"
#include "store.h"

#ifndef NFS_SUPER_MAGIC
#define NFS_SUPER_MAGIC 0x6969
#endif

static const char USAGE[] =
    "usage: tower serve [--listen HOST:PORT] [--data DIR] [--token TOKEN] [options]\n"
    "\n"
    "Runs the training service: the REST API (/api/v1), the status page (/), Prometheus metrics\n"
    "(/metrics). State lives in DIR/tower.db; datasets in DIR/datasets, runs in DIR/runs\n"
    "(tensorboard --logdir DIR/runs shows them).\n"
    "\n"
    "  --listen HOST:PORT        address to serve on (default 127.0.0.1:8080; port 0 = any free port)\n"
    "  --data DIR                data folder (default tower-data)\n"
    "  --token TOKEN             bearer token required by POST and DELETE (default $TOWER_TOKEN)\n"
    "  --insecure                allow a non-loopback --listen without a token\n"
    "  --no-demo                 do not register Fashion-MNIST and queue the seed MLP on a new folder\n"
    "  --max-upload BYTES        cap on an upload body (default 8 GiB)\n"
    "  --max-dataset BYTES       cap on the decompressed bytes of an uploaded file (default 16 GiB)\n"
    "  --min-free BYTES          refuse new uploads and runs (507) below this much free disk (256 MiB)\n"
    "  --conn-limit N            open connections (default 256)\n"
    "  --per-ip-limit N          open connections per client address (default 64)\n"
    "  --conn-timeout S          seconds of silence before a connection is closed (default 30)\n"
    "  --header-timeout S        seconds for a request's headers to arrive (default 10); a body gets as\n"
    "                            long, plus a second per --body-min-rate bytes received\n"
    "  --body-min-rate BYTES     the slowest a request body may arrive on average (default 1000/s)\n"
    "  --sse-limit N             open event streams per client address, below --per-ip-limit (default:\n"
    "                            a quarter of it, 16)\n"
    "  --origin URL              another origin whose pages may change things (e.g. a proxy's https://\n"
    "                            address); the server's own origin always may, other origins never\n"
    "  --tensorboard-url URL     a TensorBoard serving DIR/runs: each run links to it (http[s]://...)\n"
    "  --heartbeat-timeout S     seconds without a progress line before a run is killed (default 300)\n"
    "  --grace S                 seconds between SIGTERM and SIGKILL of a run (default 30)\n"
    "  --backoff S               first retry delay, doubled per restart (default 10)\n"
    "  --backoff-cap S           longest retry delay (default 300)\n"
    "  --max-restarts N          retries of a run that does not say (default 3)\n"
    "  --trainer PATH            program run for each run (default: this binary's `train`)\n"
    "  --launcher 'TEMPLATE'     how a run of \"processes\" > 1 starts, split at spaces (no shell):\n"
    "                            {processes}, {hosts} (inside [...], kept when the run names hosts),\n"
    "                            {trainer}; Slurm: 'srun --ntasks={processes} {trainer}' (docs/scale-out.md).\n"
    "                            Default: '" TW_LAUNCH_DEFAULT "'\n"
    "  --memory-limit BYTES      memory a run's device has, for the 400 on a model too large for it\n"
    "                            (default: the CPU's RAM capped by the cgroup limit)\n"
    "  --input-memory BYTES      memory a run's dataset may take decoded before it is streamed instead,\n"
    "                            unless its config sets input_memory_bytes (default 2 GiB)\n";

enum {
    O_LISTEN = 256, O_DATA, O_TOKEN, O_INSECURE, O_NO_DEMO, O_MAX_UPLOAD, O_MAX_DATASET, O_MIN_FREE, O_CONN_LIMIT,
    O_PER_IP, O_CONN_TIMEOUT, O_HEADER_TIMEOUT, O_BODY_MIN_RATE, O_SSE_LIMIT, O_ORIGIN, O_TB_URL, O_HEARTBEAT, O_GRACE, O_BACKOFF, O_BACKOFF_CAP, O_MAX_RESTARTS, O_TRAINER,
    O_LAUNCHER, O_MEMORY_LIMIT, O_INPUT_MEMORY, O_HELP
};

static int number(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (!*v || *end || errno || *out < lo || *out > hi) {
        tw_log("tower serve: %s needs a number from %g to %g, got '%s'", opt, lo, hi, v);
        return -1;
    }
    return 0;
}

/* 1 when s is an origin as browsers send it: a scheme, "://" and a host with an optional port. */
static int valid_origin(const char *s)
{
    const char *host = !strncmp(s, "http://", 7) ? s + 7 : !strncmp(s, "https://", 8) ? s + 8 : NULL;
    return host && *host && strlen(host) < 256 && !strpbrk(host, "/?#@ \t");
}

/* Returns 0 to go on, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, tw_serve_options *o)
{
    static const struct option longs[] = {
        {"listen", required_argument, 0, O_LISTEN}, {"data", required_argument, 0, O_DATA},
        {"token", required_argument, 0, O_TOKEN}, {"insecure", no_argument, 0, O_INSECURE},
        {"no-demo", no_argument, 0, O_NO_DEMO}, {"max-upload", required_argument, 0, O_MAX_UPLOAD},
        {"max-dataset", required_argument, 0, O_MAX_DATASET}, {"min-free", required_argument, 0, O_MIN_FREE},
        {"conn-limit", required_argument, 0, O_CONN_LIMIT}, {"per-ip-limit", required_argument, 0, O_PER_IP},
        {"conn-timeout", required_argument, 0, O_CONN_TIMEOUT},
        {"header-timeout", required_argument, 0, O_HEADER_TIMEOUT}, {"sse-limit", required_argument, 0, O_SSE_LIMIT},
        {"body-min-rate", required_argument, 0, O_BODY_MIN_RATE},
        {"origin", required_argument, 0, O_ORIGIN}, {"tensorboard-url", required_argument, 0, O_TB_URL},
        {"heartbeat-timeout", required_argument, 0, O_HEARTBEAT}, {"grace", required_argument, 0, O_GRACE},
        {"backoff", required_argument, 0, O_BACKOFF}, {"backoff-cap", required_argument, 0, O_BACKOFF_CAP},
        {"max-restarts", required_argument, 0, O_MAX_RESTARTS}, {"trainer", required_argument, 0, O_TRAINER},
        {"launcher", required_argument, 0, O_LAUNCHER},
        {"memory-limit", required_argument, 0, O_MEMORY_LIMIT}, {"input-memory", required_argument, 0, O_INPUT_MEMORY},
        {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0}};
    tw_serve_options_default(o);
    o->token = getenv("TOWER_TOKEN");
    optind = 1;
    int c;
    double v = 0;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        const char *name = "";
        for (const struct option *l = longs; l->name; l++)
            if (l->val == c)
                name = l->name;
        int bad = 0;
        switch (c) {
        case O_LISTEN: o->listen = optarg; break;
        case O_DATA: o->data = optarg; break;
        case O_TOKEN: o->token = optarg; break;
        case O_INSECURE: o->insecure = 1; break;
        case O_NO_DEMO: o->demo = 0; break;
        case O_TRAINER: o->trainer = optarg; break;
        case O_LAUNCHER: o->launcher = optarg; break;
        case O_MAX_UPLOAD: bad = number(name, optarg, 1, 1e15, &v); o->max_upload = (uint64_t)v; break;
        case O_MAX_DATASET: bad = number(name, optarg, 1, 1e15, &v); o->max_dataset = (uint64_t)v; break;
        case O_MIN_FREE: bad = number(name, optarg, 0, 1e18, &v); o->min_free = (uint64_t)v; break;
        case O_CONN_LIMIT: bad = number(name, optarg, 2, 10000, &v); o->conn_limit = (unsigned)v; break;
        case O_PER_IP: bad = number(name, optarg, 1, 10000, &v); o->per_ip_limit = (unsigned)v; break;
        case O_CONN_TIMEOUT: bad = number(name, optarg, 1, 86400, &v); o->conn_timeout = (unsigned)v; break;
        case O_HEADER_TIMEOUT: bad = number(name, optarg, 1, 3600, &v); o->header_timeout = (unsigned)v; break;
        case O_BODY_MIN_RATE: bad = number(name, optarg, 1, 1e9, &v); o->body_min_rate = v; break;
        case O_SSE_LIMIT: bad = number(name, optarg, 1, 10000, &v); o->sse_limit = (unsigned)v; break;
        case O_ORIGIN: o->origin = optarg; break;
        case O_TB_URL: o->tensorboard_url = optarg; break;
        case O_HEARTBEAT: bad = number(name, optarg, 0.1, 1e6, &o->heartbeat_timeout); break;
        case O_GRACE: bad = number(name, optarg, 0, 3600, &o->grace); break;
        case O_BACKOFF: bad = number(name, optarg, 0, 86400, &o->backoff_base); break;
        case O_BACKOFF_CAP: bad = number(name, optarg, 0, 86400, &o->backoff_cap); break;
        case O_MAX_RESTARTS: bad = number(name, optarg, 0, 100, &v); o->max_restarts = (int)v; break;
        case O_MEMORY_LIMIT: bad = number(name, optarg, 1, 1e18, &v); o->memory_limit = (uint64_t)v; break;
        case O_INPUT_MEMORY: bad = number(name, optarg, 1, 1e18, &v); o->input_memory = (uint64_t)v; break;
        case O_HELP: fputs(USAGE, stdout); return -1;
        default: fputs(USAGE, stderr); return 2;
        }
        if (bad)
            return 2;
    }
    if (optind != argc) {
        tw_log("tower serve: unexpected argument '%s'", argv[optind]);
        fputs(USAGE, stderr);
        return 2;
    }
    if (o->token && !*o->token) {
        fprintf(stderr, "tower serve: the token is empty\n");
        return 2;
    }
    if (o->origin && !valid_origin(o->origin)) {
        tw_log("tower serve: --origin needs http://HOST[:PORT] or https://HOST[:PORT], got '%s'", o->origin);
        return 2;
    }
    if (o->tensorboard_url && strncmp(o->tensorboard_url, "http://", 7) && strncmp(o->tensorboard_url, "https://", 8)) {
        tw_log("tower serve: --tensorboard-url needs an http:// or https:// URL, got '%s'", o->tensorboard_url);
        return 2;
    }
    if (!o->sse_limit) /* not given: a quarter of the per-address limit */
        o->sse_limit = o->per_ip_limit >= 8 ? o->per_ip_limit / 4 : 1;
    else if (o->sse_limit >= o->per_ip_limit) {
        fprintf(stderr, "tower serve: --sse-limit (%u) must be below --per-ip-limit (%u), so that event streams "
                "leave room for other requests\n", o->sse_limit, o->per_ip_limit);
        return 2;
    }
    return 0;
}

/* ================================ the data folder ================================ */

static tw_status make_dirs(tw_server *S, tw_error *err)
{
    if (tw_fs_mkdir(S->opt.data, 0755) != 0 && errno != EEXIST)
        return tw_fs_error(err, S->opt.data, "cannot create the data folder");
    if (!realpath(S->opt.data, S->data))
        return tw_error_errno(err, S->opt.data, "cannot resolve the data folder");
    TW_TRY(tw_fs_confine(S->data, err)); /* from here on nothing under it is reached through a symlink */
    static const char *const subs[] = {TW_DATA_RUNS, TW_DATA_DATASETS};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char path[PATH_MAX];
        if (tw_data_path(S, subs[i], path, sizeof path) != 0)
            return tw_error_set(err, TW_ERR_INVALID, S->data, -1, "the data folder's path is too long");
        if (tw_fs_mkdir(path, 0755) != 0 && errno != EEXIST)
            return tw_fs_error(err, path, "cannot create the data folder");
    }
    struct statfs fs;
    if (statfs(S->data, &fs) == 0 && fs.f_type == NFS_SUPER_MAGIC)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, S->data, -1,
                            "the data folder is on NFS: SQLite's locking is not safe there; use a local disk");
    return TW_OK;
}

/* One data folder, one server: an exclusive flock on DIR/tower.lock, held for the process's life and
 * released by the kernel on any death (kill -9 included), so a second server refuses to start instead of
 * running the same queue. The file holds the holder's pid, for the message. */
static tw_status lock_data(tw_server *S, tw_error *err)
{
    char path[PATH_MAX], pid[32] = "";
    if (tw_data_path(S, TW_DATA_LOCK, path, sizeof path) != 0)
        return tw_error_set(err, TW_ERR_INVALID, S->data, -1, "the data folder's path is too long");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return tw_error_errno(err, path, "cannot open the data folder's lock file");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int held = errno == EWOULDBLOCK;
        tw_status s = held ? TW_ERR_IO : tw_error_errno(err, path, "cannot lock the data folder");
        ssize_t n = held ? pread(fd, pid, sizeof pid - 1, 0) : 0;
        pid[n > 0 ? strcspn(pid, "\n") : 0] = 0;
        close(fd);
        if (held)
            tw_error_set(err, s, NULL, -1, "the data folder %s is in use by another tower serve (pid %s): one data "
                         "folder has one server", S->data, pid[0] ? pid : "unknown");
        return s;
    }
    if (ftruncate(fd, 0) == 0) /* the pid is for a second server's message only */
        dprintf(fd, "%d\n", (int)getpid());
    S->lock_fd = fd;
    return TW_OK;
}

static void store_failed(void *arg, const tw_error *err) { tw_server_fatal(arg, err); }

static tw_status start(tw_server *S, int *port, tw_error *err)
{
    TW_TRY(tw_launcher_parse(S->opt.launcher, &S->launcher, err)); /* a bad template: exit 2, naming it */
    TW_TRY(make_dirs(S, err));
    TW_TRY(lock_data(S, err));
    static const char chartjs[] = "/usr/share/javascript/chart.js/chart.min.js"; /* Debian libjs-chart.js */
    if (access(chartjs, R_OK) == 0)
        snprintf(S->chartjs_path, sizeof S->chartjs_path, "%s", chartjs);
    char db[PATH_MAX];
    tw_data_path(S, TW_DATA_DB, db, sizeof db); /* fits: the lock file's name is as long */
    TW_TRY(tw_store_open(db, &S->store, err));
    tw_store_on_fatal(S->store, store_failed, S);
    int requeued, failed;
    TW_TRY(tw_store_runs_recover(S->store, &requeued, &failed, err));
    if (requeued + failed)
        fprintf(stderr, "tower serve: %d run(s) were running when the server last ended without stopping them: "
                "%d queued to try again (a restart each), %d failed with their restarts spent\n",
                requeued + failed, requeued, failed);
    if (tw_store_evals_recover(S->store, err) < 0) /* evaluation jobs start again from the beginning */
        return err->status;
    TW_TRY(tw_datasets_start(S, err));
    S->complete_run = tw_runs_complete;
    S->drive_sweeps = tw_sweeps_drive;
    TW_TRY(tw_scheduler_create(S, &S->sched, err));
    int demo = 0;
    if (S->opt.demo)
        TW_TRY(tw_datasets_demo(S, &demo, err));
    if (demo)
        TW_TRY(tw_runs_submit_demo(S, err));
    TW_TRY(tw_predict_cache_create(&S->predict, err));
    TW_TRY(tw_scalars_cache_create(TW_SCALARS_MAX_POINTS, &S->scalars, err));
    return tw_http_start(S, TW_ROUTES, port, err);
}

static void stop(tw_server *S)
{
    tw_http_stop(S);
    tw_predict_cache_destroy(S->predict);
    tw_scalars_cache_destroy(S->scalars);
    tw_scheduler_destroy(S->sched);
    tw_datasets_stop(S);
    tw_store_close(S->store);
    tw_launcher_destroy(S->launcher);
}

/* SIGTERM and SIGINT write a byte here. A handler, not a signalfd: threads that libraries started before
 * main could block the signals (OpenBLAS's workers) would take them with the default action, killing the
 * server mid-write; with a handler, whichever thread takes the signal only writes this byte. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    char b = (char)sig;
    ssize_t n = write(stop_pipe[1], &b, 1);
    (void)n; /* a full pipe already says "stop" */
}

/* Installs the handler for SIGTERM and SIGINT and blocks both in this thread, so that the threads started
 * from here on inherit the block; main unblocks them when it waits. Returns 0 or -1 (errno set). */
static int catch_stop_signals(sigset_t *stop)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigemptyset(stop);
    sigaddset(stop, SIGTERM);
    sigaddset(stop, SIGINT);
    if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 ||
        sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    return pthread_sigmask(SIG_BLOCK, stop, NULL) == 0 ? 0 : -1;
}

/* Blocks until SIGTERM/SIGINT or a fatal store error. Returns the exit status. */
static int wait_for_stop(tw_server *S, const sigset_t *stop)
{
    struct pollfd pf[2] = {{.fd = stop_pipe[0], .events = POLLIN}, {.fd = S->wake_fd[0], .events = POLLIN}};
    pthread_sigmask(SIG_UNBLOCK, stop, NULL);
    while (!atomic_load(&S->fatal)) {
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            break;
        if (pf[0].revents & POLLIN) {
            fprintf(stderr, "tower serve: stopping (signal)\n");
            return 0;
        }
    }
    return atomic_load(&S->fatal) ? 1 : 0;
}

int tw_serve_main(int argc, char **argv)
{
    static tw_server S; /* one per process: the threads hold pointers into it */
    int rc = parse_args(argc, argv, &S.opt);
    if (rc)
        return rc < 0 ? 0 : rc;
    S.started = tw_now_wall();
    pthread_mutex_init(&S.change_mu, NULL);
    tw_cond_init_mono(&S.change_cv);
    ssize_t n = readlink("/proc/self/exe", S.self, sizeof S.self - 1);
    S.self[n > 0 ? n : 0] = 0;
    sigset_t stop_signals;
    signal(SIGPIPE, SIG_IGN);
    tw_error err;
    tw_error_clear(&err);
    int port = 0;
    if (catch_stop_signals(&stop_signals) != 0 || pipe2(S.wake_fd, O_CLOEXEC) != 0) {
        perror("tower serve");
        return 1;
    }
    if (start(&S, &port, &err) != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        tw_log("tower serve: %s", msg);
        stop(&S);
        return err.status == TW_ERR_INVALID || err.status == TW_ERR_UNSUPPORTED ? 2 : 1;
    }
    atomic_store(&S.port, port);
    char url[PATH_MAX];
    tw_server_url(&S, url, sizeof url);
    printf("{\"listening\": \"%s\"}\n", url);
    fflush(stdout);
    tw_log("tower serve: listening on %s (port %d), data in %s", S.opt.listen, port, S.data);
    rc = wait_for_stop(&S, &stop_signals);
    stop(&S);
    return rc;
}
