/* launch.h — how `tower serve` starts a run of several processes: the launcher template
 * (`tower serve --launcher 'TEMPLATE'`), a submission's "processes" and "hosts", and the sessions such
 * runs live in.
 *
 * Owns: the template's grammar and its one split into words at start-up; the default (mpirun); the
 * submission keys "processes" (1..TW_LAUNCH_MAX_PROCESSES) and "hosts" (a list of "NAME" or "NAME:SLOTS"),
 * validated strictly because they end up on a launcher's command line; the check that the launcher is
 * found (on PATH) before a run of processes > 1 is queued; the argv of such a run (the trainer's argv
 * wrapped in the template, every argument one argv word: nothing is ever passed through a shell); how
 * many devices such a run takes here; and the signalling of every process of a session (/proc), because
 * mpirun puts each local rank in a process group of its own. Does not own the trainer's argv
 * (scheduler.c), the run rows (store.c) or the supervision itself (scheduler.c).
 *
 * The template: words separated by spaces; no quotes, backslashes or '$' (no shell reads it). Placeholders:
 * {processes} and {hosts} (the comma list; may sit inside a word), {trainer} (a word of its own, exactly
 * once: the trainer's whole argv). Words between '[' and ']' form an optional group, kept only when the
 * run names hosts (the only placeholder that can be empty). The default is TW_LAUNCH_DEFAULT. */
#ifndef TW_LAUNCH_H
#define TW_LAUNCH_H

#include <jansson.h>
#include <sys/types.h>

#include "status.h"

enum { TW_LAUNCH_MAX_PROCESSES = 64, TW_LAUNCH_MAX_HOSTS = 64, TW_LAUNCH_MAX_HOST_BYTES = 253 };

/* --bind-to none: each process runs its towers as threads, which one core per rank (Open MPI's default
 * binding for two processes) would starve. --oversubscribe: more processes than cores on one machine.
 * --quiet: no banners on stderr, so a run's last stderr line (its error) stays the trainer's. */
#define TW_LAUNCH_DEFAULT "mpirun --quiet -np {processes} --oversubscribe --bind-to none [--host {hosts}] {trainer}"

/* Open MPI's mpirun SIGKILLs the ranks this long after forwarding a SIGTERM (default 1 s, before a
 * checkpoint could be written); the server sets it to its --grace in a launched run's environment. */
#define TW_LAUNCH_SIGKILL_ENV "OMPI_MCA_odls_base_sigkill_timeout"

typedef struct tw_launcher tw_launcher;

/* Splits template (NULL: TW_LAUNCH_DEFAULT) into words once. TW_ERR_INVALID naming the template and
 * what is wrong (a quote, an unknown placeholder, no {trainer}, an unclosed group, ...). *out: caller
 * destroys. */
tw_status tw_launcher_parse(const char *template_text, tw_launcher **out, tw_error *err);
void tw_launcher_destroy(tw_launcher *l);

/* A submission's launch keys, read from a run config (then removed from it). */
typedef struct {
    int processes;  /* 1: the trainer alone */
    json_t *hosts;  /* a new array of strings (empty: none); caller decrefs */
} tw_launch_keys;

/* Reads and removes "processes" and "hosts" from cfg into *k. TW_ERR_INVALID with a message that starts
 * with the key: a value out of range, a host with a character outside [A-Za-z0-9._-] or not starting with
 * a letter or digit, hosts with one process, or processes > 1 while l's program is not found (PATH). */
tw_status tw_launch_take_keys(const tw_launcher *l, json_t *cfg, tw_launch_keys *k, tw_error *err);

/* TW_OK when a run of `processes` can start here: one, or l's program is found (PATH); else
 * TW_ERR_INVALID naming "processes" and the missing launcher. (A resumed run is checked again.) */
tw_status tw_launch_usable(const tw_launcher *l, int processes, tw_error *err);

/* The devices a run takes on this server: towers for one process; processes x towers when they all run
 * here (no hosts); towers when hosts spread it (this host runs at most one process's towers). */
int tw_launch_local_towers(int towers, int processes, const json_t *hosts);

/* argv for a run of processes > 1: the template with trainer (a NULL-terminated argv, borrowed) in
 * place of {trainer}, its program resolved on PATH. *out is one allocation (free()). TW_ERR_INVALID when
 * the program is not found. */
tw_status tw_launch_argv(const tw_launcher *l, int processes, const json_t *hosts, char *const *trainer,
                         char ***out, tw_error *err);

/* Sends sig to every process of session sid outside the process group sid (the session leader's, which
 * kill(-sid) reaches); sig 0 only counts. Returns how many there are, zombies included. Reads /proc;
 * thread-safe. */
int tw_launch_session_signal(pid_t sid, int sig);

#endif
