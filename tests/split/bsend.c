/* bsend.c - buffered sends in flight at a checkpoint, with a buffer
 * attached before the loop (tests/split).
 *
 *   bsend ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2 (L, R: the left and right neighbours). Before
 * the loop each rank attaches a buffer of 1 MiB (MPI_Buffer_attach) and
 * makes a persistent buffered send to R (MPI_Bsend_init). Iteration I
 * prints "rank R iteration I", receives from L what L sent in iteration
 * I - 1 and checks every int, then sends R, with v = 1000 * rank + I: 8
 * ints (MPI_Bsend), 40000 ints (MPI_Bsend: past both MPIs' eager limits),
 * 5 ints (MPI_Ibsend, MPI_Wait at once: complete once buffered) and 3 ints
 * (MPI_Start of the persistent one, MPI_Wait), each int v plus its index
 * plus a kind offset, and overwrites its send buffers at once (a buffered
 * send copied them). Then it sleeps SLEEP_MS: a checkpoint there finds
 * every message of the iteration in flight. After the loop it receives the
 * last iteration's, detaches the buffer (MPI_Buffer_detach gives back its
 * address and size) and rank 0 prints "PASS ranks=N iterations=I
 * checks=K". Then rank 0 attaches the buffer again, sends rank 1 40000
 * ints with MPI_Bsend and calls MPI_Finalize at once, with the buffer
 * still attached (MPI_Finalize delivers it), while rank 1 sleeps SLEEP_MS
 * before it receives them. Any wrong value prints a FAIL line and aborts
 * the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define BIG 40000

static int rank, size, it;
static long checks;

/* one check, counted */
static void eq(const char *what, long got, long want)
{
	fail_unless(rank, it, what, got, want);
	checks++;
}

static void fill(int *b, int n, int v, int kind)
{
	for (int i = 0; i < n; i++)
		b[i] = v + i + kind;
}

static void check(const char *what, const int *b, int n, int v, int kind)
{
	for (int i = 0; i < n; i++)
		if (b[i] != v + i + kind)
			eq(what, b[i], v + i + kind);
	checks++;
}

/* what L sent in iteration i */
static void receive(int L, int i, int *big)
{
	int small[8], five[5], three[3], v = 1000 * L + i;
	MPI_Status st;
	int n;

	MPI_Recv(small, 8, MPI_INT, L, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	check("Bsend", small, 8, v, 0);
	MPI_Recv(big, BIG, MPI_INT, L, 2, MPI_COMM_WORLD, &st);
	MPI_Get_count(&st, MPI_INT, &n);
	eq("Bsend big count", n, BIG);
	check("Bsend big", big, BIG, v, 100);
	MPI_Recv(five, 5, MPI_INT, L, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	check("Ibsend", five, 5, v, 200);
	MPI_Recv(three, 3, MPI_INT, L, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	check("Bsend_init", three, 3, v, 300);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 5, ms = argc > 2 ? atoi(argv[2]) : 100, L, R, bsize;
	struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };
	int small[8], five[5], three[3], *big = malloc(BIG * sizeof(int)), *rbig = malloc(BIG * sizeof(int));
	char *buf = malloc(1 << 20), *back;
	MPI_Request pers, q;
	long total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	L = (rank + size - 1) % size;
	R = (rank + 1) % size;
	MPI_Buffer_attach(buf, 1 << 20);
	MPI_Bsend_init(three, 3, MPI_INT, R, 4, MPI_COMM_WORLD, &pers);

	for (it = 0; it < iters; it++) {
		int v = 1000 * rank + it;

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (it > 0)
			receive(L, it - 1, rbig);
		fill(small, 8, v, 0);
		MPI_Bsend(small, 8, MPI_INT, R, 1, MPI_COMM_WORLD);
		fill(big, BIG, v, 100);
		MPI_Bsend(big, BIG, MPI_INT, R, 2, MPI_COMM_WORLD);
		fill(five, 5, v, 200);
		MPI_Ibsend(five, 5, MPI_INT, R, 3, MPI_COMM_WORLD, &q);
		MPI_Wait(&q, MPI_STATUS_IGNORE);
		fill(three, 3, v, 300);
		MPI_Start(&pers);
		MPI_Wait(&pers, MPI_STATUS_IGNORE);
		fill(small, 8, -1, 0);   /* copied: the receiver must not see these */
		fill(big, BIG, -1, 0);
		fill(five, 5, -1, 0);
		fill(three, 3, -1, 0);
		nanosleep(&nap, NULL);
	}
	receive(L, iters - 1, rbig);
	MPI_Request_free(&pers);
	MPI_Buffer_detach(&back, &bsize);
	eq("detached buffer", (back == buf) * 10000000L + bsize, 10000000L + (1 << 20));
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	if (rank == 0) {
		MPI_Buffer_attach(buf, 1 << 20);
		fill(big, BIG, iters, 100);
		MPI_Bsend(big, BIG, MPI_INT, 1, 5, MPI_COMM_WORLD);
	} else if (rank == 1) {
		nanosleep(&nap, NULL);
		MPI_Recv(rbig, BIG, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (int i = 0; i < BIG; i++)
			if (rbig[i] != iters + i + 100)
				fail_unless(rank, iters, "Bsend before MPI_Finalize", rbig[i],
					    iters + i + 100);
	}
	MPI_Finalize();
	free(buf);
	free(big);
	free(rbig);
	return 0;
}
