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
 * MPI_COMM_WORLD): lh_world made, every rank's host known. A spare waits
 * for the job's end, finalizes MPI and exits 0; or it is told to become a
 * rank (a migration): it returns with lh_world made over the new map and
 * lh_spare_adopted() naming the checkpoint whose image it restores. */
void lh_spare_start(void);

/* The checkpoint a spare was told to restore (as rank lh_world's rank), or
 * NULL: not an adopted spare */
const char *lh_spare_adopted(void);

/* A migration (docs/coordinator.md, "Moving a rank into a spare"), on
 * every active rank alike, its main thread parked: ranks[n] are to go
 * into spares on host, the lowest free ones in order; the rank map
 * changed. -1 with a sentence in why when there is none (or no spares). */
int lh_spare_choose(const char *host, const int *ranks, int n, char *why, size_t len);

/* On a moving rank, after lh_spare_choose: tell its spare to become
 * program rank `rank` from the image of ckpt; an MPI error code */
int lh_spare_send(int rank, const char *ckpt);

/* On a rank that stays, after lh_spare_choose: lh_world made again over
 * the new map (collective with the spares that become ranks); *old gets
 * the one it replaces, for the caller to free once nothing uses it */
int lh_spare_world(MPI_Comm *old);

/* Whether a moved rank's old process may end before the job does without
 * ending it: 1 under Open MPI told LH_EXIT_NO_SYNC_ENV with the PML ob1,
 * 0 under MPICH or another PML (pml/ucx: lh_spare.c says why). The same
 * on every process of a job. */
int lh_spare_may_leave(void);

/* Open MPI's MCA parameter in the environment, which `stasis run` sets
 * for the launcher of a job with spares (coord.c) */
#define LH_EXIT_NO_SYNC_ENV "OMPI_MCA_orte_allowed_exit_without_sync"

/* On a rank that moved: exit 0 at once if lh_spare_may_leave(); else wait
 * without spinning for the job's end (the word of lh_spare_release),
 * finalize MPI with the others and exit 0 */
void lh_spare_leave(void) __attribute__((noreturn));

/* Before the program starts: the launcher's world-size variables in envp
 * (the environment the upper half gets) say the program's N, not N + S */
void lh_spare_environ(char **envp);

/* Just before the real MPI_Finalize of an active rank (the program's, or
 * --stop's): the program's rank 0 tells every process outside the map
 * (spares, and ranks' old processes after a migration) that the job
 * ends, so that they finalize with it (not the old processes that ended:
 * lh_spare_may_leave). Once per process. */
void lh_spare_release(void);

#endif
