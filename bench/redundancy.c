/* redundancy.c - throughput of the redundancy schemes against memcpy.
 *
 * usage: stasis-bench-redundancy [BLOCK_MIB]   (default 64)
 * Encodes rs 4+2 and xor 3+1 over blocks of BLOCK_MIB of random bytes, then
 * rebuilds the worst case each tolerates (rs: two data blocks lost; xor: one),
 * on one thread, best of seven runs. Throughput counts the k data blocks an
 * operation reads, in GiB/s. The floor is memcpy of the same k blocks into one
 * block-sized buffer, timed in the same runs, so the ratios say how far the
 * code is from plain memory bandwidth on this machine. Rebuilt bytes are
 * compared with the originals so a broken rebuild cannot look fast. Prints
 * one JSON object.
 */
#include "common/err.h"
#include "redundancy/redundancy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 7
#define GIB (1024.0 * 1024.0 * 1024.0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
}

static void elapsed(double t0, double *best)
{
	double t = now() - t0;

	if (t < *best)
		*best = t;
}

static double gibps(unsigned k, size_t len, double seconds)
{
	return (double)k * (double)len / GIB / seconds;
}

struct result {
	double memcpy, encode, rebuild;         /* GiB/s of the k data blocks */
};

/* Encode a k+m stripe, then rebuild its first `lost` data blocks, each run
 * preceded by memcpy of the k data blocks into scratch: interleaved, so a
 * burst of load from elsewhere slows the floor as much as the code. */
static int measure(const char *scheme, unsigned k, unsigned m, unsigned lost, size_t len,
		   uint8_t *const blocks[], uint8_t *const saved[], uint8_t *scratch,
		   struct result *res)
{
	uint8_t *b[REDUN_MAX_BLOCKS], present[REDUN_MAX_BLOCKS];
	struct redun_ctx *ctx = NULL;
	double best_cpy = 1e30, best_enc = 1e30, best_reb = 1e30;
	int ret;

	ret = redun_create(redun_find(scheme), k, m, &ctx);
	if (ret)
		return ret;
	for (unsigned i = 0; i < k + m; i++) {
		b[i] = blocks[i];
		present[i] = i >= lost;
	}
	for (int run = 0; run < RUNS && !ret; run++) {
		double t0 = now();

		for (unsigned i = 0; i < k; i++)
			memcpy(scratch, b[i], len);
		elapsed(t0, &best_cpy);
		/* The copies must not be optimised away: look at the result. */
		if (scratch[len - 1] != b[k - 1][len - 1])
			abort();

		t0 = now();
		ret = redun_encode(ctx, len, (const uint8_t *const *)b, b + k);
		elapsed(t0, &best_enc);
		for (unsigned i = 0; i < lost; i++) {
			memcpy(saved[i], b[i], len);
			memset(b[i], 0, 4096);  /* enough to prove the bytes come back */
		}

		t0 = now();
		ret = ret ? ret : redun_rebuild(ctx, len, b, present);
		elapsed(t0, &best_reb);
		for (unsigned i = 0; !ret && i < lost; i++)
			if (memcmp(saved[i], b[i], len) != 0)
				ret = err_set(-EIO, "%s %u+%u: rebuilt block %u differs", scheme, k, m, i);
	}
	redun_free(&ctx);
	res->memcpy = gibps(k, len, best_cpy);
	res->encode = gibps(k, len, best_enc);
	res->rebuild = gibps(k, len, best_reb);
	return ret;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64, len = mib << 20;
	uint8_t *blocks[6], *saved[2], *scratch;
	struct result rs, xor;
	int ret = 0;

	if (argc > 2 || mib == 0) {
		fprintf(stderr, "usage: %s [BLOCK_MIB]\n", argv[0]);
		return 2;
	}
	scratch = malloc(len);
	for (int i = 0; i < 6; i++)
		blocks[i] = malloc(len);
	for (int i = 0; i < 2; i++)
		saved[i] = malloc(len);
	for (int i = 0; i < 6; i++)
		if (!blocks[i] || (i < 2 && !saved[i]) || !scratch) {
			fprintf(stderr, "out of memory for 9 blocks of %zu MiB\n", mib);
			return 1;
		}
	/* Random data, and every page touched before any timing. */
	for (int i = 0; i < 6; i++)
		fill(blocks[i], len, 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
	fill(scratch, len, 1);
	fill(saved[0], len, 2);
	fill(saved[1], len, 3);

	ret = measure("rs", 4, 2, 2, len, blocks, saved, scratch, &rs);
	if (!ret)
		ret = measure("xor", 3, 1, 1, len, blocks, saved, scratch, &xor);
	if (ret) {
		fprintf(stderr, "%s\n", err_msg());
		return 1;
	}
	printf("{\"block_mib\": %zu, \"threads\": 1, \"runs\": %d,\n"
	       " \"rs_4_2_memcpy_gibps\": %.2f, \"rs_4_2_encode_gibps\": %.2f,"
	       " \"rs_4_2_rebuild_2_gibps\": %.2f,\n"
	       " \"xor_3_1_memcpy_gibps\": %.2f, \"xor_3_1_encode_gibps\": %.2f,"
	       " \"xor_3_1_rebuild_1_gibps\": %.2f,\n"
	       " \"rs_encode_vs_memcpy\": %.2f, \"rs_rebuild_vs_memcpy\": %.2f,\n"
	       " \"xor_encode_vs_memcpy\": %.2f, \"xor_rebuild_vs_memcpy\": %.2f}\n",
	       mib, RUNS, rs.memcpy, rs.encode, rs.rebuild, xor.memcpy, xor.encode, xor.rebuild,
	       rs.encode / rs.memcpy, rs.rebuild / rs.memcpy,
	       xor.encode / xor.memcpy, xor.rebuild / xor.memcpy);
	for (int i = 0; i < 6; i++)
		free(blocks[i]);
	free(saved[0]);
	free(saved[1]);
	free(scratch);
	return 0;
}
