/* launch.c - libstasis-launch.so: puts the lower half under each rank.
 *
 * `stasis run -- mpirun ... ./app ARGS` preloads this library into
 * everything the launcher starts. In the launcher and its daemons it does
 * nothing. In a rank (the environment names its rank: OMPI_COMM_WORLD_RANK
 * or PMIX_RANK from Open MPI, PMI_RANK from MPICH's Hydra) its constructor
 * runs before the program's libraries are initialized and executes the rank
 * again as
 *   stasis-lh-<mpi> -- ./app ARGS
 * from STASIS_LH_DIR, with this library taken out of LD_PRELOAD, when
 *  - the program is linked with an MPI library (libmpi.so.*, libmpich.so.*),
 *    wherever it runs in the rank (a script's child too); or
 *  - the program loads MPI only later, with dlopen (mpi4py's extension
 *    module links libmpi.so.40, Python does not): its executable's name
 *    matches one of STASIS_SPLIT_PROGRAMS' patterns (the key split_programs,
 *    "python*" unless set), or it links libpython. Only the launcher's own
 *    process of the rank (its parent has no rank variable): a helper
 *    `python3 -c ...` that a rank's script runs before the program would
 *    otherwise initialize MPI in its lower half, as the rank, and end
 *    without finalizing it, which ends the job.
 * Which lower half follows from the launcher, not from the program: a program
 * built with MPICH's mpicc runs above Open MPI's lower half when Open MPI's
 * mpirun starts it, which is how a job restarts under the other MPI.
 *
 * A task of an srun step started without a PMI (no --mpi=pmix or pmi2, and
 * no MpiDefault) that links MPI is refused in one line: its MPI would run
 * as a singleton, as it would without Stasis.
 *
 * A process of a rank that stays where it is tells the coordinator why
 * (UNSPLIT, docs/coordinator.md): the launcher's own process of the rank,
 * and a late-loading program started by something else. A checkpoint that
 * finds the rank unregistered says so.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <link.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coord/coord.h"

#define SPLIT_PROGRAMS_DEFAULT "python*"

struct libs {
	int mpi, python;
};

static int scan_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct libs *l = arg;
	const char *slash = strrchr(info->dlpi_name, '/');
	const char *base = slash ? slash + 1 : info->dlpi_name;

	(void)size;
	if (!strncmp(base, "libmpi.so.", 10) || !strncmp(base, "libmpich.so.", 12))
		l->mpi = 1;
	if (!strncmp(base, "libpython", 9) && strstr(base, ".so"))
		l->python = 1;
	return 0;
}

static void fail(const char *what, const char *arg)
{
	fprintf(stderr, "stasis: cannot start the rank under the lower half: %s%s\n", what, arg);
	_exit(127);
}

/* LD_PRELOAD without this library */
static void unpreload(const char *self)
{
	const char *old = getenv("LD_PRELOAD");
	char *v, *tok, *save = NULL, *out;
	size_t n = 0;

	if (!old)
		return;
	v = strdup(old);
	out = calloc(1, strlen(old) + 1);
	if (!v || !out)
		fail("out of memory", "");
	for (tok = strtok_r(v, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
		if (self && !strcmp(tok, self))
			continue;
		if (strstr(tok, "libstasis-launch.so"))
			continue;
		n += (size_t)sprintf(out + n, "%s%s", n ? ":" : "", tok);
	}
	if (n)
		setenv("LD_PRELOAD", out, 1);
	else
		unsetenv("LD_PRELOAD");
	free(v);
	free(out);
}

/* A whole small file of /proc (its size is not known beforehand), NUL-ended;
 * *len gets its length. NULL if it cannot be read. */
static char *read_proc(const char *path, size_t *len)
{
	size_t cap = 1 << 14, n = 0;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
		n += (size_t)r;
		if (n + 1 == cap) {
			char *b = realloc(buf, cap * 2);

			if (!b) {
				free(buf);
				close(fd);
				return NULL;
			}
			buf = b;
			cap *= 2;
		}
	}
	close(fd);
	buf[n] = 0;
	*len = n;
	return buf;
}

/* Whether the parent's environment holds entry (NAME=VALUE): then this
 * process was started by one of the rank's (a script), not by the
 * launcher's daemon, which has no rank variable of its own. A parent whose
 * environment cannot be read counts as the daemon. */
static int parent_has(const char *entry, pid_t ppid)
{
	char path[64], *env;
	size_t n, len = strlen(entry);
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)ppid);
	env = read_proc(path, &n);
	if (!env)
		return 0;
	for (size_t i = 0; i < n && !found; i += strlen(env + i) + 1)
		found = !strncmp(env + i, entry, len) && env[i + len] == 0;
	free(env);
	return found;
}

/* Whether one of patterns (comma- or space-separated shell patterns; one
 * with a slash is matched against the whole path) names the program exe. */
static int named(const char *patterns, const char *exe)
{
	const char *slash = strrchr(exe, '/');
	char *v = strdup(patterns), *tok, *save = NULL;
	int found = 0;

	if (!v)
		return 0;
	for (tok = strtok_r(v, ", \t", &save); tok && !found; tok = strtok_r(NULL, ", \t", &save))
		found = fnmatch(tok, strchr(tok, '/') ? exe : slash ? slash + 1 : exe, 0) == 0;
	free(v);
	return found;
}

/* Tell the coordinator (UNSPLIT, one line, no answer awaited) why this
 * process of a rank runs without a lower half. Never fails the process:
 * without a coordinator, or one that does not take the connection within a
 * second, nothing is said. */
static void report(const char *rank, const char *size, const char *kind, const char *why)
{
	const char *addr = getenv("STASIS_COORD_ADDR"), *jdir = getenv("STASIS_JOB_DIR");
	char path[PATH_MAX], secret[40] = "", host[64] = "?", ip[64], line[512];
	struct sockaddr_in sa = { .sin_family = AF_INET };
	const char *colon;
	int fd, n, err = 0;
	socklen_t elen = sizeof(err);

	if (!addr || !jdir || !(colon = strrchr(addr, ':')) || (size_t)(colon - addr) >= sizeof(ip))
		return;
	snprintf(ip, sizeof(ip), "%.*s", (int)(colon - addr), addr);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
		return;
	snprintf(path, sizeof(path), "%s/coord.secret", jdir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = (int)read(fd, secret, 32);
	close(fd);
	if (n != 32)
		return;
	secret[32] = 0;
	gethostname(host, sizeof(host) - 1);
	for (char *p = host; *p; p++)
		if (*p == ' ')
			*p = '_';
	/* one line, within the coordinator's 512 bytes */
	n = snprintf(line, sizeof(line), "UNSPLIT %d %s %s %s %d %s %s %s", COORD_PROTOCOL_VERSION, secret, rank,
		     size && *size ? size : "0", (int)getpid(), host, kind, why);
	if (n <= 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	for (int i = 0; i < n; i++)
		if (line[i] == '\n')
			line[i] = ' ';
	line[n++] = '\n';
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		struct pollfd p = { fd, POLLOUT, 0 };

		if (errno != EINPROGRESS || poll(&p, 1, 1000) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err) {
			close(fd);
			return;
		}
	}
	if (send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
		/* nothing to be done: the checkpoint will only say less */
	}
	close(fd);
}

/* Whether this process of a rank goes above a lower half although it links
 * no MPI library: NULL if it does, else why not, *kind saying which case
 * (NULL: nothing the checkpoint's message needs). */
static const char *late_loader(const char *entry, const struct libs *libs, const char **kind,
			       char *why, size_t len)
{
	const char *patterns = getenv("STASIS_SPLIT_PROGRAMS");
	char exe[PATH_MAX], pexe[PATH_MAX], path[64];
	pid_t ppid = getppid();
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int first = !parent_has(entry, ppid), late;

	if (!patterns)
		patterns = SPLIT_PROGRAMS_DEFAULT;
	exe[n > 0 ? n : 0] = 0;
	late = libs->python || (*exe && named(patterns, exe));
	if (late && first)
		return NULL;
	if (late) {
		snprintf(path, sizeof(path), "/proc/%d/exe", (int)ppid);
		n = readlink(path, pexe, sizeof(pexe) - 1);
		pexe[n > 0 ? n : 0] = 0;
		snprintf(why, len, "%s loads MPI only once it runs and was started by %s, not by the "
			 "launcher: such a program goes above a lower half only as the launcher's "
			 "own process of its rank (exec it)", exe, *pexe ? pexe : "another process");
		*kind = "late";
	} else {
		snprintf(why, len, "%s links no MPI library, and split_programs ('%s') does not name "
			 "it", *exe ? exe : "the program", patterns);
		*kind = first ? "nompi" : NULL;   /* a script's helper: nothing to say */
	}
	return why;
}

__attribute__((constructor)) static void launch(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK" };
	static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
					     "PMI_SIZE" };
	const char *kind = NULL, *var = NULL, *rank = NULL, *size = NULL;
	const char *dir = getenv("STASIS_LH_DIR");
	char lh[PATH_MAX], entry[128], whybuf[PATH_MAX * 2 + 256], *cmdline, **argv;
	struct libs libs = { 0, 0 };
	int argc = 0, persona;
	size_t n = 0;

	for (unsigned i = 0; i < sizeof(vars) / sizeof(vars[0]) && !rank; i++)
		if ((rank = getenv(vars[i])) != NULL) {
			var = vars[i];
			size = getenv(sizes[i]);
			kind = i < 2 ? "openmpi" : "mpich";
		}
	if (!kind && dir && !getenv("STASIS_LH_ACTIVE") && getenv("SLURM_PROCID") &&
	    getenv("SLURM_STEP_ID")) {
		/* a task of an srun step with no PMI: an MPI program there is a
		 * singleton (natively too); say so, once, where it starts */
		dl_iterate_phdr(scan_lib, &libs);
		if (libs.mpi) {
			if (strcmp(getenv("SLURM_PROCID"), "0"))
				_exit(1);   /* task 0 says it for the job */
			fprintf(stderr, "stasis: srun started the ranks without a process manager "
				"interface MPI can use: run srun --mpi=pmix (Open MPI) or --mpi=pmi2 "
				"(MPICH)\n");
			_exit(1);
		}
		return;
	}
	if (!kind || !dir || getenv("STASIS_LH_ACTIVE"))
		return;
	dl_iterate_phdr(scan_lib, &libs);
	if (!libs.mpi) {
		const char *why, *tell = NULL;

		snprintf(entry, sizeof(entry), "%s=%s", var, rank);
		why = late_loader(entry, &libs, &tell, whybuf, sizeof(whybuf));
		if (why) {
			if (tell)
				report(rank, size, tell, why);
			return;   /* it runs as it is */
		}
	}
	snprintf(lh, sizeof(lh), "%s/stasis-lh-%s", dir, kind);
	if (access(lh, X_OK) != 0)
		fail("missing ", lh);
	cmdline = read_proc("/proc/self/cmdline", &n);
	if (!cmdline)
		fail("cannot read /proc/self/cmdline", "");
	for (size_t i = 0; i < n; i++)
		if (!cmdline[i])
			argc++;
	argv = calloc((size_t)argc + 3, sizeof(*argv));
	if (!argv)
		fail("out of memory", "");
	argv[0] = lh;
	argv[1] = (char *)"--";
	for (size_t i = 0, k = 2; i < n; i += strlen(cmdline + i) + 1)
		argv[k++] = cmdline + i;
	unpreload(getenv("STASIS_LAUNCH_LIB"));
	setenv("STASIS_LH_ACTIVE", "1", 1);
	/* the lower half runs without address randomization: set here, it
	 * need not execute itself again to get it (one exec of a program that
	 * loads MPI less a rank) */
	persona = personality(0xffffffff);
	if (persona != -1 && !(persona & ADDR_NO_RANDOMIZE))
		personality((unsigned long)persona | ADDR_NO_RANDOMIZE);
	execv(lh, argv);
	fail("cannot execute ", lh);
}
