/* external.c - a descriptor inherited at launch that points outside the job
 * (a pipe, a socket or a terminal whose other end the test holds): the checkpoint saves
 * it as external, a restart gives the program the descriptor of the same
 * number that `stasis restart` inherited, or /dev/null.
 * Usage: external FD [FIFO]. Writes "start" to FD before READY and "end"
 * after the restarts, then says what FD is: "FD pipe", "FD socket", "FD
 * tty" or "FD null". With FIFO, it also opens that named FIFO for writing at fd 7 before
 * READY: not inherited, so it is refused like any pipe to another process. */
#include "zdtm.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static const char *what(int fd)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return "closed";
	if (S_ISFIFO(st.st_mode))
		return "pipe";
	if (S_ISSOCK(st.st_mode))
		return "socket";
	if (isatty(fd))
		return "tty";
	if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3)
		return "null";
	return "other";
}

int main(int argc, char **argv)
{
	int fd = argc > 1 ? atoi(argv[1]) : 251;

	if (write(fd, "start\n", 6) != 6)
		zdtm_fail("write to fd %d before the checkpoints", fd);
	if (argc > 2) {
		int f = open(argv[2], O_WRONLY | O_NONBLOCK);

		if (f < 0 || dup2(f, 7) != 7)
			zdtm_fail("open the FIFO %s at fd 7", argv[2]);
		close(f);
	}
	zdtm_ready();
	if (write(fd, "end\n", 4) != 4)
		zdtm_fail("write to fd %d after the restarts", fd);
	printf("FD %s\n", what(fd));
	return zdtm_end();
}
