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
#include <poll.h>
#include <signal.h>
#include <stddef.h>
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
#include "options.h"
#include "predict_cache.h"
#include "scalars_cache.h"
#include "runs.h"
#include "scheduler.h"
#include "sweeps.h"
#include "store.h"

#ifndef NFS_SUPER_MAGIC
#define NFS_SUPER_MAGIC 0x6969
#endif

#define OPT(field) .offset = offsetof(tw_serve_options, field)

static const tw_opt OPTIONS[] = {
    {.name = "listen", .kind = TW_OPT_STRING, OPT(listen), .arg = "HOST:PORT",
     .help = "address to serve on (default 127.0.0.1:8080; port 0 = any free port)"},
    {.name = "data", .kind = TW_OPT_STRING, OPT(data), .arg = "DIR", .help = "data folder (default tower-data)"},
    {.name = "token", .kind = TW_OPT_STRING, OPT(token), .arg = "TOKEN",
     .help = "bearer token required by POST and DELETE (default $TOWER_TOKEN)"},
    {.name = "insecure", .kind = TW_OPT_FLAG, OPT(insecure),
     .help = "allow a non-loopback --listen without a token"},
    {.name = "no-demo", .kind = TW_OPT_CLEAR, OPT(demo),
     .help = "do not register Fashion-MNIST and queue the seed MLP on a new folder"},
    {.name = "max-upload", .kind = TW_OPT_BYTES, OPT(max_upload), .arg = "BYTES", .min = 1, .max = 1e15,
     .help = "cap on an upload body (default 8 GiB)"},
    {.name = "max-dataset", .kind = TW_OPT_BYTES, OPT(max_dataset), .arg = "BYTES", .min = 1, .max = 1e15,
     .help = "cap on the decompressed bytes of an uploaded file (default 16 GiB)"},
    {.name = "min-free", .kind = TW_OPT_BYTES, OPT(min_free), .arg = "BYTES", .min = 0, .max = 1e18,
     .help = "refuse new uploads and runs (507) below this much free disk (256 MiB)"},
    {.name = "conn-limit", .kind = TW_OPT_INT, OPT(conn_limit), .arg = "N", .min = 2, .max = 10000,
     .help = "open connections (default 256)"},
    {.name = "per-ip-limit", .kind = TW_OPT_INT, OPT(per_ip_limit), .arg = "N", .min = 1, .max = 10000,
     .help = "open connections per client address (default 64)"},
    {.name = "conn-timeout", .kind = TW_OPT_INT, OPT(conn_timeout), .arg = "S", .min = 1, .max = 86400,
     .help = "seconds of silence before a connection is closed (default 30)"},
    {.name = "header-timeout", .kind = TW_OPT_INT, OPT(header_timeout), .arg = "S", .min = 1, .max = 3600,
     .help = "seconds for a request's headers to arrive (default 10); a body gets as\n"
             "long, plus a second per --body-min-rate bytes received"},
    {.name = "body-min-rate", .kind = TW_OPT_DOUBLE, OPT(body_min_rate), .arg = "BYTES", .min = 1, .max = 1e9,
     .help = "the slowest a request body may arrive on average (default 1000/s)"},
    {.name = "sse-limit", .kind = TW_OPT_INT, OPT(sse_limit), .arg = "N", .min = 1, .max = 10000,
     .help = "open event streams per client address, below --per-ip-limit (default:\n"
             "a quarter of it, 16)"},
    {.name = "origin", .kind = TW_OPT_STRING, OPT(origin), .arg = "URL",
     .help = "another origin whose pages may change things (e.g. a proxy's https://\n"
             "address); the server's own origin always may, other origins never"},
    {.name = "tensorboard-url", .kind = TW_OPT_STRING, OPT(tensorboard_url), .arg = "URL",
     .help = "a TensorBoard serving DIR/runs: each run links to it (http[s]://...)"},
    {.name = "heartbeat-timeout", .kind = TW_OPT_DOUBLE, OPT(heartbeat_timeout), .arg = "S", .min = 0.1,
     .max = 1e6, .help = "seconds without a progress line before a run is killed (default 300)"},
    {.name = "grace", .kind = TW_OPT_DOUBLE, OPT(grace), .arg = "S", .min = 0, .max = 3600,
     .help = "seconds between SIGTERM and SIGKILL of a run (default 30)"},
    {.name = "backoff", .kind = TW_OPT_DOUBLE, OPT(backoff_base), .arg = "S", .min = 0, .max = 86400,
     .help = "first retry delay, doubled per restart (default 10)"},
    {.name = "backoff-cap", .kind = TW_OPT_DOUBLE, OPT(backoff_cap), .arg = "S", .min = 0, .max = 86400,
     .help = "longest retry delay (default 300)"},
    {.name = "max-restarts", .kind = TW_OPT_INT, OPT(max_restarts), .arg = "N", .min = 0, .max = 100,
     .help = "retries of a run that does not say (default 3)"},
    {.name = "trainer", .kind = TW_OPT_STRING, OPT(trainer), .arg = "PATH",
     .help = "program run for each run (default: this binary's `train`)"},
    {.name = "launcher", .kind = TW_OPT_STRING, OPT(launcher), .arg = "'TEMPLATE'",
     .help = "how a run of \"processes\" > 1 starts, split at spaces (no shell):\n"
             "{processes}, {hosts} (inside [...], kept when the run names hosts),\n"
             "{trainer}; Slurm: 'srun --ntasks={processes} {trainer}' (docs/scale-out.md).\n"
             "Default: '" TW_LAUNCH_DEFAULT "'"},
    {.name = "memory-limit", .kind = TW_OPT_BYTES, OPT(memory_limit), .arg = "BYTES", .min = 1, .max = 1e18,
     .help = "memory a run's device has, for the 400 on a model too large for it\n"
             "(default: the CPU's RAM capped by the cgroup limit)"},
    {.name = "input-memory", .kind = TW_OPT_BYTES, OPT(input_memory), .arg = "BYTES", .min = 1, .max = 1e18,
     .help = "memory a run's dataset may take decoded before it is streamed instead,\n"
             "unless its config sets input_memory_bytes (default 2 GiB)"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower serve",
    .usage = "[--listen HOST:PORT] [--data DIR] [--token TOKEN] [options]",
    .about = "Runs the training service: the REST API (/api/v1), the status page (/), Prometheus metrics\n"
             "(/metrics). State lives in DIR/tower.db; datasets in DIR/datasets, runs in DIR/runs\n"
             "(tensorboard --logdir DIR/runs shows them). BYTES take a K, M, G or T suffix (powers of 1024).\n",
    .opts = OPTIONS,
    .logv = tw_logv, /* a value is echoed with its control characters made visible */
};

/* 1 when s is an origin as browsers send it: a scheme, "://" and a host with an optional port. */
static int valid_origin(const char *s)
{
    const char *host = !strncmp(s, "http://", 7) ? s + 7 : !strncmp(s, "https://", 8) ? s + 8 : NULL;
    return host && *host && strlen(host) < 256 && !strpbrk(host, "/?#@ \t");
}

/* The options' values together: the token, the two URLs, the event streams' limit. */
static int check_options(tw_serve_options *o)
{
    if (o->token && !*o->token)
        return tw_options_error(&COMMAND, "the token is empty");
    if (o->origin && !valid_origin(o->origin))
        return tw_options_error(&COMMAND, "--origin needs http://HOST[:PORT] or https://HOST[:PORT], got '%s'",
                                o->origin);
    if (o->tensorboard_url && strncmp(o->tensorboard_url, "http://", 7) && strncmp(o->tensorboard_url, "https://", 8))
        return tw_options_error(&COMMAND, "--tensorboard-url needs an http:// or https:// URL, got '%s'",
                                o->tensorboard_url);
    if (!o->sse_limit) /* not given: a quarter of the per-address limit */
        o->sse_limit = o->per_ip_limit >= 8 ? o->per_ip_limit / 4 : 1;
    else if (o->sse_limit >= o->per_ip_limit)
        return tw_options_error(&COMMAND, "--sse-limit (%u) must be below --per-ip-limit (%u), so that event "
                                "streams leave room for other requests", o->sse_limit, o->per_ip_limit);
    return TW_OPT_GO;
}

/* Parses the command line into *o (the defaults first); TW_OPT_GO to go on, else the exit status. */
static int parse_args(int argc, char **argv, tw_serve_options *o)
{
    tw_serve_options_default(o);
    o->token = getenv("TOWER_TOKEN");
    int nargs, rc = tw_options_parse(&COMMAND, o, argc, argv, &nargs);
    return rc == TW_OPT_GO ? check_options(o) : rc;
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
    if (rc != TW_OPT_GO)
        return rc;
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
