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
#define JOB_FILES_FILE "files"
/* In the job's directory (STASIS_JOB_DIR): a restart's rank that finds no
 * copy of its staged image, neither on its node nor in the global tier,
 * appends "<checkpoint> <rank> <host>" to it before it stops; `stasis
 * restart` then falls back to the newest checkpoint at level global */
#define JOB_MISSING_FILE "restart.missing"

/* Whether a rank of a restart said, in missing (a job directory's
 * JOB_MISSING_FILE), that it has no copy of its image of checkpoint name */
int job_copies_missing(const char *missing, const char *name);

/* Whether a checkpoint of this level has its images in the global tier:
 * one that was not staged (no level) or whose copies reached it */
int job_level_in_global(const char *level);

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

/* Where the lower halves and stasis-node are (STASIS_LH_DIR, or beside
 * this program's installation). */
const char *job_lh_dir(void);

/* Environment of an MPI job's launcher: preload the launch library, tell
 * ranks where the coordinator, the store and the lower halves are. In the
 * forked child, before exec. */
int job_child_env(const char *addr, const char *job_dir, const char *root, const char *tier,
		  const char *job, const char *restore_dir);

/* In the forked child, after job_child_env: exec the launcher. Open MPI's
 * launcher given -x gets the job's variables as -x NAME too (it refuses
 * mca_base_env_list beside -x). Returns only on failure (errno). */
void job_child_exec(char *const *argv);

/* Store in a checkpoint the files that the launcher's process tree maps
 * (the launcher, its daemons, the ranks of this node: their programs, MPI
 * and its components), one path a line: a restart reads them ahead
 * (job_prefetch). */
int job_files_write(struct store_ckpt *ck, int launcher_pid);

/* Start reading the rank images of checkpoint directory dir into the page
 * cache while the launcher starts the ranks. First the files the job
 * mapped (JOB_FILES_FILE, if the checkpoint has it), all at once: the
 * launch and MPI_Init then read a few hundred pieces of them from memory
 * instead of one after the other from the disk. Then, on a thread, the
 * images one after the other, a step of 512 KiB at a time: the few reads
 * of the launch still left queue behind one step at most. Images only on
 * a node-local filesystem (the ranks that read them run here), when
 * they fit twice in the available memory and when images is set (0 for a
 * staged checkpoint: its ranks read their node-local copies); the key
 * `prefetch` = off turns it all off. Never fails: what it cannot do it
 * leaves to the ranks. Returns the number of files it reads ahead, the
 * number of images in *nimages. */
int job_prefetch(const char *dir, int images, int *nimages);

/* SIGKILL pid and every descendant of it (stopped first, so that none
 * forks meanwhile): the launcher's tree, its daemons and the ranks it
 * started here. */
void job_kill_tree(int pid);

/* How long a launcher being stopped is given to end by itself before its
 * tree is killed: srun's step must be ended by Slurm (90 s), the others
 * none. */
int job_stop_grace_ms(const char *argv0);

/* The launcher's command argv for a relaunch without the lost nodes
 * (lost[nlost]): in a host list (Open MPI's --host/-H, Hydra's
 * -hosts/-host) each lost node is replaced in place, keeping its slots, by
 * a spare (an entry of the list on which no rank ran: used[nused] names
 * those that did), or dropped when none is left; srun gets --exclude=
 * and --overlap (the dead step may linger).
 * *out: one malloc'd block (free()); note (nlen bytes) says what changed,
 * for the log ("n2 replaced by n4"). */
int job_launch_without(char *const *argv, char (*lost)[64], unsigned nlost, char (*used)[64],
		       unsigned nused, char ***out, char *note, size_t nlen);

/* The launcher's command argv with spares more ranks (*out: one malloc'd
 * block, free()): the rank count before the program (Open MPI's -np, -n,
 * --np, -c; Hydra's -n, -np; srun's -n, --ntasks) raised by spares, the
 * lower halves told by JOBENV_SPARES that the last ones are spares
 * (src/split/virt/lh_spare.h). -EINVAL when the command has no rank count. */
int job_launch_spares(char *const *argv, unsigned spares, char ***out);

/* The rank count the launcher's command gives before its program (the
 * options job_launch_spares reads), or -1 when it gives none */
int job_launch_ranks(char *const *argv);

/* The hosts of the launcher's host list (Open MPI's --host/-H, Hydra's
 * -hosts/-host), without their slot counts, at most max; 0 with none
 * (srun: Slurm places). */
unsigned job_hosts(char *const *argv, char (*out)[64], unsigned max);

#endif
