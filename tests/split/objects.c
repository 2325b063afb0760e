/* objects.c - MPI objects made before the loop and used in it (tests/split).
 *
 *   objects ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2. Before the loop each rank makes, and records
 * what MPI says about:
 *  - communicators: MPI_Comm_dup of MPI_COMM_WORLD; MPI_Comm_split into even
 *    and odd ranks; MPI_Comm_create of the group of ranks 0..size/2 (made
 *    with MPI_Group_incl; the other ranks get MPI_COMM_NULL); a periodic 1-D
 *    Cartesian communicator (MPI_Dims_create, MPI_Cart_create, MPI_Cart_shift
 *    gives the ring neighbours); with 4 ranks or more a 2-D one, periodic in
 *    its first dimension only, and its rows (MPI_Cart_sub);
 *  - groups: of MPI_COMM_WORLD and of the split communicator
 *    (MPI_Comm_group), the half group (MPI_Group_incl);
 *  - datatypes, committed: MPI_Type_contiguous; MPI_Type_vector;
 *    MPI_Type_create_hvector of a contiguous type freed before the commit;
 *    MPI_Type_dup of an MPI_Type_indexed freed after the dup (the dup keeps
 *    its committed state); MPI_Type_create_resized of an
 *    MPI_Type_create_struct (int, double, char, with padding) freed before
 *    the commit;
 *  - a commutative user operation (MPI_Op_create): the largest absolute
 *    value of ints, elementwise.
 *
 * Each iteration prints "rank R iteration I", then right away does an
 * MPI_Allreduce with the user operation on the dup'd communicator and an
 * MPI_Bcast on the split one; then sends the right neighbour on the 1-D
 * Cartesian communicator data described by each datatype (MPI_Isend,
 * MPI_Irecv, MPI_Waitall), from buffers whose holes hold other bytes into
 * buffers with holes, and checks every byte received, holes untouched
 * included; does an MPI_Sendrecv around the ring of every communicator it
 * belongs to; checks that sizes, ranks, group sizes and ranks, datatype sizes
 * and extents, Cartesian dimensions, periods, coordinates, ranks and shifts
 * (MPI_Cart_get, MPI_Cart_coords, MPI_Cart_rank, MPI_Cart_shift),
 * MPI_Comm_compare and MPI_Topo_test are still what they were before the
 * loop and what they must be; then sleeps SLEEP_MS. There is no message in
 * flight during the sleep.
 *
 * At the end rank 0 sums the checks made (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I checks=K" if K is the count expected from N
 * and I alone. Any wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NRED 8		/* ints reduced */
#define NBC 16		/* ints broadcast */
#define NSR 8		/* ints around each communicator's ring */
#define TAIL 16		/* bytes after the last instance, never written */

struct rec {
	int i;
	double d;
	char c;
};

enum { T_CONTIG, T_VECTOR, T_HVECTOR, T_INDEXED, T_STRUCT, NTYPES };

/* What each datatype must describe, worked out without MPI. */
static const struct layout {
	const char *name;
	int count;		/* instances sent */
	int nel;		/* elements in one instance */
	long off[8];		/* their byte offsets */
	const char *kind;	/* 'i' int, 'd' double, 'c' char */
	long extent;
	int size;
} lay[NTYPES] = {
	{ "contiguous", 4, 3, { 0, 4, 8 }, "iii", 12, 12 },
	{ "vector", 2, 8, { 0, 4, 12, 16, 24, 28, 36, 40 }, "iiiiiiii", 44, 32 },
	{ "hvector", 2, 6, { 0, 8, 40, 48, 80, 88 }, "dddddd", 96, 48 },
	{ "dup of indexed", 3, 6, { 0, 12, 16, 28, 32, 36 }, "iiiiii", 40, 24 },
	{ "resized struct", 5, 3,
	  { offsetof(struct rec, i), offsetof(struct rec, d), offsetof(struct rec, c) }, "idc",
	  sizeof(struct rec), sizeof(int) + sizeof(double) + 1 },
};

enum { C_DUP, C_SPLIT, C_CREATE, C_CART1, C_CART2, C_SUB, NCOMMS };
static const char *cname[NCOMMS] = { "dup", "split", "create", "cart1", "cart2", "cart_sub" };

static int rank, size;
static long checks;
static int op_calls_bad;

#include "check.h"

static int pay(int src, int dst, int it, int tag, int i)
{
	return (int)pay_word(src, dst, it, tag, i);
}

static void absmax(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	const int *a = in;
	int *b = inout;

	if (*dt != MPI_INT)
		op_calls_bad++;
	for (int i = 0; i < *len; i++) {
		int x = abs(a[i]), y = abs(b[i]);

		b[i] = x > y ? x : y;
	}
}

static int red_value(int r, int it, int i)
{
	return (int)((uint32_t)pay(r, 0, it, 90, i) % 2001u) - 1000;
}

/* The bytes of count instances of datatype t from src to dst, holes set
 * to hole. */
static void layout_fill(unsigned char *buf, int t, int src, int dst, int it, int hole)
{
	const struct layout *l = &lay[t];

	memset(buf, hole, l->count * l->extent + TAIL);
	for (int k = 0; k < l->count; k++)
		for (int j = 0; j < l->nel; j++) {
			unsigned char *p = buf + k * l->extent + l->off[j];
			int v = pay(src, dst, it, 60 + t, k * l->nel + j);
			double d = (double)v / 8;
			char c = (char)v;

			if (l->kind[j] == 'i')
				memcpy(p, &v, sizeof(v));
			else if (l->kind[j] == 'd')
				memcpy(p, &d, sizeof(d));
			else
				memcpy(p, &c, sizeof(c));
		}
}

struct state {
	MPI_Comm comm[NCOMMS];
	int csize[NCOMMS], crank[NCOMMS];
	MPI_Group world_grp, half_grp, split_grp;
	int gsize[3], grank[3];
	MPI_Datatype type[NTYPES];
	int tsize[NTYPES];
	MPI_Aint tlb[NTYPES], textent[NTYPES];
	MPI_Op op;
	int left, right;	/* on cart1 */
	int dims1, dims2[2], coords2[2], down, up;	/* cart2: shift in dimension 1 */
};

/* What the communicators must be, worked out without MPI: their size, this
 * rank's rank in them and the world rank of their rank j. */
static int want_size(const struct state *s, int c)
{
	switch (c) {
	case C_SPLIT:
		return (size - rank % 2 + 1) / 2;
	case C_CREATE:
		return rank <= size / 2 ? size / 2 + 1 : 0;
	case C_CART2:
		return size >= 4 ? size : 0;
	case C_SUB:
		return size >= 4 ? s->dims2[1] : 0;
	default:
		return size;
	}
}

static int want_rank(const struct state *s, int c)
{
	if (c == C_SPLIT)
		return rank / 2;
	if (c == C_SUB)
		return rank % s->dims2[1];
	return rank;
}

static int world_of(const struct state *s, int c, int j)
{
	if (c == C_SPLIT)
		return rank % 2 + 2 * j;
	if (c == C_SUB)
		return rank / s->dims2[1] * s->dims2[1] + j;
	return j;
}

static void make(struct state *s)
{
	int half[64], n = size / 2 + 1, dims[2] = { 0, 0 }, periods[2] = { 1, 0 };
	int remain[2] = { 0, 1 }, bl[3] = { 1, 2, 3 }, disp[3] = { 0, 3, 7 }, sbl[3] = { 1, 1, 1 };
	MPI_Aint sdisp[3] = { offsetof(struct rec, i), offsetof(struct rec, d),
			      offsetof(struct rec, c) };
	MPI_Datatype stypes[3] = { MPI_INT, MPI_DOUBLE, MPI_CHAR }, pair, idx, raw;

	for (int c = 0; c < NCOMMS; c++)
		s->comm[c] = MPI_COMM_NULL;
	MPI_Comm_dup(MPI_COMM_WORLD, &s->comm[C_DUP]);
	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &s->comm[C_SPLIT]);
	MPI_Comm_group(MPI_COMM_WORLD, &s->world_grp);
	for (int i = 0; i < n; i++)
		half[i] = i;
	MPI_Group_incl(s->world_grp, n, half, &s->half_grp);
	MPI_Comm_create(MPI_COMM_WORLD, s->half_grp, &s->comm[C_CREATE]);
	MPI_Comm_group(s->comm[C_SPLIT], &s->split_grp);
	MPI_Dims_create(size, 1, dims);
	s->dims1 = dims[0];
	MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &s->comm[C_CART1]);
	MPI_Cart_shift(s->comm[C_CART1], 0, 1, &s->left, &s->right);
	require(s->dims1 == size && s->left == (rank + size - 1) % size &&
		s->right == (rank + 1) % size, "1-D Cartesian: dims %d shift %d %d", s->dims1,
		s->left, s->right);
	if (size >= 4) {
		dims[0] = dims[1] = 0;
		MPI_Dims_create(size, 2, dims);
		require(dims[0] * dims[1] == size && dims[0] >= dims[1] && dims[1] >= 1,
			"MPI_Dims_create(%d, 2) gave %d x %d", size, dims[0], dims[1]);
		s->dims2[0] = dims[0];
		s->dims2[1] = dims[1];
		MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &s->comm[C_CART2]);
		MPI_Cart_coords(s->comm[C_CART2], rank, 2, s->coords2);
		MPI_Cart_shift(s->comm[C_CART2], 1, 1, &s->down, &s->up);
		MPI_Cart_sub(s->comm[C_CART2], remain, &s->comm[C_SUB]);
	}
	for (int c = 0; c < NCOMMS; c++) {
		s->csize[c] = s->crank[c] = -1;
		if (s->comm[c] != MPI_COMM_NULL) {
			MPI_Comm_size(s->comm[c], &s->csize[c]);
			MPI_Comm_rank(s->comm[c], &s->crank[c]);
		}
		require(want_size(s, c) ? s->csize[c] == want_size(s, c) &&
			s->crank[c] == want_rank(s, c) : s->comm[c] == MPI_COMM_NULL,
			"communicator %s: size %d rank %d", cname[c], s->csize[c], s->crank[c]);
	}
	MPI_Group_size(s->world_grp, &s->gsize[0]);
	MPI_Group_rank(s->world_grp, &s->grank[0]);
	MPI_Group_size(s->half_grp, &s->gsize[1]);
	MPI_Group_rank(s->half_grp, &s->grank[1]);
	MPI_Group_size(s->split_grp, &s->gsize[2]);
	MPI_Group_rank(s->split_grp, &s->grank[2]);

	MPI_Type_contiguous(3, MPI_INT, &s->type[T_CONTIG]);
	MPI_Type_vector(4, 2, 3, MPI_INT, &s->type[T_VECTOR]);
	MPI_Type_contiguous(2, MPI_DOUBLE, &pair);
	MPI_Type_create_hvector(3, 1, 40, pair, &s->type[T_HVECTOR]);
	MPI_Type_free(&pair);
	MPI_Type_indexed(3, bl, disp, MPI_INT, &idx);
	MPI_Type_commit(&idx);
	MPI_Type_dup(idx, &s->type[T_INDEXED]);
	MPI_Type_free(&idx);
	MPI_Type_create_struct(3, sbl, sdisp, stypes, &raw);
	MPI_Type_create_resized(raw, 0, sizeof(struct rec), &s->type[T_STRUCT]);
	MPI_Type_free(&raw);
	require(pair == MPI_DATATYPE_NULL && idx == MPI_DATATYPE_NULL && raw == MPI_DATATYPE_NULL,
		"MPI_Type_free did not set MPI_DATATYPE_NULL");
	for (int t = 0; t < NTYPES; t++) {
		if (t != T_INDEXED)
			MPI_Type_commit(&s->type[t]);
		MPI_Type_size(s->type[t], &s->tsize[t]);
		MPI_Type_get_extent(s->type[t], &s->tlb[t], &s->textent[t]);
		require(s->tsize[t] == lay[t].size && s->tlb[t] == 0 && s->textent[t] == lay[t].extent,
			"datatype %s: size %d lb %ld extent %ld", lay[t].name, s->tsize[t],
			(long)s->tlb[t], (long)s->textent[t]);
	}
	MPI_Op_create(absmax, 1, &s->op);
}

static void collectives(struct state *s, int it)
{
	int v[NRED], out[NRED], want[NRED], bc[NBC], ok = 1;
	int color = rank % 2;

	for (int i = 0; i < NRED; i++) {
		v[i] = red_value(rank, it, i);
		want[i] = 0;
		for (int r = 0; r < size; r++)
			if (abs(red_value(r, it, i)) > want[i])
				want[i] = abs(red_value(r, it, i));
	}
	MPI_Allreduce(v, out, NRED, MPI_INT, s->op, s->comm[C_DUP]);
	check(!memcmp(out, want, sizeof(want)) && !op_calls_bad,
	      "iteration %d: MPI_Allreduce with the user operation: %d %d ..., expected %d %d ...%s",
	      it, out[0], out[1], want[0], want[1], op_calls_bad ? " (not called on MPI_INT)" : "");
	for (int i = 0; i < NBC; i++)
		bc[i] = s->crank[C_SPLIT] == 0 ? pay(color, 0, it, 91, i) : 0;
	MPI_Bcast(bc, NBC, MPI_INT, 0, s->comm[C_SPLIT]);
	for (int i = 0; i < NBC; i++)
		ok &= bc[i] == pay(color, 0, it, 91, i);
	check(ok, "iteration %d: MPI_Bcast on the split communicator", it);
}

static void exchange(struct state *s, int it, unsigned char **sbuf, unsigned char **rbuf,
		     unsigned char *want)
{
	MPI_Request req[2 * NTYPES];
	MPI_Status st[2 * NTYPES];

	for (int t = 0; t < NTYPES; t++) {
		memset(rbuf[t], 0xa5, lay[t].count * lay[t].extent + TAIL);
		MPI_Irecv(rbuf[t], lay[t].count, s->type[t], s->left, 60 + t, s->comm[C_CART1],
			  &req[2 * t]);
	}
	for (int t = 0; t < NTYPES; t++) {
		layout_fill(sbuf[t], t, rank, s->right, it, 0x5a);
		MPI_Isend(sbuf[t], lay[t].count, s->type[t], s->right, 60 + t, s->comm[C_CART1],
			  &req[2 * t + 1]);
	}
	MPI_Waitall(2 * NTYPES, req, st);
	for (int t = 0; t < NTYPES; t++) {
		int n = -1;
		long bytes = lay[t].count * lay[t].extent + TAIL, bad;

		MPI_Get_count(&st[2 * t], s->type[t], &n);
		check(n == lay[t].count && st[2 * t].MPI_SOURCE == s->left &&
		      st[2 * t].MPI_TAG == 60 + t,
		      "iteration %d: %s from %d: count %d source %d tag %d", it, lay[t].name, s->left,
		      n, st[2 * t].MPI_SOURCE, st[2 * t].MPI_TAG);
		layout_fill(want, t, s->left, rank, it, 0xa5);
		for (bad = 0; bad < bytes && rbuf[t][bad] == want[bad]; bad++)
			;
		check(bad == bytes, "iteration %d: %s from %d: byte %ld of %ld is 0x%02x, expected "
		      "0x%02x", it, lay[t].name, s->left, bad, bytes, bad < bytes ? rbuf[t][bad] : 0,
		      bad < bytes ? want[bad] : 0);
	}
}

static void rings(struct state *s, int it)
{
	for (int c = 0; c < NCOMMS; c++) {
		int sz, rk, out[NSR], in[NSR], to, from, ok = 1;
		MPI_Status st;

		if (s->comm[c] == MPI_COMM_NULL)
			continue;
		MPI_Comm_size(s->comm[c], &sz);
		MPI_Comm_rank(s->comm[c], &rk);
		check(sz == s->csize[c] && rk == s->crank[c] && sz == want_size(s, c) &&
		      rk == want_rank(s, c), "iteration %d: communicator %s: size %d rank %d, "
		      "recorded %d %d", it, cname[c], sz, rk, s->csize[c], s->crank[c]);
		to = (rk + 1) % sz;
		from = (rk + sz - 1) % sz;
		for (int i = 0; i < NSR; i++) {
			out[i] = pay(rank, world_of(s, c, to), it, 80 + c, i);
			in[i] = 0;
		}
		MPI_Sendrecv(out, NSR, MPI_INT, to, 80 + c, in, NSR, MPI_INT, from, 80 + c, s->comm[c],
			     &st);
		for (int i = 0; i < NSR; i++)
			ok &= in[i] == pay(world_of(s, c, from), rank, it, 80 + c, i);
		check(ok && st.MPI_SOURCE == from && st.MPI_TAG == 80 + c,
		      "iteration %d: MPI_Sendrecv on %s from its rank %d: source %d tag %d data %s",
		      it, cname[c], from, st.MPI_SOURCE, st.MPI_TAG, ok ? "right" : "wrong");
	}
}

static void attributes(struct state *s, int it)
{
	int gs, gr, n = size / 2 + 1, dims[2], periods[2], coords[2], c2[2], a, b, cr;
	MPI_Aint lb, extent;

	for (int t = 0; t < NTYPES; t++) {
		MPI_Type_size(s->type[t], &gs);
		MPI_Type_get_extent(s->type[t], &lb, &extent);
		check(gs == s->tsize[t] && lb == s->tlb[t] && extent == s->textent[t] &&
		      gs == lay[t].size && lb == 0 && extent == lay[t].extent,
		      "iteration %d: datatype %s: size %d lb %ld extent %ld", it, lay[t].name, gs,
		      (long)lb, (long)extent);
	}
	MPI_Group_size(s->world_grp, &gs);
	MPI_Group_rank(s->world_grp, &gr);
	check(gs == s->gsize[0] && gr == s->grank[0] && gs == size && gr == rank,
	      "iteration %d: world group: size %d rank %d", it, gs, gr);
	MPI_Group_size(s->half_grp, &gs);
	MPI_Group_rank(s->half_grp, &gr);
	check(gs == s->gsize[1] && gr == s->grank[1] && gs == n &&
	      gr == (rank < n ? rank : MPI_UNDEFINED),
	      "iteration %d: half group: size %d rank %d", it, gs, gr);
	MPI_Group_size(s->split_grp, &gs);
	MPI_Group_rank(s->split_grp, &gr);
	check(gs == s->gsize[2] && gr == s->grank[2] && gs == want_size(s, C_SPLIT) &&
	      gr == rank / 2, "iteration %d: split group: size %d rank %d", it, gs, gr);
	MPI_Comm_compare(s->comm[C_DUP], MPI_COMM_WORLD, &a);
	MPI_Topo_test(s->comm[C_DUP], &b);
	MPI_Topo_test(s->comm[C_CART1], &gr);
	check(a == MPI_CONGRUENT && b == MPI_UNDEFINED && gr == MPI_CART,
	      "iteration %d: MPI_Comm_compare(dup, world) %d, MPI_Topo_test dup %d cart1 %d", it,
	      a, b, gr);

	MPI_Cart_get(s->comm[C_CART1], 1, dims, periods, coords);
	MPI_Cart_coords(s->comm[C_CART1], rank, 1, c2);
	MPI_Cart_shift(s->comm[C_CART1], 0, 1, &a, &b);
	MPI_Cart_rank(s->comm[C_CART1], coords, &cr);
	check(dims[0] == s->dims1 && dims[0] == size && periods[0] == 1 && coords[0] == rank &&
	      c2[0] == rank && a == s->left && b == s->right && cr == rank,
	      "iteration %d: cart1: dims %d periods %d coords %d/%d shift %d %d rank %d", it,
	      dims[0], periods[0], coords[0], c2[0], a, b, cr);
	if (size < 4)
		return;
	MPI_Cart_get(s->comm[C_CART2], 2, dims, periods, coords);
	MPI_Cart_coords(s->comm[C_CART2], rank, 2, c2);
	MPI_Cart_shift(s->comm[C_CART2], 1, 1, &a, &b);
	MPI_Cart_rank(s->comm[C_CART2], coords, &cr);
	check(cr == rank && dims[0] == s->dims2[0] && dims[1] == s->dims2[1] && periods[0] == 1 &&
	      periods[1] == 0 && coords[0] == s->coords2[0] && coords[1] == s->coords2[1] &&
	      coords[0] == rank / dims[1] && coords[1] == rank % dims[1] && c2[0] == coords[0] &&
	      c2[1] == coords[1] && a == s->down && b == s->up &&
	      a == (coords[1] > 0 ? rank - 1 : MPI_PROC_NULL) &&
	      b == (coords[1] < dims[1] - 1 ? rank + 1 : MPI_PROC_NULL),
	      "iteration %d: cart2: dims %d %d periods %d %d coords %d %d shift %d %d", it, dims[0],
	      dims[1], periods[0], periods[1], coords[0], coords[1], a, b);
	MPI_Cart_get(s->comm[C_SUB], 1, dims, periods, coords);
	check(dims[0] == s->dims2[1] && periods[0] == 0 && coords[0] == rank % s->dims2[1],
	      "iteration %d: cart_sub: dims %d periods %d coords %d", it, dims[0], periods[0],
	      coords[0]);
}

static void release(struct state *s)
{
	for (int t = 0; t < NTYPES; t++)
		MPI_Type_free(&s->type[t]);
	for (int c = NCOMMS - 1; c >= 0; c--)
		if (s->comm[c] != MPI_COMM_NULL)
			MPI_Comm_free(&s->comm[c]);
	MPI_Group_free(&s->split_grp);
	MPI_Group_free(&s->half_grp);
	MPI_Group_free(&s->world_grp);
	MPI_Op_free(&s->op);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20;
	long ms = argc > 2 ? atol(argv[2]) : 100, total = 0, expect = 0;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	unsigned char *sbuf[NTYPES], *rbuf[NTYPES], *want = malloc(4096);
	struct state s;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	require(size >= 2 && size <= 64, "objects needs 2 to 64 ranks, not %d", size);
	for (int t = 0; t < NTYPES; t++) {
		sbuf[t] = malloc(lay[t].count * lay[t].extent + TAIL);
		rbuf[t] = malloc(lay[t].count * lay[t].extent + TAIL);
	}
	make(&s);
	for (int it = 0; it < iters; it++) {
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		collectives(&s, it);
		exchange(&s, it, sbuf, rbuf, want);
		rings(&s, it);
		attributes(&s, it);
		nanosleep(&ts, NULL);
	}
	printf("rank %d made %ld checks\n", rank, checks);
	fflush(stdout);
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	release(&s);
	/* per rank and iteration: 2 collectives, 2 per datatype (status, bytes),
	 * 1 per datatype's size and extent, 2 per communicator (size and rank,
	 * ring), 3 on groups, 1 on MPI_Comm_compare and MPI_Topo_test, 1 on the
	 * 1-D Cartesian communicator and 2 on the 2-D ones if any */
	for (int r = 0; r < size; r++) {
		int ncomms = 3 + (r <= size / 2) + 2 * (size >= 4);

		expect += iters * (2 + 3 * NTYPES + 2 * ncomms + 3 + 1 + 1 + 2 * (size >= 4));
	}
	if (rank == 0) {
		printf("%s ranks=%d iterations=%d checks=%ld\n", total == expect ? "PASS" : "FAIL",
		       size, iters, total);
		fflush(stdout);
	}
	MPI_Finalize();
	for (int t = 0; t < NTYPES; t++) {
		free(sbuf[t]);
		free(rbuf[t]);
	}
	free(want);
	return total == expect || rank != 0 ? 0 : 1;
}
