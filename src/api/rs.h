/* rs.h - the RS level of libstasis (private; see rs.c for the layout). */
#ifndef STASIS_API_RS_H
#define STASIS_API_RS_H

#include <stdint.h>

#include "api/api.h"

struct store_ckpt;

/* Collective: compute this checkpoint's parity and file rs-<rank>.img in lc.
 * own_path: this rank's image; sizes: every rank's image size. *degraded is
 * set when this rank has no group (its node is the only one). */
int api_rs_encode(struct store_ckpt *lc, const char *ckpt, const char *own_path,
		  const int64_t *sizes, int *degraded);
/* Files a node's cache holds for a checkpoint besides its ranks' images:
 * the rs images of its ranks that are in a group. */
int api_rs_files(const int64_t *sizes);
/* Collective: every rank without a good image of its own (have_own == 0)
 * gets its image rebuilt into out_path from its group's images and parity.
 * The layout comes from the checkpoint's nodes, sizes, group size, parity. */
int api_rs_rebuild(const char *ckpt, const char (*nodes)[API_NAME_LEN], const int64_t *sizes,
		   unsigned group_size, unsigned parity, const char *own_path, int have_own,
		   const char *rs_path, const char *out_path);

#endif
