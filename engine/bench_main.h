/* bench_main.h — `tower bench` (bench_main.c), dispatched by cli/main.c.
 *
 * Owns: the subcommand's entry point only. Does not own the timed step (trainer.h). */
#ifndef TW_BENCH_MAIN_H
#define TW_BENCH_MAIN_H

/* Returns the exit status (0 ok, 2 usage or config error, else tw_train_exit_code's); never exits.
 * argv[0] is the subcommand's name. */
int tw_bench_main(int argc, char **argv);

#endif
