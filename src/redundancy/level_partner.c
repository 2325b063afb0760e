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

/* What a stream (redun_stream_begin) left for the last pieces */
struct partner_stream {
	struct redun_stream base;
	struct store_ckpt *early;       /* the checkpoint's early annex */
	struct store_file *f;           /* the copy received, uncommitted; or NULL */
	struct store_io *in;            /* this member's file; or NULL */
	uint64_t sent, received;        /* bytes of each moved already */
	int ret;                        /* this member's file could not be sent */
	int put;                        /* the copy received could not be filed */
};

/* What a member says of the file it sends: its size (XFER_FAILED: none
 * comes) and the CRC its record in the store gives it, which the copy's
 * record takes over: the copy is spliced into its file without passing
 * through the receiver's memory (one pass less), and whatever the bytes
 * went through, a copy whose content differs from its source's CRC fails
 * `stasis verify` and the chunk CRCs any reader of the image checks (the
 * rebuild's accept) */
struct partner_hdr {
	uint64_t size;
	uint32_t crc;
	uint32_t has_crc;
};

static struct partner_hdr partner_hdr(const struct redun_set *set, const char *file,
				      struct store_io *in)
{
	struct partner_hdr h = { store_io_size(in), 0, 0 };
	struct store_file_info *files = NULL;
	size_t n = 0;

	if (store_ckpt_files(set->local, set->ckpt, &files, &n) == 0)
		for (size_t i = 0; i < n; i++)
			if (!strcmp(files[i].name, file) && files[i].size == h.size)
				h = (struct partner_hdr){ h.size, files[i].crc, 1 };
	free(files);
	return h;
}

/* When every member holds exactly one copy (as with equal ranks per node),
 * all copies move at once: each member sends its file to its partner while
 * receiving the one it keeps. With st, the stream moved all but the last
 * pieces already: the rest goes the same way. */
static int partner_pairwise(const struct redun_set *set, const struct redun_comm *c,
			    struct store_ckpt *lc, int to, int from, char *buf, char *back,
			    struct partner_stream *st)
{
	char file[32];
	struct partner_hdr hm = { XFER_FAILED, 0, 0 }, ht = { 0, 0, 0 };
	uint64_t mine, theirs, so = st ? st->sent : 0, ro = st ? st->received : 0;
	struct store_file *f = st ? st->f : NULL;
	struct store_io *in = st ? st->in : NULL;
	int ret = 0, put = st ? st->put : 0, me = redun_rank(c);

	redun_name(file, REDUN_FILE, me);
	if (st && in && !st->ret)
		hm = partner_hdr(set, file, in);        /* committed: final */
	else if (st)
		ret = st->ret ? st->ret : err_set(-EIO, "%s: never sent to rank %d", file, to);
	else if (store_io_open(set->local, set->ckpt, file, &in) == 0)
		hm = partner_hdr(set, file, in);
	else
		ret = err_set(-EIO, "%s: cannot read it to send to rank %d", err_msg(), to);
	if (c->ops->sendrecv(c->h, &hm, sizeof(hm), to, &ht, sizeof(ht), from)) {
		ret = ret ? ret : -EIO;
		goto out;
	}
	mine = hm.size;
	theirs = ht.size;
	redun_name(file, REDUN_PARTNER_FILE, from);
	if (!st)
		put = store_file_create(lc, file, &f);
	else if (!put && !f)
		put = err_set(-EIO, "%s: the stream from rank %d never began", file, from);
	if (theirs == XFER_FAILED)
		put = put ? put : err_set(-EIO, "rank %d could not send its image", from);
	if (theirs != XFER_FAILED && ro > theirs)
		put = put ? put : err_set(-EIO, "rank %d sent more than its image", from);
	while ((mine != XFER_FAILED && so < mine) || (theirs != XFER_FAILED && ro < theirs)) {
		size_t sn = mine == XFER_FAILED || so >= mine ? 0 :
			    mine - so < XFER_PIECE ? (size_t)(mine - so) : XFER_PIECE;
		size_t rn = theirs == XFER_FAILED || ro >= theirs ? 0 :
			    theirs - ro < XFER_PIECE ? (size_t)(theirs - ro) : XFER_PIECE;

		/* the fault points: a copy cut off before its end (the last
		 * piece received is not filed) */
		if (sn && so + sn >= mine && !ret)
			ret = FAULT(REDUN_PARTNER_SEND);
		if (rn && !put && ro + rn >= theirs)
			put = FAULT(REDUN_PARTNER_RECV);
		if (redun_sendrecv_file(c, in, so, sn, to, f, rn, from, buf, back, &ret, &put)) {
			ret = ret ? ret : -EIO;
			goto out;
		}
		so += sn;
		ro += rn;
	}
	if (ht.has_crc && !put)
		store_file_vouch(f, ht.crc);
	put = put ? put : store_file_commit(f);
out:
	if (!st) {
		store_io_close(&in);
		store_file_free(&f);    /* an uncommitted copy's *.tmp goes with it */
	}
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
	struct partner_stream *st;

	ret = ret ? ret : redun_layout_partners(set->nranks, set->node, partner, &alone);
	/* every buffer first, agreed on: the exchanges pair every send with a
	 * receive, all go or none */
	if (redun_agree(c, ret == 0, msg) < set->nranks) {
		ret = ret ? ret : err_set(-EIO, "partner: %s", msg);
		goto out;
	}
	*degraded = partner[me] < 0;
	from = partner_permutation(partner, set->nranks, me);
	st = set->stream && set->stream->level == &redun_level_partner ?
	     (struct partner_stream *)set->stream : NULL;
	if (from >= 0)  /* the same decision on every member: the layout is */
		ret = partner_pairwise(set, c, lc, partner[me], from, buf, back, st);
	else
		ret = partner_ordered(set, c, lc, partner, buf);
out:
	free(partner);
	redun_xfer_put(buf);
	redun_xfer_put(back);
	return ret;
}

/* ---- streaming: the copies sent while the files are written ---- */

#define STREAM_DIR_WAIT 30000           /* times it waits for the checkpoint's directory */
/* Pieces a round may carry: fewer rounds, each a header exchange in
 * lockstep with the partner, when the file has grown by more */
#define STREAM_ROUND 8

enum { STREAM_DATA, STREAM_IDLE, STREAM_DONE, STREAM_FAIL };

struct stream_hdr {
	uint32_t state;
	uint32_t pad;
	uint64_t len;                   /* STREAM_DATA: bytes that follow */
};

/* A member with nothing new waits 2 ms each round (its partner waits for
 * its header) */
static void stream_nap(void)
{
	long idle = REDUN_STREAM_IDLE_NS;

	redun_stream_idle(&idle, idle);
}

/* What this member sends next: full pieces of its file (up to
 * STREAM_ROUND) while more than one is written (the last piece stays for
 * the level's own exchange, so its fault points and commit come after the
 * checkpoint's seal), DONE once the file is committed and only that is
 * left */
static struct stream_hdr stream_next(const struct redun_set *set, struct partner_stream *st,
				     int me, int (*abort)(void *), void *arg)
{
	struct stream_hdr h = { STREAM_IDLE, 0, 0 };
	char file[32];
	int ret;

	if (st->ret || abort(arg))
		return (struct stream_hdr){ STREAM_FAIL, 0, 0 };
	redun_name(file, REDUN_FILE, me);
	if (!st->in && (ret = store_io_open_writing(set->local, set->ckpt, file, &st->in)) &&
	    ret != -ENOENT)
		st->ret = ret;
	if (st->in) {
		int done = store_io_committed(st->in);   /* before the size: then final */
		uint64_t size = store_io_size(st->in);

		uint64_t n = size > st->sent + XFER_PIECE ? (size - st->sent - 1) / XFER_PIECE : 0;

		if (n)
			h = (struct stream_hdr){ STREAM_DATA, 0,
						 (n < STREAM_ROUND ? n : STREAM_ROUND) * XFER_PIECE };
		else if (done)
			h.state = STREAM_DONE;
	}
	return st->ret ? (struct stream_hdr){ STREAM_FAIL, 0, 0 } : h;
}

/* The copy received goes into the early annex: the checkpoint's directory
 * is there once this node's rank began its image */
static int stream_sink(const struct redun_set *set, struct partner_stream *st, int from,
		       int (*abort)(void *), void *arg)
{
	char file[32];
	int ret = 0;

	redun_name(file, REDUN_PARTNER_FILE, from);
	for (int i = 0; !st->early; i++) {
		ret = store_ckpt_annex_early(set->local, set->ckpt, &st->early);
		if (ret != -ENOENT || i == STREAM_DIR_WAIT || abort(arg))
			break;
		stream_nap();
	}
	return ret ? ret : store_file_create(st->early, file, &st->f);
}

static void partner_stream_free(struct redun_stream *s)
{
	struct partner_stream *st = (struct partner_stream *)s;

	store_io_close(&st->in);
	store_file_free(&st->f);        /* an uncommitted copy's *.tmp goes with it */
	store_ckpt_free(&st->early);
	free(st);
}

static int partner_stream(const struct redun_set *set, const struct redun_comm *c,
			  int (*abort)(void *arg), void *arg, struct redun_stream **out)
{
	int *partner = calloc((size_t)set->nranks, sizeof(int));
	char *buf = redun_xfer_get(), *back = redun_xfer_get(), msg[REDUN_MSG_LEN];
	int alone = 0, me = redun_rank(c), from, to, mine_done = 0, theirs_done = 0;
	struct partner_stream *st = calloc(1, sizeof(*st));
	int ret = partner && buf && back && st ? 0 : err_set(-ENOMEM, "out of memory");

	*out = NULL;
	if (st)
		st->base = (struct redun_stream){ &redun_level_partner, partner_stream_free };
	if (!ret && !set->local)
		ret = err_set(-EINVAL, "partner stream: no node-local store");
	ret = ret ? ret : redun_layout_partners(set->nranks, set->node, partner, &alone);
	if (redun_agree(c, ret == 0, msg) < set->nranks) {
		ret = ret ? ret : err_set(-EIO, "partner: %s", msg);
		goto out;
	}
	from = partner_permutation(partner, set->nranks, me);
	if (from < 0)
		goto out;       /* on every member: the layout is the same */
	to = partner[me];
	/* lockstep: each round every member sends its partner a header (and
	 * the piece it announces) and gets one from the member it keeps */
	while (!mine_done || !theirs_done) {
		struct stream_hdr h = { STREAM_IDLE, 0, 0 }, t = { STREAM_IDLE, 0, 0 };
		size_t sn, rn;

		if (!mine_done) {
			h = stream_next(set, st, me, abort, arg);
			if (h.state == STREAM_IDLE)
				stream_nap();
		}
		if (c->ops->sendrecv(c->h, &h, mine_done ? 0 : sizeof(h), to, &t,
				     theirs_done ? 0 : sizeof(t), from)) {
			ret = -EIO;
			goto out;
		}
		sn = !mine_done && h.state == STREAM_DATA ? (size_t)h.len : 0;
		rn = !theirs_done && t.state == STREAM_DATA ? (size_t)t.len : 0;
		if (rn > STREAM_ROUND * (size_t)XFER_PIECE || rn % XFER_PIECE) {
			ret = err_set(-EPROTO, "partner stream: rank %d announced %zu bytes", from, rn);
			goto out;
		}
		if (rn && !st->put && !st->f)
			st->put = stream_sink(set, st, from, abort, arg);
		/* the round's pieces, one by one each way: both sides know how
		 * many from the headers */
		while (sn || rn) {
			size_t s1 = sn < XFER_PIECE ? sn : XFER_PIECE, r1 = rn < XFER_PIECE ? rn : XFER_PIECE;

			if (redun_sendrecv_file(c, st->in, st->sent, s1, to, st->f, r1, from, buf, back,
						&st->ret, &st->put)) {
				ret = -EIO;
				goto out;
			}
			st->sent += s1;
			st->received += r1;
			sn -= s1;
			rn -= r1;
		}
		mine_done |= h.state == STREAM_DONE || h.state == STREAM_FAIL;
		if (!theirs_done && (t.state == STREAM_DONE || t.state == STREAM_FAIL)) {
			theirs_done = 1;
			if (t.state == STREAM_FAIL && !st->put)
				st->put = err_set(-EIO, "rank %d could not send its image", from);
			else if (!st->put && !st->f)
				st->put = stream_sink(set, st, from, abort, arg);
		}
	}
	*out = &st->base;
	st = NULL;
out:
	if (st)
		partner_stream_free(&st->base);
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
	.stream = partner_stream,
};
