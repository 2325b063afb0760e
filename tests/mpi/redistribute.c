/* redistribute.c - a distributed array checkpointed by N ranks at the GLOBAL
 * level and recovered by M ranks.
 *
 * usage: redistribute write|read|local|differ GLOBAL_COUNT
 *   write: each rank protects its block of a GLOBAL_COUNT-element array
 *          (element i = 1.5 * i + 7) and a step counter (42 on every rank),
 *          and checkpoints them at the GLOBAL level;
 *   local: the same at the SINGLE level (which cannot be redistributed);
 *   rs:    the same at the RS level, waiting for the parity (the test runs
 *          it on distinct nodes, then loses some of their caches);
 *   differ: like write, but the counter differs between ranks (so it
 *          cannot follow the job to another number of ranks);
 *   read:  each rank protects its (new) block, recovers, and checks every
 *          element; prints "redistribute: OK" on rank 0, or the error;
 *   readint: protects the array with 4-byte elements (it was written with
 *          8-byte ones): recovery must refuse, never reinterpret;
 *   readbyte: protects the counter as one byte (it was 4): must refuse.
 * Blocks are uneven on purpose: rank r gets (count * (r + 1)) / size -
 * (count * r) / size elements.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stasis.h"

static void block(size_t count, int rank, int size, size_t *off, size_t *n)
{
	*off = count * (size_t)rank / (size_t)size;
	*n = count * (size_t)(rank + 1) / (size_t)size - *off;
}

int main(int argc, char **argv)
{
	int rank, size, ret, bad = 0, anybad = 0, step = 0;
	size_t count, off, n;
	double *a;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 3) {
		fprintf(stderr, "usage: redistribute write|read|local GLOBAL_COUNT\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	count = strtoull(argv[2], NULL, 10);
	block(count, rank, size, &off, &n);
	a = calloc(n ? n : 1, sizeof(*a));
	ret = stasis_init(MPI_COMM_WORLD, NULL);
	ret = ret ? ret : stasis_protect(0, &step, 1, strcmp(argv[1], "readbyte") == 0 ? STASIS_BYTE
										       : STASIS_INT);
	ret = ret ? ret : stasis_protect_distributed(1, a, n, strcmp(argv[1], "readint") == 0 ?
						     STASIS_INT : STASIS_DOUBLE, count, off);
	if (!ret && strncmp(argv[1], "read", 4) != 0) {
		for (size_t i = 0; i < n; i++)
			a[i] = 1.5 * (double)(off + i) + 7;
		step = strcmp(argv[1], "differ") == 0 ? 42 + rank : 42;
		ret = stasis_checkpoint(strcmp(argv[1], "local") == 0 ? STASIS_LEVEL_SINGLE :
					strcmp(argv[1], "rs") == 0 ? STASIS_LEVEL_RS : STASIS_LEVEL_GLOBAL);
		ret = ret ? ret : stasis_checkpoint_wait();
	} else if (!ret) {
		ret = stasis_recover();
		bad |= !ret && step != 42;
		for (size_t i = 0; !ret && i < n; i++)
			bad |= a[i] != 1.5 * (double)(off + i) + 7;
	}
	if (ret)
		fprintf(stderr, "redistribute: rank %d: %s\n", rank, stasis_strerror(ret));
	bad |= ret != 0;
	MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0)
		printf("redistribute: %s (%d ranks, %zu elements)\n", anybad ? "FAIL" : "OK", size,
		       count);
	stasis_finalize();
	free(a);
	MPI_Finalize();
	return anybad;
}
