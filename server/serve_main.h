/* serve_main.h — `tower serve` (serve_main.c), dispatched by cli/main.c.
 *
 * Owns: the subcommand's entry point only. Does not own the server's state (server.h). */
#ifndef TW_SERVE_MAIN_H
#define TW_SERVE_MAIN_H

/* Returns the exit status (0 clean stop, 1 failure, 2 usage error); never exits. argv[0] is the
 * subcommand's name. */
int tw_serve_main(int argc, char **argv);

#endif
