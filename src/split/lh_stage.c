/* lh_stage.c - node-local staging of a rank's image (docs/split.md,
 * "Node-local staging").
 *
 * With staging on (STASIS_STAGE_DIR: the job's local_dir), a rank writes
 * its image into its node's local directory, through a store of tier
 * "local" there (<local_dir>/<job>/<checkpoint>/rank-NNNNN.img, committed
 * like any store file: fsync, rename, FILE record in the node's index),
 * and the program resumes once every rank's is durable: the checkpoint is
 * established at level local. Then a mover thread of the rank, at idle
 * CPU and I/O priority, verifies the image chunk by chunk and copies it
 * into the checkpoint in the global tier (ANNEX records: the checkpoint
 * was sealed without it), at most STASIS_STAGE_COPIES copies at once on
 * the node for the job (one lock file a slot), and says COPIED to the
 * coordinator, which records level global once every rank did. The node
 * keeps the last cache_keep images of the rank. A restart reads the
 * node-local copy when the node still has it, the global one otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"
#include "lh.h"
#include "lh_ckpt.h"
#include "lh_stage.h"
#include "split_format.h"
#include "store/store.h"

#define QUEUE 8
#define COPY_BUF (4u << 20)
#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t th;
	int started;
	char queue[QUEUE][64];
	unsigned head, tail;
	struct store *local, *global;
	int rank;
	void (*say)(const char *fmt, ...);
} st = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* The job's name in the node-local directory: <job>.<stage id>, the id
 * kept in the global job directory (job.c), so that a new job of the same
 * name in another global directory, or after it was removed, never meets
 * an old one's images (same checkpoint names) */
static const char *local_job(void)
{
	static char name[256];

	if (!name[0])
		snprintf(name, sizeof(name), "%s.%s", getenv("STASIS_JOB_NAME"),
			 getenv("STASIS_STAGE_ID") ? getenv("STASIS_STAGE_ID") : "0");
	return name;
}

static const char *stage_dir(void)
{
	const char *d = getenv("STASIS_STAGE_DIR");

	return d && *d ? d : NULL;
}

int lh_stage_on(void)
{
	return stage_dir() != NULL;
}

struct store *lh_stage_store(void)
{
	if (!st.local && stage_dir() &&
	    store_open("local", stage_dir(), local_job(), &st.local) != 0)
		st.local = NULL;
	return st.local;
}

/* <local_dir>/<job>/<name>/rank-NNNNN.img */
static int local_path(const char *name, int rank, char *out, size_t len)
{
	char file[64];
	int n;

	snprintf(file, sizeof(file), SPLIT_IMAGE_FMT, rank);
	n = snprintf(out, len, "%s/%s/%s/%s", stage_dir(), local_job(), name, file);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* Only the node's last cache_keep images of this rank stay (the newest
 * names: ckpt-NNNNNN sort by age) */
static void keep_last(int rank, unsigned keep)
{
	char dir[PATH_MAX], path[PATH_MAX + 512], file[64];
	char (*names)[64] = NULL;
	unsigned n = 0, cap = 0;
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/%s", stage_dir(), local_job());
	snprintf(file, sizeof(file), SPLIT_IMAGE_FMT, rank);
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "ckpt-", 5) != 0 || strlen(e->d_name) >= 64)
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", dir, e->d_name, file);
		if (access(path, F_OK) != 0)
			continue;
		if (n == cap) {
			void *v = realloc(names, (cap ? cap * 2 : 16) * 64);

			if (!v)
				break;
			names = v;
			cap = cap ? cap * 2 : 16;
		}
		memcpy(names[n++], e->d_name, strlen(e->d_name) + 1);   /* < 64: checked above */
	}
	closedir(d);
	for (unsigned i = 0; i < n; i++) {
		unsigned newer = 0;

		for (unsigned j = 0; j < n; j++)
			newer += strcmp(names[j], names[i]) > 0;
		if (newer < keep)
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", dir, names[i], file);
		unlink(path);
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		rmdir(path);   /* once the node's last rank took its image out */
	}
	free(names);
}

void lh_stage_written(const char *name, int rank)
{
	(void)name;
	keep_last(rank, getenv("STASIS_CACHE_KEEP") ? (unsigned)atoi(getenv("STASIS_CACHE_KEEP")) : 2);
}

/* One of the node's copy slots for the job: a lock file held while copying */
static int take_slot(void)
{
	unsigned slots = getenv("STASIS_STAGE_COPIES") ? (unsigned)atoi(getenv("STASIS_STAGE_COPIES")) : 1;
	char path[PATH_MAX];

	if (slots == 0)
		slots = 1;
	for (;;) {
		for (unsigned k = 0; k < slots; k++) {
			int fd;

			snprintf(path, sizeof(path), "%s/%s/.copy-slot-%u", stage_dir(),
				 local_job(), k);
			fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
			if (fd < 0)
				return -1;   /* no slots to be had: copy anyway */
			if (flock(fd, LOCK_EX | LOCK_NB) == 0)
				return fd;
			close(fd);
		}
		usleep(50 * 1000);
	}
}

/* This rank's image of name into the global tier: checked chunk by chunk
 * first (a damaged local copy is never copied), then copied as it is */
static int copy_one(const char *name)
{
	char path[PATH_MAX], file[64];
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	struct img_reader *img = NULL;
	char *buf = NULL;
	int fd = -1, slot, ret;

	snprintf(file, sizeof(file), SPLIT_IMAGE_FMT, st.rank);
	ret = local_path(name, st.rank, path, sizeof(path));
	slot = take_slot();
	ret = ret ? ret : img_open(path, &img);
	ret = ret ? ret : img_verify(img);
	img_close(&img);
	ret = ret ? ret : store_ckpt_annex(st.global, name, &ck);
	ret = ret ? ret : store_file_create(ck, file, &f);
	if (!ret && ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || !(buf = malloc(COPY_BUF))))
		ret = err_set(-errno, "cannot read %s: %s", path, strerror(errno));
	while (!ret) {
		ssize_t n = read(fd, buf, COPY_BUF);

		if (n < 0)
			ret = err_set(-errno, "cannot read %s: %s", path, strerror(errno));
		if (n <= 0)
			break;
		ret = FAULT(SPLIT_STAGE_COPY);
		ret = ret ? err_set(ret, "fault point split.stage.copy") : store_file_write(f, buf, (size_t)n);
	}
	ret = ret ? ret : store_file_commit(f);
	if (fd >= 0)
		close(fd);
	free(buf);
	store_file_free(&f);
	store_ckpt_free(&ck);
	if (slot >= 0)
		close(slot);
	return ret;
}

static void *mover(void *arg)
{
	struct sched_param sp = { 0 };

	(void)arg;
	/* the program's CPU and I/O come first */
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, (int)syscall(SYS_gettid),
		IOPRIO_CLASS_IDLE << 13);
	for (;;) {
		char name[64];

		pthread_mutex_lock(&st.lock);
		while (st.head == st.tail)
			pthread_cond_wait(&st.cond, &st.lock);
		snprintf(name, sizeof(name), "%s", st.queue[st.head % QUEUE]);
		st.head++;
		pthread_mutex_unlock(&st.lock);
		err_clear();
		if (copy_one(name) == 0)
			st.say("COPIED %s", name);
		else
			lh_log(LOG_WARN, "rank %d: %s stays at level local: %s", st.rank, name, err_msg());
	}
	return NULL;
}

void lh_stage_copy(const char *name, struct store *global, int rank,
		   void (*say)(const char *fmt, ...))
{
	sigset_t all, old;

	pthread_mutex_lock(&st.lock);
	st.global = global;
	st.rank = rank;
	st.say = say;
	if (!st.started) {
		/* a lower-half thread: every signal but the checkpoint's blocked */
		sigfillset(&all);
		sigdelset(&all, LH_CKPT_SIGNAL);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		st.started = pthread_create(&st.th, NULL, mover, NULL) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (st.tail - st.head == QUEUE)
		st.head++;   /* the oldest waits no longer: it stays at level local */
	snprintf(st.queue[st.tail % QUEUE], sizeof(st.queue[0]), "%s", name);
	st.tail++;
	pthread_cond_signal(&st.cond);
	pthread_mutex_unlock(&st.lock);
}

int lh_stage_image(const char *restore_dir, int rank, char *out, size_t len)
{
	const char *slash = strrchr(restore_dir, '/');
	const char *name = slash ? slash + 1 : restore_dir;
	char global[PATH_MAX];

	snprintf(global, sizeof(global), "%s/" SPLIT_IMAGE_FMT, restore_dir, rank);
	if (stage_dir() && local_path(name, rank, out, len) == 0 && access(out, R_OK) == 0) {
		lh_log(LOG_INFO, "rank %d reads its node-local copy %s", rank, out);
		return 0;
	}
	if (access(global, R_OK) != 0 && stage_dir()) {
		char host[64] = "?";

		gethostname(host, sizeof(host) - 1);
		return err_set(-ENOENT, "rank %d: no copy of its image of %s: not in %s's local "
			       "directory (%s/%s/%s) and not (yet) in the global tier (%s)", rank,
			       name, host, stage_dir(), local_job(), name, global);
	}
	snprintf(out, len, "%s", global);
	if (stage_dir())
		lh_log(LOG_INFO, "rank %d reads the global copy %s", rank, out);
	return 0;
}
