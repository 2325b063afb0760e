/* unixclient.c - a UNIX stream socket connected to a server outside the
 * job (the path in argv[1]); the program only holds it. */
#include "zdtm.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (argc < 2 || fd < 0) {
		zdtm_fail("usage: unixclient PATH");
		return zdtm_end();
	}
	snprintf(un.sun_path, sizeof(un.sun_path), "%s", argv[1]);
	if (connect(fd, (struct sockaddr *)&un, sizeof(un)) != 0)
		zdtm_fail("connect to %s", argv[1]);
	zdtm_ready();
	return zdtm_end();
}
