/* job.c - MPI jobs under the coordinator: launcher, launch record,
 * environment (job.h). */
#include "coord/job.h"
#include "coord/jobenv.h"

#include "common/config.h"
#include "common/err.h"
#include "store/store.h"

#include <dirent.h>
#include <sys/random.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef STASIS_SPLIT_BUILD_DIR
#define STASIS_SPLIT_BUILD_DIR "."
#endif
#ifndef STASIS_SPLIT_REL_LIBDIR
#define STASIS_SPLIT_REL_LIBDIR "lib/stasis"
#endif

#define LAUNCH_MAGIC "stasis-launch 1"
#define HOSTS_MAX_LIST 256        /* entries of a launcher's host list */

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
	const char *v = getenv(JOBENV_LH_DIR);
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

/* Hydra and srun give the ranks the launcher's environment; Open MPI's
 * mpirun only its own variables and those it is told to forward, and on
 * other nodes a rank would start without its lower half and without the
 * coordinator's address. mca_base_env_list (';'-separated) tells it,
 * in the launcher's environment, so that no command line changes; other
 * launchers ignore it. The program's own list is kept. */
static int listed(const char *list, const char *name)
{
	size_t len = strlen(name);

	for (const char *p = list; (p = strstr(p, name)); p += len)
		if ((p == list || p[-1] == ';') && (p[len] == 0 || p[len] == ';' || p[len] == '='))
			return 1;
	return 0;
}

static int forward_env(void)
{
	static const char *const names[] = { JOBENV_FORWARD };
	const char *old = getenv("OMPI_MCA_mca_base_env_list");
	char list[2048];
	size_t n = 0;

	list[0] = 0;
	if (old && *old)
		n = (size_t)snprintf(list, sizeof(list), "%s", old);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && n < sizeof(list); i++) {
		if (!getenv(names[i]) || listed(list, names[i]))
			continue;
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", n ? ";" : "", names[i]);
	}
	if (n >= sizeof(list))
		return err_set(-E2BIG, "OMPI_MCA_mca_base_env_list is too long to add the job's variables");
	if (n && setenv("OMPI_MCA_mca_base_env_list", list, 1) != 0)
		return err_set(-ENOMEM, "cannot set the job's environment");
	return 0;
}

/* <root>/<job>/stage.id: 16 hex digits made at the job's first staged
 * launch, read back at its restarts (lh_stage.c names the node-local
 * directory after it) */
static int stage_id(const char *root, const char *job, char id[17])
{
	char path[PATH_MAX];
	unsigned char r[8];
	int fd;

	snprintf(path, sizeof(path), "%s/%s/stage.id", root, job);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, id, 16);

		close(fd);
		id[n == 16 ? 16 : 0] = 0;
		if (n == 16)
			return 0;
	}
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -1;
	for (int i = 0; i < 8; i++)
		snprintf(id + 2 * i, 3, "%02x", r[i]);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == EEXIST ? stage_id(root, job, id) : -1;
	if (write(fd, id, 16) != 16 || fsync(fd) != 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}

const char *job_lh_dir(void)
{
	return split_dir();
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
	if (setenv(JOBENV_PRELOAD, preload, 1) || setenv(JOBENV_LAUNCH_LIB, lib, 1) ||
	    setenv(JOBENV_LH_DIR, dir, 1) || setenv(JOBENV_COORD_ADDR, addr, 1) ||
	    setenv(JOBENV_JOB_DIR, job_dir, 1) || setenv(JOBENV_STORE_ROOT, root, 1) ||
	    setenv(JOBENV_STORE_TIER, tier ? tier : "", 1) || setenv(JOBENV_JOB_NAME, job, 1) ||
	    setenv(JOBENV_SPLIT_PROGRAMS, cfg_str(CFG_SPLIT_PROGRAMS), 1))
		return err_set(-ENOMEM, "cannot set the job's environment");
	unsetenv(JOBENV_LH_ACTIVE);
	unsetenv("STASIS_COORD_FD");   /* a single program's (proc.h), not a rank's */
	if (restore_dir)
		setenv(JOBENV_RESTORE_DIR, restore_dir, 1);
	else
		unsetenv(JOBENV_RESTORE_DIR);
	/* staging: the ranks write into their node's local_dir (and a restart
	 * looks there first); without it, never, even for a restart of a
	 * checkpoint that was staged (its global copies, if any) */
	if (!strcmp(cfg_str(CFG_STAGING), "on")) {
		char copies[16], id[17];

		if (stage_id(root, job, id) != 0 || setenv(JOBENV_STAGE_ID, id, 1) != 0)
			return err_set(-EIO, "cannot keep the job's staging id in %s/%s: %s", root, job,
				       strerror(errno));
		snprintf(copies, sizeof(copies), "%llu", (unsigned long long)cfg_u64(CFG_STAGE_COPIES));
		char keep[16];

		snprintf(keep, sizeof(keep), "%llu", (unsigned long long)cfg_u64(CFG_CACHE_KEEP));
		if (setenv(JOBENV_STAGE_DIR, cfg_str(CFG_LOCAL_DIR), 1) ||
		    setenv(JOBENV_STAGE_COPIES, copies, 1) || setenv(JOBENV_CACHE_KEEP, keep, 1) ||
		    setenv(JOBENV_STAGE_COMPRESS, cfg_str(CFG_STAGE_COMPRESS), 1) ||
		    setenv(JOBENV_RECYCLE, cfg_str(CFG_RECYCLE), 1))
			return err_set(-ENOMEM, "cannot set the job's environment");
	} else {
		unsetenv(JOBENV_STAGE_DIR);
	}
	return forward_env();
}

/* Whether argv is Open MPI's launcher told to forward variables with -x:
 * it refuses to be told with mca_base_env_list too ("does not support
 * mixing these two methods"), so the job's are added as -x instead */
static int uses_x(char *const *argv)
{
	const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];

	if (!job_is_launcher(argv[0]) || !strncmp(base, "srun", 4))   /* srun's -x excludes */
		return 0;
	for (int i = 1; argv[i]; i++)
		if (!strcmp(argv[i], "-x"))
			return 1;
	return 0;
}

void job_child_exec(char *const *argv)
{
	static const char *const names[] = { JOBENV_FORWARD };
	size_t n = 0, nn = sizeof(names) / sizeof(names[0]);
	char **x;

	if (!uses_x(argv)) {
		execvp(argv[0], argv);
		return;
	}
	while (argv[n])
		n++;
	x = calloc(n + 2 * nn + 1, sizeof(*x));
	if (!x)
		return;
	unsetenv("OMPI_MCA_mca_base_env_list");
	n = 0;
	x[n++] = argv[0];
	/* before the first application context: -x NAME (no value) is the
	 * whole job's */
	for (size_t i = 0; i < nn; i++)
		if (getenv(names[i])) {
			x[n++] = "-x";
			x[n++] = (char *)names[i];
		}
	for (int i = 1; argv[i]; i++)
		x[n++] = argv[i];
	execvp(x[0], x);
	free(x);
}

/* ---- reading a restart's images ahead (job_prefetch) ---- */

#define PREFETCH_STEP (512l << 10)
#define PREFETCH_MAX 256

/* filesystems on a local block device: images there are read by ranks of
 * this node (on a shared one they may be read elsewhere) */
static int local_fs(long type)
{
	return type == EXT4_SUPER_MAGIC || type == XFS_SUPER_MAGIC ||
	       type == BTRFS_SUPER_MAGIC || type == 0x2011BAB0 /* exfat */ ||
	       type == F2FS_SUPER_MAGIC;
}

static long long mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

#define FILES_MAGIC "stasis-files 1\n"
#define FILES_MAX 1024
#define FILES_BYTES (256ll << 20)

/* the images a restart reads ahead, by name in dir (opened one at a time:
 * the coordinator's descriptors are for its ranks) */
struct prefetch {
	char dir[PATH_MAX];
	int n;
	char name[][32];
};

/* the paths of a process's file mappings not yet in list (n of them) */
static void maps_of(int pid, char **list, int *n)
{
	char path[64], line[PATH_MAX + 256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && *n < FILES_MAX) {
		char *p = strchr(line, '/'), perms[8] = "";
		size_t len;
		int seen = 0;

		/* shared mappings are the job's own segments, gone at a restart */
		if (!p || sscanf(line, "%*s %7s", perms) != 1 || perms[3] == 's' ||
		    strncmp(p, "/dev/", 5) == 0 || strncmp(p, "/proc/", 6) == 0 ||
		    strncmp(p, "/sys/", 5) == 0)
			continue;
		len = strcspn(p, "\n");
		if (len > 10 && !strncmp(p + len - 10, " (deleted)", 10))
			continue;
		p[len] = 0;
		for (int i = *n - 1; i >= 0 && !seen; i--)
			seen = !strcmp(list[i], p);
		if (!seen && (list[*n] = strdup(p)) != NULL)
			(*n)++;
	}
	fclose(f);
}

/* the children of every thread of pid, appended to pids */
static void children_of(int pid, int *pids, int *n, int max)
{
	char path[64];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		FILE *f;
		int c;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", pid, e->d_name);
		f = fopen(path, "re");
		while (f && *n < max && fscanf(f, "%d", &c) == 1)
			pids[(*n)++] = c;
		if (f)
			fclose(f);
	}
	closedir(d);
}

int job_files_write(struct store_ckpt *ck, int launcher_pid)
{
	struct store_file *f = NULL;
	int pids[256], np = 0, n = 0, ret;
	char **list = calloc(FILES_MAX, sizeof(*list));

	if (!list)
		return err_set(-ENOMEM, "out of memory");
	pids[np++] = launcher_pid;
	for (int i = 0; i < np; i++) {
		maps_of(pids[i], list, &n);
		children_of(pids[i], pids, &np, (int)(sizeof(pids) / sizeof(pids[0])));
	}
	ret = store_file_create(ck, JOB_FILES_FILE, &f);
	ret = ret ? ret : store_file_write(f, FILES_MAGIC, strlen(FILES_MAGIC));
	for (int i = 0; !ret && i < n; i++) {
		ret = store_file_write(f, list[i], strlen(list[i]));
		ret = ret ? ret : store_file_write(f, "\n", 1);
	}
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
	return ret;
}

/* JOB_FILES_FILE's files: all their reads started now (queued before the
 * images' then); returns how many */
static int files_ahead(const char *dir)
{
	char path[PATH_MAX + 16], line[PATH_MAX + 2];
	long long bytes = 0;
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/" JOB_FILES_FILE, dir);
	f = fopen(path, "re");
	if (!f || !fgets(line, sizeof(line), f) || strcmp(line, FILES_MAGIC)) {
		if (f)
			fclose(f);
		return 0;
	}
	while (n < FILES_MAX && fgets(line, sizeof(line), f)) {
		struct stat st;
		int fd;

		line[strcspn(line, "\n")] = 0;
		fd = open(line, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && bytes + st.st_size <= FILES_BYTES &&
		    posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED) == 0) {
			bytes += st.st_size;
			n++;
		}
		close(fd);
	}
	fclose(f);
	return n;
}

/* the images one after the other, in steps of PREFETCH_STEP, each waited
 * for before the next (WILLNEED starts a step's reads, a one-byte read at
 * its end waits for them) */
static void *prefetch_run(void *arg)
{
	struct prefetch *p = arg;
	char c;

	for (int i = 0; i < p->n; i++) {
		char path[PATH_MAX + 40];
		struct stat st;
		int fd;

		snprintf(path, sizeof(path), "%s/%s", p->dir, p->name[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0) {
			posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
			for (off_t o = 0; o < st.st_size; o += PREFETCH_STEP)
				if (posix_fadvise(fd, o, PREFETCH_STEP, POSIX_FADV_WILLNEED) != 0 ||
				    pread(fd, &c, 1, o + PREFETCH_STEP - 1) < 0)
					break;
		}
		close(fd);
	}
	free(p);
	return NULL;
}

int job_prefetch(const char *dir, int images, int *nimages)
{
	long long bytes = 0, avail;
	struct prefetch *p;
	struct statfs sf;
	struct dirent *e;
	pthread_attr_t a;
	pthread_t t;
	DIR *d;
	int files, ok;

	*nimages = 0;
	if (strcmp(cfg_str(CFG_PREFETCH), "on") != 0)
		return 0;
	files = files_ahead(dir);
	if (!images || statfs(dir, &sf) != 0 || !local_fs((long)sf.f_type) ||
	    (avail = mem_available()) < 0)
		return files;
	p = malloc(sizeof(*p) + PREFETCH_MAX * sizeof(p->name[0]));
	d = p ? opendir(dir) : NULL;
	if (!d) {
		free(p);
		return files;
	}
	snprintf(p->dir, sizeof(p->dir), "%s", dir);
	p->n = 0;
	while ((e = readdir(d)) != NULL && p->n < PREFETCH_MAX) {
		int rank, len = 0;
		struct stat st;

		if (sscanf(e->d_name, "rank-%d.img%n", &rank, &len) != 1 || e->d_name[len] ||
		    strlen(e->d_name) >= sizeof(p->name[0]) ||
		    fstatat(dirfd(d), e->d_name, &st, 0) != 0)
			continue;
		bytes += st.st_size;
		memcpy(p->name[p->n++], e->d_name, strlen(e->d_name) + 1);   /* fits: checked */
	}
	closedir(d);
	ok = p->n > 0 && bytes <= avail / 2 && pthread_attr_init(&a) == 0;   /* else the ranks read them */
	if (ok) {
		int n = p->n;   /* p is the thread's once it runs */

		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&a, 64 << 10);
		ok = pthread_create(&t, &a, prefetch_run, p) == 0;
		pthread_attr_destroy(&a);
		if (ok) {
			*nimages = n;
			return files;
		}
	}
	free(p);
	return files;
}

/* ---- stopping and relaunching (coord.c's recovery) ---- */

void job_kill_tree(int pid)
{
	int pids[1024], n = 0;

	/* stop the tree first so that nothing forks while it is walked */
	pids[n++] = pid;
	kill(pid, SIGSTOP);
	for (int i = 0; i < n; i++) {
		int from = n;

		children_of(pids[i], pids, &n, (int)(sizeof(pids) / sizeof(pids[0])));
		for (int k = from; k < n; k++)
			kill(pids[k], SIGSTOP);
	}
	for (int i = n; i-- > 0;)
		kill(pids[i], SIGKILL);
}

int job_stop_grace_ms(const char *argv0)
{
	const char *base = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;

	/* Slurm ends a step whose node died when it marks the node down (11-16
	 * s with SlurmdTimeout 10), and srun exits then; an srun killed or
	 * signalled before leaves a step that Slurm 22.05 never ends (scancel
	 * cannot either), and the next step of the allocation would wait for
	 * it forever (the relaunch's --overlap lets it start all the same) */
	return !strncmp(base, "srun", 4) ? 90000 : 0;
}

/* Whether word w is one of the n options opts, alone (*value NULL: the
 * value is the next word) or as "option=value" (*value: after the '=') */
static int launcher_option(const char *w, const char *const *opts, size_t n, const char **value)
{
	*value = NULL;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(opts[i]);

		if (!strcmp(w, opts[i]))
			return 1;
		if (!strncmp(w, opts[i], len) && w[len] == '=') {
			*value = w + len + 1;
			return 1;
		}
	}
	return 0;
}

/* the host-list options of the launchers (Open MPI's, MPICH's Hydra) */
static int host_option(const char *w, const char **list)
{
	static const char *const opts[] = { "--host", "-H", "-host", "-hosts", "--hosts" };

	return launcher_option(w, opts, sizeof(opts) / sizeof(opts[0]), list);
}

static int in_hosts(const char *host, size_t len, char (*hosts)[64], unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (strlen(hosts[i]) == len && !strncmp(hosts[i], host, len))
			return 1;
	return 0;
}

/* list ("n1:2,n2,n3") without the lost hosts into out: each one replaced
 * in place by a spare (an entry no rank used; the lost one's slots kept),
 * or dropped when no spare is left */
static void hosts_without(const char *list, char (*lost)[64], unsigned nlost, char (*used)[64],
			  unsigned nused, char *out, size_t len, char *note, size_t nlen)
{
	char entries[HOSTS_MAX_LIST][128];
	int taken[HOSTS_MAX_LIST] = { 0 };
	unsigned n = 0;
	size_t k = 0, nk = strlen(note);

	for (const char *p = list; *p && n < HOSTS_MAX_LIST;) {
		size_t l = strcspn(p, ",");

		snprintf(entries[n++], sizeof(entries[0]), "%.*s", (int)l, p);
		p += l + (p[l] == ',');
	}
	out[0] = 0;
	for (unsigned i = 0; i < n; i++) {
		const char *e = entries[i], *colon = strchr(e, ':');
		size_t hl = colon ? (size_t)(colon - e) : strlen(e);
		char put[160];

		if (taken[i])
			continue;
		snprintf(put, sizeof(put), "%s", e);
		if (in_hosts(e, hl, lost, nlost)) {
			unsigned s = 0;

			/* a spare: named in the list after it, no rank ran there */
			for (s = i + 1; s < n; s++) {
				const char *sc = strchr(entries[s], ':');
				size_t sl = sc ? (size_t)(sc - entries[s]) : strlen(entries[s]);

				if (!taken[s] && !in_hosts(entries[s], sl, used, nused) &&
				    !in_hosts(entries[s], sl, lost, nlost))
					break;
			}
			if (s < n) {
				const char *sc = strchr(entries[s], ':');
				size_t sl = sc ? (size_t)(sc - entries[s]) : strlen(entries[s]);

				taken[s] = 1;
				snprintf(put, sizeof(put), "%.*s%s", (int)sl, entries[s], colon ? colon : "");
				nk += (size_t)snprintf(note + nk, nk < nlen ? nlen - nk : 0,
						       "%s%.*s replaced by %.*s", nk ? ", " : "",
						       (int)hl, e, (int)sl, entries[s]);
			} else {
				nk += (size_t)snprintf(note + nk, nk < nlen ? nlen - nk : 0,
						       "%s%.*s dropped (no spare left)", nk ? ", " : "",
						       (int)hl, e);
				continue;
			}
		}
		k += (size_t)snprintf(out + k, k < len ? len - k : 0, "%s%s", k ? "," : "", put);
	}
}

int job_launch_without(char *const *argv, char (*lost)[64], unsigned nlost, char (*used)[64],
		       unsigned nused, char ***out, char *note, size_t nlen)
{
	int prog = job_program_index(argv), argc = 0, k = 0, srun;
	size_t bytes = 0;
	char **v, *strs, hosts[4096] = "";
	const char *base;

	note[0] = 0;
	if (prog < 0)
		return err_set(-EINVAL, "cannot tell the program from the launcher's options in the "
			       "job's command");
	for (argc = 0; argv[argc]; argc++)
		bytes += strlen(argv[argc]) + 1;
	base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	srun = !strncmp(base, "srun", 4);
	/* the pointers, then the strings: the old ones, a new host list, an
	 * --exclude for srun */
	v = malloc((size_t)(argc + 3) * sizeof(char *) + bytes + 2 * sizeof(hosts));
	if (!v)
		return err_set(-ENOMEM, "out of memory");
	strs = (char *)(v + argc + 3);
	for (int i = 0; i < argc; i++) {
		const char *list = NULL, *w = argv[i];
		char edited[sizeof(hosts) + 16];

		if (nlost && i < prog && i > 0 && host_option(argv[i - 1], &list) && !list &&
		    !strchr(argv[i - 1], '=')) {
			hosts_without(w, lost, nlost, used, nused, hosts, sizeof(hosts), note, nlen);
			w = hosts;
		} else if (nlost && i < prog && host_option(w, &list) && list) {
			hosts_without(list, lost, nlost, used, nused, hosts, sizeof(hosts), note, nlen);
			snprintf(edited, sizeof(edited), "%.*s%s", (int)(list - w), w, hosts);
			w = edited;
		}
		v[k++] = strcpy(strs, w);
		strs += strlen(w) + 1;
		if (i == 0 && srun && nlost) {
			/* Slurm places the step elsewhere in the allocation */
			size_t n = (size_t)snprintf(strs, sizeof(hosts), "--exclude=");

			for (unsigned l = 0; l < nlost; l++)
				n += (size_t)snprintf(strs + n, sizeof(hosts) - n, "%s%s", l ? "," : "",
						      lost[l]);
			v[k++] = strs;
			strs += n + 1;
			snprintf(note, nlen, "srun --exclude=%s", v[k - 1] + 10);
			/* the old step may linger in Slurm, holding its CPUs: its
			 * ranks are gone, the new one may share them */
			v[k++] = strcpy(strs, "--overlap");
			strs += sizeof("--overlap");
		}
	}
	v[k] = NULL;
	if (nlost && !note[0])
		snprintf(note, nlen, "%s lost, but the launcher's command names no host list to "
			 "take it out of", lost[0]);
	*out = v;
	return 0;
}

/* The word of argv holding the rank count (*num: the count in it), or -1 */
static int rank_count_at(char *const *argv, const char **num)
{
	static const char *const counts[] = { "-np", "-n", "--np", "-c", "--n", "--ntasks" };
	int prog = job_program_index(argv), at = -1;

	*num = NULL;
	for (int i = 1; i < prog && at < 0; i++) {
		if (!launcher_option(argv[i], counts, sizeof(counts) / sizeof(counts[0]), num))
			continue;
		if (*num)
			at = i;   /* --ntasks=4 */
		else if (i + 1 < prog)
			at = i + 1, *num = argv[i + 1];
	}
	if (at < 0 || !*num || strspn(*num, "0123456789") != strlen(*num) || !**num ||
	    strlen(*num) > 6)
		return -1;
	return at;
}

int job_launch_ranks(char *const *argv)
{
	const char *num;

	return rank_count_at(argv, &num) < 0 ? -1 : atoi(num);
}

int job_launch_spares(char *const *argv, unsigned spares, char ***out)
{
	int argc, at;
	const char *num = NULL;
	size_t bytes = 0;
	char **v, *strs;

	for (argc = 0; argv[argc]; argc++)
		bytes += strlen(argv[argc]) + 1;
	at = rank_count_at(argv, &num);
	if (at < 0)
		return err_set(-EINVAL, "--spares %u: the launcher's command (%s) gives no number of "
			       "ranks (-np N, -n N) to add the spares to", spares, argv[0]);
	v = malloc((size_t)(argc + 1) * sizeof(char *) + bytes + 16);
	if (!v)
		return err_set(-ENOMEM, "out of memory");
	strs = (char *)(v + argc + 1);
	for (int i = 0; i < argc; i++) {
		int n = i != at ? sprintf(strs, "%s", argv[i])
				: sprintf(strs, "%.*s%ld", (int)(num - argv[i]), argv[i],
					  atol(num) + (long)spares);

		v[i] = strs;
		strs += n + 1;
	}
	v[argc] = NULL;
	*out = v;
	return 0;
}

unsigned job_hosts(char *const *argv, char (*out)[64], unsigned max)
{
	int prog = job_program_index(argv);
	unsigned n = 0;

	for (int i = 1; i < prog; i++) {
		const char *list = NULL;

		if (!host_option(argv[i], &list))
			continue;
		if (!list && !(list = argv[i + 1]))
			break;
		for (const char *p = list; *p && n < max;) {
			size_t l = strcspn(p, ","), h = strcspn(p, ":,");

			if (h && h < 64)
				snprintf(out[n++], 64, "%.*s", (int)h, p);
			p += l + (p[l] == ',');
		}
	}
	return n;
}

int job_copies_missing(const char *missing, const char *name)
{
	FILE *f = fopen(missing, "re");
	size_t n = strlen(name);
	char line[256];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = !strncmp(line, name, n) && line[n] == ' ';
	fclose(f);
	return found;
}

int job_level_in_global(const char *level)
{
	return !level[0] || strstr(level, "global") != NULL;
}
