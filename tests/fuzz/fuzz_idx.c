/* fuzz_idx.c — libFuzzer harness for the IDX parser and streaming reader (idx.h), raw and gzip.
 *
 * The first input byte picks the content budget (64 KiB or 4 MiB, never none, so a header may not make
 * the reader allocate more than the budget allows); the rest is the file. The header parser is also run
 * on the bytes directly. Every item read is touched end to end so ASan sees any out-of-bounds length,
 * and the reader must end with TW_END or an error, never loop. */
#include <stddef.h>
#include <stdint.h>

#include "idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint64_t budget = (data[0] & 1) ? 4u << 20 : 64u << 10;
    tw_idx_header h;
    tw_error err;
    (void)tw_idx_parse_header(data + 1, size - 1, "fuzz", &h, &err);
    tw_idx_reader *r;
    if (tw_idx_open_mem(data + 1, size - 1, "fuzz", budget, &r, &err) != TW_OK)
        return 0;
    const tw_idx_header *hh = tw_idx_reader_header(r);
    const uint8_t *item;
    volatile uint8_t sink = 0;
    uint64_t n = 0;
    while (tw_idx_next(r, &item, &err) == TW_OK) {
        for (uint64_t i = 0; i < hh->item_bytes; i++)
            sink ^= item[i];
        if (++n > hh->count)
            __builtin_trap(); /* more items than declared */
    }
    (void)sink;
    tw_idx_close(r);
    return 0;
}
