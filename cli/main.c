/* main.c — the `tower` binary: the table of its subcommands and the only place that calls exit().
 *
 * Each subcommand lives in its module as `int tw_<cmd>_main(int argc, char **argv)` and returns the
 * process exit status; argv[0] is the subcommand's name. The server's `serve` and `devices`, the engine's
 * commands and the client's sit side by side here: this folder is above all of them, none of them knows
 * the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bench_main.h"
#include "client_main.h"
#include "convert.h"
#include "devices.h"
#include "evaluate_main.h"
#include "export_main.h"
#include "inspect.h"
#include "predict_main.h"
#include "serve_main.h"
#include "train_main.h"

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    int computes; /* trains, evaluates, predicts or converts, on every core: the process is prepared first
                     (backend.h; else the thread libraries every command loads spin a core as it starts) */
    int client;   /* talks to a server over the REST API (client/): listed under its own heading */
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"convert", tw_convert_main, 1, 0, "convert IDX, CSV, NumPy, TFRecord or image-folder data into TFRecord files of tf.train.Example"},
    {"inspect", tw_inspect_main, 0, 0, "describe a TFRecord or tfevents file (records, schema, tags)"},
    {"train", tw_train_main, 1, 0, "train a model from a JSON run config; events and checkpoints in --logdir"},
    {"evaluate", tw_evaluate_main, 1, 0, "evaluate a checkpoint on a TFRecord file: accuracy, per-class, confusion; MSE/MAE/R²"},
    {"serve", tw_serve_main, 0, 0, "run the training service: REST API, job queue, status page"},
    {"devices", tw_devices_main, 0, 0, "list the devices runs are scheduled on"},
    {"export", tw_export_main, 0, 0, "write a checkpoint as a TensorFlow checkpoint or an ONNX graph"},
    {"bench", tw_bench_main, 1, 0, "time the training step per model and tower count on synthetic data"},
    {"predict", tw_predict_main, 1, 0, "classify images, .npy or JSON inputs with a checkpoint (top-k classes)"},
    {"runs", tw_client_main, 0, 1, "list a server's runs"},
    {"submit", tw_client_main, 0, 1, "submit a run config [--dataset NAME] [--follow]"},
    {"logs", tw_client_main, 0, 1, "print a run's log [-f]"},
    {"cancel", tw_client_main, 0, 1, "cancel a run"},
    {"resume", tw_client_main, 0, 1, "resume a cancelled or failed run"},
    {"download", tw_client_main, 0, 1, "download a run's checkpoint [--step S] [-o FILE]"},
    {"upload", tw_client_main, 0, 1, "upload a dataset (IDX, .npy, CSV or TFRecord files, an image folder)"},
    {"compare", tw_client_main, 0, 1, "the differing hparams and final metrics of runs"},
    {"sweep", tw_client_main, 0, 1, "hyperparameter sweeps: create [--follow], list, show, cancel, resume, delete"},
};

enum { N_COMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: tower <command> [options]\n");
    for (int client = 0; client <= 1; client++) {
        fprintf(out, "\n%s:\n", client ? "client commands (a server's REST API: --server URL, default $TOWER_URL)"
                                       : "commands");
        for (int i = 0; i < N_COMMANDS; i++)
            if (COMMANDS[i].client == client)
                fprintf(out, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    }
    fprintf(out, "\n'tower <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        exit(2);
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        exit(0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tower %s\n", TW_VERSION);
        exit(0);
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) {
            if (COMMANDS[i].computes)
                tw_backend_process_init(argv); /* may re-execute the process (backend.h) */
            exit(COMMANDS[i].main(argc - 1, argv + 1));
        }
    fprintf(stderr, "tower: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    exit(2);
}
