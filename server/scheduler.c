/* scheduler.c — the supervisor thread: queue, spawn, read, watch, kill, classify (see scheduler.h).
 *
 * One thread owns every child: it polls their stdout/stderr pipes and a wake pipe, so no lock is held
 * while a child is slow, and the process that forks (this thread) lives as long as the children (the
 * kernel's parent-death signal is tied to the forking thread). The mutex guards the child table against
 * the HTTP threads (cancel, devices, rates).
 *
 * A run is its process group, not its first process (docs/reliability.md rule 4: a run is over only when its whole group
 * is gone). The child is a group leader; the server is a child subreaper (PR_SET_CHILD_SUBREAPER), so a
 * group member orphaned by its parent's death, however deeply forked, becomes the server's child. When
 * the leader exits, SIGKILL goes to the rest of its group at once (while the leader's zombie still holds
 * the group's number), and the run keeps its devices until every member is gone (kill(-pgid, 0) says
 * ESRCH: the zombies reaped too); then what its pipes hold is read and the run is settled. This thread is
 * the only one in the server that forks, so it reaps every child of the process (waitid(P_ALL)): a
 * process that left its run's group (setsid, setpgid) is out of the run's reach, but its zombie is reaped.
 * Cancel, timeout, deadline and shutdown signal the whole group (SIGTERM, SIGKILL after the grace).
 *
 * A run of several processes (launch.h) starts its launcher (mpirun, srun) in a session of its own
 * instead: mpirun moves each local rank into a process group of its own, but never out of the session,
 * so such a run's group is its session: signals go to the leader's group and to every process of the
 * session (/proc; a SIGTERM to the ranks alone: signal_group), and the run is over when both are empty.
 * The launcher's environment gets TW_LAUNCH_SIGKILL_ENV set to the grace, so a SIGTERM that does reach
 * mpirun does not make it SIGKILL the ranks one second later, before they checkpointed. */
#define _GNU_SOURCE
#include "scheduler.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "datafs.h"
#include "devices.h"
#include "hparams.h"
#include "run_hparams.h"
#include "launch.h"
#include "logtext.h"
#include "store.h"
#include "memcg.h"
#include "usage.h"
#include "checkpoint.h"
#include "child.h"
#include "evaluation.h"

extern char **environ;

enum {
    MAX_CHILDREN = TW_MAX_DEVICES,
    LINE_CAP = 64 * 1024, /* a longer line is cut there */
    OUT = 0,
    ERR = 1,
};

static const double PROGRESS_EVERY = 1.0; /* seconds between progress writes per run */
static const char SHUTDOWN[] = "shutdown"; /* the kill reason of the children of a stopping server */
static const double USAGE_EVERY = 1.0;    /* seconds between samples of a run's CPU, memory and GPUs */

typedef struct {
    char buf[LINE_CAP];
    size_t len;
    int fd;        /* -1 after EOF */
    int dropping;  /* inside an over-long line */
} pipe_in;

typedef struct {
    char id[TW_ID_BYTES];
    char folder[TW_RUN_FOLDER_BYTES]; /* its folder under DATA/runs (server.h) */
    pid_t pid;
    pipe_in in[2];           /* stdout (JSON lines), stderr (text) */
    int log_fd;              /* DIR/runs/<folder>/log, append */
    int exited, wstatus;     /* the leader was reaped, with this status */
    int group_gone;          /* no process of the group is left, zombies included */
    double last_line;        /* monotonic time of the last line */
    double term_at;          /* when SIGTERM went out (0: not yet) */
    int killed;              /* SIGKILL went out */
    int cancel;              /* the user asked */
    const char *kill_reason; /* "timeout", "deadline", SHUTDOWN or NULL */
    double deadline;         /* monotonic; 0 = none */
    int restarts, max_restarts;
    int attempt;             /* this start's number among the run's attempts (1, 2, ...) */
    unsigned devices;        /* bit mask of device indices */
    int64_t step, steps;
    json_t *metrics;         /* latest values by key (owned) */
    double eta_s, rate, rate_t;
    int64_t rate_step;
    int dirty;
    double saved_at;
    int64_t saved_step;      /* the step of the last progress write */
    char final_status[16];   /* "completed" / "cancelled" from the last status line */
    char last_error[600];    /* the last error line the child printed, else its last stderr line */
    int json_error;          /* last_error came from a JSON error line (it wins over stderr) */
    char *eval_out;          /* an evaluation job's child (`tower evaluate`): its --out file; NULL: a run */
    int processes;           /* > 1: started through the launcher, in a session of its own (launch.h) */
    json_t *hosts;           /* the run's host list for the launcher (owned; empty: none) */
    tw_usage usage;          /* what its processes use (usage.h), sampled every USAGE_EVERY */
    tw_memcg memcg;          /* its memory cgroup, and the OOM kills counted there before it started */
    long long oom_kills;
    int oom;                 /* it died of the kernel's OOM killer (finish) */
} child;

struct tw_scheduler {
    tw_server *S;
    pthread_t thread;
    pthread_mutex_t mu;
    int wake[2];
    int stopping;
    tw_device dev[TW_MAX_DEVICES];
    int n_dev, gpus;
    child *kids[MAX_CHILDREN];
    int n_kids;
};

/* ================================ small helpers ================================ */

static void wake(tw_scheduler *s)
{
    char b = 1;
    ssize_t n = write(s->wake[1], &b, 1);
    (void)n; /* a full pipe already means "wake up" */
}

void tw_scheduler_wake(tw_scheduler *s) { wake(s); }

/* A store failure the supervisor cannot answer to anyone: logged (a fatal one already stopped the server
 * through the store's hook). */
static void log_store_error(const tw_error *err)
{
    tw_log("tower serve: %s", err->message);
}

/* Appends text[0..n) and a newline to the run's log, control characters escaped (logtext.h): one line
 * of the child's output, or the server's own "== ... ==" line, is always one line of the log. A log that
 * cannot be written loses lines, never the run. */
static void log_line(child *c, const char *text, size_t n)
{
    enum { CHUNK = 1024 };
    char out[CHUNK * TW_LOG_ESCAPE_MAX + 1];
    for (size_t at = 0; c->log_fd >= 0 && at < n; at += CHUNK) {
        size_t w = tw_log_escape(text + at, n - at < CHUNK ? n - at : CHUNK, out, sizeof out);
        ssize_t r = write(c->log_fd, out, w);
        (void)r;
    }
    ssize_t r = c->log_fd >= 0 ? write(c->log_fd, "\n", 1) : 0;
    (void)r;
}

/* {"code": code, "message": msg} as new JSON text (caller frees). */
static char *error_text(const char *code, const char *msg)
{
    json_t *e = json_pack("{s:s, s:s}", "code", code, "message", msg);
    char *t = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    return t;
}

/* ================================ lines from the child ================================ */

static void update_rate(child *c, double now)
{
    if (c->rate_t > 0 && now > c->rate_t + 0.5) {
        double r = (double)(c->step - c->rate_step) / (now - c->rate_t);
        c->rate = c->rate > 0 ? 0.5 * c->rate + 0.5 * r : r;
    }
    if (c->rate_t == 0 || now > c->rate_t + 0.5) {
        c->rate_t = now;
        c->rate_step = c->step;
    }
}

/* A metric the run keeps from a line (child.h): TW_CHILD_METRIC_KEYS and every eval key. */
static int is_metric(const char *key)
{
    static const char *const KEYS[] = TW_CHILD_METRIC_KEYS;
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++)
        if (!strcmp(key, KEYS[i]))
            return 1;
    return !strncmp(key, TW_CHILD_EVAL_PREFIX, strlen(TW_CHILD_EVAL_PREFIX));
}

/* One line of the child protocol (engine/child.h), read through its names. */
static void take_json_line(child *c, json_t *o, double now)
{
    json_t *v;
    if ((v = json_object_get(o, TW_CHILD_STEP)) && json_is_integer(v)) {
        c->step = json_integer_value(v);
        update_rate(c, now);
    }
    if ((v = json_object_get(o, TW_CHILD_ETA)) && json_is_number(v))
        c->eta_s = json_number_value(v);
    if ((v = json_object_get(o, TW_CHILD_STATUS)) && json_is_string(v))
        snprintf(c->final_status, sizeof c->final_status, "%s", json_string_value(v));
    json_t *err = json_object_get(o, TW_CHILD_ERROR);
    const char *msg = json_string_value(json_object_get(o, TW_CHILD_MESSAGE));
    if (json_is_string(err) || json_is_object(err)) {
        const char *code = json_is_string(err) ? json_string_value(err)
                                                : json_string_value(json_object_get(err, TW_CHILD_CODE));
        json_t *step = json_object_get(o, TW_CHILD_STEP);
        char at[40] = "";
        if (json_is_integer(step))
            snprintf(at, sizeof at, " at step %lld", (long long)json_integer_value(step));
        snprintf(c->last_error, sizeof c->last_error, "%s%s%s%s", code ? code : "error", at, msg ? ": " : "",
                 msg ? msg : "");
        c->json_error = 1;
    }
    const char *key;
    json_object_foreach(o, key, v)
        if (json_is_number(v) && is_metric(key))
            json_object_set(c->metrics, key, v);
    if ((v = json_object_get(o, TW_CHILD_WARNING)) && json_is_string(v))
        json_object_set(c->metrics, TW_CHILD_WARNING, v);
    json_object_set_new(c->metrics, "steps_per_sec", json_real(c->rate));
    c->dirty = 1;
}

static void take_line(child *c, int which, char *line, size_t n, double now)
{
    c->last_line = now;
    line[n] = 0;
    if (which == ERR) {
        if (n && !c->json_error)
            snprintf(c->last_error, sizeof c->last_error, "%s", line);
        log_line(c, line, n);
        return;
    }
    json_t *o = json_loadb(line, n, 0, NULL);
    if (json_is_object(o)) {
        if (!json_object_get(o, TW_CHILD_HEARTBEAT))
            log_line(c, line, n);
        take_json_line(c, o, now);
    }
    json_decref(o);
}

/* Takes a pipe's unfinished last line and closes the pipe. */
static void close_pipe(child *c, int which, double now)
{
    pipe_in *p = &c->in[which];
    if (p->len && !p->dropping)
        take_line(c, which, p->buf, p->len, now);
    close(p->fd);
    p->fd = -1;
}

/* Reads what a pipe has; splits lines; closes it at EOF or on an error. Returns read(2)'s result. */
static ssize_t drain(child *c, int which, double now)
{
    pipe_in *p = &c->in[which];
    ssize_t n = read(p->fd, p->buf + p->len, LINE_CAP - 1 - p->len);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            close_pipe(c, which, now);
        return n;
    }
    p->len += (size_t)n;
    size_t start = 0;
    for (size_t i = p->len - (size_t)n; i < p->len; i++)
        if (p->buf[i] == '\n') {
            if (!p->dropping)
                take_line(c, which, p->buf + start, i - start, now);
            p->dropping = 0;
            start = i + 1;
        }
    memmove(p->buf, p->buf + start, p->len - start);
    p->len -= start;
    if (p->len == LINE_CAP - 1) { /* an over-long line: keep its head, drop the rest */
        if (!p->dropping)
            take_line(c, which, p->buf, p->len, now);
        p->dropping = 1;
        p->len = 0;
    }
    return n;
}

/* ================================ spawning ================================ */

/* Removes temporary files a killed child left in its checkpoint folder (docs/reliability.md row P3), through the
 * engine, which owns the folder's layout (engine/checkpoint.h). A missing folder has none; one reached
 * through a symlink is an error (nothing outside the data folder is deleted). */
static tw_status remove_temporaries(const char *logdir, tw_error *err)
{
    char dir[PATH_MAX + 16];
    if (tw_checkpoint_dir_of(logdir, dir, sizeof dir) != 0)
        return tw_error_set(err, TW_ERR_INVALID, logdir, -1, "the checkpoint folder's path is too long");
    return tw_checkpoint_remove_temporaries(dir, err);
}

/* The child's environment: ours, with CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER set, and `extra`
 * ("NAME=VALUE", may be NULL) added. Caller frees. */
static char **child_env(const char *visible, char *extra)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) && strncmp(environ[i], "CUDA_DEVICE_ORDER=", 18))
            env[k++] = environ[i];
    static char order[] = "CUDA_DEVICE_ORDER=PCI_BUS_ID";
    static __thread char vis[128];
    snprintf(vis, sizeof vis, "CUDA_VISIBLE_DEVICES=%s", visible);
    env[k++] = order;
    env[k++] = vis;
    env[k] = extra;
    return env;
}

/* In the child between fork and exec: only async-signal-safe calls. own_session: setsid (a launched
 * run), else a process group of its own. */
static void exec_child(char **argv, char **env, int out_w, int err_w, pid_t parent, int own_session)
{
    if (own_session)
        setsid();
    else
        setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        _exit(127);
    close_range(3, ~0U, 0); /* no database, socket or other child's pipe leaks into the trainer */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execve(argv[0], argv, env);
    _exit(127);
}

/* The run's status page (static/app.js routes #/runs/ID), for TensorBoard's HParams link: 0, or -1
 * before the server listens. */
static int monitor_url(tw_server *S, const char *id, char *buf, size_t size)
{
    char base[PATH_MAX];
    if (tw_server_url(S, base, sizeof base) != 0)
        return -1;
    int n = snprintf(buf, size, "%s/#/runs/%s", base, id);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

static tw_status fork_child(child *c, char **argv, const char *visible, char *extra_env, const char *logpath,
                            tw_error *why);

/* Starts trainer (argv) through the server's launcher for a run of c->processes > 1 (launch.h). */
static tw_status spawn_launched(tw_scheduler *s, child *c, char **trainer, const char *visible,
                                const char *logpath, tw_error *why)
{
    char **argv;
    TW_TRY(tw_launch_argv(s->S->launcher, c->processes, c->hosts, trainer, &argv, why));
    static __thread char sigkill[64];
    double grace = ceil(s->S->opt.grace);
    snprintf(sigkill, sizeof sigkill, "%s=%.0f", TW_LAUNCH_SIGKILL_ENV, grace < 1 ? 1 : grace);
    tw_status st = fork_child(c, argv, visible, sigkill, logpath, why);
    free(argv);
    return st;
}

/* The trainer's --stop-within (two thirds of the grace, at least 1 s: it ends itself before the SIGKILL,
 * engine/train_main.c) and --input-memory (the serve default; 2 GiB, the trainer's own, when unset). */
static void trainer_limits(const tw_server *S, tw_child_train_args *a)
{
    double w = S->opt.grace * 2 / 3;
    a->stop_within_s = (unsigned)(w < 1 ? 1 : w > 3600 ? 3600 : w + 0.5);
    a->input_memory = (unsigned long long)(S->opt.input_memory ? S->opt.input_memory : 2ull << 30);
}

/* Forks the trainer for run id, confined to the data folder (--data-root). Returns TW_OK, or an error in
 * *why naming the file (a symlink met under the data folder: the run's `log` is never written through). */
static tw_status spawn(tw_scheduler *s, child *c, const char *visible, int gpu, tw_error *why)
{
    tw_server *S = s->S;
    char logdir[PATH_MAX], config[PATH_MAX], logpath[PATH_MAX];
    if (tw_run_dir(S, c->folder, logdir, sizeof logdir) != 0 ||
        tw_run_path(S, c->folder, TW_RUN_CONFIG, config, sizeof config) != 0 ||
        tw_run_path(S, c->folder, TW_RUN_LOG, logpath, sizeof logpath) != 0)
        return tw_error_set(why, TW_ERR_INVALID, c->id, -1, "the run folder's path is too long");
    TW_TRY(remove_temporaries(logdir, why));
    char monitor[PATH_MAX], text[2][24], *argv[TW_CHILD_TRAIN_ARGV];
    tw_child_train_args a = {.trainer = S->opt.trainer ? S->opt.trainer : S->self, .config = config, .logdir = logdir,
                             .backend = gpu ? "cuda" : "cpu", .data_root = S->data,
                             .monitor_url = monitor_url(S, c->id, monitor, sizeof monitor) == 0 ? monitor : NULL};
    trainer_limits(S, &a);
    tw_child_train_argv(&a, text, argv);
    return c->processes > 1 ? spawn_launched(s, c, argv, visible, logpath, why)
                            : fork_child(c, argv, visible, NULL, logpath, why);
}

/* Opens the child's log (append), forks and execs argv in a process group of its own (a session for a
 * launched run) with its stdout and stderr on c's pipes and extra_env (may be NULL) in its environment. */
static tw_status fork_child(child *c, char **argv, const char *visible, char *extra_env, const char *logpath,
                            tw_error *why)
{
    c->log_fd = tw_fs_open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (c->log_fd < 0)
        return tw_fs_error(why, logpath, "cannot open the run's log");
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    char **env = child_env(visible, extra_env);
    if (!env || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
        goto fail;
    pid_t parent = getpid();
    tw_memcg_of(parent, &c->memcg); /* the child starts in the server's group: its count before the child */
    c->oom_kills = tw_memcg_oom_kills(&c->memcg);
    c->pid = fork();
    if (c->pid == 0)
        exec_child(argv, env, out[1], err[1], parent, c->processes > 1);
    if (c->pid < 0)
        goto fail;
    if (c->processes <= 1) /* (a session leader makes its own group: setsid would fail after this) */
        setpgid(c->pid, c->pid);
    close(out[1]);
    close(err[1]);
    c->in[OUT].fd = out[0];
    c->in[ERR].fd = err[0];
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    free(env);
    return TW_OK;
fail:;
    tw_status st = tw_error_errno(why, NULL, "cannot start the trainer");
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    if (c->log_fd >= 0)
        close(c->log_fd);
    c->log_fd = -1;
    free(env);
    return st;
}

/* ================================ starting runs ================================ */

static unsigned busy_mask(const tw_scheduler *s)
{
    unsigned m = 0;
    for (int i = 0; i < s->n_kids; i++)
        m |= s->kids[i]->devices;
    return m;
}

/* Picks `towers` free devices (the CPU counts as one for any number of towers). 0: none free. */
static unsigned pick_devices(const tw_scheduler *s, int towers)
{
    unsigned busy = busy_mask(s), mask = 0;
    int want = s->gpus ? towers : 1;
    for (int i = 0; i < s->n_dev && want > 0; i++)
        if (!(busy & (1u << i))) {
            mask |= 1u << i;
            want--;
        }
    return want == 0 ? mask : 0;
}

static void devices_text(const tw_scheduler *s, unsigned mask, char *ids, size_t ids_size, char *visible,
                         size_t vis_size)
{
    json_t *arr = json_array();
    size_t v = 0;
    visible[0] = 0;
    for (int i = 0; i < s->n_dev; i++)
        if (mask & (1u << i)) {
            json_array_append_new(arr, json_string(s->dev[i].id));
            if (s->dev[i].index >= 0)
                v += (size_t)snprintf(visible + v, v < vis_size ? vis_size - v : 0, "%s%d", v ? "," : "",
                                      s->dev[i].index);
        }
    char *t = json_dumps(arr, JSON_COMPACT);
    snprintf(ids, ids_size, "%s", t ? t : "[]");
    free(t);
    json_decref(arr);
}

static void fail_now(tw_scheduler *s, const char *id, const char *reason, const char *code, const char *msg)
{
    tw_error err;
    char *e = error_text(code, msg);
    if (tw_store_run_finished(s->S->store, id, TW_RUN_FAILED, reason, e, tw_now_wall(), &err) != TW_OK)
        log_store_error(&err);
    free(e);
    tw_server_changed(s->S);
}

/* A queued run whose deadline passed before it could run again. Returns 1 when it was failed. */
static int deadline_passed(tw_scheduler *s, json_t *run)
{
    double limit = json_number_value(json_object_get(run, "deadline_s"));
    json_t *first = json_object_get(run, "first_started");
    if (limit <= 0 || !json_is_number(first) || tw_now_wall() < json_number_value(first) + limit)
        return 0;
    fail_now(s, json_string_value(json_object_get(run, "id")), "deadline", "DEADLINE_EXCEEDED",
             "the run's deadline passed");
    return 1;
}

/* A new attempt starts from the metrics the run has (a resume or retry keeps the last evaluation until it
 * evaluates again; an attempt with nothing left to train prints none), less the old attempt's rate.
 * Returns a new reference, or NULL when out of memory. */
static json_t *start_metrics(json_t *run)
{
    json_t *had = json_object_get(run, "metrics");
    json_t *m = json_is_object(had) ? json_deep_copy(had) : json_object();
    if (m)
        json_object_del(m, "steps_per_sec");
    return m;
}

static child *child_new(json_t *run, unsigned mask)
{
    child *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(run, "id")));
    snprintf(c->folder, sizeof c->folder, "%s", tw_run_folder(run));
    c->in[OUT].fd = c->in[ERR].fd = c->log_fd = -1;
    c->devices = mask;
    c->steps = json_integer_value(json_object_get(run, "steps"));
    c->step = json_integer_value(json_object_get(run, "step"));
    c->restarts = (int)json_integer_value(json_object_get(run, "restarts"));
    c->attempt = (int)json_array_size(json_object_get(run, "attempts")) + 1;
    c->max_restarts = (int)json_integer_value(json_object_get(run, "max_restarts"));
    c->processes = (int)json_integer_value(json_object_get(run, "processes"));
    c->hosts = json_incref(json_object_get(run, "hosts"));
    if (!(c->metrics = start_metrics(run))) {
        json_decref(c->hosts);
        free(c);
        return NULL;
    }
    double limit = json_number_value(json_object_get(run, "deadline_s"));
    json_t *first = json_object_get(run, "first_started");
    double since = json_is_number(first) ? json_number_value(first) : tw_now_wall();
    if (limit > 0)
        c->deadline = tw_now_mono() + (since + limit - tw_now_wall());
    c->last_line = tw_now_mono();
    return c;
}

/* A run submitted while its dataset converted gets its config completed (S->complete_run: runs.h's
 * tw_runs_complete) before it starts; one that cannot start (the conversion failed, or the config does not
 * fit the converted dataset) fails now. Returns 1 when it was failed. */
static int cannot_start(tw_scheduler *s, json_t *run)
{
    tw_error err;
    const char *reason = "crashed";
    if (!s->S->complete_run || s->S->complete_run(s->S, run, &reason, &err) == TW_OK)
        return 0;
    char msg[1200];
    tw_error_format(&err, msg, sizeof msg);
    tw_log("tower serve: run %s: %s", json_string_value(json_object_get(run, "id")), msg);
    if (err.status != TW_ERR_INVALID)
        reason = "crashed";
    fail_now(s, json_string_value(json_object_get(run, "id")), reason,
             err.status == TW_ERR_INVALID ? "INVALID_ARGUMENT" : "INTERNAL", msg);
    return 1;
}

/* Starts the next queued run if its devices are free. Returns 1 when it started or disposed of one. */
static int start_next(tw_scheduler *s)
{
    if (s->n_kids == MAX_CHILDREN)
        return 0;
    json_t *run;
    tw_error rerr;
    tw_status got = tw_store_run_next(s->S->store, tw_now_wall(), &run, &rerr);
    if (got != TW_OK && got != TW_END)
        log_store_error(&rerr); /* the next tick reads again */
    if (got != TW_OK)
        return 0;
    int done = 1;
    unsigned mask;
    if (deadline_passed(s, run)) {
    } else if (!(mask = pick_devices(s, tw_launch_local_towers((int)json_integer_value(json_object_get(run, "towers")),
                                                               (int)json_integer_value(json_object_get(run, "processes")),
                                                               json_object_get(run, "hosts"))))) {
        done = 0; /* FIFO: the head waits for its devices */
    } else if (cannot_start(s, run)) {
    } else {
        child *c = child_new(run, mask);
        char ids[256], visible[128];
        devices_text(s, mask, ids, sizeof ids, visible, sizeof visible);
        tw_error err;
        if (!c || spawn(s, c, visible, s->gpus > 0, &err) != TW_OK) {
            char msg[1200];
            if (!c)
                tw_error_errno(&err, NULL, "cannot start the trainer");
            tw_error_format(&err, msg, sizeof msg);
            tw_log("tower serve: run %s: %s", json_string_value(json_object_get(run, "id")), msg);
            fail_now(s, json_string_value(json_object_get(run, "id")), "crashed", "SPAWN_FAILED", msg);
            if (c) {
                json_decref(c->metrics);
                json_decref(c->hosts);
            }
            free(c);
        } else {
            s->kids[s->n_kids++] = c;
            if (tw_store_run_started(s->S->store, c->id, ids, tw_now_wall(), &err) != TW_OK)
                log_store_error(&err);
            char head[128];
            int n = snprintf(head, sizeof head, "== attempt %d: pid %d ==", c->attempt, (int)c->pid);
            log_line(c, head, (size_t)n);
            tw_server_changed(s->S);
        }
    }
    json_decref(run);
    return done;
}

/* ================================ watching and finishing ================================ */

/* sig to the run's group and, for a launched run, to every process of its session (its ranks, in groups
 * of their own); to the leader itself while it has not made its session yet (fork to setsid). A SIGTERM
 * goes to the ranks alone when the session has any: they checkpoint and exit, and mpirun follows with
 * their last lines forwarded, where a SIGTERM of its own makes it abort the job and hold their output
 * until it is killed. A launcher whose ranks run elsewhere (srun) gets it, to forward. */
static void signal_group(child *c, int sig)
{
    if (c->pid <= 0)
        return;
    if (c->processes > 1 && tw_launch_session_signal(c->pid, sig) > 0 && sig == SIGTERM)
        return;
    if (kill(-c->pid, sig) != 0 && errno == ESRCH && c->processes > 1 && !c->exited)
        kill(c->pid, sig);
}

/* 1 when no process of the run is left, zombies included: its group, and for a launched run its session. */
static int group_gone(const child *c)
{
    return kill(-c->pid, 0) != 0 && errno == ESRCH && (c->processes <= 1 || !tw_launch_session_signal(c->pid, 0));
}

static void terminate(child *c, const char *reason, double now)
{
    if (c->term_at > 0)
        return;
    if (reason && !c->kill_reason)
        c->kill_reason = reason;
    c->term_at = now;
    signal_group(c, SIGTERM);
}

static void watch(tw_scheduler *s, child *c, double now)
{
    const tw_serve_options *o = &s->S->opt;
    if (c->exited)
        return;
    if (c->cancel)
        terminate(c, NULL, now);
    if (now - c->last_line > o->heartbeat_timeout)
        terminate(c, "timeout", now);
    if (c->deadline > 0 && now > c->deadline)
        terminate(c, "deadline", now);
    if (c->term_at > 0 && !c->killed && now - c->term_at > o->grace) {
        c->killed = 1;
        signal_group(c, SIGKILL);
    }
}

/* Samples what a running trainer's processes use (not an evaluation job's), every USAGE_EVERY. */
static void sample_usage(tw_scheduler *s, child *c, double now)
{
    if (c->eval_out || c->exited || c->pid <= 0 || now - c->usage.at < USAGE_EVERY)
        return;
    int gpus[32], n = 0;
    for (int i = 0; i < s->n_dev && n < 32; i++)
        if (c->devices & (1u << i) && s->dev[i].index >= 0)
            gpus[n++] = s->dev[i].index;
    tw_usage_sample(&c->usage, c->pid, gpus, n, now);
}

static void save_progress(tw_scheduler *s, child *c, double now)
{
    if (c->eval_out) /* an evaluation job has no progress row */
        return;
    int first_step = c->step > 0 && c->saved_step == 0; /* the first step is shown at once */
    if (!c->dirty || (now - c->saved_at < PROGRESS_EVERY && !first_step))
        return;
    char *m = json_dumps(c->metrics, JSON_COMPACT);
    tw_error err;
    if (tw_store_run_progress(s->S->store, c->id, c->step, m, c->eta_s, &err) != TW_OK)
        log_store_error(&err);
    free(m);
    c->dirty = 0;
    c->saved_at = now;
    c->saved_step = c->step;
    tw_server_changed(s->S);
}

typedef struct {
    tw_run_state state; /* the final state, or TW_RUN_QUEUED: retriable (requeued while restarts remain) */
    const char *reason;
    const char *code;
} outcome;

/* What an exit means (docs/reliability.md rule 3: deterministic failures fail fast, infrastructure ones retry). */
static outcome classify(const child *c)
{
    int clean = !WIFSIGNALED(c->wstatus) && WEXITSTATUS(c->wstatus) == 0;
    if (c->cancel)
        return (outcome){TW_RUN_CANCELLED, NULL, NULL};
    if (c->oom) { /* not retried: the next attempt would meet the same limit */
        const tw_child_failure *f = tw_child_failure_of(TW_EXIT_OOM);
        return (outcome){TW_RUN_FAILED, f->reason, f->code};
    }
    if (clean && !strcmp(c->final_status, TW_CHILD_COMPLETED)) /* done, whatever asked it to stop meanwhile */
        return (outcome){TW_RUN_SUCCEEDED, NULL, NULL};
    if (c->kill_reason && !strcmp(c->kill_reason, "deadline"))
        return (outcome){TW_RUN_FAILED, "deadline", "DEADLINE_EXCEEDED"};
    if (c->kill_reason && !strcmp(c->kill_reason, SHUTDOWN))
        return (outcome){TW_RUN_QUEUED, SHUTDOWN, NULL}; /* not the run's failure: no restart counted */
    if (c->kill_reason)
        return (outcome){TW_RUN_QUEUED, "timeout", "HEARTBEAT_TIMEOUT"};
    if (clean)
        return (outcome){TW_RUN_QUEUED, "interrupted", "INTERRUPTED"}; /* stopped by someone else's SIGTERM */
    const tw_child_failure *f = tw_child_failure_of(WIFSIGNALED(c->wstatus) ? -1 : WEXITSTATUS(c->wstatus));
    return (outcome){f->final ? TW_RUN_FAILED : TW_RUN_QUEUED, f->reason, f->code}; /* a signal: a crash */
}

/* Whether the child died of a SIGKILL the server did not send, counted by its memory cgroup as an OOM
 * kill since it started (or recorded by the kernel's log). */
static int killed_for_memory(const child *c)
{
    if (c->cancel || c->kill_reason || !WIFSIGNALED(c->wstatus) || WTERMSIG(c->wstatus) != SIGKILL)
        return 0;
    long long kills = tw_memcg_oom_kills(&c->memcg);
    return (c->oom_kills >= 0 && kills > c->oom_kills) || tw_memcg_kernel_killed(c->pid);
}

/* What the kernel's OOM killer ended: the group, its limit and its peak. */
static void describe_oom(const child *c, char *buf, size_t size)
{
    long long limit = tw_memcg_limit(&c->memcg), peak = tw_memcg_peak(&c->memcg);
    char l[48] = "none (the machine's memory ran out)", p[48] = "unknown";
    if (limit >= 0)
        snprintf(l, sizeof l, "%.1f MiB", (double)limit / (1024.0 * 1024.0));
    if (peak >= 0)
        snprintf(p, sizeof p, "%.1f MiB", (double)peak / (1024.0 * 1024.0));
    snprintf(buf, size, "killed by the kernel's OOM killer (signal 9): memory cgroup %s, limit %s, peak %s; give "
             "the run less to hold (a smaller batch_size or model, a lower --input-memory) or the server more memory",
             c->memcg.dir[0] ? c->memcg.dir : "unknown", l, p);
}

static void describe_exit(const child *c, double heartbeat_timeout, char *buf, size_t size)
{
    if (c->oom)
        describe_oom(c, buf, size);
    else if (c->kill_reason && !strcmp(c->kill_reason, "timeout"))
        snprintf(buf, size, "no progress line for %.0f s: killed", heartbeat_timeout);
    else if (WIFSIGNALED(c->wstatus))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(c->wstatus), strsignal(WTERMSIG(c->wstatus)));
    else
        snprintf(buf, size, "exit status %d", WEXITSTATUS(c->wstatus));
}

/* TensorBoard's session (engine/run_hparams.h: start and end info, FAILURE, a row of its own) for the
 * terminal states only the server knows: a deadline, or giving up after restarts. The trainer writes the
 * others (completed, diverged, bad data, bad config, out of memory: engine/trainer.c); a cancelled run gets
 * none (it may be resumed, and TensorBoard keeps the first start and end it reads), nor does a retry. */
static void hparams_end(tw_server *S, const child *c, outcome o)
{
    int gave_up = o.state == TW_RUN_QUEUED, deadline = o.reason && !strcmp(o.reason, "deadline");
    if (!gave_up && !deadline)
        return;
    char logdir[PATH_MAX], config[PATH_MAX], model_uri[PATH_MAX + 16], monitor[PATH_MAX];
    tw_config cfg;
    tw_run_hparams h;
    tw_error err;
    if (tw_run_dir(S, c->folder, logdir, sizeof logdir) != 0 ||
        tw_run_path(S, c->folder, TW_RUN_CONFIG, config, sizeof config) != 0)
        return;
    if (tw_config_load(config, &cfg, &err) != TW_OK) {
        log_store_error(&err);
        return;
    }
    if (tw_run_hparams_of(&cfg, &h) != 0)
        return;
    tw_run_model_uri(logdir, model_uri, sizeof model_uri);
    int linked = monitor_url(S, c->id, monitor, sizeof monitor) == 0;
    double now = tw_now_wall();
    tw_hparams_session hs = tw_run_hparams_session(&h, TW_HPARAMS_FAILURE, model_uri, linked ? monitor : NULL, now);
    if (tw_hparams_append_session(logdir, &hs, TW_HPARAMS_FAILURE, now, &err) != TW_OK)
        log_store_error(&err);
}

/* The server's closing line of a child's log, "== TEXT ==" (one line of the log, as log_line keeps it). */
static void log_closing(child *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_closing(child *c, const char *fmt, ...)
{
    char text[1400], tail[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int n = snprintf(tail, sizeof tail, "== %s ==", text);
    log_line(c, tail, (size_t)n < sizeof tail ? (size_t)n : sizeof tail - 1);
}

static void finish_evaluation(tw_scheduler *s, child *c); /* evaluation jobs: at the end of the file */

static void finish(tw_scheduler *s, child *c)
{
    if (c->eval_out) {
        finish_evaluation(s, c);
        return;
    }
    tw_server *S = s->S;
    c->oom = killed_for_memory(c);
    outcome o = classify(c);
    char how[600], msg[1300];
    if (o.reason == SHUTDOWN) {
        snprintf(msg, sizeof msg, "server stopped: the run is queued to go on when it starts again");
    } else {
        describe_exit(c, S->opt.heartbeat_timeout, how, sizeof how);
        snprintf(msg, sizeof msg, "%s%s%s", how, c->last_error[0] ? ": " : "", c->last_error);
    }
    log_closing(c, "%s", msg); /* before the store says the run ended: a reader of the ended run's log finds it */
    c->dirty = 1;
    c->saved_at = 0;
    save_progress(s, c, tw_now_mono());
    tw_error err;
    if (o.reason == SHUTDOWN) {
        if (tw_store_run_stopped(S->store, c->id, &err) < 0)
            log_store_error(&err);
        tw_server_changed(S);
        return;
    }
    tw_status st = TW_OK;
    char *e = o.code ? error_text(o.code, msg) : NULL;
    if (o.state == TW_RUN_QUEUED && c->restarts < c->max_restarts) {
        double delay = fmin(S->opt.backoff_cap, S->opt.backoff_base * pow(2.0, c->restarts));
        st = tw_store_run_requeue(S->store, c->id, o.reason, e, tw_now_wall() + delay, &err);
    } else {
        if (o.state == TW_RUN_QUEUED && c->max_restarts > 0) {
            char gave_up[1400];
            snprintf(gave_up, sizeof gave_up, "gave up after %d restarts: %s", c->restarts, msg);
            free(e);
            e = error_text(o.code, gave_up);
        }
        st = tw_store_run_finished(S->store, c->id, o.state == TW_RUN_QUEUED ? TW_RUN_FAILED : o.state, o.reason,
                                   e, tw_now_wall(), &err);
        hparams_end(S, c, o);
    }
    if (st != TW_OK)
        log_store_error(&err);
    free(e);
    tw_server_changed(S);
}

static void child_free(child *c)
{
    for (int i = 0; i < 2; i++)
        if (c->in[i].fd >= 0)
            close(c->in[i].fd);
    if (c->log_fd >= 0)
        close(c->log_fd);
    json_decref(c->metrics);
    json_decref(c->hosts);
    free(c->eval_out);
    free(c);
}

static child *find_leader(tw_scheduler *s, pid_t pid)
{
    for (int i = 0; i < s->n_kids; i++)
        if (s->kids[i]->pid == pid)
            return s->kids[i];
    return NULL;
}

/* Reaps every exited child of the process: a run's leader (its status kept; the rest of its group
 * SIGKILLed first, while the leader's zombie still holds the group's number), a group member orphaned
 * to this subreaper, or a process that left its group. */
static void reap_children(tw_scheduler *s)
{
    siginfo_t si;
    for (;;) {
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            return;
        child *c = find_leader(s, si.si_pid);
        if (c)
            signal_group(c, SIGKILL);
        int status;
        if (waitpid(si.si_pid, &status, WNOHANG) != si.si_pid)
            return;
        if (c) {
            c->wstatus = status;
            c->exited = 1;
        }
    }
}

/* Reads what the pipes of a run whose group is gone still hold, and closes them: nothing of the group
 * can write any more, and a writer that left the group does not keep the run. */
static void flush_pipes(child *c, double now)
{
    for (int w = 0; w < 2; w++) {
        while (c->in[w].fd >= 0 && drain(c, w, now) > 0) {
        }
        if (c->in[w].fd >= 0)
            close_pipe(c, w, now);
    }
}

/* Settles the runs whose leader exited and whose whole group is gone; finishes them and frees their
 * devices. An evaluation job a stopping server ended stays "running" in the store, to start again from the
 * beginning (tw_store_evals_recover). Caller holds the mutex. */
static void reap(tw_scheduler *s)
{
    reap_children(s);
    for (int i = 0; i < s->n_kids;) {
        child *c = s->kids[i];
        if (c->exited && !c->group_gone && group_gone(c))
            c->group_gone = 1;
        if (!c->group_gone) {
            i++;
            continue;
        }
        flush_pipes(c, tw_now_mono());
        if (!(s->stopping && c->eval_out))
            finish(s, c);
        child_free(c);
        s->kids[i] = s->kids[--s->n_kids];
    }
}

/* ================================ the thread ================================ */

static void poll_once(tw_scheduler *s)
{
    struct pollfd pf[1 + 2 * MAX_CHILDREN];
    child *owner[1 + 2 * MAX_CHILDREN];
    int which[1 + 2 * MAX_CHILDREN], n = 1;
    pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_kids; i++)
        for (int w = 0; w < 2; w++)
            if (s->kids[i]->in[w].fd >= 0) {
                pf[n] = (struct pollfd){.fd = s->kids[i]->in[w].fd, .events = POLLIN};
                owner[n] = s->kids[i];
                which[n++] = w;
            }
    pthread_mutex_unlock(&s->mu);
    poll(pf, (nfds_t)n, 200);
    char junk[64];
    if (pf[0].revents & POLLIN)
        while (read(s->wake[0], junk, sizeof junk) > 0) {
        }
    double now = tw_now_mono();
    pthread_mutex_lock(&s->mu);
    for (int i = 1; i < n; i++)
        if (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
            drain(owner[i], which[i], now);
    pthread_mutex_unlock(&s->mu);
}

static void start_evaluation(tw_scheduler *s); /* evaluation jobs: at the end of the file */

static void *supervise(void *arg)
{
    tw_scheduler *s = arg;
    while (1) {
        poll_once(s);
        pthread_mutex_lock(&s->mu);
        double now = tw_now_mono();
        if (s->stopping && s->n_kids == 0) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        for (int i = 0; i < s->n_kids; i++) {
            watch(s, s->kids[i], now);
            sample_usage(s, s->kids[i], now);
            save_progress(s, s->kids[i], now);
        }
        reap(s);
        while (!s->stopping && !atomic_load(&s->S->fatal) && start_next(s)) {
        }
        if (!s->stopping && !atomic_load(&s->S->fatal))
            start_evaluation(s);
        int drive = !s->stopping && !atomic_load(&s->S->fatal) && s->S->drive_sweeps;
        pthread_mutex_unlock(&s->mu);
        if (drive) /* it submits and resumes runs, which take the lock: outside it */
            s->S->drive_sweeps(s->S, tw_now_wall());
    }
    return NULL;
}

tw_status tw_scheduler_create(tw_server *S, tw_scheduler **out, tw_error *err)
{
    tw_scheduler *s = calloc(1, sizeof *s);
    if (!s)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    s->S = S;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        free(s);
        return tw_error_errno(err, NULL, "cannot make the server its runs' subreaper");
    }
    pthread_mutex_init(&s->mu, NULL);
    s->n_dev = tw_devices_detect(s->dev, TW_MAX_DEVICES);
    s->gpus = s->dev[0].index >= 0 ? s->n_dev : 0;
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(s);
        return tw_error_errno(err, NULL, "cannot create the scheduler's pipe");
    }
    if (pthread_create(&s->thread, NULL, supervise, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        free(s);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cannot start the scheduler thread");
    }
    *out = s;
    return TW_OK;
}

void tw_scheduler_destroy(tw_scheduler *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    double now = tw_now_mono();
    for (int i = 0; i < s->n_kids; i++)
        terminate(s->kids[i], SHUTDOWN, now);
    pthread_mutex_unlock(&s->mu);
    wake(s);
    pthread_join(s->thread, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static child *find(tw_scheduler *s, const char *id)
{
    for (int i = 0; i < s->n_kids; i++)
        if (!strcmp(s->kids[i]->id, id))
            return s->kids[i];
    return NULL;
}

/* Cancels the run or evaluation job id (`kind` names it in the error): its child when it runs, else the
 * queued row through cancel_queued, else TW_ERR_INVALID naming the state it has already reached. */
static tw_status cancel(tw_scheduler *s, const char *id, const char *kind,
                        int (*cancel_queued)(tw_store *, const char *, double, tw_error *), tw_store_get_fn get,
                        tw_error *err)
{
    pthread_mutex_lock(&s->mu);
    tw_status st = TW_OK;
    child *c = find(s, id);
    if (c) {
        c->cancel = 1;
    } else {
        int changed = cancel_queued(s->S->store, id, tw_now_wall(), err);
        if (changed < 0)
            st = err->status;
        else if (!changed) {
            json_t *row;
            st = get(s->S->store, id, &row, err);
            if (st == TW_OK)
                st = tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s %s has already %s", kind, id,
                                  json_string_value(json_object_get(row, "status")));
            json_decref(row);
        }
    }
    pthread_mutex_unlock(&s->mu);
    wake(s);
    if (st == TW_OK)
        tw_server_changed(s->S);
    return st;
}

tw_status tw_scheduler_cancel(tw_scheduler *s, const char *id, tw_error *err)
{
    return cancel(s, id, "run", tw_store_run_cancel_queued, tw_store_run_get, err);
}

int tw_scheduler_cancelling(tw_scheduler *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    child *c = find(s, id);
    int cancelling = c && c->cancel;
    pthread_mutex_unlock(&s->mu);
    return cancelling;
}

json_t *tw_scheduler_usage(tw_scheduler *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    json_t *all = json_object();
    for (int i = 0; i < s->n_kids; i++)
        if (!s->kids[i]->eval_out && (!id || !strcmp(s->kids[i]->id, id)))
            json_object_set_new(all, s->kids[i]->id, tw_usage_json(&s->kids[i]->usage));
    pthread_mutex_unlock(&s->mu);
    if (!id)
        return all;
    json_t *u = json_incref(json_object_get(all, id));
    json_decref(all);
    return u ? u : json_null();
}

json_t *tw_scheduler_devices(tw_scheduler *s)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_dev; i++) {
        const char *run = NULL;
        for (int k = 0; k < s->n_kids; k++)
            if (s->kids[k]->devices & (1u << i))
                run = s->kids[k]->id;
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s?}", "id", s->dev[i].id, "kind",
                                             s->dev[i].kind, "name", s->dev[i].name, "run", run));
    }
    pthread_mutex_unlock(&s->mu);
    return arr;
}

int tw_scheduler_gpu_count(const tw_scheduler *s) { return s->gpus; }

double tw_scheduler_steps_per_sec(tw_scheduler *s)
{
    double sum = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_kids; i++)
        sum += s->kids[i]->rate;
    pthread_mutex_unlock(&s->mu);
    return sum;
}

/* ================================ evaluation jobs ================================ */

/* An evaluation job (store.h: tw_store_eval_*) runs as `tower evaluate` under the same supervision as a
 * run (process group, heartbeats, cancel, kill), on the CPU, one at a time, beside the runs (it holds no
 * device); it is never retried. Its lines go to its own log; its result is the --out document, kept in
 * the job's row when it succeeded. */

static int evaluations_running(const tw_scheduler *s)
{
    int n = 0;
    for (int i = 0; i < s->n_kids; i++)
        n += s->kids[i]->eval_out != NULL;
    return n;
}

static const char *job_text(const json_t *job, const char *key)
{
    const char *v = json_string_value(json_object_get(job, key));
    return v ? v : "";
}

static tw_status spawn_evaluation(tw_scheduler *s, child *c, const json_t *row, tw_error *why)
{
    tw_server *S = s->S;
    const json_t *job = json_object_get(row, "job");
    char *argv[] = {(char *)(S->opt.trainer ? S->opt.trainer : S->self), "evaluate",
                    (char *)job_text(job, "checkpoint"), "--data", (char *)job_text(job, "data"), "--weights",
                    (char *)json_string_value(json_object_get(row, "weights")), "--out", c->eval_out,
                    "--image-feature", (char *)job_text(job, "image_feature"), "--label-feature",
                    (char *)job_text(job, "label_feature"), "--data-root", S->data, NULL};
    return fork_child(c, argv, "", NULL, job_text(job, "log"), why);
}

/* Starts the oldest queued evaluation job when none runs. */
static void start_evaluation(tw_scheduler *s)
{
    json_t *row;
    tw_error err;
    if (s->n_kids == MAX_CHILDREN || evaluations_running(s) ||
        tw_store_eval_next(s->S->store, &row, &err) != TW_OK)
        return;
    const char *id = json_string_value(json_object_get(row, "id"));
    child *c = calloc(1, sizeof *c);
    const char *out = job_text(json_object_get(row, "job"), "out");
    tw_status st = c && (c->eval_out = strdup(out)) && (c->metrics = json_object())
                       ? TW_OK
                       : tw_error_set(&err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (c) {
        snprintf(c->id, sizeof c->id, "%s", id);
        c->in[OUT].fd = c->in[ERR].fd = c->log_fd = -1;
        c->last_line = tw_now_mono();
    }
    if (st == TW_OK)
        st = spawn_evaluation(s, c, row, &err);
    if (st == TW_OK) {
        s->kids[s->n_kids++] = c;
        st = tw_store_eval_started(s->S->store, id, tw_now_wall(), &err);
    } else {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        char *e = error_text("SPAWN_FAILED", msg);
        if (tw_store_eval_finished(s->S->store, id, TW_RUN_FAILED, e, NULL, tw_now_wall(), &err) != TW_OK)
            log_store_error(&err);
        free(e);
        if (c)
            child_free(c);
        st = TW_OK;
    }
    if (st != TW_OK)
        log_store_error(&err);
    tw_server_changed(s->S);
    json_decref(row);
}

/* Settles an evaluation job: cancelled, succeeded with the --out document as its result, or failed with
 * the exit's code and the child's last error. */
static void finish_evaluation(tw_scheduler *s, child *c)
{
    tw_server *S = s->S;
    char how[160], msg[900];
    describe_exit(c, S->opt.heartbeat_timeout, how, sizeof how);
    snprintf(msg, sizeof msg, "%s%s%s", how, c->last_error[0] ? ": " : "", c->last_error);
    json_t *doc = NULL;
    tw_error err;
    int exited_ok = !c->kill_reason && !WIFSIGNALED(c->wstatus) && WEXITSTATUS(c->wstatus) == 0 &&
                    !strcmp(c->final_status, TW_CHILD_COMPLETED);
    tw_run_state state = c->cancel ? TW_RUN_CANCELLED
                         : exited_ok && tw_evaluation_read(c->eval_out, &doc, &err) == TW_OK ? TW_RUN_SUCCEEDED
                                                                                               : TW_RUN_FAILED;
    int exit_status = WIFSIGNALED(c->wstatus) ? -1 : WEXITSTATUS(c->wstatus);
    const char *code = c->kill_reason ? "HEARTBEAT_TIMEOUT"
                       : exited_ok    ? "INTERNAL"
                                      : tw_child_failure_of(exit_status)->code;
    if (exited_ok && !doc && state == TW_RUN_FAILED)
        snprintf(msg, sizeof msg, "%s", err.message);
    log_closing(c, "%s: %s", tw_run_state_name(state), msg);
    char *e = state == TW_RUN_FAILED ? error_text(code, msg) : NULL;
    char *result = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    if (tw_store_eval_finished(S->store, c->id, state, e, result, tw_now_wall(), &err) != TW_OK)
        log_store_error(&err);
    free(e);
    free(result);
    json_decref(doc);
    tw_server_changed(S);
}

tw_status tw_scheduler_cancel_evaluation(tw_scheduler *s, const char *id, tw_error *err)
{
    return cancel(s, id, "evaluation", tw_store_eval_cancel_queued, tw_store_eval_get, err);
}
