/* persist.c - persistent requests across checkpoints
 * (tests/split/test_persist.py).
 *
 *   persist ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2. Before the loop each rank makes, around the
 * ring of MPI_COMM_WORLD: MPI_Send_init of NI ints to the right (tag 1) and
 * MPI_Recv_init from the left; MPI_Ssend_init to the left (tag 2) and
 * MPI_Recv_init from the right; MPI_Recv_init from the left (tag 3) and
 * MPI_Send_init to the right; MPI_Recv_init from the left (tag 4) and
 * MPI_Rsend_init to the right. Every iteration rank 0 prints
 * "rank 0 iteration I", then every rank
 *  1. fills its send buffers, starts tags 1 and 2 (MPI_Startall), sleeps
 *     SLEEP_MS / 2 with them active (a checkpoint comes there), completes
 *     them with MPI_Waitall and checks both messages and that the four
 *     handles are still there (3 checks);
 *  2. asks MPI_Waitany of the four, now inactive: MPI_UNDEFINED; and
 *     MPI_Test of one: complete at once, an empty status (2 checks);
 *  3. starts its tag 3 receive, sleeps SLEEP_MS / 2 * (rank + 1) / size
 *     (the left neighbour may not have sent yet at a checkpoint), starts the
 *     tag 3 send, waits for both (MPI_Wait) and checks (1 check);
 *  4. starts its tag 4 receive, MPI_Barrier (every receive is posted),
 *     starts the ready-mode send, waits for both and checks (1 check);
 *  5. (posted before the iteration's line, completed at its end) an
 *     MPI_Irecv from the left (tag 5), then a persistent receive made
 *     before the loop with the same envelope: the tests checkpoint right
 *     after the line, which finds both pending, and a restart must post
 *     them again in this order; two messages sent to the right at the end:
 *     the first must go to the MPI_Irecv, the second to the persistent one
 *     (1 check).
 * At the end each rank frees its nine requests (MPI_Request_free: null
 * handles after), rank 0 prints "PASS ranks=N iterations=I checks=C" with
 * C = 8 * N * I; a wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define NI 300

static int rank, size, it = -1;
static long checks;

static void check(int ok, const char *what)
{
	if (!ok)
		fail(rank, it, what);
	checks++;
}

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static int val(int r, int i, int tag, int k)
{
	return r * 100003 + i * 1009 + tag * 101 + k;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 10;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 50;
	static int s1[NI], r1[NI], s2[NI], r2[NI], s3[NI], r3[NI], s4[NI], r4[NI];
	MPI_Request ring[4], late[2], ready[2], second;
	int first_v, second_v;
	int left, right;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2)
		fail(rank, it, "2 ranks or more");
	left = (rank + size - 1) % size;
	right = (rank + 1) % size;
	MPI_Send_init(s1, NI, MPI_INT, right, 1, MPI_COMM_WORLD, &ring[0]);
	MPI_Recv_init(r1, NI, MPI_INT, left, 1, MPI_COMM_WORLD, &ring[1]);
	MPI_Ssend_init(s2, NI, MPI_INT, left, 2, MPI_COMM_WORLD, &ring[2]);
	MPI_Recv_init(r2, NI, MPI_INT, right, 2, MPI_COMM_WORLD, &ring[3]);
	MPI_Recv_init(r3, NI, MPI_INT, left, 3, MPI_COMM_WORLD, &late[0]);
	MPI_Send_init(s3, NI, MPI_INT, right, 3, MPI_COMM_WORLD, &late[1]);
	MPI_Recv_init(r4, NI, MPI_INT, left, 4, MPI_COMM_WORLD, &ready[0]);
	MPI_Rsend_init(s4, NI, MPI_INT, right, 4, MPI_COMM_WORLD, &ready[1]);
	MPI_Recv_init(&second_v, 1, MPI_INT, left, 5, MPI_COMM_WORLD, &second);

	for (it = 0; it < iters; it++) {
		MPI_Status st, sts[4];
		MPI_Request first;
		int ok, idx, flag;

		/* 5., posted: the MPI_Irecv first */
		first_v = second_v = -1;
		MPI_Irecv(&first_v, 1, MPI_INT, left, 5, MPI_COMM_WORLD, &first);
		MPI_Start(&second);
		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		/* 1. the ring, active across a nap */
		for (int k = 0; k < NI; k++) {
			s1[k] = val(rank, it, 1, k);
			s2[k] = val(rank, it, 2, k);
			r1[k] = r2[k] = -1;
		}
		MPI_Startall(4, ring);
		nap(sleep_ms / 2);
		check(MPI_Waitall(4, ring, sts) == MPI_SUCCESS, "MPI_Waitall");
		ok = sts[1].MPI_SOURCE == left && sts[1].MPI_TAG == 1;
		for (int k = 0; k < NI; k++)
			ok = ok && r1[k] == val(left, it, 1, k) && r2[k] == val(right, it, 2, k);
		check(ok, "the ring's messages");
		ok = 1;
		for (int k = 0; k < 4; k++)
			ok = ok && ring[k] != MPI_REQUEST_NULL;
		check(ok, "a persistent request was freed by MPI_Waitall");
		/* 2. inactive requests */
		idx = 5;
		MPI_Waitany(4, ring, &idx, &st);
		check(idx == MPI_UNDEFINED, "MPI_Waitany of inactive requests");
		flag = 0;
		st.MPI_SOURCE = 77;
		st.MPI_TAG = 77;
		MPI_Test(&ring[1], &flag, &st);
		check(flag && ring[1] != MPI_REQUEST_NULL && st.MPI_SOURCE == MPI_ANY_SOURCE &&
		      st.MPI_TAG == MPI_ANY_TAG, "MPI_Test of an inactive request");
		/* 3. a receive active before its message is sent */
		for (int k = 0; k < NI; k++) {
			s3[k] = val(rank, it, 3, k);
			r3[k] = -1;
		}
		MPI_Start(&late[0]);
		nap(sleep_ms / 2 * (rank + 1) / size);
		MPI_Start(&late[1]);
		MPI_Wait(&late[1], MPI_STATUS_IGNORE);
		MPI_Wait(&late[0], &st);
		ok = st.MPI_SOURCE == left && st.MPI_TAG == 3;
		for (int k = 0; k < NI; k++)
			ok = ok && r3[k] == val(left, it, 3, k);
		check(ok, "the late message");
		/* 4. ready mode: every receive posted before any send starts */
		for (int k = 0; k < NI; k++) {
			s4[k] = val(rank, it, 4, k);
			r4[k] = -1;
		}
		MPI_Start(&ready[0]);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Start(&ready[1]);
		MPI_Waitall(2, ready, sts);
		ok = 1;
		for (int k = 0; k < NI; k++)
			ok = ok && r4[k] == val(left, it, 4, k);
		check(ok, "the ready-mode message");
		/* 5. matching order: the MPI_Irecv posted first gets the first */
		{
			int a = val(rank, it, 5, 0), b = val(rank, it, 5, 1);

			MPI_Send(&a, 1, MPI_INT, right, 5, MPI_COMM_WORLD);
			MPI_Send(&b, 1, MPI_INT, right, 5, MPI_COMM_WORLD);
			MPI_Wait(&first, MPI_STATUS_IGNORE);
			MPI_Wait(&second, MPI_STATUS_IGNORE);
			check(first_v == val(left, it, 5, 0) && second_v == val(left, it, 5, 1),
			      "the receives matched out of their posting order");
		}
	}
	for (int k = 0; k < 4; k++)
		MPI_Request_free(&ring[k]);
	MPI_Request_free(&late[0]);
	MPI_Request_free(&late[1]);
	MPI_Request_free(&ready[0]);
	MPI_Request_free(&ready[1]);
	MPI_Request_free(&second);
	if (ring[0] != MPI_REQUEST_NULL || ready[1] != MPI_REQUEST_NULL)
		fail(rank, it, "MPI_Request_free left a handle");
	{
		long total = 0;

		MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			if (total != 8L * size * iters)
				fail(rank, it, "checks counted");
			printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
		}
	}
	MPI_Finalize();
	return 0;
}
