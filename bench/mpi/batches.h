/* batches.h - the median of batches' mean times, for the latency loops of
 * pingpong.c and rmaput.c (bench/mpi/run.py says why: a measured phase of
 * a few tens of ms is shorter than one of the scheduler's time slices, so
 * its mean is decided by whether another process took the CPU once).
 * A loop of n operations is cut into BATCHES batches of n / BATCHES
 * operations (at least one); batches_start() as the loop starts,
 * batches_step(b, i) after operation i times a batch when it ends, batches_median() gives the median batch's time per
 * operation, in seconds. */
#ifndef BENCH_MPI_BATCHES_H
#define BENCH_MPI_BATCHES_H

#include <mpi.h>
#include <stdlib.h>

#define BATCHES 1000

struct batches {
	int per, count;
	double start, *t;
};

static inline void batches_init(struct batches *b, int n)
{
	b->per = n / BATCHES > 0 ? n / BATCHES : 1;
	b->count = 0;
	b->t = malloc(sizeof(double) * (size_t)(n / b->per + 1));
	if (!b->t)
		abort();
}

static inline void batches_start(struct batches *b)
{
	b->start = MPI_Wtime();
}

static inline void batches_step(struct batches *b, int i)
{
	if ((i + 1) % b->per == 0) {
		double now = MPI_Wtime();

		b->t[b->count++] = (now - b->start) / b->per;
		b->start = now;
	}
}

static int batches_cmp(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;

	return a < c ? -1 : a > c;
}

static inline double batches_median(struct batches *b)
{
	if (!b->count)
		return 0;
	qsort(b->t, (size_t)b->count, sizeof(double), batches_cmp);
	return b->t[b->count / 2];
}

static inline void batches_free(struct batches *b)
{
	free(b->t);
	b->t = NULL;
}

#endif
