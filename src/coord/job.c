/* job.c - MPI jobs under the coordinator: launcher, launch record,
 * environment (job.h). */
#include "coord/job.h"

#include "common/err.h"
#include "store/store.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef STASIS_SPLIT_BUILD_DIR
#define STASIS_SPLIT_BUILD_DIR "."
#endif
#ifndef STASIS_SPLIT_REL_LIBDIR
#define STASIS_SPLIT_REL_LIBDIR "lib/stasis"
#endif

#define LAUNCH_MAGIC "stasis-launch 1"

int job_is_launcher(const char *argv0)
{
	static const char *const names[] = { "mpirun", "mpiexec", "orterun", "prterun", "srun" };
	const char *base = strrchr(argv0, '/');

	base = base ? base + 1 : argv0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n = strlen(names[i]);

		if (!strncmp(base, names[i], n) && (base[n] == 0 || base[n] == '.' || base[n] == '-'))
			return 1;
	}
	return 0;
}

static int is_elf_program(const char *path)
{
	unsigned char head[SELFMAG];
	struct stat st;
	int fd, ok;

	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ok = read(fd, head, sizeof(head)) == (ssize_t)sizeof(head) && !memcmp(head, ELFMAG, SELFMAG);
	close(fd);
	return ok;
}

static int resolves(const char *name)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (strchr(name, '/'))
		return is_elf_program(name);
	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		const char *e = strchr(p, ':');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, n ? p : ".", name);
		if (is_elf_program(buf))
			return 1;
		p += n + (e ? 1 : 0);
	}
	return 0;
}

int job_program_index(char *const *argv)
{
	for (int i = 1; argv[i]; i++)
		if (argv[i][0] != '-' && resolves(argv[i]))
			return i;
	return -ENOENT;
}

int job_launch_write(struct store_ckpt *ck, char *const *argv)
{
	struct store_file *f = NULL;
	char head[64];
	int prog = job_program_index(argv), ret;

	if (prog < 0)
		return err_set(-EINVAL, "cannot tell the program from the launcher's options in the "
			       "job's command");
	snprintf(head, sizeof(head), LAUNCH_MAGIC " %d\n", prog);
	ret = store_file_create(ck, JOB_LAUNCH_FILE, &f);
	ret = ret ? ret : store_file_write(f, head, strlen(head));
	for (int i = 0; !ret && argv[i]; i++)
		ret = store_file_write(f, argv[i], strlen(argv[i]) + 1);
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	return ret;
}

int job_launch_read(const struct store *s, const char *ckpt, const char *launcher, char ***out)
{
	char path[PATH_MAX], *buf = NULL, *p, *end, **argv;
	size_t n = 0, cap = 4096, words = 0;
	int fd, prog = -1, argc = 0, k = 0, ret;
	ssize_t r;

	ret = store_ckpt_path(s, ckpt, JOB_LAUNCH_FILE, path, sizeof(path));
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ENOENT;
	buf = malloc(cap);
	while (buf && (r = read(fd, buf + n, cap - n - 1)) > 0) {
		n += (size_t)r;
		if (n + 1 == cap) {
			char *b = realloc(buf, cap * 2);

			if (!b) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = b;
			cap *= 2;
		}
	}
	close(fd);
	if (!buf)
		return err_set(-ENOMEM, "out of memory");
	buf[n] = 0;
	p = strchr(buf, '\n');
	if (strncmp(buf, LAUNCH_MAGIC " ", sizeof(LAUNCH_MAGIC)) != 0 || !p ||
	    sscanf(buf + sizeof(LAUNCH_MAGIC), "%d", &prog) != 1 || prog < 1) {
		free(buf);
		return err_set(-EBADMSG, "%s is not a launch record", path);
	}
	p++;
	end = buf + n;
	for (char *q = p; q < end; q += strlen(q) + 1)
		argc++;
	if (argc <= prog) {
		free(buf);
		return err_set(-EBADMSG, "%s is truncated", path);
	}
	if (launcher)
		for (const char *q = launcher; *q;) {
			q += strspn(q, " \t");
			if (*q)
				words++;
			q += strcspn(q, " \t");
		}
	/* one block: the pointers, then a copy of the strings */
	argv = malloc((size_t)(argc + (int)words + 1) * sizeof(char *) + n + (launcher ? strlen(launcher) + 1 : 0));
	if (!argv) {
		free(buf);
		return err_set(-ENOMEM, "out of memory");
	}
	{
		char *strs = (char *)(argv + argc + words + 1);
		int i = 0;

		memcpy(strs, p, (size_t)(end - p));
		if (launcher) {
			char *l = strs + (end - p);

			strcpy(l, launcher);
			for (char *tok = strtok(l, " \t"); tok; tok = strtok(NULL, " \t"))
				argv[k++] = tok;
		}
		for (char *q = strs; q < strs + (end - p); q += strlen(q) + 1, i++)
			if (!launcher || i >= prog)
				argv[k++] = q;
		argv[k] = NULL;
	}
	free(buf);
	if (launcher && !words) {
		free(argv);
		return err_set(-EINVAL, "--launcher is empty");
	}
	*out = argv;
	return 0;
}

static const char *split_dir(void)
{
	static char buf[PATH_MAX];
	const char *v = getenv("STASIS_LH_DIR");
	char exe[PATH_MAX + 64];
	ssize_t n;

	if (v && *v)
		return v;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(buf, sizeof(buf), "%.3900s/../%s", exe, STASIS_SPLIT_REL_LIBDIR);
			snprintf(exe, sizeof(exe), "%s/libstasis-launch.so", buf);
			if (access(exe, R_OK) == 0)
				return buf;
		}
	}
	return STASIS_SPLIT_BUILD_DIR;
}

int job_child_env(const char *addr, const char *job_dir, const char *root, const char *tier,
		  const char *job, const char *restore_dir)
{
	const char *dir = split_dir(), *old = getenv("LD_PRELOAD");
	char lib[PATH_MAX + 32], preload[PATH_MAX * 3], real[PATH_MAX];

	snprintf(lib, sizeof(lib), "%s/libstasis-launch.so", dir);
	if (access(lib, R_OK) != 0)
		return err_set(-ENOENT, "the split process's launch library %s is missing (set "
			       "STASIS_LH_DIR)", lib);
	if (realpath(dir, real))
		dir = real;
	snprintf(lib, sizeof(lib), "%s/libstasis-launch.so", dir);
	snprintf(preload, sizeof(preload), "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
	if (setenv("LD_PRELOAD", preload, 1) || setenv("STASIS_LAUNCH_LIB", lib, 1) ||
	    setenv("STASIS_LH_DIR", dir, 1) || setenv("STASIS_COORD_ADDR", addr, 1) ||
	    setenv("STASIS_JOB_DIR", job_dir, 1) || setenv("STASIS_STORE_ROOT", root, 1) ||
	    setenv("STASIS_STORE_TIER", tier ? tier : "", 1) || setenv("STASIS_JOB_NAME", job, 1))
		return err_set(-ENOMEM, "cannot set the job's environment");
	unsetenv("STASIS_LH_ACTIVE");
	unsetenv("STASIS_COORD_FD");
	if (restore_dir)
		setenv("STASIS_RESTORE_DIR", restore_dir, 1);
	else
		unsetenv("STASIS_RESTORE_DIR");
	return 0;
}
