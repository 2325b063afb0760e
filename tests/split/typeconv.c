/* typeconv.c - datatypes of the array constructors and handles through
 * their Fortran integers, made before the loop and used in it (tests/split).
 *
 *   typeconv ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2. Before the loop each rank makes:
 *  - subarrays: a 6x8 array of ints in C order, its 3x4 block at (1, 2);
 *    a 4x3x5 array in Fortran order, its 2x2x3 block at (1, 0, 2), of a
 *    contiguous type of one double freed before the commit;
 *  - distributed arrays (MPI_Type_create_darray, with the job's size), for
 *    this rank and for its right neighbour: 4x6 ints in C order, block
 *    (default argument) by cyclic(2) on a 1 x size grid; 6x5 doubles in
 *    Fortran order, not distributed by block;
 *  - MPI_Type_create_f90_real(15, MPI_UNDEFINED), _integer(9) and
 *    _complex(6, MPI_UNDEFINED) (asked twice: the same handle), and a
 *    vector of the real one;
 *  - the Fortran integers (MPI_X_c2f) of a duplicate of MPI_COMM_WORLD, of
 *    the first subarray, of the group of the duplicate, of a user operation,
 *    of an info object, of an error handler set on the duplicate, of a
 *    persistent send and receive, and of predefined handles of every kind
 *    (MPI_COMM_WORLD must be 0 in Open MPI's ABI, as in its mpif.h).
 *
 * Each iteration prints "rank R iteration I", then right away, on the
 * communicator MPI_Comm_f2c gives back from the duplicate's integer, sends
 * the right neighbour (MPI_Isend, MPI_Irecv, MPI_Waitall) one instance of
 * each datatype (the first subarray as MPI_Type_f2c gives it back, the
 * darrays as the receiver's, of the sender's own and of the receiver's
 * part), from a buffer filled everywhere into one filled with a sentinel,
 * and checks every element received: the datatype's elements hold the
 * sender's values, every other one the sentinel; checks sizes and extents;
 * that every MPI_X_f2c of an integer taken before the loop gives the same
 * handle as the program holds and every MPI_X_c2f the same integer;
 * reduces with the operation, reads the info, asks the duplicate's error
 * handler and compares it, starts the persistent requests through their
 * integers and waits for them, converts a status to Fortran and back, and
 * passes a request of MPI_Irecv through its integer to MPI_Wait. Then it
 * sleeps SLEEP_MS, with no message in flight.
 *
 * At the end rank 0 sums the checks made (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I checks=K" if K is the count expected from N
 * and I alone. Any wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ISENT (-777777)		/* an int never sent */
#define DSENT (-1.5e300)	/* a double never sent */
#define NPERS 6			/* ints of the persistent requests */
#define NRED 4			/* ints reduced */

enum { T_SUB_C, T_SUB_F, T_DARR_C, T_DARR_F, T_F90_REAL, T_F90_INT, T_F90_CPLX, T_F90_VEC, NTYPES };
static const char *tname[NTYPES] = { "subarray C", "subarray Fortran", "darray C", "darray Fortran",
				     "f90 real", "f90 integer", "f90 complex", "vector of f90 real" };
/* elements of the buffer each is sent from and received into, of what size */
static const int nelem[NTYPES] = { 48, 60, 24, 30, 5, 5, 5, 5 };
static const int esize[NTYPES] = { 4, 8, 4, 8, 8, 4, 8, 8 };

static int rank, size, left, right;
static long checks;

#include "check.h"

static int pay(int src, int dst, int it, int tag, int i)
{
	return (int)(pay_word(src, dst, it, tag, i) & 0x3fffffff);
}

/* Whether element g of the buffer of datatype t, sent to or received by
 * rank r, is one of the datatype's: worked out without MPI. */
static int inside(int t, int r, int g)
{
	int i, j, k, b;

	switch (t) {
	case T_SUB_C:		/* [6][8], [3][4] at (1, 2) */
		i = g / 8, j = g % 8;
		return i >= 1 && i < 4 && j >= 2 && j < 6;
	case T_SUB_F:		/* (4, 3, 5), (2, 2, 3) at (1, 0, 2) */
		i = g % 4, j = g / 4 % 3, k = g / 12;
		return i >= 1 && i < 3 && j < 2 && k >= 2;
	case T_DARR_C:		/* [4][6]: rows whole, columns cyclic(2) over size */
		j = g % 6;
		return j / 2 % size == r;
	case T_DARR_F:		/* (6, 5): rows whole, columns by block over size */
		j = g / 6;
		b = (5 + size - 1) / size;
		return j >= r * b && j < (r + 1) * b;
	case T_F90_VEC:		/* 3 blocks of 1, stride 2 */
		return g % 2 == 0;
	default:		/* 5 of the f90 type itself */
		return 1;
	}
}

/* the value of element g sent from src to dst, or the sentinel */
static void value(int t, int src, int dst, int it, int g, void *out)
{
	int v = pay(src, dst, it, 40 + t, g);

	if (esize[t] == 4) {
		memcpy(out, &v, 4);
	} else {
		double d = (double)v / 4;

		if (t == T_F90_CPLX)   /* a single precision complex: two floats */
			memcpy(out, (float[2]){ (float)(v & 0xffff), (float)(v >> 16) }, 8);
		else
			memcpy(out, &d, 8);
	}
}

static void sentinel(int t, void *out)
{
	if (esize[t] == 4) {
		int v = ISENT;

		memcpy(out, &v, 4);
	} else {
		double d = DSENT;

		memcpy(out, &d, 8);
	}
}

struct state {
	MPI_Comm dup;
	MPI_Group grp;
	MPI_Op op;
	MPI_Info info;
	MPI_Errhandler eh;
	MPI_Datatype type[NTYPES], send_type[NTYPES];
	int tsize[NTYPES];
	MPI_Aint textent[NTYPES];
	MPI_Request pers[2];
	int pers_out[NPERS], pers_in[NPERS];
	/* Fortran integers taken before the loop */
	MPI_Fint f_dup, f_sub, f_grp, f_op, f_info, f_eh, f_pers[2];
	MPI_Fint f_world, f_self, f_cnull, f_int, f_double, f_tnull, f_sum, f_gempty, f_ret,
		 f_inull, f_rnull, f_mnull, f_fnull, f_onull;
};

static void absmax(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	const int *a = in;
	int *b = inout;

	(void)dt;
	for (int i = 0; i < *len; i++) {
		int x = abs(a[i]), y = abs(b[i]);

		b[i] = x > y ? x : y;
	}
}

static void on_error(MPI_Comm *c, int *code, ...)
{
	(void)c;
	(void)code;
}

static void make_types(struct state *s)
{
	int gs_c[2] = { 6, 8 }, ss_c[2] = { 3, 4 }, st_c[2] = { 1, 2 };
	int gs_f[3] = { 4, 3, 5 }, ss_f[3] = { 2, 2, 3 }, st_f[3] = { 1, 0, 2 };
	int dg_c[2] = { 4, 6 }, dd_c[2] = { MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC };
	int da_c[2] = { MPI_DISTRIBUTE_DFLT_DARG, 2 }, dp[2] = { 1, size };
	int dg_f[2] = { 6, 5 }, dd_f[2] = { MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_BLOCK };
	int da_f[2] = { MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG };
	MPI_Datatype dbl, again;

	MPI_Type_create_subarray(2, gs_c, ss_c, st_c, MPI_ORDER_C, MPI_INT, &s->type[T_SUB_C]);
	MPI_Type_contiguous(1, MPI_DOUBLE, &dbl);
	MPI_Type_create_subarray(3, gs_f, ss_f, st_f, MPI_ORDER_FORTRAN, dbl, &s->type[T_SUB_F]);
	MPI_Type_free(&dbl);
	for (int who = 0; who < 2; who++) {
		int r = who ? right : rank;
		MPI_Datatype *t = who ? s->send_type : s->type;

		MPI_Type_create_darray(size, r, 2, dg_c, dd_c, da_c, dp, MPI_ORDER_C, MPI_INT,
				       &t[T_DARR_C]);
		MPI_Type_create_darray(size, r, 2, dg_f, dd_f, da_f, dp, MPI_ORDER_FORTRAN, MPI_DOUBLE,
				       &t[T_DARR_F]);
	}
	MPI_Type_create_f90_real(15, MPI_UNDEFINED, &s->type[T_F90_REAL]);
	MPI_Type_create_f90_integer(9, &s->type[T_F90_INT]);
	MPI_Type_create_f90_complex(6, MPI_UNDEFINED, &s->type[T_F90_CPLX]);
	MPI_Type_create_f90_real(15, MPI_UNDEFINED, &again);
	require(again == s->type[T_F90_REAL], "MPI_Type_create_f90_real twice: two handles");
	MPI_Type_vector(3, 1, 2, s->type[T_F90_REAL], &s->type[T_F90_VEC]);
	for (int t = 0; t < NTYPES; t++) {
		if (t != T_DARR_C && t != T_DARR_F)
			s->send_type[t] = s->type[t];
		if (t < T_F90_REAL || t == T_F90_VEC)
			MPI_Type_commit(&s->type[t]);
		if (t == T_DARR_C || t == T_DARR_F)
			MPI_Type_commit(&s->send_type[t]);
	}
	for (int t = 0; t < NTYPES; t++) {
		MPI_Aint lb;
		int want = 0;

		for (int g = 0; g < nelem[t]; g++)
			want += inside(t, rank, g) * esize[t];
		if (t >= T_F90_REAL && t != T_F90_VEC)
			want /= 5;   /* one element */
		MPI_Type_size(s->type[t], &s->tsize[t]);
		MPI_Type_get_extent(s->type[t], &lb, &s->textent[t]);
		require(s->tsize[t] == want, "datatype %s: size %d, expected %d", tname[t], s->tsize[t],
			want);
	}
}

static void make(struct state *s)
{
	MPI_Datatype f90again;

	MPI_Comm_dup(MPI_COMM_WORLD, &s->dup);
	MPI_Comm_group(s->dup, &s->grp);
	MPI_Op_create(absmax, 1, &s->op);
	MPI_Info_create(&s->info);
	MPI_Info_set(s->info, "stasis_key", "stasis value");
	MPI_Comm_create_errhandler(on_error, &s->eh);
	MPI_Comm_set_errhandler(s->dup, s->eh);
	make_types(s);
	MPI_Recv_init(s->pers_in, NPERS, MPI_INT, left, 77, s->dup, &s->pers[0]);
	MPI_Send_init(s->pers_out, NPERS, MPI_INT, right, 77, s->dup, &s->pers[1]);

	s->f_dup = MPI_Comm_c2f(s->dup);
	s->f_sub = MPI_Type_c2f(s->type[T_SUB_C]);
	s->f_grp = MPI_Group_c2f(s->grp);
	s->f_op = MPI_Op_c2f(s->op);
	s->f_info = MPI_Info_c2f(s->info);
	s->f_eh = MPI_Errhandler_c2f(s->eh);
	s->f_pers[0] = MPI_Request_c2f(s->pers[0]);
	s->f_pers[1] = MPI_Request_c2f(s->pers[1]);
	s->f_world = MPI_Comm_c2f(MPI_COMM_WORLD);
	s->f_self = MPI_Comm_c2f(MPI_COMM_SELF);
	s->f_cnull = MPI_Comm_c2f(MPI_COMM_NULL);
	s->f_int = MPI_Type_c2f(MPI_INT);
	s->f_double = MPI_Type_c2f(MPI_DOUBLE);
	s->f_tnull = MPI_Type_c2f(MPI_DATATYPE_NULL);
	s->f_sum = MPI_Op_c2f(MPI_SUM);
	s->f_onull = MPI_Op_c2f(MPI_OP_NULL);
	s->f_gempty = MPI_Group_c2f(MPI_GROUP_EMPTY);
	s->f_ret = MPI_Errhandler_c2f(MPI_ERRORS_RETURN);
	s->f_inull = MPI_Info_c2f(MPI_INFO_NULL);
	s->f_rnull = MPI_Request_c2f(MPI_REQUEST_NULL);
	s->f_mnull = MPI_Message_c2f(MPI_MESSAGE_NULL);
	s->f_fnull = MPI_File_c2f(MPI_FILE_NULL);
	f90again = MPI_Type_f2c(MPI_Type_c2f(s->type[T_F90_REAL]));
	require(f90again == s->type[T_F90_REAL], "MPI_Type_f2c(MPI_Type_c2f(f90 real))");
#ifdef OPEN_MPI
	/* the PARAMETERs of Open MPI's mpif.h */
	require(s->f_world == 0 && s->f_self == 1 && s->f_cnull == 2 && s->f_tnull == 0,
		"Open MPI: MPI_COMM_WORLD, SELF, NULL, MPI_DATATYPE_NULL are %d %d %d %d in Fortran",
		s->f_world, s->f_self, s->f_cnull, s->f_tnull);
#endif
}

/* every conversion: the same handle, the same integer */
static void conversions(struct state *s, int it)
{
	MPI_Datatype sub = MPI_Type_f2c(s->f_sub);

	check(MPI_Comm_f2c(s->f_dup) == s->dup && MPI_Comm_c2f(s->dup) == s->f_dup &&
	      MPI_Type_f2c(s->f_sub) == s->type[T_SUB_C] && MPI_Type_c2f(sub) == s->f_sub &&
	      MPI_Group_f2c(s->f_grp) == s->grp && MPI_Group_c2f(s->grp) == s->f_grp &&
	      MPI_Op_f2c(s->f_op) == s->op && MPI_Op_c2f(s->op) == s->f_op &&
	      MPI_Info_f2c(s->f_info) == s->info && MPI_Info_c2f(s->info) == s->f_info &&
	      MPI_Errhandler_f2c(s->f_eh) == s->eh && MPI_Errhandler_c2f(s->eh) == s->f_eh &&
	      MPI_Request_f2c(s->f_pers[0]) == s->pers[0] &&
	      MPI_Request_f2c(s->f_pers[1]) == s->pers[1] &&
	      MPI_Request_c2f(s->pers[0]) == s->f_pers[0],
	      "iteration %d: the Fortran integers of the handles made before the loop", it);
	check(MPI_Comm_f2c(s->f_world) == MPI_COMM_WORLD && MPI_Comm_f2c(s->f_self) == MPI_COMM_SELF &&
	      MPI_Comm_f2c(s->f_cnull) == MPI_COMM_NULL && MPI_Type_f2c(s->f_int) == MPI_INT &&
	      MPI_Type_f2c(s->f_double) == MPI_DOUBLE && MPI_Type_f2c(s->f_tnull) == MPI_DATATYPE_NULL &&
	      MPI_Op_f2c(s->f_sum) == MPI_SUM && MPI_Op_f2c(s->f_onull) == MPI_OP_NULL &&
	      MPI_Group_f2c(s->f_gempty) == MPI_GROUP_EMPTY &&
	      MPI_Errhandler_f2c(s->f_ret) == MPI_ERRORS_RETURN &&
	      MPI_Info_f2c(s->f_inull) == MPI_INFO_NULL &&
	      MPI_Request_f2c(s->f_rnull) == MPI_REQUEST_NULL &&
	      MPI_Message_f2c(s->f_mnull) == MPI_MESSAGE_NULL &&
	      MPI_File_f2c(s->f_fnull) == MPI_FILE_NULL &&
	      MPI_Comm_c2f(MPI_COMM_WORLD) == s->f_world && MPI_Type_c2f(MPI_INT) == s->f_int &&
	      MPI_Type_c2f(MPI_DOUBLE) == s->f_double && s->f_int != s->f_double,
	      "iteration %d: the Fortran integers of predefined handles", it);
}

static void exchange(struct state *s, int it, MPI_Comm c, char **sbuf, char **rbuf)
{
	MPI_Request req[2 * NTYPES];
	MPI_Status st[2 * NTYPES];
	MPI_Datatype sub = MPI_Type_f2c(s->f_sub);

	for (int t = 0; t < NTYPES; t++) {
		for (int g = 0; g < nelem[t]; g++)
			sentinel(t, rbuf[t] + g * esize[t]);
		MPI_Irecv(rbuf[t], t < T_F90_REAL || t == T_F90_VEC ? 1 : 5,
			  t == T_SUB_C ? sub : s->type[t], left, 40 + t, c, &req[2 * t]);
	}
	for (int t = 0; t < NTYPES; t++) {
		for (int g = 0; g < nelem[t]; g++)
			value(t, rank, right, it, g, sbuf[t] + g * esize[t]);
		MPI_Isend(sbuf[t], t < T_F90_REAL || t == T_F90_VEC ? 1 : 5,
			  t == T_SUB_C ? sub : s->send_type[t], right, 40 + t, c, &req[2 * t + 1]);
	}
	MPI_Waitall(2 * NTYPES, req, st);
	for (int t = 0; t < NTYPES; t++) {
		int bad = -1, n = -1;
		char want[8];

		for (int g = 0; g < nelem[t] && bad < 0; g++) {
			if (inside(t, rank, g))
				value(t, left, rank, it, g, want);
			else
				sentinel(t, want);
			if (memcmp(rbuf[t] + g * esize[t], want, (size_t)esize[t]))
				bad = g;
		}
		MPI_Get_count(&st[2 * t], MPI_BYTE, &n);
		check(bad < 0 && n == (t < T_F90_REAL || t == T_F90_VEC ? 1 : 5) * s->tsize[t],
		      "iteration %d: %s from %d: element %d of %d wrong, %d bytes", it, tname[t], left,
		      bad, nelem[t], n);
	}
}

static void others(struct state *s, int it, MPI_Comm c)
{
	int v[NRED], out[NRED], want[NRED], ok = 1, flag = 0, n = -1, sz = 0;
	char val[64] = "";
	MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
	MPI_Request r, pers[2] = { MPI_Request_f2c(s->f_pers[0]), MPI_Request_f2c(s->f_pers[1]) };
	MPI_Status st, st2, pst[2];
	MPI_Fint fst[sizeof(MPI_Status) / sizeof(MPI_Fint)];
	MPI_Aint lb, extent;

	for (int t = 0; t < NTYPES; t++) {
		MPI_Type_size(s->type[t], &sz);
		MPI_Type_get_extent(s->type[t], &lb, &extent);
		check(sz == s->tsize[t] && extent == s->textent[t],
		      "iteration %d: datatype %s: size %d extent %ld, before the loop %d %ld", it,
		      tname[t], sz, (long)extent, s->tsize[t], (long)s->textent[t]);
	}
	for (int i = 0; i < NRED; i++) {
		v[i] = pay(rank, 0, it, 90, i) % 2001 - 1000;
		want[i] = 0;
		for (int q = 0; q < size; q++)
			if (abs(pay(q, 0, it, 90, i) % 2001 - 1000) > want[i])
				want[i] = abs(pay(q, 0, it, 90, i) % 2001 - 1000);
	}
	MPI_Allreduce(v, out, NRED, MPI_INT, MPI_Op_f2c(s->f_op), c);
	check(!memcmp(out, want, sizeof(want)), "iteration %d: MPI_Allreduce with the user operation",
	      it);
	MPI_Group_size(MPI_Group_f2c(s->f_grp), &sz);
	MPI_Group_rank(MPI_Group_f2c(s->f_grp), &n);
	check(sz == size && n == rank, "iteration %d: the group: size %d rank %d", it, sz, n);
	MPI_Info_get(MPI_Info_f2c(s->f_info), "stasis_key", sizeof(val) - 1, val, &flag);
	check(flag && !strcmp(val, "stasis value"), "iteration %d: the info: %d '%s'", it, flag, val);
	MPI_Comm_get_errhandler(c, &eh);
	check(eh == MPI_Errhandler_f2c(s->f_eh), "iteration %d: the duplicate's error handler", it);
	MPI_Errhandler_free(&eh);

	for (int i = 0; i < NPERS; i++) {
		s->pers_out[i] = pay(rank, right, it, 77, i);
		s->pers_in[i] = ISENT;
	}
	MPI_Startall(2, pers);
	MPI_Waitall(2, pers, pst);
	for (int i = 0; i < NPERS; i++)
		ok &= s->pers_in[i] == pay(left, rank, it, 77, i);
	check(ok && pers[0] == s->pers[0] && pers[1] == s->pers[1],
	      "iteration %d: the persistent requests through their integers", it);

	/* a request and a status through Fortran */
	MPI_Irecv(v, NRED, MPI_INT, left, 78, c, &r);
	MPI_Send(out, NRED, MPI_INT, right, 78, c);
	r = MPI_Request_f2c(MPI_Request_c2f(r));
	MPI_Wait(&r, &st);
	MPI_Status_c2f(&st, fst);
	memset(&st2, 0, sizeof(st2));
	MPI_Status_f2c(fst, &st2);
	MPI_Get_count(&st2, MPI_INT, &n);
	check(r == MPI_REQUEST_NULL && st2.MPI_SOURCE == left && st2.MPI_TAG == 78 && n == NRED &&
	      !memcmp(v, want, sizeof(want)),
	      "iteration %d: a request and its status through Fortran: source %d tag %d count %d", it,
	      st2.MPI_SOURCE, st2.MPI_TAG, n);
}

static void release(struct state *s)
{
	for (int t = 0; t < NTYPES; t++) {
		if (t == T_DARR_C || t == T_DARR_F)
			MPI_Type_free(&s->send_type[t]);
		if (t < T_F90_REAL || t == T_F90_VEC)   /* f90 types are predefined */
			MPI_Type_free(&s->type[t]);
	}
	MPI_Request_free(&s->pers[0]);
	MPI_Request_free(&s->pers[1]);
	MPI_Errhandler_free(&s->eh);
	MPI_Info_free(&s->info);
	MPI_Op_free(&s->op);
	MPI_Group_free(&s->grp);
	MPI_Comm_free(&s->dup);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20;
	long ms = argc > 2 ? atol(argv[2]) : 100, total = 0, expect;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	char *sbuf[NTYPES], *rbuf[NTYPES];
	struct state s;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	require(size >= 2 && size <= 64, "typeconv needs 2 to 64 ranks, not %d", size);
	left = (rank + size - 1) % size;
	right = (rank + 1) % size;
	for (int t = 0; t < NTYPES; t++) {
		sbuf[t] = malloc((size_t)(nelem[t] * esize[t]));
		rbuf[t] = malloc((size_t)(nelem[t] * esize[t]));
	}
	make(&s);
	for (int it = 0; it < iters; it++) {
		MPI_Comm c = MPI_Comm_f2c(s.f_dup);

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		conversions(&s, it);
		exchange(&s, it, c, sbuf, rbuf);
		others(&s, it, c);
		nanosleep(&ts, NULL);
	}
	printf("rank %d made %ld checks\n", rank, checks);
	fflush(stdout);
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	release(&s);
	/* per rank and iteration: 2 on conversions, 1 per datatype received,
	 * 1 per datatype's size and extent, 1 on the reduction, the group, the
	 * info, the error handler, the persistent requests, the request and
	 * status through Fortran */
	expect = (long)size * iters * (2 + 2 * NTYPES + 6);
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
	return total == expect || rank != 0 ? 0 : 1;
}
