/* crc32c.c - CRC-32C with SSE4.2 and a slicing-by-8 software fallback.
 *
 * The hardware path runs three independent streams of 8-byte crc32q
 * instructions over three adjacent lanes of LANE bytes, then joins them: one
 * crc32q has a latency of three cycles but a throughput of one, so one
 * stream would use a third of the unit. Checksums sit on the application's
 * blocking path (a checkpoint's chunks, the store's file CRC), so this is
 * worth its 40 lines.
 *
 * The join: the CRC register (before the final inversion) is linear over
 * GF(2) in (register, data). Running it over lanes A, B, C from register r
 * gives shift(shift(a) ^ b) ^ c, where a is the register after A started
 * from r, b and c the registers after B and C started from 0, and shift()
 * advances a register over LANE zero bytes: a fixed 32x32 bit matrix,
 * tabulated once per byte of the register (shift_tab).
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
#define LANE 4096u              /* bytes per lane and round: a multiple of 8 */

static uint32_t shift_tab[4][256];
static int shift_ready;

/* The register after LANE zero bytes, from register r. */
__attribute__((target("sse4.2")))
static uint32_t advance_zeros(uint32_t r)
{
	uint64_t c = r;

	for (unsigned i = 0; i < LANE / 8; i++)
		c = __builtin_ia32_crc32di(c, 0);
	return (uint32_t)c;
}

static void shift_init(void)
{
	uint32_t basis[32];

	for (int b = 0; b < 32; b++)
		basis[b] = advance_zeros(1u << b);
	for (int k = 0; k < 4; k++)
		for (unsigned v = 0; v < 256; v++) {
			uint32_t x = 0;

			for (int j = 0; j < 8; j++)
				if (v & (1u << j))
					x ^= basis[8 * k + j];
			shift_tab[k][v] = x;
		}
	__atomic_store_n(&shift_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t shift(uint32_t c)
{
	return shift_tab[0][c & 0xff] ^ shift_tab[1][(c >> 8) & 0xff] ^ shift_tab[2][(c >> 16) & 0xff] ^
	       shift_tab[3][c >> 24];
}

__attribute__((target("sse4.2")))
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	if (len >= 3 * LANE && !__atomic_load_n(&shift_ready, __ATOMIC_ACQUIRE))
		shift_init();   /* idempotent: racing threads compute the same table */
	while (len >= 3 * LANE) {
		uint64_t a = c, b = 0, d = 0;

		for (unsigned i = 0; i < LANE; i += 8) {
			uint64_t va, vb, vd;

			memcpy(&va, p + i, 8);
			memcpy(&vb, p + LANE + i, 8);
			memcpy(&vd, p + 2 * LANE + i, 8);
			a = __builtin_ia32_crc32di(a, va);
			b = __builtin_ia32_crc32di(b, vb);
			d = __builtin_ia32_crc32di(d, vd);
		}
		c = shift(shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
		p += 3 * LANE;
		len -= 3 * LANE;
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

/* Combining. Reflected, bit 31 of a register is the coefficient of x^0.
 * Appending len_b bytes to a multiplies a's register by x^(8 len_b) modulo
 * the polynomial; the inversions at both ends cancel (the same ~0 starts
 * and ends both CRCs), so crc(a b) = crc_a * x^(8 len_b) ^ crc_b. */
static uint32_t mul_mod(uint32_t a, uint32_t b)
{
	uint32_t prod = 0;

	for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
		if (a & bit)
			prod ^= b;
		b = (b >> 1) ^ (POLY & (0u - (b & 1)));   /* b * x */
	}
	return prod;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	uint32_t x = 1u << 30;          /* x^1, squared to x^(2^k) step by step */
	uint32_t shift = 1u << 31;      /* x^0 */
	uint64_t bits = len_b * 8;

	for (; bits; bits >>= 1) {
		if (bits & 1)
			shift = mul_mod(shift, x);
		x = mul_mod(x, x);
	}
	return mul_mod(crc_a, shift) ^ crc_b;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	static int hw = -1;

	if (hw < 0)
		hw = crc32c_hw_available();
	return hw ? crc32c_hw(crc, buf, len) : crc32c_sw(crc, buf, len);
}
