/* client_main.h — the `tower` client commands over the REST API: runs, submit, logs, cancel, resume,
 * download, upload, compare, sweep (create, list, show, cancel, resume, delete). See client_main.c. */
#ifndef TW_CLIENT_MAIN_H
#define TW_CLIENT_MAIN_H

/* One entry point for every client command: argv[0] names it ("sweep": argv[1] names its subcommand).
 * Returns the exit status: 0 done, 1 the server refused (its error envelope's message on stderr), could not
 * be reached, or a followed run or sweep did not succeed; 2 a usage error. */
int tw_client_main(int argc, char **argv);

#endif
