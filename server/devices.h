/* devices.h — the devices runs are scheduled on: the NVIDIA GPUs the kernel driver lists, or the CPU.
 *
 * Owns: detection (without the CUDA runtime, so the server never creates a CUDA context: the GPUs are
 * read from /proc/driver/nvidia/gpus, in PCI bus order, which is CUDA's order with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID, set for every child; and only when this build has the CUDA backend) and
 * `tower devices`. A machine without GPUs has one device, "cpu", which runs one training run at a time with
 * its towers as threads. */
#ifndef TW_DEVICES_H
#define TW_DEVICES_H

enum { TW_MAX_DEVICES = 16 };

typedef struct {
    char id[16];    /* "gpu0" ... or "cpu" */
    char kind[8];   /* "gpu" or "cpu" */
    char name[96];  /* "NVIDIA H200" or "CPU (16 cores)" */
    int index;      /* CUDA index for a GPU, -1 for the CPU */
} tw_device;

/* Fills out[max]; returns the count (>= 1: the CPU when there is no GPU). */
int tw_devices_detect(tw_device *out, int max);

/* `tower devices`, dispatched by cli/main.c: returns the exit status; never exits. */
int tw_devices_main(int argc, char **argv);

#endif
