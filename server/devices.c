/* devices.c — device detection from /proc (see devices.h) and `tower devices`. */
#define _GNU_SOURCE
#include "devices.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

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
    int n = scandir(GPU_DIR, &list, NULL, by_name), count = 0;
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

int tw_devices_main(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
                "usage: tower devices\n\nLists the devices `tower serve` schedules runs on, as JSON.\n");
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    tw_device d[TW_MAX_DEVICES];
    int n = tw_devices_detect(d, TW_MAX_DEVICES);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "id", d[i].id, "kind", d[i].kind, "name",
                                             d[i].name));
    json_dumpf(arr, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(arr);
    return 0;
}
