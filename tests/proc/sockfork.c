/* sockfork.c - a UNIX socketpair whose ends are in two processes (a parent
 * and the child it forks): sockets between processes are refused for now,
 * in one line naming both, and both processes run on and talk. */
#include "zdtm.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	int sv[2], status = -1;
	pid_t kid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
		zdtm_fail("socketpair");
		return zdtm_end();
	}
	kid = fork();
	if (kid == 0) {
		close(sv[0]);
		zdtm_expect(sv[1], "ping", "the child");
		_exit(write(sv[1], "pong", 4) == 4 ? 0 : 1);
	}
	close(sv[1]);
	zdtm_ready();
	if (write(sv[0], "ping", 4) != 4)
		zdtm_fail("write to the child");
	zdtm_expect(sv[0], "pong", "the parent");
	waitpid(kid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("the child ended with status %d", status);
	return zdtm_end();
}
