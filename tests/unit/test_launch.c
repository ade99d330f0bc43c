/* test_launch.c — the launcher template and a run's launch keys (launch.h): the default's argv with and
 * without hosts, a custom template (placeholders inside words, {trainer} expanded in place, the program
 * resolved on PATH), templates refused with their reason, "processes" and "hosts" accepted and refused
 * naming the key, the missing launcher, the local device count, and the session count of a process made
 * a session leader here. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "launch.h"

static char *const TRAINER[] = {"/opt/tower", "train", "cfg.json", "--logdir", "/d/runs/x", NULL};

/* The argv of template t for processes and hosts (a JSON array text), joined by '|' into buf. */
static void argv_of(const char *t, int processes, const char *hosts, char *buf, size_t size)
{
    tw_launcher *l;
    tw_error err;
    if (tw_launcher_parse(t, &l, &err) != TW_OK)
        fail_msg("refused '%s': %s", t ? t : "(default)", err.message);
    json_t *h = json_loads(hosts, 0, NULL);
    char **argv;
    assert_int_equal(tw_launch_argv(l, processes, h, TRAINER, &argv, &err), TW_OK);
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; argv[i]; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? "|" : "", i ? argv[i] : strrchr(argv[i], '/') + 1);
    free(argv);
    json_decref(h);
    tw_launcher_destroy(l);
}

static void test_default_without_and_with_hosts(void **state)
{
    (void)state;
    char got[1024];
    setenv("PATH", "/usr/bin:/bin", 1);
    if (access("/usr/bin/mpirun", X_OK) != 0) /* Open MPI is a test dependency: without it, nothing to resolve */
        skip();
    argv_of(NULL, 2, "[]", got, sizeof got);
    assert_string_equal(got, "mpirun|--quiet|-np|2|--oversubscribe|--bind-to|none|/opt/tower|train|cfg.json|--logdir|/d/runs/x");
    argv_of(NULL, 4, "[\"a:2\", \"b.example.org:2\"]", got, sizeof got);
    assert_string_equal(got, "mpirun|--quiet|-np|4|--oversubscribe|--bind-to|none|--host|a:2,b.example.org:2|/opt/tower|"
                             "train|cfg.json|--logdir|/d/runs/x");
}

static void test_custom_template_fills_inside_words(void **state)
{
    (void)state;
    char got[1024];
    setenv("PATH", "/nonexistent::/usr/bin:/bin", 1); /* an empty entry (the working folder) is skipped */
    argv_of("  env N={processes} [-H={hosts}x] {trainer} --tail  ", 3, "[]", got, sizeof got);
    assert_string_equal(got, "env|N=3|/opt/tower|train|cfg.json|--logdir|/d/runs/x|--tail");
    argv_of("env N={processes}{processes} [-H={hosts}x] {trainer}", 3, "[\"h1\"]", got, sizeof got);
    assert_string_equal(got, "env|N=33|-H=h1x|/opt/tower|train|cfg.json|--logdir|/d/runs/x");
}

static void test_bad_templates_are_refused_naming_them(void **state)
{
    (void)state;
    static const struct {
        const char *t, *why;
    } BAD[] = {
        {"mpirun -np {processes}", "exactly once"},
        {"mpirun {trainer} {trainer}", "exactly once"},
        {"mpirun {nprocs} {trainer}", "unknown placeholder"},
        {"mpirun {processes {trainer}", "unknown placeholder"},
        {"mpirun processes} {trainer}", "without its '{'"},
        {"mpirun --host {hosts} {trainer}", "inside an optional group"},
        {"mpirun [x {trainer}]", "outside [...]"},
        {"mpirun x{trainer}", "a word of its own"},
        {"mpirun \"{trainer}\"", "no quotes"},
        {"mpirun $HOME {trainer}", "no quotes"},
        {"mpirun\t{trainer}", "no quotes"},
        {"mpirun [a [b] {trainer}", "do not nest"},
        {"mpirun a] {trainer}", "without its '['"},
        {"mpirun [a {trainer}", "outside [...]"},
        {"mpirun [] {trainer}", "at a word's start"},
        {"mpirun a[b {trainer}", "at a word's start"},
        {"{trainer}", "the launcher program"},
        {"[mpirun] {trainer}", "the launcher program"},
        {"", "exactly once"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        tw_launcher *l = (tw_launcher *)1;
        tw_error err;
        if (tw_launcher_parse(BAD[i].t, &l, &err) != TW_ERR_INVALID)
            fail_msg("accepted '%s'", BAD[i].t);
        assert_null(l);
        char head[256];
        snprintf(head, sizeof head, "--launcher '%s': ", BAD[i].t);
        if (strncmp(err.message, head, strlen(head)) || !strstr(err.message, BAD[i].why))
            fail_msg("'%s': message '%s', expected '%s...%s'", BAD[i].t, err.message, head, BAD[i].why);
    }
}

/* Submission keys of the JSON text cfg through the default launcher: the status; the message in why. */
static tw_status take(const char *cfg_text, tw_launch_keys *k, char *why, size_t size)
{
    tw_launcher *l;
    tw_error err;
    assert_int_equal(tw_launcher_parse(NULL, &l, &err), TW_OK);
    json_t *cfg = json_loads(cfg_text, 0, NULL);
    assert_non_null(cfg);
    *k = (tw_launch_keys){0};
    tw_status s = tw_launch_take_keys(l, cfg, k, &err);
    snprintf(why, size, "%s", s == TW_OK ? "" : err.message);
    if (s == TW_OK) /* the keys are the server's: the engine's config never sees them */
        assert_int_equal(json_object_size(cfg), 1);
    json_decref(cfg);
    tw_launcher_destroy(l);
    return s;
}

static void test_keys_accepted(void **state)
{
    (void)state;
    tw_launch_keys k;
    char why[512];
    setenv("PATH", "/usr/bin:/bin", 1);
    assert_int_equal(take("{\"steps\": 1}", &k, why, sizeof why), TW_OK);
    assert_int_equal(k.processes, 1);
    assert_int_equal(json_array_size(k.hosts), 0);
    json_decref(k.hosts);
    if (access("/usr/bin/mpirun", X_OK) != 0)
        skip();
    assert_int_equal(take("{\"steps\": 1, \"processes\": 64, \"hosts\": [\"n-1.a_b:16\", \"10.0.0.2\"]}", &k, why,
                          sizeof why), TW_OK);
    assert_int_equal(k.processes, 64);
    assert_int_equal(json_array_size(k.hosts), 2);
    assert_int_equal(tw_launch_local_towers(2, k.processes, k.hosts), 2);
    json_decref(k.hosts);
    assert_int_equal(tw_launch_local_towers(2, 3, NULL), 6);
}

static void test_keys_refused_naming_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *cfg, *key;
    } BAD[] = {
        {"{\"processes\": 0}", "processes:"},
        {"{\"processes\": 65}", "processes:"},
        {"{\"processes\": \"2\"}", "processes:"},
        {"{\"processes\": 2.0}", "processes:"},
        {"{\"processes\": 2, \"hosts\": \"a\"}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"-oProxyCommand=x\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"a b\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"a,b\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"a:0\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"a:01\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"a:10000\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"a:1:2\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [\"\"]}", "hosts:"},
        {"{\"processes\": 2, \"hosts\": [null]}", "hosts:"},
        {"{\"hosts\": [\"a\"]}", "hosts:"},
    };
    char why[512];
    tw_launch_keys k;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        if (take(BAD[i].cfg, &k, why, sizeof why) != TW_ERR_INVALID)
            fail_msg("accepted %s", BAD[i].cfg);
        if (strncmp(why, BAD[i].key, strlen(BAD[i].key)))
            fail_msg("%s: message '%s' does not start with '%s'", BAD[i].cfg, why, BAD[i].key);
        json_decref(k.hosts);
    }
    char many[4096] = "{\"processes\": 2, \"hosts\": [\"h\"";
    for (int i = 1; i <= TW_LAUNCH_MAX_HOSTS; i++)
        strcat(many, ", \"h\"");
    strcat(many, "]}");
    assert_int_equal(take(many, &k, why, sizeof why), TW_ERR_INVALID);
    assert_true(!strncmp(why, "hosts:", 6));
    json_decref(k.hosts);
}

static void test_a_launcher_not_on_path_refuses_processes(void **state)
{
    (void)state;
    setenv("PATH", "/nonexistent", 1);
    tw_launch_keys k;
    char why[512];
    assert_int_equal(take("{\"steps\": 1, \"processes\": 2}", &k, why, sizeof why), TW_ERR_INVALID);
    assert_non_null(strstr(why, "processes: "));
    assert_non_null(strstr(why, "'mpirun' is not found on PATH"));
    json_decref(k.hosts);
    assert_int_equal(take("{\"steps\": 1, \"processes\": 1}", &k, why, sizeof why), TW_OK); /* one: none needed */
    json_decref(k.hosts);
    tw_launcher *l;
    tw_error err;
    char **argv = (char **)1;
    assert_int_equal(tw_launcher_parse(NULL, &l, &err), TW_OK);
    assert_int_equal(tw_launch_argv(l, 2, NULL, TRAINER, &argv, &err), TW_ERR_INVALID);
    assert_null(argv);
    tw_launcher_destroy(l);
    setenv("PATH", "/usr/bin:/bin", 1);
}

/* A child made a session leader, with a grandchild in a process group of its own (as mpirun's ranks):
 * the session counts the grandchild only (the leader's group is kill(-sid)'s), and a signal ends it. */
static void test_session_signal_reaches_other_groups_of_the_session(void **state)
{
    (void)state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t leader = fork();
    if (leader == 0) {
        setsid();
        if (fork() == 0) {
            setpgid(0, 0);
            close(ready[1]);
            for (;;)
                pause();
        }
        char b = 1;
        ssize_t w = write(ready[1], &b, 1);
        (void)w;
        for (;;)
            pause();
    }
    close(ready[1]);
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    /* the grandchild's setpgid may come a moment after the leader's byte: wait for it by condition */
    int found = 0;
    for (int i = 0; i < 1000 && (found = tw_launch_session_signal(leader, 0)) != 1; i++)
        usleep(1000);
    assert_int_equal(found, 1);
    assert_int_equal(tw_launch_session_signal(leader, SIGKILL), 1);
    kill(leader, SIGKILL);
    waitpid(leader, NULL, 0);
    close(ready[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_without_and_with_hosts),
        cmocka_unit_test(test_custom_template_fills_inside_words),
        cmocka_unit_test(test_bad_templates_are_refused_naming_them),
        cmocka_unit_test(test_keys_accepted),
        cmocka_unit_test(test_keys_refused_naming_the_key),
        cmocka_unit_test(test_a_launcher_not_on_path_refuses_processes),
        cmocka_unit_test(test_session_signal_reaches_other_groups_of_the_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
