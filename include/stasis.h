/* stasis.h - application-level checkpointing with Stasis.
 *
 * Tell Stasis which memory matters (stasis_protect), checkpoint it at a
 * chosen level (stasis_checkpoint), and after a crash get it back
 * (stasis_status, stasis_recover). Every function returns 0 (STASIS_OK) on
 * success or a negative error code; stasis_strerror(code) gives a one-line
 * message saying what went wrong and where.
 *
 *   stasis_init(MPI_COMM_WORLD, NULL);
 *   stasis_protect(0, &step, 1, STASIS_INT);
 *   stasis_protect(1, grid, n, STASIS_DOUBLE);
 *   if (stasis_status() == STASIS_RESTARTED)
 *           stasis_recover();
 *   for (; step < steps; step++) {
 *           compute(grid);
 *           if (step % 100 == 0)
 *                   stasis_checkpoint(STASIS_LEVEL_AUTO);
 *   }
 *   stasis_finalize();
 *
 * The MPI functions are declared when <mpi.h> is available (compile with
 * mpicc); define STASIS_NO_MPI to hide them. docs/applevel.md describes the
 * levels, the configuration keys and what happens on restart.
 */
#ifndef STASIS_H
#define STASIS_H

#include <stddef.h>

#if !defined(STASIS_NO_MPI) && defined(__has_include)
#if __has_include(<mpi.h>)
#include <mpi.h>
#define STASIS_HAVE_MPI 1
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define STASIS_OK 0

/* stasis_status() */
#define STASIS_FRESH     0   /* no established checkpoint of this job */
#define STASIS_RESTARTED 1   /* one exists: stasis_recover() brings it back */

/* Checkpoint levels: where the copies of a checkpoint live. */
#define STASIS_LEVEL_AUTO    0   /* from the configuration (level, global_every, ...) */
#define STASIS_LEVEL_SINGLE  1   /* node-local cache only */
#define STASIS_LEVEL_PARTNER 2   /* local, plus a copy on a rank of another node */
#define STASIS_LEVEL_RS      3   /* local, plus Reed-Solomon parity across nodes */
#define STASIS_LEVEL_GLOBAL  4   /* the global directory (parallel file system) */

/* Element types; user types of any size come from stasis_type_create(). */
typedef int stasis_type;
#define STASIS_BYTE   1
#define STASIS_INT    2
#define STASIS_LONG   3
#define STASIS_FLOAT  4
#define STASIS_DOUBLE 5

#ifdef STASIS_HAVE_MPI
/* Collective over comm. config: a configuration file, or NULL for the
 * defaults, /etc/stasis/stasis.conf and STASIS_* environment variables. */
int stasis_init(MPI_Comm comm, const char *config);
#endif
/* The same with a Fortran communicator handle (MPI_Comm_c2f; mpi4py's
 * comm.py2f()): for the Fortran and Python bindings. Not in serial builds. */
int stasis_init_fortran(int fcomm, const char *config);
/* For a program without MPI: one process, one rank. */
int stasis_init_serial(const char *config);

/* A type of elements of `size` bytes; returns the type (> 0) or a negative
 * error code. */
stasis_type stasis_type_create(size_t size);

/* Protect count elements at ptr under id (>= 0). Protecting an id again
 * updates its pointer and count (a resized array); its element type must
 * stay the same. It also reserves room in the node's cache for this rank's
 * first checkpoint (configuration key `recycle`), so that checkpoint does
 * not pay for new pages. */
int stasis_protect(int id, void *ptr, size_t count, stasis_type type);
/* The same for this rank's part of a distributed array of global_count
 * elements starting at element `offset`: such data can be recovered by a job
 * with another number of ranks (from the GLOBAL level). */
int stasis_protect_distributed(int id, void *ptr, size_t count, stasis_type type,
			       size_t global_count, size_t offset);
int stasis_unprotect(int id);

int stasis_status(void);
/* Restore every protected region (stasis_recover) or one (stasis_recover_var)
 * from the latest established checkpoint. The regions must be protected
 * with their sizes first; a size that differs from the checkpoint's is an
 * error naming the id (nothing is written). */
int stasis_recover(void);
int stasis_recover_var(int id);

/* Collective: write a checkpoint of every protected region at `level`.
 * With _valid, a rank passing valid == 0 makes the whole checkpoint FAILED
 * on every rank (say, its data failed a sanity check).
 * It returns once every rank's data is in its node's cache: the checkpoint
 * is then established (it survives a crash of the processes). What the level
 * adds (a partner's copy, Reed-Solomon parity, the copy to the global tier)
 * follows in the background (configuration key `async`), and restart uses
 * it as soon as it is committed. */
int stasis_checkpoint(int level);
int stasis_checkpoint_valid(int level, int valid);
/* Wait until every checkpoint this rank took is established at its level.
 * 0, or -EIO naming what failed (the checkpoint stays established at the
 * levels that succeeded). Not collective. */
int stasis_checkpoint_wait(void);

/* Files, for codes with their own I/O: start an output set named `name`,
 * route each file path to where Stasis wants it written, complete the set
 * (collectively; valid == 0 on any rank fails it). On restart, start_restart
 * gives the name of the latest complete set and route_file where to read. */
int stasis_start_output(const char *name);
int stasis_route_file(const char *path, char *routed, size_t len);
int stasis_complete_output(int valid);
int stasis_start_restart(char *name, size_t len);
int stasis_complete_restart(int valid);

/* Young/Daly: *flag = 1 when a checkpoint is due, from the measured cost of
 * checkpoints and the configured or observed mean time between failures.
 * Collective (every rank gets the same answer). */
int stasis_need_checkpoint(int *flag);
/* *flag = 1 when the job should checkpoint and end (time limit near, halt
 * requested). Collective. */
int stasis_should_exit(int *flag);

/* Wait for outstanding asynchronous work, then release everything. */
int stasis_finalize(void);

/* A one-line message for an error code returned by this thread's last
 * failing call, or the generic message for the code. */
const char *stasis_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
