/* evaluate_main.h — `tower evaluate` (evaluate_main.c), dispatched by cli/main.c and started by the
 * scheduler for an evaluation job (POST /api/v1/runs/{id}/evaluate).
 *
 * Owns: the subcommand's entry point only. Does not own the model read back (inference.h), the metrics
 * and their document (evaluation.h) or the lines it writes (child.h). */
#ifndef TW_EVALUATE_MAIN_H
#define TW_EVALUATE_MAIN_H

/* Returns the exit status (child.h's table); never exits. argv[0] is the subcommand's name. */
int tw_evaluate_main(int argc, char **argv);

#endif
