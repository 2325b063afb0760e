/* lh_standby.c - ranks launched ahead of a restart (lh_standby.h).
 *
 * Every rank is past MPI_Init when an idle barrier over lh_world ends;
 * rank 0 then says so in the job's directory and looks every 10 ms for the
 * coordinator's word, which it passes on to the others with a
 * non-blocking broadcast they wait for without spinning (a blocking one
 * would busy-poll a CPU per rank for as long as the stand-by lasts), its
 * tests 200 us apart at first, backing off to 10 ms (lh_wait_idle's
 * 200 us throughout cost 4% of a CPU per rank). The checkpoint's
 * directory is all the word holds: the restart then goes on as one whose
 * image is read after MPI_Init (lh_main.c, restart()).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coord/jobenv.h"
#include "lh.h"
#include "lh_spare.h"
#include "lh_standby.h"

#define STANDBY_POLL_NS 10000000   /* rank 0's look for the word; the longest nap */

static char restore_dir[PATH_MAX];

static void say_ready(const char *jdir, int size)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], line[32];
	int fd, n = snprintf(line, sizeof(line), "%d\n", size);

	snprintf(path, sizeof(path), "%s/" JOBENV_STANDBY_READY_FILE, jdir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) != 0 || rename(tmp, path) != 0)
		lh_die("stand-by: cannot write %s: %s", path, strerror(errno));
}

/* Until req is done: MPI_Test with naps from 200 us doubling to
 * STANDBY_POLL_NS (the wait may last hours; the restore's word adds at
 * most a nap per level of the broadcast's tree) */
static int standby_test(MPI_Request *req)
{
	struct timespec nap = { 0, 200000 };
	int done = 0, ret;

	while ((ret = MPI_Test(req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done) {
		nanosleep(&nap, NULL);
		if (nap.tv_nsec < STANDBY_POLL_NS)
			nap.tv_nsec = nap.tv_nsec * 2 < STANDBY_POLL_NS ? nap.tv_nsec * 2 : STANDBY_POLL_NS;
	}
	return ret;
}

/* Rank 0: the coordinator's word, once it is there */
static void await_go(const char *jdir)
{
	const struct timespec nap = { 0, STANDBY_POLL_NS };
	char path[PATH_MAX];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/" JOBENV_STANDBY_GO_FILE, jdir);
	while ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		if (errno != ENOENT)
			lh_die("stand-by: cannot read %s: %s", path, strerror(errno));
		nanosleep(&nap, NULL);
	}
	n = read(fd, restore_dir, sizeof(restore_dir) - 1);
	close(fd);
	unlink(path);
	if (n <= 1 || restore_dir[n - 1] != '\n')
		lh_die("stand-by: %s is not a checkpoint's directory and a newline", path);
	restore_dir[n - 1] = 0;
}

const char *lh_standby_wait(void)
{
	const char *on = getenv(JOBENV_STANDBY), *jdir = getenv(JOBENV_JOB_DIR);
	MPI_Request req;
	int rank = 0, size = 0;

	if (!on || strcmp(on, "1") != 0)
		return NULL;
	if (!jdir || !*jdir)
		lh_die("%s=1 without STASIS_JOB_DIR: start stand-by ranks with `stasis standby`",
		       JOBENV_STANDBY);
	MPI_Comm_rank(lh_world, &rank);
	MPI_Comm_size(lh_world, &size);
	if (MPI_Ibarrier(lh_world, &req) != MPI_SUCCESS || standby_test(&req) != MPI_SUCCESS)
		lh_die("stand-by rank %d: its first barrier failed", rank);
	if (rank == 0) {
		say_ready(jdir, size);
		lh_log(LOG_INFO, "stand-by: %d ranks past MPI_Init wait for a checkpoint", size);
		await_go(jdir);
	}
	if (MPI_Ibcast(restore_dir, (int)sizeof(restore_dir), MPI_CHAR, 0, lh_world, &req) !=
	    MPI_SUCCESS || standby_test(&req) != MPI_SUCCESS)
		lh_die("stand-by rank %d: the checkpoint's name did not come", rank);
	lh_log(LOG_INFO, "stand-by rank %d restores %s", rank, restore_dir);
	return restore_dir;
}
