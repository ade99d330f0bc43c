/* assets.c — lookup of the embedded files (see assets.h). */
#include "assets.h"

#include <string.h>

const tw_asset *tw_asset_find(const char *name)
{
    return tw_embedded_find(TW_ASSETS, name);
}

const char *tw_asset_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {{".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
                 {".css", "text/css; charset=utf-8"},   {".json", "application/json"},
                 {".svg", "image/svg+xml"}};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i].ext))
            return types[i].type;
    return "application/octet-stream";
}
