/* op_pending.c - a user operation freed while a reduction with it is still
 * pending, and new ones made before the wait (tests/split/test_coll.py).
 *
 *   op_pending ROUNDS [free]
 *
 * Each round every rank starts an MPI_Iallreduce with a user operation
 * (a sum) and frees the operation at once (MPI-3.1 5.9.5 allows it); the
 * odd ranks start theirs 50 ms later, so the even ranks' reduction is
 * computed in their MPI_Wait. Before the wait each rank creates and frees
 * 64 other operations (each returns -1) and keeps a 65th, which goes
 * through every slot of the split process's 64 trampolines; then it
 * waits, checks the sum, and checks an MPI_Allreduce with the 65th. With
 * "free" the request is freed too, right after the operation
 * (MPI_Request_free: the reduction goes on), and the wait is a barrier
 * after which each rank drives MPI (MPI_Iprobe) until the sum is there,
 * for at most 10 s. Rank 0 prints "PASS ranks=N rounds=R checks=K"; a
 * wrong value prints a FAIL line and aborts. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

static void sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	for (int i = 0; i < *len; i++)
		((long *)inout)[i] += ((long *)in)[i];
}

static void wrong(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)in;
	(void)dt;
	for (int i = 0; i < *len; i++)
		((long *)inout)[i] = -1;
}

static void maximum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	for (int i = 0; i < *len; i++)
		if (((long *)in)[i] > ((long *)inout)[i])
			((long *)inout)[i] = ((long *)in)[i];
}

/* a reduction whose request the program freed: every rank started it
 * once all are past the barrier, and MPI completes it while it is driven */
static void arrived(volatile long *got)
{
	double end;
	int flag;

	MPI_Barrier(MPI_COMM_WORLD);
	end = MPI_Wtime() + 10;
	while (!*got && MPI_Wtime() < end)
		MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 3, rank, size;
	int freed = argc > 2 && !strcmp(argv[2], "free");
	long checks = 0, all = 0;
	struct timespec late = { 0, 50 * 1000000L };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int r = 0; r < rounds; r++) {
		long v = rank + 1 + r, got = 0, top = 0;
		long want = (long)size * (size + 1) / 2 + (long)size * r;
		MPI_Op op, other, kept;
		MPI_Request req;

		if (rank % 2)
			nanosleep(&late, NULL);
		MPI_Op_create(sum, 1, &op);
		MPI_Iallreduce(&v, &got, 1, MPI_LONG, op, MPI_COMM_WORLD, &req);
		MPI_Op_free(&op);
		if (freed)
			MPI_Request_free(&req);
		for (int i = 0; i < 64; i++) {
			MPI_Op_create(wrong, 1, &other);
			MPI_Op_free(&other);
		}
		MPI_Op_create(maximum, 1, &kept);
		if (freed)
			arrived(&got);
		else
			MPI_Wait(&req, MPI_STATUS_IGNORE);
		fail_unless(rank, r, "the sum of the freed operation", got, want);
		checks++;
		MPI_Allreduce(&v, &top, 1, MPI_LONG, kept, MPI_COMM_WORLD);
		fail_unless(rank, r, "the maximum of the kept operation", top, size + r);
		checks++;
		MPI_Op_free(&kept);
	}
	MPI_Reduce(&checks, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d rounds=%d checks=%ld\n", size, rounds, all);
	MPI_Finalize();
	return 0;
}
