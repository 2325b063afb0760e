/* test_redundancy.c - the redundancy schemes and the group/partner layouts.
 *
 * Every scheme is checked against a reference written here from the math in
 * docs/redundancy.md (GF(2^8) with polynomial 0x11d, Cauchy rows 1/((k+j)^c)),
 * not against ISA-L, then every pattern of up to m lost blocks is rebuilt and
 * every pattern of m + 1 must be refused without touching a byte.
 */
#include "check.h"

#include "common/err.h"
#include "redundancy/redundancy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- reference GF(2^8) ---- */

static uint8_t gf_exp[512], gf_log[256];

static void gf_setup(void)
{
	unsigned x = 1;

	for (int i = 0; i < 255; i++) {
		gf_exp[i] = gf_exp[i + 255] = (uint8_t)x;
		gf_log[x] = (uint8_t)i;
		x <<= 1;
		if (x & 0x100)
			x ^= 0x11d;
	}
}

static uint8_t gf_mul_ref(uint8_t a, uint8_t b)
{
	return a && b ? gf_exp[gf_log[a] + gf_log[b]] : 0;
}

static uint8_t gf_inv_ref(uint8_t a)
{
	return gf_exp[255 - gf_log[a]];
}

/* ---- helpers ---- */

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill_random(uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(next() >> 32);
}

static int is_xor(const char *scheme)
{
	return strcmp(scheme, "xor") == 0;
}

/* Parity block j of data[k] from the definition. */
static void reference_parity(const char *scheme, unsigned k, unsigned j, size_t len,
			     uint8_t *const data[], uint8_t *out)
{
	uint8_t tab[256];

	memset(out, 0, len);
	for (unsigned c = 0; c < k; c++) {
		uint8_t a = is_xor(scheme) ? 1 : gf_inv_ref((uint8_t)((k + j) ^ c));

		for (int x = 0; x < 256; x++)
			tab[x] = gf_mul_ref(a, (uint8_t)x);
		for (size_t i = 0; i < len; i++)
			out[i] ^= tab[data[c][i]];
	}
}

struct stripe {
	unsigned k, m, n;
	size_t len;
	uint8_t *blocks[REDUN_MAX_BLOCKS];
	uint8_t *orig[REDUN_MAX_BLOCKS];
};

static void stripe_free(struct stripe *s)
{
	for (unsigned i = 0; i < s->n; i++) {
		free(s->blocks[i]);
		free(s->orig[i]);
	}
}

/* Random data, encoded, parity checked against the reference; orig keeps a
 * copy of every block. Buffers are exactly len bytes, so ASan sees overruns. */
static int stripe_make(struct stripe *s, const struct redun_ctx *ctx, const char *scheme,
		       unsigned k, unsigned m, size_t len)
{
	uint8_t *ref = malloc(len ? len : 1);
	int ok = 1;

	memset(s, 0, sizeof(*s));
	s->k = k;
	s->m = m;
	s->n = k + m;
	s->len = len;
	for (unsigned i = 0; i < s->n; i++) {
		s->blocks[i] = malloc(len ? len : 1);
		s->orig[i] = malloc(len ? len : 1);
		if (!s->blocks[i] || !s->orig[i] || !ref) {
			s->n = i + 1;
			free(ref);
			return 0;
		}
		fill_random(s->blocks[i], len);
	}
	CHECK_EQ(redun_encode(ctx, len, (const uint8_t *const *)s->blocks, s->blocks + k), 0);
	for (unsigned j = 0; j < m; j++) {
		reference_parity(scheme, k, j, len, s->blocks, ref);
		if (memcmp(ref, s->blocks[k + j], len) != 0) {
			fprintf(stderr, "%s %u+%u len %zu: parity %u differs from the reference\n",
				scheme, k, m, len, j);
			ok = 0;
		}
	}
	CHECK(ok);
	for (unsigned i = 0; i < s->n; i++)
		memcpy(s->orig[i], s->blocks[i], len);
	free(ref);
	return 1;
}

/* Erase the blocks in mask, rebuild, compare; returns 1 if all is as it must
 * be (rebuilt bytes identical, or refused with nothing written). */
static int try_erasure(const struct redun_ctx *ctx, struct stripe *s, uint64_t mask)
{
	uint8_t present[REDUN_MAX_BLOCKS];
	unsigned lost = 0;
	char want[128];
	int ret, ok = 1;

	for (unsigned i = 0; i < s->n; i++) {
		present[i] = !(mask >> i & 1);
		if (!present[i]) {
			memset(s->blocks[i], 0xa5 ^ (int)i, s->len);
			lost++;
		}
	}
	err_clear();
	ret = redun_rebuild(ctx, s->len, s->blocks, present);
	if (lost <= s->m) {
		ok = ret == 0;
		for (unsigned i = 0; ok && i < s->n; i++)
			ok = memcmp(s->blocks[i], s->orig[i], s->len) == 0;
	} else {
		snprintf(want, sizeof(want), "%u of %u blocks missing, at most %u can be rebuilt",
			 lost, s->n, s->m);
		ok = ret == -ENODATA && strstr(err_msg(), want);
		for (unsigned i = 0; ok && i < s->n; i++)
			for (size_t b = 0; ok && b < s->len; b++)
				ok = s->blocks[i][b] == (present[i] ? s->orig[i][b] : (0xa5 ^ i));
	}
	if (!ok)
		fprintf(stderr, "erasure mask %#llx (%u lost): ret %d '%s'\n",
			(unsigned long long)mask, lost, ret, err_msg());
	for (unsigned i = 0; i < s->n; i++)
		memcpy(s->blocks[i], s->orig[i], s->len);
	return ok;
}

/* Every subset of up to m + 1 lost blocks. */
static void test_every_erasure(const char *scheme, unsigned k, unsigned m, size_t len)
{
	struct redun_ctx *ctx = NULL;
	struct stripe s;
	unsigned fail = 0, tried = 0;

	CHECK_EQ(redun_create(redun_find(scheme), k, m, &ctx), 0);
	if (!ctx)
		return;
	if (!stripe_make(&s, ctx, scheme, k, m, len)) {
		CHECK(!"out of memory");
		goto free_ctx;
	}
	for (uint64_t mask = 0; mask < (1ull << s.n); mask++) {
		if ((unsigned)__builtin_popcountll(mask) > m + 1)
			continue;
		tried++;
		fail += !try_erasure(ctx, &s, mask);
	}
	if (fail)
		fprintf(stderr, "%s %u+%u len %zu: %u of %u erasure patterns wrong\n",
			scheme, k, m, len, fail, tried);
	CHECK_EQ(fail, 0);
	stripe_free(&s);
free_ctx:
	redun_free(&ctx);
	CHECK(ctx == NULL);
}

/* Too many blocks for every subset: random patterns of each size. */
static void test_random_erasures(const char *scheme, unsigned k, unsigned m, size_t len,
				 unsigned rounds)
{
	struct redun_ctx *ctx = NULL;
	struct stripe s;
	unsigned fail = 0;

	CHECK_EQ(redun_create(redun_find(scheme), k, m, &ctx), 0);
	if (!ctx)
		return;
	if (!stripe_make(&s, ctx, scheme, k, m, len)) {
		CHECK(!"out of memory");
		goto free_ctx;
	}
	for (unsigned r = 0; r < rounds; r++) {
		unsigned lost = r % (m + 2), pick[REDUN_MAX_BLOCKS];
		uint8_t present[REDUN_MAX_BLOCKS];
		uint64_t mask = 0;

		/* k + m > 64 does not fit a mask: erase by hand here. */
		for (unsigned i = 0; i < s.n; i++)
			pick[i] = i;
		for (unsigned i = 0; i < lost; i++) {
			unsigned j = i + (unsigned)(next() % (s.n - i)), t = pick[i];

			pick[i] = pick[j];
			pick[j] = t;
		}
		memset(present, 1, sizeof(present));
		for (unsigned i = 0; i < lost; i++) {
			present[pick[i]] = 0;
			memset(s.blocks[pick[i]], 0x5a, len);
			mask |= 1ull << (pick[i] % 64);
		}
		if (redun_rebuild(ctx, len, s.blocks, present) != (lost <= m ? 0 : -ENODATA)) {
			fprintf(stderr, "%s %u+%u: %u lost (mask %#llx): wrong result\n", scheme, k, m,
				lost, (unsigned long long)mask);
			fail++;
		}
		for (unsigned i = 0; lost <= m && i < s.n; i++)
			if (memcmp(s.blocks[i], s.orig[i], len) != 0) {
				fprintf(stderr, "%s %u+%u: block %u wrong after losing %u\n",
					scheme, k, m, i, lost);
				fail++;
			}
		for (unsigned i = 0; i < s.n; i++)
			memcpy(s.blocks[i], s.orig[i], len);
	}
	CHECK_EQ(fail, 0);
	stripe_free(&s);
free_ctx:
	redun_free(&ctx);
}

/* A damaged surviving block must give different bytes: proves the
 * comparisons above can see a wrong rebuild. */
static void test_damage_is_visible(const char *scheme, unsigned k, unsigned m)
{
	struct redun_ctx *ctx = NULL;
	uint8_t present[REDUN_MAX_BLOCKS];
	struct stripe s;

	CHECK_EQ(redun_create(redun_find(scheme), k, m, &ctx), 0);
	if (!ctx || !stripe_make(&s, ctx, scheme, k, m, 4096)) {
		redun_free(&ctx);
		return;
	}
	memset(present, 1, sizeof(present));
	present[0] = 0;
	memset(s.blocks[0], 0, 4096);
	s.blocks[1][100] ^= 0x01;
	CHECK_EQ(redun_rebuild(ctx, 4096, s.blocks, present), 0);
	CHECK(memcmp(s.blocks[0], s.orig[0], 4096) != 0);
	CHECK(memcmp(s.blocks[0], s.orig[0], 100) == 0);
	stripe_free(&s);
	redun_free(&ctx);
}

static void test_api_errors(void)
{
	const struct redun_scheme *xor = redun_find("xor"), *rs = redun_find("rs");
	struct redun_ctx *ctx = (struct redun_ctx *)&ctx;
	uint8_t a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[8], c[8];
	uint8_t *blocks[3] = { a, b, c }, present[3] = { 1, 1, 0 };

	CHECK(xor && rs);
	CHECK(strcmp(redun_scheme_name(xor), "xor") == 0);
	CHECK(strcmp(redun_scheme_name(rs), "rs") == 0);
	err_clear();
	CHECK(redun_find("raid6") == NULL);
	CHECK(strstr(err_msg(), "raid6") && strstr(err_msg(), "xor, rs"));
	CHECK(redun_find(NULL) == NULL);

	CHECK_EQ(redun_create(xor, 3, 2, &ctx), -EINVAL);
	CHECK(ctx == NULL);
	CHECK(strstr(err_msg(), "use rs"));
	CHECK_EQ(redun_create(xor, 3, 0, &ctx), -EINVAL);
	CHECK_EQ(redun_create(rs, 0, 2, &ctx), -EINVAL);
	CHECK_EQ(redun_create(rs, 2, 0, &ctx), -EINVAL);
	CHECK_EQ(redun_create(rs, 252, 4, &ctx), -EINVAL);
	CHECK(strstr(err_msg(), "k + m <= 255"));
	CHECK_EQ(redun_create(rs, 4, 0xffffffffu, &ctx), -EINVAL);
	CHECK_EQ(redun_create(NULL, 4, 2, &ctx), -EINVAL);
	redun_free(&ctx);
	redun_free(NULL);

	CHECK_EQ(redun_create(rs, 2, 1, &ctx), 0);
	/* Nothing to do for empty blocks, but still a success. */
	CHECK_EQ(redun_encode(ctx, 0, (const uint8_t *const *)blocks, blocks + 2), 0);
	CHECK_EQ(redun_rebuild(ctx, 0, blocks, present), 0);
	blocks[2] = NULL;
	CHECK_EQ(redun_encode(ctx, 8, (const uint8_t *const *)blocks, blocks + 2), -EINVAL);
	CHECK_EQ(redun_rebuild(ctx, 8, blocks, present), -EINVAL);
	CHECK(strstr(err_msg(), "block 2 has no buffer"));
	blocks[2] = c;
	CHECK_EQ(redun_encode(ctx, 8, (const uint8_t *const *)blocks, blocks + 2), 0);
	memset(b, 0, sizeof(b));
	present[1] = 0;
	present[2] = 1;
	CHECK_EQ(redun_rebuild(ctx, 8, blocks, present), 0);
	CHECK_EQ(b[0] | b[1] | b[2] | b[3] | b[4] | b[5] | b[6] | b[7], 0); /* b was zero */
	redun_free(&ctx);
}

/* The largest stripes GF(2^8) allows. */
static void test_limits(void)
{
	test_random_erasures("rs", 251, 4, 64, 18);
	test_random_erasures("rs", 1, 254, 33, 40);
	test_random_erasures("xor", 254, 1, 100, 12);
}

static void test_schemes(void)
{
	static const size_t lens[] = { 1, 7, 4096, (1u << 20) + 3 };

	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		test_every_erasure("xor", 3, 1, lens[l]);
		test_every_erasure("rs", 4, 2, lens[l]);
		test_every_erasure("rs", 6, 3, lens[l]);
		test_every_erasure("rs", 3, 1, lens[l]);
	}
	test_every_erasure("xor", 1, 1, 7);
	test_every_erasure("xor", 8, 1, 4099);
	test_every_erasure("rs", 1, 1, 7);
	test_every_erasure("rs", 1, 3, 4096);
	test_every_erasure("rs", 10, 4, 7);
	test_every_erasure("rs", 10, 4, 1000);
	test_every_erasure("rs", 12, 6, 65);
	test_damage_is_visible("xor", 3, 1);
	test_damage_is_visible("rs", 4, 2);
}

/* ---- layouts ---- */

static void check_array(const char *what, const int *got, const int *want, int n)
{
	for (int i = 0; i < n; i++)
		if (got[i] != want[i]) {
			fprintf(stderr, "%s: rank %d got %d, want %d\n", what, i, got[i], want[i]);
			CHECK(!"layout differs from the expected one");
			return;
		}
}

static void expect_groups(const char *what, int n, const char *const *node, unsigned g,
			  const int *want, int want_ngroups, int want_alone)
{
	int group[64], ngroups = -1, alone = -1;

	CHECK_EQ(redun_layout_groups(n, node, g, group, &ngroups, &alone), 0);
	CHECK_EQ(ngroups, want_ngroups);
	CHECK_EQ(alone, want_alone);
	check_array(what, group, want, n);
}

static void expect_partners(const char *what, int n, const char *const *node,
			    const int *want, int want_alone)
{
	int partner[64], alone = -1;

	CHECK_EQ(redun_layout_partners(n, node, partner, &alone), 0);
	CHECK_EQ(alone, want_alone);
	check_array(what, partner, want, n);
}

static void test_layout_cases(void)
{
	static const char *const one[] = { "n0", "n0", "n0", "n0" };
	static const char *const two[] = { "a", "a", "b", "b" };
	static const char *const mixed[] = { "a", "b", "a", "b" };
	static const char *const tri[] = { "a", "a", "a", "b", "b", "c" };
	static const char *const eight[] = { "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7" };
	static const char *const late[] = { "x", "y", "y", "y" };
	static const char *const tie[] = { "a", "b", "c", "c" };

	/* One node: nobody can be protected from its loss. */
	expect_groups("1 node", 4, one, 4, (int[]){ 0, 1, 2, 3 }, 4, 4);
	expect_partners("1 node", 4, one, (int[]){ -1, -1, -1, -1 }, 4);
	expect_groups("1 rank", 1, one, 4, (int[]){ 0 }, 1, 1);

	expect_groups("2x2", 4, two, 4, (int[]){ 0, 1, 0, 1 }, 2, 0);
	expect_partners("2x2", 4, two, (int[]){ 2, 3, 0, 1 }, 0);
	expect_groups("2x2 interleaved", 4, mixed, 4, (int[]){ 0, 0, 1, 1 }, 2, 0);
	expect_partners("2x2 interleaved", 4, mixed, (int[]){ 1, 0, 3, 2 }, 0);

	/* 3/2/1: three pairs rather than a triple, a pair and a rank alone. */
	for (unsigned g = 2; g <= 8; g++)
		expect_groups("3/2/1", 6, tri, g, (int[]){ 0, 1, 2, 0, 1, 2 }, 3, 0);
	/* a's third rank wraps to b's first; both of b's go to c's only rank. */
	expect_partners("3/2/1", 6, tri, (int[]){ 3, 4, 3, 5, 5, 0 }, 0);

	expect_groups("8x1 g4", 8, eight, 4, (int[]){ 0, 1, 0, 1, 0, 1, 0, 1 }, 2, 0);
	expect_groups("8x1 g3", 8, eight, 3, (int[]){ 0, 1, 2, 0, 1, 2, 0, 1 }, 3, 0);
	expect_groups("8x1 g8", 8, eight, 8, (int[]){ 0, 0, 0, 0, 0, 0, 0, 0 }, 1, 0);
	expect_groups("8x1 g255", 8, eight, 255, (int[]){ 0, 0, 0, 0, 0, 0, 0, 0 }, 1, 0);
	expect_groups("7x1 g2", 7, eight, 2, (int[]){ 0, 1, 2, 3, 0, 1, 2 }, 4, 1);
	expect_partners("8x1", 8, eight, (int[]){ 1, 2, 3, 4, 5, 6, 7, 0 }, 0);

	/* The biggest node is dealt first even when its first rank is not. */
	expect_groups("1+3", 4, late, 4, (int[]){ 0, 0, 1, 2 }, 3, 2);
	expect_partners("1+3", 4, late, (int[]){ 1, 0, 0, 0 }, 0);
	/* Equal nodes are dealt in the order of their first rank: a before b. */
	expect_groups("1+1+2", 4, tie, 4, (int[]){ 0, 1, 0, 1 }, 2, 0);
	expect_partners("1+1+2", 4, tie, (int[]){ 1, 2, 0, 0 }, 0);
}

static void test_layout_errors(void)
{
	static const char *const bad[] = { "a", NULL, "b" };
	int out[3], n = -1, alone = -1;

	CHECK_EQ(redun_layout_groups(3, bad, 4, out, &n, &alone), -EINVAL);
	CHECK(strstr(err_msg(), "rank 1 has no node name"));
	CHECK_EQ(redun_layout_partners(3, bad, out, &alone), -EINVAL);
	CHECK_EQ(redun_layout_groups(2, bad, 1, out, &n, &alone), -EINVAL);
	CHECK_EQ(redun_layout_groups(2, bad, 256, out, &n, &alone), -EINVAL);
	CHECK_EQ(redun_layout_groups(-1, bad, 4, out, &n, &alone), -EINVAL);
	CHECK_EQ(redun_layout_groups(0, bad, 4, out, &n, &alone), 0);
	CHECK_EQ(n, 0);
	CHECK_EQ(alone, 0);
	CHECK_EQ(redun_layout_partners(0, bad, out, &alone), 0);
	CHECK_EQ(alone, 0);
}

/* Partners by the documented rule, the slow obvious way. */
static int naive_partner(int n, const char *const *node, int r)
{
	int pos = 0, first[64], nnodes = 0, me = -1;

	for (int i = 0; i < n; i++) {
		int seen = 0;

		for (int j = 0; j < nnodes; j++)
			seen |= strcmp(node[first[j]], node[i]) == 0;
		if (!seen)
			first[nnodes++] = i;
	}
	for (int j = 0; j < nnodes; j++)
		if (strcmp(node[first[j]], node[r]) == 0)
			me = j;
	if (nnodes == 1)
		return -1;
	for (int i = 0; i < r; i++)
		pos += strcmp(node[i], node[r]) == 0;
	{
		const char *next = node[first[(me + 1) % nnodes]];
		int count = 0, want, seen = 0;

		for (int i = 0; i < n; i++)
			count += strcmp(node[i], next) == 0;
		want = pos % count;
		for (int i = 0; i < n; i++)
			if (strcmp(node[i], next) == 0 && seen++ == want)
				return i;
	}
	return -2;
}

/* Random distributions: the invariants the header promises, and the same
 * answer from equal names held at other addresses (another rank's copy). */
static void test_layout_invariants(void)
{
	char names[64][16];
	const char *node[64], *copy[64];
	char *dup[64];

	for (int trial = 0; trial < 2000; trial++) {
		int n = 1 + (int)(next() % 64), nnodes = 1 + (int)(next() % 12);
		unsigned g = 2 + (unsigned)(next() % 9);
		int group[64], group2[64], partner[64], partner2[64], size[64] = { 0 };
		int ngroups, ngroups2, alone, alone2, palone, palone2, most = 0, q, want_alone = 0;
		int bad = 0;

		for (int r = 0; r < n; r++) {
			snprintf(names[r], sizeof(names[r]), "node%d", (int)(next() % (unsigned)nnodes));
			node[r] = names[r];
			dup[r] = strdup(names[r]);
			copy[r] = dup[r];
		}
		CHECK_EQ(redun_layout_groups(n, node, g, group, &ngroups, &alone), 0);
		CHECK_EQ(redun_layout_groups(n, copy, g, group2, &ngroups2, &alone2), 0);
		CHECK_EQ(redun_layout_partners(n, node, partner, &palone), 0);
		CHECK_EQ(redun_layout_partners(n, copy, partner2, &palone2), 0);
		bad |= memcmp(group, group2, sizeof(int) * (size_t)n) || ngroups != ngroups2 ||
		       alone != alone2 || memcmp(partner, partner2, sizeof(int) * (size_t)n) ||
		       palone != palone2;

		for (int r = 0; r < n; r++) {
			int same = 0;

			for (int i = 0; i < n; i++)
				same += strcmp(node[i], node[r]) == 0;
			most = same > most ? same : most;
			bad |= group[r] < 0 || group[r] >= ngroups;
			if (group[r] >= 0 && group[r] < 64)
				size[group[r]]++;
			/* distinct nodes within a group */
			for (int i = r + 1; i < n; i++)
				bad |= group[i] == group[r] && strcmp(node[i], node[r]) == 0;
			/* groups numbered in the order of their lowest rank */
			if (r > 0) {
				int top = -1;

				for (int i = 0; i < r; i++)
					top = group[i] > top ? group[i] : top;
				bad |= group[r] > top + 1;
			}
			/* a partner on another node, by the rule */
			bad |= partner[r] != naive_partner(n, node, r);
			bad |= partner[r] >= 0 && strcmp(node[partner[r]], node[r]) == 0;
		}
		q = (int)(((unsigned)n + g - 1) / g);
		q = most > q ? most : q;
		bad |= ngroups != q;
		for (int i = 0; i < ngroups && i < 64; i++) {
			bad |= size[i] > (int)g || size[i] < n / q || size[i] > (n + q - 1) / q;
			want_alone += size[i] == 1;
		}
		bad |= alone != want_alone || alone != (2 * q > n ? 2 * q - n : 0);
		bad |= palone != (most == n ? n : 0);
		if (bad)
			fprintf(stderr, "layout trial %d: %d ranks, %d nodes, g %u: invariant broken\n",
				trial, n, nnodes, g);
		CHECK(!bad);
		for (int r = 0; r < n; r++)
			free(dup[r]);
		if (bad)
			break;
	}
}

int main(void)
{
	gf_setup();
	test_api_errors();
	test_schemes();
	test_limits();
	test_layout_cases();
	test_layout_errors();
	test_layout_invariants();
	return check_result("test_redundancy");
}
