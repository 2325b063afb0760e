/* link.c - a transport of its own: TCP between the members of a job.
 *
 * The progress threads (progress.c) move partner copies and rs cells while
 * the application computes, and the application's MPI may not be
 * thread-safe (plain MPI_Init gives MPI_THREAD_SINGLE), so they never call
 * it. Instead, when the link opens every member opens a listening socket,
 * and one allgather over the job's communicator (MPI for libstasis, any
 * other backend for other callers) tells every member every other member's
 * address and port, plus a secret drawn by rank 0: a connection that does
 * not present it is closed unheard.
 *
 * A pair of ranks shares one connection, made on first use by the lower
 * rank. A stream per pair keeps messages in order, which is all the shared
 * code needs: like the MPI backend, it pairs every send with a receive in
 * one global order. Collectives go through rank 0 (gather, combine,
 * broadcast): they carry a few bytes per rank.
 *
 * Any failure poisons the link: every socket, the listener too, is closed
 * at once, so the ranks talking to this one fail in turn, and every rank's
 * progress thread fails its upgrade the same way instead of reading a
 * stream out of step. A dead process shows as an error (EOF, reset), a dead
 * node through TCP keepalive; a rank that never connects is given up on
 * after `link_timeout`. Waits for data have no timeout: a slow peer (a
 * flush to a busy file system) is not a dead one.
 */
#include "redundancy/redundancy.h"
#include "common/config.h"
#include "common/err.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINK_MAGIC 0x4b4c5453u          /* "STLK" */
#define LINK_VERSION 1u
#define SECRET_LEN 16
#define LINK_PIPE (1 << 20)             /* bytes a splice from a socket may move at once */

struct link_endpoint {
	char addr[INET6_ADDRSTRLEN];
	uint16_t port;
};

struct link_hello {
	uint32_t magic;
	uint32_t version;
	int32_t rank;
	uint8_t secret[SECRET_LEN];
};

struct link {
	int rank, size;
	int lfd;                        /* listening socket */
	int *fd;                        /* connection to each rank, or -1 */
	struct link_endpoint *peer;
	uint8_t secret[SECRET_LEN];
	int timeout_ms;                 /* for a connection to be made */
	int pipe[2];                    /* socket to file (splice), made on first use */
	int dead;                       /* poisoned: every operation fails */
	char why[200];
};

/* ---- byte streams ---- */

static int wait_fd(int fd, short events, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;

	do
		n = poll(&p, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == 0 ? -ETIMEDOUT : 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len, int timeout_ms)
{
	char *p = buf;

	while (len) {
		ssize_t n;
		int ret = timeout_ms >= 0 ? wait_fd(fd, POLLIN, timeout_ms) : 0;

		if (ret)
			return ret;
		n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- connections ---- */

static void tune(int fd)
{
	int one = 1, idle = 30, intvl = 10, cnt = 6;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* Close everything and fail from now on, with ret's message kept. */
static int poison(struct link *l, int ret)
{
	if (!l->dead) {
		snprintf(l->why, sizeof(l->why), "%s", err_msg());
		for (int r = 0; r < l->size; r++)
			if (l->fd[r] >= 0) {
				close(l->fd[r]);
				l->fd[r] = -1;
			}
		if (l->lfd >= 0)
			close(l->lfd);
		l->lfd = -1;
		l->dead = 1;
		log_warn("link: rank %d: %s; progress traffic stops for this job", l->rank, l->why);
	}
	return ret;
}

static int connect_to(struct link *l, int peer)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST }, *ai = NULL;
	struct link_hello hello = { LINK_MAGIC, LINK_VERSION, l->rank, { 0 } };
	char port[8];
	int fd = -1, ret;

	snprintf(port, sizeof(port), "%u", l->peer[peer].port);
	ret = getaddrinfo(l->peer[peer].addr, port, &hints, &ai);
	if (ret)
		return err_set(-EHOSTUNREACH, "link: rank %d's address %s: %s", peer, l->peer[peer].addr,
			       gai_strerror(ret));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		ret = err_set(-errno, "link: cannot connect to rank %d at %s:%u: %s", peer,
			      l->peer[peer].addr, l->peer[peer].port, strerror(errno));
		goto fail;
	}
	memcpy(hello.secret, l->secret, SECRET_LEN);
	ret = write_all(fd, &hello, sizeof(hello));
	if (ret) {
		err_set(ret, "link: cannot greet rank %d: %s", peer, strerror(-ret));
		goto fail;
	}
	tune(fd);
	freeaddrinfo(ai);
	l->fd[peer] = fd;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return ret;
}

/* Accept connections until rank `peer` has one; others are filed as they
 * come. A connection without the job's secret is closed. */
static int accept_from(struct link *l, int peer)
{
	while (l->fd[peer] < 0) {
		struct link_hello hello;
		int fd, ret = wait_fd(l->lfd, POLLIN, l->timeout_ms);

		if (ret)
			return err_set(ret, "link: rank %d did not connect within %d s%s", peer,
				       l->timeout_ms / 1000, ret == -ETIMEDOUT ? " (did it die?)" : "");
		fd = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return err_set(-errno, "link: accept: %s", strerror(errno));
		}
		ret = read_all(fd, &hello, sizeof(hello), 10000);
		if (ret || hello.magic != LINK_MAGIC || hello.version != LINK_VERSION ||
		    memcmp(hello.secret, l->secret, SECRET_LEN) != 0 || hello.rank < 0 ||
		    hello.rank >= l->size || hello.rank >= l->rank || l->fd[hello.rank] >= 0) {
			log_warn("link: rank %d: refused a connection that did not present this job's "
				 "secret and a valid rank", l->rank);
			close(fd);
			continue;
		}
		tune(fd);
		l->fd[hello.rank] = fd;
	}
	return 0;
}

static int peer_fd(struct link *l, int peer)
{
	int ret;

	if (l->dead)
		return err_set(-EPIPE, "link: closed after an earlier failure (%s)", l->why);
	if (peer < 0 || peer >= l->size || peer == l->rank)
		return err_set(-EINVAL, "link: rank %d cannot talk to rank %d", l->rank, peer);
	if (l->fd[peer] >= 0)
		return l->fd[peer];
	ret = peer > l->rank ? connect_to(l, peer) : accept_from(l, peer);
	return ret ? poison(l, ret) : l->fd[peer];
}

/* ---- operations ---- */

static int link_rank(void *h)
{
	return ((struct link *)h)->rank;
}

static int link_size(void *h)
{
	return ((struct link *)h)->size;
}

static int link_send(void *h, const void *buf, size_t len, int dest)
{
	struct link *l = h;
	int fd = peer_fd(l, dest), ret;

	if (fd < 0)
		return fd;
	ret = write_all(fd, buf, len);
	if (ret)
		return poison(l, err_set(ret, "link: sending to rank %d: %s", dest, strerror(-ret)));
	return 0;
}

static int link_recv(void *h, void *buf, size_t len, int src)
{
	struct link *l = h;
	int fd = peer_fd(l, src), ret;

	if (fd < 0)
		return fd;
	ret = read_all(fd, buf, len, -1);
	if (ret)
		return poison(l, err_set(ret, "link: receiving from rank %d: %s", src,
					 ret == -ECONNRESET ? "it closed the connection (did it die?)" :
					 strerror(-ret)));
	return 0;
}

/* Where the bytes received go: memory (rp), file rffd at roff (rffd >= 0),
 * or nowhere (the receiver failed already: the stream is drained) */
struct sink {
	char *rp;
	int rffd;
	off_t roff;
	int err;                        /* the first error writing into rffd */
};

/* Up to rlen bytes that are there from socket rfd into the sink: spliced
 * into the file through the link's pipe (no copy through a buffer), else
 * received into memory (a buffer on the stack when they go to the file
 * without a pipe, or nowhere). Returns recv's count, 0 at the end of the
 * stream, < 0 with errno set. */
static ssize_t sink_recv(struct link *l, int rfd, struct sink *k, size_t rlen)
{
	char junk[65536];
	ssize_t n;

	if (k->rffd >= 0 && l->pipe[0] < 0 && pipe2(l->pipe, O_CLOEXEC | O_NONBLOCK) == 0)
		fcntl(l->pipe[1], F_SETPIPE_SZ, LINK_PIPE);    /* fewer, larger splices */
	if (k->rffd >= 0 && l->pipe[0] >= 0) {
		n = splice(rfd, NULL, l->pipe[1], NULL, rlen, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		for (ssize_t left = n, w; left > 0; left -= w) {
			w = k->err ? read(l->pipe[0], junk, (size_t)left < sizeof(junk) ?
					  (size_t)left : sizeof(junk)) :
			    splice(l->pipe[0], NULL, k->rffd, &k->roff, (size_t)left, SPLICE_F_MOVE);
			if (w > 0)
				continue;
			if (w < 0 && errno == EINTR) {
				w = 0;
				continue;
			}
			if (k->err) {
				errno = EPIPE;  /* the pipe lost bytes: the stream is out of step */
				return -1;
			}
			k->err = w < 0 ? -errno : -ENOSPC;      /* the rest: drained */
			w = 0;
		}
		return n;
	}
	if (k->rp) {
		n = recv(rfd, k->rp, rlen, MSG_DONTWAIT);
		k->rp += n > 0 ? n : 0;
		return n;
	}
	n = recv(rfd, junk, rlen < sizeof(junk) ? rlen : sizeof(junk), MSG_DONTWAIT);
	for (ssize_t at = 0, w; n > 0 && k->rffd >= 0 && !k->err && at < n; at += w) {
		w = pwrite(k->rffd, junk + at, (size_t)(n - at), k->roff);
		if (w <= 0)
			k->err = w < 0 ? -errno : -ENOSPC;
		else
			k->roff += w;
	}
	return n;
}

/* sendfile has no MSG_NOSIGNAL: sending to a peer that went away (a rank
 * killed, a link poisoned there) raises SIGPIPE, whose default ends the
 * process, an application's rank with its own disposition. So SIGPIPE is
 * blocked in this thread while a file is sent, and one raised meanwhile
 * is taken back before the mask is restored: not only after an EPIPE, as
 * a sendfile that moved some bytes before the peer's reset returns their
 * count, its SIGPIPE raised all the same. */
struct quiet_pipe {
	sigset_t old;
	int pending;                    /* SIGPIPE was pending already: not ours */
};

static int pipe_pending(void)
{
	sigset_t pending;

	return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

static void quiet_pipe_begin(struct quiet_pipe *q)
{
	sigset_t pipe;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	q->pending = pipe_pending();
	pthread_sigmask(SIG_BLOCK, &pipe, &q->old);
}

static void quiet_pipe_end(struct quiet_pipe *q)
{
	const struct timespec now = { 0, 0 };
	sigset_t pipe;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	if (!q->pending && pipe_pending())
		while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, &q->old, NULL);
}

/* Both directions at once, so two ranks exchanging large buffers never
 * both block in send with full socket buffers. The bytes sent come from sp,
 * or (ffd >= 0) from file ffd at foff, with sendfile: one copy fewer; the
 * bytes received go to the sink. */
static int exchange(struct link *l, const char *sp, int ffd, uint64_t foff, size_t slen, int dest,
		    struct sink *sink, size_t rlen, int src)
{
	static const char zeros[65536];
	int sfd = slen ? peer_fd(l, dest) : 0, rfd = rlen ? peer_fd(l, src) : 0, flags = -1, ret = 0;
	int rflags = -1;
	const int quiet = ffd >= 0 && slen;
	struct quiet_pipe q;
	off_t off = (off_t)foff;

	if (sfd < 0 || rfd < 0)
		return sfd < 0 ? sfd : rfd;
	/* sendfile has no MSG_DONTWAIT, splice of a socket waits for all it
	 * was asked: the sockets themselves must not block */
	if (ffd >= 0 && slen) {
		flags = fcntl(sfd, F_GETFL);
		if (flags < 0 || fcntl(sfd, F_SETFL, flags | O_NONBLOCK) < 0)
			return poison(l, err_set(-errno, "link: socket to rank %d: %s", dest,
						 strerror(errno)));
	}
	if (sink->rffd >= 0 && rlen && !(ffd >= 0 && slen && rfd == sfd)) {
		rflags = fcntl(rfd, F_GETFL);
		if (rflags < 0 || fcntl(rfd, F_SETFL, rflags | O_NONBLOCK) < 0)
			ret = poison(l, err_set(-errno, "link: socket from rank %d: %s", src,
						strerror(errno)));
	}
	if (quiet)
		quiet_pipe_begin(&q);
	while (!ret && (slen || rlen)) {
		struct pollfd p[2] = { { .fd = slen ? sfd : -1, .events = POLLOUT },
				       { .fd = rlen ? rfd : -1, .events = POLLIN } };
		int n = poll(p, 2, -1);
		ssize_t k;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = poison(l, err_set(-errno, "link: exchange with ranks %d and %d: %s", dest,
						src, strerror(errno)));
			break;
		}
		if (slen && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
			if (ffd >= 0) {
				k = sendfile(sfd, ffd, &off, slen);
				if (k == 0) {
					/* the file is shorter than said: zeros make up the
					 * rest, which the receiver's checks reject */
					log_warn("link: rank %d: the file sent to rank %d ends early",
						 l->rank, dest);
					ffd = -1;
					sp = NULL;
				}
			} else {
				k = send(sfd, sp ? sp : zeros, sp || slen < sizeof(zeros) ? slen :
					 sizeof(zeros), MSG_NOSIGNAL | MSG_DONTWAIT);
			}
			if (k < 0 && errno != EAGAIN && errno != EINTR) {
				ret = poison(l, err_set(-errno, "link: sending to rank %d: %s", dest,
							strerror(errno)));
				break;
			}
			if (k > 0) {
				sp = sp ? sp + k : NULL;
				slen -= (size_t)k;
			}
		}
		if (rlen && (p[1].revents & (POLLIN | POLLERR | POLLHUP))) {
			k = sink_recv(l, rfd, sink, rlen);
			if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
				ret = poison(l, err_set(k ? -errno : -ECONNRESET,
							"link: receiving from rank %d: %s", src,
							k ? strerror(errno) : "it closed the connection"));
				break;
			}
			if (k > 0)
				rlen -= (size_t)k;
		}
	}
	if (quiet)
		quiet_pipe_end(&q);
	if (flags >= 0 && !l->dead)
		fcntl(sfd, F_SETFL, flags);
	if (rflags >= 0 && !l->dead)
		fcntl(rfd, F_SETFL, rflags);
	return ret;
}

static int link_sendrecv(void *h, const void *sbuf, size_t slen, int dest, void *rbuf, size_t rlen,
			 int src)
{
	struct sink k = { rbuf, -1, 0, 0 };

	return exchange(h, sbuf, -1, 0, slen, dest, &k, rlen, src);
}

static int link_sendrecv_fd(void *h, int fd, uint64_t off, size_t slen, int dest, void *rbuf,
			    size_t rlen, int src)
{
	struct sink k = { rbuf, -1, 0, 0 };

	return exchange(h, NULL, fd, off, slen, dest, &k, rlen, src);
}

static int link_sendrecv_files(void *h, int sfd, uint64_t soff, size_t slen, int dest, int rfd,
			       uint64_t roff, size_t rlen, int src, int *werr)
{
	struct sink k = { NULL, rfd, (off_t)roff, 0 };
	int ret = exchange(h, NULL, slen ? sfd : -1, soff, slen, dest, &k, rlen, src);

	*werr = k.err;
	return ret;
}

static int link_bcast(void *h, void *buf, size_t len, int root)
{
	struct link *l = h;
	int ret = 0;

	if (l->rank != root)
		return link_recv(l, buf, len, root);
	for (int r = 0; r < l->size; r++)
		if (r != root)
			ret = link_send(l, buf, len, r) ?: ret;
	return ret;
}

static void combine(int64_t *acc, const int64_t *v, size_t n, enum redun_op op)
{
	for (size_t i = 0; i < n; i++)
		acc[i] = op == REDUN_SUM ? acc[i] + v[i] :
			 op == REDUN_MIN ? (v[i] < acc[i] ? v[i] : acc[i]) : (v[i] > acc[i] ? v[i] : acc[i]);
}

/* Rank 0 hands every other rank the result of a collective, after a word
 * saying whether it heard from everyone: a rank that died must fail the
 * collective on every rank alike, not only on rank 0. */
static int link_result(struct link *l, void *buf, size_t len, int ret)
{
	int64_t status = ret;

	if (l->rank != 0) {
		ret = link_recv(l, &status, sizeof(status), 0);
		ret = ret ? ret : link_recv(l, buf, len, 0);
		return ret ? ret : status ? err_set(-EIO, "link: rank 0 could not hear from every rank") : 0;
	}
	for (int r = 1; r < l->size; r++) {
		int sent = link_send(l, &status, sizeof(status), r);

		sent = sent ? sent : link_send(l, buf, len, r);
		ret = ret ? ret : sent;
	}
	return ret;
}

static int link_allreduce(void *h, int64_t *v, size_t n, enum redun_op op)
{
	struct link *l = h;
	int64_t *in;
	int ret = 0;

	if (l->rank != 0) {
		ret = link_send(l, v, n * sizeof(*v), 0);
		return link_result(l, v, n * sizeof(*v), 0) ?: ret;
	}
	in = malloc(n * sizeof(*v) + 1);
	if (!in)
		return err_set(-ENOMEM, "out of memory");
	for (int r = 1; r < l->size; r++) {
		int got = link_recv(l, in, n * sizeof(*v), r);

		if (!got)
			combine(v, in, n, op);
		ret = ret ? ret : got;
	}
	free(in);
	return link_result(l, v, n * sizeof(*v), ret);
}

static int link_barrier(void *h)
{
	int64_t v = 0;

	return link_allreduce(h, &v, 1, REDUN_MAX);
}

static int link_allgather(void *h, const void *mine, size_t len, void *all)
{
	struct link *l = h;
	int ret = 0;

	memcpy((char *)all + (size_t)l->rank * len, mine, len);
	if (l->rank != 0)
		ret = link_send(l, mine, len, 0);
	else
		for (int r = 1; r < l->size; r++)
			ret = link_recv(l, (char *)all + (size_t)r * len, len, r) ?: ret;
	return link_result(l, all, (size_t)l->size * len, ret) ?: ret;
}

static void link_free(void *h)
{
	struct link *l = h;

	if (!l)
		return;
	for (int r = 0; l->fd && r < l->size; r++)
		if (l->fd[r] >= 0)
			close(l->fd[r]);
	if (l->lfd >= 0)
		close(l->lfd);
	for (int i = 0; i < 2; i++)
		if (l->pipe[i] >= 0)
			close(l->pipe[i]);
	free(l->fd);
	free(l->peer);
	free(l);
}

static const struct redun_comm_ops link_ops = {
	.name = "link",
	.rank = link_rank,
	.size = link_size,
	.barrier = link_barrier,
	.allreduce_i64 = link_allreduce,
	.bcast = link_bcast,
	.allgather = link_allgather,
	.send = link_send,
	.recv = link_recv,
	.sendrecv = link_sendrecv,
	.sendrecv_fd = link_sendrecv_fd,
	.sendrecv_files = link_sendrecv_files,
	.free = link_free,
};

/* ---- setup ---- */

/* Whether addr is the IPv4 address of one of this host's interfaces that
 * is up: an address the host's name resolves to may be another host's (a
 * stale /etc/hosts) or a loopback one (Debian's 127.0.1.1). */
static int is_mine(const struct ifaddrs *ifs, struct in_addr addr)
{
	for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
		    !(i->ifa_flags & IFF_LOOPBACK) &&
		    ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
			    addr.s_addr)
			return 1;
	return 0;
}

/* The address the host's name resolves to, if it is one of its interfaces':
 * on a cluster, the name the other nodes know this one by. */
static int by_hostname(const struct ifaddrs *ifs, struct link_endpoint *me)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
	char name[256] = "";
	int found = 0;

	if (gethostname(name, sizeof(name) - 1) != 0 || getaddrinfo(name, NULL, &hints, &res) != 0)
		return 0;
	for (const struct addrinfo *a = res; a && !found; a = a->ai_next) {
		struct in_addr in = ((const struct sockaddr_in *)(const void *)a->ai_addr)->sin_addr;

		if (is_mine(ifs, in)) {
			inet_ntop(AF_INET, &in, me->addr, sizeof(me->addr));
			found = 1;
		}
	}
	freeaddrinfo(res);
	return found;
}

/* The address other ranks reach this one at. The key link_address names an
 * IPv4 address or an interface (ib0: each node's own address on it, so one
 * configuration serves every node). Else the address the host's name
 * resolves to, when it is one of the host's (the cluster network, as for
 * coord_address auto); else the first IPv4 address of an interface that is
 * up and not loopback; else loopback (one node). */
static int my_address(struct link_endpoint *me)
{
	const char *conf = cfg_str(CFG_LINK_ADDRESS);
	struct ifaddrs *ifs = NULL;
	struct in_addr in;

	snprintf(me->addr, sizeof(me->addr), "127.0.0.1");
	if (conf && *conf && inet_pton(AF_INET, conf, &in) == 1) {
		snprintf(me->addr, sizeof(me->addr), "%s", conf);
		return 0;
	}
	if (getifaddrs(&ifs) != 0)
		return conf && *conf ? err_set(-errno, "link_address %s: cannot list the network "
					       "interfaces: %s", conf, strerror(errno)) : 0;
	if (conf && *conf) {
		const struct ifaddrs *i;

		for (i = ifs; i; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
			    strcmp(i->ifa_name, conf) == 0)
				break;
		if (i)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr,
				  me->addr, sizeof(me->addr));
		freeifaddrs(ifs);
		return i ? 0 : err_set(-EADDRNOTAVAIL, "link_address %s: neither an IPv4 address nor "
				       "an interface of this node with one", conf);
	}
	if (!by_hostname(ifs, me))
		for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
			if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
			    !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
				continue;
			inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, me->addr,
				  sizeof(me->addr));
			break;
		}
	freeifaddrs(ifs);
	return 0;
}

static int listen_any(struct link *l, struct link_endpoint *me)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t len = sizeof(sa);

	l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->lfd < 0 || bind(l->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(l->lfd, SOMAXCONN) != 0 || getsockname(l->lfd, (struct sockaddr *)&sa, &len) != 0)
		return err_set(-errno, "link: cannot listen on a TCP port: %s", strerror(errno));
	me->port = ntohs(sa.sin_port);
	return 0;
}

int redun_link_open(const struct redun_comm *job, struct redun_comm *out)
{
	struct link *l = calloc(1, sizeof(*l));
	struct link_endpoint me = { 0 };
	char msg[REDUN_MSG_LEN];
	int ret = 0, bad;

	out->ops = NULL;
	out->h = NULL;
	if (!l)
		return err_set(-ENOMEM, "out of memory");
	l->rank = job->ops->rank(job->h);
	l->size = job->ops->size(job->h);
	l->lfd = -1;
	l->pipe[0] = l->pipe[1] = -1;
	l->timeout_ms = (int)cfg_u64(CFG_LINK_TIMEOUT) * 1000;
	l->fd = malloc((size_t)l->size * sizeof(*l->fd));
	l->peer = calloc((size_t)l->size, sizeof(*l->peer));
	if (!l->fd || !l->peer)
		ret = err_set(-ENOMEM, "out of memory");
	for (int r = 0; l->fd && r < l->size; r++)
		l->fd[r] = -1;
	if (!ret && l->rank == 0 && getrandom(l->secret, SECRET_LEN, 0) != SECRET_LEN)
		ret = err_set(-errno, "link: no random bytes for the job secret: %s", strerror(errno));
	ret = ret ? ret : my_address(&me);
	ret = ret ? ret : listen_any(l, &me);
	bad = redun_agree(job, ret == 0, msg);
	if (bad < l->size) {
		link_free(l);
		return err_set(-EIO, "rank %d: %s", bad, msg);
	}
	ret = job->ops->bcast(job->h, l->secret, SECRET_LEN, 0);
	ret = ret ? ret : job->ops->allgather(job->h, &me, sizeof(me), l->peer);
	if (ret) {
		link_free(l);
		return ret;
	}
	log_debug("rank %d: progress link on %s:%u", l->rank, me.addr, me.port);
	out->ops = &link_ops;
	out->h = l;
	return 0;
}
