/* tw_confusiongen.c — writes one confusion matrix as an image summary through tw_summary_confusion, for
 * tests/integration/test_images.py (TensorBoard's images API over the heat map). Owns nothing but its
 * arguments.
 *
 *   tw_confusiongen LOGDIR STEP K COUNT...   (K * K counts, row-major: row = true class)
 *
 * Writes `eval/confusion_matrix` at STEP into a new event file in LOGDIR. Exit status 0 ok, 1 failure,
 * 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "summary_images.h"

enum { MAX_K = 64 };

int main(int argc, char **argv)
{
    int k = argc > 3 ? atoi(argv[3]) : 0;
    if (k < 1 || k > MAX_K || argc != 4 + k * k) {
        fprintf(stderr, "usage: tw_confusiongen LOGDIR STEP K COUNT... (K * K counts, 1 <= K <= %d)\n", MAX_K);
        return 2;
    }
    int64_t counts[MAX_K * MAX_K];
    for (int i = 0; i < k * k; i++)
        counts[i] = strtoll(argv[4 + i], NULL, 10);
    tw_events_writer *w = NULL;
    tw_error err;
    tw_status s = tw_events_create(argv[1], NULL, &w, &err);
    if (s == TW_OK)
        s = tw_summary_confusion(w, "eval/confusion_matrix", strtoll(argv[2], NULL, 10), counts, k, &err);
    if (s == TW_OK)
        s = tw_events_close(w, &err);
    if (s != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tw_confusiongen: %s\n", msg);
    }
    tw_events_destroy(w);
    return s == TW_OK ? 0 : 1;
}
