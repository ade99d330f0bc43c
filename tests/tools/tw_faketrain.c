/* tw_faketrain.c — a stand-in for `tower train` that the server's reliability tests run as the child
 * process (`tower serve --trainer PATH`). It speaks the trainer's whole contract without a model or data,
 * and fails on request. Not a test itself.
 *
 *   tw_faketrain train CONFIG.json --logdir DIR [--resume] [--towers N] [--backend B] [--data-root D]
 *                [--monitor-url URL] [--stop-within S] [--input-memory B]
 *
 * The same arguments as `tower train` (the first is ignored; --towers and --backend are checked and
 * ignored, --monitor-url, --stop-within and --input-memory are ignored; --data-root confines it as it does the trainer: base/datafs.h). From CONFIG.json (a full tower config; jansson, duplicates refused) it reads only "steps"
 * (default 1000), "checkpoint_every" (default 1000, 0 = only at the end), as engine/config.c does, and
 * "eval_every" (default 0 = never): an eval line {"step":K,"eval_loss":X,"eval_examples":100} after step K; and
 * one after a resume that finds nothing left to train (as the trainer reports its final evaluation again).
 * What it writes, through the real modules:
 *   - DIR/events.out.tfevents.*: a scalar "loss" per step (eventlog/events.h); a resumed run writes a new
 *     file that starts with SessionLog START at step+1, like the trainer. A failed event write only
 *     prints the trainer's METRICS_DEGRADED warning.
 *   - DIR/checkpoints/: tw_checkpoint_save every checkpoint_every steps, at the end and on SIGTERM or
 *     SIGINT (ckpt-%010lld.safetensors holding "w" [4] fp32, metadata "format" and "step"; the `latest`
 *     pointer; keep 3). --resume continues from tw_checkpoint_open_latest (none: from step 0).
 *   - DIR/steps.log: one line "step K" per completed step, appended with write(2) (so SIGKILL loses
 *     none; no fsync). On --resume the lines after the checkpoint's step are dropped first (the work
 *     since the checkpoint is redone; TensorBoard drops those points the same way), so after any number of
 *     kills and resumes the file reads "step 1" ... "step N" exactly once each. A run without --resume
 *     appends to what is there: a restart that forgets --resume shows up as repeated steps.
 *   - stdout, one JSON object per line, each flushed: {"resumed_from":PATH,"step":K} after a resume,
 *     {"step":K,"loss":X} per step, {"heartbeat":true,"step":K} when no line was written for a second
 *     (checked once per step, as the trainer does), and last {"status":"completed"|"cancelled","step":K,
 *     "seconds":S}; a failure ends with {"status":"failed","error":{"code":NAME},"exit":CODE,
 *     "message":TEXT} and the message on stderr.
 * The lines are written through the trainer's emitter (engine/child.h), so their names are the protocol's.
 * Exit status as engine/train_main.c (child.h's table): 0 completed or cancelled, 1 other failure, 2 usage or config
 * error, 10 NaN/Inf loss, 11 out of memory, 12 sticky device error, 13 storage full, 14 bad dataset.
 *
 * Fault switches: the environment variable TW_FAKE (inherited from the server), comma-separated; an
 * unknown or malformed switch is a usage error (exit 2). "At step K" means instead of completing step K
 * (steps 1..K-1 are done, logged and printed); K = 0 fires at start-up, before the first line, the
 * checkpoint load and steps.log (only DIR and the `once` marker exist by then).
 *   step_ms=N      sleep N ms in each step (default 10)
 *   startup_ms=N   sleep N ms before the first line (and before loading the checkpoint)
 *   ckpt_ms=N      sleep N ms between writing a checkpoint's temporary file and renaming it, so a test
 *                  can SIGKILL during a checkpoint write (rename(2) is wrapped below; the real
 *                  checkpoint and atomic-file code runs unchanged around the pause)
 *   nan_at=K       the loss of step K is NaN: the trainer's LOSS_NAN line, then {"status":"diverged"},
 *                  exit 10, no checkpoint of that state (K >= 1)
 *   inf_at=K       the same with +Inf and LOSS_INF
 *   hang_at=K      at step K print nothing more and sleep forever; SIGTERM and SIGINT are noted but the
 *                  process stays hung (a deadlock): only SIGKILL ends it
 *   crash_at=K     raise(SIGSEGV) at step K (death by signal, nothing flushed or checkpointed)
 *   exit_at=K:CODE at step K write a message naming the fault to stderr (11: CUDA out of memory,
 *                  12: "CUDA error: an illegal memory access was encountered", 13: No space left on
 *                  device, 14: a corrupt TFRecord, other: an injected failure), the failed JSON line
 *                  (CODE != 0) and exit CODE (0..255)
 *   once           the faults above (nan/inf/hang/crash/exit) fire only in the first attempt: the first
 *                  run creates DIR/.tw_fake_once, and a run that finds it runs clean (timings still apply)
 *   helper=KIND    at start-up fork a helper process that stays in the trainer's process group and sleeps
 *                  until killed, after writing {"helper_pid":PID} (its own pid) to stdout:
 *                    stdout       it keeps stdout and stderr open (SIGTERM ends it)
 *                    ignore_term  it ignores SIGTERM and points stdout and stderr at /dev/null
 *                    orphan       a grandchild: the helper forks it and exits at once, so it is orphaned
 *                                 while the trainer runs; it keeps stdout and stderr open
 *                  (every attempt forks one: `once` does not apply)
 *   hog_mb=N       at start-up allocate N MiB and write to every page of it, as a trainer outgrowing its
 *                  memory would: inside a memory cgroup limit below N MiB the kernel's OOM killer ends it
 *   forge          at start-up write a stderr line holding terminal escapes (ESC, BEL) and a failed line
 *                  whose message echoes a value with newlines and ESC, as a trainer quoting a bad config
 *                  value would, then exit 2: what a log must show without a forged line or a raw escape
 *   objective      the loss (and eval_loss) is a known function of two hyperparameters and the step, for the
 *                  sweeps' tests: fake_loss(k) + (log10(lr) + 2)^2 + (log2(units) - 5)^2 / 10, lr being
 *                  optimizer.learning_rate (default 0.01) and units model.layers[0].units (default 32): best
 *                  at lr 0.01 and 32 units, the same order at every step
 * Example: TW_FAKE=step_ms=50,exit_at=7:12,once
 *
 * Under mpirun (OMPI_COMM_WORLD_RANK set: a run of "processes" > 1, server/launch.h) every rank first
 * writes {"rank":R,"rank_pid":PID} to stdout in one write. Rank 0 is then the trainer above; any other
 * rank only steps (step_ms each, from the latest checkpoint's step with --resume) until "steps" or a
 * SIGTERM/SIGINT and exits 0: it writes nothing and the fault switches do not apply to it, as only
 * rank 0 of the real trainer prints the protocol's lines and writes files. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "checkpoint.h"
#include "child.h"
#include "ckpt_contents.h"
#include "datafs.h"
#include "events.h"


enum { KEEP_CHECKPOINTS = 3, W_VALUES = 4, PATH_BYTES = 4096 };

#define NEVER (-1)

static const char USAGE[] =
    "usage: tw_faketrain train CONFIG.json --logdir DIR [--resume] [--towers N] [--backend B]\n"
    "                    [--data-root DIR] [--monitor-url URL]\n"
    "fault switches in $TW_FAKE: step_ms=N,startup_ms=N,ckpt_ms=N,nan_at=K,inf_at=K,hang_at=K,\n"
    "crash_at=K,exit_at=K:CODE,once,helper=stdout|ignore_term|orphan,hog_mb=N,forge,objective (see the\n"
    "comment at "
    "the top of tw_faketrain.c)\n";

typedef enum { HELPER_NONE, HELPER_STDOUT, HELPER_IGNORE_TERM, HELPER_ORPHAN } helper_kind;

typedef struct {
    long step_ms, startup_ms, ckpt_ms, hog_mb;
    int64_t nan_at, inf_at, hang_at, crash_at, exit_at;
    int exit_code;
    int once, forge, objective;
    helper_kind helper;
} fault_switches;

static fault_switches F = {.step_ms = 10, .nan_at = NEVER, .inf_at = NEVER, .hang_at = NEVER,
                           .crash_at = NEVER, .exit_at = NEVER};

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static double now(void) { return tw_child_now(); }

/* The hog_mb switch: N MiB written page by page (kept: the process holds it until it ends). */
static void hog(void)
{
    size_t bytes = (size_t)F.hog_mb << 20;
    volatile char *p = bytes ? malloc(bytes) : NULL;
    for (size_t i = 0; p && i < bytes; i += 4096)
        p[i] = 1;
}

/* Sleeps ms milliseconds, the whole time even when a signal interrupts. */
static void sleep_ms(long ms)
{
    struct timespec left = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

/* The checkpoint write's pause (ckpt_ms): tw_atomic_file_commit renames the fsynced temporary over the
 * final name in the same folder; this definition takes the place of libc's renameat for the whole
 * program, waits when the temporary is a checkpoint's, then renames with the system call. */
int renameat(int from_dir, const char *from, int to_dir, const char *to)
{
    if (F.ckpt_ms > 0 && strstr(from, ".safetensors.tmp."))
        sleep_ms(F.ckpt_ms);
    return (int)syscall(SYS_renameat2, from_dir, from, to_dir, to, 0);
}

/* ================================ exit codes and output ================================ */


static tw_child_out OUT; /* the child protocol's lines on stdout, through the trainer's emitter */

/* stderr and the final failed line, as `tower train` writes them; returns code. */
static int fail_with(const char *status_name, const char *msg, int code)
{
    fprintf(stderr, "tw_faketrain: %s\n", msg);
    return tw_child_failed(&OUT, status_name, code, msg);
}

static int fail(const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    return fail_with(tw_status_name(err->status), msg, tw_child_exit_code(err));
}

/* ================================ switches, arguments, config ================================ */

static int parse_i64(const char *s, int64_t lo, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (!*s || *end || errno || x < lo)
        return 0;
    *v = x;
    return 1;
}

/* Parses one switch; 0 when it is unknown or malformed. */
static int parse_switch(char *item)
{
    static const struct {
        const char *name;
        int64_t *at;
        int64_t lo;
    } STEPS[] = {{"nan_at", &F.nan_at, 1},     {"inf_at", &F.inf_at, 1},
                 {"hang_at", &F.hang_at, 0},   {"crash_at", &F.crash_at, 0}};
    static const struct {
        const char *name;
        long *value; /* milliseconds, or MiB for hog_mb */
    } LONGS[] = {{"step_ms", &F.step_ms}, {"startup_ms", &F.startup_ms}, {"ckpt_ms", &F.ckpt_ms},
                 {"hog_mb", &F.hog_mb}};
    if (!strcmp(item, "once"))
        return F.once = 1;
    if (!strcmp(item, "forge"))
        return F.forge = 1;
    if (!strcmp(item, "objective"))
        return F.objective = 1;
    char *value = strchr(item, '=');
    if (!value)
        return 0;
    *value++ = 0;
    int64_t v;
    for (size_t i = 0; i < sizeof STEPS / sizeof STEPS[0]; i++)
        if (!strcmp(item, STEPS[i].name))
            return parse_i64(value, STEPS[i].lo, STEPS[i].at);
    for (size_t i = 0; i < sizeof LONGS / sizeof LONGS[0]; i++)
        if (!strcmp(item, LONGS[i].name)) {
            if (!parse_i64(value, 0, &v) || v > 86400000)
                return 0;
            *LONGS[i].value = (long)v;
            return 1;
        }
    if (!strcmp(item, "helper")) {
        static const char *const KINDS[] = {[HELPER_STDOUT] = "stdout", [HELPER_IGNORE_TERM] = "ignore_term",
                                            [HELPER_ORPHAN] = "orphan"};
        for (int k = HELPER_STDOUT; k <= HELPER_ORPHAN; k++)
            if (!strcmp(value, KINDS[k]))
                return F.helper = (helper_kind)k, 1;
        return 0;
    }
    if (strcmp(item, "exit_at"))
        return 0;
    char *code = strchr(value, ':');
    if (!code)
        return 0;
    *code++ = 0;
    if (!parse_i64(value, 0, &F.exit_at) || !parse_i64(code, 0, &v) || v > 255)
        return 0;
    F.exit_code = (int)v;
    return 1;
}

/* Reads $TW_FAKE into F; 0 after printing a usage error. */
static int parse_switches(void)
{
    const char *env = getenv("TW_FAKE");
    if (!env || !*env)
        return 1;
    char *copy = strdup(env), *save = NULL;
    int ok = copy != NULL;
    for (char *item = copy ? strtok_r(copy, ",", &save) : NULL; ok && item;
         item = strtok_r(NULL, ",", &save)) {
        char shown[128];
        snprintf(shown, sizeof shown, "%s", item);
        if (!(ok = parse_switch(item)))
            fprintf(stderr, "tw_faketrain: TW_FAKE: unknown or malformed switch '%s'\n%s", shown,
                    USAGE);
    }
    free(copy);
    return ok;
}

typedef struct {
    const char *config, *logdir, *data_root;
    int resume;
    int64_t steps, checkpoint_every, eval_every;
    double penalty; /* the objective switch's term (0 without it) */
    char ckpt_dir[PATH_BYTES], steps_log[PATH_BYTES];
} options;

/* `tower train`'s arguments, argv[0] being "train". Returns 0 to go on, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        {TW_TRAIN_OPT_LOGDIR, required_argument, 0, 'l'}, {TW_TRAIN_OPT_RESUME, no_argument, 0, 'r'},
        {"towers", required_argument, 0, 't'}, {TW_TRAIN_OPT_BACKEND, required_argument, 0, 'b'},
        {TW_TRAIN_OPT_DATA_ROOT, required_argument, 0, 'd'}, {TW_TRAIN_OPT_MONITOR_URL, required_argument, 0, 'u'},
        {TW_TRAIN_OPT_STOP_WITHIN, required_argument, 0, 'u'}, {TW_TRAIN_OPT_INPUT_MEMORY, required_argument, 0, 'u'},
        {0, 0, 0, 0}};
    int c;
    int64_t towers;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'l': o->logdir = optarg; break;
        case 'r': o->resume = 1; break;
        case 'd': o->data_root = optarg; break;
        case 'u': break;
        case 't':
            if (!parse_i64(optarg, 1, &towers) || towers > 64)
                return fputs(USAGE, stderr), TW_EXIT_USAGE;
            break;
        case 'b':
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return fputs(USAGE, stderr), TW_EXIT_USAGE;
            break;
        default: return fputs(USAGE, stderr), TW_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || !o->logdir)
        return fputs(USAGE, stderr), TW_EXIT_USAGE;
    o->config = argv[optind];
    int b = snprintf(o->steps_log, sizeof o->steps_log, "%s/steps.log", o->logdir);
    if (tw_checkpoint_dir_of(o->logdir, o->ckpt_dir, sizeof o->ckpt_dir) != 0 || b < 0 || b >= PATH_BYTES)
        return fputs("tw_faketrain: --logdir is too long\n", stderr), TW_EXIT_USAGE;
    return 0;
}

/* config[key] into *v when present: an integer of at least lo. */
static tw_status config_int(const char *path, json_t *root, const char *key, int64_t lo, int64_t *v,
                            tw_error *err)
{
    json_t *j = json_object_get(root, key);
    if (!j)
        return TW_OK;
    if (!json_is_integer(j) || json_integer_value(j) < lo)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "'%s' must be an integer >= %lld", key,
                            (long long)lo);
    *v = json_integer_value(j);
    return TW_OK;
}

/* The objective switch's term for config root (see the comment at the top). */
static double objective_penalty(json_t *root)
{
    json_t *lr = json_object_get(json_object_get(root, "optimizer"), "learning_rate");
    json_t *units = json_object_get(json_array_get(json_object_get(json_object_get(root, "model"), "layers"), 0), "units");
    double l = json_is_number(lr) && json_number_value(lr) > 0 ? json_number_value(lr) : 0.01;
    double u = json_is_integer(units) && json_integer_value(units) > 0 ? (double)json_integer_value(units) : 32;
    return (log10(l) + 2) * (log10(l) + 2) + (log2(u) - 5) * (log2(u) - 5) / 10;
}

static tw_status load_config(options *o, tw_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(o->config, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return tw_error_set(err, TW_ERR_INVALID, o->config, -1, "%s", je.text);
    o->steps = 1000;
    o->checkpoint_every = 1000;
    tw_status s = json_is_object(root) ? TW_OK
                                       : tw_error_set(err, TW_ERR_INVALID, o->config, -1,
                                                      "the config must be a JSON object");
    if (s == TW_OK)
        s = config_int(o->config, root, "steps", 1, &o->steps, err);
    if (s == TW_OK)
        s = config_int(o->config, root, "checkpoint_every", 0, &o->checkpoint_every, err);
    if (s == TW_OK)
        s = config_int(o->config, root, "eval_every", 0, &o->eval_every, err);
    if (s == TW_OK && F.objective)
        o->penalty = objective_penalty(root);
    json_decref(root);
    return s;
}

/* ================================ faults ================================ */

static const struct {
    int code;
    const char *status;
    const char *message;
} INJECTED[] = {
    {TW_EXIT_OOM, "OUT_OF_MEMORY", "CUDA error: out of memory (cudaMalloc of 4294967296 bytes)"},
    {TW_EXIT_DEVICE, "INTERNAL", "CUDA error: an illegal memory access was encountered"},
    {TW_EXIT_STORAGE_FULL, "IO_ERROR", "checkpoints/ckpt-fake.safetensors: write failed: No space left "
                                    "on device"},
    {TW_EXIT_BAD_DATA, "CORRUPT", "train.tfrecord: at byte 0: corrupted record: length CRC mismatch"},
};

/* Fires the hang, crash or exit fault set for step k; returns only when there is none. */
static void fire_faults(int64_t k)
{
    if (F.hang_at == k) {
        fprintf(stderr, "tw_faketrain: hang_at=%lld: hanging (only SIGKILL ends this)\n",
                (long long)k);
        for (;;)
            pause();
    }
    if (F.crash_at == k) {
        fprintf(stderr, "tw_faketrain: crash_at=%lld: raising SIGSEGV\n", (long long)k);
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    if (F.exit_at != k)
        return;
    const char *status = "INTERNAL", *what = "injected failure";
    for (size_t i = 0; i < sizeof INJECTED / sizeof INJECTED[0]; i++)
        if (INJECTED[i].code == F.exit_code) {
            status = INJECTED[i].status;
            what = INJECTED[i].message;
        }
    char msg[512];
    snprintf(msg, sizeof msg, "exit_at=%lld:%d (injected at step %lld): %s", (long long)k,
             F.exit_code, (long long)k, what);
    if (F.exit_code)
        fail_with(status, msg, F.exit_code);
    else
        fprintf(stderr, "tw_faketrain: %s\n", msg);
    exit(F.exit_code);
}

/* forge: control characters on both pipes, then exit 2. */
static void forge(void)
{
    fputs("tw_faketrain: forge: \x1b[2J\x1b]0;owned\x07 terminal escapes\n", stderr);
    tw_child_failed(&OUT, "INVALID", TW_EXIT_USAGE, "unknown value '\n== forged ==\n\x1b[2J'");
    exit(TW_EXIT_USAGE);
}

/* In a helper (helper=KIND): {"helper_pid":PID} on stdout, then sleep until killed. */
static void linger(void)
{
    char line[48];
    int n = snprintf(line, sizeof line, "{\"helper_pid\":%d}\n", (int)getpid());
    ssize_t w = write(STDOUT_FILENO, line, (size_t)n); /* one write: never split by the trainer's lines */
    (void)w;
    if (F.helper == HELPER_IGNORE_TERM) {
        int null_fd = open("/dev/null", O_WRONLY);
        if (null_fd < 0 || dup2(null_fd, STDOUT_FILENO) < 0 || dup2(null_fd, STDERR_FILENO) < 0)
            _exit(1);
    }
    for (;;)
        pause();
}

/* helper=KIND: forks the helper, which never returns here. Returns 0, or -1 when fork failed. */
static int start_helper(void)
{
    if (F.helper == HELPER_NONE)
        return 0;
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid != 0)
        return pid < 0 ? -1 : 0;
    struct sigaction sa = {.sa_handler = F.helper == HELPER_IGNORE_TERM ? SIG_IGN : SIG_DFL};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (F.helper == HELPER_ORPHAN && fork() != 0)
        _exit(0); /* the grandchild lingers, orphaned */
    linger();
    return 0;
}

/* With `once`, the first run in logdir leaves a marker; later runs clear the faults. */
static tw_status apply_once(const char *logdir, tw_error *err)
{
    if (!F.once)
        return TW_OK;
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/.tw_fake_once", logdir);
    int fd = tw_fs_open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0)
        return close(fd), TW_OK;
    if (errno != EEXIST)
        return tw_error_errno(err, path, "cannot create the once marker");
    F.nan_at = F.inf_at = F.hang_at = F.crash_at = F.exit_at = NEVER;
    return TW_OK;
}

/* ================================ the run ================================ */

typedef struct {
    options *o;
    tw_events_writer *ev; /* NULL once degraded */
    int log_fd;           /* steps.log, O_APPEND */
    int64_t step;         /* completed steps */
    double t_start;
} run;

/* The loss of step k: falls smoothly, the same for a resumed run. */
static double fake_loss(int64_t k) { return 2.3 * exp(-(double)k / 200.0) + 0.05; }

static void events_failed(run *R, const tw_error *e)
{
    char msg[1200];
    tw_error_format(e, msg, sizeof msg);
    tw_child_warning(&OUT, TW_CHILD_METRICS_DEGRADED, msg, R->step);
    tw_events_destroy(R->ev);
    R->ev = NULL;
}

static tw_status save(run *R, tw_error *err)
{
    float w[W_VALUES];
    for (int i = 0; i < W_VALUES; i++)
        w[i] = (float)R->step * 0.5f + (float)i;
    const tw_ckpt_tensor t = {.name = "w", .data = w, .rank = 1, .shape = {W_VALUES}};
    const tw_ckpt_state state = {.step = R->step, .data_consumed = (uint64_t)R->step, .config = "{}"};
    tw_ckpt_meta meta[TW_CKPT_META];
    tw_ckpt_state_text text;
    tw_ckpt_state_meta(&state, meta, &text);
    tw_error e; /* as the trainer: the events up to this step are in the file before the checkpoint */
    if (R->ev && tw_events_flush(R->ev, &e) != TW_OK)
        events_failed(R, &e);
    return tw_checkpoint_save(R->o->ckpt_dir, R->step, KEEP_CHECKPOINTS, &t, 1, meta, TW_CKPT_META, err);
}

/* Rewrites steps.log atomically with only its lines up to step (none when it does not exist). */
static tw_status trim_steps_log(const char *path, int64_t step, tw_error *err)
{
    int fd = tw_fs_open(path, O_RDONLY, 0);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (!f)
        return errno == ENOENT ? TW_OK : tw_fs_error(err, path, "cannot open");
    char *kept = NULL, line[64];
    size_t len = 0;
    FILE *out = open_memstream(&kept, &len);
    long long k;
    while (out && fgets(line, sizeof line, f))
        if (sscanf(line, "step %lld", &k) == 1 && k <= step)
            fputs(line, out);
    fclose(f);
    if (!out)
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    fclose(out);
    tw_status s = tw_atomic_write_file(path, kept, len, err);
    free(kept);
    return s;
}

/* --resume: loads the latest checkpoint (if any) into R->step and trims steps.log to it. */
static tw_status resume(run *R, tw_error *err)
{
    tw_checkpoint *ck;
    tw_status s = tw_checkpoint_open_latest(R->o->ckpt_dir, &ck, err);
    if (s == TW_END)
        return trim_steps_log(R->o->steps_log, 0, err);
    TW_TRY(s);
    tw_ckpt_state state = {.step = 0};
    float w[W_VALUES];
    const int64_t shape[1] = {W_VALUES};
    s = tw_ckpt_state_read(ck, &state, err);
    int64_t step = state.step;
    if (s == TW_OK)
        s = tw_checkpoint_fetch(ck, "w", 1, shape, w, err);
    if (s == TW_OK) {
        R->step = step;
        tw_child_resumed(&OUT, tw_checkpoint_path(ck), step);
    }
    tw_checkpoint_free(ck);
    return s == TW_OK ? trim_steps_log(R->o->steps_log, step, err) : s;
}

static tw_status start(run *R, tw_error *err)
{
    if (tw_fs_mkdir(R->o->logdir, 0755) != 0 && errno != EEXIST)
        return tw_fs_error(err, R->o->logdir, "cannot create the log folder");
    TW_TRY(apply_once(R->o->logdir, err));
    fire_faults(0);
    if (R->o->resume)
        TW_TRY(resume(R, err));
    R->log_fd = tw_fs_open(R->o->steps_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (R->log_fd < 0)
        return tw_fs_error(err, R->o->steps_log, "cannot open");
    TW_TRY(tw_events_create(R->o->logdir, NULL, &R->ev, err));
    tw_error e;
    if (R->step > 0 && tw_events_add_session_start(R->ev, R->step + 1, &e) != TW_OK)
        events_failed(R, &e);
    return TW_OK;
}

/* One step (k = R->step + 1). Returns TW_OK, or TW_END when the loss is not finite (reported). */
static tw_status step(run *R, tw_error *err)
{
    int64_t k = R->step + 1;
    sleep_ms(F.step_ms);
    fire_faults(k);
    double loss = F.nan_at == k ? NAN : F.inf_at == k ? INFINITY : fake_loss(k) + R->o->penalty;
    if (!isfinite(loss)) {
        tw_child_diverged(&OUT, loss, k);
        return TW_END;
    }
    tw_error e;
    if (R->ev && tw_events_add_scalar(R->ev, "loss", k, (float)loss, &e) != TW_OK)
        events_failed(R, &e);
    R->step = k;
    char line[40];
    int n = snprintf(line, sizeof line, "step %lld\n", (long long)k);
    TW_TRY(tw_write_all(R->log_fd, line, (size_t)n, R->o->steps_log, err));
    tw_child_step(&OUT, k, loss, NULL);
    if (R->o->eval_every > 0 && k % R->o->eval_every == 0)
        tw_child_eval_line(&OUT, &(tw_child_eval){.step = k, .loss = loss, .examples = 100});
    int64_t every = R->o->checkpoint_every;
    if ((every > 0 && k % every == 0) || k == R->o->steps)
        TW_TRY(save(R, err));
    tw_child_heartbeat(&OUT, k);
    return TW_OK;
}

static void final_line(run *R, const char *status)
{
    tw_child_final(&OUT, status, R->step, now() - R->t_start);
}

static void finish(run *R)
{
    tw_error e;
    if (R->ev && tw_events_close(R->ev, &e) != TW_OK)
        events_failed(R, &e);
    tw_events_destroy(R->ev);
    if (R->log_fd >= 0)
        close(R->log_fd);
}

/* Under mpirun: {"rank":R,"rank_pid":PID} in one write. Returns the rank (0 without mpirun). */
static int announce_rank(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    int64_t rank = 0;
    if (!r || !parse_i64(r, 0, &rank))
        return 0;
    char line[64];
    int n = snprintf(line, sizeof line, "{\"rank\":%lld,\"rank_pid\":%d}\n", (long long)rank, (int)getpid());
    ssize_t w = write(STDOUT_FILENO, line, (size_t)n);
    (void)w;
    return (int)rank;
}

/* A rank other than 0: steps without a word until "steps" or a stop. Returns the exit status (0). */
static int follow(const options *o)
{
    int64_t step = 0;
    tw_checkpoint *ck;
    tw_error err;
    tw_ckpt_state state;
    if (o->resume && tw_checkpoint_open_latest(o->ckpt_dir, &ck, &err) == TW_OK) {
        step = tw_ckpt_state_read(ck, &state, &err) == TW_OK ? state.step : 0;
        tw_checkpoint_free(ck);
    }
    while (!stop_requested && step < o->steps) {
        sleep_ms(F.step_ms);
        step++;
    }
    return 0;
}

/* Returns the exit status. */
static int train(options *o)
{
    run R = {.o = o, .log_fd = -1};
    tw_error err;
    tw_error_clear(&err);
    tw_status s = start(&R, &err);
    R.t_start = OUT.last_write = now();
    const char *status = TW_CHILD_COMPLETED;
    if (s == TW_OK && R.step > 0 && R.step >= o->steps) /* resumed at the end: as the trainer */
        tw_child_eval_line(&OUT, &(tw_child_eval){.step = R.step, .loss = fake_loss(R.step) + o->penalty, .examples = 100});
    while (s == TW_OK && R.step < o->steps) {
        if (stop_requested) {
            status = TW_CHILD_CANCELLED;
            s = save(&R, &err);
            break;
        }
        s = step(&R, &err);
    }
    if (s == TW_OK)
        final_line(&R, status);
    if (s == TW_END)
        final_line(&R, TW_CHILD_DIVERGED);
    finish(&R);
    if (s == TW_END) {
        fprintf(stderr, "tw_faketrain: the loss is not finite (NaN or Inf): stopped; the last "
                        "checkpoint is from before it\n");
        return TW_EXIT_DIVERGED;
    }
    return s == TW_OK ? 0 : fail(&err);
}

int main(int argc, char **argv)
{
    options o = {0};
    tw_child_init(&OUT, stdout);
    int rc = argc < 2 ? (fputs(USAGE, stderr), TW_EXIT_USAGE) : parse_args(argc - 1, argv + 1, &o);
    if (rc)
        return rc;
    if (!parse_switches())
        return TW_EXIT_USAGE;
    tw_error err;
    tw_error_clear(&err);
    if ((o.data_root && tw_fs_confine(o.data_root, &err) != TW_OK) || load_config(&o, &err) != TW_OK)
        return fail(&err);
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (announce_rank() != 0)
        return follow(&o);
    if (start_helper() != 0)
        return fail_with("INTERNAL", "helper: fork failed", 1);
    if (F.forge)
        forge();
    hog();
    sleep_ms(F.startup_ms);
    return train(&o);
}
