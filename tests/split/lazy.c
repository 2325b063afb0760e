/* lazy.c - a rank that changes its mappings while its image is still being
 * read back lazily (docs/split.md, "Lazy restore").
 *
 *   lazy ITERATIONS SLEEP_MS [mpix]
 *
 * Each rank maps five regions A-E of MIB MiB and fills them with words no
 * two alike (splitmix64 of rank, region and index). An iteration is 20
 * sleeps of SLEEP_MS, then "rank R iteration I". A rank that finds its pid
 * changed after a sleep was restarted, and at once, while most of its pages
 * are not in yet:
 *   - the first 8 MiB of A go to rank ^ 1 (2 ranks) in one message, and
 *     the peer's come back: its MPI reads pages that are not in yet;
 *   - madvise(MADV_DONTNEED) of a hole in B: reads back as zeros;
 *   - munmap of a hole in C, mapped again: zeros;
 *   - mremap of D to another address: all of D's words there;
 *   - fork: the child checks B, D and E (its own copy, served too);
 *   - then every word of A-E, holes zero; the holes are filled again.
 * With "mpix", MPIX_Checkpoint comes first, before the rank touches its
 * pages; a restart from it checks every word and prints "rank R mpix
 * restart ok", then goes on as above.
 * Then it prints "rank R restarted K". At the end every rank checks every
 * word and rank 0 prints "PASS ranks=N iterations=I restarts=K". A check
 * that fails prints "rank R: FAIL ..." and exits with status 1. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stasis_mpix.h"

#define MIB 24
#define LEN ((size_t)MIB << 20)
#define WORDS (LEN / 8)
#define HOLE_AT (WORDS / 2)             /* the holes: 4 MiB from the middle on */
#define HOLE_WORDS ((size_t)(4 << 20) / 8)
#define XCHG ((size_t)8 << 20)           /* A's first 8 MiB go to rank ^ 1 */

static int rank;
static uint64_t *reg[5], got[XCHG / 8];

static uint64_t word_of(int rk, unsigned r, uint64_t i)
{
	uint64_t z = ((uint64_t)rk << 48 | (uint64_t)r << 40 | i) + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 1;
}

static uint64_t word(unsigned r, uint64_t i)
{
	return word_of(rank, r, i);
}

static void fail(const char *what, unsigned r, size_t i, uint64_t got)
{
	printf("rank %d: FAIL %s: region %c word %zu is %#llx, expected %#llx\n", rank, what,
	       'A' + r, i, (unsigned long long)got,
	       (unsigned long long)(what[0] == 'z' ? 0 : word(r, i)));
	fflush(stdout);
	_exit(1);
}

static int in_hole(unsigned r, size_t i)
{
	return (r == 1 || r == 2) && i >= HOLE_AT && i < HOLE_AT + HOLE_WORDS;
}

/* every word of region r; the holes zero when holes */
static void check(unsigned r, int holes, const char *who)
{
	for (size_t i = 0; i < WORDS; i++) {
		uint64_t want = holes && in_hole(r, i) ? 0 : word(r, i);

		if (reg[r][i] != want)
			fail(want ? who : "zero", r, i, reg[r][i]);
	}
}

static void fill(unsigned r, size_t from, size_t n)
{
	for (size_t i = from; i < from + n; i++)
		reg[r][i] = word(r, i);
}

static void *map(void)
{
	void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	return p;
}

/* the mappings over [a, b), for a failure's message */
static void print_maps(uint64_t a, uint64_t b)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long s, e;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &s, &e) == 2 && s < b && e > a)
			printf("rank %d: mapped %s", rank, line);
	if (f)
		fclose(f);
}

static void restarted(int mpix, pid_t *pid)
{
	static int restarts;
	uint64_t *d;
	pid_t child;
	int status;

	if (mpix) {   /* before it touches anything */
		MPIX_CR_state_t st = MPIX_CR_STATE_ERROR;

		MPIX_Checkpoint(&st);
		if (st == MPIX_CR_STATE_RESTART) {
			for (unsigned r = 0; r < 5; r++)
				check(r, 0, "after a restart from MPIX_Checkpoint");
			printf("rank %d mpix restart ok\n", rank);
		} else if (st != MPIX_CR_STATE_CHECKPOINT) {
			printf("rank %d: FAIL MPIX_Checkpoint state %d\n", rank, (int)st);
			_exit(1);
		}
		*pid = getpid();
	}
	/* while the image comes in: the peer's MPI reads A (a large message:
	 * single copy from this process, process_vm_readv, where the MPI does) */
	if (MPI_Sendrecv(reg[0], (int)(XCHG / 8), MPI_UINT64_T, rank ^ 1, 7, got, (int)(XCHG / 8),
			 MPI_UINT64_T, rank ^ 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
		printf("rank %d: FAIL MPI_Sendrecv\n", rank);
		_exit(1);
	}
	for (size_t i = 0; i < XCHG / 8; i++)
		if (got[i] != word_of(rank ^ 1, 0, i)) {
			printf("rank %d: FAIL word %zu of rank %d's region A is %#llx\n", rank, i,
			       rank ^ 1, (unsigned long long)got[i]);
			_exit(1);
		}
	if (madvise(reg[1] + HOLE_AT, HOLE_WORDS * 8, MADV_DONTNEED) != 0 ||
	    munmap(reg[2] + HOLE_AT, HOLE_WORDS * 8) != 0 ||
	    mmap(reg[2] + HOLE_AT, HOLE_WORDS * 8, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
		perror("madvise/munmap/mmap");
		exit(1);
	}
	d = mremap(reg[3], LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, map());
	if (d == MAP_FAILED) {
		printf("rank %d: FAIL mremap of region D at %p: %m\n", rank, (void *)reg[3]);
		print_maps((uint64_t)reg[3], (uint64_t)reg[3] + LEN);
		fflush(stdout);
		_exit(1);
	}
	reg[3] = d;
	status = -1;
	child = fork();
	if (child == 0) {
		check(1, 1, "in the child");
		check(3, 0, "in the child");
		check(4, 0, "in the child");
		_exit(0);
	}
	if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		printf("rank %d: FAIL the forked child ended with status %#x (%m)\n", rank, status);
		fflush(stdout);
		_exit(1);
	}
	for (unsigned r = 0; r < 5; r++)
		check(r, 1, "after the restart");
	fill(1, HOLE_AT, HOLE_WORDS);
	fill(2, HOLE_AT, HOLE_WORDS);
	restarts++;
	printf("rank %d restarted %d\n", rank, restarts);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int size, iters = argc > 1 ? atoi(argv[1]) : 10, restarts = 0, all;
	long ms = argc > 2 ? atol(argv[2]) : 5;
	int mpix = argc > 3 && !strcmp(argv[3], "mpix");
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	pid_t pid = getpid();

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (unsigned r = 0; r < 5; r++) {
		reg[r] = map();
		fill(r, 0, WORDS);
	}
	for (int it = 0; it < iters; it++) {
		for (int s = 0; s < 20; s++) {
			nanosleep(&ts, NULL);
			if (getpid() != pid) {
				pid = getpid();
				restarted(mpix, &pid);
				restarts++;
			}
		}
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
	}
	for (unsigned r = 0; r < 5; r++)
		check(r, 0, "at the end");
	MPI_Reduce(&restarts, &all, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d restarts=%d\n", size, iters, all);
	MPI_Finalize();
	return 0;
}
