/* convert_main.c — `tower convert`: placeholder until the converters land (same session). */
#include "cli.h"
#include <stdio.h>
int tw_convert_main(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "convert: not built yet\n"); return 1; }
