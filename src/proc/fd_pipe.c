/* fd_pipe.c - pipes whose ends are all in the process: the first read end
 * carries what the pipe holds (peeked with tee, not taken out); a restart
 * makes the pipe again at its first descriptor, refills it and places
 * every end. A pipe with an end elsewhere is refused (alone). */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PIPE_PEEK_MAX (1u << 20)

static int is_pipe(uint32_t kind)
{
	return kind == PROC_FD_PIPE_READ || kind == PROC_FD_PIPE_WRITE;
}

static int pipe_end(const struct proc_fd_entry *v, size_t n, uint64_t ino, uint32_t kind)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].rec.ino == ino && v[i].rec.kind == kind)
			return (int)i;
	return -1;
}

static int pipe_alone(const struct proc_fd_entry *v, size_t n, size_t i)
{
	uint32_t other = v[i].rec.kind == PROC_FD_PIPE_READ ? PROC_FD_PIPE_WRITE : PROC_FD_PIPE_READ;

	return pipe_end(v, n, v[i].rec.ino, other) < 0;
}

/* What a pipe holds, without taking it out: tee into a scratch pipe. */
static int pipe_peek(int fd, struct proc_fd_entry *e)
{
	int tmp[2], ret = 0;
	size_t want = e->rec.pipe_size < PIPE_PEEK_MAX ? e->rec.pipe_size : PIPE_PEEK_MAX;
	ssize_t n;

	if (pipe2(tmp, O_CLOEXEC | O_NONBLOCK) != 0)
		return err_set(-errno, "cannot read the contents of pipe fd %d: %s", fd, strerror(errno));
	if (want > 65536)
		(void)fcntl(tmp[1], F_SETPIPE_SZ, (int)want);
	n = tee(fd, tmp[1], want, SPLICE_F_NONBLOCK);
	if (n > 0) {
		e->data = malloc((size_t)n);
		if (!e->data)
			ret = err_set(-ENOMEM, "out of memory");
		else if (read(tmp[0], e->data, (size_t)n) != n)
			ret = err_set(-EIO, "cannot read the contents of pipe fd %d", fd);
		else
			e->rec.data_len = (uint64_t)n;
	} else if (n < 0 && errno != EAGAIN) {
		ret = err_set(-errno, "cannot read the contents of pipe fd %d: %s", fd, strerror(errno));
	}
	close(tmp[0]);
	close(tmp[1]);
	return ret;
}

static int pipe_describe(int fd, struct proc_fd_entry *e, const struct stat *st,
			 const struct proc_fd_entry *v, size_t n)
{
	int p = fcntl(fd, F_GETPIPE_SZ);

	e->rec.pipe_size = p > 0 ? (uint32_t)p : 65536;
	/* the first read end of a pipe carries its contents */
	if (e->rec.kind == PROC_FD_PIPE_READ && pipe_end(v, n, st->st_ino, PROC_FD_PIPE_READ) < 0)
		return pipe_peek(fd, e);
	return 0;
}

/* Every end of the pipe of v[i] (its first one in v), refilled. */
static int pipe_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	int p[2], ret = 0;

	for (size_t k = 0; k < i; k++)
		if (is_pipe(v[k].rec.kind) && v[k].rec.ino == f->rec.ino)
			return 0;   /* made at its first descriptor */
	if (pipe2(p, O_CLOEXEC) != 0)
		return proc_fd_error(f, "cannot recreate pipe", errno);
	if ((p[0] = proc_fd_move_high(p[0], floor)) < 0 || (p[1] = proc_fd_move_high(p[1], floor)) < 0) {
		if (p[0] >= 0)
			close(p[0]);
		return proc_fd_error(f, "cannot recreate pipe", EMFILE);
	}
	if (f->rec.pipe_size > 65536)
		(void)fcntl(p[1], F_SETPIPE_SZ, (int)f->rec.pipe_size);
	for (size_t k = i; !ret && k < n; k++) {
		const struct proc_fd_entry *g = &v[k];

		if (is_pipe(g->rec.kind) && g->rec.ino == f->rec.ino && g->data && g->rec.data_len &&
		    write(p[1], g->data, g->rec.data_len) != (ssize_t)g->rec.data_len)
			ret = proc_fd_error(g, "cannot refill pipe", errno);
	}
	for (size_t k = i; !ret && k < n; k++) {
		const struct proc_fd_entry *g = &v[k];

		if (!is_pipe(g->rec.kind) || g->rec.ino != f->rec.ino)
			continue;
		if (dup2(g->rec.kind == PROC_FD_PIPE_READ ? p[0] : p[1], g->rec.fd) < 0) {
			ret = proc_fd_error(g, "cannot place pipe", errno);
			break;
		}
		(void)fcntl(g->rec.fd, F_SETFL, (int)(g->rec.flags & O_NONBLOCK));
	}
	close(p[0]);
	close(p[1]);
	return ret;
}

const struct proc_fd_ops proc_fd_pipe_ops = {
	.describe = pipe_describe,
	.alone = pipe_alone,
	.reopen = pipe_reopen,
};
