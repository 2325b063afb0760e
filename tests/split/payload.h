/* payload.h - the payload words of the self-checking programs of
 * tests/split (p2p.c, and those using check.h): what src sends dst with a
 * tag in an iteration, which every rank can recompute without MPI. */
#ifndef SPLIT_PAYLOAD_H
#define SPLIT_PAYLOAD_H

#include <stdint.h>

static __attribute__((unused)) uint32_t mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* The payload word i of what src sends dst with tag in iteration it. */
static __attribute__((unused)) uint32_t pay_word(int src, int dst, int it, int tag, int i)
{
	uint32_t h = mix((uint32_t)src * 0x10001u + (uint32_t)dst + 0x9e3779b9u);

	h = mix(h ^ (uint32_t)it * 2654435761u);
	h = mix(h ^ (uint32_t)tag * 0x85ebca77u);
	return mix(h ^ (uint32_t)i);
}

#endif
