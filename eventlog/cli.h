/* cli.h — the subcommand entry points that server/main.c dispatches to. Each returns the process exit
 * status (0 ok, 1 failure, 2 usage error) and never calls exit(). argv[0] is the subcommand's name. */
#ifndef TW_CLI_H
#define TW_CLI_H

int tw_convert_main(int argc, char **argv);
int tw_inspect_main(int argc, char **argv);
int tw_train_main(int argc, char **argv);   /* engine/train_main.c */
int tw_serve_main(int argc, char **argv);   /* server/serve_main.c */
int tw_devices_main(int argc, char **argv); /* server/devices.c */
int tw_bench_main(int argc, char **argv);   /* engine/bench_main.c */

#endif
