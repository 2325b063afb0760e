/* tree.c - the processes of a job, one agent channel each
 * (docs/transparent.md, "Process trees").
 *
 * The first process's channel comes from `stasis run` (or `stasis
 * restart`); every other one arrives on its parent's channel as a CHILD
 * record carrying the coordinator's end of a new socketpair (SCM_RIGHTS),
 * sent by the parent's agent just before it forks. A checkpoint is two
 * phases: CHECKPOINT to every process, each parks its threads and answers
 * PARKED with its children; once every process of the tree is parked (and
 * every running child is one of them) DUMP to each, one image per process;
 * then RESUME (or EXIT) to all.
 */
#include "proc/proc.h"
#include "proc/proc_internal.h"
#include "common/config.h"
#include "common/err.h"
#include "image/image.h"
#include "proc/written.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TREE_SILENCE_MS 120000

struct member {
	int fd;
	pid_t pid;                  /* as the program sees it; 0 before HELLO */
	pid_t host_pid;             /* as we see it (SCM_CREDENTIALS); 0 unknown */
	uint32_t version;
	int parked;                 /* PARKED (or ERROR) this checkpoint */
	struct proc_parked self;
	struct proc_kid *kids;
	struct proc_dump_info info;
};

struct proc_tree {
	struct member *m;
	size_t n, cap;
	int written;                /* the tree's list of written files (its log), or -1 */
};

static void member_clear(struct member *m)
{
	free(m->kids);
	m->kids = NULL;
	free(m->info.fds);
	memset(&m->info, 0, sizeof(m->info));
	m->parked = 0;
}

static int add_member(struct proc_tree *t, int fd, pid_t pid, uint32_t version)
{
	int one = 1;

	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 8;
		struct member *p = realloc(t->m, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		t->m = p;
		t->cap = cap;
	}
	/* the sender's pid, as we see it, comes with each record */
	setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	memset(&t->m[t->n], 0, sizeof(t->m[t->n]));
	t->m[t->n].fd = fd;
	t->m[t->n].pid = pid;
	t->m[t->n].version = version;
	t->n++;
	return 0;
}

static void drop_member(struct proc_tree *t, size_t i)
{
	close(t->m[i].fd);
	member_clear(&t->m[i]);
	memmove(&t->m[i], &t->m[i + 1], (t->n - i - 1) * sizeof(t->m[0]));
	t->n--;
}

int proc_tree_add(struct proc_tree *t, int channel, pid_t pid, uint32_t version)
{
	return add_member(t, channel, pid, version);
}

int proc_tree_create(int channel, pid_t pid, uint32_t version, struct proc_tree **out)
{
	struct proc_tree *t = calloc(1, sizeof(*t));
	int ret;

	if (!t)
		return -ENOMEM;
	t->written = -1;
	ret = add_member(t, channel, pid, version);
	if (ret) {
		free(t);
		return ret;
	}
	*out = t;
	return 0;
}

void proc_tree_free(struct proc_tree **tp)
{
	struct proc_tree *t = *tp;

	if (!t)
		return;
	while (t->n)
		drop_member(t, t->n - 1);
	if (t->written >= 0)
		close(t->written);
	free(t->m);
	free(t);
	*tp = NULL;
}

void proc_tree_written_log(struct proc_tree *t, int fd)
{
	if (t->written >= 0)
		close(t->written);
	t->written = fd;
}

unsigned proc_tree_size(const struct proc_tree *t)
{
	return t ? (unsigned)t->n : 0;
}

pid_t proc_tree_pid(const struct proc_tree *t)
{
	return t && t->n ? t->m[0].pid : -1;
}

unsigned proc_tree_poll(const struct proc_tree *t, struct pollfd *p, unsigned max)
{
	unsigned k = 0;

	for (size_t i = 0; t && i < t->n && k < max; i++)
		p[k++] = (struct pollfd){ t->m[i].fd, POLLIN, 0 };
	return k;
}

/* One record header from member i, with a descriptor it passes (CHILD) and
 * the sender's pid as we see it. */
static int recv_header(struct member *m, struct proc_msg *msg, int *passed)
{
	union {
		char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { msg, sizeof(*msg) };
	struct msghdr mh;
	struct pollfd p = { m->fd, POLLIN, 0 };
	ssize_t n;
	int r;

	*passed = -1;
	do
		r = poll(&p, 1, TREE_SILENCE_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return err_set(-ETIMEDOUT, "the agent of process %d sent nothing for %d s", (int)m->pid,
			       TREE_SILENCE_MS / 1000);
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	do
		n = recvmsg(m->fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EPIPE;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(passed, CMSG_DATA(c), sizeof(int));
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
			struct ucred cr;

			memcpy(&cr, CMSG_DATA(c), sizeof(cr));
			if (cr.pid > 0)
				m->host_pid = cr.pid;
		}
	}
	if ((size_t)n < sizeof(*msg)) {
		int ret = proc_chan_read(m->fd, (char *)msg + n, sizeof(*msg) - (size_t)n);

		if (ret)
			return ret;
	}
	if (msg->magic != PROC_MSG_MAGIC)
		return err_set(-EBADMSG, "the agent's stream is damaged (bad record magic)");
	return 0;
}

static int skip(int fd, uint64_t len)
{
	char junk[256];
	int ret = 0;

	while (!ret && len) {
		size_t k = len < sizeof(junk) ? (size_t)len : sizeof(junk);

		ret = proc_chan_read(fd, junk, k);
		len -= k;
	}
	return ret;
}

/* What an agent says unasked (or before PARKED): a new child's channel, a
 * hello. 1 when the record was PARKED or ERROR (read; *why set for
 * ERROR), 0 for the others, negative on the channel's end or damage. */
static int recv_record(struct proc_tree *t, size_t i, char *why, size_t len)
{
	struct member *m = &t->m[i];
	struct proc_msg msg;
	int passed, ret = recv_header(m, &msg, &passed);

	if (ret)
		return ret;
	switch (msg.type) {
	case PROC_MSG_CHILD:
		if (passed < 0)
			return err_set(-EPROTO, "the agent of process %d announced a child without its "
				       "channel", (int)m->pid);
		ret = skip(m->fd, msg.len);
		if (!ret)
			ret = add_member(t, passed, 0, PROC_FORMAT_VERSION);
		if (ret)
			close(passed);
		return ret;
	case PROC_MSG_HELLO:
	case PROC_MSG_RESTARTED: {
		struct proc_hello h;

		if (msg.len != sizeof(h))
			return err_set(-EPROTO, "the agent sent a bad hello");
		ret = proc_chan_read(m->fd, &h, sizeof(h));
		if (!ret) {
			m->pid = h.pid;
			m->version = h.version;
		}
		return ret;
	}
	case PROC_MSG_PARKED:
		if (msg.len < sizeof(m->self))
			return err_set(-EPROTO, "the agent sent a bad PARKED record");
		ret = proc_chan_read(m->fd, &m->self, sizeof(m->self));
		if (!ret && msg.len != sizeof(m->self) + m->self.nkids * sizeof(struct proc_kid))
			ret = err_set(-EPROTO, "the agent sent a bad PARKED record");
		if (!ret && m->self.nkids) {
			m->kids = calloc(m->self.nkids, sizeof(*m->kids));
			ret = m->kids ? proc_chan_read(m->fd, m->kids, m->self.nkids * sizeof(*m->kids))
				      : -ENOMEM;
		}
		m->pid = m->self.pid;
		m->parked = 1;
		return ret ? ret : 1;
	case PROC_MSG_ERROR: {
		size_t n = msg.len < len - 1 ? (size_t)msg.len : len - 1;

		ret = proc_chan_read(m->fd, why, n);
		why[ret ? 0 : n] = 0;
		if (!ret)
			ret = skip(m->fd, msg.len - n);
		m->parked = 2;
		return ret ? ret : 1;
	}
	default:
		ret = skip(m->fd, msg.len);
		return ret ? ret : err_set(-EPROTO, "the agent sent an unexpected record %u", msg.type);
	}
}

void proc_tree_serve(struct proc_tree *t, const struct pollfd *p, unsigned n)
{
	/* members added here are at the end: the indices below stay valid */
	for (size_t i = n; i-- > 0;) {
		char why[8];

		if (!p[i].revents)
			continue;
		if (recv_record(t, i, why, sizeof(why)) < 0)
			drop_member(t, i);   /* its process ended (or went where no agent is) */
	}
}

static const struct member *find_pid(const struct proc_tree *t, pid_t pid)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->m[i].parked == 1 && t->m[i].pid == pid)
			return &t->m[i];
	return NULL;
}

/* Every process parked: is the tree whole? Each running child of a parked
 * process must be one of them. */
static int check_closure(const struct proc_tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		for (uint32_t k = 0; k < t->m[i].self.nkids; k++) {
			const struct proc_kid *kid = &t->m[i].kids[k];

			if (kid->zombie || find_pid(t, kid->pid))
				continue;
			return err_set(-ENOTSUP, "cannot checkpoint: process %d has a child process %d "
				       "(%.*s) that is not under Stasis (a statically linked program, or "
				       "started without the agent in its environment)",
				       (int)t->m[i].pid, (int)kid->pid, (int)sizeof(kid->comm),
				       kid->comm);
		}
	return 0;
}

/* Descriptors of regular files that share one open file description (one
 * offset) across the processes of the tree: asked of the kernel (kcmp)
 * while every process is parked. *group[i][k]: the group
 * of member i's descriptor k, or -1 for none. */
static int file_shared(const struct proc_fd *f)
{
	return f->kind == PROC_FD_FILE || f->kind == PROC_FD_FILE_SAVED ||
	       f->kind == PROC_FD_UNLINKED;
}

/* A connected UNIX socket: the agent puts its inode and its peer's in
 * offset and size (a TCP connection's are hashes of its addresses). */
static int unix_connected(const struct proc_fd *f)
{
	return f->kind == PROC_FD_SOCKET && f->size && f->offset == f->ino;
}

/* Is a socket of inode ino in the tree? */
static int socket_in_tree(const struct proc_tree *t, uint64_t ino)
{
	for (size_t j = 0; j < t->n; j++)
		for (size_t b = 0; b < t->m[j].info.nfds; b++)
			if (t->m[j].info.fds[b].kind == PROC_FD_SOCKET && t->m[j].info.fds[b].ino == ino)
				return 1;
	return 0;
}

/* UNIX socket pairs are made once for the whole tree (restore.c), whichever
 * processes hold their ends; a UNIX socket connected outside the tree is
 * refused with sockets_outside = refuse. Any other socket held by two
 * processes, or connected to one in another (TCP), is not supported yet:
 * refused rather than restored closed. */
static int check_sockets(const struct proc_tree *t)
{
	int refuse = strcmp(cfg_str(CFG_SOCKETS_OUTSIDE), "refuse") == 0;

	for (size_t i = 0; i < t->n; i++)
		for (size_t a = 0; a < t->m[i].info.nfds; a++) {
			const struct proc_fd *f = &t->m[i].info.fds[a];

			if (f->kind != PROC_FD_SOCKET)
				continue;
			if (unix_connected(f)) {
				if (refuse && !socket_in_tree(t, f->size))
					return err_set(-ENOTSUP, "cannot checkpoint: process %d: fd %d is a UNIX "
						       "socket connected outside the job (sockets_outside = "
						       "refuse)", (int)t->m[i].pid, f->fd);
				continue;
			}
			for (size_t j = 0; j < t->n; j++)
				for (size_t b = 0; j != i && b < t->m[j].info.nfds; b++) {
					const struct proc_fd *g = &t->m[j].info.fds[b];
					int shared = g->ino == f->ino && g->dev == f->dev;

					if (g->kind != PROC_FD_SOCKET || (!shared && (!f->size || f->size != g->offset)))
						continue;
					return err_set(-ENOTSUP, "cannot checkpoint: process %d: fd %d is a socket %s "
						       "process %d fd %d; only UNIX socket pairs are rebuilt across "
						       "processes yet", (int)t->m[i].pid, f->fd,
						       shared ? "shared with" : "connected to", (int)t->m[j].pid,
						       g->fd);
				}
		}
	return 0;
}

static int find_shares(const struct proc_tree *t, int **group, int *ngroups)
{
	int next = 0;

	for (size_t i = 0; i < t->n; i++) {
		group[i] = malloc((t->m[i].info.nfds + 1) * sizeof(int));
		if (!group[i])
			return -ENOMEM;
		for (size_t a = 0; a < t->m[i].info.nfds; a++)
			group[i][a] = -1;
	}
	for (size_t i = 0; i < t->n; i++)
		for (size_t a = 0; a < t->m[i].info.nfds; a++) {
			const struct proc_fd *f = &t->m[i].info.fds[a];

			if (!file_shared(f) || group[i][a] >= 0)
				continue;
			/* other processes only: two descriptors of one process are
			 * restored as a single process's are (each its own) */
			for (size_t j = i + 1; j < t->n; j++)
				for (size_t b = 0; b < t->m[j].info.nfds; b++) {
					const struct proc_fd *g = &t->m[j].info.fds[b];
					long r;

					if (!file_shared(g) || g->ino != f->ino || g->dev != f->dev ||
					    group[j][b] >= 0)
						continue;
					if (t->m[i].host_pid <= 0 || t->m[j].host_pid <= 0)
						return err_set(-ENOTSUP, "cannot checkpoint: cannot tell whether "
							       "process %d fd %d and process %d fd %d "
							       "share an offset", (int)t->m[i].pid, f->fd,
							       (int)t->m[j].pid, g->fd);
					r = syscall(SYS_kcmp, t->m[i].host_pid, t->m[j].host_pid, KCMP_FILE,
						    f->fd, g->fd);
					if (r < 0)
						return err_set(-ENOTSUP, "cannot checkpoint: cannot tell whether "
							       "process %d fd %d and process %d fd %d "
							       "share an offset (kcmp: %s)", (int)t->m[i].pid,
							       f->fd, (int)t->m[j].pid, g->fd, strerror(errno));
					if (r != 0)
						continue;
					if (f->kind == PROC_FD_UNLINKED)
						return err_set(-ENOTSUP, "cannot checkpoint: process %d fd %d "
							       "is a deleted file whose offset process %d "
							       "fd %d shares; not supported yet",
							       (int)t->m[i].pid, f->fd, (int)t->m[j].pid, g->fd);
					if (group[i][a] < 0)
						group[i][a] = next++;
					group[j][b] = group[i][a];
				}
		}
	*ngroups = next;
	return 0;
}

/* The tree's description: one line per process, the first one's first. */
static int describe(const struct proc_tree *t, int **group, int ngroups, char **out, size_t *len)
{
	size_t n = 0;
	char *s = NULL;
	FILE *f = open_memstream(&s, &n);

	if (!f)
		return -ENOMEM;
	fprintf(f, "stasis-tree 1\n");
	for (size_t i = 0; i < t->n; i++) {
		const struct member *m = &t->m[i];

		fprintf(f, "%d %d %d %d image -\n", (int)m->pid, (int)m->self.ppid, (int)m->self.pgid,
			(int)m->self.sid);
		for (uint32_t k = 0; k < m->self.nkids; k++)
			if (m->kids[k].zombie)
				fprintf(f, "%d %d %d %d zombie %d\n", (int)m->kids[k].pid, (int)m->pid,
					(int)m->self.pgid, (int)m->self.sid, m->kids[k].status);
	}
	/* "share pid:fd pid:fd ...": one open file description */
	for (int g = 0; g < ngroups; g++) {
		fprintf(f, "share");
		for (size_t i = 0; i < t->n; i++)
			for (size_t a = 0; a < t->m[i].info.nfds; a++)
				if (group[i][a] == g)
					fprintf(f, " %d:%d", (int)t->m[i].pid, t->m[i].info.fds[a].fd);
		fprintf(f, "\n");
	}
	if (fclose(f) != 0) {
		free(s);
		return -ENOMEM;
	}
	*out = s;
	*len = n;
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Phase one: CHECKPOINT to all, until every process (those announced
 * meanwhile too) is parked or refused. */
static int park_all(struct proc_tree *t, char *why, size_t len)
{
	size_t sent = 0;
	int refused = 0, ended = 0;
	uint64_t end = now_ms() + TREE_SILENCE_MS;

	for (;;) {
		size_t waiting = 0;

		for (; sent < t->n; sent++)
			if (proc_send(t->m[sent].fd, PROC_CMD_CHECKPOINT, NULL, 0) != 0)
				t->m[sent].parked = 3;   /* gone: dropped below */
		for (size_t i = t->n; i-- > 0;)
			if (t->m[i].parked == 3) {
				drop_member(t, i);
				sent--;
			}
		if (!t->n)
			return err_set(-ENOTCONN, "the program has no Stasis agent (it ended)");
		{
			struct pollfd p[t->n];

			for (size_t i = 0; i < t->n; i++)
				if (!t->m[i].parked)
					p[waiting++] = (struct pollfd){ t->m[i].fd, POLLIN, 0 };
			if (!waiting)
				break;
			if (now_ms() >= end)
				return err_set(-ETIMEDOUT, "a process of the tree did not park within %d s",
					       TREE_SILENCE_MS / 1000);
			if (poll(p, (nfds_t)waiting, 1000) < 0 && errno != EINTR)
				return -errno;
			for (size_t w = 0; w < waiting; w++) {
				size_t i = 0;
				int ret;

				if (!p[w].revents)
					continue;
				while (t->m[i].fd != p[w].fd)
					i++;
				ret = recv_record(t, i, why, len);
				if (ret == -EPIPE || ret == -ECONNRESET) {
					/* a child that failed to fork, or a process that
					 * ended: its parent may have listed it running */
					ended |= t->m[i].pid != 0;
					drop_member(t, i);
					sent--;
					break;
				}
				if (ret < 0)
					return ret;
				if (t->m[i].parked == 2)
					refused = 1;
			}
		}
	}
	if (refused)
		return -ENOTSUP;
	return ended ? -EAGAIN : 0;
}

/* Phase two: every process streams its image at once, each read on a
 * thread of its own into its own image, at most TREE_DUMPS_AT_ONCE at a
 * time (a writer holds a few chunks of memory); the others stay parked
 * until a thread takes them. The sink's open runs one at a time under the
 * lock; its close (the file made durable) on each thread as its dump
 * ends, beside the other dumps and closes. A dump that fails is read to its
 * end all the same (proc_dump_recv), so no agent is left mid-stream; once
 * one failed, the processes not yet begun are not dumped. */
#define TREE_DUMPS_AT_ONCE 8

struct dump_job {
	struct proc_tree *t;
	const struct proc_tree_sink *s;
	unsigned at_once;            /* threads reading dumps */
	pthread_mutex_t lock;        /* the sink's open; next; failed */
	size_t next;                 /* the next member to dump */
	int failed;                  /* a dump failed: begin no other */
	int *rets;                   /* each member's result */
	char (*msgs)[512];           /* and its message */
	struct proc_written_tree written[2];   /* the first process's, the others' */
};

static int dump_one(struct dump_job *j, size_t i)
{
	struct member *m = &j->t->m[i];
	struct img_writer *w = NULL;
	void *file = NULL;
	int ret;

	pthread_mutex_lock(&j->lock);
	ret = j->s->open(j->s->arg, m->pid, i == 0, j->at_once, &file, &w);
	pthread_mutex_unlock(&j->lock);
	if (!ret && proc_send(m->fd, PROC_CMD_DUMP, NULL, 0) != 0)
		ret = err_set(-EPIPE, "process %d ended during the checkpoint", (int)m->pid);
	else if (!ret) {
		ret = proc_dump_recv(m->fd, w, &j->written[i != 0], &m->info);
		if (ret == -EPIPE)
			ret = err_set(ret, "process %d ended during the checkpoint", (int)m->pid);
	}
	return j->s->close(j->s->arg, file, w, ret);
}

static void *dump_worker(void *arg)
{
	struct dump_job *j = arg;

	for (;;) {
		size_t i;
		int ret;

		pthread_mutex_lock(&j->lock);
		i = j->failed ? j->t->n : j->next++;
		pthread_mutex_unlock(&j->lock);
		if (i >= j->t->n)
			return NULL;
		err_clear();
		ret = dump_one(j, i);
		if (ret) {
			snprintf(j->msgs[i], sizeof(j->msgs[i]), "%s",
				 err_msg()[0] ? err_msg() : strerror(-ret));
			pthread_mutex_lock(&j->lock);
			j->failed = 1;
			pthread_mutex_unlock(&j->lock);
		}
		j->rets[i] = ret;
	}
}

/* 0, or the first failed process's error; *fin: an agent went silent. */
static int dump_all(struct proc_tree *t, const struct proc_tree_sink *s, const char *const *written,
		    size_t nwritten, int *fin)
{
	struct dump_job j = { .t = t, .s = s,
			      .written = { { written, nwritten, 1 }, { written, nwritten, 0 } } };
	size_t nthreads = t->n < TREE_DUMPS_AT_ONCE ? t->n : TREE_DUMPS_AT_ONCE, started = 0;
	pthread_t tid[TREE_DUMPS_AT_ONCE];
	int ret = 0;

	j.rets = calloc(t->n, sizeof(*j.rets));
	j.msgs = calloc(t->n, sizeof(*j.msgs));
	if (!j.rets || !j.msgs) {
		free(j.rets);
		free(j.msgs);
		return -ENOMEM;
	}
	pthread_mutex_init(&j.lock, NULL);
	j.at_once = (unsigned)nthreads;
	/* the first process on this thread: a tree of one starts none */
	for (; started + 1 < nthreads; started++)
		if (pthread_create(&tid[started], NULL, dump_worker, &j) != 0)
			break;
	dump_worker(&j);
	for (size_t k = 0; k < started; k++)
		pthread_join(tid[k], NULL);
	pthread_mutex_destroy(&j.lock);
	for (size_t i = 0; i < t->n; i++) {
		if (j.rets[i] == -ETIMEDOUT)
			*fin = j.rets[i];
		if (j.rets[i] && !ret)
			ret = err_set(j.rets[i], "%s", j.msgs[i]);
	}
	free(j.rets);
	free(j.msgs);
	return ret;
}

struct devino {
	dev_t dev;
	ino_t ino;
};

/* The regular files the processes of the tree have open for writing now
 * (*out malloc'd): /proc/<pid>/fd's links carry the open's mode in their
 * own (write: S_IWUSR). A process we do not know the pid of has none. */
static int open_for_writing(const struct proc_tree *t, struct devino **out, size_t *n)
{
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; i < t->n; i++) {
		char dir[64], link[64 + sizeof(((struct dirent *)0)->d_name)];
		struct dirent *e;
		struct stat fs, ls;
		DIR *d;

		if (t->m[i].host_pid <= 0)
			continue;
		snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)t->m[i].host_pid);
		d = opendir(dir);
		while (d && (e = readdir(d)) != NULL) {
			if (e->d_name[0] < '0' || e->d_name[0] > '9')
				continue;
			snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
			if (lstat(link, &ls) != 0 || !(ls.st_mode & S_IWUSR) || stat(link, &fs) != 0 ||
			    !S_ISREG(fs.st_mode))
				continue;
			if (*n == cap) {
				struct devino *p = realloc(*out, (cap = cap ? 2 * cap : 64) * sizeof(*p));

				if (!p) {
					closedir(d);
					return -ENOMEM;
				}
				*out = p;
			}
			(*out)[(*n)++] = (struct devino){ fs.st_dev, fs.st_ino };
		}
		if (d)
			closedir(d);
	}
	return 0;
}

/* With every process parked: the files the tree wrote (its log, written.c)
 * that none of its processes has open for writing (such a one is its
 * descriptor's), for the first image (*paths malloc'd; none without a log) */
static int tree_written(struct proc_tree *t, char ***paths, size_t *n)
{
	struct devino *open = NULL;
	size_t k = 0, nopen = 0;
	int ret;

	*paths = NULL;
	*n = 0;
	if (t->written < 0)
		return 0;
	ret = proc_written_log_list(t->written, paths, n);
	if (!ret && *n)
		ret = open_for_writing(t, &open, &nopen);
	for (size_t i = 0; !ret && i < *n; i++) {
		struct stat st;
		size_t j = 0;

		if (stat((*paths)[i], &st) != 0)
			continue;   /* gone meanwhile */
		while (j < nopen && (open[j].dev != st.st_dev || open[j].ino != st.st_ino))
			j++;
		if (j < nopen)
			continue;
		(*paths)[k++] = (*paths)[i];
	}
	if (!ret)
		*n = k;
	free(open);
	return ret;
}

int proc_tree_checkpoint(struct proc_tree *t, const struct proc_tree_sink *s, int stop,
			 struct proc_tree_info *info)
{
	char **written = NULL;
	size_t nwritten = 0;
	char why[512] = "";
	int ret, fin = 0;

	memset(info, 0, sizeof(*info));
	if (!t || !t->n)
		return err_set(-ENOTCONN, "the program has no Stasis agent (it ended, or was not "
			       "started under `stasis run`)");
	proc_lazy_wait();   /* the pagemap shows only pages that are in */
	if (t->n == 1 && t->m[0].version < 3) {
		/* an agent restored from an older image: one process, dumped at once */
		struct img_writer *w = NULL;
		void *file = NULL;

		ret = s->open(s->arg, t->m[0].pid, 1, 1, &file, &w);
		if (!ret)
			ret = proc_dump(t->m[0].fd, w, &t->m[0].info);
		ret = s->close(s->arg, file, w, ret);
		info->processes = 1;
		goto verdict;
	}
	for (int attempt = 0;; attempt++) {
		for (size_t i = 0; i < t->n; i++)
			member_clear(&t->m[i]);
		ret = park_all(t, why, sizeof(why));
		if (ret != -EAGAIN)
			break;
		/* a process ended meanwhile: its parent's account of it may be
		 * stale (running, not a zombie with its status). All run on a
		 * moment, then park again */
		for (size_t i = t->n; i-- > 0;)
			if (proc_dump_finish(t->m[i].fd, 0) != 0)
				drop_member(t, i);
		if (attempt == 4) {
			ret = err_set(-EAGAIN, "processes of the tree kept ending during the checkpoint");
			break;
		}
	}
	if (ret == -ENOTSUP)
		ret = err_set(ret, "%s", why);
	if (!ret)
		ret = check_closure(t);
	if (!ret)
		ret = tree_written(t, &written, &nwritten);
	if (!ret)
		ret = dump_all(t, s, (const char *const *)written, nwritten, &fin);
	free(written);
	for (size_t i = 0; !ret && i < t->n; i++) {
		info->threads += t->m[i].info.threads;
		info->regions += t->m[i].info.regions;
		info->stored_bytes += t->m[i].info.stored_bytes;
		info->processes++;
		for (uint32_t k = 0; k < t->m[i].self.nkids; k++)
			info->zombies += t->m[i].kids[k].zombie;
	}
	if (!ret) {
		int **group = calloc(t->n, sizeof(*group)), ngroups = 0;

		ret = group ? check_sockets(t) : -ENOMEM;
		if (!ret)
			ret = find_shares(t, group, &ngroups);
		if (!ret && (t->n > 1 || info->zombies || ngroups)) {
			char *text = NULL;
			size_t len = 0;

			ret = describe(t, group, ngroups, &text, &len);
			if (!ret)
				ret = s->tree(s->arg, text, len);
			free(text);
		}
		for (size_t i = 0; group && i < t->n; i++)
			free(group[i]);
		free(group);
	}
verdict:
	ret = s->done ? s->done(s->arg, ret) : ret;
	/* every process waits for this verdict; a failed checkpoint stops none.
	 * An agent that went silent is in an unknown state: drop it */
	for (size_t i = t->n; i-- > 0;) {
		if (fin || proc_dump_finish(t->m[i].fd, stop && !ret) != 0)
			drop_member(t, i);
		else
			member_clear(&t->m[i]);
	}
	return ret;
}

int proc_tree_parse(const char *text, size_t len, struct proc_restore_proc **out, int **has_image,
		    size_t *count, struct proc_fd_share **shout, size_t *nshout)
{
	struct proc_restore_proc *v = NULL;
	struct proc_fd_share *sh = NULL;
	int *img = NULL, groups = 0;
	size_t n = 0, lines = 0, nsh = 0;
	char *copy = strndup(text, len), *save = NULL, *line;

	if (!copy)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	v = calloc(lines + 1, sizeof(*v));
	img = calloc(lines + 1, sizeof(*img));
	sh = calloc(len / 4 + 1, sizeof(*sh));   /* " p:f" takes at least 4 bytes */
	if (!v || !img || !sh)
		goto nomem;
	line = strtok_r(copy, "\n", &save);
	if (!line || strcmp(line, "stasis-tree 1") != 0)
		goto bad;
	while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
		struct proc_restore_proc *p = &v[n];
		char kind[16], status[16];

		if (strncmp(line, "share ", 6) == 0) {
			char *tok, *save2 = NULL;
			size_t first = nsh;

			for (tok = strtok_r(line + 6, " ", &save2); tok; tok = strtok_r(NULL, " ", &save2)) {
				if (sscanf(tok, "%d:%d", &sh[nsh].pid, &sh[nsh].fd) != 2)
					goto bad;
				sh[nsh++].group = groups;
			}
			if (nsh - first < 2)
				goto bad;
			groups++;
			continue;
		}
		if (sscanf(line, "%d %d %d %d %15s %15s", &p->pid, &p->ppid, &p->pgid, &p->sid, kind,
			   status) != 6 || p->pid <= 0)
			goto bad;
		p->channel = p->peer = -1;
		if (!strcmp(kind, "image"))
			img[n] = 1;
		else if (!strcmp(kind, "zombie"))
			p->status = atoi(status);
		else
			goto bad;
		n++;
	}
	if (!n || !img[0])
		goto bad;
	free(copy);
	*out = v;
	*has_image = img;
	*count = n;
	*shout = sh;
	*nshout = nsh;
	return 0;
bad:
	free(copy);
	free(v);
	free(img);
	free(sh);
	return err_set(-EBADMSG, "the checkpoint's process tree description is damaged");
nomem:
	free(copy);
	free(v);
	free(img);
	free(sh);
	return -ENOMEM;
}

static int read_text(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "re");
	size_t cap = 0, n = 0;
	char *s = NULL;

	if (!f)
		return -errno;
	for (;;) {
		if (n + 4096 > cap) {
			char *p = realloc(s, cap = cap ? 2 * cap : 8192);

			if (!p) {
				free(s);
				fclose(f);
				return -ENOMEM;
			}
			s = p;
		}
		size_t got = fread(s + n, 1, cap - n, f);

		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	*out = s;
	*len = n;
	return 0;
}

int proc_tree_restart(const char *dir, const char *ckpt, const char *level, struct proc_child *out,
		      struct proc_tree **tree)
{
	struct proc_restore_proc one = { .channel = -1, .peer = -1 }, *v = &one;
	struct proc_fd_share *sh = NULL;
	int none = 1, *has = &none, *mine = NULL;
	char path[PATH_MAX], *text = NULL;
	size_t n = 1, len = 0, nsh = 0;
	int ret;

	*tree = NULL;
	out->pid = -1;
	out->status_fd = -1;
	snprintf(path, sizeof(path), "%s/%s", dir, PROC_TREE_FILE);
	ret = read_text(path, &text, &len);
	if (ret == 0) {
		ret = proc_tree_parse(text, len, &v, &has, &n, &sh, &nsh);
		free(text);
		if (ret)
			return err_set(ret, "checkpoint %s cannot be used: %s", ckpt, err_msg());
	} else if (ret != -ENOENT) {
		return err_set(ret, "checkpoint %s: %s: %s", ckpt, path, strerror(-ret));
	}
	ret = 0;
	mine = calloc(n, sizeof(*mine));   /* our ends of the channels */
	if (!mine)
		ret = -ENOMEM;
	for (size_t k = 0; k < n && mine; k++)
		mine[k] = -1;
	for (size_t k = 0; !ret && k < n; k++) {
		int sv[2];

		if (!has[k])
			continue;
		if (k == 0)
			snprintf(path, sizeof(path), "%s/%s", dir, PROC_IMAGE_FILE);
		else
			snprintf(path, sizeof(path), "%s/process.%d.img", dir, (int)v[k].pid);
		/* header, manifest and footer now; every chunk's CRC as the
		 * restore stream reads it (a second full read would double the
		 * restart time) */
		ret = img_open(path, &v[k].img);
		if (ret) {
			ret = err_set(ret, "checkpoint %s cannot be used: %s", ckpt, err_msg());
			break;
		}
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
			ret = err_set(-errno, "socketpair: %s", strerror(errno));
			break;
		}
		mine[k] = sv[0];
		v[k].channel = sv[1];
		v[k].peer = sv[0];
	}
	if (!ret) {
		ret = proc_restore_tree(v, n, sh, nsh, level, out);
		for (size_t k = 0; k < n; k++)
			v[k].channel = -1;   /* closed there */
		if (ret == -EBADMSG || ret == -ESTALE)
			ret = err_set(ret, "checkpoint %s cannot be used: %s", ckpt, err_msg());
	}
	for (size_t k = 0; k < n; k++) {
		if (v[k].channel >= 0)
			close(v[k].channel);
		img_close(&v[k].img);   /* streamed: not needed for the job's lifetime */
	}
	if (ret == -EPIPE && out->pid > 0 && proc_child_ends(out, PROC_RESTORER_END_MS)) {
		int st;

		/* the namespace's processes or the restorer gave up and said why
		 * (exit status 42): that one line is the whole message */
		proc_child_wait(out, &st);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 42)
			ret = -ECANCELED;
	}
	/* every agent says RESTARTED, the first one first */
	for (size_t k = 0; !ret && k < n; k++) {
		uint32_t version = 0;
		pid_t pid;

		if (!has[k])
			continue;
		ret = proc_agent_hello(mine[k], PROC_HELLO_TIMEOUT_MS, &pid, &version);
		if (ret == -EPIPE && k > 0) {
			/* its whole stream was read: a process of the tree that ended
			 * as soon as it ran again (a short-lived child), before its
			 * agent said RESTARTED */
			err_clear();
			ret = 0;
			continue;
		}
		if (!ret)
			ret = k == 0 ? proc_tree_create(mine[k], pid, version, tree)
				     : proc_tree_add(*tree, mine[k], pid, version);
		if (!ret) {
			mine[k] = -1;
			continue;
		}
		if (out->pid > 0) {
			int st;

			/* the restorer said why on stderr; it exits 42 when it gives
			 * up (one that runs the tree on is killed below) */
			if (k == 0 && proc_child_ends(out, PROC_RESTORER_END_MS))
				proc_child_wait(out, &st);
			else
				st = 0;
			ret = err_set(-EIO, "restart of %s failed", ckpt);
			if (WIFEXITED(st) && WEXITSTATUS(st) == 42)
				ret = -ECANCELED;   /* message already printed */
		}
	}
	if (ret) {
		proc_tree_free(tree);
		if (out->pid > 0) {
			int st;

			kill(out->pid, SIGKILL);
			proc_child_wait(out, &st);
		}
	}
	for (size_t k = 0; mine && k < n; k++)
		if (mine[k] >= 0)
			close(mine[k]);
	free(mine);
	free(sh);
	if (v != &one) {
		free(v);
		free(has);
	}
	return ret;
}
