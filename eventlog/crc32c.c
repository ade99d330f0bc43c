/* crc32c.c — CRC-32C with an SSE4.2 path and a portable slicing-by-8 fallback. See crc32c.h. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256]; /* slicing-by-8 tables, filled once */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8); /* Tower targets little-endian hosts (x86-64, aarch64) */
    return v;
}

uint32_t tw_crc32c_extend_portable(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, init_table);
    const uint8_t *p = data;
    uint32_t c = crc ^ 0xFFFFFFFFu;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v = load_le64(p) ^ c;
        c = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
            table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
            table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
    }
    while (n--)
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) uint32_t tw_crc32c_extend_hw(uint32_t crc, const void *data,
                                                                size_t n)
{
    const uint8_t *p = data;
    uint64_t c = crc ^ 0xFFFFFFFFu;
    for (; n >= 8; n -= 8, p += 8)
        c = _mm_crc32_u64(c, load_le64(p));
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}

int tw_crc32c_have_hw(void) { return __builtin_cpu_supports("sse4.2"); }
#else
uint32_t tw_crc32c_extend_hw(uint32_t crc, const void *data, size_t n)
{
    return tw_crc32c_extend_portable(crc, data, n);
}

int tw_crc32c_have_hw(void) { return 0; }
#endif

uint32_t tw_crc32c_extend(uint32_t crc, const void *data, size_t n)
{
    static _Atomic int have = -1; /* every thread that races here stores the same value */
    if (have < 0)
        have = tw_crc32c_have_hw();
    return have ? tw_crc32c_extend_hw(crc, data, n) : tw_crc32c_extend_portable(crc, data, n);
}
