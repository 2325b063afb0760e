/* lazy.c - lazy restore of a restored process (docs/transparent.md, "Lazy
 * restore"): `stasis restart` serves the large runs of anonymous memory of
 * the processes it restores, from their images, through the userfaultfd
 * each restorer made of its address space (pimg/pimg_lazy.h does the
 * serving; the split process's lower half uses the same for its upper
 * half). The program runs before those pages are in; a checkpoint of it
 * waits until they are (proc_lazy_wait). */
#include "proc/proc.h"
#include "proc/proc_internal.h"

#include "common/err.h"
#include "common/log.h"
#include "image/image.h"
#include "pimg/pimg_lazy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* one process being served */
struct served {
	struct pimg_lazy *z;
	pid_t pid;                  /* as the program sees it */
	pid_t host_pid;             /* as we see it (0: unknown) */
	struct served *next;
};

/* the processes of every restore of this coordinator not waited for yet
 * (a tree's restore streams run at once) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct served *all;

int proc_lazy_wanted(void)
{
	const char *v = getenv("STASIS_RESTORE_LAZY");

	return v && !strcmp(v, "1");
}

static void fatal(void *arg, const char *what)
{
	struct served *s = arg;

	/* its missing pages would never come: it ends now, and says why */
	fprintf(stderr, "stasis: restart: process %d: lazy restore: %s; the restarted process "
		"cannot go on\n", (int)s->pid, what);
	if (s->host_pid > 0)
		kill(s->host_pid, SIGKILL);
}

static void done(void *arg, const struct pimg_lazy_stats *st)
{
	struct served *s = arg;

	log_info("process %d: lazy restore done, %llu MiB in %.3f s, %llu touched pages served "
		 "first", (int)s->pid, (unsigned long long)(st->bytes >> 20), st->seconds,
		 (unsigned long long)st->served);
}

static const struct pimg_lazy_ops ops = { fatal, done };

/* The restorer's answer: its userfaultfd (or -errno) and its pid as we
 * see it. */
static int receive(int fd, pid_t *host_pid)
{
	union {
		char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	int32_t err = 0;
	struct iovec iov = { &err, sizeof(err) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	int uffd = -1;
	ssize_t n;

	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return -EPIPE;   /* the restorer is gone and said why */
	if (n < 0)
		return err_set(-errno, "the restorer did not hand over its userfaultfd: %s",
			       strerror(errno));
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET)
			continue;
		if (c->cmsg_type == SCM_RIGHTS)
			memcpy(&uffd, CMSG_DATA(c), sizeof(uffd));
		else if (c->cmsg_type == SCM_CREDENTIALS) {
			struct ucred cr;

			memcpy(&cr, CMSG_DATA(c), sizeof(cr));
			*host_pid = cr.pid;
		}
	}
	if (uffd < 0)
		return err_set(err < 0 ? err : -EPROTO, "userfaultfd: %s",
			       strerror(err < 0 ? -err : EPROTO));
	return uffd;
}

static int start(int fd, pid_t pid, const char *image, const struct pimg_lazy_piece *v, unsigned n)
{
	struct img_reader *img = NULL;
	struct served *s = calloc(1, sizeof(*s));
	sigset_t every, old;
	int uffd, ret;

	if (!s)
		return -ENOMEM;
	s->pid = pid;
	uffd = receive(fd, &s->host_pid);
	if (uffd < 0) {
		free(s);
		return uffd;
	}
	/* a reader of its own: the stream is being written from the other */
	ret = img_open(image, &img);
	if (ret) {
		close(uffd);
		free(s);
		return ret;
	}
	/* the coordinator's signals stay its main thread's */
	sigfillset(&every);
	pthread_sigmask(SIG_BLOCK, &every, &old);
	ret = pimg_lazy_start(uffd, img, v, n, 1, &ops, s, &s->z);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		img_close(&img);
		free(s);
		return ret;
	}
	pthread_mutex_lock(&lock);
	s->next = all;
	all = s;
	pthread_mutex_unlock(&lock);
	return 0;
}

int proc_lazy_serve(int fd, pid_t pid, const char *image, const struct pimg_lazy_piece *v, unsigned n)
{
	char go = 1;
	int ret = start(fd, pid, image, v, n);

	if (ret && ret != -EPIPE)
		fprintf(stderr, "stasis: restart: process %d: no lazy restore (%s); reading its "
			"memory first\n", (int)pid, err_msg());
	/* the restorer goes on either way: the stream brings what is not served */
	if (write(fd, &go, 1) != 1 && !ret)
		ret = err_set(-EPIPE, "the restorer is gone");
	close(fd);
	return ret;
}

void proc_lazy_wait(void)
{
	for (;;) {
		struct served *s = NULL;

		pthread_mutex_lock(&lock);
		s = all;
		if (s)
			all = s->next;
		pthread_mutex_unlock(&lock);
		if (!s)
			return;
		pimg_lazy_wait(&s->z);
		free(s);
	}
}
