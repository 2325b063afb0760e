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

#endif
