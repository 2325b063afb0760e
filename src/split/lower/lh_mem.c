/* lh_mem.c - the lower half keeps the upper half's startup mappings in
 * its range (docs/split.md, "Upper-half memory").
 *
 * The upper half's ld.so maps the program, its libc and libraries, TLS and
 * early malloc memory with hint-less mmaps, which Stasis cannot patch: the
 * kernel puts them in the highest free gap below mmap_base, near the lower
 * half's libraries. Just before the jump, lh_mem_fill covers every free gap
 * above the upper half's stack (STS_UH_STACK_TOP up to the top of the user
 * address space) with PROT_NONE reservations, so the highest free gap is
 * the one just below that stack, in the upper half's arena. Once the upper
 * libc's mmap is patched (src/split/upper/uh_mem.c), the upper half calls
 * lh_mem_unfill through the table and the lower half's later mappings go
 * back where the kernel puts them, above STS_UPPER_HI.
 *
 * The gap just below [stack] stays open for the lower half's original stack
 * to grow into (the jump leaves that stack); the kernel never places a
 * hint-less mapping there, since it lies above mmap_base.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lh.h"

#define LH_MEM_TOP 0x7ffffffff000ull   /* the end of the 47-bit user address space */
#define LH_MEM_MAX 1024                 /* reservations at most */

static void __attribute__((noreturn)) fill_die(const char *what, uint64_t lo, uint64_t hi, int err)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "stasis: lower half: %s %#llx..%#llx: %s\n", what,
			 (unsigned long long)lo, (unsigned long long)hi, strerror(err));

	if (n > 0 && write(2, msg, (size_t)n) < 0) {
		/* nothing else to do */
	}
	_exit(127);
}

struct range {
	uint64_t lo, hi;
};

static void add_gap(struct range *gap, int *n, uint64_t lo, uint64_t hi)
{
	if (*n == LH_MEM_MAX)
		fill_die("too many free gaps to reserve around", lo, hi, ENOMEM);
	gap[*n].lo = lo;
	gap[(*n)++].hi = hi;
}

static struct range res[LH_MEM_MAX];
static int nres;

/* One pass: reserve every free gap of [STS_UH_STACK_TOP, LH_MEM_TOP) that
 * /proc/self/maps shows. Returns the number of gaps found (0: all filled).
 * A gap somebody else mapped into meanwhile (a lower-half thread) fails
 * with EEXIST and is found again, smaller, by the next pass. */
static int fill_pass(void)
{
	struct range gap[LH_MEM_MAX];
	int ngap = 0;
	uint64_t prev = STS_UH_STACK_TOP;
	char *line = NULL;
	size_t cap = 0;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		fill_die("cannot read /proc/self/maps to reserve", STS_UH_STACK_TOP, LH_MEM_TOP,
			 errno);
	while (getline(&line, &cap, f) > 0) {
		unsigned long long s, e;

		if (sscanf(line, "%llx-%llx", &s, &e) != 2)
			continue;
		if (e <= prev)
			continue;
		if (s >= LH_MEM_TOP)
			break;
		if (s > prev && !strstr(line, "[stack]"))
			add_gap(gap, &ngap, prev, s);
		prev = e;
	}
	free(line);
	fclose(f);
	if (prev < LH_MEM_TOP)
		add_gap(gap, &ngap, prev, LH_MEM_TOP);
	for (int i = 0; i < ngap; i++) {
		size_t len = gap[i].hi - gap[i].lo;
		void *p = mmap((void *)gap[i].lo, len, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

		if (p == MAP_FAILED && errno == EEXIST)
			continue;
		if (p != (void *)gap[i].lo)
			fill_die("cannot reserve", gap[i].lo, gap[i].hi, p == MAP_FAILED ? errno : EEXIST);
		if (nres == LH_MEM_MAX)
			fill_die("too many reservations for", gap[i].lo, gap[i].hi, ENOMEM);
		res[nres].lo = gap[i].lo;
		res[nres++].hi = gap[i].hi;
	}
	return ngap;
}

void lh_mem_fill(void)
{
	for (int pass = 0; pass < 16; pass++)
		if (fill_pass() == 0)
			return;
	fill_die("the address space kept changing while reserving", STS_UH_STACK_TOP, LH_MEM_TOP,
		 EAGAIN);
}

void lh_mem_unfill(void)
{
	for (int i = 0; i < nres; i++)
		munmap((void *)res[i].lo, res[i].hi - res[i].lo);
	nres = 0;
}
