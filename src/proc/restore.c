/* restore.c - bring a process image back: checks, namespaces, restore stream.
 *
 * Process tree of a restart (docs/transparent.md):
 *   stasis restart (coordinator)
 *     `- nsparent: unshare(user, pid, mount), writes its uid/gid maps
 *          `- nsinit: pid 1 of the new PID namespace, mounts its /proc,
 *             reaps, and reports the program's wait status on a pipe
 *               `- the program: clone3 with set_tid = the checkpointed pid,
 *                  execs stasis-restore, which becomes the program again
 * The coordinator then writes the restore stream into the restorer's pipe.
 */
#include "proc/proc.h"
#include "proc/fds.h"
#include "proc/proc_format.h"
#include "proc/proc_internal.h"
#include "proc/written.h"

#include "common/err.h"
#include "common/log.h"
#include "image/image.h"
#include "pimg/pimg_lazy.h"
#include "pimg/pimg_mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/timerfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef STASIS_PROC_BUILD_DIR
#define STASIS_PROC_BUILD_DIR "."
#endif
#ifndef STASIS_PROC_REL_LIBDIR
#define STASIS_PROC_REL_LIBDIR "lib/stasis"
#endif

#define COPY_SIZE (4u << 20)
/* Descriptor numbers an external descriptor's origin may have (the
 * restart's inherited ones are noted up to it) */
#define INHERITED_MAX 65536
/* Raw chunks up to this size are read by the restorer itself (its piece
 * table holds one piece per page of such a chunk). */
#define COPY_MAX_CHUNK (64u << 20)

static const char *find_file(const char *env, const char *name, char *buf, size_t len)
{
	const char *v = getenv(env);

	char exe[PATH_MAX - 64];
	ssize_t n;

	if (v && *v)
		return v;
	/* installed: <prefix>/bin/stasis and <prefix>/<libdir>/stasis/<name> */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(buf, len, "%s/../%s/%s", exe, STASIS_PROC_REL_LIBDIR, name);
			if (access(buf, R_OK) == 0)
				return buf;
		}
	}
	snprintf(buf, len, "%s/%s", STASIS_PROC_BUILD_DIR, name);
	return buf;
}

const char *proc_agent_path(void)
{
	static char buf[PATH_MAX];

	return find_file("STASIS_INJECT_LIB", "libstasis-inject.so", buf, sizeof(buf));
}

const char *proc_restorer_path(void)
{
	static char buf[PATH_MAX];

	return find_file("STASIS_RESTORER", "stasis-restore", buf, sizeof(buf));
}

int proc_agent_env(int fd, char *ld_preload, size_t len, char *fd_value, size_t fd_len)
{
	const char *agent = proc_agent_path();
	const char *old = getenv("LD_PRELOAD");
	int n;

	if (access(agent, R_OK) != 0)
		return err_set(-ENOENT, "the Stasis agent %s is missing (set STASIS_INJECT_LIB)", agent);
	n = old && *old ? snprintf(ld_preload, len, "%s:%s", agent, old)
			: snprintf(ld_preload, len, "%s", agent);
	if (n < 0 || (size_t)n >= len)
		return err_set(-ENAMETOOLONG, "LD_PRELOAD is too long");
	snprintf(fd_value, fd_len, "%d", fd);
	return 0;
}

/* ---- the image's table of contents ---- */

struct image_region {
	struct proc_region rec;
	char *path;
	uint64_t nruns;
	struct proc_pages *runs;
	int section;
	int shm_fd;                 /* shared memory of the tree: its descriptor, else -1 */
	int shm_fill;               /* this process fills it (the first that maps it) */
	int lazy;                   /* its runs are served lazily, when the image's lazy_on */
};


/* A pipe of the restored tree (docs/transparent.md, "Process trees"):
 * made once by the namespace's init, refilled, and its ends placed in
 * every process that has them, whichever process holds the other end. */
struct tree_pipe {
	uint64_t ino;
	uint32_t size;
	int flags[2];               /* F_GETFL of the read and write ends; -1: none */
	void *data;                 /* what it held (from a read end's record) */
	uint64_t data_len;
	int fd[2];
};

/* A UNIX socket pair of the tree (fds.h, proc_socket_pair_of): the record
 * of each end (the first process's that holds it), made once by init. */
struct tree_sock {
	uint64_t key;
	struct proc_fd_entry end[2];
	int have[2];
	int fd[2];
};
static struct tree_sock *g_socks;
static size_t g_nsocks;

/* Where a process has an end of one. */
struct pipe_ref {
	int32_t fd;
	uint32_t cloexec;
	uint32_t end;               /* 0 read, 1 write */
	uint32_t pipe;              /* index in the tree's pipes */
};

static struct tree_pipe *g_pipes;   /* the tree being restored: its pipes */
static size_t g_npipes;
static int g_pipe_floor;             /* their ends wait above every process's numbers */

/* An open file description shared by descriptors of the tree (their
 * offset is one): opened once by the namespace's init at its offset. */
struct tree_file {
	char *path;
	uint32_t flags;
	uint64_t offset, size;
	const void *contents;   /* PROC_FD_FILE_SAVED: size bytes to write back */
	uint32_t mode;          /* with contents: made again with it if missing */
	int fd;
};

static struct tree_file *g_files;
static size_t g_nfiles;

struct image {
	struct img_reader *img;
	struct proc_fd_entry *fds;
	uint64_t nfds;
	struct pipe_ref *pipes;     /* its pipe ends, out of fds */
	size_t npipes;
	struct pipe_ref *files;     /* its shared file descriptions, out of fds */
	size_t nfiles;
	struct proc_fd_entry *locked;   /* those of them that hold locks (fd_file.c) */
	size_t nlocked;
	struct pipe_ref *socks;     /* its ends of the tree's socket pairs, out of fds */
	size_t nsocks;
	struct proc_header header;
	char *cwd;
	struct proc_sigaction sa[PROC_NSIG];
	struct proc_thread *threads;
	struct image_region *regions;
	uint64_t off;          /* read position in the process section */
	int section;
	struct pimg_lazy_piece *lazy;   /* the runs of regions to serve lazily */
	unsigned nlazy;
	int lazy_fd;                /* our end of the restorer's LAZY_FD, or -1 */
	int lazy_on;                /* they are served: the stream leaves them out */
};

static void image_free(struct image *im)
{
	if (im->nlazy && im->lazy_fd >= 0)
		close(im->lazy_fd);
	free(im->lazy);
	free(im->pipes);
	free(im->files);
	free(im->socks);
	proc_fds_free(im->locked, im->nlocked);
	for (uint64_t i = 0; i < im->nfds; i++) {
		free(im->fds[i].path);
		free(im->fds[i].data);
	}
	free(im->fds);
	if (im->regions)
		for (uint32_t i = 0; i < im->header.nregions; i++) {
			free(im->regions[i].path);
			free(im->regions[i].runs);
		}
	free(im->regions);
	free(im->threads);
	free(im->cwd);
}

static int take(struct image *im, void *buf, size_t len)
{
	ssize_t n = img_read(im->img, (unsigned)im->section, im->off, buf, len);

	if (n < 0)
		return (int)n;
	if ((size_t)n != len)
		return err_set(-EBADMSG, "the image's process section is truncated");
	im->off += len;
	return 0;
}

static int load_fds(struct image *im);

static int image_load(struct img_reader *img, struct image *im)
{
	struct proc_header *h = &im->header;
	int ret;

	memset(im, 0, sizeof(*im));
	im->img = img;
	im->lazy_fd = -1;
	im->section = img_section_find(img, "process");
	if (im->section < 0)
		return err_set(-EINVAL, "the image is not a process image (no \"process\" section)");
	ret = take(im, h, sizeof(*h));
	if (ret)
		return ret;
	/* version 1 records are version 2's without external descriptors and
	 * with a nice value of 0 (the header's padding then) */
	if (h->version < 1 || h->version > PROC_FORMAT_VERSION)
		return err_set(-EPROTO, "the image's process records have version %u, this stasis "
			       "reads 1 to %u", h->version, PROC_FORMAT_VERSION);
	h->version = PROC_FORMAT_VERSION;   /* what the restorer checks */
	if (h->cwd_len == 0 || h->cwd_len > 2 * PATH_MAX + 2 || h->nthreads == 0 || h->nthreads > 65536 ||
	    h->nregions > 1000000)
		return err_set(-EBADMSG, "the image's process header is damaged");
	im->cwd = calloc(1, h->cwd_len + 1);
	im->threads = calloc(h->nthreads, sizeof(*im->threads));
	im->regions = calloc(h->nregions ? h->nregions : 1, sizeof(*im->regions));
	if (!im->cwd || !im->threads || !im->regions)
		return -ENOMEM;
	ret = take(im, im->cwd, h->cwd_len);
	if (!ret)
		ret = take(im, im->sa, sizeof(im->sa));
	if (!ret)
		ret = take(im, im->threads, h->nthreads * sizeof(*im->threads));
	for (uint32_t i = 0; !ret && i < h->nregions; i++) {
		struct image_region *r = &im->regions[i];
		uint64_t bytes = 0;

		r->shm_fd = -1;
		ret = take(im, &r->rec, sizeof(r->rec));
		if (ret)
			break;
		if (r->rec.path_len == 0 || r->rec.path_len > PATH_MAX)
			return err_set(-EBADMSG, "the image's region table is damaged");
		r->path = calloc(1, r->rec.path_len + 1);
		if (!r->path)
			return -ENOMEM;
		ret = take(im, r->path, r->rec.path_len);
		if (!ret)
			ret = take(im, &r->nruns, sizeof(r->nruns));
		if (ret)
			break;
		if (r->nruns > (r->rec.end - r->rec.start) / PROC_PAGE_SIZE)
			return err_set(-EBADMSG, "the image's region table is damaged");
		if (r->nruns) {
			r->runs = calloc(r->nruns, sizeof(*r->runs));
			if (!r->runs)
				return -ENOMEM;
			ret = take(im, r->runs, r->nruns * sizeof(*r->runs));
		}
		if (ret)
			break;
		for (uint64_t k = 0; k < r->nruns; k++)
			bytes += r->runs[k].npages * PROC_PAGE_SIZE;
		r->section = pimg_mem_find(img, &r->rec, r->path, bytes);
		if (r->section < 0)
			return r->section;
	}
	return ret ? ret : load_fds(im);
}

/* The descriptor table ("fds" section; none in an image without one). */
static int load_fds(struct image *im)
{
	int sec = img_section_find(im->img, "fds");
	char name[32];
	int ret;

	if (sec < 0)
		return 0;
	im->section = sec;
	im->off = 0;
	ret = take(im, &im->nfds, sizeof(im->nfds));
	if (ret)
		return ret;
	if (im->nfds > 1000000)
		return err_set(-EBADMSG, "the image's descriptor table is damaged");
	im->fds = calloc(im->nfds ? im->nfds : 1, sizeof(*im->fds));
	if (!im->fds)
		return -ENOMEM;
	for (uint64_t i = 0; i < im->nfds; i++) {
		struct proc_fd_entry *f = &im->fds[i];

		ret = take(im, &f->rec, sizeof(f->rec));
		if (ret)
			return ret;
		if (f->rec.path_len == 0 || f->rec.path_len > PATH_MAX || f->rec.fd < 0 ||
		    (f->rec.kind == PROC_FD_EXTERNAL && (f->rec.origin < 0 || f->rec.origin >= INHERITED_MAX)))
			return err_set(-EBADMSG, "the image's descriptor table is damaged");
		f->path = calloc(1, f->rec.path_len + 1);
		if (!f->path)
			return -ENOMEM;
		ret = take(im, f->path, f->rec.path_len);
		if (ret)
			return ret;
		if (!f->rec.data_len)
			continue;
		snprintf(name, sizeof(name), "fd.%d", f->rec.fd);
		sec = img_section_find(im->img, name);
		if (sec < 0)
			return err_set(-EBADMSG, "the image has no section %s", name);
		f->data = malloc(f->rec.data_len);
		if (!f->data)
			return err_set(-ENOMEM, "no memory for the %llu bytes of fd %d",
				       (unsigned long long)f->rec.data_len, f->rec.fd);
		ssize_t got = img_read(im->img, (unsigned)sec, 0, f->data, f->rec.data_len);

		if (got < 0)
			return (int)got;
		if ((uint64_t)got != f->rec.data_len)
			return err_set(-EBADMSG, "section %s is truncated", name);
	}
	return 0;
}

/* Files the image maps must be the ones it was taken with. */
static int check_files(const struct image *im)
{
	for (uint32_t i = 0; i < im->header.nregions; i++) {
		const struct image_region *r = &im->regions[i];
		struct stat st;
		uint64_t mtime;

		if (r->rec.kind != PROC_REGION_FILE_PRIVATE && r->rec.kind != PROC_REGION_FILE_SHARED)
			continue;
		if (stat(r->path, &st) != 0)
			return err_set(-ENOENT, "mapped file %s is missing", r->path);
		mtime = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
		if ((uint64_t)st.st_size != r->rec.file_size || mtime != r->rec.file_mtime_ns)
			return err_set(-ESTALE, "mapped file %s changed since the checkpoint "
				       "(size or modification time differs)", r->path);
	}
	return 0;
}

/* ---- namespaces ---- */

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

static void child_fail(int report_fd, const char *what, int err)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "stasis: restart: %s: %s\n", what, strerror(err));

	if (n > 0 && write(2, msg, (size_t)n) < 0) {
		/* nowhere else to say it */
	}
	(void)report_fd;
	_exit(42);   /* the coordinator knows the message was printed */
}

/* Keep the capabilities the restorer needs across execve when we are not
 * uid 0 inside the namespace (identity-mapped unprivileged user). */
static void keep_caps(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	static const int caps[] = { CAP_SYS_ADMIN, CAP_SYS_RESOURCE, 40 /* CAP_CHECKPOINT_RESTORE */ };

	if (getuid() == 0)
		return;
	if (syscall(SYS_capget, &hdr, data) != 0)
		return;
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		data[caps[i] / 32].inheritable |= 1u << (caps[i] % 32);
	if (syscall(SYS_capset, &hdr, data) != 0)
		return;
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, caps[i], 0, 0);
}

/* ---- descriptors from outside the job ---- */

/* The descriptors this stasis inherited, open before main(): `stasis
 * restart` gives the one of number N to the program's external descriptors
 * (PROC_FD_EXTERNAL) whose launch number was N, as it gives its 0, 1, 2. */
static uint64_t inherited[INHERITED_MAX / 64];

__attribute__((constructor)) static void note_inherited(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	while (d && (e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd > 2 && fd < INHERITED_MAX &&
		    fd != dirfd(d))
			inherited[fd / 64] |= 1ull << (fd % 64);
	}
	if (d)
		closedir(d);
}

/* Does the restart hold the descriptor of number origin it inherited? */
/* Origin 0-2: a copy of the job's standard input or output at another
 * number (a shell's saved stdout), which is the restart's. */
static int have_inherited(int origin)
{
	if (origin >= 0 && origin <= 2)
		return fcntl(origin, F_GETFD) >= 0;
	return origin > 2 && origin < INHERITED_MAX && (inherited[origin / 64] >> (origin % 64) & 1) &&
	       fcntl(origin, F_GETFD) >= 0;
}

static const char *external_what(const struct proc_fd_entry *f)
{
	if (S_ISSOCK(f->rec.mode))
		return "a socket";
	if (S_ISCHR(f->rec.mode))
		return "a terminal";
	return strncmp(f->path, "pipe:", 5) == 0 ? "a pipe" : "a FIFO";
}

/* One warning line for each external descriptor the restart cannot give. */
static void warn_externals(const struct image *im)
{
	for (uint64_t i = 0; i < im->nfds; i++) {
		const struct proc_fd_entry *f = &im->fds[i];

		if (f->rec.kind == PROC_FD_EXTERNAL && !have_inherited(f->rec.origin))
			log_warn("fd %d is %s from outside the job and stasis restart has no fd %d: "
				 "the program gets /dev/null there", f->rec.fd, external_what(f),
				 f->rec.origin);
	}
}

static void close_pipes(void);

/* Every descriptor in place: what is left (epoll watches, file locks),
 * the tree's shared descriptions first, so that a lock they hold is not
 * taken again through a descriptor of the same file (fd_file.c). */
static int finish_fds(const struct image *im)
{
	struct proc_fd_entry *all = calloc(im->nlocked + im->nfds + 1, sizeof(*all));
	int ret;

	if (!all)
		return err_set(-ENOMEM, "out of memory");
	memcpy(all, im->locked, im->nlocked * sizeof(*all));
	memcpy(all + im->nlocked, im->fds, im->nfds * sizeof(*all));
	ret = proc_fds_finish(all, im->nlocked + im->nfds);
	free(all);
	return ret;
}

/* Runs in the restored program's process, before exec of the restorer:
 * every descriptor of the image at its number. Our own three and the
 * inherited sources of external ones move above them first. */
static void setup_fds(const struct image *im, int *stream_fd, int *channel, int *image_fd,
		      int *lazy_fd)
{
	int floor = 3, *own[4] = { stream_fd, channel, image_fd, lazy_fd };
	int *src = calloc(im->nfds ? im->nfds : 1, sizeof(*src));

	if (!src)
		child_fail(-1, "cannot set up the descriptors", ENOMEM);
	for (size_t i = 0; i < im->npipes; i++)
		if (im->pipes[i].fd + 1 > floor)
			floor = im->pipes[i].fd + 1;
	for (size_t i = 0; i < im->nfiles; i++)
		if (im->files[i].fd + 1 > floor)
			floor = im->files[i].fd + 1;
	for (size_t i = 0; i < im->nsocks; i++)
		if (im->socks[i].fd + 1 > floor)
			floor = im->socks[i].fd + 1;
	for (uint64_t i = 0; i < im->nfds; i++) {
		if (im->fds[i].rec.fd + 1 > floor)
			floor = im->fds[i].rec.fd + 1;
		if (im->fds[i].rec.kind == PROC_FD_EXTERNAL && im->fds[i].rec.origin + 1 > floor)
			floor = im->fds[i].rec.origin + 1;
	}
	for (int i = 0; i < 4; i++) {
		int n;

		if (*own[i] < 0)
			continue;   /* no lazy restore */
		n = fcntl(*own[i], F_DUPFD, floor);
		if (n < 0)
			child_fail(-1, "cannot move a descriptor out of the way", errno);
		close(*own[i]);
		*own[i] = n;
	}
	for (uint64_t i = 0; i < im->nfds; i++) {
		const struct proc_fd *r = &im->fds[i].rec;
		int fd;

		src[i] = -1;
		if (r->kind != PROC_FD_EXTERNAL)
			continue;
		fd = have_inherited(r->origin) ? dup(r->origin)
					       : open("/dev/null", (int)(r->flags & O_ACCMODE) | O_CLOEXEC);
		if (fd < 0 || (src[i] = fcntl(fd, F_DUPFD_CLOEXEC, floor)) < 0)
			child_fail(-1, "cannot take a descriptor from outside the job", errno);
		close(fd);
	}
	/* the tree's pipes and shared files first: an epoll may watch them */
	for (size_t k = 0; k < im->npipes; k++) {
		const struct pipe_ref *r = &im->pipes[k];

		/* close-on-exec is the restorer's to set (KEEP_FDS): the exec
		 * of the restorer would close it here */
		if (dup2(g_pipes[r->pipe].fd[r->end], r->fd) < 0)
			child_fail(-1, "cannot place a pipe of the tree", errno);
	}
	for (size_t k = 0; k < im->nfiles; k++) {
		const struct pipe_ref *r = &im->files[k];

		if (dup2(g_files[r->pipe].fd, r->fd) < 0)
			child_fail(-1, "cannot place a shared file of the tree", errno);
	}
	for (size_t k = 0; k < im->nsocks; k++) {
		const struct pipe_ref *r = &im->socks[k];
		const struct tree_sock *t = &g_socks[r->pipe];

		if (dup2(t->fd[r->end], r->fd) < 0 ||
		    fcntl(r->fd, F_SETFL, (int)(t->end[r->end].rec.flags & O_NONBLOCK)) != 0)
			child_fail(-1, "cannot place a socket of the tree", errno);
	}
	/* their copies go now (this process's children have theirs): closed
	 * after the locks are taken, they would drop this process's POSIX
	 * locks on those files */
	close_pipes();
	if (proc_fds_open(im->fds, im->nfds, floor + 3) != 0 || finish_fds(im) != 0) {
		char msg[512];
		int n = snprintf(msg, sizeof(msg), "stasis: restart: %s\n", err_msg());

		if (n > 0 && write(2, msg, (size_t)n) < 0) {
			/* nowhere else to say it */
		}
		_exit(42);
	}
	for (uint64_t i = 0; i < im->nfds; i++)
		if (src[i] >= 0) {
			if (dup2(src[i], im->fds[i].rec.fd) < 0)
				child_fail(-1, "cannot place a descriptor from outside the job", errno);
			close(src[i]);
		}
	free(src);
}

struct clone_args3 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal;
	uint64_t stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

static void ignore_job_signals(void)
{
	static const int sigs[] = { SIGINT, SIGQUIT, SIGTSTP, SIGTERM, SIGHUP, SIGUSR1 };
	sigset_t none;

	/* the coordinator blocks what its signalfd reads; we must not */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_IGN);
}

/* SIGTERM that reaches nsparent or nsinit goes on down to the program
 * (`stasis restart --no-signal-checkpoint` passes SIGTERM on). */
static volatile pid_t forward_to = -1;

static void forward_term(int sig)
{
	if (forward_to > 0)
		kill(forward_to, sig);
}

static void forward_sigterm(pid_t to)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward_term;
	sa.sa_flags = SA_RESTART;
	forward_to = to;
	sigaction(SIGTERM, &sa, NULL);
}


/* Take the pipe ends out of im's descriptors into the tree's pipes. */
static int take_pipes(struct image *im)
{
	uint64_t k = 0;

	im->pipes = calloc(im->nfds + 1, sizeof(*im->pipes));
	if (!im->pipes)
		return -ENOMEM;
	for (uint64_t i = 0; i < im->nfds; i++) {
		struct proc_fd_entry *f = &im->fds[i];
		uint32_t end = f->rec.kind == PROC_FD_PIPE_WRITE;
		size_t p;

		if (f->rec.fd + 4 > g_pipe_floor)
			g_pipe_floor = f->rec.fd + 4;
		if (f->rec.kind == PROC_FD_EXTERNAL && f->rec.origin + 4 > g_pipe_floor)
			g_pipe_floor = f->rec.origin + 4;
		if (f->rec.kind != PROC_FD_PIPE_READ && f->rec.kind != PROC_FD_PIPE_WRITE) {
			im->fds[k++] = *f;
			continue;
		}
		for (p = 0; p < g_npipes && g_pipes[p].ino != f->rec.ino; p++)
			;
		if (p == g_npipes) {
			struct tree_pipe *t = realloc(g_pipes, (g_npipes + 1) * sizeof(*t));

			if (!t)
				return -ENOMEM;
			g_pipes = t;
			memset(&g_pipes[p], 0, sizeof(g_pipes[p]));
			g_pipes[p].ino = f->rec.ino;
			g_pipes[p].flags[0] = g_pipes[p].flags[1] = -1;
			g_pipes[p].fd[0] = g_pipes[p].fd[1] = -1;
			g_npipes++;
		}
		if (f->rec.pipe_size > g_pipes[p].size)
			g_pipes[p].size = f->rec.pipe_size;
		if (g_pipes[p].flags[end] < 0)
			g_pipes[p].flags[end] = (int)f->rec.flags;
		if (f->rec.data_len && !g_pipes[p].data) {
			g_pipes[p].data = f->data;
			g_pipes[p].data_len = f->rec.data_len;
			f->data = NULL;
		}
		im->pipes[im->npipes++] = (struct pipe_ref){ f->rec.fd, f->rec.cloexec, end, (uint32_t)p };
		free(f->path);
		free(f->data);
	}
	im->nfds = k;
	return 0;
}


/* Take im's ends of UNIX socket pairs out of its descriptors into the
 * tree's pairs (a socket two processes share is one end of one pair). */
static int take_socks(struct image *im)
{
	uint64_t k = 0;

	im->socks = calloc(im->nfds + 1, sizeof(*im->socks));
	if (!im->socks)
		return -ENOMEM;
	for (uint64_t i = 0; i < im->nfds; i++) {
		struct proc_fd_entry *f = &im->fds[i];
		uint64_t key;
		int end;
		size_t g;

		if (!proc_socket_pair_of(f, &key, &end)) {
			im->fds[k++] = *f;
			continue;
		}
		for (g = 0; g < g_nsocks && g_socks[g].key != key; g++)
			;
		if (g == g_nsocks) {
			struct tree_sock *t = realloc(g_socks, (g_nsocks + 1) * sizeof(*t));

			if (!t)
				return -ENOMEM;
			g_socks = t;
			memset(&g_socks[g], 0, sizeof(g_socks[g]));
			g_socks[g].key = key;
			g_socks[g].fd[0] = g_socks[g].fd[1] = -1;
			g_nsocks++;
		}
		im->socks[im->nsocks++] = (struct pipe_ref){ f->rec.fd, f->rec.cloexec, (uint32_t)end, (uint32_t)g };
		if (!g_socks[g].have[end]) {
			g_socks[g].end[end] = *f;   /* its path and data now the pair's */
			g_socks[g].have[end] = 1;
		} else {
			free(f->path);
			free(f->data);
		}
	}
	im->nfds = k;
	return 0;
}

/* In the namespace's init: each pair once, refilled; an end no process
 * holds (its peer was outside the job) closed, as after a peer went away. */
static void make_socks(int status_fd)
{
	for (size_t g = 0; g < g_nsocks; g++) {
		struct tree_sock *t = &g_socks[g];
		const struct proc_fd_entry *e[2] = { t->have[0] ? &t->end[0] : NULL,
						     t->have[1] ? &t->end[1] : NULL };
		int ends[2];

		if (proc_socket_pair_make(e, ends) != 0)
			child_fail(status_fd, err_msg(), EIO);
		for (int k = 0; k < 2; k++) {
			t->fd[k] = t->have[k] ? fcntl(ends[k], F_DUPFD_CLOEXEC, g_pipe_floor) : -1;
			if (t->have[k] && t->fd[k] < 0)
				child_fail(status_fd, "cannot move a socket of the tree", errno);
			close(ends[k]);
		}
	}
}

/* Take the descriptors of pid that share a description (sh) out of im's. */
static int take_files(struct image *im, pid_t pid, const struct proc_fd_share *sh, size_t nsh)
{
	uint64_t k = 0;

	im->files = calloc(im->nfds + 1, sizeof(*im->files));
	im->locked = calloc(im->nfds + 1, sizeof(*im->locked));
	if (!im->files || !im->locked)
		return -ENOMEM;
	for (uint64_t i = 0; i < im->nfds; i++) {
		struct proc_fd_entry *f = &im->fds[i];
		size_t j;
		int g;

		for (j = 0; j < nsh && !(sh[j].pid == pid && sh[j].fd == f->rec.fd); j++)
			;
		if (j == nsh || (f->rec.kind != PROC_FD_FILE && f->rec.kind != PROC_FD_FILE_SAVED)) {
			im->fds[k++] = *f;
			continue;
		}
		g = sh[j].group;
		if ((size_t)g >= g_nfiles) {
			struct tree_file *t = realloc(g_files, (size_t)(g + 1) * sizeof(*t));

			if (!t)
				return -ENOMEM;
			g_files = t;
			memset(g_files + g_nfiles, 0, ((size_t)g + 1 - g_nfiles) * sizeof(*t));
			for (size_t x = g_nfiles; x <= (size_t)g; x++)
				g_files[x].fd = -1;
			g_nfiles = (size_t)g + 1;
		}
		if (!g_files[g].path) {
			g_files[g].path = f->path;
			g_files[g].flags = f->rec.flags;
			g_files[g].offset = f->rec.offset;
			g_files[g].size = f->rec.size;
			/* kept with its locks below (f->data is im->locked's) */
			g_files[g].contents = f->rec.kind == PROC_FD_FILE_SAVED ? f->data : NULL;
			g_files[g].mode = f->rec.mode & 07777;
			f->path = NULL;
		}
		im->files[im->nfiles++] = (struct pipe_ref){ f->rec.fd, f->rec.cloexec, 0, (uint32_t)g };
		if (f->data) {   /* its locks: taken again once it is in place */
			im->locked[im->nlocked++] = *f;
			continue;
		}
		free(f->path);
		free(f->data);
	}
	im->nfds = k;
	return 0;
}

/* In the namespace's init: each shared description once, as the restart
 * of a single descriptor does it (a file that grew is cut back). */
static void open_files(int status_fd)
{
	for (size_t g = 0; g < g_nfiles; g++) {
		struct tree_file *t = &g_files[g];
		int fd, acc = (int)(t->flags & O_ACCMODE);
		struct stat st;

		if (!t->path)
			continue;
		fd = open(t->path, (int)(t->flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC)) | O_CLOEXEC |
			  (t->contents ? O_CREAT : 0), (mode_t)t->mode);
		if (fd < 0)
			child_fail(status_fd, t->path, errno);
		if (t->contents) {
			int ret = proc_file_contents_back(fd, t->contents, t->size);

			if (ret)
				child_fail(status_fd, t->path, -ret);
		} else if (acc != O_RDONLY && fstat(fd, &st) == 0 && (uint64_t)st.st_size > t->size &&
			   ftruncate(fd, (off_t)t->size) != 0) {
			child_fail(status_fd, t->path, errno);
		}
		if (lseek(fd, (off_t)t->offset, SEEK_SET) < 0)
			child_fail(status_fd, t->path, errno);
		t->fd = fcntl(fd, F_DUPFD_CLOEXEC, g_pipe_floor);
		if (t->fd < 0)
			child_fail(status_fd, "cannot move a file of the tree", errno);
		close(fd);
	}
}

/* MAP_SHARED memory (anonymous, memfd, SysV) that regions of the tree map
 * more than once: one memfd, made by the namespace's init at a number
 * every process inherits into its restorer, which maps it there. */
struct tree_shm {
	uint64_t dev, ino, size;
	unsigned refs;
	int fd;
};

static struct tree_shm *g_shm;
static size_t g_nshm;

static void make_shm(int status_fd)
{
	for (size_t o = 0; o < g_nshm; o++) {
		int fd;

		if (g_shm[o].fd < 0)
			continue;
		fd = (int)syscall(SYS_memfd_create, "stasis-shm", 0u);
		if (fd < 0 || ftruncate(fd, (off_t)g_shm[o].size) != 0 || dup2(fd, g_shm[o].fd) < 0)
			child_fail(status_fd, "cannot make the tree's shared memory", errno);
		close(fd);
	}
}

static void free_pipes(void)
{
	free(g_shm);
	g_shm = NULL;
	g_nshm = 0;
	for (size_t g = 0; g < g_nfiles; g++)
		free(g_files[g].path);
	free(g_files);
	g_files = NULL;
	g_nfiles = 0;
	for (size_t g = 0; g < g_nsocks; g++)
		for (int e = 0; e < 2; e++) {
			free(g_socks[g].end[e].path);
			free(g_socks[g].end[e].data);
		}
	free(g_socks);
	g_socks = NULL;
	g_nsocks = 0;
	for (size_t p = 0; p < g_npipes; p++)
		free(g_pipes[p].data);
	free(g_pipes);
	g_pipes = NULL;
	g_npipes = 0;
	g_pipe_floor = 0;
}

/* In the namespace's init, before any process of the tree exists. */
static void make_pipes(int status_fd)
{
	for (size_t p = 0; p < g_npipes; p++) {
		struct tree_pipe *t = &g_pipes[p];
		int fd[2];

		if (pipe2(fd, O_CLOEXEC) != 0)
			child_fail(status_fd, "cannot make a pipe of the tree", errno);
		if (t->size > 65536 && fcntl(fd[1], F_SETPIPE_SZ, (int)t->size) < 0)
			child_fail(status_fd, "cannot size a pipe of the tree", errno);
		if (t->data_len && write(fd[1], t->data, t->data_len) != (ssize_t)t->data_len)
			child_fail(status_fd, "cannot refill a pipe of the tree", errno);
		for (int e = 0; e < 2; e++) {
			if (t->flags[e] >= 0)
				fcntl(fd[e], F_SETFL, t->flags[e] & (O_NONBLOCK | O_DIRECT));
			t->fd[e] = fcntl(fd[e], F_DUPFD_CLOEXEC, g_pipe_floor);
			if (t->fd[e] < 0)
				child_fail(status_fd, "cannot move a pipe of the tree", errno);
			close(fd[e]);
		}
	}
}

static void close_pipes(void)
{
	for (size_t p = 0; p < g_npipes; p++)
		for (int e = 0; e < 2; e++) {
			if (g_pipes[p].fd[e] >= 0)
				close(g_pipes[p].fd[e]);
			g_pipes[p].fd[e] = -1;
		}
	for (size_t g = 0; g < g_nfiles; g++) {
		if (g_files[g].fd >= 0)
			close(g_files[g].fd);
		g_files[g].fd = -1;
	}
	for (size_t g = 0; g < g_nsocks; g++)
		for (int e = 0; e < 2; e++) {
			if (g_socks[g].fd[e] >= 0)
				close(g_socks[g].fd[e]);
			g_socks[g].fd[e] = -1;
		}
}

/* One process of the tree being restored. */
struct rproc {
	struct proc_restore_proc p;
	struct image im;            /* loaded when p.img */
	int stream[2];              /* restore stream: the restorer reads [0] */
	int channel;                /* the agent's new channel end */
	int image_fd;
	int lazy_peer;              /* the restorer's LAZY_FD, or -1 */
	int32_t helper_tid;         /* its restorer's helper thread's (helper_tids) */
};

/* The coordinator's descriptors (its listening socket above all) must not
 * outlive it in the namespace's processes; those it inherited for the
 * program's external descriptors go on down, and each process's own. */
static void close_other_fds(const struct rproc *rp, size_t np, int status_fd)
{
	size_t cap = 1, n = 0;
	unsigned lo = 3;
	int *keep;

	for (size_t k = 0; k < np; k++)
		cap += 4 + rp[k].im.nfds;
	keep = calloc(cap, sizeof(*keep));
	if (!keep)
		child_fail(-1, "cannot set up the descriptors", ENOMEM);
	keep[n++] = status_fd;
	for (size_t k = 0; k < np; k++) {
		const struct image *im = &rp[k].im;

		if (!rp[k].p.img)
			continue;
		keep[n++] = rp[k].stream[0];
		keep[n++] = rp[k].channel;
		keep[n++] = rp[k].image_fd;
		if (rp[k].lazy_peer >= 0)
			keep[n++] = rp[k].lazy_peer;
		for (uint64_t i = 0; i < im->nfds; i++)
			if (im->fds[i].rec.kind == PROC_FD_EXTERNAL && have_inherited(im->fds[i].rec.origin))
				keep[n++] = im->fds[i].rec.origin;
	}
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned)keep[i] > lo)
			close_range(lo, (unsigned)keep[i] - 1, 0);
		if ((unsigned)keep[i] + 1 > lo)
			lo = (unsigned)keep[i] + 1;
	}
	close_range(lo, ~0u, 0);
	free(keep);
}

static int find_shm(struct rproc *rp, size_t np, int base)
{
	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; k < np; k++)
			for (uint32_t i = 0; rp[k].p.img && i < rp[k].im.header.nregions; i++) {
				struct image_region *r = &rp[k].im.regions[i];
				size_t o;

				if (r->rec.kind != PROC_REGION_SHARED_ANON || !r->rec.file_ino)
					continue;
				for (o = 0; o < g_nshm && !(g_shm[o].dev == r->rec.file_dev &&
							   g_shm[o].ino == r->rec.file_ino); o++)
					;
				if (pass == 0) {
					if (o == g_nshm) {
						struct tree_shm *t = realloc(g_shm, (g_nshm + 1) * sizeof(*t));

						if (!t)
							return -ENOMEM;
						g_shm = t;
						g_shm[o] = (struct tree_shm){ r->rec.file_dev, r->rec.file_ino, 0, 0, -1 };
						g_nshm++;
					}
					if (r->rec.file_offset + (r->rec.end - r->rec.start) > g_shm[o].size)
						g_shm[o].size = r->rec.file_offset + (r->rec.end - r->rec.start);
					g_shm[o].refs++;
					continue;
				}
				if (g_shm[o].refs < 2)
					continue;   /* mapped once: as for a single process */
				g_shm[o].fd = base + (int)o;
				r->shm_fd = g_shm[o].fd;
				/* the first process that maps it fills it (every region it
				 * has of it: the same bytes) before any other runs */
				r->shm_fill = 1;
				for (size_t e = 0; e < k; e++)
					for (uint32_t j = 0; rp[e].p.img && j < rp[e].im.header.nregions; j++)
						if (rp[e].im.regions[j].shm_fd == r->shm_fd)
							r->shm_fill = 0;
			}
	return 0;
}

/* Does the process map shared memory of the tree that another process
 * fills (find_shm)? */
static int maps_shm_of_others(const struct image *im)
{
	for (uint32_t i = 0; i < im->header.nregions; i++)
		if (im->regions[i].shm_fd >= 0 && !im->regions[i].shm_fill)
			return 1;
	return 0;
}

/* Close the restore descriptors of every process but process mine. */
static void close_theirs(const struct rproc *rp, size_t np, size_t mine)
{
	for (size_t k = 0; k < np; k++)
		if (k != mine && rp[k].p.img) {
			close(rp[k].stream[0]);
			close(rp[k].channel);
			close(rp[k].image_fd);
			if (rp[k].lazy_peer >= 0)
				close(rp[k].lazy_peer);
		}
}

/* Whether pid is one of the tree's processes. */
static int in_tree(const struct rproc *rp, size_t np, pid_t pid)
{
	for (size_t k = 0; k < np; k++)
		if (rp[k].p.pid == pid)
			return 1;
	return 0;
}

static pid_t clone_with_pid(pid_t pid)
{
	struct clone_args3 ca;
	pid_t tid = pid;

	memset(&ca, 0, sizeof(ca));
	ca.exit_signal = SIGCHLD;
	ca.set_tid = (uint64_t)(uintptr_t)&tid;
	ca.set_tid_size = 1;
	return (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
}

static void __attribute__((noreturn)) become(struct rproc *rp, size_t np, size_t i, const char *level);

/* Create process i (with its checkpointed pid) as a child of the caller. */
static pid_t spawn(struct rproc *rp, size_t np, size_t i, const char *level)
{
	pid_t child = clone_with_pid(rp[i].p.pid);

	if (child == 0)
		become(rp, np, i, level);
	return child;
}

/* In the new process i: its session and group, its children (before it
 * closes the others' descriptors, which they need), then its own
 * descriptors and the restorer. A zombie ends at once with its status. */
static void __attribute__((noreturn)) become(struct rproc *rp, size_t np, size_t i, const char *level)
{
	struct rproc *me = &rp[i];
	char sfd[16], cfd[16], ifd[16], lfd[16];
	const char *restorer = proc_restorer_path();

	/* a session or group led by a process outside the tree stays the
	 * restart's (inherited) */
	if (me->p.sid == me->p.pid)
		setsid();
	else if (me->p.pgid == me->p.pid)
		setpgid(0, 0);
	else if (in_tree(rp, np, me->p.pgid))
		setpgid(0, me->p.pgid);
	if (!me->p.img) {
		int st = me->p.status;

		if (WIFSIGNALED(st)) {
			sigset_t none;

			signal(WTERMSIG(st), SIG_DFL);
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			kill(getpid(), WTERMSIG(st));
		}
		_exit(WEXITSTATUS(st));
	}
	for (size_t k = 0; k < np; k++)
		if (k != i && rp[k].p.ppid == me->p.pid && spawn(rp, np, k, level) < 0)
			child_fail(-1, "cannot create a process with its checkpointed pid (clone3 set_tid)",
				   errno);
	close_theirs(rp, np, i);
	setup_fds(&me->im, &me->stream[0], &me->channel, &me->image_fd, &me->lazy_peer);
	close_pipes();
	keep_caps();
	snprintf(sfd, sizeof(sfd), "%d", me->stream[0]);
	snprintf(cfd, sizeof(cfd), "%d", me->channel);
	snprintf(ifd, sizeof(ifd), "%d", me->image_fd);
	snprintf(lfd, sizeof(lfd), "%d", me->lazy_peer);
	execl(restorer, "stasis-restore", sfd, cfd, ifd, level, me->lazy_peer >= 0 ? lfd : NULL,
	      (char *)NULL);
	child_fail(-1, "cannot execute the restorer", errno);
	_exit(42);
}

/* The namespace's next new pid above every pid and tid of the tree: a
 * restored process that forks while another one is still being restored
 * (they restore at once) would otherwise take the lowest free pid, which
 * may be the tid a thread of the other one is about to get back (pids
 * made in a restarted job's namespace are low). Best effort: without it
 * a collision fails that restore, naming clone3. */
static void pids_above_tree(const struct rproc *rp, size_t np)
{
	int32_t top = 1;
	char text[16];

	for (size_t k = 0; k < np; k++) {
		if (rp[k].p.pid > top)
			top = rp[k].p.pid;
		for (uint32_t t = 0; rp[k].p.img && t < rp[k].im.header.nthreads; t++)
			if (rp[k].im.threads[t].tid > top)
				top = rp[k].im.threads[t].tid;
	}
	snprintf(text, sizeof(text), "%d", (int)top);
	write_file("/proc/sys/kernel/ns_last_pid", text);
}

/* pid 1 of the new namespace: creates the processes whose parent is not in
 * the tree (the first one, and orphans, whose parent was init), reaps, and
 * reports the first one's wait status. */
static void __attribute__((noreturn)) nsinit(struct rproc *rp, size_t np, int status_fd, const char *level)
{
	pid_t child = -1, w;
	int status = 0;

	ignore_job_signals();
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		child_fail(status_fd, "cannot make the restart's mounts private", errno);
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		child_fail(status_fd, "cannot mount /proc for the new PID namespace", errno);
	pids_above_tree(rp, np);
	make_pipes(status_fd);
	make_socks(status_fd);
	open_files(status_fd);
	make_shm(status_fd);
	for (size_t k = 0; k < np; k++) {
		pid_t c;

		if (k && in_tree(rp, np, rp[k].p.ppid))
			continue;
		c = spawn(rp, np, k, level);
		if (c < 0)
			child_fail(status_fd, "cannot create the process with its checkpointed pid "
				   "(clone3 set_tid)", errno);
		if (k == 0)
			child = c;
	}
	close_theirs(rp, np, np);
	close_pipes();
	forward_sigterm(child);
	for (;;) {
		w = waitpid(-1, &status, 0);
		if (w == child)
			break;
		if (w < 0 && errno != EINTR)
			_exit(127);
	}
	if (write(status_fd, &status, sizeof(status)) != sizeof(status))
		_exit(127);
	_exit(0);
}

static void __attribute__((noreturn)) nsparent(struct rproc *rp, size_t np, int status_fd, const char *level)
{
	char map[64];
	uid_t uid = getuid();
	gid_t gid = getgid();
	pid_t init;
	int status, ret;

	ignore_job_signals();
	close_other_fds(rp, np, status_fd);
	if (unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0)
		child_fail(status_fd, "cannot create user, PID and mount namespaces", errno);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	ret = write_file("/proc/self/uid_map", map);
	if (!ret)
		ret = write_file("/proc/self/setgroups", "deny\n");
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (!ret)
		ret = write_file("/proc/self/gid_map", map);
	if (ret)
		child_fail(status_fd, "cannot write the namespace's uid/gid maps", -ret);
	init = fork();
	if (init < 0)
		child_fail(status_fd, "fork", errno);
	if (init == 0)
		nsinit(rp, np, status_fd, level);
	close_theirs(rp, np, np);
	close(status_fd);
	forward_sigterm(init);
	while (waitpid(init, &status, 0) < 0 && errno == EINTR)
		;
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

/* ---- the restore stream ---- */

/* Walks a region's runs: the next piece of at most max bytes. */
struct run_cursor {
	const struct image_region *r;
	uint64_t run;           /* index in r->runs */
	uint64_t within;        /* bytes of that run already taken */
};

static struct proc_data next_piece(struct run_cursor *c, uint64_t max)
{
	const struct proc_pages *p = &c->r->runs[c->run];
	uint64_t left = p->npages * PROC_PAGE_SIZE - c->within;
	struct proc_data d = { p->addr + c->within, left < max ? left : max };

	c->within += d.len;
	if (c->within == p->npages * PROC_PAGE_SIZE) {
		c->run++;
		c->within = 0;
	}
	return d;
}

/* Bytes [off, off + len) of the region's section, decoded here, as DATA
 * records (compressed, sparse and parent chunks, zeros of file mappings). */
static int send_decoded(struct image *im, int fd, const struct image_region *r, struct run_cursor *c,
			uint64_t off, uint64_t len, void *buf)
{
	int ret = 0;

	while (!ret && len) {
		struct proc_data d = next_piece(c, len < COPY_SIZE ? len : COPY_SIZE);
		struct proc_msg m = { PROC_MSG_MAGIC, PROC_MSG_DATA, sizeof(d) + d.len };
		ssize_t got = img_read(im->img, (unsigned)r->section, off, buf, d.len);

		if (got < 0)
			return (int)got;
		if ((uint64_t)got != d.len)
			return err_set(-EBADMSG, "section of region %s is shorter than its runs",
				       r->path[0] ? r->path : "(anonymous)");
		ret = proc_write_all(fd, &m, sizeof(m));
		if (!ret)
			ret = proc_write_all(fd, &d, sizeof(d));
		if (!ret)
			ret = proc_write_all(fd, buf, d.len);
		off += d.len;
		len -= d.len;
	}
	return ret;
}

/* A raw chunk as a CHUNK record: the restorer reads it from the image. */
static int send_chunk(int fd, const struct image_region *r, struct run_cursor *c, uint32_t index,
		      const struct img_chunk_loc *loc, struct proc_data *pieces, const char *name)
{
	struct proc_chunk k = {
		.file_offset = loc->payload_pos, .header_pos = loc->header_pos, .len = loc->raw_len,
		.crc = loc->crc, .section = (uint32_t)r->section, .index = index,
		.name_len = (uint32_t)strlen(name) + 1,
	};
	struct proc_msg m;
	uint64_t left = loc->raw_len;
	int ret;

	while (left) {
		pieces[k.npieces] = next_piece(c, left);
		left -= pieces[k.npieces++].len;
	}
	m = (struct proc_msg){ PROC_MSG_MAGIC, PROC_MSG_CHUNK,
			       sizeof(k) + k.npieces * sizeof(*pieces) + k.name_len };
	ret = proc_write_all(fd, &m, sizeof(m));
	if (!ret)
		ret = proc_write_all(fd, &k, sizeof(k));
	if (!ret)
		ret = proc_write_all(fd, pieces, k.npieces * sizeof(*pieces));
	if (!ret)
		ret = proc_write_all(fd, name, k.name_len);
	return ret;
}

/* The stored pages of one region. Raw chunks that its runs cover whole go
 * as CHUNK records (the restorer reads them from the image straight into
 * place and checks their CRC: no copy through the pipe); all-zero chunks of
 * anonymous memory go not at all (a fresh mapping is zero); the rest is
 * decoded here and sent as DATA. */
static int send_region(struct image *im, int fd, const struct image_region *r, void *buf,
		       struct proc_data *pieces)
{
	struct run_cursor c = { r, 0, 0 };
	struct img_section_info si;
	int anon = r->rec.kind == PROC_REGION_ANON || r->rec.kind == PROC_REGION_SHARED_ANON;
	uint64_t total = 0, off = 0;
	int ret;

	for (uint64_t k = 0; k < r->nruns; k++)
		total += r->runs[k].npages * PROC_PAGE_SIZE;
	ret = img_section_get(im->img, (unsigned)r->section, &si);   /* its size: image_load */
	if (ret)
		return ret;
	for (uint32_t j = 0; !ret && off < total; j++) {
		struct img_chunk_loc loc;
		uint64_t len;

		ret = img_chunk_locate(im->img, (unsigned)r->section, j, &loc);
		if (ret)
			break;
		len = loc.raw_len < total - off ? loc.raw_len : total - off;
		if (loc.form == IMG_FORM_RAW && len == loc.raw_len && loc.raw_len <= COPY_MAX_CHUNK) {
			ret = send_chunk(fd, r, &c, j, &loc, pieces, si.name);
		} else if (loc.form == IMG_FORM_ZERO && anon) {
			for (uint64_t left = len; left;)
				left -= next_piece(&c, left).len;
		} else {
			ret = send_decoded(im, fd, r, &c, off, len, buf);
		}
		off += len;
	}
	return ret;
}

/* Runs of anonymous memory large enough to be worth populating ahead of
 * the fill (page population, not reading, is most of a restore's time on
 * a VM whose memory comes back from the host); smaller ones fault in as
 * they are filled. */
#define POPULATE_MIN (2u << 20)

static int send_populate(const struct image *im, int fd)
{
	struct proc_data *runs = NULL;
	size_t n = 0, cap = 0;
	int ret;

	for (uint32_t i = 0; i < im->header.nregions; i++) {
		const struct image_region *r = &im->regions[i];

		if ((r->rec.kind != PROC_REGION_ANON && r->rec.kind != PROC_REGION_SHARED_ANON) ||
		    (r->shm_fd >= 0 && !r->shm_fill) || (im->lazy_on && r->lazy))
			continue;
		for (uint64_t k = 0; k < r->nruns; k++) {
			uint64_t len = r->runs[k].npages * PROC_PAGE_SIZE;

			if (len < POPULATE_MIN)
				continue;
			if (n == cap) {
				struct proc_data *t = realloc(runs, (cap = cap ? 2 * cap : 64) * sizeof(*runs));

				if (!t) {
					free(runs);
					return -ENOMEM;
				}
				runs = t;
			}
			runs[n++] = (struct proc_data){ r->runs[k].addr, len };
		}
	}
	ret = proc_send(fd, PROC_MSG_POPULATE, runs, n * sizeof(*runs));
	free(runs);
	return ret;
}

/* The tids the helper threads of restorers running at once take: each
 * one that no thread or process of the tree has (the namespace's init is
 * 1), and no two alike. */
static void helper_tids(struct rproc *rp, size_t np)
{
	int32_t next = 2;

	for (size_t k = 0; k < np; k++) {
		if (!rp[k].p.img)
			continue;
		for (int taken = 1; taken; next += taken) {
			taken = 0;
			for (size_t e = 0; e < np && !taken; e++) {
				taken = rp[e].p.pid == next;
				for (uint32_t t = 0; rp[e].p.img && !taken &&
						     t < rp[e].im.header.nthreads; t++)
					taken = rp[e].im.threads[t].tid == next;
			}
		}
		rp[k].helper_tid = next++;
	}
}

static int send_stream(struct image *im, int fd, int32_t helper_tid, void *buf)
{
	struct proc_msg m = { PROC_MSG_MAGIC, PROC_MSG_HEADER, sizeof(im->header) + im->header.cwd_len };
	struct proc_data *pieces = NULL;
	const char *name = img_name(im->img);
	int ret = proc_write_all(fd, &m, sizeof(m));

	if (!ret)
		ret = proc_write_all(fd, &im->header, sizeof(im->header));
	if (!ret)
		ret = proc_write_all(fd, im->cwd, im->header.cwd_len);
	if (!ret)
		ret = proc_send(fd, PROC_MSG_SIGACTS, im->sa, sizeof(im->sa));
	for (uint32_t i = 0; !ret && i < im->header.nregions; i++) {
		const struct image_region *r = &im->regions[i];
		struct proc_region rec = r->rec;

		if (r->shm_fd >= 0) {
			rec.flags |= PROC_RF_SHM_FD;
			rec.file_size = (uint64_t)r->shm_fd;
			if (!r->shm_fill)
				rec.stored_pages = 0;   /* the process that fills it did */
		}
		m = (struct proc_msg){ PROC_MSG_MAGIC, PROC_MSG_REGION, sizeof(r->rec) + r->rec.path_len };
		ret = proc_write_all(fd, &m, sizeof(m));
		if (!ret)
			ret = proc_write_all(fd, &rec, sizeof(rec));
		if (!ret)
			ret = proc_write_all(fd, r->path, r->rec.path_len);
	}
	/* every region mapped: the restorer hands over its userfaultfd */
	if (!ret && im->nlazy) {
		im->lazy_on = proc_lazy_serve(im->lazy_fd, im->header.pid, name, im->lazy, im->nlazy) == 0;
		im->lazy_fd = -1;
	}
	/* threads before the pages: the restorer's helper thread must take a
	 * tid that none of the program's threads needs */
	for (uint32_t i = 0; !ret && i < im->header.nthreads; i++)
		ret = proc_send(fd, PROC_MSG_THREAD, &im->threads[i], sizeof(im->threads[i]));
	if (!ret)
		ret = proc_send(fd, PROC_MSG_THREADS_DONE, NULL, 0);
	if (!ret && helper_tid)
		ret = proc_send(fd, PROC_MSG_HELPER_TID, &helper_tid, sizeof(helper_tid));
	if (!ret)
		ret = send_populate(im, fd);
	if (!ret)
		ret = proc_send(fd, PROC_MSG_IMAGE, name, strlen(name) + 1);
	/* a chunk's pieces: at most one per page of the largest chunk read directly */
	pieces = malloc(COPY_MAX_CHUNK / PROC_PAGE_SIZE * sizeof(*pieces));
	if (!pieces && !ret)
		ret = -ENOMEM;
	for (uint32_t i = 0; !ret && i < im->header.nregions; i++)
		if ((im->regions[i].shm_fd < 0 || im->regions[i].shm_fill) &&
		    !(im->lazy_on && im->regions[i].lazy))
			ret = send_region(im, fd, &im->regions[i], buf, pieces);
	free(pieces);
	if (!ret) {
		struct proc_keep_fd *keep = calloc(im->nfds + im->npipes + im->nfiles + im->nsocks + 1,
						   sizeof(*keep));
		size_t n = 0;

		if (!keep)
			return -ENOMEM;
		for (size_t i = 0; i < im->npipes; i++)
			keep[n++] = (struct proc_keep_fd){ im->pipes[i].fd, im->pipes[i].cloexec };
		for (size_t i = 0; i < im->nfiles; i++)
			keep[n++] = (struct proc_keep_fd){ im->files[i].fd, im->files[i].cloexec };
		for (size_t i = 0; i < im->nsocks; i++)
			keep[n++] = (struct proc_keep_fd){ im->socks[i].fd, im->socks[i].cloexec };
		for (uint64_t i = 0; i < im->nfds; i++)
			if (im->fds[i].rec.kind != PROC_FD_STDIO)
				keep[n++] = (struct proc_keep_fd){ im->fds[i].rec.fd, im->fds[i].rec.cloexec };
		ret = proc_send(fd, PROC_MSG_KEEP_FDS, keep, n * sizeof(*keep));
		free(keep);
	}
	return ret;
}

/* One process's restore stream, written on a thread of its own. */
struct stream_job {
	struct rproc *rp;
	void *buf;                  /* COPY_SIZE bytes for decoded chunks */
	pthread_t thread;
	int started, ret;
	char msg[512];              /* its err_msg() when ret */
};

static void *stream_main(void *arg)
{
	struct stream_job *j = arg;

	j->ret = send_stream(&j->rp->im, j->rp->stream[1], j->rp->helper_tid, j->buf);
	if (j->ret)
		snprintf(j->msg, sizeof(j->msg), "%s", err_msg());
	return NULL;
}

/* Start writing rp's stream (with buf, or a buffer of its own); written
 * here, at once, when no thread can be made. */
static int stream_start(struct stream_job *j, struct rproc *rp, void *buf)
{
	j->rp = rp;
	j->buf = buf ? buf : malloc(COPY_SIZE);
	if (!j->buf)
		return -ENOMEM;
	if (pthread_create(&j->thread, NULL, stream_main, j) == 0) {
		j->started = 1;
		return 0;
	}
	stream_main(j);
	return j->ret ? err_set(j->ret, "%s", j->msg) : 0;
}

/* Wait for the streams of jobs[0..n) being written; the first failure. */
static int streams_join(struct stream_job *jobs, size_t n)
{
	int ret = 0;

	for (size_t k = 0; k < n; k++) {
		if (!jobs[k].started)
			continue;
		pthread_join(jobs[k].thread, NULL);
		jobs[k].started = 0;
		if (jobs[k].ret && !ret)
			ret = jobs[k].msg[0] ? err_set(jobs[k].ret, "%s", jobs[k].msg) : jobs[k].ret;
	}
	return ret;
}

/* Lazy restore (docs/transparent.md): the stored runs pimg_lazy_region
 * picks (heaps, arrays) are served by lazy.c once the program runs, if its
 * restorer can make a userfaultfd; they get a socket pair for the
 * handshake. */

static int lazy_setup(struct rproc *rp)
{
	struct image *im = &rp->im;
	unsigned cap = 0;
	int sv[2];

	for (uint32_t i = 0; i < im->header.nregions; i++) {
		struct image_region *r = &im->regions[i];
		uint64_t stored = 0, off = 0;

		for (uint64_t k = 0; k < r->nruns; k++)
			stored += r->runs[k].npages * PROC_PAGE_SIZE;
		if (!pimg_lazy_region(&r->rec, stored))
			continue;
		r->lazy = 1;
		for (uint64_t k = 0; k < r->nruns; k++) {
			if (im->nlazy == cap) {
				struct pimg_lazy_piece *v;

				cap = cap ? 2 * cap : 64;
				v = realloc(im->lazy, cap * sizeof(*v));
				if (!v)
					return -ENOMEM;
				im->lazy = v;
			}
			im->lazy[im->nlazy++] = (struct pimg_lazy_piece){
				.addr = r->runs[k].addr, .npages = r->runs[k].npages, .off = off,
				.section = (uint32_t)r->section };
			off += r->runs[k].npages * PROC_PAGE_SIZE;
		}
	}
	if (!im->nlazy)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return err_set(-errno, "cannot set up the restart: %s", strerror(errno));
	/* the restorer's pid as we see it comes with its userfaultfd */
	(void)setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int));
	im->lazy_fd = sv[0];
	rp->lazy_peer = sv[1];
	return 0;
}

/* The tree's list of written files again (sts_written.h), or -1; the
 * run before's log */
static int g_written_log = -1;
static const char *g_written_old;
static size_t g_written_old_len;

int proc_restore_written_log(int fd, const char *old, size_t len)
{
	if (dup3(fd, PROC_WRITTEN_ORIGIN, O_CLOEXEC) < 0)
		return err_set(-errno, "cannot place the list of written files: %s", strerror(errno));
	inherited[PROC_WRITTEN_ORIGIN / 64] |= 1ull << (PROC_WRITTEN_ORIGIN % 64);
	g_written_log = fd;
	g_written_old = old;
	g_written_old_len = len;
	return 0;
}

/* The files the process wrote and closed, as they were at the checkpoint
 * (written.c), before its descriptors are opened again; they, and the
 * files it had open for writing, start the tree's list again (a process
 * that later closes one and writes it anew is saved as before) */
static int written_back(struct img_reader *img, const struct image *im)
{
	char who[32];
	size_t len;
	void *sec;
	int ret = proc_written_read(img, &sec, &len);

	snprintf(who, sizeof(who), "process %d", (int)im->header.pid);
	if (!ret)
		ret = proc_written_back(sec, len, who);
	if (!ret && g_written_log >= 0) {
		proc_written_log_add_section(g_written_log, sec, len);
		for (uint64_t i = 0; i < im->nfds; i++)
			if ((im->fds[i].rec.kind == PROC_FD_FILE ||
			     im->fds[i].rec.kind == PROC_FD_FILE_SAVED) &&
			    (im->fds[i].rec.flags & O_ACCMODE) != O_RDONLY)
				proc_written_log_add(g_written_log, im->fds[i].path);
	}
	free(sec);
	return ret;
}

/* The regular files the process had open at the checkpoint and the tree
 * renamed since, back under their names (written.c) */
static int moved_back(const struct image *im)
{
	int ret = 0;

	for (uint64_t i = 0; !ret && g_written_old && i < im->nfds; i++)
		if (im->fds[i].rec.kind == PROC_FD_FILE || im->fds[i].rec.kind == PROC_FD_FILE_SAVED)
			ret = proc_written_log_moved_back(g_written_old, g_written_old_len,
							  im->fds[i].path, im->fds[i].rec.dev,
							  im->fds[i].rec.ino);
	return ret;
}

int proc_child_ends(const struct proc_child *out, int ms)
{
	for (int waited = 0; out->pid > 0; waited += 10) {
		siginfo_t si = { 0 };

		if (waitid(P_PID, (id_t)out->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (si.si_pid == out->pid || waited >= ms)
			return si.si_pid == out->pid;
		usleep(10 * 1000);
	}
	return 1;
}

int proc_restore_tree(const struct proc_restore_proc *v, size_t np, const struct proc_fd_share *sh,
		      size_t nsh, const char *log_level, struct proc_child *out)
{
	struct stream_job *jobs = NULL;
	struct rproc *rp = calloc(np ? np : 1, sizeof(*rp));
	int status[2] = { -1, -1 };
	void *buf = NULL;
	pid_t child;
	int ret = rp ? 0 : -ENOMEM;

	out->pid = -1;
	out->status_fd = -1;
	for (size_t k = 0; rp && k < np; k++) {
		rp[k].p = v[k];
		rp[k].stream[0] = rp[k].stream[1] = rp[k].channel = rp[k].image_fd = -1;
		rp[k].lazy_peer = -1;
		if (!v[k].img)
			continue;
		rp[k].channel = v[k].channel;
		rp[k].image_fd = img_fd(v[k].img);
	}
	/* every image first: a file one process had open and another's
	 * written files may be the same one, renamed since (moved_back) */
	for (size_t k = 0; !ret && k < np; k++) {
		if (!v[k].img)
			continue;
		ret = image_load(v[k].img, &rp[k].im);
		if (!ret)
			ret = moved_back(&rp[k].im);
	}
	for (size_t k = 0; !ret && k < np; k++) {
		struct image *im = &rp[k].im;

		if (!v[k].img)
			continue;
		if (rp[k].p.pid <= 0)
			rp[k].p.pid = im->header.pid;
		ret = take_pipes(im);
		if (!ret)
			ret = take_socks(im);
		if (!ret)
			ret = check_files(im);
		if (!ret)
			ret = proc_fds_check(im->fds, im->nfds);
		if (!ret)
			ret = written_back(v[k].img, im);
		if (!ret)
			ret = take_files(im, rp[k].p.pid, sh, nsh);
		if (!ret)
			warn_externals(im);
		if (!ret && rp[k].p.pid != im->header.pid)
			ret = err_set(-EBADMSG, "the image of process %d holds process %d",
				      (int)rp[k].p.pid, (int)im->header.pid);
		if (!ret && pipe2(rp[k].stream, O_CLOEXEC) != 0)
			ret = err_set(-errno, "cannot set up the restart: %s", strerror(errno));
		if (!ret && proc_lazy_wanted())
			ret = lazy_setup(&rp[k]);
	}
	/* every image's files are back and listed: the ones the tree made
	 * after the checkpoint go (written.c says which are safe to) */
	if (!ret && g_written_log >= 0)
		ret = proc_written_log_forget_created(g_written_old, g_written_old_len, g_written_log);
	if (!ret && access(proc_restorer_path(), X_OK) != 0)
		ret = err_set(-ENOENT, "the restorer %s is missing (set STASIS_RESTORER)",
			      proc_restorer_path());
	if (ret)
		goto out;
	helper_tids(rp, np);
	buf = malloc(COPY_SIZE);
	if (!buf || pipe2(status, O_CLOEXEC) != 0) {
		ret = err_set(-errno, "cannot set up the restart: %s", strerror(errno));
		goto out;
	}
	{
		/* the shared memory's numbers: above every descriptor the
		 * processes have or the pipes and files of the tree take */
		int base = g_pipe_floor > status[1] ? g_pipe_floor : status[1] + 1;

		for (size_t k = 0; k < np; k++)
			for (int i = 0; rp[k].p.img && i < 4; i++) {
				int f = (int[]){ rp[k].stream[0], rp[k].stream[1], rp[k].channel,
						 rp[k].image_fd }[i];

				if (f >= base)
					base = f + 1;
			}
		base += 2 * (int)g_npipes + (int)g_nfiles + 16;
		ret = find_shm(rp, np, base);
		if (ret)
			goto out;
	}
	child = fork();
	if (child < 0) {
		ret = err_set(-errno, "fork: %s", strerror(errno));
		goto out;
	}
	if (child == 0) {
		/* the restorers inherit the read ends and the channels; nothing else */
		for (size_t k = 0; k < np; k++) {
			if (!rp[k].p.img)
				continue;
			if (fcntl(rp[k].stream[0], F_SETFD, 0) != 0 || fcntl(rp[k].channel, F_SETFD, 0) != 0)
				_exit(127);
			close(rp[k].stream[1]);
		}
		close(status[0]);
		nsparent(rp, np, status[1], log_level);
	}
	close(status[1]);
	status[1] = -1;
	out->pid = child;
	out->status_fd = status[0];
	status[0] = -1;
	signal(SIGPIPE, SIG_IGN);
	for (size_t k = 0; k < np; k++)
		if (rp[k].p.img) {
			close(rp[k].stream[0]);
			rp[k].stream[0] = -1;
			if (rp[k].lazy_peer >= 0)
				close(rp[k].lazy_peer);
			rp[k].lazy_peer = -1;
			fcntl(rp[k].stream[1], F_SETPIPE_SZ, 1 << 20);   /* fewer, larger copies; best effort */
		}
	/* every process restores at once, its stream written by a thread of
	 * its own (a restorer reads only its stream and its image). Only
	 * shared memory orders them: the first process that maps it fills it,
	 * so one that maps it without filling it starts once every process
	 * before it runs (said RESTARTED) */
	jobs = calloc(np, sizeof(*jobs));
	if (!jobs)
		ret = -ENOMEM;
	for (size_t k = 0; !ret && k < np; k++) {
		if (!rp[k].p.img)
			continue;
		if (maps_shm_of_others(&rp[k].im)) {
			ret = streams_join(jobs, k);
			for (size_t e = 0; !ret && e < k; e++) {
				struct pollfd pw = { v[e].peer, POLLIN, 0 };

				if (rp[e].p.img && v[e].peer >= 0 &&
				    poll(&pw, 1, PROC_HELLO_TIMEOUT_MS) <= 0)
					ret = err_set(-EIO, "process %d did not come back",
						      (int)rp[e].p.pid);
			}
		}
		if (!ret)
			ret = stream_start(&jobs[k], &rp[k], k ? NULL : buf);
	}
	if (jobs) {
		int joined = streams_join(jobs, np);

		ret = ret ? ret : joined;
		for (size_t k = 1; k < np; k++)
			free(jobs[k].buf);
		free(jobs);
	}
	if (ret == -EPIPE && !proc_child_ends(out, PROC_RESTORER_END_MS)) {
		/* the restorer goes on: a process of the tree ran and ended
		 * before its whole stream was written (a short-lived child, its
		 * lazy pages still coming); its agent's RESTARTED or its end is
		 * what the caller looks at next (tree.c) */
		err_clear();
		ret = 0;
	}
	if (ret == -EPIPE) {
		int st;

		/* a restorer that gives up (a bad chunk it read itself, a
		 * collision) has said why in one line and exits 42 */
		proc_child_wait(out, &st);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 42)
			ret = -ECANCELED;
		else
			ret = err_set(ret, "the restorer stopped reading the restore stream");
	}
	else if (ret && !*err_msg())
		ret = err_set(ret, "writing the restore stream: %s", strerror(-ret));
out:
	for (size_t k = 0; rp && k < np; k++) {
		for (int i = 0; i < 2; i++)
			if (rp[k].stream[i] >= 0)
				close(rp[k].stream[i]);
		if (rp[k].channel >= 0)
			close(rp[k].channel);
		if (rp[k].lazy_peer >= 0)
			close(rp[k].lazy_peer);
		image_free(&rp[k].im);
	}
	for (int i = 0; i < 2; i++)
		if (status[i] >= 0)
			close(status[i]);
	free_pipes();
	free(buf);
	free(rp);
	return ret;
}

int proc_restore(struct img_reader *img, int channel, const char *log_level, struct proc_child *out)
{
	struct proc_restore_proc p = { .img = img, .channel = channel, .peer = -1 };

	return proc_restore_tree(&p, 1, NULL, 0, log_level, out);
}

int proc_child_wait(struct proc_child *c, int *status)
{
	int st = 0, got = 0, ret;

	if (c->status_fd >= 0) {
		ret = proc_read_all(c->status_fd, &st, sizeof(st));
		got = ret == 0;
		close(c->status_fd);
		c->status_fd = -1;
	}
	if (c->pid > 0) {
		int pst;

		while (waitpid(c->pid, &pst, 0) < 0 && errno == EINTR)
			;
		c->pid = -1;
		if (!got)
			st = pst;   /* it failed before the program existed */
	}
	*status = st;
	return 0;
}
