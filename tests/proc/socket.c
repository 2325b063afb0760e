/* socket.c - a socket Stasis cannot save (a UNIX datagram pair): the
 * checkpoint fails naming the descriptor and its kind, and the program runs
 * on unharmed. The test also
 * appends to log.txt while it runs, so the file grows after a checkpoint. */
#include "zdtm.h"

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int logfd = -1;

static void tick(void)
{
	if (logfd >= 0 && write(logfd, "tick\n", 5) != 5)
		zdtm_fail("log write");
}

int main(int argc, char **argv)
{
	int sv[2] = { -1, -1 };
	char buf[8];

	if (argc > 1 && strcmp(argv[1], "socket") == 0 && socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0)
		zdtm_fail("socketpair");
	logfd = open("log.txt", O_WRONLY | O_CREAT | O_APPEND, 0644);
	zdtm_ready_tick(tick);
	if (sv[0] >= 0 && (write(sv[0], "ok", 2) != 2 || read(sv[1], buf, 2) != 2))
		zdtm_fail("the socket no longer works");
	if (write(logfd, "end\n", 4) != 4)
		zdtm_fail("log after restart");
	return zdtm_end();
}
