/* execvia.c - execs PROG through one of libc's exec functions (execvia
 * FUNCTION PROG), each of which the agent wraps: execl, execlp, execle,
 * execv, execvp, execvpe, execve, fexecve. For execlp, execvp and execvpe
 * PROG is a name looked up in $PATH. */
#include "zdtm.h"

#include <fcntl.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv)
{
	char *args[2] = { argc > 2 ? argv[2] : NULL, NULL };
	const char *f = argc > 2 ? argv[1] : "";
	const char *p = args[0];

	if (!strcmp(f, "execl"))
		execl(p, p, (char *)NULL);
	else if (!strcmp(f, "execlp"))
		execlp(p, p, (char *)NULL);
	else if (!strcmp(f, "execle"))
		execle(p, p, (char *)NULL, environ);
	else if (!strcmp(f, "execv"))
		execv(p, args);
	else if (!strcmp(f, "execvp"))
		execvp(p, args);
	else if (!strcmp(f, "execvpe"))
		execvpe(p, args, environ);
	else if (!strcmp(f, "execve"))
		execve(p, args, environ);
	else if (!strcmp(f, "fexecve")) {
		int fd = open(p, O_RDONLY | O_CLOEXEC);

		if (fd >= 0)
			fexecve(fd, args, environ);
	}
	zdtm_fail("%s %s", f, p ? p : "(no program)");
	return zdtm_end();
}
