/* level_rs.c - RS: Reed-Solomon parity across a group of members on
 * distinct nodes, and the rebuild of lost members.
 *
 * A group of n ranks (one per node, src/redundancy's layout) tolerates the
 * loss of m of them with k = n - m. Each member's image, zero-padded to the
 * group's longest, is cut into k segments of `seg` bytes. Think of an n x n
 * table: column j is one Reed-Solomon stripe, k data segments plus m parity
 * segments, and member i supplies cell (i, j). In column j the members
 * (j + t) mod n, t < m, hold parity t; the others supply, in rank order, one
 * of their data segments each (member i's q-th data column carries its
 * segment q). Every member is parity in exactly m columns and data in k, so
 * losing m members (nodes) loses m cells of every column: each column can
 * be rebuilt, and with it every lost member's segments.
 *
 * A member files the parity it holds as an image, rs-<rank>.img, in its
 * node's cache (sections "parity-<column>"), so it gets checksums and the
 * store's commit like any image. The sizes of all images and the layout
 * inputs are in checkpoint.json, so a rebuild needs nothing from a lost node.
 * Encoding moves cells in rounds of paired exchanges inside each group
 * (rs_apply); the rebuild in one global order, so blocking send and
 * receive pair up.
 */
#include "redundancy/level.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

struct rs_group {
	int n, k, m;
	int *member;            /* ranks, ascending */
	uint64_t seg;
	struct redun_ctx *ctx;
};

struct rs_plan {
	struct rs_group *group;
	int ngroups;
	int *group_of;          /* per rank */
	int *index_of;          /* per rank: position in its group */
};

static int is_parity(const struct rs_group *g, int col, int i)
{
	return (i - col + g->n) % g->n < g->m;
}

/* Position of data member i among the data cells of column col (0..k-1). */
static int data_pos(const struct rs_group *g, int col, int i)
{
	int pos = 0;

	for (int x = 0; x < i; x++)
		pos += !is_parity(g, col, x);
	return pos;
}

/* Which of member i's segments column col carries (it is data there). */
static int seg_of(const struct rs_group *g, int col, int i)
{
	int q = 0;

	for (int c = 0; c < col; c++)
		q += !is_parity(g, c, i);
	return q;
}

static void plan_free(struct rs_plan *p)
{
	for (int i = 0; i < p->ngroups; i++) {
		free(p->group[i].member);
		redun_free(&p->group[i].ctx);
	}
	free(p->group);
	free(p->group_of);
	free(p->index_of);
	memset(p, 0, sizeof(*p));
}

/* The layout of the checkpoint: where the members ran when it was taken. */
static int plan_make(const struct redun_set *set, struct rs_plan *p)
{
	const char *const *names = set->node_then ? set->node_then : set->node;
	const int64_t *sizes = set->size;
	unsigned parity = set->rs_parity;
	int nranks = set->nranks, alone = 0, ret;

	memset(p, 0, sizeof(*p));
	p->group_of = calloc((size_t)nranks, sizeof(int));
	p->index_of = calloc((size_t)nranks, sizeof(int));
	if (!p->group_of || !p->index_of) {
		ret = err_set(-ENOMEM, "out of memory");
		goto out;
	}
	ret = redun_layout_groups(nranks, names, set->group_size, p->group_of, &p->ngroups, &alone);
	if (ret)
		goto out;
	p->group = calloc((size_t)p->ngroups, sizeof(*p->group));
	if (!p->group) {
		ret = err_set(-ENOMEM, "out of memory");
		goto out;
	}
	for (int r = 0; r < nranks; r++) {
		struct rs_group *g = &p->group[p->group_of[r]];
		int *grown = realloc(g->member, (size_t)(g->n + 1) * sizeof(int));

		if (!grown) {
			ret = err_set(-ENOMEM, "out of memory");
			goto out;
		}
		g->member = grown;
		p->index_of[r] = g->n;
		g->member[g->n++] = r;
	}
	for (int i = 0; i < p->ngroups && !ret; i++) {
		struct rs_group *g = &p->group[i];
		uint64_t longest = 0;

		if (g->n < 2)
			continue;       /* alone: its level degrades to single */
		g->m = (int)parity < g->n ? (int)parity : g->n - 1;
		g->k = g->n - g->m;
		for (int x = 0; x < g->n; x++)
			if ((uint64_t)sizes[g->member[x]] > longest)
				longest = (uint64_t)sizes[g->member[x]];
		g->seg = (longest + (uint64_t)g->k - 1) / (uint64_t)g->k;
		ret = redun_create(redun_find("rs"), (unsigned)g->k, (unsigned)g->m, &g->ctx);
	}
out:
	if (ret)
		plan_free(p);
	return ret;
}

/* Buffers of a segment's size: fresh pages are the cost on this class of
 * machine (machine-limits.md §A), so ask for huge pages. */
static uint8_t *seg_alloc(uint64_t seg)
{
	size_t len = seg ? (size_t)seg : 1;
	void *p = NULL;

	if (len >= (2u << 20)) {
		len = (len + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
		if (posix_memalign(&p, 2u << 20, len) == 0)
			madvise(p, len, MADV_HUGEPAGE);
		return p;
	}
	return malloc(len);
}

/* len bytes of this member's file at offset off (zero past its end). */
static int read_slice(struct store_io *in, uint64_t size, uint64_t off, uint64_t len, uint8_t *buf)
{
	uint64_t n = off >= size ? 0 : size - off < len ? size - off : len;

	memset(buf + n, 0, len - n);    /* only the padding */
	if (!n)
		return 0;
	if (!in)
		return err_set(-ENOENT, "rs: this member's file is not readable");
	return store_io_read(in, buf, (size_t)n, off);
}

/* Segment q of this member's file, zero-padded to seg bytes. */
static int read_segment(struct store_io *in, uint64_t size, uint64_t seg, int q, uint8_t *buf)
{
	return read_slice(in, size, (uint64_t)q * seg, seg, buf);
}

/* Send one cell (status, then seg bytes when ok) or receive it into buf. */
static int move_cell(const struct redun_comm *c, int from, int to, int ok, const uint8_t *src,
		     uint8_t *dst, uint64_t seg, int64_t *got)
{
	int64_t v = ok;
	int ret = 0, me = redun_rank(c);

	if (me == from) {
		ret = c->ops->send(c->h, &v, sizeof(v), to);
		if (!ret && ok)
			ret = c->ops->send(c->h, src, seg, to);
	} else if (me == to) {
		ret = c->ops->recv(c->h, got, sizeof(*got), from);
		if (!ret && *got)
			ret = c->ops->recv(c->h, dst, seg, from);
	}
	return ret;
}

/* The columns where member `to` holds parity and member `from` supplies
 * data, ascending: the cells `from` sends `to`, in the order both expect. */
static int cells_between(const struct rs_group *g, int from, int to, int *cols)
{
	int n = 0;

	for (int col = 0; col < g->n; col++)
		if (is_parity(g, col, to) && !is_parity(g, col, from))
			cols[n++] = col;
	return n;
}

/* Parity index t of member i in column col (it holds parity there). */
static int parity_of(const struct rs_group *g, int col, int i)
{
	return (i - col + g->n) % g->n;
}

#define CELL_PIECE (256u << 20)

/* One exchange step: this member's next cell to dest (cell, or nothing if
 * has_send is 0) while it receives the next cell from src into dst (or
 * nothing). A status word goes first each way, so a member that cannot
 * read its image says so and nobody waits for bytes that never come. With
 * in, the cell is not in memory: it is bytes foff.. of in, sent straight
 * from the file where the transport can (no padding in it). */
static int exchange_cell(const struct redun_comm *c, int dest, int has_send, int ok,
			 const uint8_t *cell, struct store_io *in, uint64_t foff, int src, int has_recv,
			 uint8_t *dst, uint64_t seg, int64_t *got)
{
	int64_t out = ok, got_ok = 0;
	int ret;

	ret = c->ops->sendrecv(c->h, &out, has_send ? sizeof(out) : 0, dest, &got_ok,
			       has_recv ? sizeof(got_ok) : 0, src);
	if (ret)
		return ret;
	*got = has_recv ? got_ok : 1;
	/* in pieces: the MPI backend takes at most 1 GiB at once */
	for (uint64_t off = 0; !ret && off < seg; off += CELL_PIECE) {
		size_t n = seg - off < CELL_PIECE ? (size_t)(seg - off) : CELL_PIECE;

		if (has_send && ok && in)
			ret = c->ops->sendrecv_fd(c->h, store_io_fd(in), foff + off, n, dest,
						  dst ? dst + off : NULL, has_recv && got_ok ? n : 0, src);
		else
			ret = c->ops->sendrecv(c->h, cell + off, has_send && ok ? n : 0, dest,
					       dst ? dst + off : NULL, has_recv && got_ok ? n : 0, src);
	}
	return ret;
}

/* Every member of a group supplies its data cells to the members holding
 * parity in their columns. In round j (1..n-1) member i sends to member
 * i + j what it needs from i, while it receives from member i - j what it
 * needs from that one: every member sends and receives at once, and the
 * rounds pair up on every member alike. All of it runs slice by slice
 * (RS_SLICE of every cell at a time): buffers of a slice, not of a segment,
 * so the encoding costs no fresh memory in proportion to the data. The first
 * column a member holds streams into its parity image as it is computed;
 * the others (rs_parity > 1) are kept whole until their turn. */
#define RS_SLICE (8u << 20)

static int rs_apply(const struct redun_set *set, const struct redun_comm *c, struct store_ckpt *lc,
		    int *degraded)
{
	const int64_t *sizes = set->size;
	const char *ckpt = set->ckpt;
	struct store_io *own = NULL;
	int rank = redun_rank(c), nranks = set->nranks;
	struct rs_plan p;
	struct rs_group *g;
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store_file *f = NULL;
	uint8_t **cells = NULL, **parity = NULL, **later = NULL, *mybuf = NULL;
	int *held = NULL, *scols = NULL, *rcols = NULL, *ok = NULL;
	uint64_t slice = 0;
	char file[32], name[32];
	int ret, me, err = 0, nheld = 0;

	ret = plan_make(set, &p);
	if (ret) {
		char msg[REDUN_MSG_LEN];

		redun_agree(c, 0, msg);      /* the others' agreement on their buffers, below */
		return ret;
	}
	g = &p.group[p.group_of[rank]];
	me = p.index_of[rank];
	*degraded = g->n < 2;
	if (!*degraded) {
		/* held[h]: the h-th column where this member holds parity;
		 * cells[h * k + pos]: a slice of its data cells; later[h]: its
		 * whole parity for h > 0; ok[h]: every cell arrived */
		slice = g->seg < RS_SLICE ? g->seg : RS_SLICE;
		held = calloc((size_t)g->n, sizeof(int));
		scols = calloc((size_t)g->n, sizeof(int));
		rcols = calloc((size_t)g->n, sizeof(int));
		ok = calloc((size_t)g->n, sizeof(int));
		for (int col = 0; held && col < g->n; col++)
			if (is_parity(g, col, me))
				held[nheld++] = col;
		cells = calloc((size_t)(nheld * g->k), sizeof(*cells));
		parity = calloc((size_t)g->m, sizeof(*parity));
		later = calloc((size_t)g->n, sizeof(*later));
		mybuf = seg_alloc(slice);
		for (int x = 0; cells && x < nheld * g->k; x++)
			if (!(cells[x] = seg_alloc(slice)))
				err = err_set(-ENOMEM, "out of memory");
		for (int x = 0; parity && x < g->m; x++)
			if (!(parity[x] = seg_alloc(slice)))
				err = err_set(-ENOMEM, "out of memory");
		for (int h = 1; later && h < nheld; h++)
			if (!(later[h] = seg_alloc(g->seg)))
				err = err_set(-ENOMEM, "out of memory");
		if (!held || !scols || !rcols || !ok || !cells || !parity || !later || !mybuf)
			err = err_set(-ENOMEM, "out of memory");
		for (int h = 0; ok && h < nheld; h++)
			ok[h] = 1;
		redun_name(file, REDUN_RS_FILE, rank);
		if (set->writer)
			opts = *set->writer;
		else
			img_writer_opts_default(&opts);
		redun_name(name, REDUN_FILE, rank);
		if (store_io_open(set->local, ckpt, name, &own))
			own = NULL;     /* read_slice says so, and the member sends "not ok" */
		err = err ? err : store_file_create(lc, file, &f);
		err = err ? err : img_writer_create(store_file_write, f, &opts, &w);
		err = err ? err : img_writer_meta(w, "producer", set->producer ? set->producer : "rs");
		err = err ? err : img_writer_meta(w, "checkpoint", ckpt);
		snprintf(name, sizeof(name), "parity-%d", held ? held[0] : 0);
		err = err ? err : img_section_begin(w, "parity", name);
		err = err ? err : img_section_attr_u64(w, "parity", (uint64_t)parity_of(g, held[0], me));
	}
	/* a rank without its buffers would receive into nothing: stop together */
	{
		char msg[REDUN_MSG_LEN] = "";
		int bad = redun_agree(c, err != -ENOMEM, msg);

		if (bad < nranks) {
			ret = err_set(-ENOMEM, "rs: rank %d: %s", bad, msg);
			goto out;
		}
	}
	/* after a local error this member goes on exchanging (sending "not
	 * ok" for its cells), so the others stay in step */
	for (uint64_t off = 0; !*degraded && off < g->seg; off += slice) {
		uint64_t len = g->seg - off < slice ? g->seg - off : slice;

		for (int j = 1; j < g->n; j++) {
			int to = (me + j) % g->n, from = (me - j + g->n) % g->n;
			int ns = cells_between(g, me, to, scols), nr = cells_between(g, from, me, rcols);

			for (int i = 0; i < ns || i < nr; i++) {
				uint8_t *dst = NULL;
				int64_t got = 1;
				int h = 0;

				uint64_t foff = (uint64_t)seg_of(g, scols[i < ns ? i : 0], me) * g->seg + off;
				/* straight from the file when the transport can and the
				 * slice has no padding */
				int direct = i < ns && own && c->ops->sendrecv_fd &&
					     foff + len <= (uint64_t)sizes[rank];

				if (i < ns && !direct)
					err = err ? err : read_slice(own, (uint64_t)sizes[rank], foff, len, mybuf);
				if (i < nr) {
					while (held[h] != rcols[i])
						h++;
					dst = cells[h * g->k + data_pos(g, rcols[i], from)];
				}
				ret = exchange_cell(c, g->member[to], i < ns, !err, mybuf, direct ? own : NULL,
						    foff, g->member[from], i < nr, dst, len, &got);
				if (ret)
					goto out;
				if (i < nr && !got)
					ok[h] = 0;
			}
		}
		/* the fault point: an encode cut off before its last slice */
		if (off + len >= g->seg && !err)
			err = FAULT(REDUN_RS_ENCODE);
		for (int h = 0; h < nheld; h++) {
			int t = parity_of(g, held[h], me);
			const uint8_t *coded = parity[t];

			if (!ok[h] && !err)
				err = err_set(-EIO, "rs: a member of the group could not send its data");
			/* rs 1+1 (a group of two): G's parity row is 1 / (1 XOR 0) = 1,
			 * the parity is the data itself; no pass to copy it */
			if (g->k == 1 && g->m == 1)
				coded = cells[h * g->k];
			else
				err = err ? err : redun_encode(g->ctx, (size_t)len,
							       (const uint8_t *const *)(cells + h * g->k),
							       parity);
			if (err)
				continue;
			if (h == 0)
				err = img_write(w, coded, (size_t)len);
			else
				memcpy(later[h] + off, coded, (size_t)len);
		}
	}
	if (!*degraded)
		err = err ? err : img_section_end(w);
	for (int h = 1; !*degraded && h < nheld; h++) {
		snprintf(name, sizeof(name), "parity-%d", held[h]);
		err = err ? err : img_section_begin(w, "parity", name);
		err = err ? err : img_section_attr_u64(w, "parity", (uint64_t)parity_of(g, held[h], me));
		err = err ? err : img_write(w, later[h], g->seg);
		err = err ? err : img_section_end(w);
	}
	if (!*degraded) {
		err = err ? err : img_writer_finish(w, NULL);
		err = err ? err : store_file_commit(f);
	}
	ret = err;
out:
	img_writer_free(&w);
	store_file_free(&f);
	store_io_close(&own);
	for (int x = 0; cells && x < nheld * g->k; x++)
		free(cells[x]);
	for (int x = 0; parity && x < g->m; x++)
		free(parity[x]);
	for (int h = 0; later && h < nheld; h++)
		free(later[h]);
	free(cells);
	free(parity);
	free(later);
	free(mybuf);
	free(held);
	free(scols);
	free(rcols);
	free(ok);
	plan_free(&p);
	return ret;
}

/* Read parity cell `col` of this rank's rs image into buf. */
static int read_parity(struct img_reader *rs, int col, uint8_t *buf, uint64_t seg)
{
	char name[32];
	int idx;

	snprintf(name, sizeof(name), "parity-%d", col);
	idx = img_section_find(rs, name);
	if (idx < 0)
		return err_set(-ENOENT, "rs image has no %s", name);
	return img_read(rs, (unsigned)idx, 0, buf, seg) == (ssize_t)seg ? 0 : -EIO;
}

/* Collective: every member without a good file of its own (have_own 0)
 * gets it rebuilt into the scratch file out_name from its group's files
 * (own: this member's, NULL if it has none) and parity (rs_in: its rs
 * image, NULL if it has none). */
static int rs_rebuild(const struct redun_set *set, const struct redun_comm *c, int have_own,
		      struct store_io *own, struct store_io *rs_in, const char *out_name)
{
	const char *ckpt = set->ckpt;
	const int64_t *sizes = set->size;
	int rank = redun_rank(c), nranks = set->nranks;
	struct rs_plan p;
	int64_t *own_ok = calloc((size_t)nranks, sizeof(int64_t));
	int64_t *rs_ok = calloc((size_t)nranks, sizeof(int64_t));
	struct img_reader *rs = NULL;
	uint8_t **blocks = NULL, *cell = NULL, *present = NULL;
	struct store_io *out = NULL;
	int ret, err = 0;

	ret = plan_make(set, &p);
	if (ret || !own_ok || !rs_ok) {
		free(own_ok);
		free(rs_ok);
		return ret ? ret : err_set(-ENOMEM, "out of memory");
	}
	own_ok[rank] = have_own;
	rs_ok[rank] = rs_in && img_open_fd(store_io_fd(rs_in), store_io_path(rs_in), &rs) == 0 &&
		      img_verify(rs) == 0;
	/* damaged parity counts as lost: the rebuild takes the group's other
	 * cells, or refuses when too few are left */
	if (rs_in && !rs_ok[rank])
		log_warn("rank %d: its rs parity %s is not used: %s", rank, store_io_path(rs_in),
			 err_msg());
	c->ops->allreduce_i64(c->h, own_ok, (size_t)nranks, REDUN_MAX);
	c->ops->allreduce_i64(c->h, rs_ok, (size_t)nranks, REDUN_MAX);
	/* every buffer first, agreed on, so no member receives into nothing */
	{
		struct rs_group *mine = &p.group[p.group_of[rank]];
		uint64_t most = 0;
		char msg[REDUN_MSG_LEN] = "";
		int ok = 1;

		for (int gi = 0; gi < p.ngroups; gi++) {
			int needy = 0;

			for (int x = 0; x < p.group[gi].n; x++)
				needy |= !own_ok[p.group[gi].member[x]];
			if (needy && p.group[gi].seg > most)
				most = p.group[gi].seg;
		}
		cell = seg_alloc(most);                 /* what a member sends */
		ok = cell != NULL;
		if (!have_own) {
			blocks = calloc((size_t)mine->n, sizeof(*blocks));
			present = calloc((size_t)mine->n, 1);
			ok &= blocks && present;
			for (int x = 0; ok && x < mine->n; x++)
				ok &= (blocks[x] = seg_alloc(mine->seg)) != NULL;
		}
		if (!ok)
			err_set(-ENOMEM, "out of memory");
		if (redun_agree(c, ok, msg) < nranks) {
			ret = err_set(-ENOMEM, "rs rebuild: %s", msg);
			goto out;
		}
	}
	for (int gi = 0; gi < p.ngroups; gi++) {
		struct rs_group *g = &p.group[gi];
		int needy = 0;

		for (int x = 0; x < g->n; x++)
			needy |= !own_ok[g->member[x]];
		if (!needy)
			continue;
		for (int target = 0; target < g->n; target++) {
			int rt = g->member[target];

			if (own_ok[rt])
				continue;
			if (rank == rt) {
				if (g->n < 2)
					err = err_set(-ENOENT, "%s: rank %d has no rs group to rebuild from",
						      ckpt, rt);
				if (store_scratch_create(set->local, out_name, &out))
					err = err ? err : -EIO;
			}
			for (int col = 0; g->n >= 2 && col < g->n; col++) {
				if (is_parity(g, col, target))
					continue;       /* its parity cells are not its data */
				for (int x = 0; x < g->n; x++) {
					int r = g->member[x], ok, slot;
					int64_t got = 0;

					if (x == target)
						continue;
					slot = is_parity(g, col, x) ? g->k + (x - col + g->n) % g->n
								    : data_pos(g, col, x);
					ok = is_parity(g, col, x) ? (int)rs_ok[r] : (int)own_ok[r];
					if (rank == r && ok) {
						ok = !(is_parity(g, col, x)
						       ? read_parity(rs, col, cell, g->seg)
						       : read_segment(own, (uint64_t)sizes[r], g->seg,
								      seg_of(g, col, x), cell));
					}
					ret = move_cell(c, r, rt, ok, cell,
							rank == rt ? blocks[slot] : NULL, g->seg, &got);
					if (ret)
						goto out;
					if (rank == rt)
						present[slot] = (uint8_t)got;
				}
				if (rank != rt || err)
					continue;
				present[data_pos(g, col, target)] = 0;
				err = redun_rebuild(g->ctx, g->seg, blocks, present);
				if (!err) {
					uint64_t off = (uint64_t)seg_of(g, col, target) * g->seg;
					uint64_t size = (uint64_t)sizes[rt];
					uint64_t n = off >= size ? 0 : size - off < g->seg ? size - off : g->seg;

					err = store_io_write(out, blocks[data_pos(g, col, target)], (size_t)n,
							     off);
				} else {
					char why[256];

					snprintf(why, sizeof(why), "%s", err_msg());
					err = err_set(err, "%s: rank %d: group of ranks %d..: %s", ckpt, rt,
						      g->member[0], why);
				}
			}
			if (rank == rt)
				store_io_close(&out);
		}
	}
	ret = err;
out:
	store_io_close(&out);
	free(cell);
	for (int x = 0; blocks && x < p.group[p.group_of[rank]].n; x++)
		free(blocks[x]);
	free(blocks);
	free(present);
	img_close(&rs);
	free(own_ok);
	free(rs_ok);
	plan_free(&p);
	return ret;
}

/* Member s's parity left in this node's cache when s ran here and runs
 * elsewhere now. */
static int held_moved_rs(const struct redun_set *set, int me, int s, char ckpt[64], char name[64])
{
	return redun_held_moved(set, REDUN_RS_FILE, me, s, ckpt, name);
}

static void open_found(struct store *s, const char *ckpt, const char *name, struct store_io **io)
{
	if (store_io_open(s, ckpt[0] ? ckpt : NULL, name, io))
		*io = NULL;
}

/* Members without a good file get it rebuilt from their rs group. A member
 * that runs on another node than when the checkpoint was taken first gets
 * its file and its parity from that node, so that only the files of lost
 * nodes count as missing. */
static int rs_recover(const struct redun_set *set, const struct redun_comm *c, int need,
		      redun_accept_fn accept, void *arg, struct redun_found *found)
{
	char why[REDUN_MSG_LEN], file[32], rebuilt[32];
	struct store_io *own = NULL, *rs = NULL;
	struct redun_found parity = { 0 };
	int me = redun_rank(c), have_own = !need, ret;

	snprintf(why, sizeof(why), "%s", err_msg());
	/* a fetch that fails leaves the file missing: the rebuild covers it */
	if (redun_fetch_held(set, c, need, redun_held_moved_image, "image", ".fetched-%05d.img", 0,
			     found) > 0 &&
	    accept(arg, found->s, found->ckpt[0] ? found->ckpt : NULL, found->name) == 0) {
		open_found(found->s, found->ckpt, found->name, &own);
		have_own = 1;
	} else {
		redun_found_drop(found);
	}
	if (!own && have_own) {
		redun_name(file, REDUN_FILE, me);
		open_found(set->local, set->ckpt, file, &own);
	}
	redun_name(file, REDUN_RS_FILE, me);
	if (redun_fetch_held(set, c, !store_io_exists(set->local, set->ckpt, file), held_moved_rs,
			     "rs parity", ".fetched-rs-%05d.img", 1, &parity) > 0)
		open_found(parity.s, parity.ckpt, parity.name, &rs);
	else
		open_found(set->local, set->ckpt, file, &rs);
	snprintf(found->scratch[1], sizeof(found->scratch[1]), "%s", parity.scratch[1]);
	found->scratch_in = set->local;
	if (!have_own)
		log_info("rank %d: %s; rebuilding from its rs group", me, why);
	redun_name(rebuilt, ".rebuilt-%05d.img", me);
	if (!have_own)
		snprintf(found->scratch[0], sizeof(found->scratch[0]), "%s", rebuilt);
	ret = rs_rebuild(set, c, have_own, own, rs, rebuilt);
	store_io_close(&own);
	store_io_close(&rs);
	if (have_own)
		return ret;
	if (ret)
		return ret;
	found->s = set->local;
	found->ckpt[0] = '\0';
	snprintf(found->name, sizeof(found->name), "%s", rebuilt);
	return accept(arg, set->local, NULL, rebuilt);
}

const struct redun_level redun_level_rs = {
	.name = "rs",
	.apply = rs_apply,
	.recover = rs_recover,
};
