/* line.c - the text lines of Stasis's protocols (line.h). */
#include "common/line.h"

#include "common/err.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int line_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
	int n = vsnprintf(buf, len - 1, fmt, ap);

	if (n < 0)
		return -EINVAL;
	if ((size_t)n > len - 2)
		n = (int)len - 2;
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	buf[n++] = '\n';
	return n;
}

int line_secret_equal(const char *a, const char *b)
{
	unsigned diff = strlen(a) != strlen(b);

	for (size_t i = 0; a[i] && b[i]; i++)
		diff |= (unsigned)(a[i] ^ b[i]);
	return diff == 0;
}

int line_connect(const char *addr, const char *what, int *out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *a;
	char host[256], *colon;
	int fd = -1, one = 1;

	snprintf(host, sizeof(host), "%s", addr ? addr : "");
	colon = strrchr(host, ':');
	if (!colon)
		return err_set(-EINVAL, "%s's address '%s' is not host:port", what, host);
	*colon = 0;
	if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
		return err_set(-EHOSTUNREACH, "cannot resolve %s's address %s", what, addr);
	for (a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return err_set(-ECONNREFUSED, "cannot reach %s at %s", what, addr);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*out = fd;
	return 0;
}

int line_write_names(const char *args, int rank)
{
	int only = !strncmp(args, " ONLY ", 6), named = 0, r, pos = 0;

	if (!only && strncmp(args, " EXCEPT ", 8))
		return 1;
	for (args += only ? 5 : 7; sscanf(args, "%d%n", &r, &pos) == 1; args += pos)
		named |= r == rank;
	return only ? named : !named;
}
