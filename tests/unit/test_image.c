/* test_image.c — PNG and JPEG decoding (eventlog/image.c): every PNG colour type Tower converts (gray,
 * RGB, RGBA, palette, 16-bit), grayscale and colour JPEGs, CMYK refused, the size caps checked from the
 * header, every truncation and every single-byte corruption of the files refused or decoded without a
 * crash (ASan + UBSan in the sanitizer build), every change to a PNG's compressed pixels refused (zlib's
 * Adler-32 is not checked: the chunk's CRC-32 is what refuses it), and tw_image_fit's channel and size rules. The files were
 * written by Pillow (the expected pixels are what Pillow decodes from them). */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zlib.h>

#include "image.h"

static const unsigned char GRAY_PNG[] = {
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 3, 0, 0, 0, 2, 8, 0, 0, 0, 0, 184,
    31, 57, 198, 0, 0, 0, 16, 73, 68, 65, 84, 120, 156, 99, 100, 48, 50, 98, 152, 118, 226, 63, 0, 6, 135, 2,
    195, 237, 180, 19, 172, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130
};
static const unsigned char RGB_PNG[] = {
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 3, 0, 0, 0, 2, 8, 2, 0, 0, 0, 18,
    22, 241, 77, 0, 0, 0, 24, 73, 68, 65, 84, 120, 156, 99, 248, 207, 192, 192, 0, 193, 92, 34, 114, 39, 82,
    140, 254, 255, 255, 15, 0, 60, 25, 7, 149, 239, 194, 198, 216, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96,
    130
};
static const unsigned char RGBA_PNG[] = {
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 3, 0, 0, 0, 2, 8, 6, 0, 0, 0, 157,
    116, 102, 26, 0, 0, 0, 34, 73, 68, 65, 84, 120, 156, 99, 252, 207, 192, 192, 206, 248, 159, 129, 129, 129,
    241, 63, 3, 19, 183, 136, 28, 195, 137, 84, 35, 134, 255, 255, 25, 24, 0, 80, 133, 6, 164, 223, 51, 71,
    176, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130
};
static const unsigned char PALETTE_PNG[] = {
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 3, 0, 0, 0, 2, 4, 3, 0, 0, 0, 111,
    90, 123, 41, 0, 0, 0, 18, 80, 76, 84, 69, 255, 255, 255, 0, 255, 0, 200, 100, 50, 10, 20, 30, 255, 0, 0,
    0, 0, 255, 18, 79, 39, 7, 0, 0, 0, 14, 73, 68, 65, 84, 120, 156, 99, 116, 228, 103, 48, 98, 0, 0, 1, 241,
    0, 132, 176, 126, 125, 97, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130
};
static const unsigned char GRAY16_PNG[] = {
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 3, 0, 0, 0, 2, 16, 0, 0, 0, 0, 232,
    143, 229, 133, 0, 0, 0, 22, 73, 68, 65, 84, 120, 156, 99, 100, 96, 48, 50, 50, 50, 98, 152, 54, 237, 196,
    137, 255, 255, 1, 22, 111, 5, 132, 231, 206, 107, 55, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130
};
static const unsigned char GRAY_JPG[] = {
    255, 216, 255, 224, 0, 16, 74, 70, 73, 70, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 255, 219, 0, 67, 0, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 255, 192, 0, 11, 8, 0, 16, 0,
    16, 1, 1, 17, 0, 255, 196, 0, 31, 0, 0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6,
    7, 8, 9, 10, 11, 255, 196, 0, 181, 16, 0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 125, 1, 2, 3, 0, 4,
    17, 5, 18, 33, 49, 65, 6, 19, 81, 97, 7, 34, 113, 20, 50, 129, 145, 161, 8, 35, 66, 177, 193, 21, 82, 209,
    240, 36, 51, 98, 114, 130, 9, 10, 22, 23, 24, 25, 26, 37, 38, 39, 40, 41, 42, 52, 53, 54, 55, 56, 57, 58,
    67, 68, 69, 70, 71, 72, 73, 74, 83, 84, 85, 86, 87, 88, 89, 90, 99, 100, 101, 102, 103, 104, 105, 106,
    115, 116, 117, 118, 119, 120, 121, 122, 131, 132, 133, 134, 135, 136, 137, 138, 146, 147, 148, 149, 150,
    151, 152, 153, 154, 162, 163, 164, 165, 166, 167, 168, 169, 170, 178, 179, 180, 181, 182, 183, 184, 185,
    186, 194, 195, 196, 197, 198, 199, 200, 201, 202, 210, 211, 212, 213, 214, 215, 216, 217, 218, 225, 226,
    227, 228, 229, 230, 231, 232, 233, 234, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 255, 218, 0, 8,
    1, 1, 0, 0, 63, 0, 254, 111, 255, 0, 224, 155, 127, 243, 0, 255, 0, 183, 111, 253, 150, 191, 208, 3, 254,
    9, 183, 255, 0, 48, 15, 251, 118, 255, 0, 217, 107, 252, 255, 0, 255, 0, 224, 155, 127, 243, 0, 255, 0,
    183, 111, 253, 150, 191, 208, 3, 254, 9, 183, 255, 0, 48, 15, 251, 118, 255, 0, 217, 107, 255, 217
};
static const unsigned char RGB_JPG[] = {
    255, 216, 255, 224, 0, 16, 74, 70, 73, 70, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 255, 219, 0, 67, 0, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 255, 219, 0, 67, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 255, 192, 0, 17, 8, 0, 16, 0,
    16, 3, 1, 34, 0, 2, 17, 1, 3, 17, 1, 255, 196, 0, 31, 0, 0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255, 196, 0, 181, 16, 0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1,
    125, 1, 2, 3, 0, 4, 17, 5, 18, 33, 49, 65, 6, 19, 81, 97, 7, 34, 113, 20, 50, 129, 145, 161, 8, 35, 66,
    177, 193, 21, 82, 209, 240, 36, 51, 98, 114, 130, 9, 10, 22, 23, 24, 25, 26, 37, 38, 39, 40, 41, 42, 52,
    53, 54, 55, 56, 57, 58, 67, 68, 69, 70, 71, 72, 73, 74, 83, 84, 85, 86, 87, 88, 89, 90, 99, 100, 101, 102,
    103, 104, 105, 106, 115, 116, 117, 118, 119, 120, 121, 122, 131, 132, 133, 134, 135, 136, 137, 138, 146,
    147, 148, 149, 150, 151, 152, 153, 154, 162, 163, 164, 165, 166, 167, 168, 169, 170, 178, 179, 180, 181,
    182, 183, 184, 185, 186, 194, 195, 196, 197, 198, 199, 200, 201, 202, 210, 211, 212, 213, 214, 215, 216,
    217, 218, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 241, 242, 243, 244, 245, 246, 247, 248, 249,
    250, 255, 196, 0, 31, 1, 0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
    11, 255, 196, 0, 181, 17, 0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 119, 0, 1, 2, 3, 17, 4, 5, 33, 49,
    6, 18, 65, 81, 7, 97, 113, 19, 34, 50, 129, 8, 20, 66, 145, 161, 177, 193, 9, 35, 51, 82, 240, 21, 98,
    114, 209, 10, 22, 36, 52, 225, 37, 241, 23, 24, 25, 26, 38, 39, 40, 41, 42, 53, 54, 55, 56, 57, 58, 67,
    68, 69, 70, 71, 72, 73, 74, 83, 84, 85, 86, 87, 88, 89, 90, 99, 100, 101, 102, 103, 104, 105, 106, 115,
    116, 117, 118, 119, 120, 121, 122, 130, 131, 132, 133, 134, 135, 136, 137, 138, 146, 147, 148, 149, 150,
    151, 152, 153, 154, 162, 163, 164, 165, 166, 167, 168, 169, 170, 178, 179, 180, 181, 182, 183, 184, 185,
    186, 194, 195, 196, 197, 198, 199, 200, 201, 202, 210, 211, 212, 213, 214, 215, 216, 217, 218, 226, 227,
    228, 229, 230, 231, 232, 233, 234, 242, 243, 244, 245, 246, 247, 248, 249, 250, 255, 218, 0, 12, 3, 1, 0,
    2, 17, 3, 17, 0, 63, 0, 252, 65, 240, 79, 236, 169, 254, 167, 26, 105, 254, 30, 176, 176, 244, 246, 53,
    245, 247, 130, 127, 101, 79, 245, 95, 241, 46, 254, 239, 30, 87, 211, 213, 127, 157, 126, 206, 120, 39,
    246, 84, 255, 0, 83, 255, 0, 18, 223, 238, 244, 132, 227, 244, 21, 245, 239, 130, 127, 101, 79, 245, 63,
    241, 45, 199, 221, 255, 0, 150, 71, 219, 213, 107, 239, 63, 108, 55, 211, 10, 223, 235, 79, 252, 42, 105,
    254, 217, 255, 0, 47, 182, 248, 255, 0, 189, 183, 229, 186, 210, 233, 114, 254, 202, 207, 167, 167, 252,
    147, 159, 240, 181, 255, 0, 64, 151, 127, 88, 223, 224, 219, 222, 254, 188, 222, 223, 255, 217
};
static const unsigned char CMYK_JPG[] = {
    255, 216, 255, 238, 0, 14, 65, 100, 111, 98, 101, 0, 100, 0, 0, 0, 0, 0, 255, 219, 0, 67, 0, 8, 6, 6, 7,
    6, 5, 8, 7, 7, 7, 9, 9, 8, 10, 12, 20, 13, 12, 11, 11, 12, 25, 18, 19, 15, 20, 29, 26, 31, 30, 29, 26, 28,
    28, 32, 36, 46, 39, 32, 34, 44, 35, 28, 28, 40, 55, 41, 44, 48, 49, 52, 52, 52, 31, 39, 57, 61, 56, 50,
    60, 46, 51, 52, 50, 255, 192, 0, 20, 8, 0, 16, 0, 16, 4, 67, 17, 0, 77, 17, 0, 89, 17, 0, 75, 17, 0, 255,
    196, 0, 31, 0, 0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255,
    196, 0, 181, 16, 0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 125, 1, 2, 3, 0, 4, 17, 5, 18, 33, 49, 65,
    6, 19, 81, 97, 7, 34, 113, 20, 50, 129, 145, 161, 8, 35, 66, 177, 193, 21, 82, 209, 240, 36, 51, 98, 114,
    130, 9, 10, 22, 23, 24, 25, 26, 37, 38, 39, 40, 41, 42, 52, 53, 54, 55, 56, 57, 58, 67, 68, 69, 70, 71,
    72, 73, 74, 83, 84, 85, 86, 87, 88, 89, 90, 99, 100, 101, 102, 103, 104, 105, 106, 115, 116, 117, 118,
    119, 120, 121, 122, 131, 132, 133, 134, 135, 136, 137, 138, 146, 147, 148, 149, 150, 151, 152, 153, 154,
    162, 163, 164, 165, 166, 167, 168, 169, 170, 178, 179, 180, 181, 182, 183, 184, 185, 186, 194, 195, 196,
    197, 198, 199, 200, 201, 202, 210, 211, 212, 213, 214, 215, 216, 217, 218, 225, 226, 227, 228, 229, 230,
    231, 232, 233, 234, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 255, 218, 0, 14, 4, 67, 0, 77, 0,
    89, 0, 75, 0, 0, 63, 0, 243, 127, 7, 127, 203, 58, 243, 127, 248, 67, 191, 233, 159, 233, 94, 143, 227,
    31, 249, 105, 94, 255, 0, 95, 64, 120, 59, 254, 89, 209, 255, 0, 8, 119, 253, 51, 253, 43, 231, 255, 0,
    24, 255, 0, 203, 74, 43, 231, 255, 0, 7, 127, 203, 58, 250, 3, 254, 16, 239, 250, 103, 250, 87, 208, 30,
    49, 255, 0, 150, 148, 87, 208, 30, 14, 255, 0, 150, 116, 127, 194, 29, 255, 0, 76, 255, 0, 74, 249, 255,
    0, 198, 63, 242, 210, 138, 255, 217
};

static const uint8_t GRAY[6] = {0, 50, 100, 150, 200, 255};
static const uint8_t RGB[18] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 200, 100, 50, 255, 255, 255};

static tw_image decode_ok(const unsigned char *data, size_t n, int w, int h, int ch)
{
    tw_image img;
    tw_error err;
    tw_status s = tw_image_decode(data, n, "t", &img, &err);
    if (s != TW_OK)
        fail_msg("decode: %s", err.message);
    assert_int_equal(img.width, w);
    assert_int_equal(img.height, h);
    assert_int_equal(img.channels, ch);
    return img;
}

static void png_colour_types(void **state)
{
    (void)state;
    tw_image img = decode_ok(GRAY_PNG, sizeof GRAY_PNG, 3, 2, 1);
    assert_memory_equal(img.pixels, GRAY, 6);
    tw_image_free(&img);
    assert_null(img.pixels);
    img = decode_ok(GRAY16_PNG, sizeof GRAY16_PNG, 3, 2, 1); /* v * 257: the high byte is v */
    assert_memory_equal(img.pixels, GRAY, 6);
    tw_image_free(&img);
    const unsigned char *rgb[] = {RGB_PNG, RGBA_PNG, PALETTE_PNG};
    size_t sizes[] = {sizeof RGB_PNG, sizeof RGBA_PNG, sizeof PALETTE_PNG};
    for (int i = 0; i < 3; i++) { /* alpha dropped, the palette expanded */
        img = decode_ok(rgb[i], sizes[i], 3, 2, 3);
        assert_memory_equal(img.pixels, RGB, 18);
        tw_image_free(&img);
    }
    assert_int_equal(tw_image_sniff(GRAY_PNG, sizeof GRAY_PNG), TW_IMAGE_PNG);
    assert_string_equal(tw_image_format_name(TW_IMAGE_JPEG), "JPEG");
}

static void near(const uint8_t *got, const int *want, int n)
{
    for (int i = 0; i < n; i++)
        if (abs((int)got[i] - want[i]) > 3)
            fail_msg("pixel value %d: %d, Pillow decodes %d", i, got[i], want[i]);
}

static void jpeg_gray_and_colour(void **state)
{
    (void)state;
    tw_image img = decode_ok(GRAY_JPG, sizeof GRAY_JPG, 16, 16, 1);
    int row[16];
    for (int i = 0; i < 16; i++)
        row[i] = 16 * i;
    near(img.pixels, row, 16);
    tw_image_free(&img);
    img = decode_ok(RGB_JPG, sizeof RGB_JPG, 16, 16, 3);
    near(img.pixels, (const int[]){2, 2, 240, 11, 3, 234, 28, 3, 218}, 9);
    tw_image_free(&img);
    tw_error err;
    assert_int_equal(tw_image_decode(CMYK_JPG, sizeof CMYK_JPG, "c.jpg", &img, &err), TW_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "CMYK"));
    assert_string_equal(err.file, "c.jpg");
    assert_null(img.pixels);
}

static void not_an_image(void **state)
{
    (void)state;
    tw_image img;
    tw_error err;
    assert_int_equal(tw_image_decode("GIF89a", 6, NULL, &img, &err), TW_ERR_UNSUPPORTED);
    assert_int_equal(tw_image_decode("", 0, NULL, &img, &err), TW_ERR_UNSUPPORTED);
    assert_int_equal(tw_image_sniff("\xff\xd8", 2), TW_IMAGE_NONE);
}

/* A PNG signature and an IHDR of w x h (8-bit gray) with its CRC, and no more. */
static size_t png_header(uint8_t *out, uint32_t w, uint32_t h)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t chunk[4 + 4 + 13] = {0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    for (int i = 0; i < 4; i++) {
        chunk[8 + i] = (uint8_t)(w >> (24 - 8 * i));
        chunk[12 + i] = (uint8_t)(h >> (24 - 8 * i));
    }
    chunk[16] = 8; /* depth; colour type 0, compression 0, filter 0, interlace 0 */
    uint32_t crc = (uint32_t)crc32(0, chunk + 4, 17);
    memcpy(out, sig, 8);
    memcpy(out + 8, chunk, sizeof chunk);
    for (int i = 0; i < 4; i++)
        out[8 + sizeof chunk + i] = (uint8_t)(crc >> (24 - 8 * i));
    return 8 + sizeof chunk + 4;
}

static void size_caps_before_allocating(void **state)
{
    (void)state;
    uint8_t buf[64];
    tw_image img;
    tw_error err;
    size_t n = png_header(buf, 100000, 1);
    assert_int_equal(tw_image_decode(buf, n, "w.png", &img, &err), TW_ERR_TOO_LARGE);
    assert_non_null(strstr(err.message, "100000x1"));
    n = png_header(buf, 8000, 8000); /* each side under the cap, the pixels over it */
    assert_int_equal(tw_image_decode(buf, n, "p.png", &img, &err), TW_ERR_TOO_LARGE);
    n = png_header(buf, 8, 8); /* under the caps: then the missing data is the error */
    assert_int_equal(tw_image_decode(buf, n, "t.png", &img, &err), TW_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "truncated"));

    unsigned char jpg[sizeof GRAY_JPG];
    memcpy(jpg, GRAY_JPG, sizeof jpg);
    size_t sof = 2;
    while (sof + 9 < sizeof jpg && !(jpg[sof] == 0xFF && jpg[sof + 1] == 0xC0))
        sof++;
    assert_true(sof + 9 < sizeof jpg);
    jpg[sof + 5] = jpg[sof + 7] = 0xEA; /* 60000 x 60000 */
    jpg[sof + 6] = jpg[sof + 8] = 0x60;
    assert_int_equal(tw_image_decode(jpg, sizeof jpg, "j.jpg", &img, &err), TW_ERR_TOO_LARGE);
    assert_null(img.pixels);
}

/* A wanted size refuses any other from the header, the PNG's data never read (here there is none) and the
 * JPEG's never decoded; the wanted size itself decodes as without one. */
static void wanted_size_before_decoding(void **state)
{
    (void)state;
    uint8_t buf[64];
    tw_image img;
    tw_error err;
    size_t n = png_header(buf, 8192, 2048);
    assert_int_equal(tw_image_decode_sized(buf, n, 28, 28, "big.png", &img, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "8192x2048"));
    assert_non_null(strstr(err.message, "28x28"));
    assert_null(img.pixels);
    n = png_header(buf, 28, 28); /* the wanted size: then the missing data is the error */
    assert_int_equal(tw_image_decode_sized(buf, n, 28, 28, "t.png", &img, &err), TW_ERR_CORRUPT);
    tw_image whole;
    assert_int_equal(tw_image_decode(GRAY_JPG, sizeof GRAY_JPG, "g.jpg", &whole, &err), TW_OK);
    assert_int_equal(tw_image_decode_sized(GRAY_JPG, sizeof GRAY_JPG, whole.height + 1, whole.width, "g.jpg", &img,
                                           &err), TW_ERR_INVALID);
    assert_null(img.pixels);
    assert_int_equal(tw_image_decode_sized(GRAY_JPG, sizeof GRAY_JPG, whole.height, whole.width, "g.jpg", &img, &err),
                     TW_OK);
    assert_memory_equal(img.pixels, whole.pixels, (size_t)whole.width * whole.height);
    tw_image_free(&img);
    tw_image_free(&whole);
}

/* Every prefix shorter than the file is refused (never a partial image); every single-byte change is
 * refused or decodes to an image of a sane size, without a crash. */
static void truncated_and_corrupt(void **state)
{
    (void)state;
    const unsigned char *files[] = {GRAY_PNG, RGB_PNG, PALETTE_PNG, GRAY_JPG, RGB_JPG};
    size_t sizes[] = {sizeof GRAY_PNG, sizeof RGB_PNG, sizeof PALETTE_PNG, sizeof GRAY_JPG, sizeof RGB_JPG};
    for (int f = 0; f < 5; f++) {
        unsigned char *copy = malloc(sizes[f]);
        for (size_t n = 0; n < sizes[f]; n++) {
            tw_image img;
            tw_error err;
            tw_status s = tw_image_decode(files[f], n, "cut", &img, &err);
            if (s == TW_OK)
                fail_msg("file %d cut at %zu bytes decoded", f, n);
            assert_true(s == TW_ERR_CORRUPT || s == TW_ERR_UNSUPPORTED || s == TW_ERR_TOO_LARGE);
            assert_null(img.pixels);
        }
        for (size_t i = 0; i < sizes[f]; i++) {
            memcpy(copy, files[f], sizes[f]);
            copy[i] ^= 0x5A;
            tw_image img;
            tw_error err;
            if (tw_image_decode(copy, sizes[f], "bad", &img, &err) == TW_OK)
                assert_true(img.width > 0 && img.height > 0 && img.width * img.height <= TW_IMAGE_MAX_PIXELS);
            tw_image_free(&img);
        }
        free(copy);
    }
}

/* Every single-byte change to the compressed pixels of a PNG (its IDAT's data, the zlib stream's own
 * Adler-32 included) is refused as corrupt: the chunk's CRC-32 covers them. */
static void idat_changes_refused(void **state)
{
    (void)state;
    const unsigned char *files[] = {GRAY_PNG, RGB_PNG, PALETTE_PNG};
    size_t sizes[] = {sizeof GRAY_PNG, sizeof RGB_PNG, sizeof PALETTE_PNG};
    for (int f = 0; f < 3; f++) {
        const unsigned char *idat = memmem(files[f], sizes[f], "IDAT", 4);
        assert_non_null(idat);
        size_t start = (size_t)(idat - files[f]) + 4, len = (size_t)idat[-4] << 24 | (size_t)idat[-3] << 16 |
                                                              (size_t)idat[-2] << 8 | idat[-1];
        unsigned char *copy = malloc(sizes[f]);
        for (size_t i = start; i < start + len; i++) {
            memcpy(copy, files[f], sizes[f]);
            copy[i] ^= 0x01;
            tw_image img;
            tw_error err;
            if (tw_image_decode(copy, sizes[f], "bad", &img, &err) != TW_ERR_CORRUPT)
                fail_msg("file %d: a change at byte %zu of its IDAT was not refused", f, i - start);
            assert_null(img.pixels);
        }
        free(copy);
    }
}

static void fit_channels_and_size(void **state)
{
    (void)state;
    tw_image rgb = {3, 2, 3, (uint8_t *)RGB}, gray = {3, 2, 1, (uint8_t *)GRAY};
    uint8_t out[18];
    tw_error err;
    assert_int_equal(tw_image_fit(&rgb, 2, 3, 1, out, "c.png", &err), TW_OK);
    /* Pillow's convert("L") of the same pixels */
    const uint8_t luma[6] = {76, 150, 29, 18, 124, 255};
    assert_memory_equal(out, luma, 6);
    assert_int_equal(tw_image_fit(&gray, 2, 3, 3, out, "g.png", &err), TW_OK);
    for (int i = 0; i < 6; i++)
        assert_true(out[3 * i] == GRAY[i] && out[3 * i + 1] == GRAY[i] && out[3 * i + 2] == GRAY[i]);
    assert_int_equal(tw_image_fit(&rgb, 2, 3, 3, out, "c.png", &err), TW_OK);
    assert_memory_equal(out, RGB, 18);
    assert_int_equal(tw_image_fit(&gray, 28, 28, 1, out, "g.png", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "3x2"));
    assert_non_null(strstr(err.message, "28x28"));
    assert_int_equal(tw_image_fit(&gray, 2, 3, 4, out, "g.png", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "4 channels"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(png_colour_types),
        cmocka_unit_test(jpeg_gray_and_colour),
        cmocka_unit_test(not_an_image),
        cmocka_unit_test(size_caps_before_allocating),
        cmocka_unit_test(wanted_size_before_decoding),
        cmocka_unit_test(truncated_and_corrupt),
        cmocka_unit_test(idat_changes_refused),
        cmocka_unit_test(fit_channels_and_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
