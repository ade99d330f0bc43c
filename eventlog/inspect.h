/* inspect.h — `tower inspect` (inspect.c), dispatched by cli/main.c.
 *
 * Owns: the subcommand's entry point only. Does not own the formats it reads (tfrecord.h, example.h,
 * events_read.h, safetensors.h). */
#ifndef TW_INSPECT_H
#define TW_INSPECT_H

/* Returns the exit status (0 ok, 1 failure, 2 usage error); never exits. argv[0] is the subcommand's name. */
int tw_inspect_main(int argc, char **argv);

#endif
