/* client_main.c — the `tower` client commands: their options, what each asks the server and what it
 * prints.
 *
 * Owns: the option table of each client command (--server in every one; base/options.h parses them and
 * prints their --help pages), their exit statuses, the runs table, `submit --dataset` (a
 * config's file paths replaced by a registered dataset), following a run over its event stream, the
 * upload's form fields by file kind, the compare view, and `tower sweep`'s subcommands (following a sweep by
 * polling it). Does not own: HTTP (rest.h), the progress line (base/progress.h, the trainer's too), the
 * sweep views (sweep_view.h), a folder sent as a tar (dir_archive.h), the routes (server/API.md), nor exiting
 * (cli/main.c). */
#include "client_main.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "atomic_file.h"
#include "compare.h"
#include "dir_archive.h"
#include "options.h"
#include "progress.h"
#include "rest.h"
#include "sweep_view.h"
#include "table.h"

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

#define MAX_POS 64
#define NO_STEP UINT64_MAX /* download without --step: the latest checkpoint */

/* --format, --weights and --names of download, by the options' indexes (the names: the server's built-in
 * name maps, engine/export_names.h). */
static const char *const FORMATS[] = {"tf", "onnx", NULL};
static const char *const WEIGHTS[] = {"raw", "ema", NULL};
static const char *const NAME_MAPS[] = {"tower", "seed", NULL};
enum { FORMAT_TF, FORMAT_ONNX };

/* The parsed command line of one client command. */
typedef struct {
    const char *server, *dataset, *name, *output, *label_column;
    uint64_t step, steps;     /* download --step (NO_STEP: none), resume --steps (0: none) */
    int format, weights;      /* download: an export instead of the safetensors file (-1: none given) */
    int names;                /* download --names: NAME_MAPS index (-1: none given) */
    const char *validation_split, *split_seed, *class_names; /* upload */
    const char *image_size, *channels, *resize;              /* upload of an image folder */
    const char *test_first, *test_last, *shape;              /* upload: positional split, a TFRecord's shape */
    const char *config;                                      /* sweep create --config */
    int follow, no_wait, json;
    int npos, ntest;
    const char *const *pos;   /* the arguments, in argv */
    const char *test[MAX_POS]; /* upload --test FILE, each */
} args;

typedef struct command command;
struct command {
    const char *name;
    tw_options spec; /* its options, arguments and help page */
    int (*run)(const tw_rest *c, const command *cmd, const args *a);
};

/* ================================ talking to the server ================================ */

/* Reports err (the transport) and returns EXIT_FAILED. */
static int failed(const command *cmd, const tw_error *err)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    fprintf(stderr, "tower %s: %s\n", cmd->name, msg);
    return EXIT_FAILED;
}

/* Reports a non-2xx reply's error envelope and returns EXIT_FAILED. */
static int refused(const command *cmd, const tw_rest_reply *reply)
{
    char msg[1200];
    tw_rest_error_text(reply, msg, sizeof msg);
    fprintf(stderr, "tower %s: %s\n", cmd->name, msg);
    return EXIT_FAILED;
}

/* method path [body] → the reply's JSON (new reference), or NULL with the failure reported in *rc. */
static json_t *call(const tw_rest *c, const command *cmd, const char *method, const char *path,
                    const json_t *body, int *rc)
{
    tw_rest_reply reply;
    tw_error err;
    tw_error_clear(&err);
    json_t *j = NULL;
    if (tw_rest_call(c, method, path, body, &reply, &err) != TW_OK)
        *rc = failed(cmd, &err);
    else if (!tw_rest_ok(&reply))
        *rc = refused(cmd, &reply);
    else if (!(j = tw_rest_json(&reply, path, &err)))
        *rc = failed(cmd, &err);
    tw_rest_reply_free(&reply);
    return j;
}

/* "/api/v1/KIND/ID/SUFFIX" into buf with ID escaped for a URL; -1 when it does not fit. */
static int item_path(char *buf, size_t size, const char *kind, const char *id, const char *suffix)
{
    char *esc = tw_rest_escape(id);
    int n = esc ? snprintf(buf, size, "/api/v1/%s/%s%s", kind, esc, suffix) : -1;
    free(esc);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int run_path(char *buf, size_t size, const char *id, const char *suffix)
{
    return item_path(buf, size, "runs", id, suffix);
}

/* ================================ runs ================================ */

/* A number of a JSON object with printf format fmt (one double) into buf, or NULL when it is absent. */
static const char *num(const json_t *obj, const char *key, const char *fmt, char *buf, size_t size)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_number(v))
        return NULL;
    snprintf(buf, size, fmt, json_number_value(v));
    return buf;
}

static const char *created_text(const json_t *run, char *buf, size_t size)
{
    const json_t *v = json_object_get(run, "created");
    time_t t = (time_t)json_number_value(v);
    struct tm tm;
    if (!json_is_number(v) || !localtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
        return NULL;
    return buf;
}

/* The run's status, a queued run's with its place in the queue ("queued #2"), into buf[size]. */
static const char *status_text(const json_t *run, char *buf, size_t size)
{
    const char *status = json_string_value(json_object_get(run, "status"));
    const json_t *pos = json_object_get(run, "queue_position");
    if (!status || !json_is_integer(pos))
        return status;
    snprintf(buf, size, "%s #%lld", status, (long long)json_integer_value(pos));
    return buf;
}

static int add_run_row(tw_table *t, const json_t *run)
{
    char step[64], loss[32], acc[32], created[32], status[48];
    const json_t *metrics = json_object_get(run, "metrics");
    snprintf(step, sizeof step, "%lld/%lld", (long long)json_integer_value(json_object_get(run, "step")),
             (long long)json_integer_value(json_object_get(run, "steps")));
    const char *cells[] = {
        json_string_value(json_object_get(run, "id")),
        json_string_value(json_object_get(run, "name")),
        status_text(run, status, sizeof status),
        step,
        num(metrics, "loss", "%.4f", loss, sizeof loss),
        num(metrics, "eval_accuracy_ema", "%.4f", acc, sizeof acc) ? acc /* the EMA weights: Tower's answer */
                                                                     : num(metrics, "eval_accuracy", "%.4f(raw)", acc, sizeof acc),
        json_string_value(json_object_get(json_object_get(run, "dataset"), "name")),
        created_text(run, created, sizeof created),
    };
    return tw_table_add(t, cells);
}

static int cmd_runs(const tw_rest *c, const command *cmd, const args *a)
{
    (void)a;
    int rc = EXIT_OK;
    json_t *list = call(c, cmd, "GET", "/api/v1/runs?limit=1000&fields=name,status,queue_position,step,steps,metrics,dataset,created",
                        NULL, &rc); /* what add_run_row shows: no config is read for the list */
    if (!list)
        return rc;
    static const char *const HEADER[] = {"ID", "NAME", "STATUS", "STEP", "LOSS", "EVAL_ACCURACY_EMA",
                                         "DATASET", "CREATED"};
    tw_table t;
    int bad = tw_table_init(&t, 8, HEADER);
    size_t i;
    json_t *run;
    json_array_foreach(json_object_get(list, "runs"), i, run)
        bad |= add_run_row(&t, run);
    if (!bad)
        tw_table_print(&t, stdout);
    tw_table_free(&t);
    json_decref(list);
    if (bad)
        fprintf(stderr, "tower %s: out of memory\n", cmd->name);
    return bad ? EXIT_FAILED : EXIT_OK;
}

/* ================================ follow ================================ */

/* What following a run's event stream has seen. */
typedef struct {
    int terminal;  /* render a progress line (stdout is a terminal) instead of JSON lines */
    int data;      /* the current event is a "run" event */
    json_t *last;  /* the latest run object (owned) */
    int64_t shown; /* the last step rendered, -1 none */
} follower;

static void render_run(follower *f, const json_t *run)
{
    const json_t *m = json_object_get(run, "metrics");
    int64_t step = json_integer_value(json_object_get(run, "step"));
    if (!f->terminal) {
        json_dumpf(run, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        fflush(stdout);
    } else if (json_is_number(json_object_get(m, "loss")) && step != f->shown) {
        tw_progress_line(stdout, step, json_integer_value(json_object_get(run, "steps")),
                          json_number_value(json_object_get(m, "examples_per_sec")),
                          json_number_value(json_object_get(m, "loss")),
                          json_number_value(json_object_get(run, "eta_s")));
        f->shown = step;
    }
}

/* One line of the event stream: "event: NAME", "data: JSON" or a blank line. */
static int on_event_line(const char *line, void *ctx)
{
    follower *f = ctx;
    if (!strncmp(line, "event:", 6)) {
        f->data = !strcmp(line + 6 + strspn(line + 6, " "), "run");
        return 0;
    }
    if (strncmp(line, "data:", 5) || !f->data)
        return 0;
    json_t *run = json_loads(line + 5, 0, NULL);
    if (run) {
        json_decref(f->last);
        f->last = run;
        render_run(f, run);
    }
    return 0;
}

/* The closing line on a terminal: "RUN STATUS at step K: eval accuracy A, loss X". */
static void print_outcome(const json_t *run)
{
    const json_t *m = json_object_get(run, "metrics");
    char acc[32], loss[32];
    tw_progress_clear(stdout);
    printf("%s %s at step %lld", json_string_value(json_object_get(run, "id")),
           json_string_value(json_object_get(run, "status")),
           (long long)json_integer_value(json_object_get(run, "step")));
    if (num(m, "eval_accuracy_ema", "%.4f", acc, sizeof acc))
        printf(": eval accuracy %s (EMA)", acc);
    else if (num(m, "eval_accuracy", "%.4f", acc, sizeof acc))
        printf(": eval accuracy %s (raw)", acc);
    if (num(m, "loss", "%.4f", loss, sizeof loss))
        printf(", loss %s", loss);
    const json_t *reason = json_object_get(run, "reason");
    if (json_is_string(reason))
        printf(" (%s)", json_string_value(reason));
    printf("\n");
}

/* Follows run id until its event stream ends; 0 when it succeeded. */
static int follow_run(const tw_rest *c, const command *cmd, const char *id)
{
    char path[512];
    if (run_path(path, sizeof path, id, "/events"))
        return tw_options_error(&cmd->spec, "run id too long: %s", id);
    follower f = {.terminal = isatty(fileno(stdout)), .shown = -1};
    tw_rest_reply reply;
    tw_error err;
    tw_error_clear(&err);
    int rc = EXIT_OK;
    if (tw_rest_stream(c, path, on_event_line, &f, &reply, &err) != TW_OK)
        rc = failed(cmd, &err);
    else if (!tw_rest_ok(&reply))
        rc = refused(cmd, &reply);
    tw_rest_reply_free(&reply);
    if (rc == EXIT_OK && f.terminal && f.last)
        print_outcome(f.last);
    const char *status = json_string_value(json_object_get(f.last, "status"));
    if (rc == EXIT_OK && (!status || strcmp(status, "succeeded")))
        rc = EXIT_FAILED;
    json_decref(f.last);
    return rc;
}

/* ================================ submit ================================ */

/* The dataset keys that name files: `tower train` reads them, the API refuses them (and "shape", which
 * describes those files: a registered dataset knows its own). */
static const char *const PATH_KEYS[] = {"train", "test", "shape"};

/* Replaces cfg's "dataset" with {"name": name, ...its other keys as overrides}. */
static int use_dataset(json_t *cfg, const char *name)
{
    json_t *old = json_object_get(cfg, "dataset");
    json_t *ds = json_is_object(old) ? json_deep_copy(old) : json_object();
    for (size_t i = 0; ds && i < sizeof PATH_KEYS / sizeof PATH_KEYS[0]; i++)
        json_object_del(ds, PATH_KEYS[i]);
    return ds && !json_object_set_new(ds, "name", json_string(name)) &&
                   !json_object_set_new(cfg, "dataset", ds)
               ? 0
               : -1;
}

/* The reply's "warnings" (e.g. the dataset has no test split), one "tower submit: warning: ..." line each on
 * stderr: stdout keeps the run id alone. */
static void print_warnings(const command *cmd, const json_t *reply)
{
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(reply, "warnings"), i, w)
        if (json_is_string(w))
            fprintf(stderr, "tower %s: warning: %s\n", cmd->name, json_string_value(w));
}

/* The JSON object of file path into *out (new reference); EXIT_USAGE (reported) when it cannot be read or is
 * not an object. */
static int load_object(const command *cmd, const char *path, json_t **out)
{
    json_error_t je;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(*out))
        return EXIT_OK;
    fprintf(stderr, "tower %s: %s:%d: %s\n", cmd->name, path, je.line, *out ? "not a JSON object" : je.text);
    json_decref(*out);
    *out = NULL;
    return EXIT_USAGE;
}

static int cmd_submit(const tw_rest *c, const command *cmd, const args *a)
{
    json_t *cfg;
    int rc = load_object(cmd, a->pos[0], &cfg);
    if (rc)
        return rc;
    if ((a->dataset && use_dataset(cfg, a->dataset)) ||
        (a->name && json_object_set_new(cfg, "name", json_string(a->name)))) {
        json_decref(cfg);
        return tw_options_error(&cmd->spec, "cannot use --dataset or --name (out of memory or not UTF-8)");
    }
    json_t *created = call(c, cmd, "POST", "/api/v1/runs", cfg, &rc);
    json_decref(cfg);
    if (!created)
        return rc;
    const char *id = json_string_value(json_object_get(created, "id"));
    printf("%s\n", id ? id : "?");
    fflush(stdout);
    print_warnings(cmd, created);
    if (a->follow && id)
        rc = follow_run(c, cmd, id);
    json_decref(created);
    return rc;
}

/* ================================ logs ================================ */

/* Following a log: the route returns the last lines of a file that only grows, so what is new is what
 * lies past the bytes already printed (while the log is under the route's 100000-line tail cap). */
typedef struct {
    const tw_rest *c;
    const command *cmd;
    char path[512];
    size_t printed; /* bytes of the log already printed */
    int rc;
} log_follower;

/* Prints what the log holds past what was printed. */
static int print_log(log_follower *l)
{
    tw_rest_reply reply;
    tw_error err;
    tw_error_clear(&err);
    if (tw_rest_call(l->c, "GET", l->path, NULL, &reply, &err) != TW_OK)
        l->rc = failed(l->cmd, &err);
    else if (!tw_rest_ok(&reply))
        l->rc = refused(l->cmd, &reply);
    else if (reply.len > l->printed) {
        fwrite(reply.body + l->printed, 1, reply.len - l->printed, stdout);
        fflush(stdout);
        l->printed = reply.len;
    }
    tw_rest_reply_free(&reply);
    return l->rc != EXIT_OK;
}

/* Each event of the run's stream: print the log's new lines (stop when that fails). */
static int on_log_event(const char *line, void *ctx)
{
    return strncmp(line, "data:", 5) ? 0 : print_log(ctx);
}

static int cmd_logs(const tw_rest *c, const command *cmd, const args *a)
{
    log_follower l = {.c = c, .cmd = cmd, .rc = EXIT_OK};
    char events[512];
    if (run_path(l.path, sizeof l.path, a->pos[0], "/log?tail=100000") ||
        run_path(events, sizeof events, a->pos[0], "/events"))
        return tw_options_error(&cmd->spec, "run id too long: %s", a->pos[0]);
    if (print_log(&l) || !a->follow)
        return l.rc;
    tw_rest_reply reply;
    tw_error err;
    tw_error_clear(&err);
    if (tw_rest_stream(c, events, on_log_event, &l, &reply, &err) != TW_OK)
        l.rc = failed(cmd, &err);
    else if (!tw_rest_ok(&reply))
        l.rc = refused(cmd, &reply);
    tw_rest_reply_free(&reply);
    if (l.rc == EXIT_OK)
        print_log(&l); /* the lines written after the last event */
    return l.rc;
}

/* ================================ cancel, resume ================================ */

/* POST /runs/RUN/ACTION [body]; prints "RUN STATUS". */
static int run_action(const tw_rest *c, const command *cmd, const char *id, const char *action,
                      const json_t *body)
{
    char path[512];
    if (run_path(path, sizeof path, id, action))
        return tw_options_error(&cmd->spec, "run id too long: %s", id);
    int rc = EXIT_OK;
    json_t *run = call(c, cmd, "POST", path, body, &rc);
    if (!run)
        return rc;
    const char *rid = json_string_value(json_object_get(run, "id"));
    const char *status = json_string_value(json_object_get(run, "status"));
    printf("%s %s\n", rid ? rid : id, status ? status : "?");
    json_decref(run);
    return rc;
}

static int cmd_cancel(const tw_rest *c, const command *cmd, const args *a)
{
    return run_action(c, cmd, a->pos[0], "/cancel", NULL);
}

static int cmd_resume(const tw_rest *c, const command *cmd, const args *a)
{
    json_t *body = a->steps ? json_pack("{s:I}", "steps", (json_int_t)a->steps) : json_object();
    int rc = run_action(c, cmd, a->pos[0], "/resume", body);
    json_decref(body);
    if (rc == EXIT_OK && a->follow)
        rc = follow_run(c, cmd, a->pos[0]);
    return rc;
}

/* ================================ download ================================ */

/* The route and the default file name of a download: the checkpoint itself, or with --format its export
 * (GET /runs/{id}/export). Returns 0, or EXIT_USAGE after reporting. */
static int download_target(const command *cmd, const args *a, char *path, size_t size, char *out_name,
                           size_t out_size)
{
    const char *id = a->pos[0], *weights = a->weights >= 0 ? WEIGHTS[a->weights] : NULL;
    const char *names = a->names >= 0 ? NAME_MAPS[a->names] : NULL;
    char at[32] = "latest", suffix[160];
    if (weights && a->format != FORMAT_ONNX)
        return tw_options_error(&cmd->spec, "--weights applies to --format onnx; got --weights %s", weights);
    if (names && a->format != FORMAT_TF)
        return tw_options_error(&cmd->spec, "--names applies to --format tf; got --names %s", names);
    if (a->step != NO_STEP)
        snprintf(at, sizeof at, "%llu", (unsigned long long)a->step);
    if (a->format >= 0)
        snprintf(suffix, sizeof suffix, "/export?format=%s&step=%s%s%s%s%s", FORMATS[a->format], at,
                 weights ? "&weights=" : "", weights ? weights : "", names ? "&names=" : "", names ? names : "");
    else
        snprintf(suffix, sizeof suffix, "/checkpoints/%s", at);
    if (run_path(path, size, id, suffix))
        return tw_options_error(&cmd->spec, "run id too long: %s", id);
    snprintf(out_name, out_size, "%s-%s%s%s.%s", id, at, weights ? "-" : "", weights ? weights : "",
             a->format < 0 ? "safetensors" : a->format == FORMAT_TF ? "tar" : "onnx");
    return 0;
}

static int cmd_download(const tw_rest *c, const command *cmd, const args *a)
{
    char path[512], out_name[600];
    int bad = download_target(cmd, a, path, sizeof path, out_name, sizeof out_name);
    if (bad)
        return bad;
    const char *out_path = a->output ? a->output : out_name;
    tw_error err;
    tw_error_clear(&err);
    tw_atomic_file *f = NULL;
    if (tw_atomic_file_create(out_path, &f, &err) != TW_OK)
        return failed(cmd, &err);
    int fd = dup(tw_atomic_file_fd(f));
    FILE *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
    tw_rest_reply reply = {0};
    int rc = EXIT_OK;
    if (!out)
        rc = failed(cmd, (tw_error_errno(&err, out_path, "cannot open"), &err));
    else if (tw_rest_download(c, path, out, &reply, &err) != TW_OK)
        rc = failed(cmd, &err);
    else if (!tw_rest_ok(&reply))
        rc = refused(cmd, &reply);
    if (out && fclose(out) && rc == EXIT_OK)
        rc = failed(cmd, (tw_error_errno(&err, out_path, "cannot write"), &err));
    if (rc == EXIT_OK && tw_atomic_file_commit(f, &err) != TW_OK)
        rc = failed(cmd, &err);
    tw_atomic_file_destroy(f); /* not committed: the temporary file goes */
    tw_rest_reply_free(&reply);
    if (rc == EXIT_OK)
        printf("%s\n", out_path);
    return rc;
}

/* ================================ upload ================================ */

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

static const char *base_name(const char *path)
{
    return strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
}

/* The test split's files say so in their base name ("t10k-...", "...test..."). */
static int is_test_file(const char *path)
{
    const char *base = base_name(path);
    return !strncmp(base, "t10k", 4) || strstr(base, "test") != NULL;
}

/* Whether a .npy file is named as the labels ("...label..."). */
static int npy_labels(const char *path)
{
    return ends_with(path, ".npy") && strstr(base_name(path), "label");
}

/* The form field of an upload's file, by its kind (server/API.md "Uploads"), or NULL. Of two .npy files
 * the one named "...label..." is the labels (labelled: one is), else the second one (npy_seen: how many
 * came before it). test: the file was given with --test (IDX and TFRecord files also say so in their
 * names). */
static const char *upload_field(const char *path, int npy_seen, int labelled, int test)
{
    const char *base = base_name(path);
    test |= !ends_with(base, ".npy") && !ends_with(base, ".csv") && is_test_file(path);
    if (strstr(base, "idx3-ubyte"))
        return test ? "test_images" : "images";
    if (strstr(base, "idx1-ubyte"))
        return test ? "test_labels" : "labels";
    if (ends_with(base, ".npy"))
        return (labelled ? npy_labels(base) : npy_seen == 1) ? (test ? "test_labels" : "labels")
                                                             : (test ? "test_features" : "features");
    if (ends_with(base, ".csv"))
        return test ? "test_csv" : "csv";
    if (strstr(base, ".tfrecord"))
        return test ? "test_tfrecord" : "tfrecord";
    if (!test && (ends_with(base, ".tar") || ends_with(base, ".tar.gz") || ends_with(base, ".tgz") ||
                  ends_with(base, ".zip")))
        return "archive";
    return NULL;
}

/* The parts of files[n] (the training files, or with test the --test ones) appended to parts[*count]. */
static int add_parts(const command *cmd, const char *const *files, int n, int test, tw_rest_part *parts,
                     int *count)
{
    int npy = 0, labelled = 0;
    for (int i = 0; i < n; i++)
        labelled |= npy_labels(files[i]);
    for (int i = 0; i < n; i++) {
        const char *field = upload_field(files[i], npy, labelled, test);
        if (!field)
            return tw_options_error(&cmd->spec, "not an IDX, .npy, .csv, .tfrecord or archive (.tar, .tar.gz, .zip) "
                                    "file, nor a folder: %s", files[i]);
        if (*count == MAX_POS)
            return tw_options_error(&cmd->spec, "too many files");
        npy += ends_with(files[i], ".npy");
        parts[(*count)++] = (tw_rest_part){.field = field, .path = files[i]};
    }
    return 0;
}

/* "key=VALUE" (escaped; after "&" unless buf ends with "?") appended to buf when value is given; -1 when it
 * does not fit. */
static int add_query(char *buf, size_t size, const char *key, const char *value)
{
    if (!value)
        return 0;
    char *esc = tw_rest_escape(value);
    size_t len = strlen(buf);
    int n = esc ? snprintf(buf + len, size - len, "%s%s=%s", len && buf[len - 1] != '?' ? "&" : "", key, esc) : -1;
    free(esc);
    return n < 0 || (size_t)n >= size - len ? -1 : 0;
}

/* What a ready dataset is, on one line: "ID NAME ready: csv, 240 train + 60 test examples, features
 * f1, f2, classes a, b"; a TFRecord's also "; each 28x28x1 (the rule that gave the shape)". */
static void print_dataset(const json_t *d)
{
    printf("%s %s %s", json_string_value(json_object_get(d, "id")), json_string_value(json_object_get(d, "name")),
           json_string_value(json_object_get(d, "status")));
    const char *source = json_string_value(json_object_get(d, "source"));
    const json_t *test = json_object_get(d, "test_examples");
    printf(": %s, %lld train", source ? source : "?", (long long)json_integer_value(json_object_get(d, "train_examples")));
    if (json_is_integer(test))
        printf(" + %lld test", (long long)json_integer_value(test));
    printf(" examples%s", json_is_integer(test) ? "" : " (no test split: runs on it are never evaluated)");
    const char *rule = json_string_value(json_object_get(d, "shape_rule"));
    size_t i;
    json_t *v;
    json_array_foreach(rule ? json_object_get(d, "shape") : NULL, i, v)
        printf("%s%lld", i ? "x" : "; each ", (long long)json_integer_value(v));
    if (rule)
        printf(" (%s)", rule);
    static const char *const LISTS[][2] = {{"feature_names", "features"}, {"class_names", "classes"}};
    for (size_t l = 0; l < 2; l++) {
        const json_t *list = json_object_get(d, LISTS[l][0]);
        json_array_foreach(list, i, v) printf("%s%s", i ? ", " : l ? "; classes " : "; features ",
                                              json_string_value(v));
    }
    printf("\n");
}

/* Polls the dataset until it is no longer converting (saying so once on a terminal); 0 when it is
 * ready. */
static int wait_dataset(const tw_rest *c, const command *cmd, const char *id)
{
    char *esc = tw_rest_escape(id), path[512];
    snprintf(path, sizeof path, "/api/v1/datasets/%s", esc ? esc : "");
    free(esc);
    if (isatty(fileno(stderr)))
        fprintf(stderr, "tower %s: %s converting...\n", cmd->name, id);
    for (;;) {
        int rc = EXIT_OK;
        json_t *d = call(c, cmd, "GET", path, NULL, &rc);
        if (!d)
            return rc;
        const char *status = json_string_value(json_object_get(d, "status"));
        int converting = status && !strcmp(status, "converting");
        if (!converting && status && !strcmp(status, "ready"))
            print_dataset(d);
        else if (!converting) {
            const char *msg = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
            fprintf(stderr, "tower %s: dataset %s %s: %s\n", cmd->name, id, status ? status : "?", msg ? msg : "");
            rc = EXIT_FAILED;
        }
        json_decref(d);
        if (!converting)
            return rc;
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL); /* a client's poll interval */
    }
}

/* The upload's route with its options in the query; class names that name a readable file go as the part
 * "classes" instead. Returns 0, or EXIT_USAGE after reporting. */
static int upload_path_of(const command *cmd, const args *a, char *path, size_t size, tw_rest_part *parts,
                          int *n)
{
    int file_names = a->class_names && access(a->class_names, R_OK) == 0;
    if (file_names && *n == MAX_POS)
        return tw_options_error(&cmd->spec, "too many files");
    if (file_names)
        parts[(*n)++] = (tw_rest_part){.field = "classes", .path = a->class_names};
    snprintf(path, size, "/api/v1/datasets?");
    if (add_query(path, size, "name", a->pos[0]) || add_query(path, size, "label_column", a->label_column) ||
        add_query(path, size, "validation_split", a->validation_split) ||
        add_query(path, size, "split_seed", a->split_seed) || add_query(path, size, "test_first", a->test_first) ||
        add_query(path, size, "test_last", a->test_last) || add_query(path, size, "shape", a->shape) ||
        add_query(path, size, "class_names", file_names ? NULL : a->class_names) ||
        add_query(path, size, "image_size", a->image_size) || add_query(path, size, "channels", a->channels) ||
        add_query(path, size, "resize", a->resize))
        return tw_options_error(&cmd->spec, "the options are too long");
    return 0;
}

static size_t read_folder(char *buf, size_t size, void *ar) { return tw_dir_archive_read(ar, buf, size); }

/* The upload of one folder: a tar of it made as it is sent (dir_archive.h), as the part "archive". Returns 0,
 * or the exit status after reporting. */
static int folder_part(const command *cmd, const char *dir, tw_dir_archive **ar, tw_rest_part *part)
{
    tw_error err;
    if (tw_dir_archive_open(dir, ar, &err) != TW_OK)
        return failed(cmd, &err);
    if (tw_dir_archive_skipped(*ar))
        fprintf(stderr, "tower %s: %s: %zu entries that are not regular files (links, ...) left out\n", cmd->name,
                dir, tw_dir_archive_skipped(*ar));
    *part = (tw_rest_part){"archive", "folder.tar", read_folder, *ar};
    return 0;
}

static int is_folder(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The upload; *ar: the folder's archive when one is sent (the caller closes it). */
static int upload_with(const tw_rest *c, const command *cmd, const args *a, tw_dir_archive **ar)
{
    tw_rest_part parts[MAX_POS];
    int n = 0;
    char path[4096];
    int folder = a->npos == 2 && is_folder(a->pos[1]);
    int bad = folder ? folder_part(cmd, a->pos[1], ar, &parts[n++]) : add_parts(cmd, a->pos + 1, a->npos - 1, 0, parts, &n);
    if (!bad)
        bad = add_parts(cmd, a->test, a->ntest, 1, parts, &n);
    if (!bad)
        bad = upload_path_of(cmd, a, path, sizeof path, parts, &n);
    if (bad)
        return bad;
    tw_rest_reply reply;
    tw_error err;
    tw_error_clear(&err);
    int rc = EXIT_OK;
    json_t *d = NULL;
    if (tw_rest_upload(c, path, parts, n, &reply, &err) != TW_OK)
        rc = failed(cmd, *ar && tw_dir_archive_error(*ar)->status != TW_OK ? tw_dir_archive_error(*ar) : &err);
    else if (!tw_rest_ok(&reply))
        rc = refused(cmd, &reply);
    else if (!(d = tw_rest_json(&reply, path, &err)))
        rc = failed(cmd, &err);
    tw_rest_reply_free(&reply);
    const char *id = json_string_value(json_object_get(d, "id"));
    if (d && a->no_wait)
        printf("%s %s\n", id ? id : "?", json_string_value(json_object_get(d, "status")));
    else if (d && id)
        rc = wait_dataset(c, cmd, id);
    json_decref(d);
    return rc;
}

static int cmd_upload(const tw_rest *c, const command *cmd, const args *a)
{
    tw_dir_archive *ar = NULL;
    int rc = upload_with(c, cmd, a, &ar);
    tw_dir_archive_close(ar);
    return rc;
}

/* ================================ compare ================================ */

static int cmd_compare(const tw_rest *c, const command *cmd, const args *a)
{
    json_t *runs[MAX_POS] = {0};
    int n = 0, rc = EXIT_OK;
    for (; n < a->npos; n++) {
        char path[512];
        if (run_path(path, sizeof path, a->pos[n], "")) {
            rc = tw_options_error(&cmd->spec, "run id too long: %s", a->pos[n]);
            break;
        }
        if (!(runs[n] = call(c, cmd, "GET", path, NULL, &rc)))
            break;
    }
    if (rc == EXIT_OK && tw_compare_print(runs, n, stdout)) {
        fprintf(stderr, "tower %s: out of memory\n", cmd->name);
        rc = EXIT_FAILED;
    }
    for (int r = 0; r < n; r++)
        json_decref(runs[r]);
    return rc;
}

/* ================================ sweep ================================ */

/* method path (no body): the 2xx reply in *reply (caller frees it in any case), else EXIT_FAILED reported. */
static int call_reply(const tw_rest *c, const command *cmd, const char *method, const char *path,
                      tw_rest_reply *reply)
{
    tw_error err;
    tw_error_clear(&err);
    if (tw_rest_call(c, method, path, NULL, reply, &err) != TW_OK)
        return failed(cmd, &err);
    return tw_rest_ok(reply) ? EXIT_OK : refused(cmd, reply);
}

/* The POST body of `sweep create`: SPEC.json with --config, --dataset and --name applied. */
static int sweep_body(const command *cmd, const args *a, json_t **body)
{
    json_t *cfg = NULL;
    int rc = load_object(cmd, a->pos[0], body);
    if (!rc && a->config && !(rc = load_object(cmd, a->config, &cfg)) && json_object_set_new(*body, "config", cfg))
        rc = tw_options_error(&cmd->spec, "cannot use --config (out of memory)");
    json_t *base = json_object_get(*body, "config");
    if (!rc && a->dataset && (!json_is_object(base) || use_dataset(base, a->dataset)))
        rc = tw_options_error(&cmd->spec, "--dataset needs a base config (the spec's \"config\" object, or --config "
                              "RUN.json)");
    if (!rc && a->name && json_object_set_new(*body, "name", json_string(a->name)))
        rc = tw_options_error(&cmd->spec, "cannot use --name (not UTF-8): %s", a->name);
    if (rc) {
        json_decref(*body);
        *body = NULL;
    }
    return rc;
}

/* What following a sweep has printed. */
typedef struct {
    int terminal; /* a line per trial change and a progress line (stdout is a terminal), else JSON lines */
    json_t *shown; /* {"N": what was printed of trial N} (owned) */
} sweep_follower;

static void print_json_line(const json_t *j)
{
    json_dumpf(j, stdout, JSON_COMPACT);
    fputc('\n', stdout);
    fflush(stdout);
}

/* What of a trial is printed again when it changes: on a terminal its run's status, its rung and results (not
 * every step); piped, all of it. */
static json_t *trial_seen(const sweep_follower *f, json_t *trial)
{
    if (!f->terminal)
        return json_incref(trial);
    return json_pack("{s:O*, s:O*, s:O*}", "status", json_object_get(json_object_get(trial, "run"), "status"),
                     "rung", json_object_get(trial, "rung"), "results", json_object_get(trial, "results"));
}

/* Prints the trials of sweep that changed since they were last printed. */
static void print_changes(sweep_follower *f, const json_t *sweep)
{
    size_t i;
    json_t *trial;
    json_array_foreach(json_object_get(sweep, "trials"), i, trial) {
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)json_integer_value(json_object_get(trial, "trial")));
        json_t *seen = trial_seen(f, trial);
        if (!seen || json_equal(seen, json_object_get(f->shown, key))) {
            json_decref(seen);
            continue;
        }
        json_object_set_new(f->shown, key, seen);
        if (!f->terminal) {
            print_json_line(trial);
            continue;
        }
        tw_progress_clear(stdout);
        tw_sweep_view_print_trial(sweep, trial, stdout);
    }
}

/* The end of following: on a terminal the closing lines; piped, the sweep without its trials (each was
 * printed as it changed). */
static void print_sweep_end(const sweep_follower *f, const json_t *sweep)
{
    if (f->terminal) {
        tw_progress_clear(stdout);
        tw_sweep_view_print_outcome(sweep, stdout);
        return;
    }
    json_t *rest = json_copy((json_t *)sweep);
    json_object_del(rest, "trials");
    print_json_line(rest ? rest : sweep);
    json_decref(rest);
}

/* Polls the sweep (as created; borrowed) every second until it stops running; 0 when it succeeded with a
 * best trial. */
static int follow_sweep(const tw_rest *c, const command *cmd, const json_t *created)
{
    char path[512];
    const char *id = json_string_value(json_object_get(created, "id"));
    if (!id || item_path(path, sizeof path, "sweeps", id, ""))
        return tw_options_error(&cmd->spec, "the server's reply names no sweep id");
    sweep_follower f = {.terminal = isatty(fileno(stdout)), .shown = json_object()};
    json_t *sweep = json_incref((json_t *)created);
    const char *status = NULL;
    int rc = EXIT_OK;
    while (sweep) {
        print_changes(&f, sweep);
        status = json_string_value(json_object_get(sweep, "status"));
        if (!status || strcmp(status, "running"))
            break;
        if (f.terminal)
            tw_sweep_view_print_progress(sweep, stdout);
        nanosleep(&(struct timespec){.tv_sec = 1}, NULL); /* the poll interval: a sweep has no event stream */
        if (f.terminal)
            tw_progress_clear(stdout); /* an error goes on a line of its own */
        fflush(stdout);
        json_decref(sweep);
        sweep = call(c, cmd, "GET", path, NULL, &rc);
    }
    if (sweep) {
        print_sweep_end(&f, sweep);
        if (!status || strcmp(status, "succeeded") || !json_is_object(json_object_get(sweep, "best")))
            rc = EXIT_FAILED;
    }
    json_decref(sweep);
    json_decref(f.shown);
    return rc;
}

static int cmd_sweep_create(const tw_rest *c, const command *cmd, const args *a)
{
    json_t *body;
    int rc = sweep_body(cmd, a, &body);
    if (rc)
        return rc;
    json_t *sweep = call(c, cmd, "POST", "/api/v1/sweeps", body, &rc);
    json_decref(body);
    if (!sweep)
        return rc;
    tw_sweep_view_print_created(sweep, stdout);
    fflush(stdout);
    if (a->follow)
        rc = follow_sweep(c, cmd, sweep);
    json_decref(sweep);
    return rc;
}

/* The list's sweep as GET /sweeps/{id} shows it (its trials and best), or NULL: *rc set (reported), or left
 * EXIT_OK when the sweep was deleted since the list was read (its row is left out). */
static json_t *listed_sweep(const tw_rest *c, const command *cmd, const json_t *row, int *rc)
{
    char path[512];
    const char *id = json_string_value(json_object_get(row, "id"));
    tw_rest_reply reply = {0};
    tw_error err;
    tw_error_clear(&err);
    json_t *sweep = NULL;
    if (!id || item_path(path, sizeof path, "sweeps", id, ""))
        *rc = tw_options_error(&cmd->spec, "the server listed a sweep without a usable id");
    else if (tw_rest_call(c, "GET", path, NULL, &reply, &err) != TW_OK)
        *rc = failed(cmd, &err);
    else if (reply.http != 404 && !tw_rest_ok(&reply))
        *rc = refused(cmd, &reply);
    else if (reply.http != 404 && !(sweep = tw_rest_json(&reply, path, &err)))
        *rc = failed(cmd, &err);
    tw_rest_reply_free(&reply);
    return sweep;
}

static int cmd_sweep_list(const tw_rest *c, const command *cmd, const args *a)
{
    (void)a;
    int rc = EXIT_OK;
    json_t *list = call(c, cmd, "GET", "/api/v1/sweeps", NULL, &rc);
    if (!list)
        return rc;
    static const char *const HEADER[] = TW_SWEEP_VIEW_LIST_HEADER;
    tw_table t;
    int bad = tw_table_init(&t, TW_SWEEP_VIEW_LIST_COLS, HEADER);
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(list, "sweeps"), i, row) {
        json_t *sweep = listed_sweep(c, cmd, row, &rc);
        if (rc != EXIT_OK)
            break;
        if (sweep)
            bad |= tw_sweep_view_add_list_row(&t, row, sweep);
        json_decref(sweep);
    }
    if (!bad && rc == EXIT_OK)
        tw_table_print(&t, stdout);
    tw_table_free(&t);
    json_decref(list);
    if (bad)
        fprintf(stderr, "tower %s: out of memory\n", cmd->name);
    return bad ? EXIT_FAILED : rc;
}

static int cmd_sweep_show(const tw_rest *c, const command *cmd, const args *a)
{
    char path[512];
    if (item_path(path, sizeof path, "sweeps", a->pos[0], ""))
        return tw_options_error(&cmd->spec, "sweep name too long: %s", a->pos[0]);
    tw_rest_reply reply = {0};
    int rc = call_reply(c, cmd, "GET", path, &reply);
    json_t *sweep = NULL;
    tw_error err;
    tw_error_clear(&err);
    if (rc == EXIT_OK && a->json) /* the server's JSON as it sent it */
        printf("%.*s%s", (int)reply.len, reply.body, reply.len && reply.body[reply.len - 1] == '\n' ? "" : "\n");
    else if (rc == EXIT_OK && !(sweep = tw_rest_json(&reply, path, &err)))
        rc = failed(cmd, &err);
    else if (rc == EXIT_OK && tw_sweep_view_print_show(sweep, stdout)) {
        fprintf(stderr, "tower %s: out of memory\n", cmd->name);
        rc = EXIT_FAILED;
    }
    json_decref(sweep);
    tw_rest_reply_free(&reply);
    return rc;
}

/* POST /sweeps/SWEEP/ACTION; prints "ID NAME STATUS". */
static int sweep_action(const tw_rest *c, const command *cmd, const char *ref, const char *action)
{
    char path[512];
    if (item_path(path, sizeof path, "sweeps", ref, action))
        return tw_options_error(&cmd->spec, "sweep name too long: %s", ref);
    int rc = EXIT_OK;
    json_t *sweep = call(c, cmd, "POST", path, NULL, &rc);
    if (!sweep)
        return rc;
    const char *id = json_string_value(json_object_get(sweep, "id"));
    const char *name = json_string_value(json_object_get(sweep, "name"));
    const char *status = json_string_value(json_object_get(sweep, "status"));
    printf("%s %s %s\n", id ? id : "?", name ? name : ref, status ? status : "?");
    json_decref(sweep);
    return rc;
}

static int cmd_sweep_cancel(const tw_rest *c, const command *cmd, const args *a)
{
    return sweep_action(c, cmd, a->pos[0], "/cancel");
}

static int cmd_sweep_resume(const tw_rest *c, const command *cmd, const args *a)
{
    return sweep_action(c, cmd, a->pos[0], "/resume");
}

static int cmd_sweep_delete(const tw_rest *c, const command *cmd, const args *a)
{
    char path[512];
    if (item_path(path, sizeof path, "sweeps", a->pos[0], ""))
        return tw_options_error(&cmd->spec, "sweep name too long: %s", a->pos[0]);
    tw_rest_reply reply = {0};
    int rc = call_reply(c, cmd, "DELETE", path, &reply);
    tw_rest_reply_free(&reply);
    if (rc == EXIT_OK)
        printf("%s deleted\n", a->pos[0]);
    return rc;
}

/* ================================ the commands ================================ */

#define SERVER_OPTION                                                                                        \
    {.name = "server", .kind = TW_OPT_STRING, .offset = offsetof(args, server), .arg = "URL",                 \
     .help = "the tower serve to talk to (default $TOWER_URL, else " TW_REST_DEFAULT_URL ");\n"               \
             "$TOWER_TOKEN is sent as 'Authorization: Bearer TOKEN'"}
#define FOLLOW_OPTION(text) {.name = "follow", .kind = TW_OPT_FLAG, .offset = offsetof(args, follow), .help = text}

static const tw_opt SERVER_ONLY[] = {SERVER_OPTION, {0}};

static const tw_opt SUBMIT[] = {
    {.name = "dataset", .kind = TW_OPT_STRING, .offset = offsetof(args, dataset), .arg = "NAME",
     .help = "train on the registered dataset NAME (id or name): replaces the config's\n"
             "\"dataset\" file paths (train, test, shape), keeping its other keys (scale,\n"
             "shuffle_buffer, ...) as overrides, so examples/*.json submit as they are"},
    {.name = "name", .kind = TW_OPT_STRING, .offset = offsetof(args, name), .arg = "N", .help = "the run's name"},
    FOLLOW_OPTION("then follow the run to its end: a live progress line on a terminal, else one\n"
                  "JSON run object per change; exit 1 unless it succeeded"),
    SERVER_OPTION,
    {0},
};

static const tw_opt LOGS[] = {
    {.name = "follow", .letter = 'f', .kind = TW_OPT_FLAG, .offset = offsetof(args, follow),
     .help = "keep printing new lines until the run ends"},
    SERVER_OPTION,
    {0},
};

static const tw_opt RESUME[] = {
    {.name = "steps", .kind = TW_OPT_U64, .offset = offsetof(args, steps), .arg = "N", .min = 1, .max = 1e18,
     .help = "train to N steps in all (more than the config said)"},
    FOLLOW_OPTION("then follow it to its end, as submit --follow"),
    SERVER_OPTION,
    {0},
};

static const tw_opt DOWNLOAD[] = {
    {.name = "step", .kind = TW_OPT_U64, .offset = offsetof(args, step), .arg = "S", .min = 0, .max = 1e18,
     .help = "the checkpoint of step S (default: the latest)"},
    {.name = "format", .kind = TW_OPT_CHOICE, .offset = offsetof(args, format), .arg = "F", .names = FORMATS,
     .help = "tf: a TensorFlow checkpoint, as a tar of NAME.index, NAME.data-00000-of-00001\n"
             "and checkpoint; onnx: an ONNX inference graph (what 'tower export' writes)"},
    {.name = "weights", .kind = TW_OPT_CHOICE, .offset = offsetof(args, weights), .arg = "W", .names = WEIGHTS,
     .help = "onnx: ema (default, when the run kept an EMA) or raw weights"},
    {.name = "names", .kind = TW_OPT_CHOICE, .offset = offsetof(args, names), .arg = "MAP", .names = NAME_MAPS,
     .help = "tf: the variables' names: tower (default: layer1/weights, an int64 global_step)\n"
             "or seed (the seed program's graph: layer1/w, layer1/bias, an int32 Variable)"},
    {.name = "output", .letter = 'o', .kind = TW_OPT_STRING, .offset = offsetof(args, output), .arg = "F",
     .help = "where to write it (default RUN-latest.safetensors, RUN-S.tar, RUN-S-ema.onnx, ...)"},
    SERVER_OPTION,
    {0},
};

static const tw_opt UPLOAD[] = {
    {.name = "test", .kind = TW_OPT_STRING, .offset = offsetof(args, test), .arg = "FILE", .repeat = MAX_POS,
     .count = offsetof(args, ntest),
     .help = "a file of the test split (as many as its kind needs: a CSV, two .npy, ...)"},
    {.name = "label-column", .kind = TW_OPT_STRING, .offset = offsetof(args, label_column), .arg = "C",
     .help = "the CSV's label column (default: label)"},
    {.name = "validation-split", .kind = TW_OPT_STRING, .offset = offsetof(args, validation_split), .arg = "F",
     .help = "hold out the fraction F (0 < F <= 0.5) of the examples as the test split"},
    {.name = "split-seed", .kind = TW_OPT_STRING, .offset = offsetof(args, split_seed), .arg = "S",
     .help = "the seed of that holdout (default 0)"},
    {.name = "test-first", .kind = TW_OPT_STRING, .offset = offsetof(args, test_first), .arg = "N",
     .help = "hold out the first N examples, in the file's order, as the test split"},
    {.name = "test-last", .kind = TW_OPT_STRING, .offset = offsetof(args, test_last), .arg = "N",
     .help = "hold out the last N examples, in the file's order, as the test split"},
    {.name = "class-names", .kind = TW_OPT_STRING, .offset = offsetof(args, class_names), .arg = "X",
     .help = "the class names: a file (one a line, or a JSON array) or a comma list"},
    {.name = "shape", .kind = TW_OPT_STRING, .offset = offsetof(args, shape), .arg = "DIMS",
     .help = "a TFRecord's per-example shape, e.g. 28x28x1 (default: inferred, the rule named)"},
    {.name = "image-size", .kind = TW_OPT_STRING, .offset = offsetof(args, image_size), .arg = "HxW",
     .help = "an image folder's stored size (one number: a square)"},
    {.name = "channels", .kind = TW_OPT_STRING, .offset = offsetof(args, channels), .arg = "1|3",
     .help = "an image folder's channels: grey or colour (default 3)"},
    {.name = "resize", .kind = TW_OPT_STRING, .offset = offsetof(args, resize), .arg = "crop|pad",
     .help = "crop: the shorter side to the size, the middle kept (default); pad: the longer\n"
             "side to the size, centred on black"},
    {.name = "no-wait", .kind = TW_OPT_FLAG, .offset = offsetof(args, no_wait),
     .help = "return once the upload is accepted (the dataset is still converting)"},
    {.name = "wait", .kind = TW_OPT_CLEAR, .offset = offsetof(args, no_wait),
     .help = "wait for the conversion (the default)"},
    SERVER_OPTION,
    {0},
};

static const tw_opt SWEEP_CREATE[] = {
    {.name = "name", .kind = TW_OPT_STRING, .offset = offsetof(args, name), .arg = "N",
     .help = "the sweep's name (instead of the spec's)"},
    {.name = "config", .kind = TW_OPT_STRING, .offset = offsetof(args, config), .arg = "RUN.json",
     .help = "the base run config, from a file as submit takes one (instead of the spec's)"},
    {.name = "dataset", .kind = TW_OPT_STRING, .offset = offsetof(args, dataset), .arg = "NAME",
     .help = "every trial trains on the registered dataset NAME, as submit --dataset"},
    FOLLOW_OPTION("then follow the sweep to its end, looking every second: on a terminal a line\n"
                  "for each trial as it starts, reaches a rung and ends, under a progress line,\n"
                  "and last the best trial and its values; piped, one JSON trial object per\n"
                  "change and last the sweep (without its trials; its \"best\" is the best\n"
                  "trial); exit 1 unless the sweep succeeded with a best trial"),
    SERVER_OPTION,
    {0},
};

static const tw_opt SWEEP_SHOW[] = {
    {.name = "json", .kind = TW_OPT_FLAG, .offset = offsetof(args, json),
     .help = "print the server's JSON (GET /api/v1/sweeps/SWEEP) instead"},
    SERVER_OPTION,
    {0},
};

static const char EXIT_HELP[] =
    "exit status: 0 done; 1 the server refused (its error message is printed), could not be reached,\n"
    "or a followed run or sweep did not succeed; 2 a usage error.\n";

/* A client command's spec: "tower NAME", its synopsis, what it does, its options and arguments. */
#define SPEC(cmd, synopsis, text, table, operand_names, least, most)                                       \
    {.command = "tower " cmd, .usage = synopsis, .about = text, .epilog = EXIT_HELP, .opts = table,          \
     .operands = operand_names, .min_args = least, .max_args = most}

static const command COMMANDS[] = {
    {"runs", SPEC("runs", "[--server URL]",
                  "Lists the server's runs, newest first: id, name, status (a queued run's with its place\n"
                  "in the queue: \"queued #2\"), step/steps, loss, eval accuracy\n"
                  "with the EMA weights (\"(raw)\" after it: the run has no EMA evaluation), dataset and created time.\n",
                  SERVER_ONLY, NULL, 0, 0), cmd_runs},
    {"submit", SPEC("submit", "CONFIG.json [--dataset NAME] [--name N] [--follow] [--server URL]",
                    "Submits the run CONFIG.json describes and prints its id.\n", SUBMIT, "CONFIG.json", 1, 1),
     cmd_submit},
    {"logs", SPEC("logs", "RUN [-f] [--server URL]", "Prints the run's log (the trainer's output).\n", LOGS, "RUN",
                  1, 1), cmd_logs},
    {"cancel", SPEC("cancel", "RUN [--server URL]", "Cancels a queued or running run.\n", SERVER_ONLY, "RUN", 1, 1),
     cmd_cancel},
    {"resume", SPEC("resume", "RUN [--steps N] [--follow] [--server URL]",
                    "Resumes a cancelled or failed run from its latest checkpoint.\n", RESUME, "RUN", 1, 1),
     cmd_resume},
    {"download", SPEC("download", "RUN [--step S] [--format tf [--names tower|seed] | --format onnx\n"
                      "                      [--weights raw|ema]] [-o FILE] [--server URL]",
                      "Downloads a checkpoint of the run (safetensors), or its export.\n", DOWNLOAD, "RUN", 1, 1),
     cmd_download},
    {"upload", SPEC("upload", "NAME FILE... [--test FILE]... [--label-column C] [--validation-split F [--split-seed S]]\n"
                    "            [--test-first N | --test-last N] [--shape DIMS] [--class-names FILE|LIST]\n"
                    "            [--image-size HxW [--channels 1|3] [--resize crop|pad]]\n"
                    "            [--no-wait] [--server URL]",
                    "Uploads a dataset named NAME, waits for its conversion and prints it (exit 1, with the reason, when\n"
                    "it fails). The files say what they are: IDX pairs (*idx3-ubyte[.gz] images, *idx1-ubyte[.gz] labels;\n"
                    "names starting with t10k or holding \"test\" are the test split), two .npy files (features, then\n"
                    "labels, or the one named *label*), a .csv, or .tfrecord files (one holding \"test\" is the test split).\n"
                    "An image folder: a FOLDER whose folders are the classes, each holding PNG and JPEG files (sent as a\n"
                    "tar made as it is sent), or such a folder packed as a .tar, .tar.gz or .zip file.\n",
                    UPLOAD, "NAME FILE...", 2, MAX_POS), cmd_upload},
    {"compare", SPEC("compare", "RUN RUN... [--server URL]",
                     "Shows the runs side by side: the config keys that differ between them and\n"
                     "their final metrics.\n", SERVER_ONLY, "RUN RUN...", 2, MAX_POS), cmd_compare},
    {"sweep create", SPEC("sweep create", "SPEC.json [--name N] [--config RUN.json] [--dataset NAME] [--follow] [--server URL]",
                          "Starts the hyperparameter sweep SPEC.json describes and prints its id, name, status, searcher, the\n"
                          "trials it plans and the steps of its rungs. SPEC.json is the body of POST /api/v1/sweeps:\n"
                          "{\"name\", \"config\": a run config as submit takes, \"space\": {dotted key: [values] or {\"type\":\n"
                          "\"uniform\" | \"log_uniform\" | \"int\", \"min\", \"max\", \"count\"}}, \"searcher\": {\"type\": \"grid\" |\n"
                          "\"random\" | \"asha\", \"seed\", \"max_trials\", \"max_steps\", \"reduction_factor\", \"rungs\",\n"
                          "\"max_concurrent\", \"sample\"}, \"metric\", \"maximize\"}. Each trial is a run named NAME-tN.\n",
                          SWEEP_CREATE, "SPEC.json", 1, 1), cmd_sweep_create},
    {"sweep list", SPEC("sweep list", "[--server URL]",
                        "Lists the server's sweeps, newest first: id, name, status, searcher, metric, trials\n"
                        "started/planned and the best trial's result.\n", SERVER_ONLY, NULL, 0, 0), cmd_sweep_list},
    {"sweep show", SPEC("sweep show", "SWEEP [--json] [--server URL]",
                        "Shows a sweep (id or name): its status, searcher and settings, metric and direction, rungs, the\n"
                        "steps trained against training every trial to the end, and the best trial; then its trials, one\n"
                        "column per searched key and one per rung (the metric at its steps), the best marked \"*\".\n",
                        SWEEP_SHOW, "SWEEP", 1, 1), cmd_sweep_show},
    {"sweep cancel", SPEC("sweep cancel", "SWEEP [--server URL]",
                          "Cancels a running sweep and its queued and running trials.\n", SERVER_ONLY, "SWEEP", 1, 1),
     cmd_sweep_cancel},
    {"sweep resume", SPEC("sweep resume", "SWEEP [--server URL]",
                          "Resumes a cancelled sweep: its cancelled trials continue from their checkpoints.\n",
                          SERVER_ONLY, "SWEEP", 1, 1), cmd_sweep_resume},
    {"sweep delete", SPEC("sweep delete", "SWEEP [--server URL]",
                          "Deletes a sweep that is not running (its trials' runs stay).\n", SERVER_ONLY, "SWEEP", 1, 1),
     cmd_sweep_delete},
};

enum { N_COMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

/* `tower sweep`'s own page: its subcommands. */
static void sweep_usage(FILE *out)
{
    fprintf(out, "usage: tower sweep COMMAND ... [--server URL]\n\nHyperparameter sweeps run by the server: a base "
            "run config trained with the values of\na search space (grid, random or ASHA), each trial a run.\n\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strncmp(COMMANDS[i].name, "sweep ", 6))
            fprintf(out, "  tower %s %s\n", COMMANDS[i].name, COMMANDS[i].spec.usage);
    fprintf(out, "\n'tower sweep COMMAND --help' describes a command.\n");
}

static int run_command(const command *cmd, int argc, char **argv)
{
    args a = {.step = NO_STEP, .format = -1, .weights = -1, .names = -1};
    int rc = tw_options_parse(&cmd->spec, &a, argc, argv, &a.npos);
    if (rc != TW_OPT_GO)
        return rc;
    a.pos = (const char *const *)argv + 1;
    tw_rest c;
    tw_error err;
    tw_error_clear(&err);
    if (tw_rest_init(&c, a.server, &err) != TW_OK)
        return tw_options_error(&cmd->spec, "%s", err.message);
    return cmd->run(&c, cmd, &a);
}

/* `tower sweep COMMAND ...`: argv[1] names the subcommand. */
static int sweep_main(int argc, char **argv)
{
    char name[64];
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        sweep_usage(stdout);
        return EXIT_OK;
    }
    snprintf(name, sizeof name, "sweep %.50s", argc > 1 ? argv[1] : "");
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, COMMANDS[i].name))
            return run_command(&COMMANDS[i], argc - 1, argv + 1);
    fprintf(stderr, "tower sweep: %s%s%s (create, list, show, cancel, resume or delete)\n(see 'tower sweep --help')\n",
            argc > 1 ? "unknown command '" : "a command is missing", argc > 1 ? argv[1] : "", argc > 1 ? "'" : "");
    return EXIT_USAGE;
}

int tw_client_main(int argc, char **argv)
{
    if (!strcmp(argv[0], "sweep"))
        return sweep_main(argc, argv);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[0], COMMANDS[i].name))
            return run_command(&COMMANDS[i], argc, argv);
    return EXIT_USAGE;
}
