/* redundancy.c - scheme lookup, context lifecycle and the argument checks
 * shared by every scheme, so that xor.c and rs.c only compute.
 */
#include "redundancy/scheme.h"

#include "common/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct redun_scheme *const schemes[] = {
	&redun_scheme_xor,
	&redun_scheme_rs,
};

#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

const struct redun_scheme *redun_find(const char *name)
{
	for (size_t i = 0; name && i < NSCHEMES; i++)
		if (strcmp(schemes[i]->name, name) == 0)
			return schemes[i];
	err_set(-ENOENT, "unknown redundancy scheme '%s' (known: xor, rs)", name ? name : "(null)");
	return NULL;
}

const char *redun_scheme_name(const struct redun_scheme *scheme)
{
	return scheme->name;
}

int redun_create(const struct redun_scheme *scheme, unsigned k, unsigned m,
		 struct redun_ctx **out)
{
	struct redun_ctx *ctx;
	int ret;

	*out = NULL;
	if (!scheme)
		return err_set(-EINVAL, "redundancy: no scheme");
	/* k + m is bounded before it is summed so the sum cannot wrap. */
	if (k < 1 || m < 1 || k > REDUN_MAX_BLOCKS || m > REDUN_MAX_BLOCKS ||
	    k + m > REDUN_MAX_BLOCKS)
		return err_set(-EINVAL, "%s %u+%u: need k >= 1, m >= 1 and k + m <= %d",
			       scheme->name, k, m, REDUN_MAX_BLOCKS);
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return err_set(-ENOMEM, "%s %u+%u: out of memory", scheme->name, k, m);
	ctx->scheme = scheme;
	ctx->k = k;
	ctx->m = m;
	ret = scheme->init(ctx);
	if (ret) {
		free(ctx);
		return ret;
	}
	*out = ctx;
	return 0;
}

void redun_free(struct redun_ctx **ctx)
{
	if (!ctx || !*ctx)
		return;
	(*ctx)->scheme->fini(*ctx);
	free(*ctx);
	*ctx = NULL;
}

int redun_encode(const struct redun_ctx *ctx, size_t len,
		 const uint8_t *const data[], uint8_t *parity[])
{
	for (unsigned i = 0; i < ctx->k; i++)
		if (!data[i])
			return err_set(-EINVAL, "%s %u+%u encode: data block %u has no buffer",
				       ctx->scheme->name, ctx->k, ctx->m, i);
	for (unsigned j = 0; j < ctx->m; j++)
		if (!parity[j])
			return err_set(-EINVAL, "%s %u+%u encode: parity block %u has no buffer",
				       ctx->scheme->name, ctx->k, ctx->m, j);
	if (len == 0)
		return 0;
	return ctx->scheme->encode(ctx, len, data, parity);
}

int redun_rebuild(const struct redun_ctx *ctx, size_t len, uint8_t *blocks[],
		  const uint8_t present[])
{
	unsigned n = ctx->k + ctx->m, missing = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!blocks[i])
			return err_set(-EINVAL, "%s %u+%u rebuild: block %u has no buffer",
				       ctx->scheme->name, ctx->k, ctx->m, i);
		missing += !present[i];
	}
	if (missing > ctx->m)
		return err_set(-ENODATA, "%s %u+%u: %u of %u blocks missing, at most %u can be rebuilt",
			       ctx->scheme->name, ctx->k, ctx->m, missing, n, ctx->m);
	if (missing == 0 || len == 0)
		return 0;
	return ctx->scheme->rebuild(ctx, len, blocks, present, missing);
}
