/* stasis_mpix.h - MPIX_Checkpoint: a checkpoint of the whole MPI job, asked
 * for by the program itself (docs/split.md, "MPIX_Checkpoint").
 *
 *   MPIX_CR_state_t state;
 *   MPIX_Checkpoint(&state);     collective over MPI_COMM_WORLD
 *
 * returns, in *state:
 *   MPIX_CR_STATE_CHECKPOINT  the job's checkpoint is established; the job
 *                             runs on
 *   MPIX_CR_STATE_RESTART     the job was restarted from that checkpoint
 *   MPIX_CR_STATE_IGNORE      the program does not run under Stasis (or
 *                             under `stasis run` without a coordinator)
 *   MPIX_CR_STATE_ERROR       the checkpoint failed; the job runs on
 * and MPI_SUCCESS, or an MPI error code with MPIX_CR_STATE_ERROR.
 *
 * Header only: nothing to link. Under Stasis's split process the MPI
 * library the program runs with defines stasis_mpix_checkpoint; without
 * it the call does nothing and says IGNORE, so the same binary runs on a
 * plain MPI. */
#ifndef STASIS_MPIX_H
#define STASIS_MPIX_H

#include <dlfcn.h>
#include <mpi.h>

typedef enum {
	MPIX_CR_STATE_IGNORE = 0,
	MPIX_CR_STATE_CHECKPOINT = 1,
	MPIX_CR_STATE_RESTART = 2,
	MPIX_CR_STATE_ERROR = 3,
} MPIX_CR_state_t;

static inline int MPIX_Checkpoint(MPIX_CR_state_t *state)
{
	/* RTLD_DEFAULT is the null handle in glibc: no _GNU_SOURCE needed */
	int (*fn)(int *) = (int (*)(int *))dlsym((void *)0, "stasis_mpix_checkpoint");
	int s = MPIX_CR_STATE_IGNORE, ret = MPI_SUCCESS;

	if (fn)
		ret = fn(&s);
	*state = (MPIX_CR_state_t)s;
	return ret;
}

#endif
