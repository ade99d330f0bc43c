/* assets.h — the files embedded in the binary: the status page (the files of static/) and the seed config
 * (examples/seed_mlp.json), generated into assets_data.c by cmake/TowerEmbed.cmake. */
#ifndef TW_ASSETS_H
#define TW_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *name;           /* file name, e.g. "app.js" */
    const unsigned char *data;  /* its bytes (NUL-terminated for convenience) */
    size_t size;
} tw_asset;

extern const tw_asset TW_ASSETS[]; /* terminated by a zeroed entry */

/* The asset called name, or NULL. */
const tw_asset *tw_asset_find(const char *name);

/* The Content-Type for a file name by its extension. */
const char *tw_asset_type(const char *name);

#endif
