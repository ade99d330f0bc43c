/* train_main.h — `tower train` (train_main.c), dispatched by cli/main.c and started by the scheduler.
 *
 * Owns: the subcommand's entry point only. Does not own the training (trainer.h) or the exit codes' meaning
 * (child.h's table). */
#ifndef TW_TRAIN_MAIN_H
#define TW_TRAIN_MAIN_H

/* Returns the exit status; never exits. argv[0] is the subcommand's name. */
int tw_train_main(int argc, char **argv);

#endif
