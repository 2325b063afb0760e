/* check.h - the counted checks of the self-checking programs of
 * tests/split (objects.c, typeconv.c, attrs_io.c): a wrong value prints one
 * FAIL line on stdout (the tests look for it) and aborts the job with 3.
 *
 * The including program declares `static int rank;` and `static long
 * checks;` before it: rank names the process in the FAIL line, checks
 * counts the checks made in the loop (the program prints it, the test
 * compares it with what the iterations should have made). payload.h
 * gives the payload every rank can recompute without MPI. */
#ifndef SPLIT_CHECK_H
#define SPLIT_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "payload.h"

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

#endif
