/* topo.c - graph and distributed graph topologies, the neighbourhood
 * collectives and MPI_Alltoallw, on objects made before the loop and used
 * in it (tests/split).
 *
 *   topo ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2 (r: this rank, n: the size, L and R: the ranks
 * to the left and right on a ring). No two edges join the same ordered
 * pair of ranks (MPI leaves the order of their messages open). Before the
 * loop each rank makes:
 *  - adj: MPI_Dist_graph_create_adjacent, weighted, in-neighbours (R, r)
 *    with weights (3, 4), out-neighbours (L, r) with weights (5, 6);
 *  - dist: MPI_Dist_graph_create, unweighted, reorder allowed: each rank
 *    gives the edge r -> R (so in-neighbour L, out-neighbour R);
 *  - graph: MPI_Graph_create of the ring (each node's neighbours L, R; R
 *    alone on 2 ranks);
 *  - cart: a 1-D Cartesian communicator, not periodic (its ends have
 *    MPI_PROC_NULL for a neighbour: their buffers keep the sentinel);
 *  - vec: a vector of 2 blocks of one int, stride 3, freed by the program
 *    only at the end.
 * Each iteration I prints "rank R iteration I", then, with v(s) = 1000 * s
 * + I (s: a sender's rank in MPI_COMM_WORLD):
 *  - checks every query of each topology (MPI_Topo_test, _neighbors_count,
 *    _neighbors, MPI_Graph_get, MPI_Graphdims_get, MPI_Cart_map,
 *    MPI_Graph_map) against what it was made with;
 *  - MPI_Neighbor_allgather on adj, MPI_Neighbor_alltoall on graph,
 *    MPI_Ineighbor_alltoallv on dist, MPI_Neighbor_allgatherv and
 *    MPI_Ineighbor_allgather on cart, MPI_Neighbor_alltoallw on cart with
 *    vec to the left and MPI_INT to the right, MPI_Ineighbor_alltoallw on
 *    adj, MPI_Alltoallw and MPI_Ialltoallw on MPI_COMM_WORLD (vec to even
 *    ranks, MPI_INT to odd ones), checking every element received and that
 *    the holes of vec kept their sentinel; MPI_Alltoallw in place with its
 *    send arrays NULL.
 * Then it starts MPI_Ineighbor_alltoallw on adj and MPI_Ineighbor_allgather
 * on dist and sleeps SLEEP_MS with both in flight (the checkpoint comes
 * there: the drain completes them); the next iteration waits for them and
 * checks what they received.
 *
 * At the end rank 0 sums the checks made (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I checks=K" if K is the count expected from N
 * and I alone (CHECKS per rank and iteration). Any wrong value prints a
 * FAIL line and aborts the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

#define SENT (-777777)
#define CHECKS 18

static int rank, size, it;
static int nnb, nb[2];          /* graph's neighbours of this rank */
static long checks;

/* one value (check() counts) */
static void eq(const char *what, long got, long want)
{
	fail_unless(rank, it, what, got, want);
}

static int v(int s)
{
	return 1000 * s + it;
}

static void check(const char *what, const int *got, const int *want, int k)
{
	for (int i = 0; i < k; i++)
		eq(what, got[i], want[i]);
	checks++;
}

/* a rank of c in MPI_COMM_WORLD */
static int world_of(MPI_Comm c, int r)
{
	MPI_Group gc, gw;
	int w;

	MPI_Comm_group(c, &gc);
	MPI_Comm_group(MPI_COMM_WORLD, &gw);
	MPI_Group_translate_ranks(gc, 1, &r, gw, &w);
	MPI_Group_free(&gc);
	MPI_Group_free(&gw);
	return w;
}

/* where rank me is in p's list of graph neighbours */
static int index_in(int p, int me)
{
	return nnb == 1 ? 0 : me == (p + 1) % size ? 1 : 0;
}

static void queries(MPI_Comm adj, MPI_Comm dist, MPI_Comm graph, MPI_Comm cart, int L, int R)
{
	int t, in, out, w, src[4], sw[4], dst[4], dw[4], nn, ne, idx[64], edges[128], k, nbs[4];

	MPI_Topo_test(adj, &t);
	eq("Topo_test adj", t, MPI_DIST_GRAPH);
	MPI_Topo_test(graph, &t);
	eq("Topo_test graph", t, MPI_GRAPH);
	MPI_Dist_graph_neighbors_count(adj, &in, &out, &w);
	eq("adj in", in, 2);
	eq("adj out", out, 2);
	eq("adj weighted", w, 1);
	MPI_Dist_graph_neighbors(adj, 2, src, sw, 2, dst, dw);
	check("adj neighbours", (int[]){ src[0], src[1], sw[0], sw[1], dst[0], dst[1], dw[0], dw[1] },
	      (int[]){ R, rank, 3, 4, L, rank, 5, 6 }, 8);
	MPI_Dist_graph_neighbors_count(dist, &in, &out, &w);
	check("dist counts", (int[]){ in, out, w }, (int[]){ 1, 1, 0 }, 3);
	MPI_Dist_graph_neighbors(dist, 1, src, MPI_UNWEIGHTED, 1, dst, MPI_UNWEIGHTED);
	/* dist may be reordered: its neighbours are L and R in world ranks */
	check("dist neighbours", (int[]){ world_of(dist, src[0]), world_of(dist, dst[0]) },
	      (int[]){ L, R }, 2);
	MPI_Graphdims_get(graph, &nn, &ne);
	check("graph dims", (int[]){ nn, ne }, (int[]){ size, nnb * size }, 2);
	MPI_Graph_get(graph, 64, 128, idx, edges);
	for (int i = 0; i < size; i++) {
		eq("graph index", idx[i], nnb * (i + 1));
		eq("graph edge", edges[nnb * i], nnb == 1 ? (i + 1) % size : (i + size - 1) % size);
		if (nnb == 2)
			eq("graph edge", edges[2 * i + 1], (i + 1) % size);
	}
	checks++;
	MPI_Graph_neighbors_count(graph, rank, &k);
	nbs[0] = nbs[1] = SENT;
	MPI_Graph_neighbors(graph, rank, 4, nbs);
	check("graph neighbours", (int[]){ k, nbs[0], nbs[1] },
	      (int[]){ nnb, nb[0], nnb == 2 ? nb[1] : SENT }, 3);
	MPI_Graph_map(MPI_COMM_WORLD, size, idx, edges, &k);
	eq("Graph_map", k == MPI_UNDEFINED ? -1 : k >= 0 && k < size, 1);
	MPI_Cart_map(MPI_COMM_WORLD, 1, (int[]){ size }, (int[]){ 1 }, &k);
	eq("Cart_map", k >= 0 && k < size, 1);
	MPI_Topo_test(cart, &t);
	eq("Topo_test cart", t, MPI_CART);
	checks++;
}

/* what a Cartesian neighbour sent, or the sentinel at an end */
static int cv(int p, int add)
{
	return p == MPI_PROC_NULL ? SENT : v(p) + add;
}

static void neighbours(MPI_Comm adj, MPI_Comm dist, MPI_Comm graph, MPI_Comm cart, MPI_Datatype vec,
		       int L, int R)
{
	int s = v(rank), r2[2], r6[6], src, dst, wk[2], cl, cr;
	MPI_Request q;
	MPI_Aint asd[2], ard[2];
	MPI_Datatype st[2], rt[2];

	/* adj: in-neighbours (R, r) */
	MPI_Neighbor_allgather(&s, 1, MPI_INT, r2, 1, MPI_INT, adj);
	check("Neighbor_allgather adj", r2, (int[]){ v(R), v(rank) }, 2);

	/* graph: to the j-th neighbour 10 * v + j */
	MPI_Neighbor_alltoall((int[]){ 10 * s, 10 * s + 1 }, 1, MPI_INT, r2, 1, MPI_INT, graph);
	check("Neighbor_alltoall graph", r2,
	      (int[]){ 10 * v(nb[0]) + index_in(nb[0], rank), 10 * v(nb[1]) + index_in(nb[1], rank) },
	      nnb);

	/* dist: 2 ints to its right, 2 from its left (L in world ranks) */
	MPI_Dist_graph_neighbors(dist, 1, &src, MPI_UNWEIGHTED, 1, &dst, MPI_UNWEIGHTED);
	{
		int sb[3] = { SENT, s, s + 1 }, rb[4] = { SENT, SENT, SENT, SENT };

		MPI_Ineighbor_alltoallv(sb, (int[]){ 2 }, (int[]){ 1 }, MPI_INT, rb, (int[]){ 2 },
					(int[]){ 2 }, MPI_INT, dist, &q);
		MPI_Wait(&q, MPI_STATUS_IGNORE);
		check("Ineighbor_alltoallv dist", rb, (int[]){ SENT, SENT, v(L), v(L) + 1 }, 4);
	}

	/* cart: neighbours (left, right), MPI_PROC_NULL at the ends */
	MPI_Cart_shift(cart, 0, 1, &cl, &cr);
	for (int i = 0; i < 6; i++)
		r6[i] = SENT;
	MPI_Neighbor_allgatherv((int[]){ s, -s }, 2, MPI_INT, r6, (int[]){ 2, 2 }, (int[]){ 0, 3 },
				MPI_INT, cart);
	check("Neighbor_allgatherv cart", r6,
	      (int[]){ cv(cl, 0), cl == MPI_PROC_NULL ? SENT : -v(cl), SENT, cv(cr, 0),
		       cr == MPI_PROC_NULL ? SENT : -v(cr), SENT }, 6);
	r2[0] = r2[1] = SENT;
	MPI_Ineighbor_allgather(&s, 1, MPI_INT, r2, 1, MPI_INT, cart, &q);
	MPI_Wait(&q, MPI_STATUS_IGNORE);
	check("Ineighbor_allgather cart", r2, (int[]){ cv(cl, 0), cv(cr, 0) }, 2);

	/* alltoallw on cart: to the left one vec (ints 0 and 3 of the
	 * buffer), to the right one int (int 6); from the left an int into 0,
	 * from the right a vec into 1 and 4 */
	{
		int sb[7] = { s, -1, -1, s + 7, -1, -1, s + 9 };

		for (int i = 0; i < 6; i++)
			r6[i] = SENT;
		st[0] = vec;
		st[1] = MPI_INT;
		rt[0] = MPI_INT;
		rt[1] = vec;
		asd[0] = 0;
		asd[1] = 6 * sizeof(int);
		ard[0] = 0;
		ard[1] = sizeof(int);
		MPI_Neighbor_alltoallw(sb, (int[]){ 1, 1 }, asd, st, r6, (int[]){ 1, 1 }, ard, rt, cart);
		check("Neighbor_alltoallw cart", r6,
		      (int[]){ cv(cl, 9), cv(cr, 0), SENT, SENT, cv(cr, 7), SENT }, 6);
	}
	/* adj: to out-neighbours (L, r) ints, from in-neighbours (R, r) */
	asd[0] = 0;
	asd[1] = sizeof(int);
	ard[0] = sizeof(int);
	ard[1] = 0;
	st[0] = st[1] = rt[0] = rt[1] = MPI_INT;
	MPI_Ineighbor_alltoallw((int[]){ s, s + 1 }, (int[]){ 1, 1 }, asd, st, wk, (int[]){ 1, 1 }, ard,
				rt, adj, &q);
	MPI_Wait(&q, MPI_STATUS_IGNORE);
	check("Ineighbor_alltoallw adj", wk, (int[]){ v(rank) + 1, v(R) }, 2);
}

/* MPI_Alltoallw and MPI_Ialltoallw on MPI_COMM_WORLD: to an even rank d a
 * vec of (v + d, v - d), to an odd one an int v + d; 3 ints per peer */
static void alltoallw(MPI_Datatype vec, int nonblocking)
{
	int n = size, *sb = malloc(sizeof(int) * 6 * n), *rb = malloc(sizeof(int) * 6 * n);
	int *cnt = malloc(sizeof(int) * n), *dsp = malloc(sizeof(int) * n);
	MPI_Datatype *st = malloc(sizeof(*st) * n), *rt = malloc(sizeof(*rt) * n);
	MPI_Request q;

	for (int d = 0; d < n; d++) {
		sb[6 * d] = v(rank) + d;
		sb[6 * d + 3] = v(rank) - d;
		for (int j = 1; j < 6; j++)
			if (j != 3)
				sb[6 * d + j] = SENT;
		for (int j = 0; j < 6; j++)
			rb[6 * d + j] = SENT;
		cnt[d] = 1;
		dsp[d] = 6 * d * (int)sizeof(int);
		st[d] = d % 2 ? MPI_INT : vec;
		rt[d] = rank % 2 ? MPI_INT : vec;
	}
	if (nonblocking) {
		MPI_Ialltoallw(sb, cnt, dsp, st, rb, cnt, dsp, rt, MPI_COMM_WORLD, &q);
		MPI_Wait(&q, MPI_STATUS_IGNORE);
	} else {
		MPI_Alltoallw(sb, cnt, dsp, st, rb, cnt, dsp, rt, MPI_COMM_WORLD);
	}
	for (int s = 0; s < n; s++) {
		int want[6] = { v(s) + rank, SENT, SENT, rank % 2 ? SENT : v(s) - rank, SENT, SENT };

		for (int j = 0; j < 6; j++)
			eq(nonblocking ? "Ialltoallw" : "Alltoallw", rb[6 * s + j], want[j]);
	}
	checks++;
	free(sb);
	free(rb);
	free(cnt);
	free(dsp);
	free(st);
	free(rt);
}

/* MPI_Alltoallw in place, its send arrays NULL (MPI-3.1 5.8: ignored, as
 * a program may pass them): peer d's int d of the buffer becomes
 * v(d) + rank */
static void alltoallw_in_place(void)
{
	int n = size, *b = malloc(sizeof(int) * n), *cnt = malloc(sizeof(int) * n);
	int *dsp = malloc(sizeof(int) * n);
	MPI_Datatype *t = malloc(sizeof(*t) * n);

	for (int d = 0; d < n; d++) {
		b[d] = v(rank) + d;
		cnt[d] = 1;
		dsp[d] = d * (int)sizeof(int);
		t[d] = MPI_INT;
	}
	MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, b, cnt, dsp, t, MPI_COMM_WORLD);
	for (int s = 0; s < n; s++)
		eq("Alltoallw in place", b[s], v(s) + rank);
	checks++;
	free(b);
	free(cnt);
	free(dsp);
	free(t);
}

/* Non-blocking collectives left in flight across the sleep, where the
 * checkpoint comes (the drain completes them), waited for in the next
 * iteration: MPI_Ineighbor_alltoallw on adj (its arrays must last until
 * it completes: static) and MPI_Ineighbor_allgather on dist. */
static int fl_s[2], fl_r[2], fl_x, fl_g, fl_it, fl_cnt[2] = { 1, 1 };
static MPI_Aint fl_sd[2] = { 0, sizeof(int) }, fl_rd[2] = { 0, sizeof(int) };
static MPI_Datatype fl_t[2];
static MPI_Request fl_q[2];

static void in_flight_start(MPI_Comm adj, MPI_Comm dist)
{
	fl_it = it;
	fl_t[0] = fl_t[1] = MPI_INT;
	fl_s[0] = 10 * v(rank) + 1;
	fl_s[1] = 10 * v(rank) + 2;
	fl_r[0] = fl_r[1] = fl_g = SENT;
	fl_x = 10 * v(rank) + 3;
	MPI_Ineighbor_alltoallw(fl_s, fl_cnt, fl_sd, fl_t, fl_r, fl_cnt, fl_rd, fl_t, adj, &fl_q[0]);
	MPI_Ineighbor_allgather(&fl_x, 1, MPI_INT, &fl_g, 1, MPI_INT, dist, &fl_q[1]);
}

/* from in-neighbours (R, r) of adj what each sent its out-neighbour 0 (L)
 * and 1 (itself); from dist's in-neighbour L its value */
static void in_flight_check(int L, int R)
{
	int w = 1000 * rank + fl_it, wl = 1000 * L + fl_it, wr = 1000 * R + fl_it;

	MPI_Waitall(2, fl_q, MPI_STATUSES_IGNORE);
	check("in flight across the sleep", (int[]){ fl_r[0], fl_r[1], fl_g },
	      (int[]){ 10 * wr + 1, 10 * w + 2, 10 * wl + 3 }, 3);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 5, ms = argc > 2 ? atoi(argv[2]) : 100, L, R;
	struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };
	MPI_Comm adj, dist, graph, cart;
	MPI_Datatype vec;
	long total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	L = (rank + size - 1) % size;
	R = (rank + 1) % size;

	MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, (int[]){ R, rank }, (int[]){ 3, 4 }, 2,
				       (int[]){ L, rank }, (int[]){ 5, 6 }, MPI_INFO_NULL, 0, &adj);
	MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &rank, (int[]){ 1 }, &R, MPI_UNWEIGHTED,
			      MPI_INFO_NULL, 1, &dist);
	nnb = size == 2 ? 1 : 2;
	nb[0] = size == 2 ? R : L;
	nb[1] = R;
	{
		int *idx = malloc(sizeof(int) * size), *edges = malloc(sizeof(int) * 2 * size);

		for (int i = 0; i < size; i++) {
			idx[i] = nnb * (i + 1);
			edges[nnb * i] = nnb == 1 ? (i + 1) % size : (i + size - 1) % size;
			if (nnb == 2)
				edges[2 * i + 1] = (i + 1) % size;
		}
		MPI_Graph_create(MPI_COMM_WORLD, size, idx, edges, 0, &graph);
		free(idx);
		free(edges);
	}
	MPI_Cart_create(MPI_COMM_WORLD, 1, &size, (int[]){ 0 }, 0, &cart);
	MPI_Type_vector(2, 1, 3, MPI_INT, &vec);
	MPI_Type_commit(&vec);

	for (it = 0; it < iters; it++) {
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (it > 0)
			in_flight_check(L, R);
		queries(adj, dist, graph, cart, L, R);
		neighbours(adj, dist, graph, cart, vec, L, R);
		alltoallw(vec, 0);
		alltoallw(vec, 1);
		alltoallw_in_place();
		in_flight_start(adj, dist);
		nanosleep(&nap, NULL);
	}
	in_flight_check(L, R);
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		if (total == (long)size * iters * CHECKS)
			printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
		else
			printf("FAIL checks=%ld, expected %ld\n", total, (long)size * iters * CHECKS);
	}
	MPI_Type_free(&vec);
	MPI_Comm_free(&adj);
	MPI_Comm_free(&dist);
	MPI_Comm_free(&graph);
	MPI_Comm_free(&cart);
	MPI_Finalize();
	return 0;
}
