/* train_main.c — `tower train CONFIG.json --logdir DIR [options]`: the command line around tw_train, the
 * world of processes it joins, where signals are taken, and the stop watchdog.
 *
 * Owns: the options (the child's, child.h's TW_TRAIN_OPT_* names), joining the world (world.h: mpirun's,
 * or the TCP world from torchrun's variables; only rank 0 writes on stdout), the signal thread (SIGTERM,
 * SIGINT and SIGUSR1 ask the loop to checkpoint and stop; every computing thread keeps them blocked), the
 * watchdog that ends the process with exit 15 when it has not stopped within --stop-within seconds, and
 * the exit status (child.h's table, docs/architecture.md "The child protocol"). Why the signals have a
 * thread of their own, and what each piece guards against: docs/architecture.md, "Signals in `tower
 * train`". */
#define _DEFAULT_SOURCE /* sigaltstack, SA_ONSTACK */
#include "train_main.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "child.h"
#include "config.h"
#include "datafs.h"
#include "trainer.h"


static const char USAGE[] =
    "usage: tower train CONFIG.json --logdir DIR [--resume] [--towers N] [--backend auto|cpu|cuda]\n"
    "                   [--data-root DIR] [--memory-limit BYTES] [--input-memory BYTES]\n"
    "                   [--stop-within S] [--monitor-url URL]\n"
    "\n"
    "Trains the model CONFIG.json describes. Event files go to DIR (tensorboard --logdir DIR shows\n"
    "them), checkpoints to DIR/checkpoints. One JSON object per line on stdout reports progress\n"
    "(on a terminal: a live progress line instead). Under `mpirun -np P` the P processes train one run,\n"
    "rank 0 writing; SIGUSR1 (forwarded by mpirun) stops like SIGTERM.\n"
    "\n"
    "  --logdir DIR       where the run writes (required)\n"
    "  --resume           continue from DIR/checkpoints/latest, bit-exactly, if there is one\n"
    "  --towers N         replicas per step (overrides the config's \"towers\")\n"
    "  --backend B        auto (default: cuda when a GPU is present, else cpu), cpu or cuda\n"
    "  --memory-limit B   bytes each device may hold (default: the GPU's memory, or the host's RAM\n"
    "                     capped by its cgroup limit); a config whose estimate is larger exits 2\n"
    "  --input-memory B   bytes a dataset may take decoded in memory before it is streamed instead\n"
    "                     (default 2 GiB; the config's input_memory_bytes wins)\n"
    "  --stop-within S    seconds from SIGTERM/SIGINT to the end of the process (default 20): past\n"
    "                     them it exits 15 without waiting for the checkpoint\n"
    "  --data-root DIR    no file under DIR is reached through a symlink (tower serve passes its data\n"
    "                     folder); a symlink met there is an error\n"
    "  --monitor-url URL  the run's status page, linked from TensorBoard's HPARAMS tab (tower serve\n"
    "                     passes it)\n"
    "\n"
    "Exit status: 0 completed or cancelled (SIGTERM/SIGINT checkpoints first), 1 other runtime\n"
    "failure, 2 usage or config error, 10 NaN/Inf loss, 11 out of memory, 12 sticky device error,\n"
    "13 storage full (ENOSPC/EDQUOT), 14 damaged dataset or checkpoint file, or a label outside the\n"
    "classes, 15 not stopped within --stop-within seconds of SIGTERM/SIGINT.\n";

typedef struct {
    const char *config;
    const char *data_root; /* NULL: unconfined */
    tw_train_options train;
    int towers;
    int stop_within; /* seconds from SIGTERM to the watchdog's exit */
} options;

/* A byte count from 1 to 1e18 into *v; -1 when arg is not one. */
static int bytes_arg(const char *arg, uint64_t *v)
{
    char *end;
    errno = 0;
    double d = strtod(arg, &end);
    if (*end || errno || !(d >= 1 && d <= 1e18))
        return -1;
    *v = (uint64_t)d;
    return 0;
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tower train: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", USAGE);
    return TW_EXIT_USAGE;
}

/* Returns 0 to go on, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        {TW_TRAIN_OPT_LOGDIR, required_argument, 0, 'l'}, {TW_TRAIN_OPT_RESUME, no_argument, 0, 'r'},
        {"towers", required_argument, 0, 't'}, {TW_TRAIN_OPT_BACKEND, required_argument, 0, 'b'},
        {TW_TRAIN_OPT_DATA_ROOT, required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
        {"memory-limit", required_argument, 0, 'm'}, {TW_TRAIN_OPT_MONITOR_URL, required_argument, 0, 'u'},
        {TW_TRAIN_OPT_INPUT_MEMORY, required_argument, 0, 'i'}, {TW_TRAIN_OPT_STOP_WITHIN, required_argument, 0, 's'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->stop_within = 20;
    o->train.backend = "auto";
    o->train.progress = stdout;
    optind = 1;
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'l': o->train.logdir = optarg; break;
        case 'r': o->train.resume = 1; break;
        case 'd': o->data_root = optarg; break;
        case 'u': o->train.monitor_url = optarg; break;
        case 't':
            o->towers = (int)strtol(optarg, &end, 10);
            if (*end || o->towers < 1 || o->towers > 64)
                return usage_error("--towers needs a number from 1 to 64, got '%s'", optarg);
            break;
        case 'b':
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return usage_error("--backend must be auto, cpu or cuda, got '%s'", optarg);
            o->train.backend = optarg;
            break;
        case 'm':
            if (bytes_arg(optarg, &o->train.memory_limit) != 0)
                return usage_error("--memory-limit needs a number of bytes from 1 to 1e18, got '%s'",
                                   optarg);
            break;
        case 'i':
            if (bytes_arg(optarg, &o->train.input_memory) != 0)
                return usage_error("--input-memory needs a number of bytes from 1 to 1e18, got '%s'",
                                   optarg);
            break;
        case 's':
            o->stop_within = (int)strtol(optarg, &end, 10);
            if (*end || o->stop_within < 1 || o->stop_within > 3600)
                return usage_error("--stop-within needs a number of seconds from 1 to 3600, got '%s'", optarg);
            break;
        case 'h': fputs(USAGE, stdout); return -1;
        default: fputs(USAGE, stderr); return TW_EXIT_USAGE;
        }
    }
    if (optind != argc - 1)
        return usage_error("expected exactly one CONFIG.json%s", "");
    if (!o->train.logdir)
        return usage_error("--logdir is required%s", "");
    o->config = argv[optind];
    return 0;
}

static unsigned stop_within; /* seconds: the watchdog's bound (options.stop_within) */
static pthread_t main_thread; /* the one that calls tw_train: the loop, tower 0's products */

/* Sent by on_signal to the main thread only (pthread_kill), to end a system call it is blocked in (a
 * write on a stdout nobody reads any more: mpirun stops forwarding its ranks' output once it kills the
 * job) with EINTR, so that the loop sees the stop. Its handler does nothing, on an alternate stack. A
 * real-time signal no library here uses. */
#define SIGPOKE (SIGRTMIN + 5)
enum { POKE_STACK = 64 << 10 }; /* bytes: the frame with the AVX-512 state is about 3.5 KiB */

static void on_poke(int sig) { (void)sig; }

/* What a stop signal does, on whichever thread takes it (async-signal-safe: the signal thread calls it
 * after sigwait, the handler on a thread from before main): SIGALRM is the watchdog, the loop did not end
 * within stop_within seconds of the stop; the first SIGTERM/SIGINT/SIGUSR1 arms it, every one asks the
 * loop to stop. */
static void on_signal(int sig)
{
    static atomic_flag armed = ATOMIC_FLAG_INIT;
    if (sig == SIGALRM) {
        static const char msg[] = "tower train: not stopped within --stop-within seconds of SIGTERM/SIGINT: "
                                  "exiting without the stop's checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(TW_EXIT_STOP_TIMEOUT);
    }
    if (!atomic_flag_test_and_set(&armed))
        alarm(stop_within);
    tw_train_request_stop();
    pthread_kill(main_thread, SIGPOKE); /* out of a blocked write, as a handler on main did */
}

static sigset_t stop_set; /* SIGTERM, SIGINT, SIGUSR1, SIGALRM */

static void *signal_thread(void *unused)
{
    (void)unused;
    for (;;) {
        int sig;
        if (sigwait(&stop_set, &sig) == 0)
            on_signal(sig);
    }
    return NULL;
}

static void on_signal_handler(int sig) { on_signal(sig); }

/* Bytes: sigwait, alarm and write need little, and an address-space limit (--memory-limit) counts the
 * stack; glibc refuses (EINVAL) a stack too small for the libraries' static TLS, and then the default
 * size is used. */
enum { SIGNAL_THREAD_STACK = 256 << 10 };

/* Blocks SIGTERM, SIGINT, SIGUSR1 and SIGALRM in the calling thread before it starts any other (MPI's,
 * the towers', OpenMP's, the input's and the checkpoint writer's inherit the block: no signal frame is
 * ever pushed on a thread that multiplies; the header says why), and takes them on one thread of their
 * own with sigwait. The handler is for the threads libraries started before main (OpenBLAS's pthread
 * workers), which cannot be made to block them and would otherwise die of a SIGTERM they take; they run
 * OpenBLAS only, never oneDNN or Tower's own loops. The calling thread gets SIGPOKE's alternate stack
 * and handler. Call once, from the thread that trains, before any thread starts; returns errno (the
 * thread could not start, no memory for the stack) or 0. */
static int handle_stop_signals(int within)
{
    stop_within = (unsigned)within;
    static const int SIGNALS[] = {SIGTERM, SIGINT, SIGUSR1 /* mpirun forwards it to every rank; its
                                                             SIGTERM kills the job */, SIGALRM};
    enum { N = sizeof SIGNALS / sizeof SIGNALS[0] };
    sigemptyset(&stop_set);
    for (int i = 0; i < N; i++)
        sigaddset(&stop_set, SIGNALS[i]);
    struct sigaction sa = {.sa_handler = on_signal_handler, .sa_flags = SA_RESTART};
    sigfillset(&sa.sa_mask);
    int e = pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    for (int i = 0; !e && i < N; i++)
        if (sigaction(SIGNALS[i], &sa, NULL) != 0)
            e = errno;
    /* The poke: no SA_RESTART (the point is EINTR), on an alternate stack (main may be in oneDNN). */
    main_thread = pthread_self();
    stack_t alt = {.ss_sp = malloc(POKE_STACK), .ss_size = POKE_STACK}; /* kept for the process */
    struct sigaction poke = {.sa_handler = on_poke, .sa_flags = SA_ONSTACK};
    sigfillset(&poke.sa_mask);
    if (!e && (!alt.ss_sp || sigaltstack(&alt, NULL) != 0 || sigaction(SIGPOKE, &poke, NULL) != 0))
        e = alt.ss_sp ? errno : ENOMEM;
    pthread_attr_t attr;
    pthread_t thread;
    if (!e && !(e = pthread_attr_init(&attr))) {
        pthread_attr_setstacksize(&attr, SIGNAL_THREAD_STACK);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        e = pthread_create(&thread, &attr, signal_thread, NULL);
        if (e == EINVAL) {
            pthread_attr_destroy(&attr);
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            e = pthread_create(&thread, &attr, signal_thread, NULL);
        }
        pthread_attr_destroy(&attr);
    }
    return e;
}


static tw_world world; /* the processes this one trains with (world.h); a world of one by default */

/* Leaves the world with exit status code: a failure in a world of several processes ends all of them
 * with that code (tw_world_abort: mpirun exits with it), so that no process waits for this one. */
static int leave(int code)
{
    if (code != 0 && tw_world_size(&world) > 1)
        tw_world_abort(&world, code);
    tw_world_finalize(&world);
    return code;
}

/* Reports err on stderr (every rank, naming it in a world of several) and as the final JSON line (rank
 * 0 only: the others write nothing on stdout); returns code. */
static int fail(const tw_error *err, int code)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    if (tw_world_size(&world) > 1)
        fprintf(stderr, "tower train (rank %d of %d): %s\n", tw_world_rank(&world), tw_world_size(&world), msg);
    else
        fprintf(stderr, "tower train: %s\n", msg);
    tw_child_out out;
    tw_child_init(&out, tw_world_rank(&world) == 0 ? stdout : NULL);
    return leave(tw_child_failed(&out, tw_status_name(err->status), code, msg));
}

int tw_train_main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    static tw_config c; /* large: keep it off the stack */
    tw_error err;
    tw_error_clear(&err);
    int e = handle_stop_signals(o.stop_within); /* before any thread starts (MPI's too) */
    if (e) {
        tw_error_set(&err, e == EAGAIN || e == ENOMEM ? TW_ERR_NOMEM : TW_ERR_INTERNAL, NULL, -1,
                     "cannot start the signal thread: %s", strerror(e));
        return fail(&err, tw_child_exit_code(&err));
    }
    /* a launcher without MPI in this build (2), MPI failed (1), torchrun's variables malformed or this rank
     * refused by rank 0 (2), the TCP join timed out (1): world.h */
    if (tw_world_init(&world, &err) != TW_OK)
        return fail(&err, err.status == TW_ERR_UNSUPPORTED ? TW_EXIT_USAGE : tw_child_exit_code(&err));
    o.train.world = &world;
    if (tw_world_rank(&world) != 0)
        o.train.progress = NULL; /* only rank 0 writes the lines (trainer.h) */
    if ((o.data_root && tw_fs_confine(o.data_root, &err) != TW_OK) ||
        tw_config_load(o.config, &c, &err) != TW_OK ||
        (o.towers && tw_config_override_towers(&c, o.towers, &err) != TW_OK))
        return fail(&err, TW_EXIT_USAGE);
    /* Open MPI hands its ranks a pseudo-terminal for stdout: under a launcher the lines stay JSON (the
     * server's supervisor reads them through mpirun). */
    if (tw_world_launched_size() == 0 && isatty(fileno(stdout)))
        tw_child_use_terminal(stdout, c.steps); /* a person reads it; a pipe keeps the JSON lines */
    tw_train_outcome outcome;
    if (tw_train(&c, &o.train, &outcome, &err) != TW_OK)
        return fail(&err, tw_child_exit_code(&err));
    if (outcome != TW_TRAIN_DIVERGED)
        return leave(0);
    fprintf(stderr, "tower train: the loss is not finite (NaN or Inf): stopped; the last checkpoint "
                    "is from before it\n");
    return leave(TW_EXIT_DIVERGED);
}
