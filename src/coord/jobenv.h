/* jobenv.h - the environment contract of an MPI job under `stasis run`
 * (docs/coordinator.md, "Ranks of an MPI job").
 *
 * The coordinator sets these in its launcher's environment (job_child_env);
 * the launcher passes them to the ranks (Open MPI's mpirun only those named
 * in OMPI_MCA_mca_base_env_list, which job.c fills from JOBENV_FORWARD);
 * the launch library, the lower halves and the node agents read them. A
 * single program under `stasis run` has one variable of its own instead,
 * STASIS_COORD_FD (its agent's descriptor, proc.h).
 */
#ifndef STASIS_COORD_JOBENV_H
#define STASIS_COORD_JOBENV_H

/* where the parts are */
#define JOBENV_PRELOAD      "LD_PRELOAD"          /* libstasis-launch.so first */
#define JOBENV_LAUNCH_LIB   "STASIS_LAUNCH_LIB"   /* that library's path */
#define JOBENV_LH_DIR       "STASIS_LH_DIR"       /* lower halves and stasis-node */
/* the coordinator */
#define JOBENV_COORD_ADDR   "STASIS_COORD_ADDR"   /* host:port of its TCP listener */
#define JOBENV_JOB_DIR      "STASIS_JOB_DIR"      /* holds coord.secret (never the
						     secret itself) */
#define JOBENV_RUN_ID       "STASIS_RUN_ID"       /* 16 hex digits per launch: names
						     the node agents' sockets */
#define JOBENV_HEARTBEAT_MS "STASIS_HEARTBEAT_MS" /* a node agent says ALIVE this often */
/* the store */
#define JOBENV_STORE_ROOT   "STASIS_STORE_ROOT"
#define JOBENV_STORE_TIER   "STASIS_STORE_TIER"
#define JOBENV_JOB_NAME     "STASIS_JOB_NAME"
#define JOBENV_RESTORE_DIR  "STASIS_RESTORE_DIR"  /* a restart: the checkpoint's directory */
/* staging (staging = on) */
#define JOBENV_STAGE_DIR    "STASIS_STAGE_DIR"
#define JOBENV_STAGE_ID     "STASIS_STAGE_ID"
#define JOBENV_STAGE_COPIES "STASIS_STAGE_COPIES"
#define JOBENV_CACHE_KEEP   "STASIS_CACHE_KEEP"
#define JOBENV_STAGE_COMPRESS "STASIS_STAGE_COMPRESS"
#define JOBENV_RECYCLE      "STASIS_RECYCLE"      /* the key recycle: "on" or "off" */
/* which programs go above a lower half */
#define JOBENV_SPLIT_PROGRAMS "STASIS_SPLIT_PROGRAMS"
/* ranks the launcher starts beyond the program's, the last ones of its
 * MPI_COMM_WORLD, held in reserve (src/split/virt/lh_spare.h); unset: none */
#define JOBENV_SPARES       "STASIS_SPARES"
/* set with it: Open MPI's mpirun lets a process end with status 0 before
 * MPI_Finalize and the job go on, as a moved rank's old process does
 * (lh_spare_may_leave); forwarded, so that every rank knows it */
#define JOBENV_OMPI_EXIT_NO_SYNC "OMPI_MCA_orte_allowed_exit_without_sync"
/* "1": the ranks pass MPI_Init and wait for a checkpoint to restore
 * (`stasis standby`, src/split/lower/lh_standby.h); rank 0 says they are ready in
 * this file of STASIS_JOB_DIR ("<ranks>\n"), the coordinator names the
 * checkpoint's directory in the other ("<dir>\n", written aside, renamed) */
#define JOBENV_STANDBY      "STASIS_STANDBY"
#define JOBENV_STANDBY_READY_FILE "standby.ready"
#define JOBENV_STANDBY_GO_FILE    "standby.go"
/* set by the lower half for its own children; never inherited from here */
#define JOBENV_LH_ACTIVE    "STASIS_LH_ACTIVE"

/* Written by the ranks, read by the coordinator: libstasis's rank 0 puts
 * "global <its job's checkpoint directory>" and "local <its local_dir>"
 * (lines) in this file of STASIS_JOB_DIR at stasis_init: the job
 * checkpoints at the application level, a recovery relaunches it for
 * libstasis to recover, a migration moves a node's cache
 * (docs/coordinator.md, "Application-level jobs"). */
#define JOBENV_APPLEVEL_FILE "applevel"

/* Every variable a rank on another node needs, with the settings the
 * ranks read themselves (STASIS_LOG, the restore's knobs): what Open MPI
 * is told to forward. */
#define JOBENV_FORWARD                                                              \
	JOBENV_PRELOAD, JOBENV_LAUNCH_LIB, JOBENV_LH_DIR, JOBENV_COORD_ADDR,        \
	JOBENV_JOB_DIR, JOBENV_STORE_ROOT, JOBENV_STORE_TIER, JOBENV_JOB_NAME,      \
	JOBENV_SPLIT_PROGRAMS, JOBENV_RESTORE_DIR, "STASIS_LOG",                    \
	"STASIS_MPI_THREAD_LEVEL", "STASIS_RESTORE_LAZY", "STASIS_RESTORE_EARLY",   \
	JOBENV_STAGE_DIR, JOBENV_STAGE_COPIES, JOBENV_CACHE_KEEP,                   \
	JOBENV_STAGE_COMPRESS, JOBENV_RECYCLE, JOBENV_STAGE_ID, JOBENV_RUN_ID,       \
	JOBENV_HEARTBEAT_MS,                                                         \
	JOBENV_SPARES, JOBENV_OMPI_EXIT_NO_SYNC, JOBENV_STANDBY

#endif
