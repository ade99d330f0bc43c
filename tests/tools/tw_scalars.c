/* tw_scalars.c — prints the scalar series of a run folder as tw_events_read_scalars returns them, for the
 * TensorFlow compatibility tests (tests/integration/test_events_read.py). Owns nothing but its arguments.
 *
 *   tw_scalars LOGDIR [MAX_POINTS]
 *
 * Prints the JSON object {"tag": [[step, value, wall_time], ...]} on one line (reals with 17
 * significant digits, so every double reads back exactly). MAX_POINTS defaults to 1000000. Exit status
 * 0 ok; 1 failure, with "STATUS: file: at byte N: message" on stderr; 2 usage. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "events_read.h"

int main(int argc, char **argv)
{
    char *end = NULL;
    unsigned long long max_points = argc == 3 ? strtoull(argv[2], &end, 10) : 1000000;
    if (argc < 2 || argc > 3 || (end && (*end || end == argv[2]))) {
        fprintf(stderr, "usage: tw_scalars LOGDIR [MAX_POINTS]\n");
        return 2;
    }
    json_t *out;
    tw_error err;
    tw_error_clear(&err);
    tw_status s = tw_events_read_scalars(argv[1], (size_t)max_points, &out, &err);
    if (s != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "%s: %s\n", tw_status_name(s), msg);
        return 1;
    }
    int rc = json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17)) == 0 ? 0 : 1;
    putchar('\n');
    json_decref(out);
    return rc;
}
