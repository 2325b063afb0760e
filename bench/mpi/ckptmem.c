/* ckptmem.c - a rank holding MIB MiB of data that no page elision can
 * shrink, for bench/mpi/run.py's checkpoint and restart figures.
 *
 *   ckptmem MIB
 *
 * Each rank fills MIB MiB of heap with words that are all different and
 * non-zero (splitmix64 of rank and index), then rank 0 prints READY after
 * a barrier. The ranks then sleep in steps of 10 ms, outside MPI, until a
 * file named "stop" exists in the working directory. A rank that finds its
 * pid changed between two steps was restarted: it prints
 * "RESUMED rank K" once per restart. At the end every rank verifies its data
 * and rank 0 prints "PASS ranks=N mib=MIB" or FAIL (exit status 1). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t word(uint64_t rank, uint64_t i)
{
	uint64_t z = (rank << 40 | i) + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 1;
}

int main(int argc, char **argv)
{
	int rank, size, bad = 0, allbad = 0;
	size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256, n = mib << 17;
	uint64_t *v;
	pid_t pid = getpid();
	struct timespec step = { 0, 10 * 1000000 };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	v = malloc(n * sizeof(*v));
	if (!v) {
		fprintf(stderr, "rank %d: cannot allocate %zu MiB\n", rank, mib);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (size_t i = 0; i < n; i++)
		v[i] = word((uint64_t)rank, i);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		printf("READY\n");
		fflush(stdout);
	}
	while (access("stop", F_OK) != 0) {
		nanosleep(&step, NULL);
		if (getpid() != pid) {
			pid = getpid();
			printf("RESUMED rank %d\n", rank);
			fflush(stdout);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (v[i] != word((uint64_t)rank, i)) {
			fprintf(stderr, "rank %d: word %zu differs\n", rank, i);
			bad = 1;
			break;
		}
	MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("%s ranks=%d mib=%zu\n", allbad ? "FAIL" : "PASS", size, mib);
		fflush(stdout);
	}
	MPI_Finalize();
	free(v);
	return allbad ? 1 : 0;
}
