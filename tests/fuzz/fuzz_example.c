/* fuzz_example.c — libFuzzer harness for the tf.train.Example decoder: parse, then walk every feature
 * and every value through the public accessors. */
#include <stddef.h>
#include <stdint.h>

#include "example.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tw_example *ex;
    tw_error err;
    if (tw_example_parse(data, size, "fuzz", 0, &ex, &err) != TW_OK)
        return 0;
    volatile uint64_t sink = 0;
    for (size_t i = 0; i < tw_example_feature_count(ex); i++) {
        tw_feature f;
        tw_example_feature_at(ex, i, &f);
        sink += f.name[0];
        for (size_t k = 0; k < f.count; k++) {
            if (f.kind == TW_FEATURE_INT64)
                sink += (uint64_t)f.int64s[k];
            else if (f.kind == TW_FEATURE_FLOAT)
                sink += (uint64_t)(f.floats[k] == f.floats[k]);
            else if (f.kind == TW_FEATURE_BYTES) {
                size_t len;
                const uint8_t *p = tw_feature_bytes_at(&f, k, &len);
                if (len)
                    sink += p[len - 1];
            }
        }
        tw_feature found;
        if (!tw_example_find(ex, f.name, &found))
            __builtin_trap();
    }
    (void)sink;
    tw_example_destroy(ex);
    return 0;
}
