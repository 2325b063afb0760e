/* job.h - MPI jobs under the coordinator (internal to coord/).
 *
 * `stasis run -- mpirun ... ./app ARGS` makes the coordinator the job's:
 * the launcher runs with libstasis-launch.so preloaded, which puts each
 * rank above its lower half (src/split); each rank registers over TCP
 * (docs/coordinator.md, "Ranks"). The launch command is stored with every
 * checkpoint (file "launch") so that `stasis restart` can start the job
 * again, with the same launcher or another one (--launcher).
 */
#ifndef STASIS_COORD_JOB_H
#define STASIS_COORD_JOB_H

#include <stddef.h>

struct store_ckpt;
struct store;

#define JOB_LAUNCH_FILE "launch"

/* Whether argv[0] is an MPI launcher (mpirun, mpiexec, orterun, prterun,
 * srun, with any suffix such as mpirun.openmpi). */
int job_is_launcher(const char *argv0);

/* Index of the program in a launcher's command: the first operand that is
 * an executable ELF file (found in PATH like execvp). -ENOENT if none. */
int job_program_index(char *const *argv);

/* Store the launch command (argv, NULL-terminated) in a checkpoint. */
int job_launch_write(struct store_ckpt *ck, char *const *argv);
/* Read it back from checkpoint ckpt; with launcher != NULL, its words
 * replace the launcher part. *argv is one malloc'd block (free()). Returns
 * -ENOENT when the checkpoint is not an MPI job's. */
int job_launch_read(const struct store *s, const char *ckpt, const char *launcher, char ***argv);

/* Environment of an MPI job's launcher: preload the launch library, tell
 * ranks where the coordinator, the store and the lower halves are. In the
 * forked child, before exec. */
int job_child_env(const char *addr, const char *job_dir, const char *root, const char *tier,
		  const char *job, const char *restore_dir);

#endif
