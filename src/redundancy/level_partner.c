/* level_partner.c - PARTNER: each member's file copied to a member on
 * another node (redun_layout_partners), filed there as partner-<rank>.img
 * in the checkpoint's annex. Recovery asks the node holding the copy. */
#include "redundancy/level.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XFER_FAILED UINT64_MAX

/* The member whose copy `me` keeps, if the partners form a permutation
 * (every member keeps exactly one copy); -1 otherwise. */
static int partner_permutation(const int *partner, int n, int me)
{
	int from = -1, kept;

	for (int r = 0; r < n; r++) {
		kept = 0;
		for (int s = 0; s < n; s++) {
			if (partner[s] < 0)
				return -1;
			kept += partner[s] == r;
			if (partner[s] == r && r == me)
				from = s;
		}
		if (kept != 1)
			return -1;
	}
	return from;
}

/* When every member holds exactly one copy (as with equal ranks per node),
 * all copies move at once: each member sends its file to its partner while
 * receiving the one it keeps. */
static int partner_pairwise(const struct redun_set *set, const struct redun_comm *c,
			    struct store_ckpt *lc, int to, int from, char *buf, char *back)
{
	char file[32];
	uint64_t mine = XFER_FAILED, theirs = 0;
	struct store_file *f = NULL;
	struct store_io *in = NULL;
	int ret = 0, put = 0, me = redun_rank(c);

	redun_name(file, REDUN_FILE, me);
	if (store_io_open(set->local, set->ckpt, file, &in) == 0)
		mine = store_io_size(in);
	else
		ret = err_set(-EIO, "%s: cannot read it to send to rank %d", err_msg(), to);
	if (c->ops->sendrecv(c->h, &mine, sizeof(mine), to, &theirs, sizeof(theirs), from)) {
		ret = ret ? ret : -EIO;
		goto out;
	}
	redun_name(file, REDUN_PARTNER_FILE, from);
	put = store_file_create(lc, file, &f);
	if (theirs == XFER_FAILED)
		put = put ? put : err_set(-EIO, "rank %d could not send its image", from);
	for (uint64_t so = 0, ro = 0; (mine != XFER_FAILED && so < mine) ||
				      (theirs != XFER_FAILED && ro < theirs);) {
		size_t sn = mine == XFER_FAILED || so >= mine ? 0 :
			    mine - so < XFER_PIECE ? (size_t)(mine - so) : XFER_PIECE;
		size_t rn = theirs == XFER_FAILED || ro >= theirs ? 0 :
			    theirs - ro < XFER_PIECE ? (size_t)(theirs - ro) : XFER_PIECE;

		/* the fault points: a copy cut off before its end */
		if (sn && so + sn >= mine && !ret)
			ret = FAULT(REDUN_PARTNER_SEND);
		if ((sn ? redun_sendrecv_io(c, in, so, sn, to, back, rn, from, buf, &ret) :
			  c->ops->sendrecv(c->h, NULL, 0, to, back, rn, from))) {
			ret = ret ? ret : -EIO;
			goto out;
		}
		if (rn && !put && ro + rn >= theirs)
			put = FAULT(REDUN_PARTNER_RECV);
		if (rn && !put)
			put = store_file_write(f, back, rn);
		so += sn;
		ro += rn;
	}
	put = put ? put : store_file_commit(f);
out:
	store_io_close(&in);
	store_file_free(&f);    /* an uncommitted copy's *.tmp goes with it */
	return ret ? ret : put;
}

/* Otherwise the transfers run in one global order, so blocking send and
 * receive always pair up. */
static int partner_ordered(const struct redun_set *set, const struct redun_comm *c,
			   struct store_ckpt *lc, const int *partner, char *buf)
{
	int ret = 0, me = redun_rank(c);
	char file[32];

	for (int s = 0; s < set->nranks; s++) {
		int p = partner[s];
		struct store_file *f = NULL;
		struct store_io *in = NULL;
		int r = 0;

		if (p < 0)
			continue;
		if (me == s) {
			redun_name(file, REDUN_FILE, s);
			if (store_io_open(set->local, set->ckpt, file, &in))
				log_warn("rank %d: %s", me, err_msg());
			r = FAULT(REDUN_PARTNER_SEND);   /* still sent: the receiver waits for it */
			r = redun_send_file(c, in, in ? store_io_path(in) : file, p, buf) ?: r;
			store_io_close(&in);
		} else if (me == p) {
			redun_name(file, REDUN_PARTNER_FILE, s);
			r = store_file_create(lc, file, &f);
			r = redun_recv_file(c, s, store_file_write, f, r, buf);
			r = r ? r : FAULT(REDUN_PARTNER_RECV);
			r = r ? r : store_file_commit(f);
			store_file_free(&f);
		}
		ret = ret ? ret : r;
	}
	return ret;
}

static int partner_apply(const struct redun_set *set, const struct redun_comm *c,
			 struct store_ckpt *lc, int *degraded)
{
	int *partner = calloc((size_t)set->nranks, sizeof(int));
	char *buf = redun_xfer_get(), *back = redun_xfer_get();
	char msg[REDUN_MSG_LEN];
	int alone = 0, ret = partner && buf && back ? 0 : err_set(-ENOMEM, "out of memory");
	int me = redun_rank(c), from;

	ret = ret ? ret : redun_layout_partners(set->nranks, set->node, partner, &alone);
	/* every buffer first, agreed on: the exchanges pair every send with a
	 * receive, all go or none */
	if (redun_agree(c, ret == 0, msg) < set->nranks) {
		ret = ret ? ret : err_set(-EIO, "partner: %s", msg);
		goto out;
	}
	*degraded = partner[me] < 0;
	from = partner_permutation(partner, set->nranks, me);
	if (from >= 0)  /* the same decision on every member: the layout is */
		ret = partner_pairwise(set, c, lc, partner[me], from, buf, back);
	else
		ret = partner_ordered(set, c, lc, partner, buf);
out:
	free(partner);
	redun_xfer_put(buf);
	redun_xfer_put(back);
	return ret;
}

/* Member s's partner copy in this node's cache, or its own file when s ran
 * on this node before and not now. */
static int held_copy(const struct redun_set *set, int me, int s, char ckpt[64], char name[64])
{
	char file[32];

	redun_name(file, REDUN_PARTNER_FILE, s);
	if (store_io_exists(set->local, set->ckpt, file)) {
		snprintf(ckpt, 64, "%s", set->ckpt);
		snprintf(name, 64, "%s", file);
		return 1;
	}
	return redun_held_moved_image(set, me, s, ckpt, name);
}

static int partner_recover(const struct redun_set *set, const struct redun_comm *c, int need,
			   redun_accept_fn accept, void *arg, struct redun_found *found)
{
	int ret = redun_fetch_held(set, c, need, held_copy, "data", ".fetched-%05d.img", 0, found);

	if (ret > 0)
		return accept(arg, found->s, found->ckpt[0] ? found->ckpt : NULL, found->name);
	if (ret == 0 && need)
		ret = err_set(-ENOENT, "%s: no copy of rank %d's data: not in node %s's cache, and no "
			      "partner copy survives", set->ckpt, redun_rank(c),
			      set->node[redun_rank(c)]);
	return ret;
}

const struct redun_level redun_level_partner = {
	.name = "partner",
	.apply = partner_apply,
	.recover = partner_recover,
};
