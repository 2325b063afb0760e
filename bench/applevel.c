/* applevel.c - the MPI half of bench/applevel.
 *
 * usage: stasis-bench-applevel SIZE_MIB MODE ORDER [RAW_DIR]
 *   MODE   single | partner | rs | global | partner+global | dump
 *          (partner+global: one PARTNER checkpoint with global_flush on;
 *          single-steady: the 4th SINGLE checkpoint of the run, written over
 *          the files of the 1st, which the cache pruned: the steady state)
 *   ORDER  0: memcpy floor first, then the checkpoint; 1: the other way
 *   RAW_DIR (MODE dump): every rank writes its SIZE_MIB of data to
 *          RAW_DIR/rank-<r>.raw, the bytes bench/applevel copies with dd.
 *
 * Every rank fills SIZE_MIB with xorshift64 output (no zero pages, nothing a
 * compressor could shrink), protects it under id 0 (in a job configured at
 * MODE's level: STASIS_LEVEL), and then, in ORDER:
 *   - the memcpy floor M: all ranks at once copy their data into freshly
 *     malloc'ed (never touched) memory, which is then freed;
 *   - the checkpoint at MODE's level: the time the application is blocked
 *     in stasis_checkpoint, and the time until it is established at its
 *     level (stasis_checkpoint_wait returned on every rank).
 * Each phase is timed with MPI_Wtime between barriers; the reported time is
 * the maximum over ranks. Rank 0 prints one JSON object. stasis_init reads
 * STASIS_JOB, STASIS_LOCAL_DIR, STASIS_GLOBAL_DIR, STASIS_NODE, ... from the
 * environment: bench/applevel gives each launch a fresh job.
 */
#include <mpi.h>
#include <stasis.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank;

static void die(const char *what, int ret)
{
	fprintf(stderr, "applevel: rank %d: %s: %s\n", rank, what,
		ret < 0 ? stasis_strerror(ret) : strerror(errno));
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static void fill(uint64_t *buf, size_t n, uint64_t seed)
{
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (seed * 0xbf58476d1ce4e5b9ull);

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = x;
	}
}

/* The maximum over ranks of the time this rank spent in the phase. */
static double max_time(double t)
{
	double m;

	MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return m;
}

static double time_memcpy(const void *data, size_t size)
{
	void *fresh = malloc(size);
	double t0, t1;

	if (!fresh)
		die("malloc", -ENOMEM);
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	memcpy(fresh, data, size);
	t1 = MPI_Wtime();
	/* Keep the copy from being optimized away. */
	if (((volatile unsigned char *)fresh)[size - 1] != ((const unsigned char *)data)[size - 1])
		die("memcpy check", -EIO);
	free(fresh);
	return max_time(t1 - t0);
}

/* One checkpoint: the time the application is blocked in stasis_checkpoint
 * (*block), and the time until it is established at its level, every rank's
 * upgrade done (the return value); both the maximum over ranks. */
static double time_checkpoint(int level, double *block)
{
	double t0, t1, t2;
	int ret;

	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	ret = stasis_checkpoint(level);
	t1 = MPI_Wtime();
	if (ret)
		die("stasis_checkpoint", ret);
	ret = stasis_checkpoint_wait();
	t2 = MPI_Wtime();
	if (ret)
		die("stasis_checkpoint_wait", ret);
	*block = max_time(t1 - t0);
	return max_time(t2 - t0);
}

static int write_raw(const char *dir, const void *data, size_t size)
{
	char path[4096];
	const char *p = data;
	int fd;

	snprintf(path, sizeof(path), "%s/rank-%d.raw", dir, rank);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	while (size) {
		ssize_t n = write(fd, p, size);

		if (n <= 0) {
			close(fd);
			return -1;
		}
		p += n;
		size -= (size_t)n;
	}
	return close(fd);
}

int main(int argc, char **argv)
{
	int size_ranks, order, ret;
	size_t size;
	uint64_t *data;
	const char *mode;
	double m = 0, c = 0, block = 0, fill_s;
	int level = 0, warmup = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size_ranks);
	if (argc < 4 || atol(argv[1]) <= 0) {
		if (rank == 0)
			fprintf(stderr, "usage: %s SIZE_MIB MODE ORDER [RAW_DIR]\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	size = (size_t)atol(argv[1]) << 20;
	mode = argv[2];
	order = atoi(argv[3]);
	if (!strcmp(mode, "single"))
		level = STASIS_LEVEL_SINGLE;
	else if (!strcmp(mode, "partner"))
		level = STASIS_LEVEL_PARTNER;
	else if (!strcmp(mode, "rs"))
		level = STASIS_LEVEL_RS;
	else if (!strcmp(mode, "global"))
		level = STASIS_LEVEL_GLOBAL;
	else if (!strcmp(mode, "partner+global"))
		level = STASIS_LEVEL_PARTNER, setenv("STASIS_GLOBAL_FLUSH", "on", 1);
	else if (!strcmp(mode, "single-steady"))
		level = STASIS_LEVEL_SINGLE, warmup = 3;
	else if (strcmp(mode, "dump") || argc < 5) {
		if (rank == 0)
			fprintf(stderr, "applevel: unknown mode '%s'\n", mode);
		MPI_Finalize();
		return 2;
	}

	/* Configured at the level it checkpoints at, as a job checkpointing at
	 * AUTO is: libstasis then reserves the cache room for the copies the
	 * level makes each rank hold (a partner's image, rs parity) when the
	 * data is protected, as it does for the rank's own image. */
	if (level == STASIS_LEVEL_PARTNER)
		setenv("STASIS_LEVEL", "partner", 1);
	else if (level == STASIS_LEVEL_RS)
		setenv("STASIS_LEVEL", "rs", 1);

	/* Resident, non-zero, incompressible data: the application's state. */
	fill_s = MPI_Wtime();
	data = malloc(size);
	if (!data)
		die("malloc", -ENOMEM);
	fill(data, size / sizeof(*data), (uint64_t)rank + 1);
	fill_s = max_time(MPI_Wtime() - fill_s);

	if (!strcmp(mode, "dump")) {
		if (write_raw(argv[4], data, size))
			die(argv[4], 0);
		MPI_Barrier(MPI_COMM_WORLD);
		free(data);
		MPI_Finalize();
		return 0;
	}

	ret = stasis_init(MPI_COMM_WORLD, NULL);
	if (ret)
		die("stasis_init", ret);
	ret = stasis_protect(0, data, size, STASIS_BYTE);
	if (ret)
		die("stasis_protect", ret);

	for (int i = 0; i < warmup; i++)
		time_checkpoint(level, &block);
	if (order == 0)
		m = time_memcpy(data, size);
	c = time_checkpoint(level, &block);
	if (order != 0)
		m = time_memcpy(data, size);

	ret = stasis_finalize();
	if (ret)
		die("stasis_finalize", ret);
	if (rank == 0)
		printf("{\"mode\": \"%s\", \"ranks\": %d, \"size_mib\": %zu, \"order\": %d, "
		       "\"fill_s\": %.4f, \"memcpy_s\": %.4f, \"ckpt_s\": %.4f, \"block_s\": %.4f}\n",
		       mode, size_ranks, size >> 20, order, fill_s, m, c, block);
	free(data);
	MPI_Finalize();
	return 0;
}
