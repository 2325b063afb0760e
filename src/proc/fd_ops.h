/* fd_ops.h - one table of operations per kind of descriptor (fds.c
 * dispatches, fd_<kind>.c implements, with fd_common.c's helpers below):
 * how a kind is described at a checkpoint and opened again at a restart,
 * side by side in one file. Calls run one way: fds.c -> fd_<kind>.c ->
 * fd_common.c.
 * Internal to src/proc and src/split/lower/lh_fds.c's use of fds.h.
 *
 * Functions return 0 or a negative errno with a one-line message in
 * err_msg() (common/err.h).
 */
#ifndef STASIS_PROC_FD_OPS_H
#define STASIS_PROC_FD_OPS_H

#include <stddef.h>
#include <sys/stat.h>

#include "proc/fds.h"

struct proc_fd_ops {
	/* e holds the record's common fields and path; fill the rest of the
	 * record and its data. v[0..n) are the descriptors described so far.
	 * NULL: nothing more to say. */
	int (*describe)(int fd, struct proc_fd_entry *e, const struct stat *st,
			const struct proc_fd_entry *v, size_t n);
	/* Nonzero when v[i] cannot be saved with the rest of v (a pipe whose
	 * other end is elsewhere). NULL: always can. */
	int (*alone)(const struct proc_fd_entry *v, size_t n, size_t i);
	/* Before a restart: what v[i] refers to is still there. NULL: nothing. */
	int (*check)(const struct proc_fd_entry *f);
	/* Open v[i] again at its number (fds.h, proc_fds_reopen). NULL: the
	 * restart places it itself (stdio, external). */
	int (*reopen)(const struct proc_fd_entry *v, size_t n, size_t i, int floor);
	/* v[i] once every descriptor is in place. NULL: nothing. */
	int (*finish)(const struct proc_fd_entry *v, size_t n, size_t i);
};

/* The operations of a kind, NULL for none. */
const struct proc_fd_ops *proc_fd_ops_of(uint32_t kind);

extern const struct proc_fd_ops proc_fd_file_ops;      /* fd_file.c: FILE, DIR, CHAR */
extern const struct proc_fd_ops proc_fd_unlinked_ops;  /* fd_file.c */
extern const struct proc_fd_ops proc_fd_pipe_ops;      /* fd_pipe.c: both ends */
extern const struct proc_fd_ops proc_fd_eventfd_ops;   /* fd_eventfd.c */
extern const struct proc_fd_ops proc_fd_timerfd_ops;   /* fd_timerfd.c */
extern const struct proc_fd_ops proc_fd_epoll_ops;     /* fd_epoll.c */
extern const struct proc_fd_ops proc_fd_signalfd_ops;  /* fd_signalfd.c */
extern const struct proc_fd_ops proc_fd_inotify_ops;   /* fd_inotify.c */
extern const struct proc_fd_ops proc_fd_socket_ops;    /* fd_socket.c */
extern const struct proc_fd_ops proc_fd_pty_ops;       /* fd_pty.c */

/* Shared by the kinds (fds.c). */
int proc_fd_error(const struct proc_fd_entry *f, const char *what, int err);
/* fd moved to floor or above, closed; the new number or -errno */
int proc_fd_move_high(int fd, int floor);
/* from (at floor or above, or a negative errno) placed at f's number */
int proc_fd_place(const struct proc_fd_entry *f, int from);
/* e's data: the /proc/self/fdinfo text of fd */
int proc_fd_read_fdinfo(int fd, struct proc_fd_entry *e);
/* a describe operation for kinds saved by their fdinfo text alone */
int proc_fd_describe_fdinfo(int fd, struct proc_fd_entry *e, const struct stat *st,
			    const struct proc_fd_entry *v, size_t n);
/* The value of "key:" in f's fdinfo text, or NULL. */
const char *proc_fd_info_field(const struct proc_fd_entry *f, const char *key);

#endif
