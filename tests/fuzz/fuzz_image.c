/* fuzz_image.c — libFuzzer harness for the image path of a prediction: PNG and JPEG decoding
 * (eventlog/image.h, libpng and libjpeg-turbo behind their setjmp error handlers) and the input rules that
 * turn a file into a model's rows (engine/predict.h: tw_predict_add_file, images and .npy arrays).
 *
 * The first input byte picks the model's input shape (28x28x1, 28x28x3 or 8x8x1) and, with its bit 3 set,
 * has every PNG chunk's CRC made right before decoding, so that mutations reach what the CRCs guard (the
 * one-call inflate and the row filters of png_fast.c, libpng's) instead of all being refused there; the
 * rest is the file.
 * A decoded image is touched end to end so ASan sees any short buffer, and its size must be within the
 * caps; the batch must hold at most its caps' rows. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "image.h"
#include "predict.h"

/* p's PNG chunks, from byte 8 to the first that does not fit, each given its right CRC-32 (p is changed). */
static void fix_crcs(uint8_t *p, size_t n)
{
    for (size_t at = 8; at + 12 <= n;) {
        size_t len = (size_t)p[at] << 24 | (size_t)p[at + 1] << 16 | (size_t)p[at + 2] << 8 | p[at + 3];
        if (len > n - at - 12)
            return;
        uLong crc = crc32(0, p + at + 4, (uInt)len + 4);
        for (int i = 0; i < 4; i++)
            p[at + 8 + len + i] = (uint8_t)(crc >> (24 - 8 * i));
        at += 12 + len;
    }
}

static int decode(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || !(data[0] & 8))
        return decode(data, size);
    uint8_t *copy = malloc(size);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    fix_crcs(copy + 1, size - 1);
    decode(copy, size);
    free(copy);
    return 0;
}

static int decode(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const int shapes[3][3] = {{28, 28, 1}, {28, 28, 3}, {8, 8, 1}};
    const int *shape = shapes[data[0] % 3];
    tw_image img;
    tw_error err;
    if (tw_image_decode(data + 1, size - 1, "fuzz", &img, &err) == TW_OK) {
        if (img.width * img.height > TW_IMAGE_MAX_PIXELS || (img.channels != 1 && img.channels != 3))
            __builtin_trap();
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < (size_t)img.width * img.height * img.channels; i++)
            sink ^= img.pixels[i];
        (void)sink;
        tw_image_free(&img);
    }
    tw_predict_batch b = {.shape = {shape[0], shape[1], shape[2]}, .rank = 3, .scale = 1.0f / 255.0f,
                          .width = (size_t)(shape[0] * shape[1] * shape[2]), .labels = json_array()};
    (void)tw_predict_add_file(&b, data + 1, size - 1, "fuzz", &err);
    if (b.rows > TW_PREDICT_MAX_INPUTS || b.rows != json_array_size(b.labels))
        __builtin_trap();
    tw_predict_batch_cleanup(&b);
    return 0;
}
