/* types.c - the datatype and status queries on datatypes made before the
 * loop (tests/split).
 *
 *   types ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2. Before the loop each rank makes: vec, a
 * vector (3 blocks of 2 ints, stride 4); sub, a 4x6 subarray of ints in
 * Fortran order, its 2x3 block at (1, 2); st, a struct of an int, 2
 * doubles and a vec; dar, a darray of 8 ints, cyclic(2) over the ranks;
 * rsz, vec resized to extent 40; hix, an hindexed of vec.
 * Each iteration I prints "rank R iteration I", then checks:
 *  - MPI_Type_get_envelope and MPI_Type_get_contents of each: combiner,
 *    counts, ints (sub's and dar's order and distributions in the
 *    program's ABI: they differ between the MPIs), addresses, and the
 *    datatypes (predefined ones the same handles; vec inside st, rsz and
 *    hix a derived type whose own envelope is vec's, freed after);
 *    MPI_INT's envelope is MPI_COMBINER_NAMED;
 *  - MPI_Get_elements and MPI_Get_elements_x of a receive of 7 ints as
 *    vec from the left neighbour (7 elements, not a whole number of
 *    vectors: MPI_Get_count says MPI_UNDEFINED);
 *  - MPI_Status_set_elements of 3 doubles, then MPI_Get_elements and
 *    MPI_Get_count; MPI_Status_set_cancelled and MPI_Test_cancelled;
 *  - MPI_Type_match_size (integer 4 bytes, real 8, complex 16): the same
 *    handle every time, of that size;
 *  - MPI_Pack_external ("external32") of 3 ints: big-endian bytes, the
 *    size from MPI_Pack_external_size, and back with MPI_Unpack_external.
 * Then it sleeps SLEEP_MS, with no message in flight.
 *
 * At the end rank 0 sums the checks made (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I checks=K". Any wrong value prints a FAIL line
 * and aborts the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

static int rank, size, it;
static long checks;

/* one check, counted */
static void eq(const char *what, long got, long want)
{
	fail_unless(rank, it, what, got, want);
	checks++;
}

/* t's envelope and contents against what it was made with; kids[i] NULL:
 * the i-th type must be that predefined handle (preds[i]); else a derived
 * type whose combiner is kids[i] (then freed) */
static void contents(const char *name, MPI_Datatype t, int comb, int ni, const int *ints, int na,
		     const MPI_Aint *aints, int nd, const MPI_Datatype *preds, const int *kids)
{
	int gni, gna, gnd, gc, I[64];
	MPI_Aint A[16];
	MPI_Datatype T[16];
	char what[96];

	MPI_Type_get_envelope(t, &gni, &gna, &gnd, &gc);
	snprintf(what, sizeof(what), "%s combiner", name);
	eq(what, gc, comb);
	snprintf(what, sizeof(what), "%s counts", name);
	eq(what, gni * 10000 + gna * 100 + gnd, ni * 10000 + na * 100 + nd);
	if (gc == MPI_COMBINER_NAMED)
		return;   /* MPI_Type_get_contents is erroneous on it */
	/* the envelope's counts, as real codes pass them (Open MPI 4.1 reads
	 * past its own record with larger ones) */
	MPI_Type_get_contents(t, gni, gna, gnd, I, A, T);
	for (int i = 0; i < ni; i++) {
		snprintf(what, sizeof(what), "%s int %d", name, i);
		eq(what, I[i], ints[i]);
	}
	for (int i = 0; i < na; i++) {
		snprintf(what, sizeof(what), "%s address %d", name, i);
		eq(what, (long)A[i], (long)aints[i]);
	}
	for (int i = 0; i < nd; i++) {
		snprintf(what, sizeof(what), "%s type %d", name, i);
		if (!kids || !kids[i]) {
			eq(what, T[i] == preds[i], 1);
		} else {
			MPI_Type_get_envelope(T[i], &gni, &gna, &gnd, &gc);
			eq(what, gc, kids[i]);
			MPI_Type_free(&T[i]);
		}
	}
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 5, ms = argc > 2 ? atoi(argv[2]) : 100, L, R;
	struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };
	MPI_Datatype vec, sub, st, dar, rsz, hix, m1, m2, m3;
	int sizes[2] = { 4, 6 }, subs[2] = { 2, 3 }, starts[2] = { 1, 2 };
	int bl[3] = { 1, 2, 1 };
	MPI_Aint disp[3] = { 0, 8, 24 }, hd[2] = { 0, 64 };
	MPI_Datatype tys[3];
	long total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	L = (rank + size - 1) % size;
	R = (rank + 1) % size;
	MPI_Type_vector(3, 2, 4, MPI_INT, &vec);
	MPI_Type_commit(&vec);
	MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &sub);
	tys[0] = MPI_INT;
	tys[1] = MPI_DOUBLE;
	tys[2] = vec;
	MPI_Type_create_struct(3, bl, disp, tys, &st);
	MPI_Type_commit(&st);
	MPI_Type_create_darray(size, rank, 1, (int[]){ 8 }, (int[]){ MPI_DISTRIBUTE_CYCLIC },
			       (int[]){ 2 }, (int[]){ size }, MPI_ORDER_C, MPI_INT, &dar);
	MPI_Type_create_resized(vec, 0, 40, &rsz);
	MPI_Type_create_hindexed(2, (int[]){ 1, 1 }, hd, vec, &hix);
	MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 4, &m1);
	MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &m2);
	MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &m3);

	for (it = 0; it < iters; it++) {
		int buf[16], got[16], n;
		MPI_Count nx;
		MPI_Status s;
		MPI_Datatype m;

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		contents("vec", vec, MPI_COMBINER_VECTOR, 3, (int[]){ 3, 2, 4 }, 0, NULL, 1,
			 (MPI_Datatype[]){ MPI_INT }, NULL);
		contents("sub", sub, MPI_COMBINER_SUBARRAY, 8,
			 (int[]){ 2, 4, 6, 2, 3, 1, 2, MPI_ORDER_FORTRAN }, 0, NULL, 1,
			 (MPI_Datatype[]){ MPI_INT }, NULL);
		contents("st", st, MPI_COMBINER_STRUCT, 4, (int[]){ 3, 1, 2, 1 }, 3, disp, 3,
			 (MPI_Datatype[]){ MPI_INT, MPI_DOUBLE, MPI_DATATYPE_NULL },
			 (int[]){ 0, 0, MPI_COMBINER_VECTOR });
		contents("dar", dar, MPI_COMBINER_DARRAY, 8,
			 (int[]){ size, rank, 1, 8, MPI_DISTRIBUTE_CYCLIC, 2, size, MPI_ORDER_C }, 0,
			 NULL, 1, (MPI_Datatype[]){ MPI_INT }, NULL);
		contents("rsz", rsz, MPI_COMBINER_RESIZED, 0, NULL, 2, (MPI_Aint[]){ 0, 40 }, 1, NULL,
			 (int[]){ MPI_COMBINER_VECTOR });
		contents("hix", hix, MPI_COMBINER_HINDEXED, 3, (int[]){ 2, 1, 1 }, 2, hd, 1, NULL,
			 (int[]){ MPI_COMBINER_VECTOR });
		contents("MPI_INT", MPI_INT, MPI_COMBINER_NAMED, 0, NULL, 0, NULL, 0, NULL, NULL);

		/* 7 ints received as vec: 3 whole blocks of 2 and one int */
		for (int i = 0; i < 16; i++)
			buf[i] = 100 * rank + i + it;
		MPI_Sendrecv(buf, 7, MPI_INT, R, 1, got, 2, vec, L, 1, MPI_COMM_WORLD, &s);
		MPI_Get_elements(&s, vec, &n);
		eq("Get_elements", n, 7);
		MPI_Get_elements_x(&s, vec, &nx);
		eq("Get_elements_x", (long)nx, 7);
		MPI_Get_count(&s, vec, &n);
		eq("Get_count", n, MPI_UNDEFINED);
		eq("received", got[5], 100 * L + 3 + it);
		MPI_Get_elements(&s, MPI_INT, &n);
		eq("Get_elements int", n, 7);

		/* of a basic type only: MPICH 4.0 takes a derived type's count
		 * for a count of the type, not of its elements */
		MPI_Status_set_elements(&s, MPI_DOUBLE, 3);
		MPI_Get_count(&s, MPI_INT, &n);
		eq("set_elements count", n, 6);
		MPI_Get_elements(&s, MPI_DOUBLE, &n);
		eq("set_elements elements", n, 3);
		MPI_Status_set_elements_x(&s, MPI_INT, 5);
		MPI_Get_count(&s, MPI_INT, &n);
		eq("set_elements_x", n, 5);
		MPI_Status_set_cancelled(&s, 1);
		MPI_Test_cancelled(&s, &n);
		eq("cancelled", n, 1);
		MPI_Status_set_cancelled(&s, 0);
		MPI_Test_cancelled(&s, &n);
		eq("not cancelled", n, 0);

		MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 4, &m);
		MPI_Type_size(m, &n);
		eq("match_size integer", (m == m1) * 100 + n, 104);
		MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &m);
		MPI_Type_size(m, &n);
		eq("match_size real", (m == m2) * 100 + n, 108);
		MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &m);
		MPI_Type_size(m, &n);
		eq("match_size complex", (m == m3) * 100 + n, 116);

		{
			int in[3] = { 1 + it, 0x01020304, -2 }, back[3];
			unsigned char packed[64];
			MPI_Aint pos = 0, psz = 0;

			MPI_Pack_external_size("external32", 3, MPI_INT, &psz);
			eq("Pack_external_size", (long)psz, 12);
			MPI_Pack_external("external32", in, 3, MPI_INT, packed, sizeof(packed), &pos);
			eq("Pack_external position", (long)pos, 12);
			eq("external32 bytes", packed[4] * 1000000L + packed[5] * 10000 + packed[6] * 100 +
					       packed[7], 1020304);
			eq("external32 first", packed[3], 1 + it);
			pos = 0;
			MPI_Unpack_external("external32", packed, 12, &pos, back, 3, MPI_INT);
			eq("Unpack_external", back[0] * 10 + back[2], 10 * (1 + it) - 2);
		}
		nanosleep(&nap, NULL);
	}
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	MPI_Type_free(&vec);
	MPI_Type_free(&sub);
	MPI_Type_free(&st);
	MPI_Type_free(&dar);
	MPI_Type_free(&rsz);
	MPI_Type_free(&hix);
	MPI_Finalize();
	return 0;
}
