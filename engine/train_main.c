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
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "child.h"
#include "config.h"
#include "datafs.h"
#include "options.h"
#include "trainer.h"


typedef struct {
    const char *data_root; /* NULL: unconfined */
    tw_train_options train;
    int backend;     /* index in tw_backend_choices */
    int towers;
    int stop_within; /* seconds from SIGTERM to the watchdog's exit */
} options;

static const tw_opt OPTIONS[] = {
    {.name = TW_TRAIN_OPT_LOGDIR, .kind = TW_OPT_STRING, .offset = offsetof(options, train.logdir), .arg = "DIR",
     .help = "where the run writes (required)", .required = 1},
    {.name = TW_TRAIN_OPT_RESUME, .kind = TW_OPT_FLAG, .offset = offsetof(options, train.resume),
     .help = "continue from DIR/checkpoints/latest, bit-exactly, if there is one"},
    {.name = "towers", .kind = TW_OPT_INT, .offset = offsetof(options, towers), .arg = "N", .min = 1, .max = 64,
     .help = "replicas per step (overrides the config's \"towers\")"},
    {.name = TW_TRAIN_OPT_BACKEND, .kind = TW_OPT_CHOICE, .offset = offsetof(options, backend), .arg = "B",
     .names = tw_backend_choices, .help = "auto (default: cuda when a GPU is present, else cpu), cpu or cuda"},
    {.name = "memory-limit", .kind = TW_OPT_BYTES, .offset = offsetof(options, train.memory_limit), .arg = "B",
     .min = 1, .max = 1e18,
     .help = "bytes each device may hold (default: the GPU's memory, or the host's RAM\n"
             "capped by its cgroup limit); a config whose estimate is larger exits 2"},
    {.name = TW_TRAIN_OPT_INPUT_MEMORY, .kind = TW_OPT_BYTES, .offset = offsetof(options, train.input_memory),
     .arg = "B", .min = 1, .max = 1e18,
     .help = "bytes a dataset may take decoded in memory before it is streamed instead\n"
             "(default 2 GiB; the config's input_memory_bytes wins)"},
    {.name = TW_TRAIN_OPT_STOP_WITHIN, .kind = TW_OPT_INT, .offset = offsetof(options, stop_within), .arg = "S",
     .min = 1, .max = 3600,
     .help = "seconds from SIGTERM/SIGINT to the end of the process (default 20): past\n"
             "them it exits 15 without waiting for the checkpoint"},
    {.name = TW_TRAIN_OPT_DATA_ROOT, .kind = TW_OPT_STRING, .offset = offsetof(options, data_root), .arg = "DIR",
     .help = "no file under DIR is reached through a symlink (tower serve passes its data\n"
             "folder); a symlink met there is an error"},
    {.name = TW_TRAIN_OPT_MONITOR_URL, .kind = TW_OPT_STRING, .offset = offsetof(options, train.monitor_url),
     .arg = "URL", .help = "the run's status page, linked from TensorBoard's HPARAMS tab (tower serve\n"
                           "passes it)"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower train",
    .usage = "CONFIG.json --logdir DIR [--resume] [--towers N] [--backend auto|cpu|cuda]\n"
             "                   [--data-root DIR] [--memory-limit BYTES] [--input-memory BYTES]\n"
             "                   [--stop-within S] [--monitor-url URL]",
    .about = "Trains the model CONFIG.json describes. Event files go to DIR (tensorboard --logdir DIR shows\n"
             "them), checkpoints to DIR/checkpoints. One JSON object per line on stdout reports progress\n"
             "(on a terminal: a live progress line instead). Under `mpirun -np P` the P processes train one run,\n"
             "rank 0 writing; SIGUSR1 (forwarded by mpirun) stops like SIGTERM.\n",
    .epilog = "Exit status: 0 completed or cancelled (SIGTERM/SIGINT checkpoints first), 1 other runtime\n"
              "failure, 2 usage or config error, 10 NaN/Inf loss, 11 out of memory, 12 sticky device error,\n"
              "13 storage full (ENOSPC/EDQUOT), 14 damaged dataset or checkpoint file, or a label outside the\n"
              "classes, 15 not stopped within --stop-within seconds of SIGTERM/SIGINT.\n",
    .opts = OPTIONS,
    .operands = "CONFIG.json",
    .min_args = 1,
    .max_args = 1,
};

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
    static char poke_stack[POKE_STACK]; /* the process's (static: no allocation a leak check reports) */
    stack_t alt = {.ss_sp = poke_stack, .ss_size = sizeof poke_stack};
    struct sigaction poke = {.sa_handler = on_poke, .sa_flags = SA_ONSTACK};
    sigfillset(&poke.sa_mask);
    if (!e && (sigaltstack(&alt, NULL) != 0 || sigaction(SIGPOKE, &poke, NULL) != 0))
        e = errno;
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
    options o = {.stop_within = 20, .train.progress = stdout};
    int nargs, rc = tw_options_parse(&COMMAND, &o, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    const char *config = argv[1];
    o.train.backend = tw_backend_choices[o.backend];
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
        tw_config_load(config, &c, &err) != TW_OK ||
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
