/* progress.c - the progress thread: upgrades of established checkpoints.
 *
 * stasis_checkpoint returns once every rank's image is in its node's cache
 * and the checkpoint is established at SINGLE. What its level adds (partner
 * copies, rs parity, the copy to the global tier) is an upgrade, queued here
 * and run by one thread per rank, in the order the checkpoints were taken,
 * over the ranks' own TCP link (link.c): the progress threads of all ranks
 * run the same upgrades in the same order, so they pair up like the
 * application's threads do over MPI. Each upgrade commits in the store
 * (ANNEX and LEVEL records) on its own, without waiting for an API call.
 *
 * The thread runs at SCHED_IDLE: it gets the cycles the application leaves
 * idle (waits in MPI, I/O) and next to nothing while the application
 * computes. When the application has to wait for it (a new checkpoint while
 * the previous upgrade still runs, stasis_recover, stasis_finalize), it is
 * raised to normal priority for that wait: the application is idle then.
 */
#include "api/api.h"
#include "common/config.h"
#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;            /* queue changed, or stop */
	pthread_t thread;
	int running;
	int stop;
	int idle_prio;                  /* the thread runs at SCHED_IDLE when not boosted */
	pid_t tid;                      /* the thread's id, once it runs */
	int boosted;                    /* waiters raising it now */
	struct api_upgrade *head, *tail;
	unsigned pending;               /* queued or running */
	int error;                      /* last failed upgrade not yet reported */
	char msg[API_MSG_LEN];
	struct api_comm link;
} pg = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static _Thread_local const struct api_comm *thread_comm;
static _Thread_local struct api_comm job_comm;

const struct api_comm *api_cur(void)
{
	if (thread_comm)
		return thread_comm;
	job_comm.ops = api.comm;
	job_comm.h = api.ch;
	return &job_comm;
}

/* Called with pg.lock held. By thread id: glibc's pthread scheduling calls
 * refuse SCHED_IDLE. */
static void set_priority(int idle)
{
	struct sched_param sp = { 0 };

	if (!pg.running || !pg.idle_prio || pg.tid <= 0)
		return;
	if (sched_setscheduler(pg.tid, idle ? SCHED_IDLE : SCHED_OTHER, &sp) != 0)
		log_debug("progress thread: cannot switch to %s priority: %s", idle ? "idle" : "normal",
			  strerror(errno));
}

static void *progress_main(void *arg)
{
	struct sched_param sp = { 0 };

	(void)arg;
	thread_comm = pg.link.ops ? &pg.link : NULL;
	pthread_mutex_lock(&pg.lock);
	pg.tid = gettid();
	/* idle from the start: it never competes with the application, not
	 * even before its first upgrade */
	if (pg.idle_prio && !pg.boosted && sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
		log_info("progress thread: SCHED_IDLE refused (%s); running at normal priority",
			 strerror(errno));
		pg.idle_prio = 0;
	}
	pthread_cond_broadcast(&pg.cond);
	for (;;) {
		struct api_upgrade *j;
		int ret;

		while (!pg.head && !pg.stop)
			pthread_cond_wait(&pg.cond, &pg.lock);
		if (!pg.head)
			break;
		j = pg.head;
		pthread_mutex_unlock(&pg.lock);

		ret = api_upgrade_run(j);

		pthread_mutex_lock(&pg.lock);
		if (ret) {
			pg.error = ret;
			snprintf(pg.msg, sizeof(pg.msg), "%s", err_msg());
		}
		pg.head = j->next;
		if (!pg.head)
			pg.tail = NULL;
		pg.pending--;
		free(j->sizes);
		free(j);
		pthread_cond_broadcast(&pg.cond);
	}
	pthread_mutex_unlock(&pg.lock);
	return NULL;
}

int api_progress_start(void)
{
	int ret = 0;

	pg.stop = 0;
	pg.error = 0;
	pg.tid = 0;
	pg.link.ops = NULL;
	pg.link.h = NULL;
	if (api.size > 1) {
		ret = api_link_open(&pg.link.h);
		if (ret)
			return ret;
		pg.link.ops = &api_comm_link;
	}
	pg.idle_prio = strcmp(cfg_str(CFG_PROGRESS_PRIORITY), "idle") == 0;
	ret = pthread_create(&pg.thread, NULL, progress_main, NULL);
	if (ret) {
		if (pg.link.ops)
			pg.link.ops->free(pg.link.h);
		pg.link.ops = NULL;
		return err_set(-ret, "rank %d: cannot start the progress thread: %s", api.rank,
			       strerror(ret));
	}
	pthread_mutex_lock(&pg.lock);
	pg.running = 1;
	while (!pg.tid)
		pthread_cond_wait(&pg.cond, &pg.lock);  /* its priority is set */
	pthread_mutex_unlock(&pg.lock);
	return 0;
}

void api_progress_queue(struct api_upgrade *u)
{
	u->next = NULL;
	pthread_mutex_lock(&pg.lock);
	if (pg.tail)
		pg.tail->next = u;
	else
		pg.head = u;
	pg.tail = u;
	pg.pending++;
	if (pg.boosted)
		set_priority(0);
	pthread_cond_broadcast(&pg.cond);
	pthread_mutex_unlock(&pg.lock);
}

int api_progress_wait(unsigned pending, int report)
{
	int ret = 0;

	pthread_mutex_lock(&pg.lock);
	if (pg.pending > pending) {
		log_debug("rank %d: waiting for %u checkpoint upgrade(s)", api.rank, pg.pending - pending);
		if (pg.boosted++ == 0)
			set_priority(0);
		while (pg.pending > pending)
			pthread_cond_wait(&pg.cond, &pg.lock);
		if (--pg.boosted == 0)
			set_priority(1);
	}
	if (report && pg.error) {
		ret = err_set(pg.error, "%s", pg.msg);
		pg.error = 0;
	}
	pthread_mutex_unlock(&pg.lock);
	return ret;
}

void api_progress_stop(void)
{
	if (!pg.running)
		return;
	api_progress_wait(0, 0);
	pthread_mutex_lock(&pg.lock);
	pg.stop = 1;
	pthread_cond_broadcast(&pg.cond);
	pthread_mutex_unlock(&pg.lock);
	pthread_join(pg.thread, NULL);
	pg.running = 0;
	if (pg.link.ops)
		pg.link.ops->free(pg.link.h);
	pg.link.ops = NULL;
	pg.link.h = NULL;
}
