/* socket.c - a socket Stasis cannot save (a pair of UDP sockets): the
 * checkpoint fails naming the descriptor and its kind, and the program runs
 * on unharmed. The test also
 * appends to log.txt while it runs, so the file grows after a checkpoint. */
#include "zdtm.h"

#include <fcntl.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static int logfd = -1;

static void tick(void)
{
	if (logfd >= 0 && write(logfd, "tick\n", 5) != 5)
		zdtm_fail("log write");
}

/* Two UDP sockets on loopback, each connected to the other. */
static int udp_pair(int sv[2])
{
	struct sockaddr_in a[2];
	socklen_t len = sizeof(a[0]);

	for (int i = 0; i < 2; i++) {
		a[i] = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		sv[i] = socket(AF_INET, SOCK_DGRAM, 0);
		if (sv[i] < 0 || bind(sv[i], (struct sockaddr *)&a[i], sizeof(a[i])) != 0 ||
		    getsockname(sv[i], (struct sockaddr *)&a[i], &len) != 0)
			return -1;
	}
	return connect(sv[0], (struct sockaddr *)&a[1], len) | connect(sv[1], (struct sockaddr *)&a[0], len);
}

int main(int argc, char **argv)
{
	int sv[2] = { -1, -1 };
	char buf[8];

	if (argc > 1 && strcmp(argv[1], "socket") == 0 && udp_pair(sv) != 0)
		zdtm_fail("UDP sockets");
	logfd = open("log.txt", O_WRONLY | O_CREAT | O_APPEND, 0644);
	zdtm_ready_tick(tick);
	if (sv[0] >= 0 && (write(sv[0], "ok", 2) != 2 || read(sv[1], buf, 2) != 2))
		zdtm_fail("the socket no longer works");
	if (write(logfd, "end\n", 4) != 4)
		zdtm_fail("log after restart");
	return zdtm_end();
}
