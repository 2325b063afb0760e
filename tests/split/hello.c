/* hello.c - a rank that sleeps and checks its own memory (tests/split).
 *
 *   hello ITERATIONS [SLEEP_MS [dup|late|- [NO_SLEEP_FILE|- [BALLAST_MIB]]]]
 *
 * With "dup", the ranks hold a communicator of their own (MPI_Comm_dup)
 * during the iterations and reduce over it at the end. With "late", rank 0
 * sends rank 1 a message at the start that rank 1 receives only at the end:
 * it is in flight all along.
 *
 * Each iteration checks that a 4 MiB heap buffer and a stack array still
 * hold what the previous iteration wrote, rewrites them for this
 * iteration, prints one line and sleeps. At the end the ranks agree on the
 * total with one Allreduce and rank 0 prints PASS. A checkpoint taken at
 * any moment of the sleeps, killed and restarted, must end the same.
 * Once NO_SLEEP_FILE exists (checked at each iteration) the ranks no longer
 * sleep: a test whose events are over lets the job run to its end at once.
 * BALLAST_MIB more MiB of heap, written once and checked at the end, make
 * the image that much larger (a write that takes long enough for a node
 * agent to copy pieces of it while it is written).
 *
 * A private mapping of a file deleted at once, never touched until the
 * end, must then still read as the file did: its pages exist only in the
 * image (the page rule of docs/format.md, "Process memory in images"). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define WORDS (1u << 19)
#define GONE_WORDS (16u * 4096 / 8)   /* the deleted file's 16 pages */

static void fill(uint64_t *v, size_t n, int rank, int it)
{
	for (size_t i = 0; i < n; i++)
		v[i] = ((uint64_t)rank << 48) ^ ((uint64_t)it << 24) ^ i;
}

static int check(const uint64_t *v, size_t n, int rank, int it)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] != (((uint64_t)rank << 48) ^ ((uint64_t)it << 24) ^ i))
			return (int)i;
	return -1;
}

/* The file's words (iteration 1000), mapped privately, the file deleted;
 * NULL if no file can be made here. */
static const uint64_t *map_gone(int rank)
{
	const char *dir = getenv("TMPDIR");
	char name[4096];
	uint64_t *v = malloc(GONE_WORDS * sizeof(uint64_t));
	void *p = MAP_FAILED;
	int fd;

	snprintf(name, sizeof(name), "%s/hello-gone.XXXXXX", dir && *dir ? dir : "/tmp");
	fd = v ? mkstemp(name) : -1;
	if (fd >= 0) {
		fill(v, GONE_WORDS, rank, 1000);
		if (write(fd, v, GONE_WORDS * sizeof(uint64_t)) == (ssize_t)(GONE_WORDS * sizeof(uint64_t)))
			p = mmap(NULL, GONE_WORDS * sizeof(uint64_t), PROT_READ, MAP_PRIVATE, fd, 0);
		unlink(name);
		close(fd);
	}
	free(v);
	return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 20;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 50;
	uint64_t stack[512], *heap = malloc(WORDS * sizeof(uint64_t)), sum = 0, total = 0, expect = 0;
	const uint64_t *gone;
	uint64_t *ballast;
	size_t ballast_n;
	struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000 };
	MPI_Comm comm = MPI_COMM_WORLD;
	int late;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc > 3 && !strcmp(argv[3], "dup"))
		MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	late = argc > 3 && !strcmp(argv[3], "late") && size > 1;
	if (late && rank == 0)
		MPI_Send(&iters, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
	gone = map_gone(rank);
	ballast_n = argc > 5 ? (size_t)atol(argv[5]) << 17 : 0;   /* words */
	ballast = ballast_n ? malloc(ballast_n * sizeof(uint64_t)) : NULL;
	if (ballast)
		fill(ballast, ballast_n, rank, 2000);
	/* every rank's file is unlinked and closed before rank 0 prints an
	 * iteration, which the tests wait for to checkpoint: one taken
	 * between mkstemp and unlink would save fd 3 by a path then gone */
	MPI_Barrier(MPI_COMM_WORLD);
	fill(heap, WORDS, rank, -1);
	fill(stack, 512, rank, -1);
	for (int it = 0; it < iters; it++) {
		int bad = check(heap, WORDS, rank, it - 1), bads = check(stack, 512, rank, it - 1);

		if (bad >= 0 || bads >= 0) {
			printf("FAIL rank %d iteration %d: heap word %d stack word %d\n", rank, it, bad, bads);
			fflush(stdout);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
		fill(heap, WORDS, rank, it);
		fill(stack, 512, rank, it);
		sum += (uint64_t)(rank + 1) * (uint64_t)it;
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (argc > 4 && sleep_ms && strcmp(argv[4], "-") && access(argv[4], F_OK) == 0)
			ts.tv_sec = ts.tv_nsec = sleep_ms = 0;
		nanosleep(&ts, NULL);
	}
	if (gone && check(gone, GONE_WORDS, rank, 1000) >= 0) {
		printf("FAIL rank %d: the deleted file's word %d\n", rank, check(gone, GONE_WORDS, rank, 1000));
		fflush(stdout);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	if (ballast && check(ballast, ballast_n, rank, 2000) >= 0) {
		printf("FAIL rank %d: ballast word %d\n", rank, check(ballast, ballast_n, rank, 2000));
		fflush(stdout);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	if (late && rank == 1) {
		int got = 0;

		MPI_Recv(&got, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (got != iters)
			sum = 0;   /* the total will not match: FAIL */
	}
	MPI_Allreduce(&sum, &total, 1, MPI_UINT64_T, MPI_SUM, comm);
	if (comm != MPI_COMM_WORLD)
		MPI_Comm_free(&comm);
	for (int r = 0; r < size; r++)
		expect += (uint64_t)(r + 1) * (uint64_t)iters * (uint64_t)(iters - 1) / 2;
	if (rank == 0)
		printf("%s ranks=%d iterations=%d total=%llu\n", total == expect ? "PASS" : "FAIL", size,
		       iters, (unsigned long long)total);
	MPI_Finalize();
	free(heap);
	free(ballast);
	return total == expect ? 0 : 1;
}
