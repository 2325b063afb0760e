/* sockets.c - sockets with both ends in the process keep their unread
 * bytes and their addresses across checkpoint/restart: a UNIX socketpair, a
 * TCP listener on loopback and a connection accepted from it, and a second
 * listener without SO_REUSEADDR whose connection holds no data (killed, it
 * leaves TIME_WAIT on the port the restart binds again). With a port
 * as argument, the program also holds a TCP connection to a server outside
 * it (the test's), which after a restart reads as reset or ended (argument
 * "closed") or still works when no restart came between ("live"). A UNIX
 * datagram pair and a seqpacket pair keep their unread messages, each
 * whole. With a path as third argument, the program holds a datagram
 * socket connected to that named socket outside it (as syslog's to
 * /dev/log) and sends "after" through it at the end.
 * Usage: sockets [PORT closed|live [PATH]] */
#include "zdtm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int port_of(int fd, int peer)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if ((peer ? getpeername(fd, (struct sockaddr *)&a, &len) : getsockname(fd, (struct sockaddr *)&a, &len)) != 0)
		return -1;
	return ntohs(a.sin_port);
}

/* The next message of fd is want, whole. */
static void message(int fd, const char *want, const char *what)
{
	char buf[64];
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

	if (n != (ssize_t)strlen(want) || memcmp(buf, want, (size_t)n) != 0)
		zdtm_fail("%s: message of %zd bytes, not '%s'", what, n, want);
}

/* A round trip a -> b after the restart. */
static void works(int a, int b, const char *what)
{
	if (write(a, "ping", 4) != 4)
		zdtm_fail("%s: cannot write", what);
	zdtm_expect(b, "ping", what);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = loopback(0);
	socklen_t alen = sizeof(a);
	int sv[2], lis, cl, srv, out = -1, one = 1, lport, cport, nb;
	int lis2 = socket(AF_INET, SOCK_STREAM, 0), cl2 = socket(AF_INET, SOCK_STREAM, 0), srv2 = -1, l2port;
	struct sockaddr_in a2 = loopback(0);
	socklen_t a2len = sizeof(a2);
	int outside_port = argc > 2 ? atoi(argv[1]) : 0;
	int dg[2], sp[2], logsock = -1;
	char buf_none[8];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || (lis = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    setsockopt(lis, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(lis, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lis, 4) != 0 ||
	    getsockname(lis, (struct sockaddr *)&a, &alen) != 0 || (cl = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(cl, (struct sockaddr *)&a, sizeof(a)) != 0 || (srv = accept(lis, NULL, NULL)) < 0) {
		zdtm_fail("setup: %s", strerror(errno));
		return zdtm_end();
	}
	if (outside_port) {
		struct sockaddr_in o = loopback(outside_port);

		out = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(out, (struct sockaddr *)&o, sizeof(o)) != 0)
			zdtm_fail("connect to the outside server: %s", strerror(errno));
	}
	if (bind(lis2, (struct sockaddr *)&a2, sizeof(a2)) != 0 || listen(lis2, 1) != 0 ||
	    getsockname(lis2, (struct sockaddr *)&a2, &a2len) != 0 ||
	    connect(cl2, (struct sockaddr *)&a2, sizeof(a2)) != 0 || (srv2 = accept(lis2, NULL, NULL)) < 0)
		zdtm_fail("setup of the second listener: %s", strerror(errno));
	l2port = port_of(lis2, 0);
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, dg) != 0 || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp) != 0 ||
	    send(dg[0], "first", 5, 0) != 5 || send(dg[0], "second one", 10, 0) != 10 ||
	    send(dg[1], "back", 4, 0) != 4 || send(sp[1], "packet", 6, 0) != 6)
		zdtm_fail("datagram and seqpacket pairs: %s", strerror(errno));
	if (argc > 3) {
		struct sockaddr_un un = { .sun_family = AF_UNIX };

		snprintf(un.sun_path, sizeof(un.sun_path), "%s", argv[3]);
		logsock = socket(AF_UNIX, SOCK_DGRAM, 0);
		if (connect(logsock, (struct sockaddr *)&un, sizeof(un)) != 0)
			zdtm_fail("connect to %s: %s", argv[3], strerror(errno));
	}
	lport = port_of(lis, 0);
	cport = port_of(cl, 0);
	fcntl(srv, F_SETFL, O_NONBLOCK);
	/* unread at every checkpoint: each end holds what the other sent */
	if (write(sv[0], "to-one", 6) != 6 || write(sv[1], "to-zero", 7) != 7 ||
	    write(cl, "client-said", 11) != 11 || write(srv, "server-said", 11) != 11)
		zdtm_fail("setup writes");
	zdtm_ready();

	zdtm_expect(sv[1], "to-one", "socketpair end 1");
	message(dg[1], "first", "the datagram pair");
	message(dg[1], "second one", "the datagram pair");
	message(dg[0], "back", "the datagram pair back");
	message(sp[0], "packet", "the seqpacket pair");
	if (recv(dg[1], buf_none, sizeof(buf_none), MSG_DONTWAIT) != -1)
		zdtm_fail("the datagram pair holds more messages than were sent");
	if (logsock >= 0 && send(logsock, "after", 5, 0) != 5)
		zdtm_fail("send through the socket connected outside: %s", strerror(errno));
	zdtm_expect(sv[0], "to-zero", "socketpair end 0");
	fcntl(srv, F_SETFL, 0);
	zdtm_expect(srv, "client-said", "the accepted TCP end");
	zdtm_expect(cl, "server-said", "the TCP client");
	works(sv[0], sv[1], "socketpair");
	works(sv[1], sv[0], "socketpair back");
	works(cl, srv, "TCP pair");
	works(srv, cl, "TCP pair back");
	nb = fcntl(srv, F_GETFL);
	if (port_of(lis, 0) != lport || port_of(srv, 0) != lport || port_of(cl, 1) != lport)
		zdtm_fail("the listener's port was %d, now %d (accepted end %d, client's peer %d)", lport,
			  port_of(lis, 0), port_of(srv, 0), port_of(cl, 1));
	if (port_of(srv, 1) != port_of(cl, 0))
		zdtm_fail("the ends of the TCP pair do not face each other");
	(void)cport;   /* the client's own port may change: its old one can still be in TIME_WAIT */
	works(cl2, srv2, "the second TCP pair");
	works(srv2, cl2, "the second TCP pair back");
	{
		int v = -1;
		socklen_t vl = sizeof(v);

		if (port_of(lis2, 0) != l2port || port_of(srv2, 0) != l2port)
			zdtm_fail("the second listener's port was %d, now %d", l2port, port_of(lis2, 0));
		if (getsockopt(lis2, SOL_SOCKET, SO_REUSEADDR, &v, &vl) != 0 || v != 0)
			zdtm_fail("the second listener's SO_REUSEADDR is %d, not 0", v);
	}
	(void)nb;
	{
		/* the listener still takes connections */
		int c2 = socket(AF_INET, SOCK_STREAM, 0), s2;
		struct sockaddr_in l = loopback(lport);

		if (connect(c2, (struct sockaddr *)&l, sizeof(l)) != 0 || (s2 = accept(lis, NULL, NULL)) < 0)
			zdtm_fail("the listener no longer accepts: %s", strerror(errno));
		else
			works(c2, s2, "a new connection");
	}
	if (out >= 0) {
		char buf[8];
		ssize_t n = read(out, buf, sizeof(buf));
		int e = errno;

		if (strcmp(argv[2], "closed") == 0 && !(n == 0 || (n < 0 && e == ECONNRESET)))
			zdtm_fail("the connection to the outside reads %zd (%s), not reset or ended", n, strerror(e));
		if (strcmp(argv[2], "live") == 0 && (n != 2 || memcmp(buf, "hi", 2) != 0))
			zdtm_fail("the connection to the outside reads %zd, not its server's hi", n);
	}
	return zdtm_end();
}
