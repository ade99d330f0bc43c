/* scalars_cache.h — the server's cache of runs' scalar series for GET /api/v1/runs/{id}/metrics: per run,
 * one incremental reader (eventlog/events_read.h tw_events_scalars) per folder of event files, so a
 * request reads only what the trainer appended since the last one.
 *
 * Owns: the entries (keyed by run id), their bounds — at most TW_SCALARS_CACHE_RUNS runs and about
 * TW_SCALARS_CACHE_BYTES of series, least recently used first out (an evicted run is read in full on its
 * next request) — dropping a run's entry when it is deleted, the locking, and the count of event-file
 * bytes read (Prometheus' tower_event_bytes_read_total). Does not own: decoding the files, the downsampling
 * (events_read.h: at most max_points per tag, the newest kept), the route or the tags' API names
 * (api_runs.c).
 *
 * Thread-safety: every function may be called from any thread (libmicrohttpd's). One mutex guards the
 * list; each entry has its own, held while a request reads its run, so two requests for one run read
 * one after the other and requests for different runs in parallel. */
#ifndef TW_SCALARS_CACHE_H
#define TW_SCALARS_CACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* TW_SCALARS_MAX_POINTS: the points kept per tag, the newest always last (a chart of the status page is a
 * few hundred pixels wide); about 24 bytes each. */
enum { TW_SCALARS_CACHE_RUNS = 64, TW_SCALARS_CACHE_BYTES = 64 << 20, TW_SCALARS_PARTS = 2,
       TW_SCALARS_MAX_POINTS = 2000 };

typedef struct tw_scalars_cache tw_scalars_cache;

/* An empty cache whose readers keep max_points (>= 1) points per tag. Caller owns *out. */
tw_status tw_scalars_cache_create(size_t max_points, tw_scalars_cache **out, tw_error *err);
void tw_scalars_cache_destroy(tw_scalars_cache *c); /* NULL-safe; no request may be in flight */

/* The series of run `run` (borrowed id) in its TW_SCALARS_PARTS folders dirs[] (borrowed), read on from
 * the last request's: out[i] (new, caller owns) is tw_events_read_scalars' object of dirs[i], {} when
 * that folder does not exist. Errors: those of tw_events_scalars_update (the run's entry then reads from
 * the start next time). */
tw_status tw_scalars_cache_read(tw_scalars_cache *c, const char *run, const char *const dirs[TW_SCALARS_PARTS],
                                json_t *out[TW_SCALARS_PARTS], tw_error *err);

/* Drops run's entry (its run is deleted); a request reading it finishes first. */
void tw_scalars_cache_forget_run(tw_scalars_cache *c, const char *run);

/* Event-file bytes read by all requests since the cache was created. */
uint64_t tw_scalars_cache_bytes_read(tw_scalars_cache *c);

#endif
