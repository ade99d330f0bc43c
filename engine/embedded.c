/* embedded.c — lookup in a table of embedded files (see embedded.h; the tables are generated). */
#include "embedded.h"

#include <string.h>

const tw_embedded *tw_embedded_find(const tw_embedded *table, const char *name)
{
    for (const tw_embedded *e = table; e->name; e++)
        if (!strcmp(e->name, name))
            return e;
    return NULL;
}
