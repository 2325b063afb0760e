/* children.c - a child process is part of the job (docs/transparent.md,
 * "Process trees"): checkpointed and restarted while it runs and as a
 * zombie, it is still the parent's child, with its pid and, once waited
 * for, the status it ended with.
 *
 * The test drives the program with files in its working directory:
 *   (start)  a child that exits at once is waited for; READY
 *   "fork"   a child named "kid" that waits; "pids" holds both pids; CHILD
 *   "zombie" the child is killed and left unwaited (a zombie); ZOMBIE
 *   "reap"   the zombie is waited for; REAPED
 *   "stop"   the program checks it has no child left; PASS or FAIL
 */
#include "zdtm.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void wait_file(const char *name)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	while (access(name, F_OK) != 0)
		nanosleep(&ts, NULL);
}

static void say(const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
}

int main(void)
{
	pid_t parent = getpid(), kid;
	siginfo_t si;
	int status, sync[2];
	char c = 0;
	FILE *f;

	/* a child that came and went */
	kid = fork();
	if (kid == 0)
		_exit(0);
	if (kid < 0 || waitpid(kid, &status, 0) != kid)
		zdtm_fail("the first child");
	say("READY");

	wait_file("fork");
	if (pipe(sync) != 0)
		zdtm_fail("pipe");
	kid = fork();
	if (kid == 0) {
		/* named, and gone with its parent whatever ends the test */
		prctl(PR_SET_NAME, "kid");
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(sync[0]);
		if (write(sync[1], &c, 1) != 1)
			_exit(1);
		close(sync[1]);
		for (;;)
			pause();
	}
	close(sync[1]);
	if (kid < 0 || read(sync[0], &c, 1) != 1)
		zdtm_fail("the second child");
	close(sync[0]);
	f = fopen("pids", "w");
	if (!f || fprintf(f, "%d %d\n", (int)parent, (int)kid) < 0 || fclose(f) != 0)
		zdtm_fail("writing pids");
	say("CHILD");

	wait_file("zombie");
	memset(&si, 0, sizeof(si));
	if (kill(kid, SIGKILL) != 0 || waitid(P_PID, (id_t)kid, &si, WEXITED | WNOWAIT) != 0 ||
	    si.si_pid != kid)
		zdtm_fail("the child did not end");
	say("ZOMBIE");

	wait_file("reap");
	if (waitpid(kid, &status, 0) != kid || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		zdtm_fail("waiting for the killed child");
	say("REAPED");

	wait_file("stop");
	if (getpid() != parent)
		zdtm_fail("pid %d, not %d", (int)getpid(), (int)parent);
	if (waitpid(-1, &status, WNOHANG) != -1 || errno != ECHILD)
		zdtm_fail("a child is left after the restart");
	return zdtm_end();
}
