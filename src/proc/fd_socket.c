/* fd_socket.c - UNIX sockets (stream, datagram, seqpacket) and TCP
 * sockets (docs/descriptors.md, "Sockets"). The agent describes a socket (struct proc_socket: family,
 * state, addresses, its peer) and peeks at its receive queue; a restart
 * makes it again:
 *  - listening: bound to its address again and listening (a UNIX socket's
 *    stale file removed first); connections not yet accepted are lost;
 *  - connected, both ends in the process (a UNIX pair whose ends are in
 *    processes of a tree is made by restore.c with proc_socket_pair_make,
 *    before the processes place their ends): a UNIX pair is a new socketpair
 *    (the addresses of an accepted pair are not kept), a TCP pair is
 *    connected again on its addresses through its listener or a scratch
 *    one; each end's unread bytes (a datagram or seqpacket socket's
 *    messages, each a u32 length and its bytes) are sent again by the
 *    other end, so they are read again;
 *  - connected to a peer outside the process: a UNIX datagram socket
 *    connected to a named one is connected to that name again; else the
 *    checkpoint refuses it when sockets_outside = refuse, or it comes back
 *    closed, as after a network failure: a TCP socket reset by its peer
 *    (ECONNRESET), a UNIX one whose peer has gone (EOF, EPIPE);
 *  - neither: made and bound to its address again.
 * The dump side is the agent's (src/proc/inject/agent.c, describe_socket):
 * it runs inside the program with every thread parked. */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const struct proc_socket *sock_of(const struct proc_fd_entry *f)
{
	return f->data && f->rec.data_len >= sizeof(struct proc_socket)
		       ? (const struct proc_socket *)f->data : NULL;
}

static int same(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

/* The other end of connected socket v[i] in v, or -1. */
static int peer_of(const struct proc_fd_entry *v, size_t n, size_t i)
{
	const struct proc_socket *s = sock_of(&v[i]);

	for (size_t k = 0; s && k < n; k++) {
		const struct proc_socket *o = v[k].rec.kind == PROC_FD_SOCKET ? sock_of(&v[k]) : NULL;

		if (k == i || !o || o->state != PROC_SOCK_CONNECTED || o->family != s->family)
			continue;
		if (s->family == AF_UNIX ? v[k].rec.ino == s->peer_ino
					 : same(o->local, o->local_len, s->peer, s->peer_len) &&
					   same(o->peer, o->peer_len, s->local, s->local_len))
			return (int)k;
	}
	return -1;
}

/* The listening socket of v bound to addr, or -1. */
static int listener_at(const struct proc_fd_entry *v, size_t n, const uint8_t *addr, uint32_t len)
{
	for (size_t k = 0; k < n; k++) {
		const struct proc_socket *o = v[k].rec.kind == PROC_FD_SOCKET ? sock_of(&v[k]) : NULL;

		if (o && o->state == PROC_SOCK_LISTEN && same(o->local, o->local_len, addr, len))
			return (int)k;
	}
	return -1;
}

static int reuse(int fd, int on)
{
	return setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
}

static int has_name(const struct proc_socket *s)
{
	return s->local_len > sizeof(sa_family_t) &&
	       (s->family != AF_UNIX || ((const struct sockaddr_un *)s->local)->sun_path[0] ||
		s->local_len > sizeof(sa_family_t) + 1);
}

/* A UNIX socket's file left by the process the checkpoint was taken of. */
static void remove_stale(const struct proc_socket *s)
{
	const struct sockaddr_un *un = (const struct sockaddr_un *)s->local;
	char path[sizeof(un->sun_path) + 1];
	struct stat st;

	if (s->family != AF_UNIX || !un->sun_path[0])
		return;
	snprintf(path, sizeof(path), "%.*s", (int)(s->local_len - sizeof(sa_family_t)), un->sun_path);
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
}

/* A socket made and bound again (listening, or neither), at floor. */
static int bound_socket(const struct proc_fd_entry *f, const struct proc_socket *s, int floor)
{
	int fd = socket((int)s->family, (int)s->type | SOCK_CLOEXEC, (int)s->protocol);

	if (fd < 0)
		return proc_fd_error(f, "cannot recreate socket", errno);
	if (has_name(s)) {
		remove_stale(s);
		if (s->family != AF_UNIX)
			(void)reuse(fd, 1);
		if (bind(fd, (const struct sockaddr *)s->local, s->local_len) != 0) {
			int e = errno;

			close(fd);
			return proc_fd_error(f, "cannot bind socket again", e);
		}
	}
	if (s->state == PROC_SOCK_LISTEN && listen(fd, (int)s->backlog) != 0) {
		int e = errno;

		close(fd);
		return proc_fd_error(f, "cannot listen on socket again", e);
	}
	/* SO_REUSEADDR through bind and listen: the killed process's
	 * connections on the port may wait in TIME_WAIT (the agent set it on
	 * them) */
	if (s->family != AF_UNIX)
		(void)reuse(fd, (int)s->reuseaddr);
	return proc_fd_move_high(fd, floor);
}

/* A UNIX datagram socket connected to a named socket outside (syslog's
 * /dev/log): connected to that name again, as datagrams hold no state of
 * a connection; -1 when it cannot be. */
static int reconnect_datagram(const struct proc_socket *s, int floor)
{
	int fd;

	if (s->family != AF_UNIX || s->type != SOCK_DGRAM ||
	    s->peer_len <= sizeof(sa_family_t) + 1)
		return -1;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && (!has_name(s) || bind(fd, (const struct sockaddr *)s->local, s->local_len) == 0) &&
	    connect(fd, (const struct sockaddr *)s->peer, s->peer_len) == 0)
		return proc_fd_move_high(fd, floor);
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A socket whose peer outside the process is gone: a TCP connection reset
 * by a scratch peer, a UNIX socket whose peer end is closed. */
static int closed_socket(const struct proc_fd_entry *f, const struct proc_socket *s, int floor)
{
	struct sockaddr_storage a;
	socklen_t al = sizeof(a);
	struct linger lg = { 1, 0 };
	int sv[2], l = -1, c = -1, p = -1;

	if (s->family == AF_UNIX) {
		if (socketpair(AF_UNIX, (int)s->type | SOCK_CLOEXEC, 0, sv) != 0)
			return proc_fd_error(f, "cannot recreate socket", errno);
		close(sv[1]);
		return proc_fd_move_high(sv[0], floor);
	}
	memset(&a, 0, sizeof(a));
	a.ss_family = (sa_family_t)s->family;
	if (s->family == AF_INET)
		((struct sockaddr_in *)&a)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)&a)->sin6_addr = in6addr_loopback;
	l = socket((int)s->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	c = socket((int)s->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || c < 0 ||
	    bind(l, (struct sockaddr *)&a, s->family == AF_INET ? sizeof(struct sockaddr_in)
								: sizeof(struct sockaddr_in6)) != 0 ||
	    listen(l, 1) != 0 || getsockname(l, (struct sockaddr *)&a, &al) != 0 ||
	    connect(c, (struct sockaddr *)&a, al) != 0 || (p = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		int e = errno;

		if (l >= 0)
			close(l);
		if (c >= 0)
			close(c);
		return proc_fd_error(f, "cannot make a closed socket for", e);
	}
	(void)setsockopt(p, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(p);   /* a reset, as from a peer that went away */
	close(l);
	return proc_fd_move_high(c, floor);
}

/* A TCP pair connected again on its addresses: cl connects from its
 * address to sv's, through sv's listener when it is already in place, else
 * through a scratch one. */
static int tcp_pair(const struct proc_fd_entry *v, size_t n, size_t cl, size_t sv, int out[2])
{
	const struct proc_socket *c = sock_of(&v[cl]), *s = sock_of(&v[sv]);
	int lk = listener_at(v, n, s->local, s->local_len);
	int l = lk >= 0 && (size_t)lk < cl && (size_t)lk < sv ? v[lk].rec.fd : -1;
	int own = l < 0, fd;

	if (own) {
		l = socket((int)s->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (l < 0 || reuse(l, 1) != 0 || bind(l, (const struct sockaddr *)s->local, s->local_len) != 0 ||
		    listen(l, 1) != 0) {
			int e = errno;

			if (l >= 0)
				close(l);
			return proc_fd_error(&v[sv], "cannot listen again at the address of", e);
		}
	}
	fd = socket((int)c->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		(void)reuse(fd, 1);
		/* its port may still be taken by the old connection (TIME_WAIT): any other will do */
		if (bind(fd, (const struct sockaddr *)c->local, c->local_len) != 0) {
			struct sockaddr_storage any;

			memcpy(&any, c->local, sizeof(any));
			if (any.ss_family == AF_INET)
				((struct sockaddr_in *)&any)->sin_port = 0;
			else
				((struct sockaddr_in6 *)&any)->sin6_port = 0;
			(void)bind(fd, (struct sockaddr *)&any, c->local_len);
		}
	}
	if (fd < 0 || connect(fd, (const struct sockaddr *)s->local, s->local_len) != 0 ||
	    (out[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		if (own)
			close(l);
		return proc_fd_error(&v[cl], "cannot connect again", e);
	}
	if (own)
		close(l);
	out[0] = fd;
	return 0;
}

/* What v[from] had not read yet, written into its new peer `into`. */
static int refill(const struct proc_fd_entry *f, int into)
{
	const struct proc_socket *s = sock_of(f);
	const char *q = (const char *)f->data + sizeof(*s);
	struct timeval tv = { 10, 0 };

	(void)setsockopt(into, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	for (uint64_t off = 0; s->type != SOCK_STREAM && off + 4 <= s->queued;) {
		uint32_t len;

		memcpy(&len, q + off, 4);
		if (off + 4 + len > s->queued || send(into, q + off + 4, len, MSG_NOSIGNAL) != (ssize_t)len)
			return proc_fd_error(f, "cannot send again the messages of socket", errno ? errno : EIO);
		off += 4 + (uint64_t)len;
	}
	for (uint64_t off = 0; s->type == SOCK_STREAM && off < s->queued;) {
		ssize_t w = send(into, q + off, s->queued - off, MSG_NOSIGNAL);

		if (w <= 0)
			return proc_fd_error(f, "cannot put back the unread bytes of socket", w < 0 ? errno : EIO);
		off += (uint64_t)w;
	}
	tv.tv_sec = 0;
	(void)setsockopt(into, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return 0;
}

int proc_socket_pair_of(const struct proc_fd_entry *f, uint64_t *key, int *end)
{
	const struct proc_socket *s = f->rec.kind == PROC_FD_SOCKET ? sock_of(f) : NULL;

	if (!s || s->family != AF_UNIX || s->state != PROC_SOCK_CONNECTED || !s->peer_ino ||
	    (s->type == SOCK_DGRAM && s->peer_len > sizeof(sa_family_t) + 1))
		return 0;   /* a datagram socket connected to a name is connected again */
	*key = f->rec.ino < s->peer_ino ? f->rec.ino : s->peer_ino;
	*end = f->rec.ino != *key;
	return 1;
}

int proc_socket_pair_make(const struct proc_fd_entry *const e[2], int ends[2])
{
	const struct proc_fd_entry *any = e[0] ? e[0] : e[1];
	const struct proc_socket *s = sock_of(any);
	int ret = 0;

	if (!s || socketpair(AF_UNIX, (int)s->type | SOCK_CLOEXEC, 0, ends) != 0)
		return proc_fd_error(any, "cannot recreate socket pair", s ? errno : EBADMSG);
	for (int k = 0; !ret && k < 2; k++)
		if (e[k] && sock_of(e[k]))
			ret = refill(e[k], ends[1 - k]);
	if (ret) {
		close(ends[0]);
		close(ends[1]);
	}
	return ret;
}

static int set_flags(const struct proc_fd_entry *f)
{
	if ((f->rec.flags & O_NONBLOCK) && fcntl(f->rec.fd, F_SETFL, O_NONBLOCK) != 0)
		return proc_fd_error(f, "cannot set the flags of socket", errno);
	return 0;
}

static int socket_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	const struct proc_socket *s = sock_of(f);
	int k, ends[2], ret;

	if (!s || f->rec.data_len != sizeof(*s) + s->queued || s->local_len > sizeof(s->local) ||
	    s->peer_len > sizeof(s->peer))
		return proc_fd_error(f, "the image's record is damaged for socket", EBADMSG);
	if (s->state != PROC_SOCK_CONNECTED) {
		ret = proc_fd_place(f, bound_socket(f, s, floor));
		return ret ? ret : set_flags(f);
	}
	k = peer_of(v, n, i);
	if (k < 0) {
		int fd = reconnect_datagram(s, floor);

		ret = proc_fd_place(f, fd >= 0 ? fd : closed_socket(f, s, floor));
		return ret ? ret : set_flags(f);
	}
	if ((size_t)k < i)
		return 0;   /* made with its peer */
	if (s->family == AF_UNIX)
		ret = socketpair(AF_UNIX, (int)s->type | SOCK_CLOEXEC, 0, ends) != 0
			      ? proc_fd_error(f, "cannot recreate socket pair", errno) : 0;
	else if (listener_at(v, n, s->local, s->local_len) >= 0)
		ret = tcp_pair(v, n, (size_t)k, i, ends);   /* v[i] is the server's end */
	else
		ret = tcp_pair(v, n, i, (size_t)k, ends);
	if (ret)
		return ret;
	if (s->family != AF_UNIX && listener_at(v, n, s->local, s->local_len) >= 0) {
		int t = ends[0];

		ends[0] = ends[1];
		ends[1] = t;
	}
	/* ends[0] is v[i]'s, ends[1] v[k]'s: out of the way of every number first */
	ends[0] = proc_fd_move_high(ends[0], floor);
	ends[1] = proc_fd_move_high(ends[1], floor);
	if (ends[0] < 0 || ends[1] < 0) {
		if (ends[0] >= 0)
			close(ends[0]);
		if (ends[1] >= 0)
			close(ends[1]);
		return proc_fd_error(f, "cannot recreate socket", EMFILE);
	}
	ret = refill(f, ends[1]);
	if (!ret)
		ret = refill(&v[k], ends[0]);
	if (ret) {
		close(ends[0]);
		close(ends[1]);
		return ret;
	}
	ret = proc_fd_place(&v[k], ends[1]);
	if (ret) {
		close(ends[0]);
		return ret;
	}
	ret = proc_fd_place(f, ends[0]);
	if (!ret)
		ret = set_flags(f);
	return ret ? ret : set_flags(&v[k]);
}

/* Every end is in place: SO_REUSEADDR as it was (set on the way so that
 * a listener could bind beside the connections on its port). */
static int socket_finish(const struct proc_fd_entry *v, size_t n, size_t i)
{
	const struct proc_socket *s = sock_of(&v[i]);

	(void)n;
	if (s && s->state == PROC_SOCK_CONNECTED && s->family != AF_UNIX)
		(void)reuse(v[i].rec.fd, (int)s->reuseaddr);
	return 0;
}

const struct proc_fd_ops proc_fd_socket_ops = {
	.reopen = socket_reopen,
	.finish = socket_finish,
};
