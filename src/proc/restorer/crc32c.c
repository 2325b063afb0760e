/* crc32c.c - CRC-32C for the restorer, which checks the raw chunks it reads
 * straight from the image into place.
 *
 * The same algorithm as src/common/crc32c.c, without libc: three
 * independent streams of crc32q over adjacent lanes of LANE bytes (one
 * crc32q has a latency of three cycles but a throughput of one), joined
 * with a table that advances a register over LANE zero bytes. A CPU
 * without SSE4.2 gets the bytewise table: slow, but a restore must not
 * depend on an instruction set extension to be checked.
 */
#include "proc/restorer/sys.h"

#define POLY 0x82f63b78u    /* CRC-32C, reflected */
#define LANE 4096u

typedef uint64_t __attribute__((may_alias, aligned(1))) u64_any;

static uint32_t byte_tab[256];
static uint32_t shift_tab[4][256];
static int have_hw;

__attribute__((target("sse4.2")))
static uint32_t advance_zeros(uint32_t r)
{
	uint64_t c = r;

	for (unsigned i = 0; i < LANE / 8; i++)
		c = __builtin_ia32_crc32di(c, 0);
	return (uint32_t)c;
}

void restorer_crc_init(void)
{
	uint32_t a = 1, b, c = 0, d, basis[32];

	__asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
	have_hw = (c >> 20) & 1;
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t x = i;

		for (int k = 0; k < 8; k++)
			x = (x >> 1) ^ (POLY & (0u - (x & 1)));
		byte_tab[i] = x;
	}
	if (!have_hw)
		return;
	for (int k = 0; k < 32; k++)
		basis[k] = advance_zeros(1u << k);
	for (int k = 0; k < 4; k++)
		for (unsigned v = 0; v < 256; v++) {
			uint32_t x = 0;

			for (int j = 0; j < 8; j++)
				if (v & (1u << j))
					x ^= basis[8 * k + j];
			shift_tab[k][v] = x;
		}
}

static uint32_t shift(uint32_t c)
{
	return shift_tab[0][c & 0xff] ^ shift_tab[1][(c >> 8) & 0xff] ^ shift_tab[2][(c >> 16) & 0xff] ^
	       shift_tab[3][c >> 24];
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t len)
{
	while (len--)
		c = (c >> 8) ^ byte_tab[(c ^ *p++) & 0xff];
	return c;
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = crc;

	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	while (len >= 3 * LANE) {
		uint64_t a = c, b = 0, d = 0;

		for (unsigned i = 0; i < LANE; i += 8) {
			a = __builtin_ia32_crc32di(a, *(const u64_any *)(p + i));
			b = __builtin_ia32_crc32di(b, *(const u64_any *)(p + LANE + i));
			d = __builtin_ia32_crc32di(d, *(const u64_any *)(p + 2 * LANE + i));
		}
		c = shift(shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
		p += 3 * LANE;
		len -= 3 * LANE;
	}
	while (len >= 8) {
		c = __builtin_ia32_crc32di(c, *(const u64_any *)p);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
	return (uint32_t)c;
}

uint32_t restorer_crc32c(uint32_t crc, const void *buf, size_t len)
{
	uint32_t c = ~crc;

	c = have_hw ? crc_hw(c, buf, len) : crc_sw(c, buf, len);
	return ~c;
}
