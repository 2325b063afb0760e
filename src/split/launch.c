/* launch.c - libstasis-launch.so: puts the lower half under each rank.
 *
 * `stasis run -- mpirun ... ./app ARGS` preloads this library into
 * everything the launcher starts. In the launcher and its daemons it does
 * nothing. In a rank (the environment names its rank: OMPI_COMM_WORLD_RANK
 * or PMIX_RANK from Open MPI, PMI_RANK from MPICH's Hydra) of a program
 * linked with an MPI library, its constructor runs before the program's
 * libraries are initialized and executes the rank again as
 *   stasis-lh-<mpi> -- ./app ARGS
 * from STASIS_LH_DIR, with this library taken out of LD_PRELOAD. Which
 * lower half follows from the launcher, not from the program: a program
 * built with MPICH's mpicc runs above Open MPI's lower half when Open MPI's
 * mpirun starts it, which is how a job restarts under the other MPI.
 */
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int mpi_lib(struct dl_phdr_info *info, size_t size, void *found)
{
	const char *slash = strrchr(info->dlpi_name, '/');
	const char *base = slash ? slash + 1 : info->dlpi_name;

	(void)size;
	if (!strncmp(base, "libmpi.so.", 10) || !strncmp(base, "libmpich.so.", 12))
		*(int *)found = 1;
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

__attribute__((constructor)) static void launch(void)
{
	const char *kind = getenv("OMPI_COMM_WORLD_RANK") || getenv("PMIX_RANK") ? "openmpi"
			   : getenv("PMI_RANK")                                  ? "mpich"
										   : NULL;
	const char *dir = getenv("STASIS_LH_DIR");
	char lh[PATH_MAX], *cmdline, **argv;
	int found = 0, fd, argc = 0;
	size_t cap = 1 << 16, n = 0;
	ssize_t r;

	if (!kind || !dir || getenv("STASIS_LH_ACTIVE"))
		return;
	dl_iterate_phdr(mpi_lib, &found);
	if (!found)
		return;   /* not an MPI program: it runs as it is */
	snprintf(lh, sizeof(lh), "%s/stasis-lh-%s", dir, kind);
	if (access(lh, X_OK) != 0)
		fail("missing ", lh);
	cmdline = malloc(cap);
	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (!cmdline || fd < 0)
		fail("cannot read /proc/self/cmdline", "");
	while ((r = read(fd, cmdline + n, cap - n - 1)) > 0) {
		n += (size_t)r;
		if (n + 1 == cap) {
			char *b = realloc(cmdline, cap * 2);

			if (!b)
				fail("out of memory", "");
			cmdline = b;
			cap *= 2;
		}
	}
	close(fd);
	cmdline[n] = 0;
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
	execv(lh, argv);
	fail("cannot execute ", lh);
}
