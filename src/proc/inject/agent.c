/* agent.c - libstasis-inject.so: the checkpoint agent inside an unmodified
 * program (LD_PRELOAD).
 *
 * A constructor starts one checkpoint thread, which waits for commands from
 * the coordinator on the channel descriptor it was given ($STASIS_COORD_FD).
 * To checkpoint, the thread sends PROC_CKPT_SIGNAL to itself; its handler
 * stops every other thread with the same signal (each handler records its
 * registers' location, FS base, rseq and robust-list registration, then waits
 * on a futex), streams the process to the coordinator (docs/transparent.md)
 * and waits for the coordinator's verdict before releasing the threads.
 * Every thread, the checkpoint thread included, is thus captured inside a
 * signal handler: the restorer returns into each with rt_sigreturn.
 *
 * While other threads are stopped they may hold any libc lock (malloc,
 * stdio, the dynamic loader), so from the first signal to the release this
 * file calls only system-call wrappers: no malloc, no stdio, no dlsym.
 * Its scratch buffers are mmapped for one checkpoint and unmapped after it,
 * so they are never part of an image.
 *
 * Built without sanitizers even in the ASan build: an LD_PRELOADed ASan
 * library requires the ASan runtime to be loaded first into the program,
 * which an unmodified program does not do.
 */
#include "pimg/pimg.h"
#include "pimg/pimg_threads.h"
#include "proc/fd_kind.h"
#include "proc/proc_format.h"
#include "split/sts_written.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <linux/unix_diag.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <sys/sendfile.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <asm/prctl.h>

#define MAX_THREADS 1024
#define STOP_TIMEOUT_MS 10000
#define PAGEMAP_BATCH 32768           /* entries per pagemap read: 128 MiB of address space */
#define COPY_BUF (1u << 20)
#define MAPS_BUF_MIN (1u << 20)

/* glibc >= 2.35 exports where each thread's rseq area is. */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
#define RSEQ_SIG_X86 0x53053053u

struct proc_agent_state stasis_agent_state = { PROC_STATE_MAGIC, 0, -1 };

struct slot {
	struct proc_thread rec;
	const void *uc;          /* kernel ucontext in the signal frame */
	const void *xsave;
	uint32_t xsave_size;
};

static int g_channel = -1;
static pid_t g_agent_tid;
static int g_seen_restarts;
static atomic_int g_stopping;      /* a checkpoint is stopping threads */
static struct slot g_slots[MAX_THREADS];
/* the park protocol (pimg_threads.h): slot i of it is g_slots[i + 1] */
static int32_t g_park_tids[3][MAX_THREADS];
static int skip_agent(int32_t tid, void *ctx);
static struct pimg_park g_park = {
	.sig = PROC_CKPT_SIGNAL, .signaled = g_park_tids[0], .seen = g_park_tids[1],
	.tasks = g_park_tids[2], .cap = MAX_THREADS - 1, .skip = skip_agent,
};
static int g_error_sent;           /* this checkpoint's ERROR record went out */
static atomic_int g_exec;          /* a thread is executing another program */
static pid_t g_owner;              /* the process the channel belongs to */
static char g_self[PATH_MAX];      /* this library's path, as LD_PRELOAD names it */
/* a fork under way ("process trees" below) */
static pthread_mutex_t g_fork_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_child_end = -1;
static sigset_t g_fork_mask;

/* ---- small helpers that are safe while other threads are stopped ---- */

static pid_t raw_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Writes go to the channel only: any failure means the coordinator is gone,
 * and is -EPIPE, so a caller can tell it from a local failure (after which
 * the stream is still whole and an ERROR record can follow). */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		/* never SIGPIPE: a coordinator that went away must not end the
		 * program (a forked child's HELLO, a RESTARTED) */
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == ENOTSOCK)
			n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -EPIPE;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_msg(uint32_t type, const void *a, size_t alen, const void *b, size_t blen)
{
	struct proc_msg m = { PROC_MSG_MAGIC, type, alen + blen };
	int ret = write_all(g_channel, &m, sizeof(m));

	if (!ret && alen)
		ret = write_all(g_channel, a, alen);
	if (!ret && blen)
		ret = write_all(g_channel, b, blen);
	return ret;
}

static size_t str_len(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

/* Format "what: detail (errno)" without stdio. */
static void send_error(const char *what, const char *detail, int err)
{
	char buf[512];
	size_t n = 0;
	const char *parts[3] = { what, detail, NULL };

	for (int i = 0; i < 2 && parts[i]; i++) {
		if (i && n + 2 < sizeof(buf)) {
			buf[n++] = ':';
			buf[n++] = ' ';
		}
		for (const char *p = parts[i]; *p && n + 1 < sizeof(buf); p++)
			buf[n++] = *p;
	}
	if (err && n + 24 < sizeof(buf)) {
		const char *e = strerrorname_np(err);

		buf[n++] = ' ';
		buf[n++] = '(';
		for (const char *p = e ? e : "error"; *p; p++)
			buf[n++] = *p;
		buf[n++] = ')';
	}
	send_msg(PROC_MSG_ERROR, buf, n, NULL, 0);
	g_error_sent = 1;
}

/* Checkpoint-time buffers, in the window the dump skips; the bump pointer
 * restarts at every checkpoint, when every buffer has been unmapped. */
static uint64_t g_scratch_next;

static void *scratch_map(size_t len)
{
	uint64_t addr = PROC_WINDOW_AGENT + g_scratch_next;
	void *p;

	len = (len + 0x1fffff) & ~(size_t)0x1fffff;
	if (addr + len > PROC_WINDOW_SCRATCH)
		return NULL;
	p = mmap((void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (p != (void *)(uintptr_t)addr) {
		munmap(p, len);
		return NULL;
	}
	g_scratch_next += len;
	return p;
}

static void scratch_unmap(void *p, size_t len)
{
	munmap(p, (len + 0x1fffff) & ~(size_t)0x1fffff);
}

static uint64_t parse_hex(const char **s)
{
	uint64_t v = 0;

	for (;;) {
		char c = **s;

		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uint64_t)(c - 'a' + 10);
		else
			return v;
		(*s)++;
	}
}

static uint64_t parse_dec(const char **s)
{
	uint64_t v = 0;

	while (**s >= '0' && **s <= '9')
		v = v * 10 + (uint64_t)(*(*s)++ - '0');
	return v;
}

/* Read a whole /proc file into a scratch mapping (grown as needed). */
static char *read_proc_file(const char *path, size_t *len, size_t *cap)
{
	size_t size = MAPS_BUF_MIN;

	for (;;) {
		char *buf = scratch_map(size);
		size_t used = 0;
		int fd;

		if (!buf)
			return NULL;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			scratch_unmap(buf, size);
			return NULL;
		}
		for (;;) {
			ssize_t n = read(fd, buf + used, size - 1 - used);

			if (n <= 0)
				break;
			used += (size_t)n;
			if (used == size - 1)
				break;
		}
		close(fd);
		if (used < size - 1) {
			buf[used] = 0;
			*len = used;
			*cap = size;
			return buf;
		}
		scratch_unmap(buf, size);
		size *= 4;
	}
}

/* ---- per-thread state, captured in the signal handler ---- */

static void fill_slot(struct slot *s, void *ucv, uint32_t flags)
{
	ucontext_t *uc = ucv;
	uint64_t fs = 0;

	memset(&s->rec, 0, sizeof(s->rec));
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
	pimg_thread_capture(&s->rec, ucv, fs, flags);   /* what the lower half records too */
	if (&__rseq_size && &__rseq_offset && __rseq_size) {
		s->rec.rseq_addr = fs + (uint64_t)__rseq_offset;
		s->rec.rseq_len = __rseq_size < 32 ? 32 : __rseq_size;
		s->rec.rseq_sig = RSEQ_SIG_X86;
	}
	s->rec.sigpending = pimg_pending(0, 0, PROC_CKPT_SIGNAL);
	s->uc = ucv;
	s->xsave = NULL;
	s->xsave_size = 0;
	if (uc->uc_mcontext.fpregs) {
		/* fxsave's software-reserved bytes say how big the xsave area is */
		const uint32_t *sw = (const uint32_t *)((const char *)uc->uc_mcontext.fpregs + 464);

		s->xsave = uc->uc_mcontext.fpregs;
		s->xsave_size = sw[0] == 0x46505853u ? sw[1] : 512;  /* FP_XSTATE_MAGIC1 */
	}
	/* kernel struct ucontext: flags, link, stack, mcontext, sigmask */
	s->rec.uc_size = offsetof(ucontext_t, uc_sigmask) + 8 + s->xsave_size;
}

static void park_thread(void *ucv)
{
	uint32_t gen = pimg_park_gen(&g_park);
	uint32_t idx = pimg_park_slot(&g_park) + 1;   /* slot 0 is the agent's */

	/* fill the slot, then count the thread as parked: the agent streams
	 * every counted slot (counting first let it send a half-written one) */
	if (idx < MAX_THREADS)
		fill_slot(&g_slots[idx], ucv, 0);
	pimg_park_parked(&g_park, raw_gettid());
	pimg_park_hold(&g_park, gen, NULL, NULL);
}

/* ---- stopping the threads ---- */

static int skip_agent(int32_t tid, void *ctx)
{
	(void)ctx;
	return tid == g_agent_tid;
}

/* a checkpoint's end, or a process of its own (a fork's child, a restart) */
static void reset_parking(void)
{
	atomic_store(&g_stopping, 0);
	pimg_park_reset(&g_park);
}

static void release_threads(void)
{
	reset_parking();
	pimg_park_release(&g_park);
}

/* ---- the dump ---- */

struct dump {
	char *maps;
	size_t maps_len, maps_cap;
	uint64_t *pagemap;
	char *copy;
	int pagemap_fd, mem_fd;
	int bad_errno;      /* memory that could not be read (sent as zeros) */
};

static int send_header(const struct dump *d, unsigned nthreads, unsigned nregions)
{
	struct proc_header h;
	struct pimg_mapping m;
	char cwd[2 * PATH_MAX + 2];
	char *stat, *p;
	size_t len, cap;
	uint64_t f[53] = { 0 };
	mode_t um;

	memset(&h, 0, sizeof(h));
	h.version = PROC_FORMAT_VERSION;
	h.pid = getpid();
	h.nthreads = nthreads;
	h.nregions = nregions;
	stat = read_proc_file("/proc/self/stat", &len, &cap);
	if (!stat)
		return -EIO;
	p = strrchr(stat, ')');
	/* fields 3.. follow ") "; field 3 (state) is a letter */
	if (p && p[1] == ' ' && p[2]) {
		const char *q = p + 4;

		for (int i = 4; i <= 52 && *q; i++) {
			int neg;

			while (*q == ' ')
				q++;
			neg = *q == '-';
			if (neg)
				q++;
			f[i] = parse_dec(&q);
			if (i == 19)   /* the main thread's nice value, -20..19 */
				h.nice = neg ? -(int32_t)f[i] : (int32_t)f[i];
		}
	}
	scratch_unmap(stat, cap);
	h.start_code = f[26];
	h.end_code = f[27];
	h.start_stack = f[28];
	h.start_data = f[45];
	h.end_data = f[46];
	h.start_brk = f[47];
	h.arg_start = f[48];
	h.arg_end = f[49];
	h.env_start = f[50];
	h.env_end = f[51];
	h.brk = (uint64_t)syscall(SYS_brk, 0);
	um = umask(022);
	umask(um);
	h.umask = um;
	h.state_addr = (uint64_t)(uintptr_t)&stasis_agent_state;
	h.shared_pending = pimg_pending(0, 1, PROC_CKPT_SIGNAL);
	{
		int af = open("/proc/self/auxv", O_RDONLY | O_CLOEXEC);
		ssize_t an = af >= 0 ? read(af, h.auxv, sizeof(h.auxv)) : -1;

		if (af >= 0)
			close(af);
		h.auxv_len = an > 0 && (size_t)an < sizeof(h.auxv) ? (uint32_t)an : 0;
	}
	h.nrlimits = RLIM_NLIMITS < 16 ? RLIM_NLIMITS : 16;
	for (unsigned i = 0; i < h.nrlimits; i++) {
		struct rlimit rl;

		if (getrlimit((int)i, &rl) == 0) {
			h.rlimit[i][0] = rl.rlim_cur;
			h.rlimit[i][1] = rl.rlim_max;
		}
	}
	{
		/* per task: the main thread's, not this thread's */
		char pb[32];
		int pf = open("/proc/self/personality", O_RDONLY | O_CLOEXEC);
		ssize_t pn = pf >= 0 ? read(pf, pb, sizeof(pb) - 1) : -1;
		const char *pp = pb;

		if (pf >= 0)
			close(pf);
		pb[pn > 0 ? pn : 0] = 0;
		h.personality = pn > 0 ? (uint32_t)parse_hex(&pp) : (uint32_t)personality(0xffffffff);
	}
	for (int i = 0; i < 3; i++) {
		struct itimerval it;

		if (getitimer(i, &it) == 0) {
			h.itimer[i][0] = (uint64_t)it.it_interval.tv_sec * 1000000 + (uint64_t)it.it_interval.tv_usec;
			h.itimer[i][1] = (uint64_t)it.it_value.tv_sec * 1000000 + (uint64_t)it.it_value.tv_usec;
			/* a periodic ITIMER_REAL whose signal is pending reads 0 until the
			 * signal is taken, which re-arms it: it is still running */
			if (!h.itimer[i][1])
				h.itimer[i][1] = h.itimer[i][0];
		}
	}
	if (!getcwd(cwd, PATH_MAX))
		return -errno;
	{
		/* then the executable, after the cwd's NUL */
		size_t n = str_len(cwd) + 1;
		ssize_t e = readlink("/proc/self/exe", cwd + n, sizeof(cwd) - n - 1);

		cwd[n + (size_t)(e > 0 ? e : 0)] = 0;
		h.cwd_len = (uint32_t)(n + (size_t)(e > 0 ? e : 0) + 1);
	}
	/* kernel mappings, from the maps text */
	for (const char *c = d->maps; pimg_maps_next(&c, &m);) {
		switch (pimg_special(&m)) {
		case PIMG_VDSO:
			h.vdso_start = m.start;
			h.vdso_end = m.end;
			break;
		case PIMG_VVAR_VCLOCK:
			h.vclock_start = m.start;
			h.vclock_end = m.end;
			break;
		case PIMG_VVAR:
			h.vvar_start = m.start;
			h.vvar_end = m.end;
			break;
		default:
			break;
		}
	}
	return send_msg(PROC_MSG_HEADER, &h, sizeof(h), cwd, h.cwd_len);
}

static int send_sigactions(void)
{
	struct proc_sigaction sa[PROC_NSIG];

	memset(sa, 0, sizeof(sa));
	for (int sig = 1; sig <= PROC_NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			syscall(SYS_rt_sigaction, sig, NULL, &sa[sig - 1], 8);
	return send_msg(PROC_MSG_SIGACTS, sa, sizeof(sa), NULL, 0);
}

static int send_thread(const struct slot *s)
{
	size_t ucl = s->rec.uc_size - s->xsave_size;
	struct proc_msg m = { PROC_MSG_MAGIC, PROC_MSG_THREAD, sizeof(s->rec) + s->rec.uc_size };
	int ret = write_all(g_channel, &m, sizeof(m));

	if (!ret)
		ret = write_all(g_channel, &s->rec, sizeof(s->rec));
	if (!ret)
		ret = write_all(g_channel, s->uc, ucl);
	if (!ret && s->xsave_size)
		ret = write_all(g_channel, s->xsave, s->xsave_size);
	return ret;
}

/* len bytes of the program's memory at addr into the channel: straight from
 * memory where it is readable, else through /proc/self/mem. The record is
 * always completed: what cannot be read is sent as zeros and noted in
 * d->bad_errno. -EPIPE only when the channel is gone. */
static int send_memory(struct dump *d, uint64_t addr, uint64_t len, int direct)
{
	while (len) {
		if (direct) {
			ssize_t n = write(g_channel, (const void *)(uintptr_t)addr,
					  len < (1ull << 30) ? (size_t)len : (1u << 30));

			if (n > 0) {
				addr += (uint64_t)n;
				len -= (uint64_t)n;
			} else if (n < 0 && errno == EFAULT) {
				direct = 0;
			} else if (!(n < 0 && errno == EINTR)) {
				return -EPIPE;
			}
			continue;
		}
		size_t want = len < COPY_BUF ? (size_t)len : COPY_BUF;
		ssize_t got = pread(d->mem_fd, d->copy, want, (off_t)addr);

		if (got <= 0) {
			if (!d->bad_errno)
				d->bad_errno = got < 0 ? errno : EIO;
			memset(d->copy, 0, want);
			got = (ssize_t)want;
		}
		if (write_all(g_channel, d->copy, (size_t)got))
			return -EPIPE;
		addr += (uint64_t)got;
		len -= (uint64_t)got;
	}
	return 0;
}

static int send_run(struct dump *d, const struct proc_region *r, uint64_t addr, uint64_t npages)
{
	struct proc_pages pg = { addr, npages };
	uint64_t len = npages * PROC_PAGE_SIZE;
	struct proc_msg m = { PROC_MSG_MAGIC, PROC_MSG_PAGES, sizeof(pg) + len };
	int ret = write_all(g_channel, &m, sizeof(m));

	if (!ret)
		ret = write_all(g_channel, &pg, sizeof(pg));
	if (ret)
		return ret;
	ret = send_memory(d, addr, len, (r->prot & PROT_READ) && !(r->flags & PROC_RF_DELETED));
	if (ret)
		return ret;
	if (d->bad_errno) {
		send_error("cannot read the program's memory", "a mapping changed during the checkpoint?",
			   d->bad_errno);
		return -EIO;
	}
	return 0;
}

/* The region's record, then its stored pages (pimg.h's rule), run by run. */
static int send_region(struct dump *d, const char *path, const struct proc_region *r,
		       const struct pimg_region *g)
{
	struct pimg_runs it;
	uint64_t addr, npages;
	int ret;

	ret = send_msg(PROC_MSG_REGION, r, sizeof(*r), path, r->path_len);
	pimg_runs_init(&it, g, r->start, r->end, d->pagemap_fd, d->pagemap, PAGEMAP_BATCH);
	while (!ret && (ret = pimg_runs_next(&it, &addr, &npages)) == 1)
		ret = send_run(d, r, addr, npages);
	return ret;
}

/* pimg's kinds and flags are the values images store */
_Static_assert((int)PIMG_ANON == (int)PROC_REGION_ANON &&
	       (int)PIMG_FILE_PRIVATE == (int)PROC_REGION_FILE_PRIVATE &&
	       (int)PIMG_FILE_SHARED == (int)PROC_REGION_FILE_SHARED &&
	       (int)PIMG_SHARED_ANON == (int)PROC_REGION_SHARED_ANON &&
	       (int)PIMG_F_HEAP == (int)PROC_RF_HEAP && (int)PIMG_F_STACK == (int)PROC_RF_STACK &&
	       (int)PIMG_F_DELETED == (int)PROC_RF_DELETED,
	       "pimg.h and proc_format.h disagree");

static int dump_memory(struct dump *d)
{
	struct pimg_mapping m;
	struct pimg_region g;
	struct proc_region r;
	char path[PATH_MAX];

	for (const char *c = d->maps; pimg_maps_next(&c, &m);) {
		int ret;

		/* Stasis's window: the restorer's, this checkpoint's scratch buffers */
		if (m.start >= PROC_WINDOW_START && m.end <= PROC_WINDOW_END)
			continue;
		pimg_mapping_path(&m, path, sizeof(path));
		ret = pimg_classify(&m, path, &g);
		if (ret == PIMG_SKIP)
			continue;
		if (ret) {
			send_error("cannot checkpoint a mapping of", path, 0);
			return -ENOTSUP;
		}
		pimg_region_record(&m, &g, path, &r);
		ret = send_region(d, path, &r, &g);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- file descriptors ---- */

#define MAX_FDS 65536

/* Descriptors inherited at launch: open when the agent first started in
 * the job's program (stasis run's launch), other than 0-2 and the channel,
 * with what they were then. One of them that is still the same pipe, FIFO,
 * socket or terminal at a checkpoint points outside the job: it is saved as
 * PROC_FD_EXTERNAL, and a restart gives it the descriptor of its launch
 * number that `stasis restart` inherited. An exec passes the table on
 * ($STASIS_LAUNCH_FDS). */
#define MAX_LAUNCH_FDS 64
struct launch_fd {
	int32_t fd;
	uint64_t dev, ino;
};
static struct launch_fd g_launch[MAX_LAUNCH_FDS];
static unsigned g_nlaunch;

/* The external descriptors of the last checkpoint: a restart gives them
 * other objects (the restart's own), which then are what was inherited. */
#define MAX_EXTERNAL 256
static struct {
	int32_t fd, origin;
} g_external[MAX_EXTERNAL];
static unsigned g_nexternal;

/* Which of 0, 1, 2 were the launch's own objects at the last checkpoint
 * (PROC_FD_STDIO): a restart gives them the restart's, which then are. */
static int g_stdio_saved[3];

/* Whether fd is the object it was at launch (0, 1, 2 of a forked child
 * may have been redirected, to a pipe or a file of its own). One of 0-2
 * that the table does not hold counts as the launch's. */
static int launch_same(int fd, const struct stat *st)
{
	for (unsigned i = 0; i < g_nlaunch; i++)
		if (g_launch[i].fd == fd)
			return g_launch[i].dev == (uint64_t)st->st_dev &&
			       g_launch[i].ino == (uint64_t)st->st_ino;
	return fd <= 2;   /* closed at launch (or a table too small): as before */
}

static void launch_after_restart(void)
{
	for (int fd = 0; fd < 3; fd++) {
		struct stat st;

		if (!g_stdio_saved[fd] || fstat(fd, &st) != 0)
			continue;
		for (unsigned k = 0; k < g_nlaunch; k++)
			if (g_launch[k].fd == fd) {
				g_launch[k].dev = st.st_dev;
				g_launch[k].ino = st.st_ino;
			}
	}
	for (unsigned i = 0; i < g_nexternal; i++) {
		struct stat st;

		if (fstat(g_external[i].fd, &st) != 0)
			continue;
		for (unsigned k = 0; k < g_nlaunch; k++)
			if (g_launch[k].fd == g_external[i].origin) {
				g_launch[k].dev = st.st_dev;
				g_launch[k].ino = st.st_ino;
			}
	}
}

/* The launch number of the object fd is (st), if it is one inherited at
 * launch and of a kind that points outside the job; else -1. */
static int launch_origin(int fd, const struct stat *st)
{
	struct termios tio;

	if (!S_ISFIFO(st->st_mode) && !S_ISSOCK(st->st_mode) &&
	    !(S_ISCHR(st->st_mode) && ioctl(fd, TCGETS, &tio) == 0))
		return -1;
	for (unsigned i = 0; i < g_nlaunch; i++)
		if (g_launch[i].dev == (uint64_t)st->st_dev && g_launch[i].ino == (uint64_t)st->st_ino)
			return g_launch[i].fd;
	return -1;
}

static void launch_add(int fd, uint64_t dev, uint64_t ino)
{
	if (g_nlaunch < MAX_LAUNCH_FDS)
		g_launch[g_nlaunch++] = (struct launch_fd){ fd, dev, ino };
}

/* At the first start: every descriptor open now but the channel (0-2 too:
 * what they are at launch is the job's standard input and output). */
static void launch_scan(int channel, int log)
{
	char buf[4096];
	int dirfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	while (dirfd >= 0) {
		long got = syscall(SYS_getdents64, dirfd, buf, sizeof(buf));

		if (got <= 0)
			break;
		for (long off = 0; off < got;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			const char *p = e->d_name;
			struct stat st;
			int fd;

			off += e->d_reclen;
			if (*p < '0' || *p > '9')
				continue;
			fd = (int)parse_dec(&p);
			if (fd != channel && fd != log && fd != dirfd && fstat(fd, &st) == 0)
				launch_add(fd, st.st_dev, st.st_ino);
		}
	}
	if (dirfd >= 0)
		close(dirfd);
}

/* After an exec: the table as the previous program passed it on. */
static void launch_parse(const char *s)
{
	while (*s >= '0' && *s <= '9') {
		int fd = (int)parse_dec(&s);
		uint64_t dev = 0, ino = 0;

		if (*s == ':')
			s++, dev = parse_dec(&s);
		if (*s == ':')
			s++, ino = parse_dec(&s);
		launch_add(fd, dev, ino);
		if (*s != ',')
			break;
		s++;
	}
}

struct fdent {
	int32_t fd;
	uint32_t kind;
	uint64_t ino;
	int32_t origin;     /* PROC_FD_EXTERNAL: its number at launch */
};

static int fdent_find_pipe(const struct fdent *t, unsigned n, uint64_t ino, uint32_t kind)
{
	for (unsigned i = 0; i < n; i++)
		if (t[i].ino == ino && t[i].kind == kind)
			return (int)i;
	return -1;
}

static size_t put_str(char *buf, size_t n, size_t cap, const char *s);
static size_t put_dec(char *buf, size_t n, size_t cap, uint64_t v);

/* "cannot checkpoint: process <pid> (<name>): fd <fd> is <kind>": the one
 * line a refused descriptor fails the checkpoint with */
static void send_fd_refusal(int fd, const char *kind)
{
	char what[320], comm[17] = "";
	size_t n;

	prctl(PR_GET_NAME, comm);
	n = put_str(what, 0, sizeof(what), "process ");
	n = put_dec(what, n, sizeof(what), (uint64_t)getpid());
	n = put_str(what, n, sizeof(what), " (");
	n = put_str(what, n, sizeof(what), comm);
	n = put_str(what, n, sizeof(what), "): fd ");
	n = put_dec(what, n, sizeof(what), (uint64_t)fd);
	n = put_str(what, n, sizeof(what), " is ");
	put_str(what, n, sizeof(what), kind);
	send_error("cannot checkpoint", what, 0);
}

static const char *socket_family_name(int family)
{
	switch (family) {
	case AF_UNIX: return "UNIX";
	case AF_INET: return "IPv4";
	case AF_INET6: return "IPv6";
	case AF_NETLINK: return "netlink";
	case AF_PACKET: return "packet";
	default: return "another family";
	}
}

static const char *socket_type_name(int type)
{
	switch (type) {
	case SOCK_STREAM: return "stream";
	case SOCK_DGRAM: return "datagram";
	case SOCK_SEQPACKET: return "seqpacket";
	case SOCK_RAW: return "raw";
	default: return "another type";
	}
}

static void send_fd_error(int fd, mode_t mode, const char *target)
{
	char kind[128];
	size_t n = put_str(kind, 0, sizeof(kind), proc_fd_kind_name(mode, target));
	int family = 0, type = 0;
	socklen_t len = sizeof(int);

	/* a socket says which: "a socket (UNIX, datagram)" */
	if (S_ISSOCK(mode) && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) == 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0) {
		n = put_str(kind, n, sizeof(kind), " (");
		n = put_str(kind, n, sizeof(kind), socket_family_name(family));
		n = put_str(kind, n, sizeof(kind), ", ");
		n = put_str(kind, n, sizeof(kind), socket_type_name(type));
		put_str(kind, n, sizeof(kind), ")");
	}
	send_fd_refusal(fd, kind);
}

/* eventfd, timerfd and epoll descriptors are anonymous inodes, known by
 * their link text; every other anonymous inode is refused. */
static uint32_t anon_kind(int dirfd, const char *name)
{
	char target[64];
	ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);

	if (n <= 0)
		return 0;
	target[n] = 0;
	return proc_fd_kind(0, target, 0);
}

/* The fdinfo text of fd into d->copy; its length. */
static uint64_t read_fdinfo(struct dump *d, int fd)
{
	char path[40] = "/proc/self/fdinfo/";
	char num[12];
	int k = 11, v = fd, f;
	ssize_t n, total = 0;

	num[k] = 0;
	do {
		num[--k] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	memcpy(path + 18, num + k, (size_t)(12 - k));
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	while ((n = read(f, d->copy + total, COPY_BUF - 1 - (size_t)total)) > 0)
		total += n;
	close(f);
	return (uint64_t)total;
}

/* Copy what a pipe holds, without taking it out (tee into a scratch pipe). */
static int pipe_peek(struct dump *d, int fd, uint32_t size, uint64_t *len)
{
	int tmp[2];
	ssize_t n;

	*len = 0;
	if (pipe2(tmp, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	if (fcntl(tmp[1], F_SETPIPE_SZ, (int)size) < 0 && size > 65536) {
		close(tmp[0]);
		close(tmp[1]);
		return -errno;
	}
	n = tee(fd, tmp[1], size < COPY_BUF ? size : COPY_BUF, SPLICE_F_NONBLOCK);
	if (n > 0) {
		ssize_t got = read(tmp[0], d->copy, (size_t)n);

		*len = got > 0 ? (uint64_t)got : 0;
	}
	close(tmp[0]);
	close(tmp[1]);
	return n < 0 && errno != EAGAIN ? -errno : 0;
}

/* ---- inotify watches and file locks (src/proc/fd_inotify.c, fd_file.c) ---- */

/* The kernel tells a watch's inode, not its path: inotify_add_watch below
 * notes the path of each, by inode. */
#define MAX_WATCH_PATHS 128
#define WATCH_PATH_MAX 512
static struct {
	uint64_t dev, ino;
	char path[WATCH_PATH_MAX];
} g_watch[MAX_WATCH_PATHS];
static unsigned g_nwatch;
static pthread_mutex_t g_watch_lock = PTHREAD_MUTEX_INITIALIZER;

static void watch_note(const struct stat *st, const char *path)
{
	char abs[WATCH_PATH_MAX];
	size_t n = 0;
	unsigned i;

	if (path[0] != '/') {
		if (!getcwd(abs, sizeof(abs)))
			return;
		n = strlen(abs);
		if (n + 1 < sizeof(abs) && abs[n - 1] != '/')
			abs[n++] = '/';
	}
	if (n + strlen(path) + 1 > sizeof(abs))
		return;   /* not noted: a checkpoint refuses the watch */
	memcpy(abs + n, path, strlen(path) + 1);
	pthread_mutex_lock(&g_watch_lock);
	for (i = 0; i < g_nwatch; i++)
		if (g_watch[i].dev == (uint64_t)st->st_dev && g_watch[i].ino == (uint64_t)st->st_ino)
			break;
	if (i < MAX_WATCH_PATHS) {
		g_watch[i].dev = st->st_dev;
		g_watch[i].ino = st->st_ino;
		memcpy(g_watch[i].path, abs, sizeof(abs));
		if (i == g_nwatch)
			g_nwatch++;
	}
	pthread_mutex_unlock(&g_watch_lock);
}

int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
	int wd = (int)syscall(SYS_inotify_add_watch, fd, path, mask);
	int e = errno;
	struct stat st;

	if (wd >= 0 && path && ((mask & 0x01000000u /* IN_DONT_FOLLOW */) ? lstat(path, &st)
								       : stat(path, &st)) == 0)
		watch_note(&st, path);
	errno = e;
	return wd;
}

static size_t put_hex(char *buf, size_t n, size_t cap, uint64_t v)
{
	if (v >= 16)
		n = put_hex(buf, n, cap, v / 16);
	if (n + 1 < cap)
		buf[n++] = "0123456789abcdef"[v % 16];
	buf[n] = 0;
	return n;
}

/* fd's fdinfo text in d->copy, then a "watch:\t<wd> <path>" line for each of
 * its watches; 0 and a refusal sent if a watch's path was not noted. */
static int inotify_watches(struct dump *d, int fd, uint64_t *len)
{
	size_t n = (size_t)read_fdinfo(d, fd), text = n;

	for (size_t at = 0; at < text;) {
		const char *l = d->copy + at, *p;
		uint64_t wd, ino, sdev;
		unsigned i;

		while (at < text && d->copy[at] != '\n')
			at++;
		at++;
		if (strncmp(l, "inotify wd:", 11) != 0)
			continue;
		p = l + 11;
		wd = parse_hex(&p);
		if (strncmp(p, " ino:", 5) != 0)
			continue;
		p += 5;
		ino = parse_hex(&p);
		if (strncmp(p, " sdev:", 6) != 0)
			continue;
		p += 6;
		sdev = parse_hex(&p);
		/* sdev is the kernel's dev_t: major above bit 20 */
		for (i = 0; i < g_nwatch; i++)
			if (g_watch[i].ino == ino && major(g_watch[i].dev) == (sdev >> 20) &&
			    minor(g_watch[i].dev) == (sdev & 0xfffff))
				break;
		if (i == g_nwatch || n + strlen(g_watch[i].path) + 32 > COPY_BUF) {
			send_fd_refusal(fd, "an inotify watch of a path not seen added");
			return -ENOTSUP;
		}
		n = put_str(d->copy, n, COPY_BUF, "watch:\t");
		n = put_hex(d->copy, n, COPY_BUF, wd);
		n = put_str(d->copy, n, COPY_BUF, " ");
		n = put_str(d->copy, n, COPY_BUF, g_watch[i].path);
		n = put_str(d->copy, n, COPY_BUF, "\n");
	}
	*len = n;
	return 0;
}

/* The "lock:" lines of fd's fdinfo text in d->copy (not the "->" lines of
 * a lock waited for); their length. */
static uint64_t file_locks(struct dump *d, int fd)
{
	size_t text = (size_t)read_fdinfo(d, fd), out = 0;

	for (size_t at = 0; at < text;) {
		size_t start = at, arrow = 0;

		while (at < text && d->copy[at] != '\n') {
			arrow |= at > start && d->copy[at - 1] == '-' && d->copy[at] == '>';
			at++;
		}
		if (at < text)
			at++;
		if (at - start > 6 && strncmp(d->copy + start, "lock:\t", 6) == 0 && !arrow) {
			memmove(d->copy + out, d->copy + start, at - start);
			out += at - start;
		}
	}
	return out;
}

/* ---- sockets (src/proc/fd_socket.c) ---- */

/* UNIX stream, datagram and seqpacket sockets and TCP sockets are saved;
 * any other socket is refused. */
static uint32_t socket_kind(int fd)
{
	int domain = 0, type = 0;
	socklen_t len = sizeof(int);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
		return 0;
	if (domain == AF_UNIX)
		return type == SOCK_STREAM || type == SOCK_DGRAM || type == SOCK_SEQPACKET ? PROC_FD_SOCKET : 0;
	return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM ? PROC_FD_SOCKET : 0;
}

/* The messages a UNIX datagram or seqpacket socket holds, peeked one by
 * one (a peek offset walks the queue) into buf as a u32 length and the
 * bytes each; their length, or -1 when they do not fit. */
static ssize_t peek_messages(int fd, char *buf, size_t cap)
{
	size_t used = 0;
	int off = 0;

	(void)setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off));
	for (;;) {
		size_t room = cap - used > 4 ? cap - used - 4 : 0;
		ssize_t r = room ? recv(fd, buf + used + 4, room, MSG_PEEK | MSG_DONTWAIT) : -1;
		uint32_t len = (uint32_t)r;

		if (r < 0 && room && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;   /* the last message was peeked */
		if (r < 0 || (size_t)r == room) {
			used = (size_t)-1;   /* no room left, or a message as long as it */
			break;
		}
		memcpy(buf + used, &len, 4);
		used += 4 + (size_t)r;
	}
	off = -1;
	(void)setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off));
	return used == (size_t)-1 ? -1 : (ssize_t)used;
}

/* The inode of the peer of UNIX socket ino (sock_diag), 0 if none. */
static uint64_t unix_peer(uint64_t ino)
{
	struct {
		struct nlmsghdr nh;
		struct unix_diag_req r;
	} req;
	char buf[1024] __attribute__((aligned(8)));
	const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
	uint64_t peer = 0;
	ssize_t n;
	int s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	if (s < 0)
		return 0;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = sizeof(req);
	req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = AF_UNIX;
	req.r.udiag_states = ~0u;
	req.r.udiag_ino = (uint32_t)ino;
	req.r.udiag_show = UDIAG_SHOW_PEER;
	req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u;
	n = send(s, &req, sizeof(req), 0) == (ssize_t)sizeof(req) ? recv(s, buf, sizeof(buf), 0) : -1;
	close(s);
	if (n < (ssize_t)sizeof(*h) || !NLMSG_OK(h, (size_t)n) || h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return 0;
	{
		const struct unix_diag_msg *m = NLMSG_DATA(h);
		const struct rtattr *a = (const struct rtattr *)(m + 1);
		int left = (int)h->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*m));

		for (; RTA_OK(a, left); a = RTA_NEXT(a, left))
			if (a->rta_type == UNIX_DIAG_PEER)
				peer = *(const uint32_t *)RTA_DATA(a);
	}
	return peer;
}

/* A TCP socket closed (reset) after it was connected: it has had packets. */
static int tcp_was_connected(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == 7 /* TCP_CLOSE */ &&
	       ti.tcpi_segs_in > 0;
}

/* FNV-1a of a TCP connection's two addresses, in that order */
static uint64_t addr_hash(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint64_t h = 14695981039346656037ull;

	for (uint32_t k = 0; k < alen + blen; k++)
		h = (h ^ (k < alen ? a[k] : b[k - alen])) * 1099511628211ull;
	return h;
}

static int same_addr(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

/* struct proc_socket of t[i] in d->copy, then its unread bytes; their
 * length, or a negative errno with a refusal sent. */
static int describe_socket(struct dump *d, const struct fdent *t, unsigned n, unsigned i,
			   uint64_t *len)
{
	struct proc_socket *s = (struct proc_socket *)d->copy;
	int fd = t[i].fd, v = 0, q = 0;
	socklen_t ol = sizeof(int), al;

	memset(s, 0, sizeof(*s));
	getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &ol);
	s->family = (uint32_t)v;
	ol = sizeof(int);
	getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &ol);
	s->type = (uint32_t)v;
	getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &ol);
	s->protocol = (uint32_t)v;
	v = 0;
	getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, &ol);
	s->reuseaddr = v != 0;
	al = sizeof(s->local);
	if (getsockname(fd, (struct sockaddr *)s->local, &al) == 0)
		s->local_len = al;
	al = sizeof(s->peer);
	v = 0;
	getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &ol);
	if (v) {
		s->state = PROC_SOCK_LISTEN;
		s->backlog = 128;
	} else if (getpeername(fd, (struct sockaddr *)s->peer, &al) == 0) {
		s->state = PROC_SOCK_CONNECTED;
		s->peer_len = al;
	} else if (s->family != AF_UNIX && tcp_was_connected(fd)) {
		s->state = PROC_SOCK_CONNECTED;   /* and closed since: it stays so */
		s->outside = 1;
	} else {
		s->state = PROC_SOCK_UNCONNECTED;
	}
	if (s->state == PROC_SOCK_CONNECTED && s->family == AF_UNIX) {
		s->peer_ino = unix_peer(t[i].ino);
		s->outside = 1;
		for (unsigned k = 0; k < n && s->peer_ino; k++)
			if (t[k].kind == PROC_FD_SOCKET && t[k].ino == s->peer_ino)
				s->outside = 0;
	} else if (s->state == PROC_SOCK_CONNECTED) {
		s->outside = 1;
		for (unsigned k = 0; k < n && s->outside; k++) {
			uint8_t la[128], pa[128];
			socklen_t ll = sizeof(la), pl = sizeof(pa);

			if (k == i || t[k].kind != PROC_FD_SOCKET ||
			    getsockname(t[k].fd, (struct sockaddr *)la, &ll) != 0 ||
			    getpeername(t[k].fd, (struct sockaddr *)pa, &pl) != 0)
				continue;
			if (same_addr(la, ll, s->peer, s->peer_len) && same_addr(pa, pl, s->local, s->local_len))
				s->outside = 0;
		}
	}
	*len = sizeof(*s);
	/* A connection killed with the process may wait in TIME_WAIT on its
	 * port; with SO_REUSEADDR on it then (the record keeps the program's
	 * value), a restart can bind a listener to that port again. */
	if (s->state == PROC_SOCK_CONNECTED && s->family != AF_UNIX && !s->reuseaddr) {
		v = 1;
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v));
	}
	if (s->type != SOCK_STREAM) {
		ssize_t m;

		if (s->state == PROC_SOCK_CONNECTED && s->outside)
			return 0;
		m = peek_messages(fd, d->copy + sizeof(*s), COPY_BUF - sizeof(*s));
		if (m < 0 || (m > 0 && s->state != PROC_SOCK_CONNECTED)) {
			send_fd_refusal(fd, m < 0 ? "a UNIX socket holding more messages than Stasis keeps"
						  : "a UNIX datagram socket with messages from other sockets");
			return -ENOTSUP;
		}
		s->queued = (uint64_t)m;
		*len += (uint64_t)m;
		return 0;
	}
	if (s->state != PROC_SOCK_CONNECTED || s->outside)
		return 0;
	if (s->family != AF_UNIX && ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0) {
		send_fd_refusal(fd, "a TCP connection with data not yet received by its peer");
		return -ENOTSUP;
	}
	q = 0;
	if (ioctl(fd, SIOCINQ, &q) == 0 && q > 0) {
		size_t want = (size_t)q < COPY_BUF - sizeof(*s) ? (size_t)q : COPY_BUF - sizeof(*s);
		size_t got = 0;
		int off = 0;

		/* peek, not take: a peek offset walks the queue, then goes */
		(void)setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off));
		while (got < want) {
			ssize_t r = recv(fd, d->copy + sizeof(*s) + got, want - got, MSG_PEEK | MSG_DONTWAIT);

			if (r <= 0)
				break;
			got += (size_t)r;
		}
		off = -1;
		(void)setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off));
		if (got < (size_t)q) {
			send_fd_refusal(fd, "a socket whose unread bytes cannot be peeked at");
			return -ENOTSUP;
		}
		s->queued = got;
		*len += got;
	}
	return 0;
}

/* ---- pseudo-terminals (src/proc/fd_pty.c) ---- */

/* A pty master (/dev/ptmx) and a pty slave (/dev/pts/N) by device number. */
static int pty_master_dev(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && major(st->st_rdev) == 5 && minor(st->st_rdev) == 2;
}

static int pty_slave_index(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && major(st->st_rdev) >= 136 && major(st->st_rdev) <= 143
		       ? (int)((major(st->st_rdev) - 136) * 256 + minor(st->st_rdev)) : -1;
}

/* The master of pty slave index idx among t, or -1. */
static int pty_master_of(const struct fdent *t, unsigned n, int idx)
{
	for (unsigned k = 0; k < n; k++) {
		struct stat st;
		int got = -1;

		if (t[k].kind == PROC_FD_CHAR && fstat(t[k].fd, &st) == 0 && pty_master_dev(&st) &&
		    ioctl(t[k].fd, TIOCGPTN, &got) == 0 && got == idx)
			return (int)k;
	}
	return -1;
}

/* struct proc_pty of pty end fd in d->copy, then (a master's) the bytes its
 * slave wrote that it has not read: taken out, and written back through
 * the slave with output processing off, so that the program still reads
 * them. Its length, or a negative errno with a refusal sent. */
static int describe_pty(struct dump *d, const struct fdent *t, unsigned n, int fd, int master,
			int index, uint64_t *len)
{
	struct proc_pty *p = (struct proc_pty *)d->copy;
	struct termios raw;
	int q = 0, slave = -1, lock = 0;

	memset(p, 0, sizeof(*p));
	p->master = (uint32_t)master;
	p->index = (uint32_t)index;
	if (tcgetattr(fd, (struct termios *)p->termios) != 0 || ioctl(fd, TIOCGWINSZ, &p->winsize_rows) != 0) {
		send_fd_refusal(fd, "a pseudo-terminal whose settings cannot be read");
		return -ENOTSUP;
	}
	if (master && ioctl(fd, TIOCGPTLCK, &lock) == 0)
		p->locked = (uint32_t)lock;
	*len = sizeof(*p);
	if (!master) {
		if (ioctl(fd, FIONREAD, &q) == 0 && q > 0) {
			send_fd_refusal(fd, "a pseudo-terminal with input not yet read");
			return -ENOTSUP;
		}
		return 0;
	}
	if (ioctl(fd, FIONREAD, &q) != 0 || q <= 0)
		return 0;
	for (unsigned k = 0; k < n && slave < 0; k++) {
		struct stat st;

		if (t[k].kind == PROC_FD_CHAR && fstat(t[k].fd, &st) == 0 && pty_slave_index(&st) == index)
			slave = t[k].fd;
	}
	if (slave < 0 || (size_t)q > COPY_BUF - sizeof(*p)) {
		send_fd_refusal(fd, "a pseudo-terminal with output not yet read and no slave to put it back");
		return -ENOTSUP;
	}
	{
		int fl = fcntl(fd, F_GETFL);
		ssize_t got;

		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		got = read(fd, d->copy + sizeof(*p), (size_t)q);
		fcntl(fd, F_SETFL, fl);
		if (got <= 0)
			return 0;
		raw = *(struct termios *)p->termios;
		raw.c_oflag &= ~(tcflag_t)OPOST;
		tcsetattr(slave, TCSANOW, &raw);
		if (write(slave, d->copy + sizeof(*p), (size_t)got) != got) {
			tcsetattr(slave, TCSANOW, (struct termios *)p->termios);
			send_fd_refusal(fd, "a pseudo-terminal whose output cannot be put back");
			return -ENOTSUP;
		}
		tcsetattr(slave, TCSANOW, (struct termios *)p->termios);
		p->queued = (uint64_t)got;
		*len += (uint64_t)got;
	}
	return 0;
}

/* A file made with O_TMPFILE and then named with linkat keeps the link
 * "/dir/#123 (deleted)" in /proc/self/fd though it has a name: the name
 * the program gave it, from the list of written files (uh_files.c's
 * linkat), or the link as it is */
static ssize_t linked_name(const struct stat *st, char *target, ssize_t len)
{
	static const char tail[] = " (deleted)";
	const struct sts_written *l = &sts_written;

	if (st->st_nlink == 0 || len < (ssize_t)sizeof(tail) ||
	    memcmp(target + len - (ssize_t)sizeof(tail) + 1, tail, sizeof(tail) - 1) != 0)
		return len;
	for (uint32_t i = 0; i < l->n && i < STS_WRITTEN_MAX; i++)
		if (l->v[i].dev == (uint64_t)st->st_dev && l->v[i].ino == (uint64_t)st->st_ino &&
		    memchr(l->v[i].path, 0, PATH_MAX)) {
			len = (ssize_t)strlen(l->v[i].path);
			memcpy(target, l->v[i].path, (size_t)len + 1);
			break;
		}
	return len;
}

static int send_fd(struct dump *d, const struct fdent *t, unsigned n, unsigned i, int dirfd)
{
	char link[32], target[PATH_MAX];
	struct proc_fd r;
	struct stat st;
	ssize_t tl;
	int fd = t[i].fd, flags, ret;
	uint64_t data_len = 0;
	int data_fd = -1;

	memset(&r, 0, sizeof(r));
	memcpy(link, "/proc/self/fd/", 14);
	{
		char num[12];
		int k = 11, v = fd;

		num[k] = 0;
		do {
			num[--k] = (char)('0' + v % 10);
			v /= 10;
		} while (v);
		memcpy(link + 14, num + k, (size_t)(12 - k));
	}
	tl = readlinkat(dirfd, link + 14, target, sizeof(target) - 1);
	if (tl < 0 || fstat(fd, &st) != 0)
		return 0;   /* closed meanwhile (by the agent itself): nothing to save */
	target[tl] = 0;
	flags = fcntl(fd, F_GETFL);
	r.fd = fd;
	r.flags = (uint32_t)flags;
	r.cloexec = (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
	r.mode = st.st_mode;
	r.ino = st.st_ino;
	r.dev = st.st_dev;
	r.kind = t[i].kind;
	if (r.kind == PROC_FD_STDIO) {
		/* the restart's own 0, 1, 2 */
	} else if (r.kind == PROC_FD_EXTERNAL) {
		r.origin = t[i].origin;
	} else if (r.kind == PROC_FD_FILE || r.kind == PROC_FD_DIR) {
		off_t off = lseek(fd, 0, SEEK_CUR);

		r.offset = off < 0 ? 0 : (uint64_t)off;
		r.size = (uint64_t)st.st_size;
		if (r.kind == PROC_FD_FILE && st.st_nlink == 0) {
			r.kind = PROC_FD_UNLINKED;
			data_fd = open(link, O_RDONLY | O_CLOEXEC);
			if (data_fd < 0) {
				send_error("cannot read the unlinked file", target, errno);
				return -ENOTSUP;
			}
			data_len = r.size;
		} else if (r.kind == PROC_FD_FILE) {
			tl = linked_name(&st, target, tl);
			data_len = file_locks(d, fd);
		}
	} else if (r.kind == PROC_FD_PIPE_READ) {
		int p = fcntl(fd, F_GETPIPE_SZ);

		r.pipe_size = p > 0 ? (uint32_t)p : 65536;
		/* the first read end of a pipe carries its contents */
		if (fdent_find_pipe(t, n, t[i].ino, PROC_FD_PIPE_READ) == (int)i) {
			ret = pipe_peek(d, fd, r.pipe_size, &data_len);
			if (ret) {
				send_error("cannot read the contents of pipe", target, -ret);
				return -ENOTSUP;
			}
		}
	} else if (r.kind == PROC_FD_EVENTFD || r.kind == PROC_FD_TIMERFD || r.kind == PROC_FD_EPOLL ||
		   r.kind == PROC_FD_SIGNALFD) {
		data_len = read_fdinfo(d, fd);
	} else if (r.kind == PROC_FD_INOTIFY) {
		if (inotify_watches(d, fd, &data_len))
			return -ENOTSUP;
	} else if (r.kind == PROC_FD_SOCKET) {
		const struct proc_socket *so = (const struct proc_socket *)d->copy;

		if (describe_socket(d, t, n, i, &data_len))
			return -ENOTSUP;
		if (so->state == PROC_SOCK_CONNECTED && so->family == AF_UNIX &&
		    !(so->type == SOCK_DGRAM && so->peer_len > sizeof(sa_family_t) + 1)) {
			r.offset = st.st_ino;
			r.size = so->peer_ino ? so->peer_ino : UINT64_MAX;   /* max: not yet accepted */
		} else if (so->state == PROC_SOCK_CONNECTED && so->peer_len) {
			r.offset = addr_hash(so->local, so->local_len, so->peer, so->peer_len);
			r.size = addr_hash(so->peer, so->peer_len, so->local, so->local_len);
		}
	} else if (r.kind == PROC_FD_CHAR && (pty_master_dev(&st) ||
					      pty_master_of(t, n, pty_slave_index(&st)) >= 0)) {
		int idx = pty_slave_index(&st);

		if (idx < 0 && ioctl(fd, TIOCGPTN, &idx) != 0)
			idx = -1;
		r.kind = PROC_FD_PTY;
		if (describe_pty(d, t, n, fd, pty_master_dev(&st), idx, &data_len))
			return -ENOTSUP;
	} else if (r.kind == PROC_FD_PIPE_WRITE) {
		int p = fcntl(fd, F_GETPIPE_SZ);

		r.pipe_size = p > 0 ? (uint32_t)p : 65536;
	}
	r.path_len = (uint32_t)tl + 1;
	r.data_len = data_len;
	{
		struct proc_msg m = { PROC_MSG_MAGIC, PROC_MSG_FD, sizeof(r) + r.path_len + data_len };

		ret = write_all(g_channel, &m, sizeof(m));
		if (!ret)
			ret = write_all(g_channel, &r, sizeof(r));
		if (!ret)
			ret = write_all(g_channel, target, r.path_len);
	}
	if (!ret && data_len && data_fd < 0)
		ret = write_all(g_channel, d->copy, data_len);
	for (uint64_t off = 0; !ret && data_fd >= 0 && off < data_len;) {
		size_t want = data_len - off < COPY_BUF ? (size_t)(data_len - off) : COPY_BUF;
		ssize_t got = pread(data_fd, d->copy, want, (off_t)off);

		if (got <= 0) {
			/* the file shrank under us: pad, the record's size is what counts */
			memset(d->copy, 0, want);
			got = (ssize_t)want;
		}
		ret = write_all(g_channel, d->copy, (size_t)got);
		off += (uint64_t)got;
	}
	if (data_fd >= 0)
		close(data_fd);
	return ret;
}

/* Every descriptor of the program, or a refusal naming the first one that
 * cannot be saved. The channel and this function's own descriptor are not
 * the program's. */
static int dump_fds(struct dump *d)
{
	char buf[8192];
	struct fdent *t = scratch_map(MAX_FDS * sizeof(struct fdent));
	unsigned n = 0;
	int dirfd, ret = 0;

	if (!t)
		return -ENOMEM;
	g_nexternal = 0;
	dirfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		send_error("cannot list", "/proc/self/fd", errno);
		return -ENOTSUP;
	}
	for (;;) {
		long got = syscall(SYS_getdents64, dirfd, buf, sizeof(buf));

		if (got <= 0)
			break;
		for (long off = 0; off < got;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			const char *p = e->d_name;
			struct stat st;
			int fd;

			off += e->d_reclen;
			if (*p < '0' || *p > '9')
				continue;
			fd = (int)parse_dec(&p);
			if (fd == dirfd || fd == g_channel || fd == d->pagemap_fd || fd == d->mem_fd ||
			    n >= MAX_FDS || fstat(fd, &st) != 0)
				continue;
			t[n].fd = fd;
			t[n].ino = st.st_ino;
			/* the tree's list of written files: the restart's own */
			t[n].origin = fd == sts_written_log ? PROC_WRITTEN_ORIGIN
				    : fd > 2 ? launch_origin(fd, &st) : -1;
			if (fd <= 2)
				g_stdio_saved[fd] = launch_same(fd, &st);
			if (t[n].origin >= 0 && g_nexternal < MAX_EXTERNAL) {
				g_external[g_nexternal].fd = fd;
				g_external[g_nexternal++].origin = t[n].origin;
			}
			if (fd <= 2 && g_stdio_saved[fd])
				t[n].kind = PROC_FD_STDIO;
			else if (t[n].origin >= 0)
				t[n].kind = PROC_FD_EXTERNAL;
			else if (S_ISREG(st.st_mode))
				t[n].kind = PROC_FD_FILE;
			else if (S_ISDIR(st.st_mode))
				t[n].kind = PROC_FD_DIR;
			else if (S_ISCHR(st.st_mode))
				t[n].kind = PROC_FD_CHAR;
			else if (S_ISFIFO(st.st_mode))
				t[n].kind = (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY ? PROC_FD_PIPE_READ
											: PROC_FD_PIPE_WRITE;
			else if (S_ISSOCK(st.st_mode))
				t[n].kind = socket_kind(fd);
			else
				t[n].kind = anon_kind(dirfd, e->d_name);
			n++;
		}
	}
	for (unsigned i = 0; !ret && i < n; i++) {
		char link[16], target[PATH_MAX];
		ssize_t tl;
		struct stat st;
		int other = -1;

		if (t[i].kind == PROC_FD_STDIO)
			continue;
		if (t[i].kind == PROC_FD_PIPE_READ)
			other = fdent_find_pipe(t, n, t[i].ino, PROC_FD_PIPE_WRITE);
		else if (t[i].kind == PROC_FD_PIPE_WRITE)
			other = fdent_find_pipe(t, n, t[i].ino, PROC_FD_PIPE_READ);
		if (t[i].kind && ((t[i].kind != PROC_FD_PIPE_READ && t[i].kind != PROC_FD_PIPE_WRITE) ||
				  other >= 0))
			continue;
		{
			char num[12];
			int k = 11, v = t[i].fd;

			num[k] = 0;
			do {
				num[--k] = (char)('0' + v % 10);
				v /= 10;
			} while (v);
			memcpy(link, num + k, (size_t)(12 - k));
		}
		tl = readlinkat(dirfd, link, target, sizeof(target) - 1);
		target[tl > 0 ? tl : 0] = 0;
		/* an anonymous pipe whose other end is in another process of the
		 * tree (or nowhere): the restart makes it once for all of them
		 * (docs/transparent.md, "Process trees"); a named FIFO is refused */
		if (t[i].kind && strncmp(target, "pipe:[", 6) == 0)
			continue;
		/* refuse: name the descriptor and its kind */
		fstat(t[i].fd, &st);
		send_fd_error(t[i].fd, st.st_mode, target);
		ret = -ENOTSUP;
	}
	for (unsigned i = 0; !ret && i < n; i++)
		ret = send_fd(d, t, n, i, dirfd);
	close(dirfd);
	scratch_unmap(t, MAX_FDS * sizeof(struct fdent));
	return ret;
}

/* ---- child processes ---- */

static size_t put_str(char *buf, size_t n, size_t cap, const char *s)
{
	while (*s && n + 1 < cap)
		buf[n++] = *s++;
	buf[n] = 0;
	return n;
}

static size_t put_dec(char *buf, size_t n, size_t cap, uint64_t v)
{
	char num[24];
	int k = 23;

	num[k] = 0;
	do {
		num[--k] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return put_str(buf, n, cap, num + k);
}

/* The parent, name, state and (a zombie's) wait status of process pid,
 * from /proc/<pid>/stat; -1 when it cannot be read (the process is gone, or
 * /proc is another namespace's). */
static pid_t stat_parent(pid_t pid, char *comm, size_t cap, char *state, int *exit_code)
{
	char path[48], buf[1024];
	const char *open_paren, *close_paren, *q;
	pid_t ppid;
	size_t n;
	ssize_t got;
	int fd;

	n = put_str(path, 0, sizeof(path), "/proc/");
	n = put_dec(path, n, sizeof(path), (uint64_t)pid);
	put_str(path, n, sizeof(path), "/stat");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (got <= 0)
		return -1;
	buf[got] = 0;
	/* "pid (comm) state ppid ...": the name may hold spaces and ')' */
	open_paren = strchr(buf, '(');
	close_paren = strrchr(buf, ')');
	if (!open_paren || !close_paren || close_paren < open_paren || close_paren[1] != ' ' ||
	    !close_paren[2] || close_paren[3] != ' ')
		return -1;
	n = (size_t)(close_paren - open_paren - 1);
	if (n >= cap)
		n = cap - 1;
	memcpy(comm, open_paren + 1, n);
	comm[n] = 0;
	*state = close_paren[2];
	q = close_paren + 4;
	ppid = (pid_t)parse_dec(&q);
	/* field 52, exit_code: a zombie's status in waitpid's form */
	*exit_code = 0;
	for (int field = 4; field < 52 && *q; q++)
		if (*q == ' ')
			field++;
	if (*q >= '0' && *q <= '9')
		*exit_code = (int)parse_dec(&q);
	return ppid;
}

/* Every thread parked: tell the coordinator who this process is and
 * which children it has (running ones have agents of their own, or the
 * coordinator refuses the checkpoint naming them; zombies are restored as
 * zombies). With every thread parked no child can appear meanwhile. */
static int send_parked(void)
{
	struct proc_parked p = { getpid(), getppid(), getpgid(0), getsid(0), 0, 0 };
	struct proc_kid *kids = scratch_map(MAX_THREADS * sizeof(*kids));
	char buf[8192];
	int dirfd, ret;

	if (!kids) {
		send_error("checkpoint", "out of memory", ENOMEM);
		return -ENOMEM;
	}
	dirfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (dirfd >= 0 && p.nkids < MAX_THREADS) {
		long got = syscall(SYS_getdents64, dirfd, buf, sizeof(buf));

		if (got <= 0)
			break;
		for (long off = 0; off < got && p.nkids < MAX_THREADS;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			const char *q = e->d_name;
			struct proc_kid *k = &kids[p.nkids];
			char state = 0;
			pid_t pid;

			off += e->d_reclen;
			if (*q < '0' || *q > '9')
				continue;
			pid = (pid_t)parse_dec(&q);
			if (pid == p.pid ||
			    stat_parent(pid, k->comm, sizeof(k->comm), &state, &k->status) != p.pid)
				continue;
			k->pid = pid;
			k->zombie = state == 'Z' || state == 'X';
			p.nkids++;
		}
	}
	if (dirfd >= 0)
		close(dirfd);
	ret = send_msg(PROC_MSG_PARKED, &p, sizeof(p), kids, p.nkids * sizeof(*kids));
	scratch_unmap(kids, MAX_THREADS * sizeof(*kids));
	return ret;
}

/* The files the program opened for writing (uh_files.c's list, in this
 * library), for the coordinator to save those it has closed
 * (src/proc/written.c); the gone ones leave the list first. A thread takes
 * the list's lock only with every signal blocked, so with every thread
 * parked it is free: taken here only if it is. */
static int send_written(void)
{
	struct sts_written *l = &sts_written;
	struct proc_written_list h;
	uint64_t len = sizeof(h);
	int ret;

	if (l->n > STS_WRITTEN_MAX || __atomic_exchange_n(&l->lock, 1, __ATOMIC_ACQUIRE))
		return 0;
	sts_written_forget_gone(l);
	h.n = 0;
	h.dropped = l->dropped;
	for (uint32_t i = 0; i < l->n; i++)
		if (memchr(l->v[i].path, 0, sizeof(l->v[i].path))) {
			len += strlen(l->v[i].path) + 1;
			h.n++;
		}
	{
		struct proc_msg m = { PROC_MSG_MAGIC, PROC_MSG_WRITTEN, len };

		ret = write_all(g_channel, &m, sizeof(m));
	}
	ret = ret ? ret : write_all(g_channel, &h, sizeof(h));
	for (uint32_t i = 0; !ret && i < l->n; i++)
		if (memchr(l->v[i].path, 0, sizeof(l->v[i].path)))
			ret = write_all(g_channel, l->v[i].path, strlen(l->v[i].path) + 1);
	if (!ret)
		l->dropped = 0;
	__atomic_store_n(&l->lock, 0, __ATOMIC_RELEASE);
	return ret;
}

static void dump_free(struct dump *d)
{
	if (d->maps)
		scratch_unmap(d->maps, d->maps_cap);
	if (d->pagemap)
		scratch_unmap(d->pagemap, PAGEMAP_BATCH * 8);
	if (d->copy)
		scratch_unmap(d->copy, COPY_BUF);
	if (d->pagemap_fd >= 0)
		close(d->pagemap_fd);
	if (d->mem_fd >= 0)
		close(d->mem_fd);
}

/* Everything after the threads are parked; returns 0 when the stream ended
 * with END, else a negative errno (an ERROR message was sent if possible). */
static int dump_process(unsigned nthreads)
{
	struct dump d = { .pagemap_fd = -1, .mem_fd = -1 };
	int ret = -ENOMEM;

	d.pagemap = scratch_map(PAGEMAP_BATCH * 8);
	d.copy = scratch_map(COPY_BUF);
	if (!d.pagemap || !d.copy)
		goto out;
	d.pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	d.mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	if (d.pagemap_fd < 0 || d.mem_fd < 0) {
		ret = -errno;
		send_error("cannot open", "/proc/self/pagemap or /proc/self/mem", -ret);
		goto out;
	}
	/* the scratch buffers exist before maps is read, so they are skipped */
	d.maps = read_proc_file("/proc/self/maps", &d.maps_len, &d.maps_cap);
	if (!d.maps) {
		send_error("cannot read", "/proc/self/maps", errno);
		goto out;
	}
	ret = send_header(&d, nthreads, 0);   /* the coordinator counts regions */
	if (!ret)
		ret = send_sigactions();
	for (unsigned i = 0; !ret && i < nthreads; i++)
		ret = send_thread(&g_slots[i]);
	if (!ret)
		ret = dump_fds(&d);
	if (!ret)
		ret = send_written();
	if (!ret)
		ret = dump_memory(&d);
	if (!ret)
		ret = send_msg(PROC_MSG_END, NULL, 0, NULL, 0);
out:
	dump_free(&d);
	return ret;
}

/* Runs in the agent thread's own signal handler. */
static void checkpoint(void *ucv)
{
	struct proc_msg cmd;
	int ret;

	fill_slot(&g_slots[0], ucv, PROC_THREAD_AGENT);
	g_scratch_next = 0;
	g_error_sent = 0;
	ret = pimg_park_all(&g_park, STOP_TIMEOUT_MS);
	if (ret == -ETIMEDOUT)
		send_error("checkpoint", "a thread did not stop within 10 s (is the checkpoint "
			   "signal 62 blocked?)", 0);
	else if (ret == -E2BIG || g_park.slots >= MAX_THREADS)
		send_error("checkpoint", "more than 1023 threads", 0);
	else if (ret)
		send_error("checkpoint", "cannot list /proc/self/task", -ret);
	else if (send_parked() != 0 || read_all(g_channel, &cmd, sizeof(cmd)) != 0)
		ret = -EPIPE;   /* the coordinator is gone */
	else if (cmd.type != PROC_CMD_DUMP)
		goto verdict;   /* another process of the tree refused: no dump */
	else if ((ret = dump_process(1 + g_park.parked)) != 0 && ret != -EPIPE && !g_error_sent)
		/* the stream is whole: say why it stops here */
		send_error("checkpoint", "cannot save the process", -ret);
	munmap((void *)(uintptr_t)PROC_WINDOW_AGENT, g_scratch_next);
	/* the coordinator answers once the image is durable or abandoned */
	ret = read_all(g_channel, &cmd, sizeof(cmd));
	goto done;
verdict:
	munmap((void *)(uintptr_t)PROC_WINDOW_AGENT, g_scratch_next);
done:
	if (!ret && cmd.type == PROC_CMD_EXIT)
		syscall(SYS_exit_group, 0);
	release_threads();
	if (ret) {
		close(g_channel);
		g_channel = -1;
	}
}

static void handler(int sig, siginfo_t *si, void *ucv)
{
	int saved = errno;

	(void)sig;
	(void)si;
	if (atomic_load(&g_stopping)) {
		if (raw_gettid() == g_agent_tid)
			checkpoint(ucv);
		else
			park_thread(ucv);
	}
	errno = saved;
}

/* ---- the agent thread ---- */

static void after_restart(void)
{
	struct proc_hello h = { PROC_FORMAT_VERSION, getpid(),
				(uint64_t)(uintptr_t)&stasis_agent_state };

	g_seen_restarts = stasis_agent_state.restarts;
	g_channel = stasis_agent_state.channel_fd;
	launch_after_restart();
	pimg_park_reset(&g_park);
	/* a thread of the program may be forking: its CHILD record must not
	 * cut into this one */
	pthread_mutex_lock(&g_fork_lock);
	if (send_msg(PROC_MSG_RESTARTED, &h, sizeof(h), NULL, 0) != 0) {
		close(g_channel);
		g_channel = -1;
	}
	pthread_mutex_unlock(&g_fork_lock);
	/* g_stopping was set when the image was taken: until now it kept every
	 * exec waiting (exec_common), which would have ended this thread
	 * before the coordinator heard RESTARTED */
	atomic_store(&g_stopping, 0);
}

/* The next command, left in the channel: the exec of another program
 * (exec_common) may end this thread at any moment, and a command it had
 * taken out would be lost to the next program's agent. 0, or -EPIPE when
 * the channel is gone. */
static int peek_command(struct proc_msg *cmd)
{
	for (;;) {
		ssize_t n = recv(g_channel, cmd, sizeof(*cmd), MSG_PEEK | MSG_WAITALL);

		if (n == (ssize_t)sizeof(*cmd))
			return 0;
		if (n == 0 || (n < 0 && errno != EINTR))
			return -EPIPE;
		if (n > 0) {
			struct timespec ms = { 0, 1000000 };

			nanosleep(&ms, NULL);
		}
	}
}

static void *agent_main(void *arg)
{
	struct proc_msg cmd;

	(void)arg;
	g_agent_tid = raw_gettid();
	while (g_channel >= 0) {
		if (peek_command(&cmd) != 0 || cmd.magic != PROC_MSG_MAGIC)
			break;
		if (cmd.type == PROC_CMD_CHECKPOINT) {
			atomic_store(&g_stopping, 1);
			if (atomic_load(&g_exec)) {
				/* the program becomes another now: the command stays
				 * for that one's agent (or for this one, should the
				 * exec fail) */
				struct timespec ms = { 0, 1000000 };

				atomic_store(&g_stopping, 0);
				nanosleep(&ms, NULL);
				continue;
			}
		}
		/* no exec can start now: take the command out */
		if (read_all(g_channel, &cmd, sizeof(cmd)) != 0)
			break;
		if (cmd.type == PROC_CMD_EXIT)
			syscall(SYS_exit_group, 0);
		if (cmd.type != PROC_CMD_CHECKPOINT)
			continue;
		syscall(SYS_tgkill, getpid(), g_agent_tid, PROC_CKPT_SIGNAL);
		/* back here after the checkpoint, or in a restored process */
		if (stasis_agent_state.restarts != g_seen_restarts)
			after_restart();
	}
	if (g_channel >= 0)
		close(g_channel);
	g_channel = -1;
	return NULL;
}

/* ---- keep the checkpoint signal usable ---- */

static int (*real_sigprocmask)(int, const sigset_t *, sigset_t *);
static int (*real_pthread_sigmask)(int, const sigset_t *, sigset_t *);
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static const sigset_t *unblock_ckpt(int how, const sigset_t *set, sigset_t *copy)
{
	if (!set || how == SIG_UNBLOCK || !sigismember(set, PROC_CKPT_SIGNAL))
		return set;
	*copy = *set;
	sigdelset(copy, PROC_CKPT_SIGNAL);
	return copy;
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t copy;

	if (!real_sigprocmask)
		real_sigprocmask = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "sigprocmask");
	return real_sigprocmask(how, unblock_ckpt(how, set, &copy), old);
}

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t copy;

	if (!real_pthread_sigmask)
		real_pthread_sigmask = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "pthread_sigmask");
	return real_pthread_sigmask(how, unblock_ckpt(how, set, &copy), old);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (!real_sigaction)
		real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
	if (sig == PROC_CKPT_SIGNAL && act && g_channel >= 0) {
		errno = EINVAL;
		return -1;
	}
	return real_sigaction(sig, act, old);
}

/* ---- exec: the agent goes on in the new program ---- */

/* The channel is close-on-exec, so that a child started by posix_spawn,
 * system() or popen() (glibc execs there without these wrappers) never
 * holds it. A program that execs another through libc's exec functions
 * keeps it: the wrapper passes its number and the launch descriptors on in
 * the new environment and lets the channel through the exec, provided the
 * new environment still preloads this library (else the coordinator sees
 * the channel close: no agent). No checkpoint runs meanwhile: g_exec and
 * g_stopping are set in opposite orders on each side, so one side always
 * sees the other's (agent_main leaves the command for the next program's
 * agent; the exec waits for the checkpoint's end). */

static int (*real_execve)(const char *, char *const[], char *const[]);
static int (*real_execvpe)(const char *, char *const[], char *const[]);
static int (*real_fexecve)(int, char *const[], char *const[]);

enum exec_kind { EXEC_PATH, EXEC_SEARCH, EXEC_FD };

static int preloads_agent(char *const envp[])
{
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) == 0)
			return g_self[0] && strstr(*e + 11, g_self) != NULL;
	return 0;
}

static size_t put_u64(char *buf, size_t n, size_t cap, uint64_t v)
{
	char num[24];
	int k = 23;

	num[k] = 0;
	do {
		num[--k] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (const char *p = num + k; *p && n + 1 < cap; p++)
		buf[n++] = *p;
	buf[n] = 0;
	return n;
}

/* Called from the constructor: a vfork child must not call dlsym (it may
 * wait for a lock another thread of the parent holds). */
static void exec_resolve(void)
{
	real_execve = (int (*)(const char *, char *const[], char *const[]))dlsym(RTLD_NEXT, "execve");
	real_execvpe = (int (*)(const char *, char *const[], char *const[]))dlsym(RTLD_NEXT, "execvpe");
	real_fexecve = (int (*)(int, char *const[], char *const[]))dlsym(RTLD_NEXT, "fexecve");
}

static int exec_real(enum exec_kind kind, const char *path, int fd, char *const argv[],
		     char *const envp[])
{
	if (!real_execve)
		exec_resolve();   /* an exec from another library's constructor, before ours */
	if (kind == EXEC_SEARCH)
		return real_execvpe(path, argv, envp);
	if (kind == EXEC_FD)
		return real_fexecve(fd, argv, envp);
	return real_execve(path, argv, envp);
}

/* Is this an ELF program this library cannot be loaded into: statically
 * linked (no PT_INTERP) or 32-bit? It must not get the channel, which
 * nobody would read. Anything not known to be one (a script, a dynamic
 * 64-bit program, an unreadable file) is not. */
static int static_elf(int fd)
{
	unsigned char b[4096];
	ssize_t n = pread(fd, b, sizeof(b), 0);
	uint64_t phoff;
	uint16_t phentsize, phnum;

	if (n < 64 || memcmp(b, "\177ELF", 4) != 0)
		return 0;
	if (b[4] != 2)   /* not ELFCLASS64: LD_PRELOAD of a 64-bit library fails */
		return 1;
	memcpy(&phoff, b + 32, 8);
	memcpy(&phentsize, b + 54, 2);
	memcpy(&phnum, b + 56, 2);
	if (phentsize < 4 || phoff + (uint64_t)phnum * phentsize > (uint64_t)n)
		return 0;   /* headers beyond the first page: do not guess */
	for (uint16_t i = 0; i < phnum; i++) {
		uint32_t type;

		memcpy(&type, b + phoff + (uint64_t)i * phentsize, 4);
		if (type == 3 /* PT_INTERP */)
			return 0;
	}
	return 1;
}

/* The file an exec of path would run: path itself, or for a search the
 * first executable regular file of that name in $PATH (execvp's order). */
static int static_target(enum exec_kind kind, const char *path, int fd)
{
	char buf[PATH_MAX];
	const char *dirs = getenv("PATH");
	int f, ret;

	if (kind == EXEC_FD)
		return static_elf(fd);
	if (kind == EXEC_PATH || strchr(path, '/')) {
		f = open(path, O_RDONLY | O_CLOEXEC);
		ret = f >= 0 && static_elf(f);
		if (f >= 0)
			close(f);
		return ret;
	}
	for (const char *d = dirs ? dirs : "/bin:/usr/bin"; *d;) {
		const char *end = strchr(d, ':');
		size_t dl = end ? (size_t)(end - d) : str_len(d), pl = str_len(path);
		struct stat st;

		if (dl + pl + 2 <= sizeof(buf)) {
			memcpy(buf, d, dl);
			buf[dl] = '/';
			memcpy(buf + dl + 1, path, pl + 1);
			if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
				return static_target(EXEC_PATH, buf, -1);
		}
		if (!end)
			break;
		d = end + 1;
	}
	return 0;
}

/* The variables that hand the channel, the launch table and the tree's
 * list of written files to the next program's agent (ours replaced), in
 * env (room for envp's and 5 more). */
struct agent_vars {
	char fdvar[48], logvar[48], launch[MAX_LAUNCH_FDS * 64 + 32];
};

static void agent_env(char *const envp[], int channel, int spawned, struct agent_vars *v, char **env)
{
	static char spawned_var[] = PROC_ENV_SPAWNED "=1";
	size_t k = 0, fl = sizeof(PROC_ENV_FD), ll = sizeof(PROC_ENV_LAUNCH_FDS);
	size_t wl = sizeof(PROC_ENV_WRITTEN);

	memcpy(v->fdvar, PROC_ENV_FD "=", fl);
	memcpy(v->logvar, PROC_ENV_WRITTEN "=", wl);
	memcpy(v->launch, PROC_ENV_LAUNCH_FDS "=", ll);
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, v->fdvar, fl) != 0 && strncmp(*e, v->launch, ll) != 0 &&
		    strncmp(*e, v->logvar, wl) != 0 &&
		    strncmp(*e, spawned_var, sizeof(PROC_ENV_SPAWNED)) != 0)
			env[k++] = *e;
	put_u64(v->fdvar, fl, sizeof(v->fdvar), (uint64_t)channel);
	if (sts_written_log >= 0) {
		put_u64(v->logvar, wl, sizeof(v->logvar), (uint64_t)sts_written_log);
		env[k++] = v->logvar;
	}
	for (unsigned i = 0; i < g_nlaunch; i++) {
		ll = put_u64(v->launch, ll, sizeof(v->launch), (uint64_t)g_launch[i].fd);
		v->launch[ll++] = ':';
		ll = put_u64(v->launch, ll, sizeof(v->launch), g_launch[i].dev);
		v->launch[ll++] = ':';
		ll = put_u64(v->launch, ll, sizeof(v->launch), g_launch[i].ino);
		if (i + 1 < g_nlaunch)
			v->launch[ll++] = ',';
		v->launch[ll] = 0;
	}
	env[k++] = v->fdvar;
	env[k++] = v->launch;
	if (spawned)
		env[k++] = spawned_var;
	env[k] = NULL;
}

static size_t env_count(char *const envp[])
{
	size_t n = 0;

	while (envp && envp[n])
		n++;
	return n;
}

/* The tree's list of written files goes through an exec as the channel
 * does (the program's own descriptors never see it) */
static void log_cloexec(int flag)
{
	if (sts_written_log >= 0)
		fcntl(sts_written_log, F_SETFD, flag);
}

static int exec_common(enum exec_kind kind, const char *path, int fd, char *const argv[],
		       char *const envp[])
{
	struct agent_vars vars;
	int channel = g_channel, ret, err;

	if (channel < 0 || getpid() != g_owner || !preloads_agent(envp) ||
	    static_target(kind, path, fd))
		return exec_real(kind, path, fd, argv, envp);
	/* before the table is written out: a checkpoint this waits for may be
	 * restarted, and a restart changes the table (launch_after_restart) */
	for (;;) {
		struct timespec ms = { 0, 1000000 };

		atomic_store(&g_exec, 1);
		if (!atomic_load(&g_stopping))
			break;
		atomic_store(&g_exec, 0);   /* a checkpoint first: this thread parks for it */
		nanosleep(&ms, NULL);
	}
	channel = g_channel;   /* a restart gives another */
	if (channel < 0) {
		atomic_store(&g_exec, 0);
		return exec_real(kind, path, fd, argv, envp);
	}
	char *env[env_count(envp) + 5];

	agent_env(envp, channel, 0, &vars, env);
	fcntl(channel, F_SETFD, 0);
	log_cloexec(0);
	ret = exec_real(kind, path, fd, argv, env);
	err = errno;
	fcntl(channel, F_SETFD, FD_CLOEXEC);
	log_cloexec(FD_CLOEXEC);
	atomic_store(&g_exec, 0);
	errno = err;
	return ret;
}

extern char **environ;

int execve(const char *path, char *const argv[], char *const envp[])
{
	return exec_common(EXEC_PATH, path, -1, argv, envp);
}

int execv(const char *path, char *const argv[])
{
	return exec_common(EXEC_PATH, path, -1, argv, environ);
}

int execvpe(const char *file, char *const argv[], char *const envp[])
{
	return exec_common(EXEC_SEARCH, file, -1, argv, envp);
}

int execvp(const char *file, char *const argv[])
{
	return exec_common(EXEC_SEARCH, file, -1, argv, environ);
}

int fexecve(int fd, char *const argv[], char *const envp[])
{
	return exec_common(EXEC_FD, NULL, fd, argv, envp);
}

/* execl, execlp, execle: their arguments (and execle's environment) as
 * arrays */
/* posix_spawn: glibc starts the child with clone(CLONE_VM|CLONE_VFORK)
 * and executes it without the exec wrappers or the fork handlers. The
 * child gets a channel of its own all the same: made and announced (CHILD)
 * here as for a fork, left open across the exec at its number, and named
 * in the new program's environment, whose agent says HELLO
 * (PROC_ENV_SPAWNED). A file action that closes it leaves a child without
 * an agent, which a checkpoint then refuses naming it. */
static int send_fd_msg(uint32_t type, int fd);
static int (*real_posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			       const posix_spawnattr_t *, char *const[], char *const[]);
static int (*real_posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
				const posix_spawnattr_t *, char *const[], char *const[]);

static int spawn_common(int search, pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	struct agent_vars vars;
	posix_spawnattr_t mine;
	sigset_t all, old;
	short flags = 0;
	int sv[2], ret, announced = 0;

	if (!real_posix_spawn) {
		real_posix_spawn = (int (*)(pid_t *, const char *, const posix_spawn_file_actions_t *,
					    const posix_spawnattr_t *, char *const[], char *const[]))
			dlsym(RTLD_NEXT, "posix_spawn");
		real_posix_spawnp = (int (*)(pid_t *, const char *, const posix_spawn_file_actions_t *,
					     const posix_spawnattr_t *, char *const[], char *const[]))
			dlsym(RTLD_NEXT, "posix_spawnp");
	}
	if (g_channel < 0 || getpid() != g_owner || !preloads_agent(envp) ||
	    static_target(search ? EXEC_SEARCH : EXEC_PATH, file, -1))
		return (search ? real_posix_spawnp : real_posix_spawn)(pid, file, fa, attr, argv, envp);
	char *env[env_count(envp) + 5];

	/* as atfork_prepare: no checkpoint between CHILD and the child */
	sigfillset(&all);
	real_pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_mutex_lock(&g_fork_lock);
	if (g_channel >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
		if (send_fd_msg(PROC_MSG_CHILD, sv[0]) == 0 && fcntl(sv[1], F_SETFD, 0) == 0)
			announced = 1;
		close(sv[0]);
		if (!announced)
			close(sv[1]);
	}
	if (announced)
		agent_env(envp, sv[1], 1, &vars, env);
	/* the child takes the caller's mask, not the one blocking everything
	 * here (nor signal 62) */
	if (attr)
		memcpy(&mine, attr, sizeof(mine));
	else
		posix_spawnattr_init(&mine);
	posix_spawnattr_getflags(&mine, &flags);
	if (!(flags & POSIX_SPAWN_SETSIGMASK)) {
		posix_spawnattr_setflags(&mine, (short)(flags | POSIX_SPAWN_SETSIGMASK));
		posix_spawnattr_setsigmask(&mine, &old);
	}
	if (announced)
		log_cloexec(0);
	ret = (search ? real_posix_spawnp : real_posix_spawn)(pid, file, fa, &mine, argv,
							       announced ? env : envp);
	if (announced) {
		log_cloexec(FD_CLOEXEC);
		close(sv[1]);   /* the coordinator sees its end close if no child took it */
	}
	pthread_mutex_unlock(&g_fork_lock);
	real_pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return spawn_common(0, pid, path, fa, attr, argv, envp);
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return spawn_common(1, pid, file, fa, attr, argv, envp);
}

/* system() and popen(): glibc starts their shell with its internal
 * posix_spawn, which no wrapper reaches. Done here with fork and exec
 * instead, as POSIX describes them, so the shell is a process of the job. */
static int shell_exec(const char *cmd)
{
	char *argv[] = { "sh", "-c", "--", (char *)cmd, NULL };

	exec_common(EXEC_PATH, "/bin/sh", -1, argv, environ);
	_exit(127);
}

int system(const char *cmd)
{
	struct sigaction ign, intr, quit;
	sigset_t chld, old;
	int status = -1;
	pid_t pid;

	if (!cmd)
		return system("exit 0") == 0;   /* is there a shell? */
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	real_sigaction(SIGINT, &ign, &intr);
	real_sigaction(SIGQUIT, &ign, &quit);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	real_sigprocmask(SIG_BLOCK, &chld, &old);
	pid = fork();
	if (pid == 0) {
		real_sigaction(SIGINT, &intr, NULL);
		real_sigaction(SIGQUIT, &quit, NULL);
		real_sigprocmask(SIG_SETMASK, &old, NULL);
		shell_exec(cmd);
	}
	while (pid > 0 && waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = -1;
			break;
		}
	}
	real_sigaction(SIGINT, &intr, NULL);
	real_sigaction(SIGQUIT, &quit, NULL);
	real_sigprocmask(SIG_SETMASK, &old, NULL);
	return status;
}

#define MAX_POPEN 64
static struct {
	FILE *f;
	pid_t pid;
} g_popen[MAX_POPEN];
static pthread_mutex_t g_popen_lock = PTHREAD_MUTEX_INITIALIZER;

FILE *popen(const char *cmd, const char *mode)
{
	int rd = mode && mode[0] == 'r', p[2], slot = -1, mine, theirs;
	FILE *f = NULL;
	pid_t pid;

	if (!mode || (mode[0] != 'r' && mode[0] != 'w') || (mode[1] && mode[1] != 'e')) {
		errno = EINVAL;
		return NULL;
	}
	if (pipe2(p, O_CLOEXEC) != 0)
		return NULL;
	mine = rd ? p[0] : p[1];
	theirs = rd ? p[1] : p[0];
	pthread_mutex_lock(&g_popen_lock);
	for (int i = 0; i < MAX_POPEN && slot < 0; i++)
		if (!g_popen[i].f)
			slot = i;
	if (slot < 0) {
		pthread_mutex_unlock(&g_popen_lock);
		close(p[0]);
		close(p[1]);
		errno = EMFILE;
		return NULL;
	}
	pid = fork();
	if (pid == 0) {
		/* the streams of earlier popen()s are not the shell's (POSIX) */
		for (int i = 0; i < MAX_POPEN; i++)
			if (g_popen[i].f)
				close(fileno(g_popen[i].f));
		if (theirs == (rd ? 1 : 0))
			fcntl(theirs, F_SETFD, 0);
		else if (dup2(theirs, rd ? 1 : 0) < 0)
			_exit(127);
		shell_exec(cmd);
	}
	close(theirs);
	if (pid > 0)
		f = fdopen(mine, rd ? "r" : "w");
	if (f) {
		if (!mode[1])
			fcntl(mine, F_SETFD, 0);   /* "e": close-on-exec, else not */
		g_popen[slot].f = f;
		g_popen[slot].pid = pid;
	} else {
		close(mine);
	}
	pthread_mutex_unlock(&g_popen_lock);
	return f;
}

int pclose(FILE *f)
{
	pid_t pid = -1;
	int status = -1;

	pthread_mutex_lock(&g_popen_lock);
	for (int i = 0; i < MAX_POPEN; i++)
		if (f && g_popen[i].f == f) {
			pid = g_popen[i].pid;
			g_popen[i].f = NULL;
		}
	pthread_mutex_unlock(&g_popen_lock);
	if (pid < 0) {
		errno = ECHILD;
		return -1;
	}
	fclose(f);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

static int exec_list(enum exec_kind kind, const char *file, const char *arg, va_list ap,
		     int with_envp)
{
	size_t argc = 1;
	va_list count;

	va_copy(count, ap);
	while (va_arg(count, char *))
		argc++;
	va_end(count);
	char *argv[argc + 1];

	argv[0] = (char *)arg;
	for (size_t i = 1; i <= argc; i++)
		argv[i] = va_arg(ap, char *);
	return exec_common(kind, file, -1, argv, with_envp ? va_arg(ap, char *const *) : environ);
}

int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	int ret;

	va_start(ap, arg);
	ret = exec_list(EXEC_PATH, path, arg, ap, 0);
	va_end(ap);
	return ret;
}

int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	int ret;

	va_start(ap, arg);
	ret = exec_list(EXEC_SEARCH, file, arg, ap, 0);
	va_end(ap);
	return ret;
}

int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	int ret;

	va_start(ap, arg);
	ret = exec_list(EXEC_PATH, path, arg, ap, 1);
	va_end(ap);
	return ret;
}

/* ---- process trees: the agent follows fork ----
 *
 * A child is a process of the job: before the fork the parent makes a
 * socketpair and sends one end to the coordinator on its own channel
 * (CHILD, SCM_RIGHTS); the child takes the other end as its channel, starts
 * its agent thread again (threads do not survive fork) and says HELLO.
 * Signals stay blocked from before the CHILD record to after the fork, so no
 * checkpoint parks the forking thread in between: once a parent is parked,
 * every child it has is announced ahead of its PARKED record. */

static int send_fd_msg(uint32_t type, int fd)
{
	struct proc_msg m = { PROC_MSG_MAGIC, type, 0 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh;
	struct cmsghdr *c;
	ssize_t n;

	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(g_channel, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(m) ? 0 : write_all(g_channel, (char *)&m + n, sizeof(m) - (size_t)n);
}

static void *agent_main(void *arg);

/* The agent thread takes no signal but its own. */
static int start_agent_thread(void)
{
	sigset_t all, old;
	pthread_t t;
	int ret;

	sigfillset(&all);
	sigdelset(&all, PROC_CKPT_SIGNAL);
	real_pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&t, NULL, agent_main, NULL);
	real_pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return -ret;
	pthread_detach(t);
	return 0;
}

static void send_hello(void)
{
	struct proc_hello h = { PROC_FORMAT_VERSION, getpid(),
				(uint64_t)(uintptr_t)&stasis_agent_state };

	send_msg(PROC_MSG_HELLO, &h, sizeof(h), NULL, 0);
}

static void atfork_prepare(void)
{
	sigset_t all, old;
	int sv[2];

	sigfillset(&all);
	real_pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_mutex_lock(&g_fork_lock);
	g_fork_mask = old;
	g_child_end = -1;
	if (g_channel < 0 || getpid() != g_owner ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return;
	if (send_fd_msg(PROC_MSG_CHILD, sv[0]) == 0)
		g_child_end = sv[1];
	else
		close(sv[1]);
	close(sv[0]);
}

static void atfork_parent(void)
{
	sigset_t mask = g_fork_mask;

	/* a failed fork too: the coordinator then sees the channel end */
	if (g_child_end >= 0)
		close(g_child_end);
	g_child_end = -1;
	pthread_mutex_unlock(&g_fork_lock);
	real_pthread_sigmask(SIG_SETMASK, &mask, NULL);
}

static void atfork_child(void)
{
	int end = g_child_end, high = -1;

	g_child_end = -1;
	pthread_mutex_init(&g_fork_lock, NULL);
	if (g_channel >= 0)
		close(g_channel);
	g_channel = -1;
	stasis_agent_state.channel_fd = -1;
	if (end >= 0) {
		high = fcntl(end, F_DUPFD_CLOEXEC, PROC_AGENT_FD_MIN);
		close(end);
	}
	if (high >= 0) {
		/* a checkpoint the parent was taking is not this process's */
		reset_parking();
		atomic_store(&g_exec, 0);
		g_channel = high;
		g_owner = getpid();
		stasis_agent_state.channel_fd = high;
		g_seen_restarts = stasis_agent_state.restarts;
		send_hello();
		if (start_agent_thread() != 0) {
			close(g_channel);
			g_channel = -1;
		}
	}
	real_pthread_sigmask(SIG_SETMASK, &g_fork_mask, NULL);
}

/* vfork shares the parent's memory until the child execs: the agent could
 * not follow such a child, a fork can (POSIX allows vfork to be one). */
pid_t vfork(void)
{
	return fork();
}

/* The tree's list of written files the coordinator or the previous
 * program handed on ($STASIS_WRITTEN_FD): a memfd open for appending, or
 * -1 (an older coordinator, or a job of its own: nothing is appended) */
static int log_take(void)
{
	const char *env = getenv(PROC_ENV_WRITTEN);
	int fd = env && *env ? atoi(env) : -1, flags;
	struct stat st;

	unsetenv(PROC_ENV_WRITTEN);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return -1;
	flags = fcntl(fd, F_GETFL);
	return flags >= 0 && (flags & O_APPEND) && (flags & O_ACCMODE) != O_RDONLY ? fd : -1;
}

__attribute__((constructor)) static void agent_init(void)
{
	const char *env = getenv(PROC_ENV_FD), *launched;
	struct sigaction sa;
	int fd, type = 0, high, after_exec, spawned, log;
	socklen_t len = sizeof(type);

	/* resolve the wrapped functions now: dlsym is not safe in a signal
	 * handler, where a program may first call sigprocmask */
	real_sigprocmask = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "sigprocmask");
	real_pthread_sigmask = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "pthread_sigmask");
	real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
	exec_resolve();
	if (!env || !*env)
		return;
	fd = atoi(env);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
		return;
	log = log_take();
	launched = getenv(PROC_ENV_LAUNCH_FDS);
	after_exec = launched != NULL;
	if (after_exec)
		launch_parse(launched);
	else
		launch_scan(fd, log);
	if (log >= 0) {
		sts_written_log = fcntl(log, F_DUPFD_CLOEXEC, PROC_AGENT_FD_MIN);
		close(log);
	}
	unsetenv(PROC_ENV_LAUNCH_FDS);
	spawned = getenv(PROC_ENV_SPAWNED) != NULL;
	unsetenv(PROC_ENV_SPAWNED);
	/* close-on-exec: only the exec wrappers let it through an exec */
	high = fcntl(fd, F_DUPFD_CLOEXEC, PROC_AGENT_FD_MIN);
	if (high < 0)
		return;
	close(fd);
	g_channel = high;
	g_owner = getpid();
	stasis_agent_state.channel_fd = high;
	unsetenv(PROC_ENV_FD);
	{
		Dl_info info;

		if (dladdr((void *)agent_init, &info) && info.dli_fname && str_len(info.dli_fname) < PATH_MAX)
			memcpy(g_self, info.dli_fname, str_len(info.dli_fname) + 1);
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (real_sigaction(PROC_CKPT_SIGNAL, &sa, NULL) != 0)
		goto fail;
	{
		/* a mask inherited across exec may block it */
		sigset_t ckpt;

		sigemptyset(&ckpt);
		sigaddset(&ckpt, PROC_CKPT_SIGNAL);
		real_sigprocmask(SIG_UNBLOCK, &ckpt, NULL);
	}
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	if (start_agent_thread() != 0)
		goto fail;
	/* hello from the constructor, before main(): even a program that ends
	 * at once has reported, so its coordinator knows the agent works. After
	 * an exec the coordinator knows already: nothing to say */
	if (!after_exec || spawned)
		send_hello();
	return;
fail:
	close(g_channel);
	g_channel = -1;
}
