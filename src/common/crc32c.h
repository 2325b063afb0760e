/* crc32c.h - CRC-32C (Castagnoli), the checksum of every Stasis chunk.
 *
 * crc32c(0, buf, len) is the standard CRC-32C (init and final xor ~0), so
 * crc32c(0, "123456789", 9) == 0xe3069283; it chains: crc32c(crc32c(0, a, n),
 * b, m) is the CRC of a followed by b. The SSE4.2 instruction is used when the
 * CPU has it, a table-driven software version otherwise.
 */
#ifndef STASIS_COMMON_CRC32C_H
#define STASIS_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The CRC of a followed by b from crc32c(0, a, ...) = crc_a and
 * crc32c(0, b, len_b) = crc_b, without reading either: a writer that
 * checksummed a block for its own header need not pass over it again for
 * the file's CRC. Costs about 64 32-bit steps per bit of len_b. */
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* The two implementations, for tests and benchmarks. crc32c_hw() may only be
 * called when crc32c_hw_available() is true. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len);
int crc32c_hw_available(void);

#endif
