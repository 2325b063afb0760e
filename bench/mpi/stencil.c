/* stencil.c - a 1-D decomposed 2-D Jacobi stencil: halo exchange with both
 * neighbours and an Allreduce of the residual every iteration; prints the
 * residual (the same natively and under Stasis) and the time.
 * usage: stencil N ITERATIONS (an N x N grid split in rows) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int rank, size, n = argc > 1 ? atoi(argv[1]) : 512, iters = argc > 2 ? atoi(argv[2]) : 200;
	double *a, *b, res = 0, t;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int rows = n / size, up = rank ? rank - 1 : MPI_PROC_NULL,
	    down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
	a = calloc((size_t)(rows + 2) * n, sizeof(double));
	b = calloc((size_t)(rows + 2) * n, sizeof(double));
	for (int j = 0; j < n; j++)
		if (rank == 0)
			a[n + j] = b[n + j] = 100.0;
	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (int it = 0; it < iters; it++) {
		double local = 0;

		MPI_Sendrecv(a + n, n, MPI_DOUBLE, up, 0, a + (size_t)(rows + 1) * n, n, MPI_DOUBLE, down,
			     0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Sendrecv(a + (size_t)rows * n, n, MPI_DOUBLE, down, 1, a, n, MPI_DOUBLE, up, 1,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (int i = 1; i <= rows; i++)
			for (int j = 1; j < n - 1; j++) {
				size_t k = (size_t)i * n + j;
				if (rank == 0 && i == 1)
					continue;   /* fixed boundary row */
				b[k] = 0.25 * (a[k - 1] + a[k + 1] + a[k - n] + a[k + n]);
				local += (b[k] - a[k]) * (b[k] - a[k]);
			}
		double *x = a;
		a = b;
		b = x;
		MPI_Allreduce(&local, &res, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	}
	t = MPI_Wtime() - t;
	if (rank == 0)
		printf("residual %.12e seconds %.4f\n", res, t);
	free(a);
	free(b);
	MPI_Finalize();
	return 0;
}
