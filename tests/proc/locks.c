/* locks.c - an flock lock, a POSIX (fcntl) record lock and an open file
 * description lock are held again after checkpoint/restart: a child the
 * restarted program forks cannot take them. A second descriptor of the
 * flock'ed file shows the lock too, and must not make the restart take it
 * twice. With the argument "fork" a child shares the three descriptions
 * (a process tree: each description made once for both processes). */
#include "zdtm.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

static int probe_flock(void)
{
	int fd = open("flocked", O_RDWR);
	int r = flock(fd, LOCK_EX | LOCK_NB);

	return r != 0 && errno == EWOULDBLOCK ? 0 : 1;
}

static int probe_record(const char *path, int cmd, short type, off_t start, off_t len, pid_t owner)
{
	int fd = open(path, O_RDWR);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

	if (fcntl(fd, cmd, &fl) != 0 || fl.l_type != type || fl.l_start != start || fl.l_len != len ||
	    fl.l_pid != owner)
		return 1;
	return 0;
}

int main(int argc, char **argv)
{
	int a = open("flocked", O_RDWR | O_CREAT, 0644);
	int b = open("posix", O_RDWR | O_CREAT, 0644);
	int c = open("ofd", O_RDWR | O_CREAT, 0644);
	int dup_a = dup(a);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 10, .l_len = 10 };
	struct flock rd = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	pid_t self = getpid(), child, sharer = -1;
	int status = -1;

	if (a < 0 || b < 0 || c < 0 || dup_a < 0 || flock(a, LOCK_EX) != 0 || fcntl(b, F_SETLK, &fl) != 0 ||
	    fcntl(c, F_OFD_SETLK, &rd) != 0) {
		zdtm_fail("setup: %s", strerror(errno));
		return zdtm_end();
	}
	if (argc > 1 && strcmp(argv[1], "fork") == 0 && (sharer = fork()) == 0) {
		while (access("stop", F_OK) != 0)
			usleep(10000);
		_exit(0);
	}
	zdtm_ready();
	if (sharer > 0)
		waitpid(sharer, NULL, 0);

	child = fork();
	if (child == 0)
		_exit(probe_flock() | probe_record("posix", F_GETLK, F_WRLCK, 10, 10, self) << 1 |
		      probe_record("ofd", F_OFD_GETLK, F_RDLCK, 0, 0, -1) << 2);
	waitpid(child, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		zdtm_fail("locks not held after the restart (mask %d: 1 flock, 2 POSIX, 4 OFD)",
			  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	if (flock(a, LOCK_UN) != 0 || probe_flock() == 0)
		zdtm_fail("the flock lock cannot be released");
	return zdtm_end();
}
