/* devices.c — device detection from /proc for the scheduler (see devices.h), and `tower devices`, which
 * asks the CUDA runtime itself (through the backend registry) for each GPU's details or why there is none. */
#define _GNU_SOURCE
#include "devices.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "options.h"

static const char GPU_DIR[] = "/proc/driver/nvidia/gpus";

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* The "Model:" line of a GPU's information file, or "NVIDIA GPU". */
static void gpu_model(const char *bus, char *name, size_t size)
{
    char path[512], line[256];
    snprintf(path, sizeof path, "%s/%s/information", GPU_DIR, bus);
    snprintf(name, size, "NVIDIA GPU");
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Model:", 6)) {
            char *v = line + 6 + strspn(line + 6, " \t");
            v[strcspn(v, "\n")] = 0;
            snprintf(name, size, "%s", v);
            break;
        }
    if (f)
        fclose(f);
}

int tw_devices_detect(tw_device *out, int max)
{
    struct dirent **list = NULL;
    int n = tw_backend_built("cuda") ? scandir(GPU_DIR, &list, NULL, by_name) : 0, count = 0;
    for (int i = 0; i < n; i++) {
        if (list[i]->d_name[0] != '.' && count < max) {
            tw_device *d = &out[count];
            snprintf(d->id, sizeof d->id, "gpu%d", count);
            snprintf(d->kind, sizeof d->kind, "gpu");
            gpu_model(list[i]->d_name, d->name, sizeof d->name);
            d->index = count++;
        }
        free(list[i]);
    }
    free(list);
    if (count == 0) {
        snprintf(out[0].id, sizeof out[0].id, "cpu");
        snprintf(out[0].kind, sizeof out[0].kind, "cpu");
        snprintf(out[0].name, sizeof out[0].name, "CPU (%ld cores)", sysconf(_SC_NPROCESSORS_ONLN));
        out[0].index = -1;
        count = 1;
    }
    return count;
}

/* ================================ tower devices ================================ */

static const tw_opt DEVICES_OPTIONS[] = {
    {.name = "json", .kind = TW_OPT_FLAG, .offset = 0 /* the int tw_devices_main parses into */,
     .help = "one JSON object instead of text"},
    {0},
};

static const tw_options DEVICES_COMMAND = {
    .command = "tower devices",
    .usage = "[--json]",
    .about = "Lists the GPUs this build can train on (index, name, memory, compute capability, driver and runtime\n"
             "versions), or says why there are none; `tower train --backend auto` uses them, else the CPU.\n",
    .opts = DEVICES_OPTIONS,
};

static json_t *gpu_json(int i, const tw_device_info *d)
{
    char cc[16], drv[16], rt[16];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    snprintf(drv, sizeof drv, "%d.%d", d->driver_version / 1000, d->driver_version % 1000 / 10);
    snprintf(rt, sizeof rt, "%d.%d", d->runtime_version / 1000, d->runtime_version % 1000 / 10);
    return json_pack("{s:i, s:s, s:I, s:s, s:s, s:s}", "index", i, "name", d->name, "memory_bytes",
                     (json_int_t)d->memory_bytes, "compute_capability", cc, "driver_version", drv,
                     "runtime_version", rt);
}

/* {"gpus": [...], "why_no_gpu": null or a sentence, "cpu": {...}, "auto": "cuda" or "cpu"} (new). */
static json_t *describe(void)
{
    json_t *gpus = json_array();
    tw_error err;
    tw_error_clear(&err);
    int n = tw_backend_devices("cuda");
    tw_device_info d;
    for (int i = 0; i < n; i++)
        if (tw_backend_device_info(i, &d, &err) == TW_OK)
            json_array_append_new(gpus, gpu_json(i, &d));
    if (n == 0)
        tw_backend_device_info(0, &d, &err); /* fills err with why there is none */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return json_pack("{s:o, s:s?, s:{s:s, s:i}, s:s}", "gpus", gpus, "why_no_gpu",
                     json_array_size(gpus) ? NULL : err.message, "cpu", "name", "CPU", "cores", (int)cores,
                     "auto", json_array_size(gpus) ? "cuda" : "cpu");
}

static void print_text(const json_t *d)
{
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(d, "gpus"), i, g)
        printf("cuda:%d  %s  %.1f GiB  compute %s  driver %s  runtime %s\n",
               (int)json_integer_value(json_object_get(g, "index")), json_string_value(json_object_get(g, "name")),
               (double)json_integer_value(json_object_get(g, "memory_bytes")) / (1 << 30),
               json_string_value(json_object_get(g, "compute_capability")),
               json_string_value(json_object_get(g, "driver_version")),
               json_string_value(json_object_get(g, "runtime_version")));
    const char *why = json_string_value(json_object_get(d, "why_no_gpu"));
    if (why)
        printf("no GPU: %s\n", why);
    printf("cpu     %d cores%s\n", (int)json_integer_value(json_object_get(json_object_get(d, "cpu"), "cores")),
           why ? " (--backend auto trains here)" : "");
}

int tw_devices_main(int argc, char **argv)
{
    int as_json = 0, nargs, rc = tw_options_parse(&DEVICES_COMMAND, &as_json, argc, argv, &nargs);
    if (rc != TW_OPT_GO)
        return rc;
    json_t *d = describe();
    if (as_json) {
        json_dumpf(d, stdout, JSON_INDENT(2));
        putchar('\n');
    } else {
        print_text(d);
    }
    json_decref(d);
    return 0;
}
