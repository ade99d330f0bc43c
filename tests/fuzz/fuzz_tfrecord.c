/* fuzz_tfrecord.c — libFuzzer harness for the TFRecord reader. The first input byte picks the
 * compression (auto, none, gzip, zlib) and a small record cap and decompression budget, so caps,
 * truncation, CRC and inflate error paths are all reached. Every record read is touched end to end so
 * ASan sees any out-of-bounds length. */
#include <stddef.h>
#include <stdint.h>

#include "tfrecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const tw_compression kinds[] = {TW_COMPRESSION_AUTO, TW_COMPRESSION_NONE,
                                           TW_COMPRESSION_GZIP, TW_COMPRESSION_ZLIB};
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.compression = kinds[data[0] & 3];
    o.max_record_bytes = (data[0] & 4) ? 64 : 1 << 20;
    o.max_total_bytes = (data[0] & 8) ? 4096 : 0;
    tw_tfrecord_reader *r;
    tw_error err;
    if (tw_tfrecord_reader_open_mem(data + 1, size - 1, "fuzz", &o, &r, &err) != TW_OK)
        return 0;
    const uint8_t *rec;
    size_t len;
    volatile uint8_t sink = 0;
    while (tw_tfrecord_read(r, &rec, &len, &err) == TW_OK)
        for (size_t i = 0; i < len; i++)
            sink ^= rec[i];
    (void)sink;
    tw_tfrecord_reader_close(r);
    return 0;
}
