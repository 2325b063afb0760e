/* fd_pty.c - pseudo-terminals made by the process itself: a master
 * (/dev/ptmx) and, when the process holds it too, its slave. A restart
 * opens a new pty (another number: ptsname says which), places the slave
 * end through TIOCGPTPEER, sets the slave's termios and the window size
 * again, and writes what the master had not read back through the slave
 * with output processing off, so the master reads the same bytes. A slave
 * whose master is not in the process is a character device reopened by
 * path (fd_file.c), or an external descriptor. The agent describes both
 * ends (src/proc/inject/agent.c, describe_pty). */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static const struct proc_pty *pty_of(const struct proc_fd_entry *f)
{
	const struct proc_pty *p = f->data;

	return p && f->rec.data_len >= sizeof(*p) && f->rec.data_len == sizeof(*p) + p->queued ? p : NULL;
}

/* The master of slave v[i] in v, or -1. */
static int master_of(const struct proc_fd_entry *v, size_t n, size_t i)
{
	const struct proc_pty *s = pty_of(&v[i]);

	for (size_t k = 0; s && k < n; k++) {
		const struct proc_pty *m = v[k].rec.kind == PROC_FD_PTY ? pty_of(&v[k]) : NULL;

		if (m && m->master && m->index == s->index)
			return (int)k;
	}
	return -1;
}

static int settle(const struct proc_fd_entry *f, int slave, const struct proc_pty *p)
{
	struct winsize ws = { p->winsize_rows, p->winsize_cols, p->winsize_x, p->winsize_y };
	struct termios raw;

	memcpy(&raw, p->termios, sizeof(raw));
	raw.c_oflag &= ~(tcflag_t)OPOST;
	if (ioctl(slave, TIOCSWINSZ, &ws) != 0 || tcsetattr(slave, TCSANOW, &raw) != 0)
		return proc_fd_error(f, "cannot set the pseudo-terminal", errno);
	if (p->queued && write(slave, (const char *)f->data + sizeof(*p), p->queued) != (ssize_t)p->queued)
		return proc_fd_error(f, "cannot put back the unread bytes of", errno);
	if (tcsetattr(slave, TCSANOW, (const struct termios *)p->termios) != 0)
		return proc_fd_error(f, "cannot set the pseudo-terminal", errno);
	return 0;
}

/* A master and every slave of it in v, at their numbers. */
static int pty_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	const struct proc_pty *p = pty_of(f);
	int m, s, unlock = 0, ret = 0;

	if (!p)
		return proc_fd_error(f, "the image's record is damaged for", EBADMSG);
	if (!p->master)
		return master_of(v, n, i) >= 0 ? 0 : proc_fd_error(f, "no master in the image for", EBADMSG);
	m = open("/dev/ptmx", (int)(f->rec.flags & (O_ACCMODE | O_NONBLOCK)) | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return proc_fd_error(f, "cannot open a new pseudo-terminal for", errno);
	m = proc_fd_move_high(m, floor);
	if (m < 0 || ioctl(m, TIOCSPTLCK, &unlock) != 0 ||
	    (s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
		int e = m < 0 ? -m : errno;

		if (m >= 0)
			close(m);
		return proc_fd_error(f, "cannot open a new pseudo-terminal for", e);
	}
	s = proc_fd_move_high(s, floor);
	ret = s < 0 ? proc_fd_error(f, "cannot open a new pseudo-terminal for", -s) : settle(f, s, p);
	for (size_t k = 0; !ret && k < n; k++) {
		const struct proc_fd_entry *g = &v[k];
		int e;

		if (g->rec.kind != PROC_FD_PTY || !pty_of(g) || pty_of(g)->master || master_of(v, n, k) != (int)i)
			continue;
		e = ioctl(m, TIOCGPTPEER, (int)(g->rec.flags & (O_ACCMODE | O_NONBLOCK)) | O_NOCTTY | O_CLOEXEC);
		ret = e < 0 ? proc_fd_error(g, "cannot open the slave again", errno)
			    : proc_fd_place(g, proc_fd_move_high(e, floor));
	}
	if (s >= 0)
		close(s);
	if (!ret && p->locked)
		(void)ioctl(m, TIOCSPTLCK, &(int){ 1 });
	if (ret) {
		close(m);
		return ret;
	}
	return proc_fd_place(f, m);
}

const struct proc_fd_ops proc_fd_pty_ops = {
	.reopen = pty_reopen,
};
