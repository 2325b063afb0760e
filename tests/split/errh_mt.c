/* errh_mt.c - a request's error raised on its own communicator's handler
 * while other threads of the rank call MPI (MPI_THREAD_MULTIPLE;
 * tests/split/test_errh.py). Any number of ranks; each works alone.
 *
 *   errh_mt ITERATIONS
 *
 * Two threads a rank, each with a duplicate of MPI_COMM_SELF of its own
 * that has the program's error handler. Every iteration each thread
 *   - starts a persistent receive, sends itself one int and waits: no
 *     error;
 *   - sends itself 2 ints into room for 1 (MPI_Isend, MPI_Irecv,
 *     MPI_Wait): MPI_ERR_TRUNCATE, raised on its communicator's handler,
 *     which must be given that communicator, not the other thread's.
 * At the end each rank prints "rank R: PASS threads=2 iterations=I
 * errors=E" (E: the handler's calls, one per thread and iteration), or a
 * FAIL line saying how many errors came to the wrong communicator. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 2

struct worker {
	MPI_Comm comm;
	long iters, calls, wrong, bad;  /* handler calls; on another communicator; other failures */
};

static __thread struct worker *me;

static void handler(MPI_Comm *comm, int *code, ...)
{
	int cls;

	MPI_Error_class(*code, &cls);
	if (*comm != me->comm)
		me->wrong++;
	else if (cls != MPI_ERR_TRUNCATE)
		me->bad++;
	else
		me->calls++;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	int in = 0, out = 1, two[2] = { 1, 2 }, one;
	MPI_Request p, s, r;

	me = w;
	MPI_Recv_init(&in, 1, MPI_INT, 0, 0, w->comm, &p);
	for (long i = 0; i < w->iters; i++) {
		MPI_Start(&p);
		if (MPI_Send(&out, 1, MPI_INT, 0, 0, w->comm) != MPI_SUCCESS ||
		    MPI_Wait(&p, MPI_STATUS_IGNORE) != MPI_SUCCESS || in != 1)
			w->bad++;
		MPI_Isend(two, 2, MPI_INT, 0, 1, w->comm, &s);
		MPI_Irecv(&one, 1, MPI_INT, 0, 1, w->comm, &r);
		if (MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS)
			w->bad++;
		MPI_Wait(&s, MPI_STATUS_IGNORE);
	}
	MPI_Request_free(&p);
	return NULL;
}

int main(int argc, char **argv)
{
	struct worker w[THREADS];
	pthread_t t[THREADS];
	MPI_Errhandler eh;
	long iters = argc > 1 ? atol(argv[1]) : 1000, calls = 0, wrong = 0, bad = 0;
	int provided, rank;

	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (provided != MPI_THREAD_MULTIPLE) {
		printf("rank %d: FAIL provided thread level %d\n", rank, provided);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Comm_create_errhandler(handler, &eh);
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .iters = iters };
		MPI_Comm_dup(MPI_COMM_SELF, &w[i].comm);
		MPI_Comm_set_errhandler(w[i].comm, eh);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, work, &w[i]);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		calls += w[i].calls;
		wrong += w[i].wrong;
		bad += w[i].bad;
		MPI_Comm_free(&w[i].comm);
	}
	MPI_Errhandler_free(&eh);
	if (wrong || bad || calls != THREADS * iters)
		printf("rank %d: FAIL errors=%ld, %ld on another thread's communicator, %ld "
		       "other failures\n", rank, calls, wrong, bad);
	else
		printf("rank %d: PASS threads=%d iterations=%ld errors=%ld\n", rank, THREADS, iters,
		       calls);
	MPI_Finalize();
	return 0;
}
