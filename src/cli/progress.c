/* progress.c - one line of progress on a terminal, for commands that take
 * more than a second (docs/cli.md, "Progress").
 *
 * A thread wakes every PROGRESS_TICK_MS, asks the command's sampler for the
 * line and, once the command has run for PROGRESS_DELAY_MS, draws it on
 * stderr after a carriage return, padded with spaces over the previous one
 * (no escape sequences: any terminal, even TERM=dumb). Stopping clears the
 * line the same way. Nothing at all happens when stderr is not a terminal.
 *
 * The samplers of `stasis checkpoint` and `stasis restart` watch the job
 * from outside the coordinator, as any other process could: the new
 * checkpoint's directory (rank images appearing, their sizes growing), the
 * coordinator's STATUS answer (ranks registered after a restart) and the
 * bytes the job's processes read (/proc/<pid>/io).
 */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"
#include "coord/coord.h"
#include "coord/job.h"
#include "store/store.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_TICK_MS 200
#define PROGRESS_DELAY_MS 1000

struct cli_progress {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop;
	cli_progress_fn fn;
	void *arg;
	void (*free_arg)(void *arg);
	size_t shown;           /* characters of the line on the terminal now */
};

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_rate(struct cli_rate *r, uint64_t bytes, char *buf, size_t len)
{
	double t = cli_now();
	char size[32];

	if (!r->started) {
		r->started = 1;
		r->t0 = t;
	}
	if (bytes == 0)
		r->t0 = t;   /* nothing moves yet: the rate counts from the first byte */
	if (bytes == 0 || t - r->t0 < 0.5) {
		snprintf(buf, len, "-");
		return;
	}
	cli_human_size((uint64_t)((double)bytes / (t - r->t0)), size, sizeof(size));
	snprintf(buf, len, "%s/s", size);
}

static void draw(struct cli_progress *p, const char *text)
{
	char line[512];
	struct winsize ws;
	size_t n, width = sizeof(line) - 1;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && ws.ws_col - 1u < width)
		width = ws.ws_col - 1u;   /* never wrap: \r goes back only one row */
	line[0] = '\r';
	n = 1 + (size_t)snprintf(line + 1, sizeof(line) - 1, "%s", text);
	if (n > width + 1)
		n = width + 1;
	while (n < p->shown + 1 && n < sizeof(line))
		line[n++] = ' ';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* the terminal went away: nothing to show it */
	}
	p->shown = strlen(text) < width ? strlen(text) : width;
}

static void clear(struct cli_progress *p)
{
	char line[520];
	size_t n = 0;

	if (!p->shown)
		return;
	line[n++] = '\r';
	while (n < p->shown + 1 && n < sizeof(line) - 1)
		line[n++] = ' ';
	line[n++] = '\r';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* as in draw() */
	}
	p->shown = 0;
}

static void *progress_thread(void *arg)
{
	struct cli_progress *p = arg;
	double start = cli_now();
	struct timespec until;
	char text[400];
	int done = 0;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		if (done) {   /* cleared; idle until stopped (a restart runs on) */
			pthread_cond_wait(&p->cond, &p->lock);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += PROGRESS_TICK_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&p->cond, &p->lock, &until);
		if (p->stop)
			continue;
		pthread_mutex_unlock(&p->lock);
		text[0] = 0;
		done = p->fn(p->arg, text, sizeof(text)) != 0;
		pthread_mutex_lock(&p->lock);
		if (p->stop)
			break;
		if (done)
			clear(p);
		else if (cli_now() - start >= PROGRESS_DELAY_MS / 1000.0 && text[0])
			draw(p, text);
	}
	clear(p);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct cli_progress *cli_progress_start(cli_progress_fn fn, void *arg, void (*free_arg)(void *))
{
	struct cli_progress *p;
	pthread_condattr_t ca;
	sigset_t all, old;
	int ret;

	if (!isatty(STDERR_FILENO) || !(p = calloc(1, sizeof(*p)))) {
		if (free_arg)
			free_arg(arg);
		return NULL;
	}
	p->fn = fn;
	p->arg = arg;
	p->free_arg = free_arg;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_condattr_destroy(&ca);
	/* every signal blocked in the thread: the coordinator blocks SIGTERM,
	 * SIGUSR1 and SIGCHLD to read them from a signalfd, which works only
	 * if no thread takes them (and it blocks them after this starts) */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&p->thread, NULL, progress_thread, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret != 0) {
		if (free_arg)
			free_arg(arg);
		free(p);
		return NULL;
	}
	return p;
}

void cli_progress_stop(struct cli_progress **pp)
{
	struct cli_progress *p = *pp;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	if (p->free_arg)
		p->free_arg(p->arg);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
	*pp = NULL;
}

/* ---- bytes done by this process ---- */

struct bytes_watch {
	char cmd[16];
	char name[256];
	uint64_t total;            /* 0: not known */
	const uint64_t *done;      /* NULL: what this process read (verify) */
	uint64_t rchar0;           /* this process's rchar at the start */
	struct cli_rate rate;
};

/* Bytes this process read so far (/proc/self/io rchar). */
static uint64_t self_rchar(void)
{
	FILE *f = fopen("/proc/self/io", "re");
	unsigned long long r = 0;
	char buf[128];

	while (f && fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "rchar: %llu", &r) == 1)
			break;
	if (f)
		fclose(f);
	return r;
}

static int bytes_sample(void *arg, char *line, size_t len)
{
	struct bytes_watch *w = arg;
	uint64_t done = w->done ? __atomic_load_n(w->done, __ATOMIC_RELAXED) : self_rchar() - w->rchar0;
	char a[32], b[32], rate[48];

	cli_human_size(done, a, sizeof(a));
	cli_rate(&w->rate, done, rate, sizeof(rate));
	if (w->total) {
		cli_human_size(w->total, b, sizeof(b));
		snprintf(line, len, "stasis: %s %s: %s of %s (%u%%), %s", w->cmd, w->name, a, b,
			 (unsigned)(done >= w->total ? 100 : done * 100 / w->total), rate);
	} else {
		snprintf(line, len, "stasis: %s %s: %s read, %s", w->cmd, w->name, a, rate);
	}
	return 0;
}

struct cli_progress *cli_progress_bytes(const char *cmd, const char *name, uint64_t total,
					const uint64_t *done)
{
	struct bytes_watch *w;

	if (!isatty(STDERR_FILENO) || !(w = calloc(1, sizeof(*w))))
		return NULL;
	snprintf(w->cmd, sizeof(w->cmd), "%s", cmd);
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->total = total;
	w->done = done;
	if (!done)
		w->rchar0 = self_rchar();
	w->rate.started = 1;
	w->rate.t0 = cli_now();
	return cli_progress_start(bytes_sample, w, free);
}

/* ---- what a job shows from outside ---- */

/* "ckpt-000012" -> 12; 0 for anything else */
static unsigned long ckpt_number(const char *name)
{
	char *end;
	unsigned long n;

	if (strncmp(name, "ckpt-", 5) != 0 || !isdigit((unsigned char)name[5]))
		return 0;
	n = strtoul(name + 5, &end, 10);
	return *end ? 0 : n;
}

/* The highest ckpt-N directory in a job directory (0: none). */
static unsigned long newest_ckpt(const char *job_dir)
{
	DIR *d = opendir(job_dir);
	struct dirent *e;
	unsigned long max = 0;

	while (d && (e = readdir(d)) != NULL) {
		unsigned long n = ckpt_number(e->d_name);

		if (n > max)
			max = n;
	}
	if (d)
		closedir(d);
	return max;
}

/* The lowest ckpt-N directory above `after` in a job directory (0: none). */
static unsigned long next_ckpt(const char *job_dir, unsigned long after)
{
	DIR *d = opendir(job_dir);
	struct dirent *e;
	unsigned long min = 0;

	while (d && (e = readdir(d)) != NULL) {
		unsigned long n = ckpt_number(e->d_name);

		if (n > after && (!min || n < min))
			min = n;
	}
	if (d)
		closedir(d);
	return min;
}

static int is_image_name(const char *name, size_t len)
{
	/* rank-NNNNN.img of an MPI job's rank, process.img of a process */
	return (len > 9 && strncmp(name, "rank-", 5) == 0 && strncmp(name + len - 4, ".img", 4) == 0) ||
	       (len == 11 && strncmp(name, "process.img", 11) == 0);
}

/* Images of a checkpoint's directory: committed ones (renamed from their
 * .tmp, so durable) and the bytes of all of them, written so far. */
static void scan_ckpt(const char *dir, unsigned *done, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		int tmp = len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0;
		struct stat st;

		if (!is_image_name(e->d_name, tmp ? len - 4 : len) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
			continue;
		*bytes += (uint64_t)st.st_size;
		if (!tmp)
			(*done)++;
	}
	if (d)
		closedir(d);
}

/* From a STATUS answer: an MPI job's ranks=<registered>/<size> (0 if none). */
static int status_ranks(const char *reply, unsigned *registered, unsigned *size)
{
	const char *p = reply;

	while ((p = strstr(p, "ranks=")) != NULL) {
		if ((p == reply || p[-1] == ' ') && sscanf(p, "ranks=%u/%u", registered, size) == 2)
			return 1;
		p += 6;
	}
	return 0;
}

/* Bytes read by every process below this one (/proc/<pid>/io rchar; a
 * process that cannot be read, or has ended, counts nothing). */
static uint64_t children_rchar(pid_t pid, int depth)
{
	char path[64], buf[4096];
	uint64_t sum = 0;
	DIR *tasks;
	struct dirent *t;

	if (depth > 16)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	tasks = opendir(path);
	while (tasks && (t = readdir(tasks)) != NULL) {
		FILE *f;
		int child;

		if (t->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", (int)pid, t->d_name);
		if (!(f = fopen(path, "re")))
			continue;
		while (fscanf(f, "%d", &child) == 1) {
			FILE *io;

			snprintf(path, sizeof(path), "/proc/%d/io", child);
			if ((io = fopen(path, "re")) != NULL) {
				unsigned long long r;

				while (fgets(buf, sizeof(buf), io))
					if (sscanf(buf, "rchar: %llu", &r) == 1)
						sum += r;
				fclose(io);
			}
			sum += children_rchar(child, depth + 1);
		}
		fclose(f);
	}
	if (tasks)
		closedir(tasks);
	return sum;
}

/* ---- stasis checkpoint ---- */

struct ckpt_watch {
	char job[NAME_MAX + 1];
	char dir[PATH_MAX];        /* the job's directory under the root */
	char local[PATH_MAX];      /* with staging on: the job's directory in this node's cache */
	unsigned long before;      /* the newest checkpoint before the request */
	unsigned long found;       /* the new checkpoint, once its directory appears */
	unsigned size;             /* ranks of an MPI job; 0: a process */
	unsigned done;             /* the most ranks done a sample saw */
	uint64_t bytes;            /* the most bytes a sample saw */
	struct cli_rate rate;
};

static int ckpt_sample(void *arg, char *line, size_t len)
{
	struct ckpt_watch *w = arg;
	char path[PATH_MAX + 32], name[32], size[32], rate[48];
	unsigned done = 0;
	uint64_t bytes = 0;

	if (!w->found)
		w->found = next_ckpt(w->dir, w->before);
	if (!w->found) {
		if (w->size)
			snprintf(line, len, "stasis: checkpoint %s: stopping %u ranks", w->job, w->size);
		else
			snprintf(line, len, "stasis: checkpoint %s: stopping the program", w->job);
		return 0;
	}
	snprintf(name, sizeof(name), "ckpt-%06lu", w->found);
	snprintf(path, sizeof(path), "%s/%s", w->dir, name);
	scan_ckpt(path, &done, &bytes);
	if (w->local[0]) {
		unsigned d2 = 0;
		uint64_t b2 = 0;

		/* the node's cache: the images of the ranks on this node, before
		 * they are copied under the root */
		snprintf(path, sizeof(path), "%s/%s", w->local, name);
		scan_ckpt(path, &d2, &b2);
		if (d2 > done)
			done = d2;
		if (b2 > bytes)
			bytes = b2;
	}
	/* readdir may miss a file renamed while it reads (an image's *.tmp
	 * becoming its name): a sample then sees less than the one before,
	 * and the line never goes backwards */
	if (done < w->done)
		done = w->done;
	if (bytes < w->bytes)
		bytes = w->bytes;
	w->done = done;
	w->bytes = bytes;
	cli_human_size(bytes, size, sizeof(size));
	cli_rate(&w->rate, bytes, rate, sizeof(rate));
	if (w->size)
		snprintf(line, len, "stasis: checkpoint %s: %u/%u ranks done, %s, %s", name,
			 done > w->size ? w->size : done, w->size, size, rate);
	else
		snprintf(line, len, "stasis: checkpoint %s: %s, %s", name, size, rate);
	return 0;
}

struct cli_progress *cli_progress_checkpoint(const char *root, const char *job)
{
	struct ckpt_watch *w;
	char reply[1024];
	unsigned registered = 0;

	if (!isatty(STDERR_FILENO) || !(w = calloc(1, sizeof(*w))))
		return NULL;
	snprintf(w->job, sizeof(w->job), "%s", job);
	snprintf(w->dir, sizeof(w->dir), "%s/%s", root, job);
	if (strcmp(cfg_str(CFG_STAGING), "on") == 0 && strcmp(cfg_str(CFG_LOCAL_DIR), root) != 0)
		snprintf(w->local, sizeof(w->local), "%s/%s", cfg_str(CFG_LOCAL_DIR), job);
	w->before = newest_ckpt(w->dir);
	/* how many ranks: asked before the checkpoint (the coordinator serves
	 * one client at a time, and none during a checkpoint) */
	if (coord_request(w->dir, "STATUS", 2000, reply, sizeof(reply)) == 0)
		status_ranks(reply, &registered, &w->size);
	err_clear();   /* the command's own messages only */
	return cli_progress_start(ckpt_sample, w, free);
}

/* ---- stasis restart ---- */

struct restart_watch {
	char dir[PATH_MAX];        /* the job's directory */
	char name[64];             /* the checkpoint */
	int mpi;                   /* an MPI job's checkpoint (it holds the launch command) */
	unsigned size;             /* its ranks, once known */
	unsigned up;               /* ranks registered with the coordinator (a process: 1 once
				      the coordinator serves clients again) */
	int fd;                    /* a connection waiting for the coordinator's greeting */
	uint64_t read;             /* most bytes the job's processes were seen to have read */
	struct cli_rate rate;
};

/* Connect to the job's coordinator without waiting (-1 if none listens yet:
 * the restart creates its socket, or a dead one's is still there). */
static int coord_connect(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, dfd = -1;

	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/coord.sock", dir) >=
	    sizeof(sa.sun_path)) {
		/* as the coordinator does: through a descriptor on the directory */
		dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			return -1;
		snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/coord.sock", dfd);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		fd = -1;
	}
	if (dfd >= 0)
		close(dfd);
	return fd;
}

/* One line from fd, waiting at most timeout_ms; 0 or -1. */
static int read_reply(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;

	while (n + 1 < len) {
		struct pollfd p = { fd, POLLIN, 0 };

		if (poll(&p, 1, timeout_ms) != 1 || read(fd, buf + n, 1) != 1)
			return -1;
		if (buf[n] == '\n') {
			buf[n] = 0;
			return 0;
		}
		n++;
	}
	return -1;
}

/* The coordinator greeted the connection: it serves clients, so the restore
 * is over (a process), or ranks are registering (an MPI job): ask STATUS on
 * this connection, as coord_request would. */
static void restart_greeted(struct restart_watch *w)
{
	char line[1024], path[PATH_MAX + 16], secret[64] = "";
	unsigned registered = 0, size = 0;
	ssize_t n;
	int sfd;

	if (read_reply(w->fd, line, sizeof(line), 1000) != 0 || strncmp(line, "STASIS-COORD ", 13))
		return;
	if (!w->mpi) {
		w->up = 1;   /* a process: restored and running */
		return;
	}
	snprintf(path, sizeof(path), "%s/coord.secret", w->dir);
	sfd = open(path, O_RDONLY | O_CLOEXEC);
	n = sfd >= 0 ? read(sfd, secret, sizeof(secret) - 1) : -1;
	if (sfd >= 0)
		close(sfd);
	if (n <= 0)
		return;
	secret[n] = 0;
	secret[strcspn(secret, "\n")] = 0;
	dprintf(w->fd, "HELLO %d %s\n", COORD_PROTOCOL_VERSION, secret);
	if (read_reply(w->fd, line, sizeof(line), 1000) != 0 || strcmp(line, "OK") != 0)
		return;
	dprintf(w->fd, "STATUS\n");
	if (read_reply(w->fd, line, sizeof(line), 1000) == 0 && strncmp(line, "OK ", 3) == 0 &&
	    status_ranks(line + 3, &registered, &size)) {
		w->up = registered;
		if (size)   /* known once the first rank registered */
			w->size = size;
	}
}

static int restart_sample(void *arg, char *line, size_t len)
{
	struct restart_watch *w = arg;
	char size[32], rate[48];
	uint64_t r;

	if (w->fd < 0)
		w->fd = coord_connect(w->dir);
	if (w->fd >= 0) {
		struct pollfd p = { w->fd, POLLIN, 0 };

		if (poll(&p, 1, 0) == 1) {
			restart_greeted(w);
			close(w->fd);
			w->fd = -1;
		}
	}
	if (w->mpi ? w->size && w->up >= w->size : w->up)
		return 1;   /* every rank runs again */
	r = children_rchar(getpid(), 0);
	if (r > w->read)
		w->read = r;
	cli_human_size(w->read, size, sizeof(size));
	cli_rate(&w->rate, w->read, rate, sizeof(rate));
	if (w->mpi && w->size)
		snprintf(line, len, "stasis: restart %s: %u/%u ranks up, %s read, %s", w->name, w->up,
			 w->size, size, rate);
	else if (w->mpi)
		snprintf(line, len, "stasis: restart %s: starting the ranks, %s read, %s", w->name,
			 size, rate);
	else
		snprintf(line, len, "stasis: restart %s: %s read, %s", w->name, size, rate);
	return 0;
}

static void restart_free(void *arg)
{
	struct restart_watch *w = arg;

	if (w->fd >= 0)
		close(w->fd);
	free(w);
}

struct cli_progress *cli_progress_restart(const char *root, const char *job, const char *ckpt)
{
	struct restart_watch *w;
	struct store *s = NULL;
	struct store_file_info *files = NULL;
	size_t count = 0;

	if (!isatty(STDERR_FILENO) || !(w = calloc(1, sizeof(*w))))
		return NULL;
	w->fd = -1;
	snprintf(w->dir, sizeof(w->dir), "%s/%s", root, job);
	if (store_open(cfg_str(CFG_TIER), root, job, &s) == 0) {
		if (ckpt)
			snprintf(w->name, sizeof(w->name), "%s", ckpt);
		else if (store_select(s, w->name, sizeof(w->name)) != 0)
			w->name[0] = 0;
		/* an MPI job's checkpoint holds its launch command and one image
		 * per rank (with staging, in the nodes' caches until copied) */
		if (w->name[0] && store_ckpt_files(s, w->name, &files, &count) == 0)
			for (size_t i = 0; i < count; i++) {
				if (strcmp(files[i].name, JOB_LAUNCH_FILE) == 0)
					w->mpi = 1;
				if (strncmp(files[i].name, "rank-", 5) == 0)
					w->size++;
			}
		free(files);
		store_close(&s);
	}
	if (!w->name[0]) {   /* the restart will say why in one line */
		free(w);
		return NULL;
	}
	w->rate.started = 1;
	w->rate.t0 = cli_now();
	err_clear();   /* the command's own messages only */
	return cli_progress_start(restart_sample, w, restart_free);
}
