/* memory.c - an MPI program that checks that, as the split process's upper
 * half, everything it maps lies in the upper range [0x100000000000,
 * 0x201000000000) (docs/split.md, "Upper-half memory"): malloc small and
 * large, calloc, posix_memalign, anonymous mmap with and without a hint
 * outside the range, a file mapping, an mremap that must move, a freed
 * range mapped again, 8 threads (stacks, TLS, their malloc arenas), the
 * main thread's TLS, the code of the program, its libc and its libmpi,
 * every object its ld.so loaded, and /proc/self/maps: the program's, the
 * upper libc's and Stasis's libmpi's mappings in range, none of the real
 * MPI library's there. Built with either MPI's mpicc; rank 0 prints "PASS"
 * when every rank agrees, else each rank prints what failed. Natively it
 * fails (nothing puts the program there). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#define LO 0x100000000000ull
#define HI 0x201000000000ull
#define THREADS 8

static int rank, fails;
static __thread int tls_var;

static int in_range(const void *p, size_t len)
{
	uint64_t a = (uint64_t)(uintptr_t)p;

	return a >= LO && a + len <= HI;
}

static void check(const char *what, const void *p, size_t len)
{
	if (!in_range(p, len)) {
		fails++;
		printf("rank %d: FAIL %s at %p (+%zu) is outside the upper range\n", rank, what, p,
		       len);
	}
}

static void fail(const char *what)
{
	fails++;
	printf("rank %d: FAIL %s\n", rank, what);
}

struct thread_out {
	void *stack, *tls, *small, *large;
};

static void *thread_main(void *arg)
{
	struct thread_out *o = arg;
	int local = 0;

	o->stack = &local;
	o->tls = &tls_var;
	o->small = malloc(100);
	o->large = malloc(300 << 10);
	return NULL;
}

static void threads(void)
{
	pthread_t t[THREADS];
	struct thread_out o[THREADS];

	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, thread_main, &o[i]) != 0) {
			fail("pthread_create");
			return;
		}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		check("a thread's stack", o[i].stack, sizeof(int));
		check("a thread's TLS variable", o[i].tls, sizeof(int));
		check("a thread's malloc(100)", o[i].small, 100);
		check("a thread's malloc(300 KiB)", o[i].large, 300 << 10);
		free(o[i].small);
		free(o[i].large);
	}
}

static void allocations(const char *prog)
{
	void *p, *q, *r;
	char *m;
	int fd;

	p = malloc(100);
	check("malloc(100)", p, 100);
	q = malloc(64 << 20);
	check("malloc(64 MiB)", q, 64 << 20);
	r = calloc(1000, 8);
	check("calloc(1000, 8)", r, 8000);
	free(p);
	free(q);
	free(r);
	if (posix_memalign(&p, 1 << 16, 1 << 20) != 0)
		fail("posix_memalign");
	else
		check("posix_memalign(64 KiB, 1 MiB)", p, 1 << 20);
	free(p);

	p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		fail("mmap anonymous");
	else
		check("mmap anonymous", p, 1 << 20);
	q = mmap((void *)0x600000000000ull, 1 << 20, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED)
		fail("mmap anonymous with a hint");
	else
		check("mmap anonymous with a hint outside the range", q, 1 << 20);
	munmap(q, 1 << 20);

	/* a range freed, then mapped again: the hole is reused */
	if (p != MAP_FAILED) {
		munmap(p, 1 << 20);
		q = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (q != p) {
			fails++;
			printf("rank %d: FAIL a freed megabyte was not mapped again at %p but at %p\n",
			       rank, p, q);
		}
		if (q != MAP_FAILED)
			munmap(q, 1 << 20);
	}

	fd = open(prog, O_RDONLY);
	if (fd < 0) {
		fail("open the program");
	} else {
		p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED || memcmp(p, "\177ELF", 4) != 0)
			fail("mmap of the program's file");
		else
			check("a file mapping", p, 4096);
		if (p != MAP_FAILED)
			munmap(p, 4096);
		close(fd);
	}

	/* growing the first page of two in place is impossible: mremap moves it */
	m = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		fail("mmap two pages");
		return;
	}
	strcpy(m, "moved");
	p = mremap(m, 4096, 64 * 4096, MREMAP_MAYMOVE);
	if (p == MAP_FAILED || p == m || strcmp(p, "moved") != 0)
		fail("mremap did not move the page with its contents");
	else
		check("mremap's new place", p, 64 * 4096);
	check("the page mremap left", m + 4096, 4096);
	if (p != MAP_FAILED)
		munmap(p, 64 * 4096);
	munmap(m + 4096, 4096);
}

/* every segment of every object the upper ld.so loaded (the kernel's vdso
 * is the lower half's: it is not ours to place) */
static int object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (info->dlpi_addr == getauxval(AT_SYSINFO_EHDR) || strstr(info->dlpi_name, "linux-vdso"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_LOAD) {
			char what[PATH_MAX + 32];

			snprintf(what, sizeof(what), "a segment of %s",
				 *info->dlpi_name ? info->dlpi_name : "the program");
			check(what, (void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr),
			      info->dlpi_phdr[i].p_memsz);
		}
	return 0;
}

/* /proc/self/maps: the program's, the upper libc's (the run of libc.so.6
 * mappings that holds printf; the lower half's libc lies elsewhere) and
 * Stasis's libmpi's mappings in range; none of the real MPI's there */
static void maps(const char *prog)
{
	struct {
		uint64_t lo, hi;
	} libc[64];
	int nlibc = 0, lower_mpi = 0;
	uint64_t pf = (uint64_t)(uintptr_t)&printf, run_lo = 0, run_hi = 0;
	char line[PATH_MAX + 256], path[PATH_MAX + 1];
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f) {
		fail("fopen /proc/self/maps");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long s, e;

		path[0] = 0;
		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %4096s", &s, &e, path) < 2)
			continue;
		if (!strcmp(path, prog) || strstr(path, "/uh/libmpi")) {
			if (!in_range((void *)(uintptr_t)s, e - s)) {
				fails++;
				printf("rank %d: FAIL %llx-%llx %s is outside the upper range\n", rank,
				       s, e, path);
			}
		} else if (strstr(path, "/libc.so.6") && nlibc < 64) {
			libc[nlibc].lo = s;
			libc[nlibc++].hi = e;
		} else if ((strstr(path, "openmpi") || strstr(path, "mpich")) &&
			   in_range((void *)(uintptr_t)s, e - s)) {
			lower_mpi++;
			printf("rank %d: FAIL %llx-%llx %s (the real MPI's) is in the upper range\n",
			       rank, s, e, path);
		}
	}
	fclose(f);
	if (lower_mpi)
		fails++;
	for (int i = 0; i < nlibc; i++)
		if (libc[i].lo <= pf && pf < libc[i].hi) {
			int a = i, b = i;

			while (a > 0 && libc[a - 1].hi == libc[a].lo)
				a--;
			while (b + 1 < nlibc && libc[b + 1].lo == libc[b].hi)
				b++;
			run_lo = libc[a].lo;
			run_hi = libc[b].hi;
		}
	if (!run_hi)
		fail("no libc.so.6 mapping holds printf");
	else
		check("the upper libc.so.6's mappings", (void *)(uintptr_t)run_lo, run_hi - run_lo);
}

int main(int argc, char **argv)
{
	char prog[PATH_MAX];
	int size, sum = 0, total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (!realpath(argv[0], prog))
		snprintf(prog, sizeof(prog), "%s", argv[0]);

	allocations(prog);
	threads();
	check("the main thread's TLS variable", &tls_var, sizeof(int));
	check("main", (void *)&main, 1);
	check("printf", (void *)&printf, 1);
	check("MPI_Send", (void *)&MPI_Send, 1);

	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (sum != size * (size - 1) / 2)
		fail("MPI_Allreduce");

	dl_iterate_phdr(object, NULL);
	maps(prog);

	MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && total == 0)
		printf("PASS\n");
	fflush(stdout);
	MPI_Finalize();
	return total ? 1 : 0;
}
