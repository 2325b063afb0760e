/* dump.c - the dump stream from the agent, written as an image.
 *
 * Sections (docs/transparent.md): "thread.<tid>" (the thread record and a
 * copy of its signal frame's ucontext and xsave area), "mem.<start>" (the
 * stored pages of one region, concatenated), and last "process" (header,
 * cwd, signal dispositions, thread records, and every region with its runs
 * of stored pages), the table of contents a restore starts from.
 */
#include "proc/proc.h"
#include "proc/proc_format.h"
#include "proc/proc_internal.h"

#include "common/config.h"
#include "common/err.h"
#include "common/log.h"
#include "image/image.h"
#include "pimg/pimg_mem.h"
#include "proc/written.h"
#include "split/sts_written.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_SIZE (4u << 20)

int proc_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int proc_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads from the agent never wait forever: a stuck agent fails the
 * checkpoint instead of hanging its coordinator. */
#define AGENT_SILENCE_MS 120000

static int chan_read(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		int r = poll(&pfd, 1, AGENT_SILENCE_MS);
		ssize_t n;

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return err_set(-ETIMEDOUT, "the program's agent sent nothing for %d s",
				       AGENT_SILENCE_MS / 1000);
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int proc_chan_read(int fd, void *buf, size_t len)
{
	return chan_read(fd, buf, len);
}

int proc_send(int fd, uint32_t type, const void *payload, size_t len)
{
	struct proc_msg m = { PROC_MSG_MAGIC, type, len };
	int ret = proc_write_all(fd, &m, sizeof(m));

	if (!ret && len)
		ret = proc_write_all(fd, payload, len);
	return ret;
}

int proc_recv(int fd, struct proc_msg *m)
{
	int ret = chan_read(fd, m, sizeof(*m));

	if (ret)
		return ret;
	if (m->magic != PROC_MSG_MAGIC)
		return err_set(-EBADMSG, "the agent's stream is damaged (bad record magic)");
	return 0;
}

int proc_agent_hello(int channel, int timeout_ms, pid_t *pid, uint32_t *version)
{
	struct pollfd p = { channel, POLLIN, 0 };
	struct proc_hello h;
	struct proc_msg m;
	int ret;

	ret = poll(&p, 1, timeout_ms);
	if (ret == 0)
		return err_set(-ETIMEDOUT, "the program's Stasis agent did not report (statically "
			       "linked, or LD_PRELOAD ignored?)");
	ret = proc_recv(channel, &m);
	if (ret == -EPIPE)
		return err_set(ret, "the program ended before its Stasis agent reported");
	if (ret)
		return ret;
	if ((m.type != PROC_MSG_HELLO && m.type != PROC_MSG_RESTARTED) || m.len != sizeof(h))
		return err_set(-EPROTO, "the program's agent sent %u instead of its hello", m.type);
	ret = chan_read(channel, &h, sizeof(h));
	if (ret)
		return err_set(ret, "reading the agent's hello: %s", strerror(-ret));
	/* an agent restored from a version 1 image speaks version 1, whose
	 * records are version 2's without what version 2 added */
	if (h.version < 1 || h.version > PROC_FORMAT_VERSION)
		return err_set(-EPROTO, "the program's agent speaks version %u, this stasis 1 to %u",
			       h.version, PROC_FORMAT_VERSION);
	*pid = h.pid;
	if (version)
		*version = h.version;
	return 0;
}

/* ---- the region table kept while the pages stream in ---- */

struct dump_region {
	struct proc_region rec;
	char *path;
	struct proc_pages *runs;
	size_t nruns, cap;
};

struct dump_fd {
	struct proc_fd rec;
	char *path;
};

struct dump_state {
	struct img_writer *w;
	struct dump_fd *fds;
	size_t nfds;
	struct proc_header header;
	char *cwd;
	struct proc_sigaction sa[PROC_NSIG];
	struct proc_thread *threads;
	size_t nthreads;
	struct dump_region *regions;
	size_t nregions, cap;
	int section_open;
	void *buf;
	char *refusal;          /* a socket the checkpoint must not take (outside_socket) */
	int werr;               /* the image writer's first error (kept) */
	char wmsg[512];         /* and its message */
	const struct proc_written_tree *tree;   /* the tree's written files, or NULL */
	int written;            /* the "written" section is in the image */
};

/* An error of the image writer (a write that failed, a fault point) does not
 * stop the reading: the agent's stream is read to its end, so the agent is
 * not left blocked mid-stream and its channel stays in step for the next
 * checkpoint. The writer's errors are sticky, so the calls after the first
 * failure write nothing; the error is returned at END. Returns 0. */
static int keep(struct dump_state *d, int ret)
{
	if (ret && !d->werr) {
		d->werr = ret;
		snprintf(d->wmsg, sizeof(d->wmsg), "%s", err_msg()[0] ? err_msg() : strerror(-ret));
	}
	return 0;
}

static void state_free(struct dump_state *d)
{
	for (size_t i = 0; i < d->nfds; i++)
		free(d->fds[i].path);
	free(d->fds);
	for (size_t i = 0; i < d->nregions; i++) {
		free(d->regions[i].path);
		free(d->regions[i].runs);
	}
	free(d->regions);
	free(d->threads);
	free(d->cwd);
	free(d->buf);
	free(d->refusal);
}

/* A connection to a peer outside the process, with sockets_outside =
 * refuse: noted, and the checkpoint fails once the dump is read through
 * (the agent is still writing it). fd_socket.c restores it closed else. */
static void outside_socket(struct dump_state *d, const struct proc_fd *r, const struct proc_socket *s)
{
	char peer[INET6_ADDRSTRLEN + 8] = "a UNIX socket";
	const struct sockaddr_in *in = (const struct sockaddr_in *)s->peer;
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)s->peer;
	const char *exe = d->cwd ? d->cwd + strlen(d->cwd) + 1 : "", *base = strrchr(exe, '/');
	char *msg;

	if (s->state != PROC_SOCK_CONNECTED || !s->outside || d->refusal ||
	    strcmp(cfg_str(CFG_SOCKETS_OUTSIDE), "refuse") != 0)
		return;
	if (s->family == AF_UNIX)
		return;   /* a pair's other end may be in another process: tree.c decides */
	if (s->family == AF_INET && inet_ntop(AF_INET, &in->sin_addr, peer, sizeof(peer)))
		snprintf(peer + strlen(peer), sizeof(peer) - strlen(peer), ":%u", ntohs(in->sin_port));
	else if (s->family == AF_INET6 && inet_ntop(AF_INET6, &in6->sin6_addr, peer, sizeof(peer)))
		snprintf(peer + strlen(peer), sizeof(peer) - strlen(peer), ":%u", ntohs(in6->sin6_port));
	/* the process as the agent names it: its pid, its name (the executable's, 15 bytes) */
	if (asprintf(&msg, "cannot checkpoint: process %d (%.15s): fd %d is a connection to %s, "
		     "outside the job (sockets_outside = refuse)", d->header.pid, base ? base + 1 : exe,
		     r->fd, peer) >= 0)
		d->refusal = msg;
}

static int end_section(struct dump_state *d)
{
	if (!d->section_open)
		return 0;
	d->section_open = 0;
	return keep(d, img_section_end(d->w));
}

static int recv_region(struct dump_state *d, int fd, uint64_t len)
{
	struct dump_region *r;
	int ret;

	if (len < sizeof(struct proc_region) || len - sizeof(struct proc_region) > 8192)
		return err_set(-EBADMSG, "the agent sent a bad region record");
	if (d->nregions == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		void *p = realloc(d->regions, cap * sizeof(*d->regions));

		if (!p)
			return -ENOMEM;
		d->regions = p;
		d->cap = cap;
	}
	r = &d->regions[d->nregions];
	memset(r, 0, sizeof(*r));
	ret = chan_read(fd, &r->rec, sizeof(r->rec));
	if (ret)
		return ret;
	r->path = calloc(1, len - sizeof(r->rec) + 1);
	if (!r->path)
		return -ENOMEM;
	ret = chan_read(fd, r->path, len - sizeof(r->rec));
	if (ret) {
		free(r->path);
		return ret;
	}
	r->rec.path_len = (uint32_t)strlen(r->path) + 1;
	r->rec.stored_pages = 0;
	d->nregions++;
	ret = end_section(d);
	if (ret)
		return ret;
	ret = pimg_mem_begin(d->w, &r->rec, r->path);
	d->section_open = !ret;
	return keep(d, ret);
}

static int recv_pages(struct dump_state *d, int fd, uint64_t len)
{
	struct dump_region *r = d->nregions ? &d->regions[d->nregions - 1] : NULL;
	struct proc_pages pg;
	uint64_t bytes;
	int ret;

	if (!r || len < sizeof(pg))
		return err_set(-EBADMSG, "the agent sent pages outside a region");
	ret = chan_read(fd, &pg, sizeof(pg));
	if (ret)
		return ret;
	bytes = pg.npages * PROC_PAGE_SIZE;
	if (len - sizeof(pg) != bytes || pg.addr < r->rec.start || pg.addr > r->rec.end ||
	    bytes > r->rec.end - pg.addr)
		return err_set(-EBADMSG, "the agent sent pages outside their region");
	if (r->nruns == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		void *p = realloc(r->runs, cap * sizeof(*r->runs));

		if (!p)
			return -ENOMEM;
		r->runs = p;
		r->cap = cap;
	}
	r->runs[r->nruns++] = pg;
	r->rec.stored_pages += pg.npages;
	while (bytes) {
		size_t n = bytes < COPY_SIZE ? (size_t)bytes : COPY_SIZE, room_len = 0;
		void *room = d->buf;

		/* straight into the chunk being filled, not copied there; once
		 * the writer failed, read and dropped */
		if (!d->werr)
			keep(d, img_write_room(d->w, &room, &room_len));
		if (d->werr)
			room = d->buf;
		else if (room_len < n)
			n = room_len;
		ret = chan_read(fd, room, n);
		if (ret)
			return ret;
		if (!d->werr)
			keep(d, img_write_done(d->w, n));
		bytes -= n;
	}
	return 0;
}

static int recv_thread(struct dump_state *d, int fd, uint64_t len)
{
	struct proc_thread t;
	char name[32];
	void *uc;
	int ret;

	if (len < sizeof(t) || len - sizeof(t) > (1u << 20))
		return err_set(-EBADMSG, "the agent sent a bad thread record");
	ret = chan_read(fd, &t, sizeof(t));
	if (ret)
		return ret;
	uc = malloc(len - sizeof(t) + 1);
	if (!uc)
		return -ENOMEM;
	ret = chan_read(fd, uc, len - sizeof(t));
	if (ret)
		goto out;
	snprintf(name, sizeof(name), "thread.%d", t.tid);
	ret = img_section_begin(d->w, "thread", name);
	if (!ret)
		ret = img_section_attr_u64(d->w, "tid", (uint64_t)t.tid);
	if (!ret)
		ret = img_write(d->w, &t, sizeof(t));
	if (!ret)
		ret = img_write(d->w, uc, len - sizeof(t));
	if (!ret)
		ret = img_section_end(d->w);
	ret = keep(d, ret);
	void *p = realloc(d->threads, (d->nthreads + 1) * sizeof(t));

	if (!p) {
		ret = -ENOMEM;
		goto out;
	}
	d->threads = p;
	d->threads[d->nthreads++] = t;
out:
	free(uc);
	return ret;
}

/* A descriptor: its record, and its data (a pipe's contents, an unlinked
 * file's bytes) as section "fd.<n>". */
/* A regular file the process has open for reading and writing: its
 * contents go into the image with its record (PROC_FD_FILE_SAVED, fds.h),
 * read here by path while the process is parked; the file open, or -1
 * (too large, or its path names another file now: the checkpoint fails). */
static int open_saved(struct dump_state *d, const struct dump_fd *f)
{
	const char *exe = d->cwd ? d->cwd + strlen(d->cwd) + 1 : "", *base = strrchr(exe, '/');
	uint64_t max = cfg_u64(CFG_FILE_SAVE_MAX);
	struct stat st;
	char *msg = NULL;
	int fd = -1;

	if (f->rec.size > max) {
		if (asprintf(&msg, "cannot checkpoint: process %d (%.15s): fd %d holds %llu bytes, "
			     "over file_save_max (%llu), open for reading and writing: %s",
			     d->header.pid, base ? base + 1 : exe, f->rec.fd,
			     (unsigned long long)f->rec.size, (unsigned long long)max, f->path) < 0)
			msg = NULL;
	} else {
		fd = open(f->path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == f->rec.dev &&
		    st.st_ino == f->rec.ino)
			return fd;
		if (fd >= 0)
			close(fd);
		fd = -1;
		if (asprintf(&msg, "cannot checkpoint: process %d (%.15s): fd %d is open for reading "
			     "and writing, and its contents cannot be read: %s names another file now",
			     d->header.pid, base ? base + 1 : exe, f->rec.fd, f->path) < 0)
			msg = NULL;
	}
	d->refusal = msg;
	return fd;
}

/* size bytes of src into the open section (zeros past its end: the
 * record's size is what counts). */
static void copy_contents(struct dump_state *d, int src, uint64_t size)
{
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < COPY_SIZE ? (size_t)(size - off) : COPY_SIZE;
		ssize_t got = pread(src, d->buf, n, (off_t)off);

		if (got <= 0) {
			memset(d->buf, 0, n);
			got = (ssize_t)n;
		}
		if (!d->werr)
			keep(d, img_write(d->w, d->buf, (size_t)got));
		off += (uint64_t)got;
	}
}

static int recv_fd(struct dump_state *d, int fd, uint64_t len)
{
	struct dump_fd *f;
	char name[32];
	void *p;
	int ret, src = -1;

	if (len < sizeof(struct proc_fd))
		return err_set(-EBADMSG, "the agent sent a bad descriptor record");
	p = realloc(d->fds, (d->nfds + 1) * sizeof(*d->fds));
	if (!p)
		return -ENOMEM;
	d->fds = p;
	f = &d->fds[d->nfds];
	memset(f, 0, sizeof(*f));
	ret = chan_read(fd, &f->rec, sizeof(f->rec));
	if (ret)
		return ret;
	if (f->rec.path_len == 0 || f->rec.path_len > 8192 ||
	    len != sizeof(f->rec) + f->rec.path_len + f->rec.data_len)
		return err_set(-EBADMSG, "the agent sent a bad descriptor record");
	f->path = calloc(1, f->rec.path_len + 1);
	if (!f->path)
		return -ENOMEM;
	d->nfds++;
	ret = chan_read(fd, f->path, f->rec.path_len);
	if (ret)
		return ret;
	f->rec.path_len = (uint32_t)strlen(f->path) + 1;
	if (f->rec.kind == PROC_FD_FILE && (f->rec.flags & O_ACCMODE) == O_RDWR && !d->refusal &&
	    cfg_u64(CFG_FILE_SAVE_MAX))
		src = open_saved(d, f);
	if (!f->rec.data_len && src < 0)
		return 0;
	snprintf(name, sizeof(name), "fd.%d", f->rec.fd);
	ret = img_section_begin(d->w, "file", name);
	if (!ret)
		ret = img_section_attr(d->w, "path", f->path);
	keep(d, ret);
	if (src >= 0) {   /* the contents, then the agent's lock lines */
		copy_contents(d, src, f->rec.size);
		close(src);
	}
	for (uint64_t left = f->rec.data_len; left;) {
		size_t n = left < COPY_SIZE ? (size_t)left : COPY_SIZE;

		ret = chan_read(fd, d->buf, n);
		if (ret)
			return ret;
		if (left == f->rec.data_len && f->rec.kind == PROC_FD_SOCKET &&
		    n >= sizeof(struct proc_socket))
			outside_socket(d, &f->rec, d->buf);
		if (!d->werr)
			keep(d, img_write(d->w, d->buf, n));
		left -= n;
	}
	if (src >= 0) {
		f->rec.kind = PROC_FD_FILE_SAVED;
		f->rec.data_len += f->rec.size;
	}
	return keep(d, img_section_end(d->w));
}

/* Has the process dev/ino open for writing (a descriptor's record saves
 * it, or cuts it back)? One open only for reading restores no contents:
 * the file is saved as a closed one */
static int fd_open(uint64_t dev, uint64_t ino, void *arg)
{
	const struct dump_state *d = arg;

	for (size_t i = 0; i < d->nfds; i++)
		if (d->fds[i].rec.dev == dev && d->fds[i].rec.ino == ino &&
		    (d->fds[i].rec.flags & O_ACCMODE) != O_RDONLY)
			return 1;
	return 0;
}

/* Is path one of the tree's list? */
static int in_tree(const struct proc_written_tree *t, const char *path)
{
	for (size_t i = 0; t && i < t->n; i++)
		if (!strcmp(t->paths[i], path))
			return 1;
	return 0;
}

/* The "written" section: own[0..n) (the process's own list), and for the
 * first process the tree's list too (the tree's files are saved once, in
 * its image: another process's own ones that are in it are left out) */
static int dump_written(struct dump_state *d, const char **own, uint32_t n)
{
	const struct proc_written_tree *t = d->tree;
	size_t total = 0, more = t && t->first ? t->n : 0;
	const char **paths = calloc((size_t)n + more + 1, sizeof(*paths));
	char who[32];

	if (!paths)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		if ((t && t->first) || !in_tree(t, own[i]))
			paths[total++] = own[i];
	for (size_t i = 0; i < more; i++) {
		size_t k;

		for (k = 0; k < n && strcmp(own[k], t->paths[i]) != 0; k++)
			;
		if (k == n)
			paths[total++] = t->paths[i];
	}
	snprintf(who, sizeof(who), "process %d", d->header.pid);
	if (!d->werr)
		keep(d, proc_written_dump(d->w, paths, total, who, fd_open, d));
	d->written = 1;
	free(paths);
	return 0;
}

/* The files the program wrote: the "written" section, with those it has
 * closed, read here by path while it is parked (written.c) */
static int recv_written(struct dump_state *d, int fd, uint64_t len)
{
	uint64_t size = len - sizeof(struct proc_written_list);
	struct proc_written_list h;
	const char **paths = NULL;
	char *buf;
	uint32_t n = 0;
	int ret;

	if (len < sizeof(h) || size > (uint64_t)STS_WRITTEN_MAX * STS_WRITTEN_PATH || d->written)
		return err_set(-EBADMSG, "the agent sent a bad list of written files");
	buf = malloc(size + 1);
	if (!buf)
		return -ENOMEM;
	ret = chan_read(fd, &h, sizeof(h));
	ret = ret ? ret : chan_read(fd, buf, size);
	if (ret)
		goto out;
	buf[size] = 0;
	paths = calloc((size_t)h.n + 1, sizeof(*paths));
	if (!paths) {
		ret = -ENOMEM;
		goto out;
	}
	for (char *p = buf; p < buf + size && n < h.n; p += strlen(p) + 1)
		paths[n++] = p;
	if (h.dropped)
		fprintf(stderr, "stasis: process %d: %u opens for writing since the last checkpoint "
			"found the list of %d written files full: those files are not saved (a "
			"restart finds them as they are then)\n", d->header.pid, h.dropped,
			STS_WRITTEN_MAX);
	ret = dump_written(d, paths, n);
out:
	free(paths);
	free(buf);
	return ret;
}

/* The "fds" section: every descriptor record with its path. */
static int write_fds(struct dump_state *d)
{
	uint64_t n = d->nfds;
	int ret = img_section_begin(d->w, "fdtable", "fds");

	if (!ret)
		ret = img_write(d->w, &n, sizeof(n));
	for (size_t i = 0; !ret && i < d->nfds; i++) {
		ret = img_write(d->w, &d->fds[i].rec, sizeof(d->fds[i].rec));
		if (!ret)
			ret = img_write(d->w, d->fds[i].path, d->fds[i].rec.path_len);
	}
	if (!ret)
		ret = img_section_end(d->w);
	return ret;
}

/* The "process" section: the table of contents of a process image. */
static int write_process(struct dump_state *d)
{
	struct img_writer *w = d->w;
	int ret;

	d->header.nregions = (uint32_t)d->nregions;
	d->header.nthreads = (uint32_t)d->nthreads;
	ret = img_section_begin(w, "process", "process");
	if (!ret)
		ret = img_section_attr_u64(w, "pid", (uint64_t)d->header.pid);
	if (!ret)
		ret = img_section_attr_u64(w, "format", PROC_FORMAT_VERSION);
	if (!ret)
		ret = img_write(w, &d->header, sizeof(d->header));
	if (!ret)
		ret = img_write(w, d->cwd, d->header.cwd_len);
	if (!ret)
		ret = img_write(w, d->sa, sizeof(d->sa));
	if (!ret && d->nthreads)
		ret = img_write(w, d->threads, d->nthreads * sizeof(*d->threads));
	for (size_t i = 0; !ret && i < d->nregions; i++) {
		struct dump_region *r = &d->regions[i];
		uint64_t nruns = r->nruns;

		ret = img_write(w, &r->rec, sizeof(r->rec));
		if (!ret)
			ret = img_write(w, r->path, r->rec.path_len);
		if (!ret)
			ret = img_write(w, &nruns, sizeof(nruns));
		if (!ret && nruns)
			ret = img_write(w, r->runs, nruns * sizeof(*r->runs));
	}
	if (!ret)
		ret = img_section_end(w);
	return ret;
}

static int recv_error(int fd, uint64_t len)
{
	char msg[512];
	size_t n = len < sizeof(msg) - 1 ? (size_t)len : sizeof(msg) - 1;
	int ret = chan_read(fd, msg, n);

	if (ret)
		return ret;
	msg[n] = 0;
	for (uint64_t rest = len - n; rest;) {
		char junk[256];
		size_t k = rest < sizeof(junk) ? (size_t)rest : sizeof(junk);

		ret = chan_read(fd, junk, k);
		if (ret)
			return ret;
		rest -= k;
	}
	return err_set(-ENOTSUP, "%s", msg);
}

static int dump_loop(struct dump_state *d, int fd, struct proc_dump_info *info)
{
	struct proc_msg m;
	int ret;

	for (;;) {
		ret = proc_recv(fd, &m);
		if (ret == -EPIPE)
			return err_set(ret, "the program ended during the checkpoint");
		if (ret)
			return ret;
		switch (m.type) {
		case PROC_MSG_HEADER:
			if (m.len < sizeof(d->header) || m.len - sizeof(d->header) > 65536)
				return err_set(-EBADMSG, "the agent sent a bad process header");
			ret = chan_read(fd, &d->header, sizeof(d->header));
			if (ret)
				return ret;
			d->cwd = calloc(1, m.len - sizeof(d->header) + 1);
			if (!d->cwd)
				return -ENOMEM;
			ret = chan_read(fd, d->cwd, m.len - sizeof(d->header));
			/* cwd and executable: two strings, the last byte a NUL */
			d->header.cwd_len = (uint32_t)(m.len - sizeof(d->header));
			if (!ret && (d->header.cwd_len == 0 || d->cwd[d->header.cwd_len - 1]))
				return err_set(-EBADMSG, "the agent sent a bad process header");
			info->pid = d->header.pid;
			break;
		case PROC_MSG_SIGACTS:
			if (m.len != sizeof(d->sa))
				return err_set(-EBADMSG, "the agent sent bad signal dispositions");
			ret = chan_read(fd, d->sa, sizeof(d->sa));
			break;
		case PROC_MSG_THREAD:
			ret = recv_thread(d, fd, m.len);
			break;
		case PROC_MSG_FD:
			if (d->section_open)
				return err_set(-EBADMSG, "the agent sent a descriptor among regions");
			ret = recv_fd(d, fd, m.len);
			break;
		case PROC_MSG_WRITTEN:
			if (d->section_open)
				return err_set(-EBADMSG, "the agent sent written files among regions");
			ret = recv_written(d, fd, m.len);
			break;
		case PROC_MSG_REGION:
			ret = recv_region(d, fd, m.len);
			break;
		case PROC_MSG_PAGES:
			ret = recv_pages(d, fd, m.len);
			break;
		case PROC_MSG_ERROR:
			return recv_error(fd, m.len);
		case PROC_MSG_END:
			if (!d->cwd || !d->nthreads)
				return err_set(-EBADMSG, "the agent's dump has no header or no thread");
			if (d->refusal)
				return err_set(-ENOTSUP, "%s", d->refusal);
			if (d->werr)
				return err_set(d->werr, "%s", d->wmsg);
			ret = end_section(d);
			if (!ret && d->tree && d->tree->first && !d->written)
				ret = dump_written(d, NULL, 0);   /* an agent without a list */
			if (!ret && d->werr)
				return err_set(d->werr, "%s", d->wmsg);
			if (!ret)
				ret = write_fds(d);
			if (!ret)
				ret = write_process(d);
			info->threads = (uint32_t)d->nthreads;
			info->regions = (uint32_t)d->nregions;
			return ret;
		default:
			return err_set(-EBADMSG, "the agent sent an unexpected record %u", m.type);
		}
		if (ret)
			return ret;
	}
}

int proc_dump_recv(int channel, struct img_writer *w, const struct proc_written_tree *tree,
		   struct proc_dump_info *info)
{
	struct dump_state d;
	int ret;

	memset(&d, 0, sizeof(d));
	memset(info, 0, sizeof(*info));
	d.w = w;
	d.tree = tree;
	d.buf = malloc(COPY_SIZE);
	if (!d.buf)
		return -ENOMEM;
	ret = dump_loop(&d, channel, info);
	for (size_t i = 0; i < d.nregions; i++)
		info->stored_bytes += d.regions[i].rec.stored_pages * PROC_PAGE_SIZE;
	if (!ret && d.nfds) {
		/* the records, for checks across the processes of a tree */
		info->fds = calloc(d.nfds, sizeof(*info->fds));
		if (!info->fds)
			ret = -ENOMEM;
		for (size_t i = 0; !ret && i < d.nfds; i++)
			info->fds[i] = d.fds[i].rec;
		info->nfds = ret ? 0 : d.nfds;
	}
	state_free(&d);
	return ret;
}

int proc_dump(int channel, struct img_writer *w, struct proc_dump_info *info)
{
	int ret = proc_send(channel, PROC_CMD_CHECKPOINT, NULL, 0);

	memset(info, 0, sizeof(*info));
	if (ret)
		return err_set(ret, "the program's agent is gone (%s)", strerror(-ret));
	ret = proc_dump_recv(channel, w, NULL, info);
	free(info->fds);
	info->fds = NULL;
	info->nfds = 0;
	return ret;
}

int proc_dump_finish(int channel, int stop)
{
	return proc_send(channel, stop ? PROC_CMD_EXIT : PROC_CMD_RESUME, NULL, 0);
}
