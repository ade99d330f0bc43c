/* embedded.h — files built into the `tower` binary (generated C tables, cmake/TowerEmbed.cmake).
 *
 * Owns: the entry type every table shares, the lookup by name, and the engine's own table: the default
 * configs of `tower bench` (examples/seed_mlp.json and examples/fashion_cnn.json, in that order), so that
 * a binary copied anywhere (the Docker image) benchmarks without a source tree. Does not own the server's
 * table (the status page, server/assets.h), which uses the same type. */
#ifndef TW_EMBEDDED_H
#define TW_EMBEDDED_H

#include <stddef.h>

typedef struct {
    const char *name;           /* file name, e.g. "seed_mlp.json"; NULL ends a table */
    const unsigned char *data;  /* its bytes (NUL-terminated for convenience), static */
    size_t size;
} tw_embedded;

/* The default bench configs, terminated by a zeroed entry. */
extern const tw_embedded TW_BENCH_CONFIGS[];

/* The entry called name in table, or NULL. */
const tw_embedded *tw_embedded_find(const tw_embedded *table, const char *name);

#endif
