/* bigzero.c - a 2 GiB heap allocation of which only every 64th MiB holds
 * data: the image stores those pages only, and the rest reads as zero. */
#include "zdtm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIZE (2ull << 30)
#define STEP (64ull << 20)

int main(void)
{
	unsigned char *p = malloc(SIZE);

	if (!p) {
		zdtm_fail("malloc 2 GiB");
		return zdtm_end();
	}
	for (uint64_t off = 0; off < SIZE; off += STEP)
		memset(p + off, (int)(off / STEP) + 1, 4096);
	zdtm_ready();
	for (uint64_t off = 0; off < SIZE; off += STEP) {
		for (int i = 0; i < 4096; i++)
			if (p[off + i] != (unsigned char)(off / STEP + 1)) {
				zdtm_fail("data page at %llu changed", (unsigned long long)off);
				return zdtm_end();
			}
		/* a page in between, never written */
		if (p[off + STEP / 2] != 0)
			zdtm_fail("zero page at %llu is not zero", (unsigned long long)(off + STEP / 2));
	}
	free(p);
	return zdtm_end();
}
