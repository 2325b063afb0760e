/* fileio.c - MPI-IO with shared file pointers, split collectives and
 * non-blocking calls, on a file opened before the loop (tests/split).
 *
 *   fileio ITERATIONS SLEEP_MS FILE
 *
 * Any number of ranks >= 2 (r: this rank, n: the size, L: its left
 * neighbour). Before the loop the ranks open FILE (created), set a view of
 * ints (MPI_File_set_view), set and read an info (MPI_File_set_info,
 * MPI_File_get_info). Iteration I, with P = 6 n I and v = 1000 r + I, all
 * offsets in ints:
 *  - shared file pointer: each rank writes (v, I) with MPI_File_write_shared
 *    (MPI_File_iwrite_shared and MPI_Wait on odd iterations), then
 *    (v + 1, I + 1000) with MPI_File_write_ordered_begin/_end (so at
 *    P + 2 n + 2 r); checks rank 0's MPI_File_get_position_shared is
 *    P + 4 n; seeks
 *    the shared pointer back to P (MPI_File_seek_shared), reads 2 ints with
 *    MPI_File_read_ordered (the pair at P + 2 r, written by some rank: all
 *    ranks' pairs are different ranks' own) and 2 with MPI_File_read_shared
 *    (a pair of the ordered ones); the pointer is P + 4 n again;
 *  - explicit offsets and the individual pointer, from R = 100000 + 8 n I:
 *    MPI_File_iwrite_at at R + 2 r, MPI_File_iwrite_at_all at R + 2 n + 2 r,
 *    MPI_File_write_at_all_begin/_end at R + 4 n + 2 r, and after a seek
 *    MPI_File_write_all_begin/_end at R + 6 n + 2 r; then, after
 *    sync-barrier-sync, reads the left neighbour's pairs back with
 *    MPI_File_iread_at, MPI_File_iread_at_all, MPI_File_read_at_all_begin/
 *    _end and (after a seek) MPI_File_read_all_begin/_end and MPI_File_iread;
 *  - MPI_File_get_view: displacement 0, etype MPI_INT, "native".
 * A checkpoint may come between a split collective's begin and end (the
 * program sleeps between MPI_File_write_ordered_begin and _end on odd
 * iterations, between the others' every third). Then it starts an
 * MPI_File_iwrite_at_all of (v, 6) at F + 2 r, an MPI_File_iwrite_at of
 * (v, 7) at F + 2 n + 2 r, after a seek an MPI_File_iwrite of (v, 8) at
 * F + 4 n + 2 r (F = 200000 + 6 n I), an MPI_File_iwrite_shared of (v, 9)
 * (at P + 4 n + 2 j, some j) and an MPI_File_iread_at of the left
 * neighbour's pair at R + 2 L; the next iteration, once it printed its
 * line, sleeps SLEEP_MS with the five in flight if it is even, waits for
 * them, checks their counts and what was read, and reads the left
 * neighbour's three pairs back. The test checkpoints right after a printed
 * line: with the five in flight on even iterations, between a split
 * collective's begin and end on odd ones. The file's bytes are then what
 * test_fileio.py computes, with or without restarts.
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

static void pair(const char *what, const int *got, int a, int b)
{
	eq(what, (long)got[0] * 100000 + got[1], (long)a * 100000 + b);
}

static void nap_ms(int ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&t, NULL);
}

static void wait1(MPI_Request *q)
{
	MPI_Status st;
	int n;

	MPI_Wait(q, &st);
	MPI_Get_count(&st, MPI_INT, &n);
	if (n != 2) {
		printf("FAIL rank %d iteration %d: non-blocking count %d\n", rank, it, n);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

/* rank 0's MPI_File_get_position_shared (MPICH 4.0 natively: the other
 * ranks read 0 after an MPI_File_write_ordered) */
static void shared_position(MPI_File fh, MPI_Offset *pos)
{
	long long p = 0;

	if (rank == 0) {
		MPI_File_get_position_shared(fh, pos);
		p = *pos;
	}
	MPI_Bcast(&p, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
	*pos = p;
}

/* MPI_File_iwrite_at_all (counted on the file's communicator),
 * MPI_File_iwrite_at, MPI_File_iwrite (after a seek), MPI_File_iwrite_shared
 * and MPI_File_iread_at left in flight until the next iteration, where the
 * checkpoint comes (the drain completes them), which checks their counts
 * and what was read, and reads the left neighbour's pairs back:
 * (1000 L + I, 6 + k) at F + 2 k n + 2 L, k = 0, 1, 2, F = 200000 + 6 n I
 * (the shared pointer's pair (v, 9) is at P + 4 n + 2 j, some j: the test
 * checks the file) */
static int fl_buf[4][2], fl_got[2], fl_it;
static MPI_Request fl_q[5];

static MPI_Offset fl_at(int I, int k, int r)
{
	return 200000 + 6L * size * I + 2L * k * size + 2 * r;
}

static void in_flight_start(MPI_File fh, MPI_Offset R, int L)
{
	fl_it = it;
	for (int k = 0; k < 4; k++) {
		fl_buf[k][0] = 1000 * rank + it;
		fl_buf[k][1] = 6 + k;
	}
	fl_got[0] = fl_got[1] = -1;
	MPI_File_iwrite_at_all(fh, fl_at(it, 0, rank), fl_buf[0], 2, MPI_INT, &fl_q[0]);
	MPI_File_iwrite_at(fh, fl_at(it, 1, rank), fl_buf[1], 2, MPI_INT, &fl_q[1]);
	MPI_File_seek(fh, fl_at(it, 2, rank), MPI_SEEK_SET);
	MPI_File_iwrite(fh, fl_buf[2], 2, MPI_INT, &fl_q[2]);
	MPI_File_iwrite_shared(fh, fl_buf[3], 2, MPI_INT, &fl_q[3]);
	MPI_File_iread_at(fh, R + 2 * L, fl_got, 2, MPI_INT, &fl_q[4]);
}

static void in_flight_check(MPI_File fh, int L)
{
	static const char *what[5] = {
		"iwrite_at_all in flight", "iwrite_at in flight", "iwrite in flight",
		"iwrite_shared in flight", "iread_at in flight" };
	MPI_Status st;
	int got[2], n;

	for (int k = 0; k < 5; k++) {
		MPI_Wait(&fl_q[k], &st);
		MPI_Get_count(&st, MPI_INT, &n);
		eq(what[k], n, 2);
	}
	pair(what[4], fl_got, 1000 * L + fl_it, 1);
	MPI_File_sync(fh);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_File_sync(fh);
	for (int k = 0; k < 3; k++) {
		MPI_File_read_at(fh, fl_at(fl_it, k, L), got, 2, MPI_INT, &st);
		pair(what[k], got, 1000 * L + fl_it, 6 + k);
	}
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 5, ms = argc > 2 ? atoi(argv[2]) : 100, L;
	const char *path = argc > 3 ? argv[3] : "fileio.dat";
	MPI_File fh;
	MPI_Info info, used;
	MPI_Status st;
	long total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	L = (rank + size - 1) % size;
	MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
	MPI_File_set_errhandler(fh, MPI_ERRORS_ARE_FATAL);
	MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
	MPI_Info_create(&info);
	MPI_Info_set(info, "access_style", "read_mostly");
	MPI_File_set_info(fh, info);
	MPI_File_get_info(fh, &used);
	MPI_Info_free(&used);
	MPI_Info_free(&info);

	for (it = 0; it < iters; it++) {
		int n = size, v = 1000 * rank + it, buf[2], got[2], all[64];
		MPI_Offset P = 6L * n * it, R = 100000 + 8L * n * it, pos;
		MPI_Request q;
		MPI_Datatype et, ft;
		char rep[MPI_MAX_DATAREP_STRING + 1];
		MPI_Offset disp;

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (it > 0) {
			/* the test checkpoints right after the line above: on even
			 * iterations it comes here, with the five in flight */
			if (it % 2 == 0)
				nap_ms(ms);
			in_flight_check(fh, L);
		}

		/* shared file pointer */
		buf[0] = v;
		buf[1] = it;
		if (it % 2) {
			MPI_File_iwrite_shared(fh, buf, 2, MPI_INT, &q);
			wait1(&q);
		} else {
			MPI_File_write_shared(fh, buf, 2, MPI_INT, &st);
		}
		/* every shared write before the ordered ones (a collective is no
		 * barrier) */
		MPI_Barrier(MPI_COMM_WORLD);
		buf[0] = v + 1;
		buf[1] = it + 1000;
		MPI_File_write_ordered_begin(fh, buf, 2, MPI_INT);
		if (it % 2)
			nap_ms(ms);   /* odd iterations' checkpoint: between begin and end */
		MPI_File_write_ordered_end(fh, buf, &st);
		MPI_File_sync(fh);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_File_sync(fh);
		shared_position(fh, &pos);
		eq("position_shared", (long)pos, (long)(P + 4 * n));
		MPI_File_seek_shared(fh, P, MPI_SEEK_SET);
		MPI_File_read_ordered(fh, got, 2, MPI_INT, &st);
		eq("read_ordered iteration", got[1], it);
		MPI_Allgather(&got[0], 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
		{
			int seen = 0;

			for (int i = 0; i < n; i++)
				seen |= (all[i] % 1000 == it && all[i] / 1000 < n) << (all[i] / 1000);
			eq("every rank's shared write once", seen, (1 << n) - 1);
		}
		MPI_File_read_shared(fh, got, 2, MPI_INT, &st);
		eq("read_shared", got[1] * 1000L + (got[0] - 1) % 1000, (it + 1000) * 1000L + it);
		MPI_Barrier(MPI_COMM_WORLD);   /* every read_shared done: all see P + 4n */
		shared_position(fh, &pos);
		eq("position_shared after reads", (long)pos, (long)(P + 4 * n));

		/* explicit offsets and the individual pointer */
		buf[0] = v;
		buf[1] = 1;
		MPI_File_iwrite_at(fh, R + 2 * rank, buf, 2, MPI_INT, &q);
		wait1(&q);
		buf[1] = 2;
		MPI_File_iwrite_at_all(fh, R + 2 * n + 2 * rank, buf, 2, MPI_INT, &q);
		wait1(&q);
		buf[1] = 3;
		MPI_File_write_at_all_begin(fh, R + 4 * n + 2 * rank, buf, 2, MPI_INT);
		if (it % 3 == 2)
			nap_ms(ms);
		MPI_File_write_at_all_end(fh, buf, &st);
		buf[1] = 4;
		MPI_File_seek(fh, R + 6 * n + 2 * rank, MPI_SEEK_SET);
		MPI_File_write_all_begin(fh, buf, 2, MPI_INT);
		MPI_File_write_all_end(fh, buf, &st);
		MPI_File_sync(fh);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_File_sync(fh);

		v = 1000 * L + it;
		MPI_File_iread_at(fh, R + 2 * L, got, 2, MPI_INT, &q);
		wait1(&q);
		pair("iread_at", got, v, 1);
		MPI_File_iread_at_all(fh, R + 2 * n + 2 * L, got, 2, MPI_INT, &q);
		wait1(&q);
		pair("iread_at_all", got, v, 2);
		MPI_File_read_at_all_begin(fh, R + 4 * n + 2 * L, got, 2, MPI_INT);
		MPI_File_read_at_all_end(fh, got, &st);
		pair("read_at_all_begin", got, v, 3);
		MPI_File_seek(fh, R + 6 * n + 2 * L, MPI_SEEK_SET);
		MPI_File_read_all_begin(fh, got, 2, MPI_INT);
		if (it % 3 == 0)
			nap_ms(ms);
		MPI_File_read_all_end(fh, got, &st);
		pair("read_all_begin", got, v, 4);
		MPI_File_seek(fh, R + 6 * n + 2 * L, MPI_SEEK_SET);
		MPI_File_iread(fh, got, 2, MPI_INT, &q);
		wait1(&q);
		pair("iread", got, v, 4);

		MPI_File_get_view(fh, &disp, &et, &ft, rep);
		eq("get_view", (long)disp * 10 + (et == MPI_INT) + (ft == MPI_INT) + 4 * !strcmp(rep, "native"),
		   6);
		in_flight_start(fh, R, L);
	}
	in_flight_check(fh, L);
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	MPI_File_close(&fh);
	MPI_Finalize();
	return 0;
}
