/* avx512.c - a thread spinning with live values in zmm16..zmm31 and k1
 * (AVX-512) keeps them across checkpoint/restart: registers come back from
 * the xsave area of its signal frame. Skipped (PASS with a note) without
 * AVX-512. */
#include "zdtm.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

static volatile int stop_spin;
static atomic_int spinning;
static uint64_t pattern[8] __attribute__((aligned(64)));
static int bad;

__attribute__((target("avx512f"))) static void *spin(void *arg)
{
	int r;

	(void)arg;
	atomic_store(&spinning, 1);
	__asm__ volatile(
		"vmovdqu64 %[p], %%zmm16\n"
		"vpaddq %%zmm16, %%zmm16, %%zmm17\n"
		"vpaddq %%zmm17, %%zmm16, %%zmm31\n"
		"movl $0x5a5a, %%eax\n"
		"kmovw %%eax, %%k1\n"
		"1:\n"
		"pause\n"
		"cmpl $0, %[stop]\n"
		"je 1b\n"
		/* check: zmm31 - zmm17 == zmm16, k1 intact */
		"vpsubq %%zmm17, %%zmm31, %%zmm30\n"
		"vpcmpeqq %%zmm16, %%zmm30, %%k2\n"
		"kmovw %%k2, %%eax\n"
		"kmovw %%k1, %%ecx\n"
		"shll $16, %%ecx\n"
		"orl %%ecx, %%eax\n"
		"movl %%eax, %[r]\n"
		: [r] "=m"(r)
		: [p] "m"(pattern), [stop] "m"(stop_spin)
		: "eax", "ecx", "xmm16", "xmm17", "xmm30", "xmm31", "memory");
	if (r != ((0x5a5a << 16) | 0xff))
		bad = r ? r : -1;
	return NULL;
}

int main(void)
{
	unsigned a, b, c, d;
	pthread_t t;

	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 16))) {
		printf("no AVX-512F here\n");
		zdtm_ready();
		return zdtm_end();
	}
	for (int i = 0; i < 8; i++)
		pattern[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
	pthread_create(&t, NULL, spin, NULL);
	while (!atomic_load(&spinning))
		;
	zdtm_ready();
	stop_spin = 1;
	pthread_join(t, NULL);
	if (bad)
		zdtm_fail("AVX-512 registers changed (check word 0x%x)", bad);
	return zdtm_end();
}
