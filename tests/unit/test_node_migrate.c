/* test_node_migrate.c - the node agent's handle on a migration's receiver
 * (src/node/node_migrate.h, node_receiver_*): a cancelled receiver killed
 * once its time passed and reaped leaves nothing that keeps the agent
 * looking at it (its loop wakes every 100 ms while kill_at is set). */
#include "check.h"
#include "node/node_migrate.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A cancelled receiver that does not end by itself (a stopped one does
 * not see its pipe close): killed at kill_at, reaped, and kill_at cleared
 * (it stayed set until the next RECEIVE) */
static void test_cancelled_and_reaped(void)
{
	struct node_receiver r = { .out = -1, .pidfd = -1 };
	struct timespec nap = { 0, 10 * 1000 * 1000 };
	int st = -1, reaped = 0;
	pid_t pid = fork();

	if (pid == 0) {
		for (;;)
			pause();
	}
	CHECK(pid > 0);
	r.pid = pid;
	r.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	node_receiver_cancel(&r, 0);
	CHECK(r.kill_at != 0);
	for (int i = 0; i < 3000 && !reaped; i++) {
		reaped = node_receiver_reap(&r, &st);
		if (!reaped)
			nanosleep(&nap, NULL);
	}
	CHECK_EQ(reaped, 1);
	CHECK_EQ(st, 128 + SIGKILL);
	CHECK_EQ(r.pid, 0);
	CHECK_EQ(r.kill_at, 0);
	if (!reaped) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

int main(void)
{
	test_cancelled_and_reaped();
	return check_result("test_node_migrate");
}
