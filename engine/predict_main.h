/* predict_main.h — `tower predict` (predict_main.c), dispatched by cli/main.c.
 *
 * Owns: the subcommand's entry point only. Does not own the prediction (predict.h). */
#ifndef TW_PREDICT_MAIN_H
#define TW_PREDICT_MAIN_H

/* Returns the exit status (0 ok, 2 a usage error or an input the model does not take, else
 * tw_child_exit_code's for the checkpoint: 14 damaged, 1 I/O); never exits. argv[0] is the subcommand's
 * name. */
int tw_predict_main(int argc, char **argv);

#endif
