/* test_child.c — the child protocol emitter's two faces (child.h): on a pipe every line is compact JSON
 * with the protocol's keys, unchanged by the terminal switch; on the stream tw_child_use_terminal names, a
 * step line becomes the `\r`-rewritten progress line (step/total, examples/s, loss, ETA), an eval line its
 * values under their names less "eval_", a heartbeat nothing, and the final line its keys and values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "child.h"
#include "progress.h"

/* Writes a run's lines (backend, step, heartbeat, eval, final) through an emitter on a memory stream;
 * returns the text (caller frees). terminal: name that stream as a terminal first. */
static char *emit_run(int terminal)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    tw_child_use_terminal(terminal ? out : NULL, 300);
    tw_child_out o;
    tw_child_init(&o, out);
    const char *devices[] = {"cpu"};
    tw_child_backend(&o, "cpu", devices, 1, "none", 1);
    tw_child_rates rates = {.learning_rate = 0.001, .examples_per_sec = 5000, .sec_per_batch = 0.01,
                            .eta_s = 125};
    tw_child_step(&o, 100, 0.5, &rates);
    o.last_write -= 2 * TW_CHILD_HEARTBEAT_S;
    tw_child_heartbeat(&o, 100);
    tw_child_eval e = {.step = 150, .loss = 0.25, .examples = 10000, .has_accuracy = 1, .accuracy = 0.875};
    tw_child_eval_line(&o, &e);
    tw_child_final(&o, TW_CHILD_COMPLETED, 300, 2.5);
    fclose(out);
    tw_child_use_terminal(NULL, 0);
    return text;
}

static void test_a_pipe_gets_the_json_lines(void **state)
{
    (void)state;
    char *text = emit_run(0);
    assert_string_equal(text,
                        "{\"backend\":\"cpu\",\"devices\":[\"cpu\"],\"towers\":1,\"processes\":1,"
                        "\"total_towers\":1,\"world\":\"none\"}\n"
                        "{\"step\":100,\"loss\":0.5,\"learning_rate\":0.001,\"examples_per_sec\":5000.0,"
                        "\"sec_per_batch\":0.01,\"eta_s\":125.0}\n"
                        "{\"heartbeat\":true,\"step\":100}\n"
                        "{\"step\":150,\"eval_loss\":0.25,\"eval_examples\":10000,\"eval_accuracy\":0.875}\n"
                        "{\"status\":\"completed\",\"step\":300,\"seconds\":2.5}\n");
    free(text);
}

static void test_a_terminal_gets_the_progress_line(void **state)
{
    (void)state;
    char *text = emit_run(1);
    assert_string_equal(text,
                        "\r\033[Kbackend cpu, devices [\"cpu\"], towers 1, processes 1, total_towers 1, "
                        "world none\n"
                        "\r\033[Kstep 100/300  5000 ex/s  loss 0.5000  ETA 2m05s"
                        "\r\033[Keval at step 150: loss 0.25 examples 10000 accuracy 0.875\n"
                        "\r\033[Kstatus completed, step 300, seconds 2.5\n");
    free(text);
}

static void test_progress_line_leaves_out_what_is_unknown(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    tw_progress_line(out, 7, 0, 0, 1.25, 0);
    tw_progress_line(out, 8, 10, 12.4, 1.0, 4000);
    fclose(out);
    assert_string_equal(text, "\r\033[Kstep 7  loss 1.2500\r\033[Kstep 8/10  12 ex/s  loss 1.0000  ETA 1h06m");
    free(text);
}

/* The trainer's command line, word for word; without a monitor URL it ends after --input-memory. */
static void test_the_train_command_line(void **state)
{
    (void)state;
    tw_child_train_args a = {.trainer = "/usr/bin/tower", .config = "D/runs/r/config.json", .logdir = "D/runs/r",
                             .backend = "cpu", .data_root = "D", .monitor_url = "http://h:1/#/runs/r",
                             .stop_within_s = 20, .input_memory = 1ull << 31};
    char text[2][24], *argv[TW_CHILD_TRAIN_ARGV];
    tw_child_train_argv(&a, text, argv);
    const char *want[] = {"/usr/bin/tower", "train", "D/runs/r/config.json", "--logdir", "D/runs/r", "--resume",
                          "--backend", "cpu", "--data-root", "D", "--stop-within", "20", "--input-memory",
                          "2147483648", "--monitor-url", "http://h:1/#/runs/r", NULL};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        if (want[i])
            assert_string_equal(argv[i], want[i]);
        else
            assert_null(argv[i]);
    }
    a.monitor_url = NULL;
    tw_child_train_argv(&a, text, argv);
    assert_string_equal(argv[13], "2147483648");
    assert_null(argv[14]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_pipe_gets_the_json_lines),
        cmocka_unit_test(test_a_terminal_gets_the_progress_line),
        cmocka_unit_test(test_progress_line_leaves_out_what_is_unknown),
        cmocka_unit_test(test_the_train_command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
