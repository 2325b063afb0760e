/* progress.c - the progress engine: redundancy work on a thread of its own.
 *
 * libstasis's stasis_checkpoint returns once every rank's image is in its
 * node's cache and the checkpoint is established at SINGLE. What its level
 * adds (partner copies, rs parity, the copy to the global tier) is a task,
 * queued here and run by one thread per member, in the order queued, over
 * the thread's own communicator (the TCP link, link.c): the progress threads
 * of all members run the same tasks in the same order, so they pair up like
 * the application's threads do over MPI. Each upgrade commits in the store
 * (ANNEX and LEVEL records) on its own, without waiting for the caller.
 *
 * The thread runs at SCHED_IDLE: it gets the cycles the application leaves
 * idle (waits in MPI, I/O) and next to nothing while the application
 * computes. When the caller has to wait for it (a new checkpoint while the
 * previous upgrade still runs, a recovery, the end of the job), it is raised
 * to normal priority for that wait: the caller is idle then.
 */
#include "redundancy/redundancy.h"
#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct redun_progress {
	pthread_mutex_t lock;
	pthread_cond_t cond;            /* queue changed, or stop */
	pthread_t thread;
	int stop;
	int idle_prio;                  /* the thread runs at SCHED_IDLE when not boosted */
	pid_t tid;                      /* the thread's id, once it runs */
	int boosted;                    /* waiters raising it now */
	struct redun_task *head, *tail;
	unsigned pending;               /* queued or running */
	int error;                      /* last failed task not yet reported */
	char msg[REDUN_MSG_LEN];
	struct redun_comm comm;
};

/* Called with p->lock held. By thread id: glibc's pthread scheduling calls
 * refuse SCHED_IDLE. */
static void set_priority(struct redun_progress *p, int idle)
{
	struct sched_param sp = { 0 };

	if (!p->idle_prio || p->tid <= 0)
		return;
	if (sched_setscheduler(p->tid, idle ? SCHED_IDLE : SCHED_OTHER, &sp) != 0)
		log_debug("progress thread: cannot switch to %s priority: %s", idle ? "idle" : "normal",
			  strerror(errno));
}

static void *progress_main(void *arg)
{
	struct redun_progress *p = arg;
	struct sched_param sp = { 0 };

	pthread_mutex_lock(&p->lock);
	p->tid = gettid();
	/* idle from the start: it never competes with the application, not
	 * even before its first task */
	if (p->idle_prio && !p->boosted && sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
		log_info("progress thread: SCHED_IDLE refused (%s); running at normal priority",
			 strerror(errno));
		p->idle_prio = 0;
	}
	pthread_cond_broadcast(&p->cond);
	for (;;) {
		struct redun_task *t;
		int ret;

		while (!p->head && !p->stop)
			pthread_cond_wait(&p->cond, &p->lock);
		if (!p->head)
			break;
		t = p->head;
		pthread_mutex_unlock(&p->lock);

		ret = t->run(t, &p->comm);

		pthread_mutex_lock(&p->lock);
		if (ret) {
			p->error = ret;
			snprintf(p->msg, sizeof(p->msg), "%s", err_msg());
		}
		p->head = t->next;
		if (!p->head)
			p->tail = NULL;
		p->pending--;
		t->free(t);
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int redun_progress_start(struct redun_comm *comm, int idle, struct redun_progress **out)
{
	struct redun_progress *p = calloc(1, sizeof(*p));
	int ret;

	*out = NULL;
	if (!p) {
		redun_comm_close(comm);
		return err_set(-ENOMEM, "out of memory");
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->comm = *comm;
	comm->ops = NULL;
	comm->h = NULL;
	p->idle_prio = idle;
	ret = pthread_create(&p->thread, NULL, progress_main, p);
	if (ret) {
		redun_comm_close(&p->comm);
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->cond);
		free(p);
		return err_set(-ret, "cannot start the progress thread: %s", strerror(ret));
	}
	pthread_mutex_lock(&p->lock);
	while (!p->tid)
		pthread_cond_wait(&p->cond, &p->lock);  /* its priority is set */
	pthread_mutex_unlock(&p->lock);
	*out = p;
	return 0;
}

void redun_progress_queue(struct redun_progress *p, struct redun_task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->next = t;
	else
		p->head = t;
	p->tail = t;
	p->pending++;
	if (p->boosted)
		set_priority(p, 0);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

int redun_progress_wait(struct redun_progress *p, unsigned pending, int report)
{
	int ret = 0;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	if (p->pending > pending) {
		log_debug("waiting for %u redundancy task(s)", p->pending - pending);
		if (p->boosted++ == 0)
			set_priority(p, 0);
		while (p->pending > pending)
			pthread_cond_wait(&p->cond, &p->lock);
		if (--p->boosted == 0)
			set_priority(p, 1);
	}
	if (report && p->error) {
		ret = err_set(p->error, "%s", p->msg);
		p->error = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

void redun_progress_stop(struct redun_progress **pp)
{
	struct redun_progress *p = pp ? *pp : NULL;

	if (!p)
		return;
	redun_progress_wait(p, 0, 0);
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	redun_comm_close(&p->comm);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p);
	*pp = NULL;
}
