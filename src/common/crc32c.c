/* crc32c.c - CRC-32C with SSE4.2 and a slicing-by-8 software fallback.
 *
 * The hardware path is one stream of 8-byte crc32q instructions: several GiB/s,
 * far above the disk. The chunk checksums are computed on worker threads, so
 * a multi-stream version is not worth its complexity yet.
 */
#include "common/crc32c.h"

#include <string.h>

#define POLY 0x82f63b78u    /* CRC-32C, reflected */

static uint32_t table[8][256];
static int table_ready;

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1)));
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
	__atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE))
		table_init();   /* idempotent: racing threads compute the same table */
	crc = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		v ^= crc;
		crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^
		      table[5][(v >> 16) & 0xff] ^ table[4][(v >> 24) & 0xff] ^
		      table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
		      table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	while (len >= 32) {
		uint64_t v[4];

		memcpy(v, p, 32);
		c = __builtin_ia32_crc32di(c, v[0]);
		c = __builtin_ia32_crc32di(c, v[1]);
		c = __builtin_ia32_crc32di(c, v[2]);
		c = __builtin_ia32_crc32di(c, v[3]);
		p += 32;
		len -= 32;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

int crc32c_hw_available(void)
{
	return __builtin_cpu_supports("sse4.2");
}
#else
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	return crc32c_sw(crc, buf, len);
}

int crc32c_hw_available(void)
{
	return 0;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	static int hw = -1;

	if (hw < 0)
		hw = crc32c_hw_available();
	return hw ? crc32c_hw(crc, buf, len) : crc32c_sw(crc, buf, len);
}
