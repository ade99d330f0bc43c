/* crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TensorFlow's CRC mask.
 *
 * Owns: the checksum TFRecord and tfevents framing use (docs/formats.md §1.2). Uses the SSE4.2 crc32
 * instruction when the CPU has it (checked once at first use), else a portable slicing-by-8 table.
 * Written here rather than linked because the issue asks for both paths to be selectable and tested
 * against the RFC 3720 vectors; it is ~100 lines. All functions are thread-safe. */
#ifndef TW_CRC32C_H
#define TW_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 for a fresh checksum) over n bytes of data; picks the fastest path available. */
uint32_t tw_crc32c_extend(uint32_t crc, const void *data, size_t n);

/* The same, forced onto one path; used by tests and the benchmark. tw_crc32c_extend_hw must only be
 * called when tw_crc32c_have_hw() is true. */
uint32_t tw_crc32c_extend_portable(uint32_t crc, const void *data, size_t n);
uint32_t tw_crc32c_extend_hw(uint32_t crc, const void *data, size_t n);
int tw_crc32c_have_hw(void);

static inline uint32_t tw_crc32c(const void *data, size_t n) { return tw_crc32c_extend(0, data, n); }

/* TensorFlow's mask: rotate right by 15, add 0xa282ead8 (tsl/lib/hash/crc32c.h). */
static inline uint32_t tw_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static inline uint32_t tw_crc32c_unmask(uint32_t masked)
{
    uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

#endif
