/* check.h - the counted checks of the self-checking programs of
 * tests/split (objects.c, typeconv.c, attrs_io.c): a wrong value prints one
 * FAIL line on stdout (the tests look for it) and aborts the job with 3.
 *
 * The including program declares `static int rank;` and `static long
 * checks;` before it: rank names the process in the FAIL line, checks
 * counts the checks made in the loop (the program prints it, the test
 * compares it with what the iterations should have made). mix() and
 * pay() give the payload every rank can recompute without MPI. */
#ifndef SPLIT_CHECK_H
#define SPLIT_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void vfail(const char *fmt, va_list ap)
{
	printf("FAIL rank %d: ", rank);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 3);
	exit(3);
}

/* before the loop: not counted */
static __attribute__((unused, format(printf, 2, 3))) void require(int ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return;
	va_start(ap, fmt);
	vfail(fmt, ap);
	va_end(ap);
}

/* in the loop: counted */
static __attribute__((unused, format(printf, 2, 3))) void check(int ok, const char *fmt, ...)
{
	va_list ap;

	checks++;
	if (ok)
		return;
	va_start(ap, fmt);
	vfail(fmt, ap);
	va_end(ap);
}

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
