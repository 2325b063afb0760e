/* proc.h - the transparent process checkpointer, coordinator side.
 *
 * A program runs with libstasis-inject.so (LD_PRELOAD, src/proc/inject),
 * whose agent streams the process over a channel socket when asked. These
 * functions turn that dump stream into an image (through image/, so the
 * store commits it like any other checkpoint), and turn an image back into a
 * running process: they start the freestanding restorer (src/proc/restorer)
 * with the checkpointed pid in a new user+PID namespace and feed it the
 * restore stream. docs/transparent.md describes the streams, the image
 * sections and the restore stages.
 *
 * All functions return 0 or a negative errno with a one-line message in
 * err_msg() (common/err.h).
 */
#ifndef STASIS_PROC_PROC_H
#define STASIS_PROC_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct img_writer;
struct img_reader;

/* The records of a process image (decode.c): its sections "process",
 * "fds", every "thread.<tid>" and every "fd.<n>" as one JSON object, each record's fields
 * by their proc_format.h names (`stasis inspect --decode`); *json is
 * malloc'd. Encoding that JSON gives back the bytes of one of those
 * sections (*buf malloc'd, *len bytes): decoding loses nothing. */
int proc_image_decode(struct img_reader *img, char **json);
int proc_image_encode(const char *json, const char *section, void **buf, size_t *len);

/* Where the agent library and the restorer are: $STASIS_INJECT_LIB and
 * $STASIS_RESTORER if set, else next to the build or installation. */
const char *proc_agent_path(void);
const char *proc_restorer_path(void);

/* Environment additions for a program started under the agent: fills
 * ld_preload ("LD_PRELOAD" value, prepended to any existing one) for the
 * channel descriptor fd the child will inherit. */
int proc_agent_env(int fd, char *ld_preload, size_t len, char *fd_value, size_t fd_len);

/* One checkpoint: send the CHECKPOINT command on the agent's channel,
 * receive the dump and write it as sections of w. On a refusal by the agent
 * (a mapping or thread it cannot save) returns -ENOTSUP with the agent's
 * message; the program is still stopped either way until proc_dump_finish. */
struct proc_fd;
struct proc_dump_info {
	int32_t pid;
	uint32_t threads;
	uint32_t regions;
	uint64_t stored_bytes;     /* page bytes received */
	struct proc_fd *fds;       /* proc_dump_recv: the descriptor records (free()) */
	size_t nfds;
};
int proc_dump(int channel, struct img_writer *w, struct proc_dump_info *info);
/* Let the stopped program run on (stop = 0) or end it (stop = 1). */
int proc_dump_finish(int channel, int stop);

/* The processes of a job, one agent channel each (tree.c; docs/transparent.md,
 * "Process trees"): children announce themselves on their parent's channel
 * before they exist; a checkpoint stops the whole tree, then saves each
 * process in an image of its own. */
struct proc_tree;
struct pollfd;
int proc_tree_create(int channel, pid_t pid, uint32_t version, struct proc_tree **out);
/* One more process, restored with its agent (channel, after its hello). */
int proc_tree_add(struct proc_tree *t, int channel, pid_t pid, uint32_t version);
void proc_tree_free(struct proc_tree **t);
/* The tree's list of written files (proc_written_log_create's memfd, the
 * tree's from now on): read at each checkpoint, saved in the first image */
void proc_tree_written_log(struct proc_tree *t, int fd);
/* Processes with a live agent (0: none left); the first one's pid. */
unsigned proc_tree_size(const struct proc_tree *t);
pid_t proc_tree_pid(const struct proc_tree *t);
/* The channels to poll for POLLIN (at most max); after poll, read what
 * the agents said (new children, hellos) and drop the channels that ended. */
unsigned proc_tree_poll(const struct proc_tree *t, struct pollfd *p, unsigned max);
void proc_tree_serve(struct proc_tree *t, const struct pollfd *p, unsigned n);

/* Where a tree checkpoint goes: open an image for process pid (root: the
 * job's first process; *file: the sink's own handle of it), close it (ret:
 * 0 to keep it; returns the result), store the tree's description (text;
 * only for more than one process or a zombie), then done (ret so far;
 * returns the checkpoint's result: it decides, e.g. by committing, before
 * any process runs on). The processes of a tree dump at once (at_once of
 * them, each read on a thread of its own): open is called from several
 * threads, never two at a time; close from several threads at once (each
 * on its own file, as soon as its dump ended); the writers they give are
 * written concurrently. tree and done come after every close. */
struct proc_tree_sink {
	void *arg;
	int (*open)(void *arg, pid_t pid, int root, unsigned at_once, void **file,
		    struct img_writer **w);
	int (*close)(void *arg, void *file, struct img_writer *w, int ret);
	int (*tree)(void *arg, const char *text, size_t len);
	int (*done)(void *arg, int ret);
};
struct proc_tree_info {
	unsigned processes, zombies, threads, regions;
	uint64_t stored_bytes;
};
/* Stop every process, save each, then let all run on (stop = 0) or end
 * them (stop = 1, only if the checkpoint succeeded). A refusal (a thread
 * that does not stop, a descriptor or child that cannot be saved) is
 * -ENOTSUP with its one-line message; the processes run on. */
int proc_tree_checkpoint(struct proc_tree *t, const struct proc_tree_sink *s, int stop,
			 struct proc_tree_info *info);

/* Wait for the agent's first message on a new channel (HELLO at launch,
 * RESTARTED after a restore). *pid: the program's pid as it sees it;
 * *version (if not NULL): the agent's PROC_FORMAT_VERSION. */
int proc_agent_hello(int channel, int timeout_ms, pid_t *pid, uint32_t *version);

/* A restored process: the host pid of our direct child (the namespace's
 * parent, which exits with the program) and a descriptor on which the
 * program's wait status arrives as one int when it ends. */
struct proc_child {
	pid_t pid;
	int status_fd;
};

/* Does this kernel have what a restart needs (MAP_FIXED_NOREPLACE,
 * PR_SET_MM_MAP, clone3 with set_tid, new user+PID namespaces)? 0, or an
 * error whose message names the missing feature. Probes only; changes
 * nothing. */
int proc_kernel_check(void);

/* Check that img can be restored here (files it maps unchanged, kernel
 * features), start the restorer in a new user+PID+mount namespace with the
 * checkpointed pid, hand it channel (the agent's new channel end; closed
 * here) and stream the image to it. log_level: "debug" logs every stage. */
int proc_restore(struct img_reader *img, int channel, const char *log_level, struct proc_child *out);

/* A process tree: every process, the first one first (its wait status is
 * the restart's), from the checkpoint's tree description. pid 0: the
 * image's. A process whose parent is not in the tree is made a child of the
 * namespace's init. Channels are closed here. */
struct proc_restore_proc {
	struct img_reader *img;     /* NULL: a zombie */
	int32_t pid, ppid, pgid, sid;
	int32_t status;             /* a zombie's wait status */
	int channel;                /* the agent's new channel end */
	int peer;                   /* our end of it (-1: none): the next process's restore
				     * starts once this one said RESTARTED there */
};
/* Descriptors that share one open file description: the same group. */
struct proc_fd_share {
	int32_t group, pid, fd;
};
/* The tree's list of written files for the restart (proc_written_log_create's):
 * held at PROC_WRITTEN_ORIGIN for the agents' external descriptor of it,
 * and started from the checkpoint's lists by proc_restore_tree, which
 * removes the files the old log (old, len bytes; kept until then) says
 * the tree made since (proc_written_log_forget_created) */
int proc_restore_written_log(int fd, const char *old, size_t len);
int proc_restore_tree(const struct proc_restore_proc *v, size_t n, const struct proc_fd_share *sh,
		      size_t nsh, const char *log_level, struct proc_child *out);
/* The tree description a checkpoint stored (proc_tree_checkpoint): *v and
 * *sh are malloc'd, images not opened (img NULL; has_image[k] says which
 * need one), channels -1. */
int proc_tree_parse(const char *text, size_t len, struct proc_restore_proc **v, int **has_image,
		    size_t *n, struct proc_fd_share **sh, size_t *nsh);

/* A checkpoint's files: the first process's image, the tree description. */
#define PROC_IMAGE_FILE "process.img"
#define PROC_TREE_FILE "tree"
#define PROC_HELLO_TIMEOUT_MS 30000

/* Restart checkpoint directory dir (named ckpt in messages): the tree its
 * description holds (one process when it has none), each process from
 * its image. On success *tree holds every agent, each having said
 * RESTARTED, and out the namespace's parent; on failure everything it
 * started is gone, and -ECANCELED means the one-line reason was printed. */
int proc_tree_restart(const char *dir, const char *ckpt, const char *level, struct proc_child *out,
		      struct proc_tree **tree);

/* Wait until every process restored lazily here has all its pages in: a
 * checkpoint does first (a page not yet in would look never touched). */
void proc_lazy_wait(void);

/* Wait for a restored process to end: its wait status (as waitpid gives). */
int proc_child_wait(struct proc_child *c, int *status);

/* A restorer that gives up exits at once (42, its one line said); one
 * that runs the restored tree stays. Whether c ended within ms, without
 * reaping it (proc_child_wait does): a wait on a restorer that may run the
 * tree is bounded by it */
#define PROC_RESTORER_END_MS 2000
int proc_child_ends(const struct proc_child *c, int ms);

#endif
