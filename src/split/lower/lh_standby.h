/* lh_standby.h - ranks launched ahead of a restart (`stasis standby`;
 * docs/cluster.md, "Stand-by ranks").
 *
 * With STASIS_STANDBY=1 the launcher's ranks pass MPI_Init and wait,
 * without a program, for the checkpoint to restore: a restart into them
 * is the coordinator's word and what follows MPI_Init, no launch. The
 * word goes through two files of the job's directory (STASIS_JOB_DIR,
 * named in coord/jobenv.h): rank 0 writes the ready one once every rank
 * is past MPI_Init, the coordinator the other, the checkpoint's
 * directory, when `stasis restart --standby` asks.
 */
#ifndef STS_LH_STANDBY_H
#define STS_LH_STANDBY_H

/* After MPI_Init, on every rank: NULL when the job is no stand-by; else
 * the checkpoint directory to restore, once the coordinator names it
 * (collective over lh_world; the wait sleeps, it does not spin) */
const char *lh_standby_wait(void);

#endif
