/* local.c - the calls that need no other rank, and the datatypes and
 * groups they make, across checkpoints (tests/split/test_local.py).
 *
 *   local ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2, at most 64. Before the loop each rank makes
 * an MPI_Type_create_indexed_block type (blocks of 2 ints at 0, 3, 7) and an
 * MPI_Type_create_hindexed_block one (1 double, one int) whose displacements
 * come from MPI_Get_address in a struct, commits both, takes the group of
 * MPI_COMM_WORLD and creates a non-commutative user operation. Every
 * iteration rank 0 prints "rank 0 iteration I", then every rank checks
 *  1. the indexed-block type sent to the right (MPI_Sendrecv): the blocks
 *     arrive, the holes keep their bytes;
 *  2. the hindexed-block type likewise, into another struct;
 *  3. MPI_Pack of an int and one indexed-block instance, sent as
 *     MPI_PACKED to the right, MPI_Unpack of what came from the left
 *     (MPI_Pack_size bounds what MPI_Pack used);
 *  4. groups made and freed: the union of the even and the odd ranks'
 *     groups is MPI_SIMILAR to MPI_COMM_WORLD's (MPI_IDENT with 2 ranks),
 *     its intersection with the even ones is the even ones (MPI_IDENT),
 *     the difference of WORLD and the even ones has the odd ones' size;
 *  5. MPI_Group_translate_ranks of the odd group's ranks into WORLD's
 *     group: 1, 3, 5, ...;
 *  6. MPI_Op_commutative: 0 for the user operation, 1 for MPI_SUM;
 *  7. MPI_Reduce_local with the user operation (inoutbuf = in - inoutbuf,
 *     which order matters to);
 *  8. MPI_Type_get_extent_x and MPI_Type_get_true_extent_x of both types
 *     are what they were before the loop;
 *  9. an MPI_Info made before the loop with two keys: "iteration" holds
 *     the previous iteration's number (MPI_Info_get_nkeys, _get_nthkey,
 *     _get_valuelen, _get), then is set to this one's; "note" is still there;
 * 10. MPI_Info_dup of it has the same pairs; MPI_Info_delete of "note" in
 *     the dup leaves the original alone; the dup is freed;
 * then sleeps SLEEP_MS. At the end rank 0 prints
 * "PASS ranks=N iterations=I checks=C" with C = 10 * N * I; a wrong value
 * prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

#define NI 10           /* ints an indexed-block instance spans */
#define HOLE (-7)

struct pair {
	double d;
	char pad[12];
	int i;
};

static int rank, size, it = -1;
static long checks;

static void check(int ok, const char *what)
{
	if (!ok)
		fail(rank, it, what);
	checks++;
}

/* inoutbuf[k] = in[k] - inoutbuf[k]: MPI must not swap the operands */
static void minus(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	for (int k = 0; k < *len; k++)
		((int *)inout)[k] = ((int *)in)[k] - ((int *)inout)[k];
}

static int val(int r, int i, int k)
{
	return r * 100003 + i * 1009 + k;
}

static int in_block(int k)
{
	return k == 0 || k == 1 || k == 3 || k == 4 || k == 7 || k == 8;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 10;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 50;
	struct timespec nap = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000 };
	int disp[3] = { 0, 3, 7 }, left, right;
	MPI_Datatype ib, hb;
	MPI_Aint base, addr[2], lb, ext;
	MPI_Count ib_ext, ib_true, hb_ext, hb_true, lbx, x;
	MPI_Group world, even, odd;
	MPI_Op op;
	MPI_Info info;
	struct pair probe;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2 || size > 64)
		fail(rank, it, "2 to 64 ranks");
	left = (rank + size - 1) % size;
	right = (rank + 1) % size;

	MPI_Type_create_indexed_block(3, 2, disp, MPI_INT, &ib);
	MPI_Type_commit(&ib);
	MPI_Get_address(&probe, &base);
	MPI_Get_address(&probe.d, &addr[0]);
	MPI_Get_address(&probe.i, &addr[1]);
	if (addr[0] - base != offsetof(struct pair, d) || addr[1] - base != offsetof(struct pair, i))
		fail(rank, it, "MPI_Get_address");
	addr[0] -= base;
	addr[1] -= base;
	/* 4 bytes (as MPI_BYTE) at each: the first half of d, all of i */
	MPI_Type_create_hindexed_block(2, 4, addr, MPI_BYTE, &hb);
	MPI_Type_commit(&hb);
	MPI_Type_get_extent_x(ib, &lbx, &ib_ext);
	MPI_Type_get_true_extent_x(ib, &lbx, &ib_true);
	MPI_Type_get_extent_x(hb, &lbx, &hb_ext);
	MPI_Type_get_true_extent_x(hb, &lbx, &hb_true);
	MPI_Type_get_extent(ib, &lb, &ext);
	if (ib_ext != 9 * (MPI_Count)sizeof(int) || ib_true != ib_ext || ext != ib_ext ||
	    hb_true != (MPI_Count)offsetof(struct pair, i) + 4)
		fail(rank, it, "extents before the loop");
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	MPI_Op_create(minus, 0, &op);
	MPI_Info_create(&info);
	MPI_Info_set(info, "note", "made before the loop");
	MPI_Info_set(info, "iteration", "-1");

	for (it = 0; it < iters; it++) {
		int a[NI], b[NI], packed[64], pos, need, one, got, r[32], w[32], nodd = size / 2;
		int ranks[32], cmp, sz;
		struct pair ps, pr;
		MPI_Group u, in, diff;

		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		/* 1. indexed blocks */
		for (int k = 0; k < NI; k++) {
			a[k] = val(rank, it, k);
			b[k] = HOLE;
		}
		MPI_Sendrecv(a, 1, ib, right, 1, b, 1, ib, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		one = 1;
		for (int k = 0; k < NI; k++)
			one = one && b[k] == (in_block(k) ? val(left, it, k) : HOLE);
		check(one, "indexed block");
		/* 2. hindexed blocks at MPI_Get_address offsets */
		memset(&ps, 0x5a, sizeof(ps));
		memset(&pr, 0x33, sizeof(pr));
		ps.d = it + rank * 0.5;
		ps.i = val(rank, it, 11);
		MPI_Sendrecv(&ps, 1, hb, right, 2, &pr, 1, hb, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		{
			/* the first 4 bytes of d and of i came; the rest kept 0x33 */
			struct pair want;

			memset(&want, 0x33, sizeof(want));
			ps.d = it + left * 0.5;
			ps.i = val(left, it, 11);
			memcpy(&want.d, &ps.d, 4);
			memcpy(&want.i, &ps.i, 4);
			check(!memcmp(&want, &pr, sizeof(want)), "hindexed block");
		}
		/* 3. pack, send packed, unpack */
		pos = 0;
		one = val(rank, it, 12);
		MPI_Pack(&one, 1, MPI_INT, packed, sizeof(packed), &pos, MPI_COMM_WORLD);
		MPI_Pack(a, 1, ib, packed, sizeof(packed), &pos, MPI_COMM_WORLD);
		MPI_Pack_size(1, ib, MPI_COMM_WORLD, &need);
		MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &sz);
		if (pos > need + sz)
			fail(rank, it, "MPI_Pack used more than MPI_Pack_size said");
		{
			int recv[64];

			MPI_Sendrecv(packed, pos, MPI_PACKED, right, 3, recv, sizeof(recv), MPI_PACKED,
				     left, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int k = 0; k < NI; k++)
				b[k] = HOLE;
			pos = 0;
			got = -1;
			MPI_Unpack(recv, sizeof(recv), &pos, &got, 1, MPI_INT, MPI_COMM_WORLD);
			MPI_Unpack(recv, sizeof(recv), &pos, b, 1, ib, MPI_COMM_WORLD);
			one = got == val(left, it, 12);
			for (int k = 0; k < NI; k++)
				one = one && b[k] == (in_block(k) ? val(left, it, k) : HOLE);
			check(one, "MPI_Pack and MPI_Unpack");
		}
		/* 4. groups */
		for (int k = 0; k < (size + 1) / 2; k++)
			r[k] = 2 * k;
		MPI_Group_incl(world, (size + 1) / 2, r, &even);
		for (int k = 0; k < nodd; k++)
			r[k] = 2 * k + 1;
		MPI_Group_incl(world, nodd, r, &odd);
		MPI_Group_union(even, odd, &u);
		MPI_Group_compare(u, world, &cmp);
		one = cmp == (size == 2 ? MPI_IDENT : MPI_SIMILAR);
		MPI_Group_intersection(even, world, &in);
		MPI_Group_compare(in, even, &cmp);
		one = one && cmp == MPI_IDENT;
		MPI_Group_difference(world, even, &diff);
		MPI_Group_size(diff, &sz);
		one = one && sz == nodd;
		MPI_Group_free(&u);
		MPI_Group_free(&in);
		MPI_Group_free(&diff);
		check(one && u == MPI_GROUP_NULL, "group union, intersection, difference");
		/* 5. ranks translated */
		for (int k = 0; k < nodd; k++) {
			ranks[k] = k;
			w[k] = -1;
		}
		MPI_Group_translate_ranks(odd, nodd, ranks, world, w);
		one = 1;
		for (int k = 0; k < nodd; k++)
			one = one && w[k] == 2 * k + 1;
		check(one, "MPI_Group_translate_ranks");
		MPI_Group_free(&even);
		MPI_Group_free(&odd);
		/* 6. commutativity */
		MPI_Op_commutative(op, &one);
		MPI_Op_commutative(MPI_SUM, &got);
		check(one == 0 && got == 1, "MPI_Op_commutative");
		/* 7. a local reduction with the user operation */
		for (int k = 0; k < 4; k++) {
			a[k] = val(rank, it, k);
			b[k] = k * 7;
		}
		MPI_Reduce_local(a, b, 4, MPI_INT, op);
		one = 1;
		for (int k = 0; k < 4; k++)
			one = one && b[k] == val(rank, it, k) - k * 7;
		check(one, "MPI_Reduce_local");
		/* 8. extents */
		MPI_Type_get_extent_x(ib, &lbx, &x);
		one = lbx == 0 && x == ib_ext;
		MPI_Type_get_true_extent_x(ib, &lbx, &x);
		one = one && x == ib_true;
		MPI_Type_get_extent_x(hb, &lbx, &x);
		one = one && x == hb_ext;
		MPI_Type_get_true_extent_x(hb, &lbx, &x);
		check(one && x == hb_true, "extents");
		/* 9. the info object, its pairs of the last iteration */
		{
			char key[MPI_MAX_INFO_KEY + 1], v[64], want[32];
			int nkeys = 0, len = 0, seen = 0;
			MPI_Info dup;

			MPI_Info_get_nkeys(info, &nkeys);
			one = nkeys == 2;
			for (int k = 0; k < nkeys; k++) {
				MPI_Info_get_nthkey(info, k, key);
				seen |= !strcmp(key, "note") ? 1 : !strcmp(key, "iteration") ? 2 : 4;
			}
			snprintf(want, sizeof(want), "%d", it - 1);
			MPI_Info_get_valuelen(info, "iteration", &len, &got);
			one = one && seen == 3 && got && len == (int)strlen(want);
			MPI_Info_get(info, "iteration", sizeof(v) - 1, v, &got);
			one = one && got && !strcmp(v, want);
			MPI_Info_get(info, "note", sizeof(v) - 1, v, &got);
			check(one && got && !strcmp(v, "made before the loop"), "the info's pairs");
			snprintf(want, sizeof(want), "%d", it);
			MPI_Info_set(info, "iteration", want);
			/* 10. a dup, changed and freed */
			MPI_Info_dup(info, &dup);
			MPI_Info_get(dup, "iteration", sizeof(v) - 1, v, &got);
			one = got && !strcmp(v, want);
			MPI_Info_delete(dup, "note");
			MPI_Info_get_nkeys(dup, &nkeys);
			one = one && nkeys == 1;
			MPI_Info_get_nkeys(info, &nkeys);
			MPI_Info_free(&dup);
			check(one && nkeys == 2 && dup == MPI_INFO_NULL, "MPI_Info_dup");
		}

		nanosleep(&nap, NULL);
	}
	{
		long total = 0;

		MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			if (total != 10L * size * iters)
				fail(rank, it, "checks counted");
			printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
		}
	}
	MPI_Op_free(&op);
	MPI_Info_free(&info);
	MPI_Group_free(&world);
	MPI_Type_free(&ib);
	MPI_Type_free(&hb);
	MPI_Finalize();
	return 0;
}
