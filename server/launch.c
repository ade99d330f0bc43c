/* launch.c — the launcher template, a run's "processes" and "hosts", and session-wide signals (launch.h).
 *
 * Written by hand: the template is split at spaces with a handful of placeholders, deliberately not a
 * shell grammar (wordexp(3) and `sh -c` would expand variables, globs and command substitutions in what
 * an operator wrote and, through "hosts", in what a client sent). The session scan reads /proc/PID/stat
 * directly (libprocps would be a whole dependency for four numbers of each process). */
#define _GNU_SOURCE
#include "launch.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_WORDS = 64, MAX_TEMPLATE = 4096, MAX_PATH_BYTES = 4096 };

static const char PROCESSES[] = "{processes}", HOSTS[] = "{hosts}", TRAINER[] = "{trainer}";

struct tw_launcher {
    int n;                 /* words */
    char *word[MAX_WORDS]; /* into text */
    char optional[MAX_WORDS]; /* 1: inside [...], kept only for a run with hosts */
    char text[];           /* the template's copy, NUL between words */
};

/* ================================ the template ================================ */

static tw_status bad_template(const char *t, tw_error *err, const char *what)
{
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--launcher '%s': %s", t, what);
}

/* Checks the placeholders of one word (its group brackets removed): only the three known ones, {trainer}
 * as a whole word outside a group, {hosts} inside one. Counts {trainer} into *trainers. */
static tw_status check_word(const char *t, const char *w, int optional, int *trainers, tw_error *err)
{
    for (const char *p = w; (p = strpbrk(p, "{}")); p++) {
        if (*p == '}')
            return bad_template(t, err, "a '}' without its '{'");
        if (!strncmp(p, TRAINER, sizeof TRAINER - 1)) {
            if (strcmp(w, TRAINER) || optional)
                return bad_template(t, err, "{trainer} must be a word of its own, outside [...]");
            ++*trainers;
        } else if (!strncmp(p, HOSTS, sizeof HOSTS - 1)) {
            if (!optional)
                return bad_template(t, err, "{hosts} must be inside an optional group [...]: a run without "
                                            "hosts has none");
        } else if (strncmp(p, PROCESSES, sizeof PROCESSES - 1)) {
            return bad_template(t, err, "unknown placeholder (known: {processes}, {hosts}, {trainer})");
        }
        p = strchr(p, '}');
    }
    return TW_OK;
}

/* Takes the group brackets off word *w (in place), tracking whether a group is open. */
static tw_status brackets(const char *t, char **w, int *open, int *optional, tw_error *err)
{
    size_t n = strlen(*w);
    int opens = **w == '[', closes = n > 0 && (*w)[n - 1] == ']';
    if (opens && *open)
        return bad_template(t, err, "groups [...] do not nest");
    *optional = *open || opens;
    if (closes && !*optional)
        return bad_template(t, err, "a ']' without its '['");
    if (closes)
        (*w)[n - 1] = 0;
    *w += opens;
    *open = *optional && !closes;
    if (!**w || strpbrk(*w, "[]"))
        return bad_template(t, err, "'[' opens a group at a word's start, ']' closes one at a word's end");
    return TW_OK;
}

/* Splits l->text at spaces into l's words and checks them. */
static tw_status split(tw_launcher *l, const char *t, tw_error *err)
{
    int open = 0, trainers = 0;
    char *save = NULL;
    for (char *w = strtok_r(l->text, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (l->n == MAX_WORDS)
            return bad_template(t, err, "more than 64 words");
        int optional = 0;
        TW_TRY(brackets(t, &w, &open, &optional, err));
        TW_TRY(check_word(t, w, optional, &trainers, err));
        l->optional[l->n] = (char)optional;
        l->word[l->n++] = w;
    }
    if (open)
        return bad_template(t, err, "a '[' without its ']'");
    if (trainers != 1)
        return bad_template(t, err, "{trainer} (the trainer's command) must appear exactly once");
    if (l->optional[0] || strchr(l->word[0], '{'))
        return bad_template(t, err, "the first word must be the launcher program (mpirun, srun, ...)");
    return TW_OK;
}

tw_status tw_launcher_parse(const char *template_text, tw_launcher **out, tw_error *err)
{
    const char *t = template_text ? template_text : TW_LAUNCH_DEFAULT;
    size_t n = strlen(t);
    *out = NULL;
    if (n > MAX_TEMPLATE)
        return bad_template("...", err, "longer than 4096 bytes");
    for (const char *p = t; *p; p++)
        if (*p != ' ' && (!isgraph((unsigned char)*p) || strchr("'\"\\`$", *p)))
            return bad_template(t, err, "words are split at spaces and nothing else: no quotes, backslashes, "
                                        "'$', tabs or control characters (no shell reads the template)");
    tw_launcher *l = calloc(1, sizeof *l + n + 1);
    if (!l)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    memcpy(l->text, t, n + 1);
    tw_status s = split(l, t, err);
    if (s != TW_OK) {
        free(l);
        return s;
    }
    *out = l;
    return TW_OK;
}

void tw_launcher_destroy(tw_launcher *l) { free(l); }

/* ================================ the program ================================ */

/* 1 when path is an executable regular file. */
static int executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The launcher program's path into buf[size]: a name with '/' as it is, else the first executable match
 * in $PATH (empty entries, the working folder, are skipped). Returns 0, or -1 when not found. */
static int resolve(const char *prog, char *buf, size_t size)
{
    if (strchr(prog, '/'))
        return snprintf(buf, size, "%s", prog) < (int)size && executable(buf) ? 0 : -1;
    const char *path = getenv("PATH");
    for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; *d;) {
        size_t len = strcspn(d, ":");
        int n = snprintf(buf, size, "%.*s/%s", (int)len, d, prog);
        if (len && n > 0 && (size_t)n < size && executable(buf))
            return 0;
        d += len + (d[len] == ':');
    }
    return -1;
}

static tw_status not_found(const tw_launcher *l, const char *key, tw_error *err)
{
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "%s: this server cannot start several processes: its launcher '%s' is not found on "
                        "PATH (install Open MPI, or name another with tower serve --launcher; "
                        "docs/scale-out.md)", key, l->word[0]);
}

tw_status tw_launch_usable(const tw_launcher *l, int processes, tw_error *err)
{
    char path[MAX_PATH_BYTES];
    return processes <= 1 || resolve(l->word[0], path, sizeof path) == 0 ? TW_OK : not_found(l, "processes", err);
}

/* ================================ the submission ================================ */

/* "NAME" or "NAME:SLOTS": NAME of [A-Za-z0-9._-] starting with a letter or digit (never an option),
 * SLOTS 1..9999 (no leading zero). */
static int valid_host(const char *h)
{
    size_t n = strlen(h), name = strcspn(h, ":");
    if (!n || n > TW_LAUNCH_MAX_HOST_BYTES || !isalnum((unsigned char)h[0]))
        return 0;
    for (size_t i = 0; i < name; i++)
        if (!isalnum((unsigned char)h[i]) && !strchr("._-", h[i]))
            return 0;
    if (name == n)
        return 1;
    const char *slots = h + name + 1;
    size_t digits = strspn(slots, "0123456789");
    return digits >= 1 && digits <= 4 && !slots[digits] && slots[0] != '0';
}

static tw_status take_hosts(json_t *v, tw_launch_keys *k, tw_error *err)
{
    if (!json_is_array(v) || json_array_size(v) > TW_LAUNCH_MAX_HOSTS)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "hosts: must be a list of at most %d host names (\"NAME\" or \"NAME:SLOTS\")",
                            TW_LAUNCH_MAX_HOSTS);
    size_t i;
    json_t *h;
    json_array_foreach(v, i, h) if (!json_is_string(h) || !valid_host(json_string_value(h)))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "hosts: item %zu must be \"NAME\" or \"NAME:SLOTS\": NAME of letters, digits, '.', "
                            "'_' and '-' starting with a letter or digit, at most %d bytes, SLOTS 1 to 9999",
                            i, TW_LAUNCH_MAX_HOST_BYTES);
    json_decref(k->hosts);
    k->hosts = json_incref(v);
    return TW_OK;
}

tw_status tw_launch_take_keys(const tw_launcher *l, json_t *cfg, tw_launch_keys *k, tw_error *err)
{
    k->processes = 1;
    k->hosts = json_array();
    json_t *v;
    if ((v = json_object_get(cfg, "processes"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > TW_LAUNCH_MAX_PROCESSES)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "processes: must be an integer from 1 to %d",
                                TW_LAUNCH_MAX_PROCESSES);
        k->processes = (int)json_integer_value(v);
    }
    if ((v = json_object_get(cfg, "hosts")))
        TW_TRY(take_hosts(v, k, err));
    if (json_array_size(k->hosts) && k->processes == 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "hosts: a run of one process runs here; hosts "
                                                           "need \"processes\" above 1");
    TW_TRY(tw_launch_usable(l, k->processes, err));
    json_object_del(cfg, "processes");
    json_object_del(cfg, "hosts");
    return TW_OK;
}

int tw_launch_local_towers(int towers, int processes, const json_t *hosts)
{
    return json_array_size(hosts) ? towers : towers * processes;
}

/* ================================ the argv ================================ */

/* Word w with its placeholders filled into out (NULL: only measured). Returns the length. */
static size_t fill(const char *w, const char *processes, const char *hosts, char *out)
{
    size_t n = 0;
    while (*w) {
        const char *ph = !strncmp(w, PROCESSES, sizeof PROCESSES - 1) ? PROCESSES
                         : !strncmp(w, HOSTS, sizeof HOSTS - 1)       ? HOSTS
                                                                      : NULL;
        const char *with = ph == PROCESSES ? processes : ph ? hosts : w;
        size_t len = ph ? strlen(with) : 1;
        if (out)
            memcpy(out + n, with, len);
        n += len;
        w += ph ? strlen(ph) : 1;
    }
    return n;
}

/* The hosts joined by commas (new; caller frees), "" for none. */
static char *join_hosts(const json_t *hosts)
{
    size_t n = 1, i;
    json_t *h;
    json_array_foreach(hosts, i, h) n += strlen(json_string_value(h)) + 1;
    char *csv = calloc(1, n);
    for (size_t at = 0, k = 0; csv && k < json_array_size(hosts); k++)
        at += (size_t)sprintf(csv + at, "%s%s", k ? "," : "", json_string_value(json_array_get(hosts, k)));
    return csv;
}

/* Lays the argv out in one block: pointers first, then the filled words. Returns the block or NULL. */
static char **lay_out(const tw_launcher *l, const char *program, const char *procs, const char *hosts,
                      char *const *trainer)
{
    size_t words = 1, bytes = 0, t = 0;
    while (trainer[t])
        t++;
    int keep_optional = *hosts != 0;
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->word[i], TRAINER))
            words += t;
        else if (!l->optional[i] || keep_optional) {
            words++;
            bytes += (i ? fill(l->word[i], procs, hosts, NULL) : strlen(program)) + 1;
        }
    char **argv = malloc(words * sizeof *argv + bytes);
    if (!argv)
        return NULL;
    char *at = (char *)(argv + words);
    size_t k = 0;
    for (int i = 0; i < l->n; i++) {
        if (l->optional[i] && !keep_optional)
            continue;
        if (!strcmp(l->word[i], TRAINER)) {
            for (size_t j = 0; j < t; j++)
                argv[k++] = trainer[j];
            continue;
        }
        size_t n = i ? fill(l->word[i], procs, hosts, at) : strlen(program);
        if (!i)
            memcpy(at, program, n);
        at[n] = 0;
        argv[k++] = at;
        at += n + 1;
    }
    argv[k] = NULL;
    return argv;
}

tw_status tw_launch_argv(const tw_launcher *l, int processes, const json_t *hosts, char *const *trainer,
                         char ***out, tw_error *err)
{
    char program[MAX_PATH_BYTES], procs[16];
    *out = NULL;
    if (resolve(l->word[0], program, sizeof program) != 0)
        return not_found(l, "launcher", err);
    snprintf(procs, sizeof procs, "%d", processes);
    char *csv = join_hosts(hosts);
    *out = csv ? lay_out(l, program, procs, csv, trainer) : NULL;
    free(csv);
    return *out ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

/* ================================ sessions ================================ */

/* The session of process pid from /proc/PID/stat ("pid (comm) state ppid pgrp session ..."; comm may
 * hold spaces and parentheses: the last ')' ends it), its group into *pgrp. -1 when it is gone or
 * unreadable. */
static pid_t session_of(const char *pid, pid_t *group)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *end = strrchr(buf, ')');
    int ppid, pgrp, sid;
    char state;
    if (!end || sscanf(end + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
        return -1;
    *group = (pid_t)pgrp;
    return (pid_t)sid;
}

int tw_launch_session_signal(pid_t sid, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    pid_t group = 0;
    while ((e = readdir(d)))
        if (isdigit((unsigned char)e->d_name[0]) && session_of(e->d_name, &group) == sid && group != sid) {
            found++;
            if (sig)
                kill((pid_t)atol(e->d_name), sig);
        }
    closedir(d);
    return found;
}
