/* lazy.c - a program restarted lazily (docs/transparent.md, "Lazy
 * restore") has every byte of its memory back: 40 MiB of a mapping and
 * 4 MiB of heap with a pattern. While it waits it reads a few pages spread
 * over the mapping every 10 ms, so right after a restart it touches pages
 * before their turn; after each restart (a gap between ticks) it forks a
 * child that checks the whole mapping as its copy is still being filled.
 * At the end it checks everything, prints the sums and writes the mapping
 * to data.bin: a lazy restart's and an eager restart's must be identical. */
#include "zdtm.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define MAP_LEN (40ul << 20)
#define HEAP_LEN (4ul << 20)

static uint64_t *map, *heap;
static struct timespec last;
static unsigned forks, bad_children;

static uint64_t word(uint64_t i, uint64_t seed)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	x ^= x >> 31;
	return x * 0xbf58476d1ce4e5b9ull;
}

/* the index of the first wrong word of p, or n */
static size_t check(const uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != word(i, seed))
			return i;
	return n;
}

static void tick(void)
{
	static uint64_t k;
	struct timespec now;
	double gap;

	for (int j = 0; j < 16; j++) {
		size_t i = (size_t)(word(k++, 7) % (MAP_LEN / 8));

		if (map[i] != word(i, 1))
			zdtm_fail("word %zu of the mapping is wrong while waiting", i);
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	gap = (double)(now.tv_sec - last.tv_sec) + (double)(now.tv_nsec - last.tv_nsec) * 1e-9;
	last = now;
	if (gap > 0.2 && forks < 8) {
		pid_t c = fork();
		int st;

		if (c == 0)
			_exit(check(map, MAP_LEN / 8, 1) == MAP_LEN / 8 ? 0 : 1);
		forks++;
		if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad_children++;
	}
}

int main(void)
{
	uint64_t sum = 0;
	size_t bad;
	int fd;

	map = mmap(NULL, MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	heap = malloc(HEAP_LEN);
	if (map == MAP_FAILED || !heap) {
		zdtm_fail("setup");
		return zdtm_end();
	}
	for (size_t i = 0; i < MAP_LEN / 8; i++)
		map[i] = word(i, 1);
	for (size_t i = 0; i < HEAP_LEN / 8; i++)
		heap[i] = word(i, 2);
	clock_gettime(CLOCK_MONOTONIC, &last);
	zdtm_ready_tick(tick);
	if ((bad = check(map, MAP_LEN / 8, 1)) != MAP_LEN / 8)
		zdtm_fail("word %zu of the mapping is wrong", bad);
	if ((bad = check(heap, HEAP_LEN / 8, 2)) != HEAP_LEN / 8)
		zdtm_fail("word %zu of the heap is wrong", bad);
	if (bad_children)
		zdtm_fail("%u of %u children forked after a restart saw a wrong mapping",
			  bad_children, forks);
	for (size_t i = 0; i < MAP_LEN / 8; i++)
		sum += map[i] * (i | 1);
	for (size_t i = 0; i < HEAP_LEN / 8; i++)
		sum += heap[i] * (i | 1);
	printf("sum %016llx\n", (unsigned long long)sum);
	fd = open("data.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, map, MAP_LEN) != (ssize_t)MAP_LEN || close(fd) != 0)
		zdtm_fail("cannot write data.bin");
	return zdtm_end();
}
