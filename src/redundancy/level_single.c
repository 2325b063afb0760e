/* level_single.c - SINGLE: each member's file only in its node's cache.
 *
 * Nothing to add. A member that runs on another node than when the
 * checkpoint was taken gets its file from the node it left. */
#include "redundancy/level.h"

static int single_apply(const struct redun_set *set, const struct redun_comm *c,
			struct store_ckpt *lc, int *degraded)
{
	(void)set, (void)c, (void)lc;
	*degraded = 0;
	return 0;
}

const struct redun_level redun_level_single = {
	.name = "single",
	.apply = single_apply,
	.recover = redun_recover_moved,
};
