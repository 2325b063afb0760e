/* jacobi2d: an ordinary MPI program, with nothing of Stasis in it, for the
 * quick start's transparent checkpoint/restart demo (docs/demo.md).
 *
 *   mpicc.openmpi -O2 -o jacobi2d jacobi2d.c -lm
 *   mpirun.openmpi -np 4 ./jacobi2d [N [STEPS [REPORT]]]
 *
 * Heat on a square plate of N x N interior cells (default 512): the top
 * edge held at 100, the left edge at 100 * sin(pi * y), the other two at 0,
 * the inside starting at 0. STEPS Jacobi sweeps (default 12000): every cell
 * becomes the mean of its four neighbours. The ranks form a 2-D Cartesian
 * grid (MPI_Dims_create, MPI_Cart_create); each holds a block with one halo
 * cell on each side and swaps its edges with its four neighbours every
 * sweep (MPI_Irecv/MPI_Isend/MPI_Waitall, the columns through an
 * MPI_Type_vector). Every REPORT sweeps (default 1000) the ranks agree on the
 * largest change of a cell (MPI_Allreduce, MPI_MAX) and rank 0 prints it.
 *
 * At the end rank 0 prints one line:
 *   jacobi2d: done N=512 steps=12000 checksum=<16 hex digits> mean=<T>
 * The checksum is a sum modulo 2^64 of a hash of every cell's global index
 * and the bits of its value, the mean temperature a sum of the cells in
 * fixed point (both MPI_Reduce of MPI_UINT64_T: exact, in any order), so
 * the line is the same for any number of ranks and any MPI, and one
 * changed bit anywhere changes the checksum. Every cell is computed by the same
 * expression in the same order whatever the decomposition, so the grid is
 * bit-identical across runs: a job checkpointed, killed and restarted
 * under another MPI must print the same line as one that never stopped. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x) /* splitmix64's finalizer */
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static int arg(int argc, char **argv, int i, int dflt, int min)
{
	if (argc <= i)
		return dflt;
	char *end;
	long v = strtol(argv[i], &end, 10);
	if (*end || v < min || v > 1 << 20) {
		fprintf(stderr, "usage: jacobi2d [N [STEPS [REPORT]]]: bad '%s'\n", argv[i]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return (int)v;
}

/* first index and count of block `coord` of `ncoords` over n cells */
static void block(int n, int ncoords, int coord, int *first, int *count)
{
	int q = n / ncoords, r = n % ncoords;
	*first = coord * q + (coord < r ? coord : r);
	*count = q + (coord < r);
}

int main(int argc, char **argv)
{
	int size, rank, dims[2] = { 0, 0 }, periods[2] = { 0, 0 }, coords[2];
	int up, down, left, right;
	MPI_Comm cart;

	MPI_Init(&argc, &argv);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int n = arg(argc, argv, 1, 512, 2);
	int steps = arg(argc, argv, 2, 12000, 1);
	int report = arg(argc, argv, 3, 1000, 1);
	MPI_Dims_create(size, 2, dims);
	MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
	MPI_Comm_rank(cart, &rank);
	MPI_Cart_coords(cart, rank, 2, coords);
	MPI_Cart_shift(cart, 0, 1, &up, &down);    /* dimension 0: rows */
	MPI_Cart_shift(cart, 1, 1, &left, &right); /* dimension 1: columns */
	if (n < dims[0] || n < dims[1]) {
		if (rank == 0)
			fprintf(stderr, "jacobi2d: N=%d is too small for %dx%d ranks\n", n, dims[0], dims[1]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	int y0, ny, x0, nx;
	block(n, dims[0], coords[0], &y0, &ny);
	block(n, dims[1], coords[1], &x0, &nx);
	const int w = nx + 2; /* a row of the block with its halo cells */
	double *a = calloc((size_t)(ny + 2) * w, sizeof(double));
	double *b = calloc((size_t)(ny + 2) * w, sizeof(double));
	if (!a || !b) {
		fprintf(stderr, "jacobi2d: rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
#define AT(p, i, j) (p)[(size_t)(i) * w + (j)]
	/* The plate's edges live in the halo of the blocks along them and are
	 * never received into (their neighbour is MPI_PROC_NULL). */
	for (int i = 0; i < ny + 2; i++) {
		if (coords[1] == 0) {
			double y = (y0 + i - 0.5) / n, t = y <= 0 || y >= 1 ? 0 : 100 * sin(M_PI * y);
			AT(a, i, 0) = AT(b, i, 0) = t;
		}
	}
	if (coords[0] == 0)
		for (int j = 0; j < w; j++)
			AT(a, 0, j) = AT(b, 0, j) = 100;

	MPI_Datatype column;
	MPI_Type_vector(ny, 1, w, MPI_DOUBLE, &column);
	MPI_Type_commit(&column);

	if (rank == 0) {
		printf("jacobi2d: N=%d steps=%d on %d ranks (%dx%d)\n", n, steps, size, dims[0], dims[1]);
		fflush(stdout);
	}

	for (int s = 1; s <= steps; s++) {
		MPI_Request rq[8];
		MPI_Irecv(&AT(a, 0, 1), nx, MPI_DOUBLE, up, 0, cart, &rq[0]);
		MPI_Irecv(&AT(a, ny + 1, 1), nx, MPI_DOUBLE, down, 1, cart, &rq[1]);
		MPI_Irecv(&AT(a, 1, 0), 1, column, left, 2, cart, &rq[2]);
		MPI_Irecv(&AT(a, 1, nx + 1), 1, column, right, 3, cart, &rq[3]);
		MPI_Isend(&AT(a, 1, 1), nx, MPI_DOUBLE, up, 1, cart, &rq[4]);
		MPI_Isend(&AT(a, ny, 1), nx, MPI_DOUBLE, down, 0, cart, &rq[5]);
		MPI_Isend(&AT(a, 1, 1), 1, column, left, 3, cart, &rq[6]);
		MPI_Isend(&AT(a, 1, nx), 1, column, right, 2, cart, &rq[7]);
		MPI_Waitall(8, rq, MPI_STATUSES_IGNORE);

		double change = 0;
		for (int i = 1; i <= ny; i++)
			for (int j = 1; j <= nx; j++) {
				double v = 0.25 * ((AT(a, i - 1, j) + AT(a, i + 1, j)) +
						   (AT(a, i, j - 1) + AT(a, i, j + 1)));
				double d = fabs(v - AT(a, i, j));
				if (d > change)
					change = d;
				AT(b, i, j) = v;
			}
		double *t = a;
		a = b;
		b = t;

		if (s % report == 0 || s == steps) {
			double most;
			MPI_Allreduce(&change, &most, 1, MPI_DOUBLE, MPI_MAX, cart);
			if (rank == 0) {
				printf("jacobi2d: step %d/%d max change %.3e\n", s, steps, most);
				fflush(stdout);
			}
		}
	}

	/* [0] the checksum; [1] the heat in fixed point, 2^-32 degrees:
	 * integer sums, exact in any order */
	uint64_t mine[2] = { 0, 0 }, total[2];
	for (int i = 1; i <= ny; i++)
		for (int j = 1; j <= nx; j++) {
			uint64_t bits, g = (uint64_t)(y0 + i - 1) * (uint64_t)n + (uint64_t)(x0 + j - 1);
			memcpy(&bits, &AT(a, i, j), sizeof(bits));
			mine[0] += mix(mix(g) ^ bits);
			mine[1] += (uint64_t)llround(ldexp(AT(a, i, j), 32));
		}
	MPI_Reduce(mine, total, 2, MPI_UINT64_T, MPI_SUM, 0, cart);
	if (rank == 0) {
		printf("jacobi2d: done N=%d steps=%d checksum=%016llx mean=%.9f\n", n, steps,
		       (unsigned long long)total[0], ldexp((double)total[1], -32) / ((double)n * n));
		fflush(stdout);
	}
	MPI_Type_free(&column);
	MPI_Comm_free(&cart);
	free(a);
	free(b);
	MPI_Finalize();
	return 0;
}
