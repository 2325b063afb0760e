/* rs.c - the "rs" scheme: k data + m parity blocks, Reed-Solomon over
 * GF(2^8) with ISA-L.
 *
 * The generator is ISA-L's systematic Cauchy matrix: k identity rows (the data
 * is stored as is) over m rows with entry 1 / ((k + j) ^ c), j the parity row,
 * c the data column. Every k x k submatrix of it is invertible, so any k
 * surviving blocks determine the data: that is what lets rebuild take the
 * first k blocks present, whichever they are. ISA-L's own gf_gen_rs_matrix
 * (Vandermonde) lacks that property for some (k, m), hence Cauchy.
 *
 * Encode tables are built once per context. Rebuild tables depend on which
 * blocks are missing, so each rebuild inverts a k x k matrix (O(k^3): micro-
 * seconds for k of a few dozen, tens of milliseconds at k = 251) rather than
 * caching per pattern, which keeps the context read-only and shareable
 * between threads.
 */
#include "redundancy/scheme.h"

#include "common/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/erasure_code.h>

/* ISA-L lengths are int: longer blocks go through in pieces of this size. */
#define RS_PIECE (1u << 30)

struct rs_tables {
	uint8_t *matrix;        /* (k + m) x k generator, row-major */
	uint8_t *encode;        /* ec_init_tables() of its m parity rows: 32 k m bytes */
};

static int rs_init(struct redun_ctx *ctx)
{
	unsigned k = ctx->k, m = ctx->m;
	struct rs_tables *t;

	t = calloc(1, sizeof(*t));
	if (!t)
		goto nomem;
	t->matrix = malloc((size_t)(k + m) * k);
	t->encode = malloc((size_t)32 * k * m);
	if (!t->matrix || !t->encode)
		goto free_tables;
	gf_gen_cauchy1_matrix(t->matrix, (int)(k + m), (int)k);
	ec_init_tables((int)k, (int)m, t->matrix + (size_t)k * k, t->encode);
	ctx->tables = t;
	return 0;

free_tables:
	free(t->matrix);
	free(t->encode);
	free(t);
nomem:
	return err_set(-ENOMEM, "rs %u+%u: out of memory for the tables", k, m);
}

static void rs_fini(struct redun_ctx *ctx)
{
	struct rs_tables *t = ctx->tables;

	if (!t)
		return;
	free(t->matrix);
	free(t->encode);
	free(t);
	ctx->tables = NULL;
}

/* out[r] = sum over j of coef[r][j] * in[j], for nout outputs, piece by piece.
 * ISA-L never writes its sources; its prototype just lacks the const. */
static void rs_apply(uint8_t *gftbls, size_t len, unsigned nin, const uint8_t *const in[],
		     unsigned nout, uint8_t *const out[])
{
	uint8_t *src[REDUN_MAX_BLOCKS], *dst[REDUN_MAX_BLOCKS];

	for (size_t off = 0; off < len; off += RS_PIECE) {
		size_t piece = len - off < RS_PIECE ? len - off : RS_PIECE;

		for (unsigned j = 0; j < nin; j++)
			src[j] = (uint8_t *)in[j] + off;
		for (unsigned r = 0; r < nout; r++)
			dst[r] = out[r] + off;
		ec_encode_data((int)piece, (int)nin, (int)nout, gftbls, src, dst);
	}
}

static int rs_encode(const struct redun_ctx *ctx, size_t len,
		     const uint8_t *const data[], uint8_t *parity[])
{
	const struct rs_tables *t = ctx->tables;

	rs_apply(t->encode, len, ctx->k, data, ctx->m, parity);
	return 0;
}

/* Take the first k blocks present as sources: B (their generator rows) maps
 * the data to them, so data = B^-1 sources. A missing data block i is row i of
 * B^-1 applied to the sources; a missing parity block k + j is generator row
 * k + j times B^-1. All missing blocks then come out of one ISA-L pass. */
static int rs_rebuild(const struct redun_ctx *ctx, size_t len, uint8_t *blocks[],
		      const uint8_t present[], unsigned missing)
{
	const struct rs_tables *t = ctx->tables;
	unsigned k = ctx->k, n = ctx->k + ctx->m, nsrc = 0, nout = 0;
	const uint8_t *src[REDUN_MAX_BLOCKS];
	uint8_t *dst[REDUN_MAX_BLOCKS];
	uint8_t *work, *b, *inv, *rows, *gftbls;
	int ret = 0;

	/* One allocation: B, B^-1, the missing rows and their ISA-L tables. */
	work = malloc((size_t)k * k * 2 + (size_t)k * missing + (size_t)32 * k * missing);
	if (!work)
		return err_set(-ENOMEM, "rs %u+%u: out of memory for the rebuild tables", k, ctx->m);
	b = work;
	inv = b + (size_t)k * k;
	rows = inv + (size_t)k * k;
	gftbls = rows + (size_t)k * missing;

	for (unsigned i = 0; i < n && nsrc < k; i++) {
		if (!present[i])
			continue;
		memcpy(b + (size_t)nsrc * k, t->matrix + (size_t)i * k, k);
		src[nsrc++] = blocks[i];
	}
	/* Cannot happen for a Cauchy generator; checked because a silent
	 * garbage rebuild would be far worse than an error. */
	if (gf_invert_matrix(b, inv, (int)k)) {
		ret = err_set(-EIO, "rs %u+%u: singular decode matrix", k, ctx->m);
		goto free_work;
	}
	for (unsigned i = 0; i < n; i++) {
		uint8_t *row = rows + (size_t)nout * k;

		if (present[i])
			continue;
		if (i < k) {
			memcpy(row, inv + (size_t)i * k, k);
		} else {
			const uint8_t *g = t->matrix + (size_t)i * k;

			for (unsigned c = 0; c < k; c++) {
				uint8_t s = 0;

				for (unsigned l = 0; l < k; l++)
					s ^= gf_mul(g[l], inv[(size_t)l * k + c]);
				row[c] = s;
			}
		}
		dst[nout++] = blocks[i];
	}
	ec_init_tables((int)k, (int)nout, rows, gftbls);
	rs_apply(gftbls, len, k, src, nout, dst);

free_work:
	free(work);
	return ret;
}

const struct redun_scheme redun_scheme_rs = {
	.name = "rs",
	.init = rs_init,
	.fini = rs_fini,
	.encode = rs_encode,
	.rebuild = rs_rebuild,
};
