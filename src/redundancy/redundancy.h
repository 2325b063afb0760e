/* redundancy.h - redundancy schemes: parity over equal-length blocks in memory,
 * and where each rank's redundancy goes (groups, partners).
 *
 * A scheme is a table of operations chosen by name (redun_find): "xor" (k data
 * blocks + 1 parity block, the XOR of the data) and "rs" (k data + m parity,
 * Reed-Solomon over GF(2^8) with a Cauchy matrix, computed by ISA-L). The math
 * and the layout rules are in docs/redundancy.md.
 *
 * Blocks are plain memory of one common length. The schemes do not know what a
 * block holds: a caller whose pieces (files, images) have different lengths
 * pads each to the longest with zeros and records the true lengths itself
 * (in a manifest or index record), then cuts the padding off after a rebuild.
 * Block i < k is data block i, block k + j is parity block j.
 *
 * Lifecycle (the SCR component style): redun_create() builds the tables of one
 * scheme for one (k, m) once; redun_encode() and redun_rebuild() use them as
 * often as needed; redun_free() releases them. A context is read-only after
 * creation, so several threads may encode and rebuild with one context at once
 * (on different blocks).
 *
 * Functions return 0 or a negative errno, with a one-line message in err_msg()
 * (common/err.h) on failure.
 */
#ifndef STASIS_REDUNDANCY_REDUNDANCY_H
#define STASIS_REDUNDANCY_REDUNDANCY_H

#include <stddef.h>
#include <stdint.h>

/* Most blocks (k + m) in one stripe: GF(2^8) has 256 elements and the Cauchy
 * construction needs k + m distinct ones. The same bound caps a group. */
#define REDUN_MAX_BLOCKS 255

struct redun_scheme;    /* a table of operations; static, never freed */
struct redun_ctx;       /* one scheme's tables for one (k, m) */

/* The scheme called name ("xor" or "rs"); NULL with a message naming the
 * known schemes if there is none. */
const struct redun_scheme *redun_find(const char *name);
const char *redun_scheme_name(const struct redun_scheme *scheme);

/* Build the tables of scheme for k data and m parity blocks.
 * in: k >= 1, m >= 1, k + m <= REDUN_MAX_BLOCKS; "xor" needs m == 1.
 * out: *out, freed with redun_free(). -EINVAL with a message on a bad (k, m),
 * -ENOMEM. */
int redun_create(const struct redun_scheme *scheme, unsigned k, unsigned m,
		 struct redun_ctx **out);
/* Free the context and set *ctx to NULL; NULL and *ctx == NULL are fine. */
void redun_free(struct redun_ctx **ctx);

/* Compute the m parity blocks of k data blocks of len bytes each.
 * in: data[k] (read only). out: parity[m] (overwritten; must not overlap the
 * data). Any len, including 0; no alignment needed. A caller holding
 * `uint8_t *blocks[k + m]` passes (const uint8_t *const *)blocks and
 * blocks + k: C does not add the inner const by itself. */
int redun_encode(const struct redun_ctx *ctx, size_t len,
		 const uint8_t *const data[], uint8_t *parity[]);

/* Regenerate, in place, every block whose present[i] is 0, from the others.
 * in: present[k + m] (non-zero: blocks[i] holds its bytes), blocks[i] for
 *     present i (read only).
 * out: blocks[i] for missing i (each a buffer of len bytes, overwritten).
 * Data and parity blocks alike may be missing. Nothing is written and
 * -ENODATA is returned, with a message saying how many blocks are missing and
 * how many the scheme tolerates, when more than m are missing. */
int redun_rebuild(const struct redun_ctx *ctx, size_t len, uint8_t *blocks[],
		  const uint8_t present[]);

/* Group layout for RS (and xor) sets: which ranks encode together.
 * in: nranks, node[nranks] (the name of each rank's node: ranks with equal
 *     names share a node, the failure domain), group_size (2..255, the
 *     largest group wanted, k + m).
 * out: group[nranks] (the group of each rank, numbered 0..*ngroups-1 in the
 *      order of their lowest rank; a group's members in rank order are its
 *      block order), *ngroups, *alone (ranks left in a group of their own:
 *      their level degrades; 0 when every rank has a group of >= 2 nodes).
 * Rule: no group holds two ranks of one node; the fewest groups that allows,
 * with sizes that differ by at most one and never exceed group_size. A pure
 * function of its input, so every rank computes the same layout. */
int redun_layout_groups(int nranks, const char *const node[], unsigned group_size,
			int group[], int *ngroups, int *alone);

/* Partner layout for PARTNER copies: where each rank's copy goes.
 * in: nranks, node[nranks] as above.
 * out: partner[nranks] (the rank that holds rank r's copy, always on another
 *      node; -1 when there is only one node), *alone (ranks without a
 *      partner: their level degrades).
 * Rule: nodes in the order their first rank appears form a ring; the rank at
 * position p on its node (p-th lowest rank there) sends to the rank at
 * position p mod n on the next node, which has n ranks. A rank may therefore
 * hold several copies, or none. A pure function of its input. */
int redun_layout_partners(int nranks, const char *const node[], int partner[], int *alone);

#endif
