/* heap.c - heap grown with brk and malloc, and an anonymous mapping, keep
 * their contents across checkpoint/restart; brk still grows after it;
 * /proc/self/exe is still the program, and nothing of the restorer is
 * mapped any more; resource limits and the personality are kept. */
#include "zdtm.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed, sum = 0;

	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (unsigned char)(x >> 56);
		sum += p[i] * (i + 1);
	}
	return sum;
}

static uint64_t sum(const unsigned char *p, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += p[i] * (i + 1);
	return s;
}

int main(void)
{
	size_t brk_len = 3 << 20, mal_len = 5 << 20, map_len = 7 << 20;
	unsigned char *b = sbrk((intptr_t)brk_len);
	unsigned char *m = malloc(mal_len);
	unsigned char *a = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t sb, sm, sa;

	if (b == (void *)-1 || !m || a == MAP_FAILED) {
		zdtm_fail("setup");
		return zdtm_end();
	}
	sb = fill(b, brk_len, 1);
	sm = fill(m, mal_len, 2);
	sa = fill(a, map_len / 2, 3);    /* second half never touched: zero pages */
	char exe[4096] = "", exe2[4096] = "";
	if (readlink("/proc/self/exe", exe, sizeof(exe) - 1) <= 0)
		zdtm_fail("readlink /proc/self/exe");
	struct rlimit nofile = { 777, 0 }, got;
	getrlimit(RLIMIT_NOFILE, &got);
	nofile.rlim_max = got.rlim_max;
	setrlimit(RLIMIT_NOFILE, &nofile);
	personality(ADDR_NO_RANDOMIZE);
	unsigned char auxv[1024], auxv2[1024];
	ssize_t auxv_len = -1, auxv2_len = -2;
	FILE *af = fopen("/proc/self/auxv", "r");
	if (af) {
		auxv_len = (ssize_t)fread(auxv, 1, sizeof(auxv), af);
		fclose(af);
	}
	zdtm_ready();
	af = fopen("/proc/self/auxv", "r");
	if (af) {
		auxv2_len = (ssize_t)fread(auxv2, 1, sizeof(auxv2), af);
		fclose(af);
	}
	if (auxv_len != auxv2_len || memcmp(auxv, auxv2, (size_t)(auxv_len > 0 ? auxv_len : 0)) != 0)
		zdtm_fail("/proc/self/auxv changed");
	if (getrlimit(RLIMIT_NOFILE, &got) != 0 || got.rlim_cur != 777)
		zdtm_fail("RLIMIT_NOFILE is %llu, not 777", (unsigned long long)got.rlim_cur);
	if ((personality(0xffffffff) & ADDR_NO_RANDOMIZE) == 0)
		zdtm_fail("the personality lost ADDR_NO_RANDOMIZE");
	if (readlink("/proc/self/exe", exe2, sizeof(exe2) - 1) <= 0 || strcmp(exe, exe2) != 0)
		zdtm_fail("/proc/self/exe is %s, not %s", exe2, exe);
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[4096];
	while (maps && fgets(line, sizeof(line), maps))
		if (strstr(line, "stasis-restore"))
			zdtm_fail("the restorer is still mapped: %s", line);
	if (maps)
		fclose(maps);
	if (sum(b, brk_len) != sb)
		zdtm_fail("brk area changed");
	if (sum(m, mal_len) != sm)
		zdtm_fail("malloc area changed");
	if (sum(a, map_len / 2) != sa)
		zdtm_fail("anonymous mapping changed");
	for (size_t i = map_len / 2; i < map_len; i++)
		if (a[i]) {
			zdtm_fail("untouched page is not zero at %zu", i);
			break;
		}
	/* the heap still works: brk moves on from where it was */
	unsigned char *more = sbrk(1 << 20);
	if (more != b + brk_len && more != (void *)-1 && more < b + brk_len)
		zdtm_fail("brk moved backwards");
	if (more == (void *)-1)
		zdtm_fail("brk cannot grow after restart");
	else
		memset(more, 7, 1 << 20);
	void *big = malloc(64 << 20);
	if (!big)
		zdtm_fail("malloc after restart");
	else
		memset(big, 1, 64 << 20);
	return zdtm_end();
}
