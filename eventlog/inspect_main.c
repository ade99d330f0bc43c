/* inspect_main.c — placeholder. */
#include "cli.h"
#include <stdio.h>
int tw_inspect_main(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inspect: not built yet\n"); return 1; }
