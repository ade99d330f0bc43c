/* bench_main.c — `tower bench [--config FILE ...] [--backend auto|cpu|cuda] [--towers N ...] [--steps N]
 * [--warmup N] [--graphs on|off|both] [--json]`: the training step's speed per model, tower count and
 * CUDA Graphs on or off, on synthetic data. Under `mpirun -np P` the P processes time the world's step
 * (world.h: each runs the given towers, the all-reduce spans the processes) and rank 0 reports it, the
 * towers counted over the world.
 *
 * Owns: the command line, the default configs (built into the binary, embedded.h) and tower counts, the
 * statistics over the timed steps (median and p90 step time, examples/s, the all-reduce's time and bus
 * bandwidth) and the report (a table, or one JSON object). The step and its timing are tw_train_bench's
 * (train_step.c): the same step `tower train` runs. Exit status: 0 ok, 2 a usage or config error (the message
 * names the option or the key), else tw_child_exit_code's (1 for a backend that cannot run here, e.g. no
 * CUDA device). */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "bench_main.h"
#include "child.h"
#include "config.h"
#include "embedded.h"
#include "options.h"
#include "train_step.h"

enum { MAX_LIST = 16, DEFAULT_STEPS = 100, DEFAULT_WARMUP = 10, MAX_STEPS = 1000000 };

/* --graphs: the cuda_graphs values measured, by the option's index. */
enum { GRAPHS_OFF, GRAPHS_ON, GRAPHS_BOTH };
static const char *const GRAPHS[] = {"off", "on", "both", NULL};

typedef struct {
    const char *configs[MAX_LIST];     /* file names, or the built-in configs' names */
    const tw_embedded *texts[MAX_LIST]; /* the built-in config of configs[i], or NULL: read the file */
    int n_configs;
    int backend;              /* index in tw_backend_choices */
    int towers[MAX_LIST];
    int n_towers;
    int steps, warmup;
    int graphs_option;        /* GRAPHS_* */
    int graphs[2];            /* the cuda_graphs values to measure, in order */
    int n_graphs;
    int json;
    tw_world *world;          /* the processes timing the step together (world.h); rank 0 reports */
} options;

static const tw_opt OPTIONS[] = {
    {.name = "config", .kind = TW_OPT_STRING, .offset = offsetof(options, configs), .arg = "FILE",
     .repeat = MAX_LIST, .count = offsetof(options, n_configs),
     .help = "a run config (repeatable; default examples/seed_mlp.json and\n"
             "examples/fashion_cnn.json as built into this binary)"},
    {.name = "backend", .kind = TW_OPT_CHOICE, .offset = offsetof(options, backend), .arg = "B",
     .names = tw_backend_choices, .help = "auto (default: cuda when a GPU is present, else cpu), cpu or cuda"},
    {.name = "towers", .kind = TW_OPT_INT, .offset = offsetof(options, towers), .arg = "N", .min = 1, .max = 64,
     .repeat = MAX_LIST, .count = offsetof(options, n_towers),
     .help = "a tower count (repeatable; default 1 to the number of GPUs, or 1 and 2 on\n"
             "the CPU, which runs at most one tower per core)"},
    {.name = "steps", .kind = TW_OPT_INT, .offset = offsetof(options, steps), .arg = "N", .min = 1,
     .max = MAX_STEPS, .help = "timed steps per measurement (default 100)"},
    {.name = "warmup", .kind = TW_OPT_INT, .offset = offsetof(options, warmup), .arg = "N", .min = 0,
     .max = MAX_STEPS, .help = "untimed steps before them (default 10)"},
    {.name = "graphs", .kind = TW_OPT_CHOICE, .offset = offsetof(options, graphs_option), .arg = "G",
     .names = GRAPHS, .help = "CUDA Graphs: on, off or both (default: both on CUDA, each a row; the CPU\n"
                              "backend has none and always runs off)"},
    {.name = "json", .kind = TW_OPT_FLAG, .offset = offsetof(options, json),
     .help = "one JSON object instead of the table"},
    {0},
};

static const tw_options COMMAND = {
    .command = "tower bench",
    .usage = "[--config FILE ...] [--backend auto|cpu|cuda] [--towers N ...] [--steps N]\n"
             "                   [--warmup N] [--graphs on|off|both] [--json]",
    .about = "Times the training step of each config's model on each tower count, on synthetic data of the\n"
             "config's shape (no dataset is read, nothing is written): step time (median and p90 over the timed\n"
             "steps, between the backend's syncs), examples/s (towers x batch / median step), the gradient\n"
             "all-reduce's time per step and its bus bandwidth (NCCL's: bytes / time x 2(n-1)/n). On the CPU\n"
             "the towers of one process share their state and fuse the all-reduce with the update: the column\n"
             "then times both (marked \"+update\"; JSON allreduce_with_update) and gives no bandwidth.\n",
    .epilog = "The \"graphs\" column says whether the step ran as CUDA Graphs (the config's \"cuda_graphs\"; the\n"
              "first step of each measurement always runs op by op, so give --warmup 1 or more).\n"
              "Under `mpirun -np P` the P processes time one world's step (rank 0 reports; \"towers\" counts\n"
              "every process's, \"processes\" says P).\n"
              "Exit status: 0 ok, 2 usage or config error, 1 a backend that cannot run here (no CUDA device).\n",
    .opts = OPTIONS,
};

/* One model on one tower count. */
typedef struct {
    const char *config;       /* the file or the built-in config's name, borrowed */
    int towers, batch;
    double step_us, step_p90_us, examples_per_s;
    double allreduce_us;      /* median over the timed steps; 0 with one tower */
    double busbw_gbs;         /* GB/s (1e9); NAN with one tower (nothing crosses a link) */
    tw_bench_info info;
} row;

/* Parses the command line into *o (its defaults first); TW_OPT_GO to go on, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.steps = DEFAULT_STEPS, .warmup = DEFAULT_WARMUP, .graphs_option = GRAPHS_BOTH};
    int nargs, rc = tw_options_parse(&COMMAND, o, argc, argv, &nargs);
    o->n_graphs = o->graphs_option == GRAPHS_BOTH ? 2 : 1;
    o->graphs[0] = o->graphs_option == GRAPHS_ON;
    o->graphs[1] = 1;
    return rc;
}

/* ================================ configs and tower counts ================================ */

/* Without --config: the built-in configs, the seed's MLP and the Fashion-MNIST CNN. */
static void default_configs(options *o)
{
    for (const tw_embedded *e = TW_BENCH_CONFIGS; e->name && o->n_configs < MAX_LIST; e++) {
        o->texts[o->n_configs] = e;
        o->configs[o->n_configs++] = e->name;
    }
}

/* The kind `backend` runs as here, and how many towers it can run: one per GPU, one per CPU core. */
static const char *resolve_kind(const char *backend, int *max_towers)
{
    if (!strcmp(tw_backend_resolve(backend), "cuda")) {
        *max_towers = tw_backend_devices("cuda");
        return "cuda";
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *max_towers = cores > 1 ? (int)cores : 1;
    return "cpu";
}

/* Fills o->towers when none were given; refuses a count the machine cannot run. Without any CUDA
 * device the one count left lets the backend say why it cannot run. */
static int tower_counts(options *o, const char *kind, int max)
{
    if (!strcmp(kind, "cpu")) { /* no graphs on the CPU: one row, "off" */
        o->graphs[0] = 0;
        o->n_graphs = 1;
    }
    if (o->n_towers == 0) {
        int top = !strcmp(kind, "cpu") ? (max < 2 ? max : 2) : (max > 0 ? max : 1);
        for (int n = 1; n <= top && n <= MAX_LIST; n++)
            o->towers[o->n_towers++] = n;
    }
    for (int i = 0; i < o->n_towers; i++)
        if (max > 0 && o->towers[i] > max)
            return tw_options_error(&COMMAND, "--towers %d: the %s backend runs at most %d towers here (one per %s)",
                                    o->towers[i], kind, max, strcmp(kind, "cpu") ? "GPU" : "core");
    return 0;
}

/* Loads every config (all are checked before anything runs). *out: caller frees. */
static int load_configs(const options *o, tw_config **out)
{
    tw_config *c = calloc((size_t)o->n_configs, sizeof *c);
    tw_error err;
    tw_error_clear(&err);
    for (int i = 0; c && i < o->n_configs; i++) {
        const tw_embedded *t = o->texts[i];
        tw_status s = t ? tw_config_parse((const char *)t->data, t->size, NULL, &c[i], &err)
                        : tw_config_load(o->configs[i], &c[i], &err);
        if (s != TW_OK) {
            char msg[1200];
            tw_error_format(&err, msg, sizeof msg);
            /* tw_config_load's message names the file; a built-in config's gets its name here */
            fprintf(stderr, "tower bench: %s%s%s\n", t ? t->name : "", t ? " (built in): " : "", msg);
            free(c);
            return TW_EXIT_USAGE;
        }
    }
    *out = c;
    return c ? 0 : TW_EXIT_OOM;
}

/* ================================ measuring ================================ */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[n] (sorts v), interpolated between neighbours as numpy's default. */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    double pos = q * (n - 1);
    int lo = (int)pos;
    return lo + 1 < n ? v[lo] + (v[lo + 1] - v[lo]) * (pos - lo) : v[lo];
}

static void summarize(row *r, double *step_s, double *allreduce_s, int steps)
{
    r->step_us = quantile(step_s, steps, 0.5) * 1e6;
    r->step_p90_us = quantile(step_s, steps, 0.9) * 1e6;
    r->examples_per_s = (double)r->towers * r->batch * 1e6 / r->step_us;
    r->allreduce_us = quantile(allreduce_s, steps, 0.5) * 1e6;
    double n = r->towers, t = r->allreduce_us * 1e-6; /* NCCL's busbw: algbw (bytes / t) x 2(n-1)/n */
    r->busbw_gbs = n > 1 && t > 0 && !r->info.allreduce_with_update
                       ? (double)r->info.allreduce_bytes / t * 2 * (n - 1) / n / 1e9 : NAN;
}

/* Benchmarks config c (from path) on `towers` towers, with CUDA Graphs or not, into *r. */
static tw_status measure(const options *o, const char *kind, tw_config *c, const char *path,
                         int towers, int graphs, row *r, tw_error *err)
{
    *r = (row){.config = path, .towers = towers * tw_world_size(o->world), .batch = c->batch_size};
    TW_TRY(tw_config_override_towers(c, towers, err));
    c->cuda_graphs = graphs;
    double *t = calloc(2 * (size_t)o->steps, sizeof *t);
    if (!t)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_bench_options bo = {.backend = kind, .world = o->world, .warmup = o->warmup, .steps = o->steps, .step_s = t,
                           .allreduce_s = t + o->steps};
    tw_status s = tw_train_bench(c, &bo, &r->info, err);
    if (s == TW_OK)
        summarize(r, t, t + o->steps, o->steps);
    free(t);
    return s;
}

/* ================================ the report ================================ */

/* "seed_mlp" from ".../seed_mlp.json". */
static void model_name(const char *path, char *out, size_t size)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".json"))
        len -= 5;
    snprintf(out, size, "%.*s", (int)len, base);
}

static void table_header(const options *o, const char *kind)
{
    printf("tower bench: %s backend, %d timed steps after %d warm-up, synthetic data; times in "
           "microseconds\n\n",
           kind, o->steps, o->warmup);
    printf("%-20s %6s %6s %12s %12s %12s %14s %9s %7s\n", "model", "towers", "batch",
           "step median", "step p90", "examples/s", "all-reduce", "bus GB/s", "graphs");
}

static void table_row(const row *r)
{
    char name[64], bw[32] = "-", ar[32];
    model_name(r->config, name, sizeof name);
    if (!isnan(r->busbw_gbs))
        snprintf(bw, sizeof bw, "%.2f", r->busbw_gbs);
    snprintf(ar, sizeof ar, "%.1f%s", r->allreduce_us, r->info.allreduce_with_update ? " +update" : "");
    printf("%-20s %6d %6d %12.1f %12.1f %12.0f %14s %9s %7s\n", name, r->towers, r->batch,
           r->step_us, r->step_p90_us, r->examples_per_s, ar, bw, r->info.graphs ? "on" : "off");
    fflush(stdout);
}

static json_t *json_row(const row *r)
{
    char name[64];
    model_name(r->config, name, sizeof name);
    return json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:I, s:b, s:o, s:s, s:s}", "config",
                     r->config, "model", name, "backend", r->info.backend, "towers", r->towers,
                     "processes", r->info.processes,
                     "batch_size", r->batch, "step_us_median", r->step_us, "step_us_p90",
                     r->step_p90_us, "examples_per_s", r->examples_per_s, "allreduce_us",
                     r->allreduce_us, "allreduce_bytes", (json_int_t)r->info.allreduce_bytes,
                     "allreduce_with_update", r->info.allreduce_with_update,
                     "busbw_gb_s", isnan(r->busbw_gbs) ? json_null() : json_real(r->busbw_gbs),
                     "graphs", r->info.graphs ? "on" : "off", "step_mode", r->info.mode);
}

static int print_json(const options *o, const char *kind, const row *rows, int n)
{
    json_t *results = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(results, json_row(&rows[i]));
    json_t *doc = json_pack("{s:s, s:i, s:i, s:o}", "backend", kind, "steps", o->steps, "warmup",
                            o->warmup, "results", results);
    int ok = doc && json_dumpf(doc, stdout, JSON_COMPACT | JSON_REAL_PRECISION(7)) == 0;
    json_decref(doc);
    printf("\n");
    return ok ? 0 : TW_EXIT_FAILED;
}

/* Every config on every tower count, in order; the table streams row by row (its header once the
 * first row succeeded). */
static int run_all(const options *o, const char *kind, tw_config *configs, row *rows)
{
    tw_error err;
    tw_error_clear(&err);
    for (int i = 0, k = 0; i < o->n_configs; i++) {
        for (int j = 0; j < o->n_towers; j++) {
            for (int g = 0; g < o->n_graphs; g++, k++) {
                if (measure(o, kind, &configs[i], o->configs[i], o->towers[j], o->graphs[g], &rows[k],
                            &err) != TW_OK) {
                    char msg[1200];
                    tw_error_format(&err, msg, sizeof msg);
                    fprintf(stderr, "tower bench: %s, %d tower(s): %s\n", o->configs[i], o->towers[j],
                            msg);
                    return tw_child_exit_code(&err);
                }
                if (!o->json && k == 0 && tw_world_rank(o->world) == 0)
                    table_header(o, kind);
                if (!o->json && tw_world_rank(o->world) == 0)
                    table_row(&rows[k]);
            }
        }
    }
    return o->json && tw_world_rank(o->world) == 0
               ? print_json(o, kind, rows, o->n_configs * o->n_towers * o->n_graphs)
               : 0;
}

int tw_bench_main(int argc, char **argv)
{
    options o;
    int max, rc = parse_args(argc, argv, &o);
    if (rc != TW_OPT_GO)
        return rc;
    if (o.n_configs == 0)
        default_configs(&o);
    const char *kind = resolve_kind(tw_backend_choices[o.backend], &max);
    tw_config *configs = NULL;
    if ((rc = tower_counts(&o, kind, max)) != 0 || (rc = load_configs(&o, &configs)) != 0)
        return rc;
    static tw_world world;
    tw_error err;
    if (tw_world_init(&world, &err) != TW_OK) {
        fprintf(stderr, "tower bench: %s\n", err.message);
        free(configs);
        return err.status == TW_ERR_UNSUPPORTED ? TW_EXIT_USAGE : tw_child_exit_code(&err);
    }
    o.world = &world;
    row *rows = calloc((size_t)(o.n_configs * o.n_towers * o.n_graphs), sizeof *rows);
    rc = rows ? run_all(&o, kind, configs, rows) : TW_EXIT_OOM;
    free(rows);
    free(configs);
    if (rc != 0 && tw_world_size(&world) > 1)
        tw_world_abort(&world, rc); /* no process waits for this one's next step */
    tw_world_finalize(&world);
    return rc;
}
