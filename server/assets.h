/* assets.h — the server's files embedded in the binary: the status page (the files of static/) and the seed
 * config (examples/seed_mlp.json), generated into assets_data.c by cmake/TowerEmbed.cmake as a table of
 * engine/embedded.h's entries. */
#ifndef TW_ASSETS_H
#define TW_ASSETS_H

#include "embedded.h"

typedef tw_embedded tw_asset;  /* name e.g. "app.js" */

extern const tw_asset TW_ASSETS[]; /* terminated by a zeroed entry */

/* The asset called name, or NULL. */
const tw_asset *tw_asset_find(const char *name);

/* The Content-Type for a file name by its extension. */
const char *tw_asset_type(const char *name);

#endif
