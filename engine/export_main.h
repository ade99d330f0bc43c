/* export_main.h — `tower export` (export_main.c), dispatched by cli/main.c.
 *
 * Owns: the subcommand's entry point only. Does not own the export formats (export.h) or the exit codes'
 * meaning (engine/child.h). */
#ifndef TW_EXPORT_MAIN_H
#define TW_EXPORT_MAIN_H

/* Returns the exit status; never exits. argv[0] is the subcommand's name. */
int tw_export_main(int argc, char **argv);

#endif
