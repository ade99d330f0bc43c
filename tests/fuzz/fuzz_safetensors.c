/* fuzz_safetensors.c — libFuzzer harness for the safetensors reader: parse, then read every tensor's
 * bytes and every metadata entry through the public accessors, so ASan sees any offset that escaped
 * validation. */
#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tw_safetensors *st;
    tw_error err;
    if (tw_safetensors_parse(data, size, "fuzz", &st, &err) != TW_OK)
        return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < tw_safetensors_count(st); i++) {
        const tw_st_info *t = tw_safetensors_at(st, i);
        for (uint64_t k = 0; k < t->nbytes; k++)
            sink ^= t->data[k];
        if (tw_safetensors_find(st, t->name) != t)
            __builtin_trap();
    }
    for (size_t i = 0; i < tw_safetensors_meta_count(st); i++)
        sink ^= (uint8_t)tw_safetensors_meta_at(st, i)->key[0];
    (void)sink;
    tw_safetensors_free(st);
    return 0;
}
