/* sockfork.c - UNIX socket pairs between two processes (a parent and the
 * child it forks) across checkpoint/restart: one pair with an end in each,
 * bytes in flight from the parent to the child at every checkpoint; and one
 * end of another pair that both processes hold (one socket shared), the
 * child writing through it to the parent after the restarts. */
#include "zdtm.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	int sv[2], sh[2], status = -1;
	pid_t kid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sh) != 0) {
		zdtm_fail("socketpair");
		return zdtm_end();
	}
	kid = fork();
	if (kid == 0) {
		close(sv[0]);
		zdtm_expect(sv[1], "early", "the child");
		zdtm_expect(sv[1], "ping", "the child");
		_exit(zdtm_failed || write(sv[1], "pong", 4) != 4 || send(sh[0], "shared", 6, 0) != 6);
	}
	close(sv[1]);
	if (write(sv[0], "early", 5) != 5)
		zdtm_fail("write to the child");
	zdtm_ready();
	if (write(sv[0], "ping", 4) != 4)
		zdtm_fail("write to the child");
	zdtm_expect(sv[0], "pong", "the parent");
	zdtm_expect(sh[1], "shared", "the parent, from the shared end");
	waitpid(kid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("the child ended with status %d", status);
	return zdtm_end();
}
