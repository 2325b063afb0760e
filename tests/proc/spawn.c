/* spawn.c - a child started with posix_spawnp (glibc starts it with
 * clone(CLONE_VM|CLONE_VFORK) and no fork handlers): part of the job all
 * the same (docs/transparent.md, "Process trees"). Usage: spawn PROGRAM
 * (a zdtm program, which waits for ./stop like this one). The parent
 * checks after the restarts that the child is still its child and ended
 * with status 0. */
#include "zdtm.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv)
{
	posix_spawn_file_actions_t fa;
	char *args[] = { argc > 1 ? argv[1] : "heap", NULL };
	pid_t kid;
	int status, err;

	/* a file action, as make and Python's subprocess use them */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 5, "/dev/null", O_RDONLY, 0);
	err = posix_spawnp(&kid, args[0], &fa, NULL, args, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err)
		zdtm_fail("posix_spawnp: %d", err);
	zdtm_ready();
	if (waitpid(kid, &status, 0) != kid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("the spawned child: status %#x", status);
	return zdtm_end();
}
