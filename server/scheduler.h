/* scheduler.h — the FIFO queue over the devices and the supervision of the training children.
 *
 * Owns: one supervisor thread that starts queued runs in submission order when their devices are free,
 * each as a child process `TRAINER train DIR/runs/<id>/config.json --logdir DIR/runs/<id> --resume`
 * (own process group, killed by the kernel if the server dies, CUDA_VISIBLE_DEVICES set to its GPUs),
 * reads the child's JSON lines (progress, stored at most once a second) and stderr into the run's log,
 * kills a child that is silent for longer than the heartbeat timeout or past its deadline, delivers
 * cancels (SIGTERM, a grace period, SIGKILL of the group), and maps each exit to a state: succeeded,
 * cancelled, failed with a reason, or queued again after a back-off for retriable failures (a crash, a
 * stall, a device error, a full disk) up to the run's max_restarts. Does not own the HTTP side (api_runs.c)
 * or the rows (store.c). Thread-safety: the functions below may be called from any thread. */
#ifndef TW_SCHEDULER_H
#define TW_SCHEDULER_H

#include <jansson.h>

#include "server.h"

/* Detects the devices and starts the supervisor thread. */
tw_status tw_scheduler_create(tw_server *S, tw_scheduler **out, tw_error *err);

/* Stops the thread; running children get SIGTERM (they checkpoint), then SIGKILL after the grace period.
 * Their runs stay "running" in the store and resume at the next start. NULL-safe. */
void tw_scheduler_destroy(tw_scheduler *s);

/* Something was queued: look at the queue now. */
void tw_scheduler_wake(tw_scheduler *s);

/* Cancels a run: a queued run is cancelled at once; a running one gets SIGTERM now and SIGKILL after the
 * grace period. Errors: TW_END no such run, TW_ERR_INVALID already finished. */
tw_status tw_scheduler_cancel(tw_scheduler *s, const char *id, tw_error *err);

/* 1 while run id's cancel was asked and its child has not stopped yet (the API shows it "cancelling"). */
int tw_scheduler_cancelling(tw_scheduler *s, const char *id);

/* [{"id", "kind", "name", "run"}] (new). */
json_t *tw_scheduler_devices(tw_scheduler *s);

/* GPUs this server schedules on (0: runs train on the CPU, any number of towers as threads). */
int tw_scheduler_gpu_count(const tw_scheduler *s);

/* Sum of the running children's steps per second, for /metrics. */
double tw_scheduler_steps_per_sec(tw_scheduler *s);
/* What run id's processes use now (usage.h's tw_usage_json; null when it is not running or not yet
 * sampled twice); id NULL: {run id: that, ...} for every running run. New reference. */
json_t *tw_scheduler_usage(tw_scheduler *s, const char *id);

/* Cancels an evaluation job (store.h: tw_store_eval_*): a queued one at once, a running one by stopping
 * its child (the job becomes "cancelled" when its group is gone). TW_ERR_INVALID when it has already
 * finished (err says how); TW_END when there is no such job. */
tw_status tw_scheduler_cancel_evaluation(tw_scheduler *s, const char *id, tw_error *err);

#endif
