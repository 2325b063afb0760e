/* percall.c - the CPU time of single MPI calls, one rank talking to itself:
 * what the split process adds to a call, without the other rank's timing,
 * the machine's two message speeds or other load (the calling thread's
 * CPU time only). Each pattern runs BATCHES batches of PER operations and
 * prints the median batch's nanoseconds per operation:
 *   rank        MPI_Comm_rank on MPI_COMM_WORLD
 *   sendrecv    8-byte MPI_Send + MPI_Recv to itself on MPI_COMM_WORLD
 *   sendrecv_dup  the same on a duplicate of MPI_COMM_WORLD
 *   isend       MPI_Irecv + MPI_Isend + MPI_Wait + MPI_Wait to itself
 *               (a request each: the ledger's records)
 *   put         8-byte MPI_Put + MPI_Win_flush to itself in a lock_all
 *               epoch (MPI_Win_create over the program's memory)
 * sendrecv, sendrecv_dup and put run above Open MPI only: MPICH's
 * blocking send to itself waits for the receive (MPI allows it to), and
 * its put to itself was not in the window after MPI_Win_unlock_all here
 * (MPICH 4.0, one rank).
 * Built with -DFS_FLOOR, every call crosses as a split process's does
 * (fsfloor.h). bench/mpi/run.py runs it natively, as the floor and split.
 * usage: percall [PER [PATTERN]]  (PER operations a batch, 1000; PATTERN
 * alone, for perf) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsfloor.h"

#define BATCHES 200

static int per = 1000;
static long v, base;
static char sbuf[8], rbuf[8];
static MPI_Comm dup_world;
static MPI_Win win;

static double cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

static void op_rank(void)
{
	int r;

	MPI_Comm_rank(MPI_COMM_WORLD, &r);
}

static void op_isend(void)
{
	MPI_Request r[2];

	MPI_Irecv(rbuf, 8, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &r[0]);
	MPI_Isend(sbuf, 8, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &r[1]);
	MPI_Wait(&r[1], MPI_STATUS_IGNORE);
	MPI_Wait(&r[0], MPI_STATUS_IGNORE);
}

#ifdef OPEN_MPI
static void op_sendrecv(void)
{
	MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
	MPI_Recv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void op_sendrecv_dup(void)
{
	MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, dup_world);
	MPI_Recv(rbuf, 8, MPI_BYTE, 0, 1, dup_world, MPI_STATUS_IGNORE);
}

static void op_put(void)
{
	v++;
	MPI_Put(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win);
	MPI_Win_flush(0, win);
}
#endif

/* the median batch's CPU ns per operation (a warm-up batch first) */
static double measure(void (*op)(void))
{
	double t[BATCHES], start;

	for (int i = 0; i < per; i++)
		op();
	for (int b = 0; b < BATCHES; b++) {
		start = cpu_ns();
		for (int i = 0; i < per; i++)
			op();
		t[b] = (cpu_ns() - start) / per;
	}
	qsort(t, BATCHES, sizeof(t[0]), cmp);
	return t[BATCHES / 2];
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*op)(void);
	} pat[] = { { "rank", op_rank }, { "isend", op_isend },
#ifdef OPEN_MPI
		    { "sendrecv", op_sendrecv }, { "sendrecv_dup", op_sendrecv_dup },
		    { "put", op_put },
#endif
	};

	if (argc > 1 && atoi(argv[1]) > 0)
		per = atoi(argv[1]);
	MPI_Init(&argc, &argv);
	MPI_Comm_dup(MPI_COMM_WORLD, &dup_world);
	MPI_Win_create(&base, sizeof(base), sizeof(base), MPI_INFO_NULL, MPI_COMM_SELF, &win);
	MPI_Win_lock_all(0, win);
	for (unsigned i = 0; i < sizeof(pat) / sizeof(pat[0]); i++)
		if (argc <= 2 || !strcmp(argv[2], pat[i].name))
			printf("%s_ns %.1f\n", pat[i].name, measure(pat[i].op));
	MPI_Win_unlock_all(win);
	if (base != v) {
		fprintf(stderr, "percall: the window holds %ld, expected %ld\n", base, v);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Win_free(&win);
	MPI_Comm_free(&dup_world);
	MPI_Finalize();
	return 0;
}
