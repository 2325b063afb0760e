/* blocking_coll.c - a checkpoint that must let a rank past a collective
 * with no non-blocking form (docs/protocol.md, "Blocking collectives";
 * tests/split/test_release.py). 2 ranks or more.
 *
 *   blocking_coll ITERATIONS SLEEP_MS [behind|inside [FILE]]
 *
 * D is a duplicate of MPI_COMM_WORLD. Each iteration I:
 *   rank 0   starts MPI_Ibarrier(D), prints "rank 0 iteration I", sleeps
 *            SLEEP_MS, then the blocking collective, and waits for the
 *            barrier;
 *   others   sleep SLEEP_MS, then the same blocking collective, and only
 *            then MPI_Ibarrier(D) and its wait.
 * The blocking collective is MPI_Comm_dup(WORLD), an MPI_Allreduce on the
 * duplicate and MPI_Comm_free; with FILE, an MPI_File_write_at_all of one
 * long per rank to FILE, opened on WORLD at the start.
 * A checkpoint in the sleeps finds the others behind rank 0 on D, with a
 * blocking collective to pass first: inside it they would wait for rank 0,
 * which is stopped. With "inside", the others do not sleep first: they
 * come to the blocking collective at once and wait in it for rank 0, so a
 * checkpoint in rank 0's sleep finds them there (at its entry barrier; in
 * the real call, where no thread can stop, the checkpoint failed after
 * 10 s). Each rank checks the Allreduce, rank 0 the whole FILE after
 * MPI_File_close; at the end rank 0 prints "PASS ranks=N iterations=I",
 * anything wrong a FAIL line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

static void with_new_comm(int rank, int size, int it)
{
	MPI_Comm c;
	long v = rank + it, sum = 0;

	MPI_Comm_dup(MPI_COMM_WORLD, &c);
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, c);
	if (sum != (long)size * (size - 1) / 2 + (long)size * it)
		fail(rank, it, "the sum on the new communicator");
	MPI_Comm_free(&c);
}

static long value(int rank, int it)
{
	return 1000L * it + rank + 1;
}

static void collective(MPI_File fh, int rank, int size, int it)
{
	long v = value(rank, it);

	if (fh == MPI_FILE_NULL)
		with_new_comm(rank, size, it);
	else if (MPI_File_write_at_all(fh, (MPI_Offset)(it * size + rank) * (MPI_Offset)sizeof(v), &v,
				       1, MPI_LONG, MPI_STATUS_IGNORE) != MPI_SUCCESS)
		fail(rank, it, "MPI_File_write_at_all");
}

/* rank 0, once the file is closed: every rank's value of every iteration */
static void check_file(const char *path, int size, int iters)
{
	FILE *f = fopen(path, "rb");
	long v;

	for (int it = 0; it < iters; it++)
		for (int r = 0; r < size; r++)
			if (!f || fread(&v, sizeof(v), 1, f) != 1 || v != value(r, it))
				fail(0, it, "the file's values");
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 300;
	int inside = argc > 3 && !strcmp(argv[3], "inside");
	const char *path = argc > 4 ? argv[4] : NULL;
	MPI_File fh = MPI_FILE_NULL;
	MPI_Comm d;
	MPI_Request r;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_dup(MPI_COMM_WORLD, &d);
	if (path && MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY,
				  MPI_INFO_NULL, &fh) != MPI_SUCCESS)
		fail(rank, -1, "MPI_File_open");
	for (int it = 0; it < iters; it++) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

		if (rank == 0) {
			MPI_Ibarrier(d, &r);
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
			nanosleep(&ts, NULL);
			collective(fh, rank, size, it);
		} else {
			if (!inside)
				nanosleep(&ts, NULL);
			collective(fh, rank, size, it);
			MPI_Ibarrier(d, &r);
		}
		MPI_Wait(&r, MPI_STATUS_IGNORE);
	}
	if (path) {
		MPI_File_close(&fh);
		if (rank == 0)
			check_file(path, size, iters);
	}
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	MPI_Comm_free(&d);
	MPI_Finalize();
	return 0;
}
