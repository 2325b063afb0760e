/* lh_spare.h - ranks held in reserve (`stasis run --spares S`;
 * docs/coordinator.md, "Spare ranks").
 *
 * The launcher starts N + S ranks and says S in STASIS_SPARES. The first N
 * are the job's active ranks: lh_world, a communicator over them, is what
 * the program's MPI_COMM_WORLD means and what every world rank of the
 * lower half (the ledger, the records of communicators and groups, the
 * agent's communicator, lh_info->world_rank and world_size) counts in; its
 * rank i is the program's rank i, whatever rank of the real MPI_COMM_WORLD
 * holds it (the rank map, which the program never sees). The last S call
 * MPI_Init and wait, without an upper half, until the job ends. With S = 0
 * lh_world is MPI_COMM_WORLD and nothing else changes.
 */
#ifndef STS_LH_SPARE_H
#define STS_LH_SPARE_H

#include <mpi.h>

#define LH_SPARES_ENV "STASIS_SPARES"

/* MPI_COMM_WORLD, or the active ranks' communicator */
extern MPI_Comm lh_world;

/* The launcher's rank and size (its environment, before MPI_Init) as the
 * program's: *size less the spares. 1 when rank is a spare's, else 0. */
int lh_spare_env(int *rank, int *size);

/* Right after MPI_Init, on every rank (collective over the real
 * MPI_COMM_WORLD): lh_world made. A spare never returns: it waits for the
 * job's end, finalizes MPI and exits 0. */
void lh_spare_start(void);

/* Before the program starts: the launcher's world-size variables in envp
 * (the environment the upper half gets) say the program's N, not N + S */
void lh_spare_environ(char **envp);

/* Just before the real MPI_Finalize of an active rank (the program's, or
 * --stop's): the program's rank 0 tells the spares that the job ends, so
 * that they finalize with it. Once per process. */
void lh_spare_release(void);

#endif
