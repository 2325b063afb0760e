/* lh_stage.c - node-local staging of a rank's image (docs/split.md,
 * "Node-local staging").
 *
 * With staging on (STASIS_STAGE_DIR: the job's local_dir), a rank writes
 * its image into its node's local directory, through a store of tier
 * "local" there (<local_dir>/<job>/<checkpoint>/rank-NNNNN.img, committed
 * like any store file: fsync, rename, FILE record in the node's index),
 * and the program resumes once every rank's is durable: the checkpoint is
 * established at level local. Then the node's agent (src/node) copies
 * it into the checkpoint in the global tier. The node keeps its last
 * cache_keep established checkpoints (the agent retires older ones at each
 * verdict, node_level_verdict). A restart reads the node-local copy when
 * the node still has it, the global one otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "coord/job.h"
#include "coord/jobenv.h"
#include "common/log.h"
#include "image/image.h"
#include "lh.h"
#include "lh_ckpt.h"
#include "lh_stage.h"
#include "node/node.h"
#include "node/node_level.h"
#include "split_format.h"
#include "store/store.h"

static struct {
	struct store *local;
} st;

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

/* Spare files a node's cache keeps at most (store_file_retire, by the
 * node agent: node_level_verdict): the files of about one checkpoint of
 * the node's ranks in practice, since each checkpoint takes as many as it
 * retires. The rank's image is written over one. */
#define STAGE_SPARES_MAX 4096

struct store *lh_stage_store(void)
{
	const char *recycle = getenv(JOBENV_RECYCLE);

	if (!st.local && stage_dir() &&
	    store_open("local", stage_dir(), local_job(), &st.local) != 0)
		st.local = NULL;
	if (st.local)
		store_set_recycle(st.local, recycle && !strcmp(recycle, "off") ? 0 : STAGE_SPARES_MAX);
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

int lh_stage_path(const char *name, int rank, char *out, size_t len)
{
	if (!stage_dir())
		return err_set(-EINVAL, "rank %d: no node-local directory (staging is off)", rank);
	return local_path(name, rank, out, len) ? err_set(-ENAMETOOLONG, "rank %d: the path of its "
							  "node-local image is too long", rank) : 0;
}

/* Tell `stasis restart` that this rank has no copy of checkpoint name
 * (coord/job.h, JOB_MISSING_FILE): it tries an older one at level global */
static void missing(const char *name, int rank, const char *host)
{
	const char *dir = getenv("STASIS_JOB_DIR");
	char path[PATH_MAX], line[256];
	int fd, n;

	if (!dir || snprintf(path, sizeof(path), "%s/" JOB_MISSING_FILE, dir) >= (int)sizeof(path))
		return;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%s %d %s\n", name, rank, host);
	if (write(fd, line, (size_t)n) != n) {
		/* the restart then fails without trying an older checkpoint */
	}
	close(fd);
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
		missing(name, rank, host);
		return err_set(-ENOENT, "rank %d: no copy of its image of %s: not in %s's local "
			       "directory (%s/%s/%s) and not (yet) in the global tier (%s)", rank,
			       name, host, stage_dir(), local_job(), name, global);
	}
	snprintf(out, len, "%s", global);
	if (stage_dir())
		lh_log(LOG_INFO, "rank %d reads the global copy %s", rank, out);
	return 0;
}

void lh_stage_drop_cut(const char *name, int rank, const char *path)
{
	char local[PATH_MAX], *slash;

	if (!stage_dir() || local_path(name, rank, local, sizeof(local)) != 0 ||
	    strcmp(local, path) != 0)
		return;
	/* the restore holds the file open where it reads lazily */
	if (unlink(local) != 0) {
		lh_log(LOG_WARN, "rank %d: cannot remove the move's image %s: %s", rank, local,
		       strerror(errno));
		return;
	}
	slash = strrchr(local, '/');
	*slash = 0;
	rmdir(local);   /* fails while it holds the rank's other files */
}

/* ---- a restart after a node's loss (docs/levels.md) ---- */

int lh_stage_has_local(const char *restore_dir, int rank)
{
	const char *slash = strrchr(restore_dir, '/');
	char path[PATH_MAX];

	return stage_dir() && local_path(slash ? slash + 1 : restore_dir, rank, path,
					 sizeof(path)) == 0 && access(path, R_OK) == 0;
}

int lh_stage_leveled(const char *restore_dir)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/" NODE_LAYOUT_FILE, restore_dir);
	return stage_dir() && access(path, R_OK) == 0;
}

int lh_stage_rebuild(const char *restore_dir, int rank, int size, int have_own, char *out,
		     size_t len)
{
	const char *slash = strrchr(restore_dir, '/'), *dir = getenv("STASIS_JOB_DIR");
	char secret[64] = "", path[PATH_MAX], line[PATH_MAX + 600];
	size_t n = 0;
	int fd, sfd, ret;

	snprintf(path, sizeof(path), "%s/coord.secret", dir ? dir : ".");
	sfd = open(path, O_RDONLY | O_CLOEXEC);
	if (sfd < 0 || read(sfd, secret, 32) != 32) {
		if (sfd >= 0)
			close(sfd);
		return err_set(-EACCES, "cannot read the job's secret %s", path);
	}
	close(sfd);
	secret[32] = 0;
	ret = node_agent_connect(&fd);
	if (ret)
		return ret;
	n = (size_t)snprintf(line, sizeof(line), "RECOVER %d %s %d %d %s %d\n", NODE_PROTOCOL_VERSION,
			     secret, rank, size, slash ? slash + 1 : restore_dir, have_own);
	if (write(fd, line, n) != (ssize_t)n) {
		close(fd);
		return err_set(-EPIPE, "the node agent closed its connection");
	}
	/* the agents take as long as the copies take; their own timeouts end it */
	for (n = 0; n + 1 < sizeof(line);) {
		ssize_t r = read(fd, line + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	close(fd);
	if (!strncmp(line, "OK ", 3)) {
		snprintf(out, len, "%s", line + 3);
		lh_log(LOG_INFO, "rank %d reads %s", rank, out);
		return 0;
	}
	snprintf(out, len, "%s", strncmp(line, "ERR ", 4) ? "the node agent closed its connection" :
		 line + 4);
	return err_set(-ENODATA, "%s", out);
}
