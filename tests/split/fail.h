/* fail.h - how the self-checking programs of tests/split report a wrong
 * value: one FAIL line on stdout (the tests look for it), then the job is
 * aborted. */
#ifndef SPLIT_FAIL_H
#define SPLIT_FAIL_H

#include <mpi.h>
#include <stdio.h>

static void fail(int rank, int it, const char *what)
{
	printf("FAIL rank %d iteration %d: %s\n", rank, it, what);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* got must be want: else one FAIL line that names both */
static __attribute__((unused)) void fail_unless(int rank, int it, const char *what, long got,
						 long want)
{
	char msg[256];

	if (got == want)
		return;
	snprintf(msg, sizeof(msg), "%s: %ld, expected %ld", what, got, want);
	fail(rank, it, msg);
}

#endif
