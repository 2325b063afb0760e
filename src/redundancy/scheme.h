/* scheme.h - the table every redundancy scheme fills (private to redundancy/).
 *
 * redundancy.c checks the arguments common to all schemes (buffers present,
 * how many blocks are missing) once, so a scheme's operations only compute.
 * Schemes are sibling files: xor.c, rs.c.
 */
#ifndef STASIS_REDUNDANCY_SCHEME_H
#define STASIS_REDUNDANCY_SCHEME_H

#include "redundancy/redundancy.h"

struct redun_ctx {
	const struct redun_scheme *scheme;
	unsigned k, m;
	void *tables;           /* the scheme's own, built by init */
};

struct redun_scheme {
	const char *name;
	/* Check ctx->k and ctx->m (already within 1..REDUN_MAX_BLOCKS in sum)
	 * and build ctx->tables; -EINVAL with a message, -ENOMEM. */
	int (*init)(struct redun_ctx *ctx);
	void (*fini)(struct redun_ctx *ctx);
	int (*encode)(const struct redun_ctx *ctx, size_t len,
		      const uint8_t *const data[], uint8_t *parity[]);
	/* Called with 1 <= missing <= m blocks absent and len > 0. */
	int (*rebuild)(const struct redun_ctx *ctx, size_t len, uint8_t *blocks[],
		       const uint8_t present[], unsigned missing);
};

extern const struct redun_scheme redun_scheme_xor;
extern const struct redun_scheme redun_scheme_rs;

#endif
