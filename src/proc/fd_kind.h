/* fd_kind.h - what kind of descriptor a process holds, for both process
 * checkpointers: the injected agent (which links nothing of Stasis's) and
 * src/proc/fds.c. Header-only. */
#ifndef STASIS_PROC_FD_KIND_H
#define STASIS_PROC_FD_KIND_H

#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "proc/proc_format.h"

/* The kind of a descriptor (enum proc_fd_kind) from its stat mode, its
 * link text in /proc/self/fd and its F_GETFL flags; 0 for a kind no
 * restart can give back (a socket, a block device, an anonymous inode
 * other than eventfd, timerfd, epoll, signalfd and inotify). A pipe is
 * only supported when both its ends are in the process
 * (proc_fds_unsupported, fds.h). */
static inline uint32_t proc_fd_kind(mode_t mode, const char *target, int flags)
{
	if (S_ISREG(mode))
		return PROC_FD_FILE;
	if (S_ISDIR(mode))
		return PROC_FD_DIR;
	if (S_ISCHR(mode))
		return PROC_FD_CHAR;
	if (S_ISFIFO(mode))
		return (flags & O_ACCMODE) == O_RDONLY ? PROC_FD_PIPE_READ : PROC_FD_PIPE_WRITE;
	if (!strcmp(target, "anon_inode:[eventfd]"))
		return PROC_FD_EVENTFD;
	if (!strcmp(target, "anon_inode:[timerfd]"))
		return PROC_FD_TIMERFD;
	if (!strcmp(target, "anon_inode:[eventpoll]"))
		return PROC_FD_EPOLL;
	if (!strcmp(target, "anon_inode:[signalfd]"))
		return PROC_FD_SIGNALFD;
	if (!strcmp(target, "anon_inode:inotify"))
		return PROC_FD_INOTIFY;
	return 0;
}

/* "a socket", "a pipe or FIFO shared with another process", ...: what a
 * refusal says the descriptor is */
static inline const char *proc_fd_kind_name(mode_t mode, const char *target)
{
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISFIFO(mode))
		return "a pipe or FIFO shared with another process";
	if (strncmp(target, "anon_inode:", 11) == 0)
		return target + 11;
	if (S_ISBLK(mode))
		return "a block device";
	return "of a kind Stasis cannot save";
}

#endif
