/* migrate.c - the receiver of a migration on its target node, and the
 * expected time of one (migrate.h). */
#include "coord/migrate.h"

#include "common/config.h"
#include "common/err.h"
#include "common/line.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT_TIMEOUT_MS 30000
#define SETUP_MS 2000   /* a checkpoint, a receiver started, a relaunch */
#define SOURCE_BASE_MS 5000
#define SOURCE_MIB_PER_S 64

static void migrate_hosts_run(char (*hosts)[64], unsigned n, const char *cmd, int *alive,
			      int timeout_ms);

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int migrate_receiver_start(const char *host, const char *lh_dir, const char *job_dir,
			   unsigned sources, struct migrate_receiver *r)
{
	const char *shell = cfg_str(CFG_MIGRATE_SHELL);
	char cmd[2 * PATH_MAX + 64];
	int p[2];
	pid_t pid;

	const char *fault = cfg_str(CFG_FAULT);

	r->pid = -1;
	r->out = -1;
	r->rpid = 0;
	r->rstart = 0;
	snprintf(r->host, sizeof(r->host), "%s", host);
	/* the remote shell's environment is a login's: the fault points armed
	 * here (a test's) go with the command */
	snprintf(cmd, sizeof(cmd), "%s%s%sexec '%s/stasis-node' --receive '%s' %u",
		 fault && *fault && !strpbrk(fault, "'\\") ? "STASIS_FAULT='" : "",
		 fault && *fault && !strpbrk(fault, "'\\") ? fault : "",
		 fault && *fault && !strpbrk(fault, "'\\") ? "' " : "", lh_dir, job_dir, sources);
	if (pipe2(p, O_CLOEXEC) != 0)
		return err_set(-errno, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return err_set(-errno, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		sigset_t none;

		/* the coordinator's signalfd signals are blocked: not the shell's */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(p[1], 1);
		execlp(shell, shell, host, cmd, (char *)NULL);
		fprintf(stderr, "stasis: cannot run %s: %s\n", shell, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	r->pid = pid;
	r->out = p[0];
	return 0;
}

int migrate_receiver_port(const char *host, struct migrate_receiver *r)
{
	const char *shell = cfg_str(CFG_MIGRATE_SHELL);
	char line[64];
	int n = 0;

	/* PORT <n> */
	while (n + 1 < (int)sizeof(line)) {
		struct pollfd q = { r->out, POLLIN, 0 };

		if (poll(&q, 1, PORT_TIMEOUT_MS) <= 0 || read(r->out, line + n, 1) != 1)
			break;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	if (sscanf(line, "PORT %d %d %llu", &r->port, &r->rpid, &r->rstart) < 1) {
		migrate_receiver_end(r, 0);
		return err_set(-EHOSTUNREACH, "the receiver on %s did not start (%s %s: see its "
			       "message above)", host, shell, host);
	}
	return 0;
}

void migrate_receiver_cancel(const char *host, struct migrate_receiver *r)
{
	char addr[128];
	int fd;

	/* a connection that closes before its first line ends the receiver
	 * at once; without it the receiver would wait for its source */
	if (r->pid > 0 && (r->port > 0 || migrate_receiver_port(host, r) == 0) &&
	    snprintf(addr, sizeof(addr), "%s:%d", host, r->port) < (int)sizeof(addr) &&
	    line_connect(addr, "the migration's receiver", &fd) == 0)
		close(fd);
	migrate_receiver_end(r, 5000);
}

int migrate_kill_cmd(char *buf, size_t len, int pid, unsigned long long start)
{
	int n = start ? snprintf(buf, len, "[ \"$(sed 's/.*) //' /proc/%d/stat 2>/dev/null | "
				 "cut -d' ' -f20)\" = %llu ] && kill -KILL %d", pid, start, pid) :
		snprintf(buf, len, "kill -KILL %d", pid);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The receiver killed on its node, through the remote shell (a stopped
 * process takes SIGKILL too), 5 s at most; by its pid and start time (the
 * moment between the look and the kill is the only one another process
 * could take the pid in) */
static void receiver_kill_there(const struct migrate_receiver *r)
{
	char host[1][64], cmd[160];
	int done = 0;

	if (r->rpid <= 0 || !r->host[0] || migrate_kill_cmd(cmd, sizeof(cmd), r->rpid, r->rstart))
		return;
	snprintf(host[0], sizeof(host[0]), "%s", r->host);
	migrate_hosts_run(host, 1, cmd, &done, 5000);
}

int migrate_receiver_end(struct migrate_receiver *r, int timeout_ms)
{
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	uint64_t end = mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	int st = 0;

	if (r->pid <= 0)
		return -ECHILD;
	/* its stdout closes as it ends: no sleeping between looks (a 20 ms
	 * nap was most of this wait after a migration) */
	while (r->out >= 0 && mono_ms() < end) {
		struct pollfd p = { r->out, POLLIN, 0 };
		char buf[256];

		if (poll(&p, 1, (int)(end - mono_ms())) <= 0 || read(r->out, buf, sizeof(buf)) <= 0)
			break;
	}
	/* the shell's own end follows its stdout's */
	while (waitpid(r->pid, &st, WNOHANG) == 0) {
		if (mono_ms() >= end) {
			kill(r->pid, SIGKILL);
			waitpid(r->pid, &st, 0);
			receiver_kill_there(r);
			break;
		}
		nanosleep(&ts, NULL);
	}
	r->pid = -1;
	if (r->out >= 0)
		close(r->out);
	r->out = -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

void migrate_hosts_alive(char (*hosts)[64], unsigned n, int *alive, int timeout_ms)
{
	migrate_hosts_run(hosts, n, "true", alive, timeout_ms);
}

/* cmd run on each of hosts[n] through the remote shell, all at once:
 * alive[i] 1 when it ended well within timeout_ms, 0, or a negative errno
 * when it could not be started */
static void migrate_hosts_run(char (*hosts)[64], unsigned n, const char *cmd, int *alive,
			      int timeout_ms)
{
	const char *shell = cfg_str(CFG_MIGRATE_SHELL);
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	pid_t pid[n ? n : 1];
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++) {
		alive[i] = 0;
		pid[i] = fork();
		if (pid[i] < 0)
			alive[i] = -errno;   /* not asked: unknown, not dead */
		if (pid[i] == 0) {
			sigset_t none;
			int null = open("/dev/null", O_RDWR);

			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
			execlp(shell, shell, hosts[i], cmd, (char *)NULL);
			_exit(127);
		}
		left += pid[i] > 0;
	}
	for (int waited = 0; left; waited += 20) {
		for (unsigned i = 0; i < n; i++) {
			int st;

			if (pid[i] <= 0 || waitpid(pid[i], &st, WNOHANG) != pid[i])
				continue;
			alive[i] = WIFEXITED(st) && WEXITSTATUS(st) == 0;
			pid[i] = -1;
			left--;
		}
		if (left && waited >= timeout_ms) {
			for (unsigned i = 0; i < n; i++)
				if (pid[i] > 0) {
					kill(pid[i], SIGKILL);
					waitpid(pid[i], NULL, 0);
				}
			break;
		}
		if (left)
			nanosleep(&ts, NULL);
	}
}

int migrate_move_dir(const char *from, const char *from_parent, const char *to,
		     const char *to_parent, const char *name, int timeout_ms)
{
	const char *shell = cfg_str(CFG_MIGRATE_SHELL);
	const char *words[] = { shell, from, from_parent, to, to_parent, name };
	char cmd[4 * PATH_MAX];
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int st = 0, waited = 0;
	pid_t pid;

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strpbrk(words[i], "'\"$`\\\n"))
			return err_set(-EINVAL, "cannot quote '%s' for the remote shell", words[i]);
	if (snprintf(cmd, sizeof(cmd), "%s %s \"tar -C '%s' -cf - '%s'\" | %s %s \"mkdir -p '%s' && "
		     "tar -C '%s' -xf -\" && %s %s \"rm -rf '%s/%s'\"", shell, from, from_parent, name,
		     shell, to, to_parent, to_parent, shell, from, from_parent, name) >= (int)sizeof(cmd))
		return err_set(-ENAMETOOLONG, "the copy's command is too long");
	pid = fork();
	if (pid < 0)
		return err_set(-errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* bash for pipefail: a tar that failed on the source must not
		 * let the source's copy be removed */
		execl("/bin/bash", "bash", "-o", "pipefail", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (waited >= timeout_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return err_set(-ETIMEDOUT, "moving %s/%s from %s to %s took more than %d s",
				       from_parent, name, from, to, timeout_ms / 1000);
		}
		nanosleep(&ts, NULL);
		waited += 20;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(-EIO, "moving %s/%s from %s to %s failed (%s: status %d)", from_parent,
			       name, from, to, shell, WIFEXITED(st) ? WEXITSTATUS(st) : 128);
	return 0;
}

uint64_t migrate_expected_ms(uint64_t bytes, uint64_t bytes_per_s)
{
	if (!bytes_per_s)
		bytes_per_s = (uint64_t)cfg_u64(CFG_MIGRATE_RATE) << 20;
	return SETUP_MS + bytes * 1000 / bytes_per_s;
}

uint64_t migrate_source_ms(uint64_t bytes)
{
	uint64_t ms = SOURCE_BASE_MS + (bytes >> 20) * 1000 / SOURCE_MIB_PER_S,
		 most = cfg_u64(CFG_RANK_TIMEOUT) * 1000;

	return ms < most ? ms : most;
}
