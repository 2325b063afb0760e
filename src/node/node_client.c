/* node_client.c - where a job's node agent listens, and how a rank starts
 * it and reaches it (node.h). Compiled into the lower halves and into the
 * agent. */
#include "node/node.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_TIMEOUT_MS 10000

/* A start of the agent by this rank, under way: the lock held and the
 * agent's ready pipe, until node_agent_connect (after MPI_Init) */
static int starting_lock = -1, starting_pipe = -1;

/* <local_dir or $TMPDIR or /tmp>/stasis-node.<uid>, ours and 0700 */
static int sock_dir(char *out, size_t len)
{
	const char *base = getenv("STASIS_STAGE_DIR");
	struct stat s;

	if (!base || !*base)
		base = getenv("TMPDIR");
	if (!base || !*base)
		base = "/tmp";
	if (snprintf(out, len, "%s/stasis-node.%u", base, (unsigned)getuid()) >= (int)len)
		return err_set(-ENAMETOOLONG, "the node agent's directory under %s: name too long", base);
	mkdir(base, 0755);   /* local_dir may not exist yet on this node */
	if (mkdir(out, 0700) != 0 && errno != EEXIST)
		return err_set(-errno, "cannot create %s: %s", out, strerror(errno));
	if (lstat(out, &s) != 0 || !S_ISDIR(s.st_mode) || s.st_uid != getuid() ||
	    (s.st_mode & 077))
		return err_set(-EACCES, "%s is not a directory of this user's with mode 0700: the "
			       "node agent's socket cannot be there", out);
	return 0;
}

int node_sock_path(char *out, size_t len, char *dir_out, size_t dir_len)
{
	const char *job = getenv("STASIS_JOB_NAME"), *run = getenv("STASIS_RUN_ID");
	char dir[PATH_MAX], host[65] = "";
	int ret;

	if (!job || !*job || !run || !*run)
		return err_set(-ENOENT, "no job in the environment (STASIS_JOB_NAME, STASIS_RUN_ID)");
	ret = sock_dir(dir, sizeof(dir));
	if (ret)
		return ret;
	gethostname(host, sizeof(host) - 1);
	/* the host too: a node-local directory may be shared by mistake (or
	 * /tmp be one file system for several simulated nodes) */
	if (snprintf(out, len, "%s/%.40s.%.16s.%.40s.sock", dir, job, run, host) >= (int)len)
		return err_set(-ENAMETOOLONG, "the node agent's socket path is too long");
	if (dir_out)
		snprintf(dir_out, dir_len, "%s", dir);
	return 0;
}

/* A sockaddr for path: directly, or through a descriptor on its directory
 * when the path is longer than sun_path (*dirfd then >= 0, to close) */
static int sock_addr(const char *path, struct sockaddr_un *sa, int *dirfd)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	*dirfd = -1;
	if (strlen(path) < sizeof(sa->sun_path)) {
		memcpy(sa->sun_path, path, strlen(path) + 1);
		return 0;
	}
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	*dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*dirfd < 0)
		return err_set(-errno, "cannot open %s: %s", dir, strerror(errno));
	snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", *dirfd, slash + 1);
	return 0;
}

int node_sock_listen(const char *path, int *out);
int node_sock_listen(const char *path, int *out)
{
	struct sockaddr_un sa;
	int dirfd, fd, ret = sock_addr(path, &sa, &dirfd);

	if (ret)
		return ret;
	unlink(path);   /* an agent's that was killed: its starter holds the lock */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 256) != 0) {
		ret = err_set(-errno, "cannot listen on %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
	} else {
		*out = fd;
	}
	if (dirfd >= 0)
		close(dirfd);
	return ret;
}

static int connect_path(const char *path, int *out)
{
	struct sockaddr_un sa;
	int dirfd, fd, ret = sock_addr(path, &sa, &dirfd);

	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
	} else if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		ret = -errno;
		close(fd);
	} else {
		*out = fd;
	}
	if (dirfd >= 0)
		close(dirfd);
	return ret;
}

int node_agent_connect(int *fd)
{
	char path[PATH_MAX];
	uint64_t end;
	struct timespec ts;
	int ret = node_sock_path(path, sizeof(path), NULL, 0);

	if (ret)
		return ret;
	if (starting_pipe >= 0) {
		/* this rank started it: its word that it listens (or its end) */
		struct pollfd w = { starting_pipe, POLLIN, 0 };
		char byte;
		int ok = poll(&w, 1, READY_TIMEOUT_MS) == 1 && read(starting_pipe, &byte, 1) == 1;

		close(starting_pipe);
		close(starting_lock);
		starting_pipe = starting_lock = -1;
		if (!ok)
			return err_set(-EIO, "the node agent did not start (%s.log says why)", path);
	}
	/* another rank of the node may still be starting it */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + READY_TIMEOUT_MS;
	while ((ret = connect_path(path, fd)) != 0) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 >= end)
			break;
		usleep(10 * 1000);
	}
	return ret ? err_set(ret, "cannot reach the node agent at %s: %s", path, strerror(-ret)) : 0;
}

/* In the grandchild: a daemon of its own session, the job's environment,
 * none of the rank's descriptors (a launcher waits for its ranks' pipes to
 * close), stdout and stderr to the log */
static void __attribute__((noreturn)) exec_agent(const char *path, int ready)
{
	char prog[PATH_MAX], log[PATH_MAX + 8], fdv[16];
	const char *dir = getenv("STASIS_LH_DIR");
	int fd;

	setsid();
	/* out of the way of 0-3 first: a rank without stdin has its pipe low */
	ready = fcntl(ready, F_DUPFD_CLOEXEC, 10);
	if (ready < 0)
		_exit(127);
	snprintf(prog, sizeof(prog), "%s/" NODE_AGENT_PROGRAM, dir ? dir : ".");
	snprintf(log, sizeof(log), "%s.log", path);
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		dup2(fd, 0);
	if (dup2(ready, 3) != 3)
		_exit(127);
	close_range(4, ~0U, 0);
	snprintf(fdv, sizeof(fdv), "3");
	setenv("STASIS_NODE_READY_FD", fdv, 1);
	unsetenv("LD_PRELOAD");
	signal(SIGPIPE, SIG_IGN);
	execl(prog, prog, (char *)NULL);
	fprintf(stderr, "stasis: node agent: cannot execute %s: %s\n", prog, strerror(errno));
	_exit(127);
}

/* Start the agent, detached; *ready gets the pipe on which it says it
 * listens */
static int spawn(const char *path, int *ready)
{
	int p[2], status;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) != 0)
		return err_set(-errno, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return err_set(-errno, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		/* the middle process ends at once: the agent is nobody's child */
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		close(p[0]);
		if (fork() == 0)
			exec_agent(path, p[1]);
		_exit(0);
	}
	close(p[1]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	*ready = p[0];
	return 0;
}

int node_agent_ensure(void)
{
	char path[PATH_MAX], lock[PATH_MAX + 8];
	int fd, lfd, ret = node_sock_path(path, sizeof(path), NULL, 0);

	if (ret)
		return ret;
	if (connect_path(path, &fd) == 0) {
		close(fd);
		return 0;
	}
	snprintf(lock, sizeof(lock), "%.*s.lock", (int)(strlen(path) - 5), path);
	lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lfd < 0)
		return err_set(-errno, "cannot open %s: %s", lock, strerror(errno));
	/* held: another rank of the node is starting it (it holds the lock
	 * until its MPI_Init returned: waiting here for it could keep this
	 * rank out of an MPI_Init that waits for every rank) */
	if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
		close(lfd);
		return 0;
	}
	/* another rank of the node may have started it meanwhile */
	if (connect_path(path, &fd) == 0) {
		close(fd);
		close(lfd);
		return 0;
	}
	/* started now, waited for after MPI_Init: the two overlap */
	ret = spawn(path, &starting_pipe);
	if (ret)
		close(lfd);
	else
		starting_lock = lfd;
	return ret;
}
