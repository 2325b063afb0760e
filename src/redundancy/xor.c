/* xor.c - the "xor" scheme: k data blocks and one parity block, their XOR.
 *
 * Any one lost block, data or parity, is the XOR of the k others, so encode
 * and rebuild are the same loop. It is ours rather than ISA-L's xor_gen
 * because xor_gen wants every buffer 32-byte aligned, and large malloc'd
 * blocks are only 16-byte aligned. The destination is built a tile at a time
 * in L1 (the first two sources XORed, the others XORed in), so each source is
 * read from memory once and the destination written once.
 */
#include "redundancy/scheme.h"

#include "common/err.h"

#include <errno.h>
#include <string.h>

#define TILE 16384      /* destination bytes kept in L1 while the sources stream */

/* GCC vector extension: 16 bytes is the baseline x86-64 (SSE2) register.
 * Loads and stores go through memcpy: no buffer needs to be aligned. */
typedef uint64_t vec __attribute__((vector_size(16)));

static inline vec load(const uint8_t *p)
{
	vec v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void store(uint8_t *p, vec v)
{
	memcpy(p, &v, sizeof(v));
}

/* dst = a ^ b, or dst ^= a when b is NULL. Four named variables, not an
 * array: GCC -O2 kept an array on the stack and ran at 0.6x memcpy. */
static void xor_step(uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t len)
{
	const uint8_t *c = b ? b : dst;
	size_t i = 0;

	for (; i + 64 <= len; i += 64) {
		vec v0 = load(a + i) ^ load(c + i);
		vec v1 = load(a + i + 16) ^ load(c + i + 16);
		vec v2 = load(a + i + 32) ^ load(c + i + 32);
		vec v3 = load(a + i + 48) ^ load(c + i + 48);

		store(dst + i, v0);
		store(dst + i + 16, v1);
		store(dst + i + 32, v2);
		store(dst + i + 48, v3);
	}
	for (; i < len; i++)
		dst[i] = a[i] ^ c[i];
}

/* dst = src[0] ^ ... ^ src[n - 1]; dst is none of the sources. */
static void xor_blocks(uint8_t *dst, const uint8_t *const src[], unsigned n, size_t len)
{
	if (n == 1) {
		memcpy(dst, src[0], len);
		return;
	}
	for (size_t off = 0; off < len; off += TILE) {
		size_t t = len - off < TILE ? len - off : TILE;

		xor_step(dst + off, src[0] + off, src[1] + off, t);
		for (unsigned j = 2; j < n; j++)
			xor_step(dst + off, src[j] + off, NULL, t);
	}
}

static int xor_init(struct redun_ctx *ctx)
{
	if (ctx->m != 1)
		return err_set(-EINVAL, "xor %u+%u: xor has exactly one parity block; use rs for m > 1",
			       ctx->k, ctx->m);
	return 0;
}

static void xor_fini(struct redun_ctx *ctx)
{
	(void)ctx;
}

static int xor_encode(const struct redun_ctx *ctx, size_t len,
		      const uint8_t *const data[], uint8_t *parity[])
{
	xor_blocks(parity[0], data, ctx->k, len);
	return 0;
}

static int xor_rebuild(const struct redun_ctx *ctx, size_t len, uint8_t *blocks[],
		       const uint8_t present[], unsigned missing)
{
	const uint8_t *src[REDUN_MAX_BLOCKS];
	unsigned n = 0, lost = 0;

	(void)missing;  /* exactly one: m == 1 and redun_rebuild checked the count */
	for (unsigned i = 0; i <= ctx->k; i++) {
		if (present[i])
			src[n++] = blocks[i];
		else
			lost = i;
	}
	xor_blocks(blocks[lost], src, n, len);
	return 0;
}

const struct redun_scheme redun_scheme_xor = {
	.name = "xor",
	.init = xor_init,
	.fini = xor_fini,
	.encode = xor_encode,
	.rebuild = xor_rebuild,
};
