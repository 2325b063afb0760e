/* fds.h - a process's descriptors: described at a checkpoint, opened again
 * at their numbers at a restart (docs/transparent.md, "Descriptors").
 *
 * One table of struct proc_fd records (proc_format.h) serves both process
 * checkpointers: the single-process mode's agent streams them and
 * restore.c sets them up before the restorer runs; the split process's
 * lower half writes its upper half's into the rank image and sets them up
 * before the upper half resumes (src/split/lower/lh_fds.c). The rules are the
 * same: regular files by path, flags and offset (the contents of one
 * unlinked while open), directories and character devices by path, pipes
 * whose ends are all in the process recreated and refilled, eventfd,
 * timerfd and epoll from their fdinfo text, stdio (0, 1, 2) taken over
 * from the restart; anything else is refused at the checkpoint with one
 * line naming the descriptor and its kind.
 *
 * Functions return 0 or a negative errno with a one-line message in
 * err_msg() (common/err.h), unless said otherwise.
 */
#ifndef STASIS_PROC_FDS_H
#define STASIS_PROC_FDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "proc/fd_kind.h"
#include "proc/proc_format.h"

/* One descriptor of a table: the record, its path (link text of
 * /proc/self/fd/N, NUL-terminated) and data_len bytes of data. The table
 * owns path and data (malloc'ed). */
struct proc_fd_entry {
	struct proc_fd rec;
	char *path;
	void *data;
};

/* Regular files open for reading and writing (O_RDWR) are described with
 * their contents up to this many bytes each (PROC_FD_FILE_SAVED), and a
 * restart puts the contents back: a program that updates a file in place
 * and reads it back (a database) finds it as at the checkpoint, not as it
 * went on after it. A larger one fails the description with -EFBIG. 0 (the
 * default): such files are reopened by path only. The split process sets
 * it from the key file_save_max; the single-process mode's coordinator
 * reads such files itself as the agent's records arrive (dump.c). */
extern uint64_t proc_fd_save_max;

/* Make the file open at fd hold size bytes of data, writing only the
 * pieces that differ (a PROC_FD_FILE_SAVED's contents back at a restart);
 * 0 or -errno, without a message. */
int proc_file_contents_back(int fd, const void *data, uint64_t size);

/* Fill e for descriptor fd of the calling process, kind included (0 for
 * an unsupported one: the caller refuses it), with its data: a pipe's
 * buffered bytes for the first read end of its pipe in v[0..n), the fdinfo
 * text of an eventfd, timerfd or epoll, the contents of an unlinked file.
 * Descriptors 0-2 are PROC_FD_STDIO. -EBADF if fd is not open. */
int proc_fd_describe(int fd, struct proc_fd_entry *e, const struct proc_fd_entry *v, size_t n);

/* The first descriptor of v whose kind is 0, or a pipe end whose other
 * end is not in v; -1 if there is none. */
int proc_fds_unsupported(const struct proc_fd_entry *v, size_t n);

/* Before a restart: every file still exists and is not shorter than it
 * was (it may have grown: proc_fds_reopen sets a written one back). */
int proc_fds_check(const struct proc_fd_entry *v, size_t n);

/* Open every descriptor of v again at its number, with its flags and
 * offset, open across exec (the caller sets close-on-exec from
 * rec.cloexec where it wants it); what the process has at those numbers now is
 * replaced. Working descriptors go at floor or above on the way. A
 * regular file open for writing that grew after the checkpoint is cut
 * back to its size then: what the program wrote after the checkpoint it
 * will write again. Stdio records are left to the restart. On an error the
 * descriptors placed so far stay. */
int proc_fds_reopen(const struct proc_fd_entry *v, size_t n, int floor);

/* proc_fds_reopen in two steps: open and place every descriptor of v,
 * then, once every descriptor of the process is in place (v's and any
 * placed another way, as the tree's shared descriptions), what is left:
 * epoll watches, a file's locks. */
int proc_fds_open(const struct proc_fd_entry *v, size_t n, int floor);
int proc_fds_finish(const struct proc_fd_entry *v, size_t n);

/* A UNIX socket connected to another, in this process or in another of a
 * tree: 1 with the pair it belongs to (*key, the smaller inode of its two
 * ends) and its end (*end, 0 for the smaller inode); else 0. A restart of
 * a tree makes each pair once and places its ends in every process that
 * holds one (restore.c). */
int proc_socket_pair_of(const struct proc_fd_entry *f, uint64_t *key, int *end);
/* Make such a pair again (the kind of socket of e[0] or e[1]): ends[k] is
 * end k, refilled with what e[k] had not read (e[k] NULL: an end no
 * process holds, which the caller closes). */
int proc_socket_pair_make(const struct proc_fd_entry *const e[2], int ends[2]);

/* Free the paths and data of v[0..n) and v. */
void proc_fds_free(struct proc_fd_entry *v, size_t n);

#endif
