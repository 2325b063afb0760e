/* shell.c - children started by popen() and system(), whose shells glibc
 * starts with its internal posix_spawn (docs/transparent.md, "Process
 * trees"): a shell reading lines from a popen()ed pipe into popen.out, and
 * a system() shell that prints READY and waits for ./stop while the
 * program waits for it. After the restarts system() returns the shell's
 * status (3), a second line reaches the first shell, pclose() returns its
 * status (0) and popen.out holds both lines. */
#include "zdtm.h"

#include <string.h>
#include <sys/wait.h>

int main(void)
{
	FILE *w = popen("while read line; do echo \"got $line\"; done > popen.out", "w");
	char buf[64] = "";
	int st;

	if (!w || fprintf(w, "a\n") < 0 || fflush(w) != 0)
		zdtm_fail("popen");
	fflush(stdout);
	st = system("echo READY; while [ ! -e stop ]; do sleep 0.05; done; exit 3");
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 3)
		zdtm_fail("system: status %#x", st);
	if (fprintf(w, "b\n") < 0)
		zdtm_fail("write");
	st = pclose(w);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		zdtm_fail("pclose: status %#x", st);
	w = fopen("popen.out", "r");
	if (!w || fread(buf, 1, sizeof(buf) - 1, w) == 0 || strcmp(buf, "got a\ngot b\n") != 0)
		zdtm_fail("popen.out holds \"%s\"", buf);
	return zdtm_end();
}
