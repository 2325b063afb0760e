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
 *
 * A segment is laid out in rows of `row` bytes: row u of segment q is
 * bytes (u k + q) row.. of the file. Encoded after the seal, a segment is
 * one row (row = seg: the segments are contiguous). Encoded while the
 * files are written (rs_stream), rows are RS_ROW bytes, so that row u of
 * every column can be encoded once every member wrote (u + 1) k RS_ROW
 * bytes; such a parity image says so in a section "row" (its row size,
 * a little-endian u64), which the rebuild reads.
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
	uint64_t longest;       /* the group's longest file */
	uint64_t seg, row;      /* a segment's bytes; its rows' (seg: one row) */
	struct redun_ctx *ctx;
};

#define RS_ROW (1u << 20)       /* a streamed segment's rows */

/* The group's segments for rows of row bytes (0: one row each) */
static void group_shape(struct rs_group *g, uint64_t row)
{
	uint64_t rows;

	if (g->k < 1) {
		g->seg = 0;
		g->row = 1;
		return;
	}
	if (row > 1) {
		rows = (g->longest + (uint64_t)g->k * row - 1) / ((uint64_t)g->k * row);
		g->seg = rows * row;
		g->row = row;
	} else {
		g->seg = (g->longest + (uint64_t)g->k - 1) / (uint64_t)g->k;
		g->row = g->seg ? g->seg : 1;
	}
}

/* Where byte coff of data segment q is in the member's file */
static uint64_t seg_offset(const struct rs_group *g, int q, uint64_t coff)
{
	return (coff / g->row * (uint64_t)g->k + (uint64_t)q) * g->row + coff % g->row;
}

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

/* The groups' longest files (sizes NULL: not known yet), their segments in
 * one row each */
static void plan_sizes(struct rs_plan *p, const int64_t *sizes)
{
	for (int i = 0; i < p->ngroups; i++) {
		struct rs_group *g = &p->group[i];

		g->longest = 0;
		for (int x = 0; sizes && x < g->n; x++)
			if ((uint64_t)sizes[g->member[x]] > g->longest)
				g->longest = (uint64_t)sizes[g->member[x]];
		group_shape(g, 0);
	}
}

/* The layout of the checkpoint: where the members ran when it was taken. */
static int plan_make(const struct redun_set *set, struct rs_plan *p)
{
	const char *const *names = set->node_then ? set->node_then : set->node;
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

		if (g->n < 2)
			continue;       /* alone: its level degrades to single */
		g->m = (int)parity < g->n ? (int)parity : g->n - 1;
		g->k = g->n - g->m;
		ret = redun_create(redun_find("rs"), (unsigned)g->k, (unsigned)g->m, &g->ctx);
	}
	plan_sizes(p, set->size);
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
static int read_segment(const struct rs_group *g, struct store_io *in, uint64_t size, int q,
			uint8_t *buf)
{
	int ret = 0;

	for (uint64_t off = 0; !ret && off < g->seg; off += g->row)
		ret = read_slice(in, size, seg_offset(g, q, off),
				 g->seg - off < g->row ? g->seg - off : g->row, buf + off);
	return ret;
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
 * (RS_SLICE of every cell at a time, or a row when the rows are smaller):
 * buffers of a slice, not of a segment, so the encoding costs no fresh
 * memory in proportion to the data. The first column a member holds
 * streams into its parity image as it is computed; the others
 * (rs_parity > 1) are kept whole until their turn. */
#define RS_SLICE (8u << 20)

/* One member's encode, slice after slice: begun by rs_apply, or by
 * rs_stream while the files are written and finished by rs_apply */
struct rs_enc {
	struct rs_plan p;
	struct rs_group *g;             /* this member's group */
	int me, nheld, degraded, err;   /* err: this member's, its cells go "not ok" */
	int *held, *scols, *rcols, *ok; /* held[h]: the h-th column where it holds
					 * parity; ok[h]: every cell of it arrived */
	uint8_t **cells, **parity, **later, *mybuf;   /* cells[h * k + pos]: a slice
						       * of its data cells; later[h]:
						       * whole parity for h > 0 */
	uint64_t slice, done, later_cap;        /* done: bytes of every cell encoded */
	struct store_io *own;
	struct store_file *f;
	struct img_writer *w;
	struct store_ckpt *early;       /* the stream's annex */
};

static void enc_free(struct rs_enc *e)
{
	int cells = e->g ? e->nheld * e->g->k : 0;

	img_writer_free(&e->w);
	store_file_free(&e->f);         /* an uncommitted parity's *.tmp goes with it */
	store_io_close(&e->own);
	store_ckpt_free(&e->early);
	for (int x = 0; e->cells && x < cells; x++)
		free(e->cells[x]);
	for (int x = 0; e->parity && e->g && x < e->g->m; x++)
		free(e->parity[x]);
	for (int h = 0; e->later && h < e->nheld; h++)
		free(e->later[h]);
	free(e->cells);
	free(e->parity);
	free(e->later);
	free(e->mybuf);
	free(e->held);
	free(e->scols);
	free(e->rcols);
	free(e->ok);
	plan_free(&e->p);
	memset(e, 0, sizeof(*e));
}

/* The whole parity of columns h > 0 has room for len bytes */
static int enc_later(struct rs_enc *e, uint64_t len)
{
	uint64_t cap = e->later_cap ? e->later_cap : len ? len : 1;

	if (e->later_cap && len <= e->later_cap)
		return 0;
	while (cap < len)
		cap *= 2;
	for (int h = 1; h < e->nheld; h++) {
		uint8_t *p = e->later[h] ? realloc(e->later[h], (size_t)cap) : seg_alloc(cap);

		if (!p)
			return err_set(-ENOMEM, "out of memory");
		e->later[h] = p;
	}
	e->later_cap = cap;
	return 0;
}

/* The buffers of this member's encode, with segments in rows of row bytes
 * (0: one row); -ENOMEM (the caller agrees on it) or 0 */
static int enc_init(const struct redun_set *set, const struct redun_comm *c, uint64_t row,
		    struct rs_enc *e)
{
	int rank = redun_rank(c), ret = 0;
	struct rs_group *g;

	memset(e, 0, sizeof(*e));
	ret = plan_make(set, &e->p);
	if (ret)
		return ret;
	g = e->g = &e->p.group[e->p.group_of[rank]];
	group_shape(g, row);
	e->me = e->p.index_of[rank];
	e->degraded = g->n < 2;
	if (e->degraded)
		return 0;
	e->slice = g->seg < RS_SLICE || !set->size ? g->seg : RS_SLICE;
	if (!set->size || g->row < e->slice)
		e->slice = g->row;      /* a slice never crosses a row */
	e->held = calloc((size_t)g->n, sizeof(int));
	e->scols = calloc((size_t)g->n, sizeof(int));
	e->rcols = calloc((size_t)g->n, sizeof(int));
	e->ok = calloc((size_t)g->n, sizeof(int));
	for (int col = 0; e->held && col < g->n; col++)
		if (is_parity(g, col, e->me))
			e->held[e->nheld++] = col;
	e->cells = calloc((size_t)(e->nheld * g->k), sizeof(*e->cells));
	e->parity = calloc((size_t)g->m, sizeof(*e->parity));
	e->later = calloc((size_t)g->n, sizeof(*e->later));
	e->mybuf = seg_alloc(e->slice);
	for (int x = 0; e->cells && x < e->nheld * g->k; x++)
		if (!(e->cells[x] = seg_alloc(e->slice)))
			ret = -ENOMEM;
	for (int x = 0; e->parity && x < g->m; x++)
		if (!(e->parity[x] = seg_alloc(e->slice)))
			ret = -ENOMEM;
	if (!e->held || !e->scols || !e->rcols || !e->ok || !e->cells || !e->parity ||
	    !e->later || !e->mybuf)
		ret = -ENOMEM;
	if (!ret && set->size)
		ret = enc_later(e, g->seg);
	for (int h = 0; e->ok && h < e->nheld; h++)
		e->ok[h] = 1;
	return ret ? err_set(-ENOMEM, "out of memory") : 0;
}

/* This member's parity image, begun in lc; rows: say its row size */
static int enc_open(const struct redun_set *set, struct rs_enc *e, struct store_ckpt *lc,
		    int rows)
{
	struct img_writer_opts opts;
	char file[32], name[32];
	uint8_t b[8];
	int err, rank = e->g->member[e->me];

	if (set->writer)
		opts = *set->writer;
	else
		img_writer_opts_default(&opts);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(e->g->row >> (8 * i));
	redun_name(file, REDUN_RS_FILE, rank);
	err = store_file_create(lc, file, &e->f);
	err = err ? err : img_writer_create(store_file_write, e->f, &opts, &e->w);
	if (!err)
		img_writer_sink_crc(e->w, store_file_write_crc);
	err = err ? err : img_writer_meta(e->w, "producer", set->producer ? set->producer : "rs");
	err = err ? err : img_writer_meta(e->w, "checkpoint", set->ckpt);
	if (rows) {
		err = err ? err : img_section_begin(e->w, "rs", "row");
		err = err ? err : img_write(e->w, b, sizeof(b));
		err = err ? err : img_section_end(e->w);
	}
	snprintf(name, sizeof(name), "parity-%d", e->held[0]);
	err = err ? err : img_section_begin(e->w, "parity", name);
	err = err ? err : img_section_attr_u64(e->w, "parity",
					       (uint64_t)parity_of(e->g, e->held[0], e->me));
	return err;
}

/* Parity t of bytes o.. of column h's cells in this slice, n bytes, into
 * dest; the group's other parity into e->parity, unused */
static int encode_to(struct rs_enc *e, int h, int t, uint64_t o, uint64_t n, uint8_t *dest)
{
	const struct rs_group *g = e->g;
	const uint8_t *in[255];
	uint8_t *out[255];

	for (int x = 0; x < g->k; x++)
		in[x] = e->cells[h * g->k + x] + o;
	for (int y = 0; y < g->m; y++)
		out[y] = y == t ? dest : e->parity[y] + o;
	return redun_encode(g->ctx, (size_t)n, in, out);
}

/* Parity t of column h's cells in this slice, len bytes, encoded straight
 * into the parity image's chunks (img_write_room): no pass to copy it */
static int encode_filed(struct rs_enc *e, int h, int t, uint64_t len)
{
	int ret = 0;

	for (uint64_t o = 0, n; !ret && o < len; o += n) {
		void *room;
		size_t room_len;

		ret = img_write_room(e->w, &room, &room_len);
		if (ret)
			break;
		n = len - o < room_len ? len - o : room_len;
		ret = encode_to(e, h, t, o, n, room);
		ret = ret ? ret : img_write_done(e->w, (size_t)n);
	}
	return ret;
}

/* The slice of every cell at off, len bytes: exchanged, encoded, filed.
 * own_size: the bytes of this member's file there to read (its size, or
 * while it is written what it has: the caller made sure the slice is in
 * it). last: the encode's last slice (its fault point). Returns the
 * transport's error; this member's own go to e->err, and it goes on
 * exchanging (sending "not ok" for its cells) so the others stay in step. */
static int enc_slice(const struct redun_comm *c, struct rs_enc *e, uint64_t own_size, uint64_t off,
		     uint64_t len, int last)
{
	struct rs_group *g = e->g;
	int me = e->me, ret;

	for (int j = 1; j < g->n; j++) {
		int to = (me + j) % g->n, from = (me - j + g->n) % g->n;
		int ns = cells_between(g, me, to, e->scols), nr = cells_between(g, from, me, e->rcols);

		for (int i = 0; i < ns || i < nr; i++) {
			uint64_t foff = seg_offset(g, seg_of(g, e->scols[i < ns ? i : 0], me), off);
			/* straight from the file when the transport can and the
			 * slice has no padding */
			int direct = i < ns && e->own && c->ops->sendrecv_fd && foff + len <= own_size;
			uint8_t *dst = NULL;
			int64_t got = 1;
			int h = 0;

			if (i < ns && !direct && !e->err)
				e->err = read_slice(e->own, own_size, foff, len, e->mybuf);
			if (i < nr) {
				while (e->held[h] != e->rcols[i])
					h++;
				dst = e->cells[h * g->k + data_pos(g, e->rcols[i], from)];
			}
			ret = exchange_cell(c, g->member[to], i < ns, !e->err, e->mybuf,
					    direct ? e->own : NULL, foff, g->member[from], i < nr, dst,
					    len, &got);
			if (ret)
				return ret;
			if (i < nr && !got)
				e->ok[h] = 0;
		}
	}
	/* the fault point: an encode cut off before its last slice */
	if (last && !e->err)
		e->err = FAULT(REDUN_RS_ENCODE);
	if (!e->err && e->nheld > 1)
		e->err = enc_later(e, off + len);
	for (int h = 0; h < e->nheld; h++) {
		int t = parity_of(g, e->held[h], me);

		if (!e->ok[h] && !e->err)
			e->err = err_set(-EIO, "rs: a member of the group could not send its data");
		if (e->err)
			continue;
		/* rs 1+1 (a group of two, one column held): G's parity row is
		 * 1 / (1 XOR 0) = 1, the parity is the data itself */
		if (g->k == 1 && g->m == 1)
			e->err = img_write(e->w, e->cells[0], (size_t)len);
		else if (h == 0)
			e->err = encode_filed(e, h, t, len);
		else
			e->err = encode_to(e, h, t, 0, len, e->later[h] + off);
	}
	return 0;
}

/* The rest of the segments from e->done, then the other columns' parity,
 * and the commit */
static int enc_finish(const struct redun_comm *c, struct rs_enc *e, uint64_t own_size)
{
	struct rs_group *g = e->g;
	char name[32];
	int ret;

	for (uint64_t off = e->done; off < g->seg; off += e->slice) {
		uint64_t len = g->seg - off < e->slice ? g->seg - off : e->slice;

		ret = enc_slice(c, e, own_size, off, len, off + len >= g->seg);
		if (ret)
			return ret;
		e->done = off + len;
	}
	e->err = e->err ? e->err : img_section_end(e->w);
	for (int h = 1; h < e->nheld; h++) {
		snprintf(name, sizeof(name), "parity-%d", e->held[h]);
		e->err = e->err ? e->err : img_section_begin(e->w, "parity", name);
		e->err = e->err ? e->err : img_section_attr_u64(e->w, "parity",
								(uint64_t)parity_of(g, e->held[h], e->me));
		e->err = e->err ? e->err : img_write(e->w, e->later[h], g->seg);
		e->err = e->err ? e->err : img_section_end(e->w);
	}
	e->err = e->err ? e->err : img_writer_finish(e->w, NULL);
	e->err = e->err ? e->err : store_file_commit(e->f);
	return e->err;
}

/* What rs_stream leaves for rs_apply */
struct rs_stream {
	struct redun_stream base;
	struct rs_enc e;
	unsigned group_size, rs_parity; /* the layout it was begun with */
};

static void rs_stream_free(struct redun_stream *s)
{
	struct rs_stream *st = (struct rs_stream *)s;

	enc_free(&st->e);
	free(st);
}

/* A group's stream goes on after the seal only if every member of it has
 * one, at the same row (they move in step, but a member whose stream
 * broke has none), and some row went (else the segments stay whole: small
 * files keep parity of their own size) */
static int stream_usable(const struct rs_group *g, const int64_t *done)
{
	for (int x = 0; x < g->n; x++)
		if (done[g->member[x]] < 2 || done[g->member[x]] != done[g->member[0]])
			return 0;
	return 1;
}

static int rs_apply(const struct redun_set *set, const struct redun_comm *c, struct store_ckpt *lc,
		    int *degraded)
{
	struct rs_stream *st = set->stream && set->stream->level == &redun_level_rs ?
			       (struct rs_stream *)set->stream : NULL;
	int rank = redun_rank(c), nranks = set->nranks, ret, bad;
	int64_t *done = calloc((size_t)nranks, sizeof(int64_t));
	struct rs_enc fresh = { 0 }, *e = &fresh;
	char msg[REDUN_MSG_LEN] = "";

	if (!done) {
		redun_agree(c, 0, msg);      /* the others' agreement on their buffers, below */
		return err_set(-ENOMEM, "out of memory");
	}
	/* done[r]: 1 + the bytes of every cell rank r's stream encoded, 0: none */
	if (st && st->e.g && st->group_size == set->group_size && st->rs_parity == set->rs_parity)
		done[rank] = (int64_t)st->e.done + 1;
	ret = c->ops->allreduce_i64(c->h, done, (size_t)nranks, REDUN_MAX);
	if (!ret && st && st->e.g && stream_usable(st->e.g, done)) {
		e = &st->e;     /* the rows left, now that every size is known */
		plan_sizes(&e->p, set->size);
		group_shape(e->g, RS_ROW);
		if (e->done >= e->g->seg)
			e->err = e->err ? e->err : err_set(-EIO, "rs: the stream encoded past the end");
		if (e->nheld > 1 && !e->err)
			e->err = enc_later(e, e->g->seg);
	} else {
		if (st)
			enc_free(&st->e);       /* its *.tmp, before this one's */
		ret = ret ? ret : enc_init(set, c, 0, e);
		if (!ret && !e->degraded)
			e->err = enc_open(set, e, lc, 0);
	}
	free(done);
	*degraded = e->g ? e->degraded : 0;
	/* a rank without its buffers would receive into nothing: stop together */
	bad = redun_agree(c, ret != -ENOMEM && e->g, msg);
	if (bad < nranks) {
		ret = ret ? ret : err_set(-ENOMEM, "rs: rank %d: %s", bad, msg);
		goto out;
	}
	if (!e->own && !e->degraded) {
		char name[32];

		redun_name(name, REDUN_FILE, rank);
		if (store_io_open(set->local, set->ckpt, name, &e->own))
			e->own = NULL;  /* read_slice says so, and the member sends "not ok" */
	}
	ret = e->degraded ? 0 : enc_finish(c, e, (uint64_t)set->size[rank]);
out:
	enc_free(e);
	return ret;
}

/* ---- streaming: the parity encoded while the files are written ---- */

/* A member whose group has no row to encode waits 2 ms, twice as long
 * each time again up to 16 ms: every round is an allgather of all the
 * members, whose CPU the writers of the images need */
#define STREAM_IDLE_MAX_NS 16000000
/* Rows one gather may let through: a gather of every member's state per
 * row was one more round through all the members per MiB of each cell,
 * each a wait for the others' turn on a loaded node; a few rows a gather
 * keep a failed checkpoint's stop prompt */
#define STREAM_ROWS 8

/* ST_MORE: after the last gather, this member's group had a row ready
 * (its own, per group: the members stop together only on what they
 * gathered) */
enum { ST_SIZE, ST_COMMITTED, ST_FAILED, ST_MORE, ST_N };

/* Whether row `e->done / row` of every cell of the group can be encoded:
 * every member wrote it (or ended before it: padding), and it is not the
 * group's last (some member wrote past it), which waits for the seal */
static int stream_row_ready(const struct rs_enc *e, const int64_t (*state)[ST_N])
{
	const struct rs_group *g = e->g;
	uint64_t end = (e->done / g->row + 1) * (uint64_t)g->k * g->row;
	int past = 0;

	for (int x = 0; x < g->n; x++) {
		const int64_t *s = state[g->member[x]];

		if (!s[ST_COMMITTED] && (uint64_t)s[ST_SIZE] <= end)
			return 0;
		past |= (uint64_t)s[ST_SIZE] > end;
	}
	return past;
}

static int rs_stream(const struct redun_set *set, const struct redun_comm *c,
		     int (*abort)(void *arg), void *arg, struct redun_stream **out)
{
	struct rs_stream *st = calloc(1, sizeof(*st));
	int64_t (*state)[ST_N] = calloc((size_t)set->nranks, sizeof(*state));
	int rank = redun_rank(c), ret = st && state ? 0 : err_set(-ENOMEM, "out of memory");
	char file[32], msg[REDUN_MSG_LEN];
	struct rs_enc *e = st ? &st->e : NULL;
	long idle = REDUN_STREAM_IDLE_NS;
	int more = 1, was_all = 0;

	*out = NULL;
	if (!ret && !set->local)
		ret = err_set(-EINVAL, "rs stream: no node-local store");
	ret = ret ? ret : enc_init(set, c, RS_ROW, e);
	if (redun_agree(c, ret == 0, msg) < set->nranks) {
		ret = ret ? ret : err_set(-EIO, "rs: %s", msg);
		goto out;
	}
	st->base = (struct redun_stream){ &redun_level_rs, rs_stream_free };
	st->group_size = set->group_size;
	st->rs_parity = set->rs_parity;
	redun_name(file, REDUN_FILE, rank);
	for (;;) {
		int64_t mine[ST_N] = { 0 };
		int all = 1, failed = 0, any_more = 0, r;

		if (!e->own && (r = store_io_open_writing(set->local, set->ckpt, file, &e->own)) &&
		    r != -ENOENT)
			e->err = e->err ? e->err : r;
		if (e->own) {
			mine[ST_COMMITTED] = store_io_committed(e->own);  /* before the size */
			mine[ST_SIZE] = (int64_t)store_io_size(e->own);
		}
		mine[ST_FAILED] = e->err || abort(arg);
		mine[ST_MORE] = more;
		if (c->ops->allgather(c->h, mine, sizeof(mine), state)) {
			ret = -EIO;
			goto out;
		}
		for (int x = 0; x < set->nranks; x++) {
			all &= state[x][ST_COMMITTED] != 0;
			failed |= state[x][ST_FAILED] != 0;
			any_more |= state[x][ST_MORE] != 0;
		}
		/* on every member alike: on what was gathered only. Once every
		 * file is committed the rows the stream fell behind on are
		 * still encoded here, while the checkpoint is sealed: after the
		 * seal they would wait for idle CPU (806-812 ms for 11.6 MiB of
		 * each cell at load 33); only each group's last row is left for
		 * the seal. Groups differ in the rows they have left, so the
		 * stream ends once no member's group had one ready after a
		 * gather that found every file committed (a group that ended
		 * alone left the others in the gather: they hung) */
		if (failed || (was_all && !any_more))
			break;
		was_all = all;
		more = !e->degraded && stream_row_ready(e, (const int64_t (*)[ST_N])state);
		if (!more) {
			if (!all)
				redun_stream_idle(&idle, STREAM_IDLE_MAX_NS);
			continue;
		}
		idle = REDUN_STREAM_IDLE_NS;
		/* the checkpoint's directory is there: this member's file is */
		if (!e->early && !e->err)
			e->err = store_ckpt_annex_early(set->local, set->ckpt, &e->early);
		if (!e->w && !e->err)
			e->err = enc_open(set, e, e->early, 1);
		/* every row the gathered state allows (the same rows on every
		 * member), up to STREAM_ROWS before the next gather */
		for (int rows = 0; rows < STREAM_ROWS &&
		     stream_row_ready(e, (const int64_t (*)[ST_N])state); rows++) {
			ret = enc_slice(c, e, (uint64_t)mine[ST_SIZE], e->done, e->g->row, 0);
			if (ret)
				goto out;
			e->done += e->g->row;
		}
		more = !e->degraded && stream_row_ready(e, (const int64_t (*)[ST_N])state);
	}
	log_info("rank %d: %s: %" PRIu64 " KiB of each rs cell encoded before the seal (while the "
		 "files were written)", rank, set->ckpt, e->done >> 10);
	*out = &st->base;
	st = NULL;
out:
	if (st)
		rs_stream_free(&st->base);
	free(state);
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

/* The rows of an rs image's segments: its section "row" (streamed), else 1
 * (a segment is one row) */
static int64_t parity_row(struct img_reader *rs)
{
	uint8_t b[8];
	int64_t row = 0;
	int idx = img_section_find(rs, "row");

	if (idx < 0 || img_read(rs, (unsigned)idx, 0, b, sizeof(b)) != (ssize_t)sizeof(b))
		return 1;
	for (int i = 7; i >= 0; i--)
		row = row << 8 | b[i];
	return row > 1 ? row : 1;
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
	int64_t *row = calloc((size_t)nranks, sizeof(int64_t));
	struct img_reader *rs = NULL;
	uint8_t **blocks = NULL, *cell = NULL, *present = NULL;
	struct store_io *out = NULL;
	int ret, err = 0;

	ret = plan_make(set, &p);
	if (ret || !own_ok || !rs_ok || !row) {
		free(own_ok);
		free(rs_ok);
		free(row);
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
	row[rank] = rs_ok[rank] ? parity_row(rs) : 0;
	c->ops->allreduce_i64(c->h, own_ok, (size_t)nranks, REDUN_MAX);
	c->ops->allreduce_i64(c->h, rs_ok, (size_t)nranks, REDUN_MAX);
	c->ops->allreduce_i64(c->h, row, (size_t)nranks, REDUN_MAX);
	/* the rows of a group's parity, as its surviving images say */
	for (int gi = 0; gi < p.ngroups; gi++) {
		int64_t most = 0;

		for (int x = 0; x < p.group[gi].n; x++)
			if (row[p.group[gi].member[x]] > most)
				most = row[p.group[gi].member[x]];
		group_shape(&p.group[gi], (uint64_t)most);
	}
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
						       : read_segment(g, own, (uint64_t)sizes[r],
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
					int q = seg_of(g, col, target);
					uint8_t *b = blocks[data_pos(g, col, target)];

					for (uint64_t o = 0; !err && o < g->seg; o += g->row) {
						uint64_t off = seg_offset(g, q, o), size = (uint64_t)sizes[rt];
						uint64_t len = g->seg - o < g->row ? g->seg - o : g->row;
						uint64_t n = off >= size ? 0 : size - off < len ? size - off : len;

						err = n ? store_io_write(out, b + o, (size_t)n, off) : 0;
					}
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
	free(row);
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
	.stream = rs_stream,
};
