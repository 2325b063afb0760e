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
struct proc_dump_info {
	int32_t pid;
	uint32_t threads;
	uint32_t regions;
	uint64_t stored_bytes;     /* page bytes received */
};
int proc_dump(int channel, struct img_writer *w, struct proc_dump_info *info);
/* Let the stopped program run on (stop = 0) or end it (stop = 1). */
int proc_dump_finish(int channel, int stop);

/* Wait for the agent's first message on a new channel (HELLO at launch,
 * RESTARTED after a restore). *pid: the program's pid as it sees it. */
int proc_agent_hello(int channel, int timeout_ms, pid_t *pid);

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

/* Wait for a restored process to end: its wait status (as waitpid gives). */
int proc_child_wait(struct proc_child *c, int *status);

#endif
