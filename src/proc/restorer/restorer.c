/* restorer.c - stasis-restore: the freestanding program that becomes the
 * checkpointed process again.
 *
 * It is started by `stasis restart` inside a new user+PID namespace with
 * the checkpointed pid (clone3 set_tid), reads the restore stream (struct
 * proc_msg records, proc_format.h) from a pipe, and rebuilds the process in
 * its own address space. It never uses libc, is linked static at
 * PROC_RESTORER_TEXT, and is never built with sanitizers: it replaces the
 * memory any runtime would rely on.
 *
 * Restore is a list of named stages (enum stage); each is logged at debug
 * level, and docs/transparent.md says what holds when each one ends.
 * usage: stasis-restore STREAM_FD CHANNEL_FD IMAGE_FD LOGLEVEL [LAZY_FD]
 */
#include "pimg/pimg.h"
#include "pimg/pimg_threads.h"
#include "proc/proc_format.h"
#include "proc/restorer/sys.h"

enum stage {
	/* Signals blocked, argv parsed. Nothing of the image exists yet. */
	STAGE_START,
	/* Running on a stack in our window; the kernel's stack is unmapped and
	 * the vdso/vvar moved into the window, so the whole address space
	 * outside the window is free for the image. */
	STAGE_SELF,
	/* Header and signal dispositions read; pid checked against the image. */
	STAGE_HEADER,
	/* Every region mapped at its address with MAP_FIXED_NOREPLACE (writable
	 * where contents follow); a collision stopped the restore. */
	STAGE_MAP,
	/* Page contents in place, every chunk read from the image checked
	 * against its CRC (a bad one stopped the restore); thread records read. */
	STAGE_FILL,
	/* Every region has its checkpoint protection. */
	STAGE_PROTECT,
	/* brk, stack, arguments and environment known to the kernel again
	 * (PR_SET_MM_MAP); vdso and vvar back at their checkpoint addresses. */
	STAGE_MM,
	/* umask, personality, resource limits, cwd, signal dispositions, interval
	 * timers; agent told it was
	 * restored; only stdin/stdout/stderr, the program's descriptors and
	 * the channel remain open. */
	STAGE_PROCESS,
	/* Every other thread cloned with its tid, FS base, robust list, tid
	 * address and rseq registration, waiting at the start line; pending
	 * signals sent again (to each thread, and to the process). */
	STAGE_THREADS,
	/* Threads released; each returns into its signal frame. */
	STAGE_RETURN,
};

static const char *const stage_names[] = {
	"start", "self", "header", "map", "fill", "protect", "mm", "process", "threads", "return",
};

#define SELF_STACK_SIZE (1ul << 20)
#define THREAD_STACK_SIZE (64ul << 10)
#define SELF_STACK_ADDR (PROC_WINDOW_SCRATCH)
#define VDSO_PARK_ADDR (PROC_WINDOW_SCRATCH + (16ul << 20))
#define TABLE_ADDR (PROC_WINDOW_SCRATCH + (32ul << 20))
#define THREAD_STACKS_ADDR (PROC_WINDOW_SCRATCH + (2ul << 30))
#define PIECES_ADDR (TABLE_ADDR + (256ul << 20))
#define POPULATE_ADDR (TABLE_ADDR + (384ul << 20))
#define POPULATE_MAX (64ul << 20)                     /* bytes of the POPULATE record */
#define HELPER_STACK_ADDR (PROC_WINDOW_SCRATCH + (1536ul << 20))
#define POPULATE_STEP (8ul << 20)
#define PIECES_MAX ((64ul << 20) / PROC_PAGE_SIZE)   /* a page each, of the largest chunk */
#define MAX_PATH 4096
/* readahead on the image: this far ahead of the chunk being read, in steps */
#define RA_WINDOW (64ul << 20)
#define RA_STEP (16ul << 20)

struct region {
	uint64_t start, end;
	uint32_t prot, kind, flags, pad;
	uint64_t stored_pages;
};

struct kmap {
	uint64_t start, end;
};

static struct {
	int stream, channel, image, debug;
	int lazy;                          /* LAZY_FD, or -1 */
	char image_name[MAX_PATH];
	struct proc_data *pieces;
	uint64_t ra_end;
	/* fill's accounting, logged at debug level: bytes read from the image
	 * and from the stream, microseconds populating, reading, checking */
	uint64_t direct_bytes, stream_bytes;
	int64_t populate_us, read_us, crc_us;
	/* the helper thread that populates ahead of the fill */
	struct proc_data *ahead;
	uint64_t nahead;
	volatile int32_t helper_tid;       /* cleared by the kernel when it exits */
	int32_t helper_want;               /* HELPER_TID's, or 0 */
	volatile int helper_stop;
	struct proc_header h;
	char cwd[2 * MAX_PATH + 2];      /* the cwd, then the executable */
	const char *exe;
	struct proc_sigaction sa[PROC_NSIG];
	struct region *regions;
	uint64_t nregions, cap_regions;
	struct proc_thread *threads;
	uint64_t nthreads;
	struct proc_keep_fd *keep;
	uint64_t nkeep;
	struct kmap vvar, vclock, vdso;    /* where ours are now */
	char buf[MAX_PATH * 2];
} R;

static volatile int start_line;

/* ---- libc-like helpers ---- */

void *memset(void *s, int c, size_t n)
{
	unsigned char *p = s;

	while (n--)
		*p++ = (unsigned char)c;
	return s;
}

void *memcpy(void *d, const void *s, size_t n)
{
	unsigned char *a = d;
	const unsigned char *b = s;

	while (n--)
		*a++ = *b++;
	return d;
}

void *memmove(void *d, const void *s, size_t n)
{
	unsigned char *a = d;
	const unsigned char *b = s;

	if (a < b)
		return memcpy(d, s, n);
	while (n--)
		a[n] = b[n];
	return d;
}

int memcmp(const void *x, const void *y, size_t n)
{
	const unsigned char *a = x, *b = y;

	for (; n; n--, a++, b++)
		if (*a != *b)
			return *a - *b;
	return 0;
}

static size_t slen(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

/* ---- messages: one line on stderr ---- */

struct line {
	char b[1024];
	size_t n;
};

static void put(struct line *l, const char *s)
{
	while (*s && l->n + 1 < sizeof(l->b))
		l->b[l->n++] = *s++;
}

static void put_hex(struct line *l, uint64_t v)
{
	char t[19];
	int i = 18;

	t[i] = 0;
	do {
		t[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	t[--i] = 'x';
	t[--i] = '0';
	put(l, t + i);
}

static void put_dec(struct line *l, int64_t v)
{
	char t[24];
	int i = 23;
	int neg = v < 0;
	uint64_t u = neg ? (uint64_t)-v : (uint64_t)v;

	t[i] = 0;
	do {
		t[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (neg)
		t[--i] = '-';
	put(l, t + i);
}

static void emit(struct line *l)
{
	l->b[l->n++] = '\n';
	sys3(__NR_write, 2, l->b, l->n);
}

/* End a failure line with the errno, if any, print it, and exit 42 (the
 * coordinator knows the message was printed). */
static void __attribute__((noreturn)) die_line(struct line *l, long err)
{
	if (err) {
		put(l, " (errno ");
		put_dec(l, -err);
		put(l, ")");
	}
	emit(l);
	sys1(__NR_exit_group, 42);
	for (;;)
		;
}

static void __attribute__((noreturn)) die_errno(const char *what, long err)
{
	struct line l = { .n = 0 };

	put(&l, "stasis: restart: ");
	put(&l, what);
	die_line(&l, err);
}

static void __attribute__((noreturn)) die(const char *what)
{
	die_errno(what, 0);
}

static int64_t now_us(void)
{
	struct { int64_t s, ns; } ts = { 0, 0 };

	sys2(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, &ts);
	return ts.s * 1000000 + ts.ns / 1000;
}

/* "stage NAME (+MS ms)": the time since the previous stage */
static void stage(enum stage s)
{
	static int64_t last;
	struct line l = { .n = 0 };
	int64_t t;

	if (!R.debug)
		return;
	t = now_us();
	put(&l, "stasis-restore[");
	put_dec(&l, sys0(__NR_getpid));
	put(&l, "]: debug: stage ");
	put(&l, stage_names[s]);
	if (last) {
		put(&l, " (+");
		put_dec(&l, (t - last) / 1000);
		put(&l, " ms)");
	}
	last = t;
	emit(&l);
}

/* ---- the stream ---- */

static void read_all(void *buf, uint64_t len)
{
	char *p = buf;

	while (len) {
		long n = sys3(__NR_read, R.stream, p, len > (1u << 30) ? (1u << 30) : len);

		if (n == -EINTR)
			continue;
		if (n == 0)
			/* the coordinator stopped it and says why itself */
			sys1(__NR_exit_group, 43);
		if (n < 0)
			die_errno("cannot read the restore stream", n);
		p += n;
		len -= (uint64_t)n;
	}
}

static void skip(uint64_t len)
{
	while (len) {
		uint64_t n = len < sizeof(R.buf) ? len : sizeof(R.buf);

		read_all(R.buf, n);
		len -= n;
	}
}

static void read_msg(struct proc_msg *m)
{
	read_all(m, sizeof(*m));
	if (m->magic != PROC_MSG_MAGIC)
		die("the restore stream is damaged (bad record magic)");
}

/* ---- memory of our own ---- */

static void *map_window(uint64_t addr, uint64_t len)
{
	long p = sys6(__NR_mmap, (long)addr, (long)len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (p < 0 && p > -4096)
		die_errno("cannot map the restorer's scratch memory", p);
	if ((uint64_t)p != addr)
		die("this kernel does not honour MAP_FIXED_NOREPLACE (Linux >= 4.17 is needed)");
	return (void *)p;
}

/* Read /proc/self/maps into `out` (NUL-terminated). */
static void read_maps(char *out, uint64_t cap)
{
	long n = pimg_maps_read(out, cap);

	if (n == -ENOSPC)
		die("/proc/self/maps of the restorer is too large");
	if (n < 0)
		die_errno("cannot read /proc/self/maps", n);
}

/* ---- STAGE_SELF ---- */

static void move_kmap(struct kmap *k, uint64_t to, const char *what)
{
	uint64_t len = k->end - k->start;
	long p;

	if (!len || k->start == to)
		return;
	p = sys5(__NR_mremap, k->start, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
	if (p < 0 && p > -4096)
		die_errno(what, p);
	k->start = to;
	k->end = to + len;
}

/* Unmap the kernel's stack and park vdso/vvar in the window. */
static void clear_self(void)
{
	char *maps = map_window(TABLE_ADDR, 1ul << 20);
	uint64_t stack_s = 0, stack_e = 0, base, lowest;
	struct pimg_mapping m;

	read_maps(maps, 1ul << 20);
	for (const char *c = maps; pimg_maps_next(&c, &m);) {
		switch (pimg_special(&m)) {
		case PIMG_STACK:
			stack_s = m.start;
			stack_e = m.end;
			break;
		case PIMG_VVAR_VCLOCK:
			R.vclock = (struct kmap){ m.start, m.end };
			break;
		case PIMG_VVAR:
			R.vvar = (struct kmap){ m.start, m.end };
			break;
		case PIMG_VDSO:
			R.vdso = (struct kmap){ m.start, m.end };
			break;
		default:
			break;
		}
	}
	sys2(__NR_munmap, maps, 1ul << 20);
	if (stack_e)
		sys2(__NR_munmap, stack_s, stack_e - stack_s);
	/* keep their relative layout: the vdso reaches vvar at a fixed offset */
	lowest = R.vdso.start;
	if (R.vvar.start && R.vvar.start < lowest)
		lowest = R.vvar.start;
	if (R.vclock.start && R.vclock.start < lowest)
		lowest = R.vclock.start;
	base = VDSO_PARK_ADDR;
	if (R.vvar.start)
		move_kmap(&R.vvar, base + (R.vvar.start - lowest), "cannot move the vvar page");
	if (R.vclock.start)
		move_kmap(&R.vclock, base + (R.vclock.start - lowest), "cannot move the vvar_vclock page");
	if (R.vdso.start)
		move_kmap(&R.vdso, base + (R.vdso.start - lowest), "cannot move the vdso");
}

/* ---- STAGE_HEADER ---- */

static void read_header(void)
{
	struct proc_msg m;
	long pid;

	read_msg(&m);
	if (m.type != PROC_MSG_HEADER || m.len < sizeof(R.h) || m.len - sizeof(R.h) > sizeof(R.cwd) - 1)
		die("the restore stream does not start with a process header");
	read_all(&R.h, sizeof(R.h));
	read_all(R.cwd, m.len - sizeof(R.h));
	R.cwd[m.len - sizeof(R.h)] = 0;
	R.exe = R.cwd + slen(R.cwd) + 1;
	if (R.exe >= R.cwd + (m.len - sizeof(R.h)))
		R.exe = "";
	if (R.h.version != PROC_FORMAT_VERSION)
		die("the image's process records have another format version");
	read_msg(&m);
	if (m.type != PROC_MSG_SIGACTS || m.len != sizeof(R.sa))
		die("the restore stream has no signal dispositions");
	read_all(R.sa, sizeof(R.sa));
	pid = sys0(__NR_getpid);
	if (pid != R.h.pid) {
		struct line l = { .n = 0 };

		put(&l, "stasis: restart: the restorer runs as pid ");
		put_dec(&l, pid);
		put(&l, " but the checkpoint needs pid ");
		put_dec(&l, R.h.pid);
		put(&l, " (clone3 set_tid in a new PID namespace is required)");
		emit(&l);
		sys1(__NR_exit_group, 42);
	}
	R.cap_regions = R.h.nregions + 16;
	R.regions = map_window(TABLE_ADDR, (R.cap_regions * sizeof(struct region) + 4095) & ~4095ul);
}

/* ---- STAGE_MAP ---- */

static void collision(const struct proc_region *r, const char *path, long err)
{
	struct line l = { .n = 0 };
	char *maps = (char *)(TABLE_ADDR + (1ul << 30));

	put(&l, "stasis: restart: region ");
	put_hex(&l, r->start);
	put(&l, "-");
	put_hex(&l, r->end);
	if (path[0]) {
		put(&l, " (");
		put(&l, path);
		put(&l, ")");
	}
	if (err == -EEXIST) {
		put(&l, " collides with an existing mapping");
		/* name what is there, if we can */
		if (sys6(__NR_mmap, (long)maps, 1l << 20, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == (long)maps) {
			struct pimg_mapping m;

			read_maps(maps, 1ul << 20);
			for (const char *c = maps; pimg_maps_next(&c, &m);) {
				if (m.start < r->end && m.end > r->start) {
					put(&l, ": ");
					for (uint32_t i = 0; i < m.line_len && l.n + 2 < sizeof(l.b); i++)
						l.b[l.n++] = m.line[i];
					break;
				}
			}
		}
	} else {
		put(&l, " cannot be mapped (errno ");
		put_dec(&l, -err);
		put(&l, ")");
	}
	emit(&l);
	sys1(__NR_exit_group, 42);
}

static void map_region(const struct proc_region *r, const char *path)
{
	uint64_t len = r->end - r->start;
	int filling = r->stored_pages && r->kind != PROC_REGION_FILE_SHARED;
	long prot = r->prot | (filling ? PROT_READ | PROT_WRITE : 0);
	long flags = MAP_FIXED_NOREPLACE, fd = -1, p;

	if (r->start >= PROC_WINDOW_START && r->start < PROC_WINDOW_END)
		collision(r, path, -EEXIST);
	switch (r->kind) {
	case PROC_REGION_ANON:
		flags |= MAP_PRIVATE | MAP_ANONYMOUS;
		if (r->flags & PROC_RF_STACK)
			flags |= MAP_GROWSDOWN;
		break;
	case PROC_REGION_SHARED_ANON:
		if (r->flags & PROC_RF_SHM_FD) {
			/* shared with other processes of the tree: their one object,
			 * made by the namespace's init (closed with the others at
			 * the process stage) */
			flags |= MAP_SHARED;
			p = sys6(__NR_mmap, (long)r->start, (long)len, prot, flags, (long)r->file_size,
				 (long)r->file_offset);
			goto mapped;
		}
		flags |= MAP_SHARED | MAP_ANONYMOUS;
		break;
	case PROC_REGION_FILE_PRIVATE:
	case PROC_REGION_FILE_SHARED:
		flags |= r->kind == PROC_REGION_FILE_SHARED ? MAP_SHARED : MAP_PRIVATE;
		fd = sys3(__NR_open, path,
			  (r->kind == PROC_REGION_FILE_SHARED && (r->prot & PROT_WRITE) ? O_RDWR : O_RDONLY) |
				  O_CLOEXEC, 0);
		if (fd < 0) {
			struct line l = { .n = 0 };

			put(&l, "stasis: restart: cannot open mapped file ");
			put(&l, path);
			put(&l, " (errno ");
			put_dec(&l, -fd);
			put(&l, ")");
			emit(&l);
			sys1(__NR_exit_group, 42);
		}
		break;
	default:
		die("the image has a region of an unknown kind");
	}
	p = sys6(__NR_mmap, (long)r->start, (long)len, prot, flags, fd,
		 fd >= 0 ? (long)r->file_offset : 0);
	if (fd >= 0)
		sys1(__NR_close, fd);
mapped:
	if (p < 0 && p > -4096)
		collision(r, path, p);
	if ((uint64_t)p != r->start) {
		sys2(__NR_munmap, p, len);
		die("this kernel does not honour MAP_FIXED_NOREPLACE (Linux >= 4.17 is needed)");
	}
	/* page population, not reading, bounds restore speed here: ask for
	 * huge pages on large, mostly stored anonymous regions */
	if (r->kind == PROC_REGION_ANON && len >= (8ul << 20) && r->stored_pages * 2 * PROC_PAGE_SIZE >= len)
		sys3(__NR_madvise, r->start, len, MADV_HUGEPAGE);
}

static void add_region(const struct proc_region *r)
{
	struct region *x;

	if (R.nregions == R.cap_regions)
		die("the restore stream has more regions than its header said");
	if (R.nregions && r->start < R.regions[R.nregions - 1].end)
		die("the image's regions overlap or are out of order");
	x = &R.regions[R.nregions++];
	x->start = r->start;
	x->end = r->end;
	x->prot = r->prot;
	x->kind = r->kind;
	x->flags = r->flags;
	x->stored_pages = r->stored_pages;
}

/* Lazy restore (docs/transparent.md): `stasis restart` serves some runs of
 * anonymous memory from outside with a userfaultfd of this address space,
 * which only this process can make. Once every region is mapped it gets
 * one on LAZY_FD (with 0; or -errno and none), registers the runs, and
 * says so with a byte; the stream then leaves those runs out. */
#define USERFAULTFD_IOC_NEW 0xAA00      /* _IO(0xAA, 0x00), /dev/userfaultfd */
#define NR_ioctl 16
#define NR_sendmsg 46
#define NR_userfaultfd 323
#define O_NONBLOCK_ 04000

struct lazy_msghdr {
	void *name;
	uint32_t namelen, pad;
	void *iov;
	uint64_t iovlen;
	void *control;
	uint64_t controllen;
	int32_t flags, pad2;
};

static void lazy_handshake(void)
{
	struct { uint64_t base, len; } iov;
	struct { uint64_t len; int32_t level, type, fd, pad; } cmsg = { 20, 1 /* SOL_SOCKET */,
									    1 /* SCM_RIGHTS */, -1, 0 };
	struct lazy_msghdr mh = { 0 };
	int32_t err = 0;
	long fd, dev = sys3(__NR_open, "/dev/userfaultfd", O_RDWR | O_CLOEXEC, 0);
	char go;

	/* the device needs no capability in the first user namespace (this
	 * one is a new one); the system call, vm.unprivileged_userfaultfd */
	fd = dev >= 0 ? sys3(NR_ioctl, dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK_) : dev;
	if (dev >= 0)
		sys1(__NR_close, dev);
	if (fd < 0)
		fd = sys1(NR_userfaultfd, O_CLOEXEC | O_NONBLOCK_);
	if (fd < 0)
		err = (int32_t)fd;
	iov.base = (uint64_t)(uintptr_t)&err;
	iov.len = sizeof(err);
	mh.iov = &iov;
	mh.iovlen = 1;
	if (fd >= 0) {
		cmsg.fd = (int32_t)fd;
		mh.control = &cmsg;
		mh.controllen = 24;   /* CMSG_SPACE(sizeof(int)) */
	}
	if (sys3(NR_sendmsg, R.lazy, &mh, 0) < 0)
		die("cannot hand the lazy restore its descriptor");
	if (fd >= 0)
		sys1(__NR_close, fd);
	/* the runs are registered (or will be read from the stream) */
	if (sys3(__NR_read, R.lazy, &go, 1) < 0)
		die("the lazy restore did not answer");
	sys1(__NR_close, R.lazy);
	R.lazy = -1;
}

/* Returns the first message that is not a REGION. */
static void map_regions(struct proc_msg *next)
{
	struct proc_region r;

	for (;;) {
		read_msg(next);
		if (next->type != PROC_MSG_REGION)
			return;
		if (next->len < sizeof(r) || next->len - sizeof(r) > MAX_PATH)
			die("the restore stream has a bad region record");
		read_all(&r, sizeof(r));
		read_all(R.buf, next->len - sizeof(r));
		R.buf[MAX_PATH - 1] = 0;
		if ((r.start | r.end) & (PROC_PAGE_SIZE - 1) || r.end <= r.start)
			die("the image has a region that is not page aligned");
		add_region(&r);
		map_region(&r, R.buf);
		if (R.lazy >= 0 && R.nregions == R.h.nregions)
			lazy_handshake();
	}
}

/* ---- STAGE_FILL ---- */

static const struct region *find_region(uint64_t addr)
{
	uint64_t lo = 0, hi = R.nregions;

	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (addr < R.regions[mid].start)
			hi = mid;
		else if (addr >= R.regions[mid].end)
			lo = mid + 1;
		else
			return &R.regions[mid];
	}
	return NULL;
}

/* Where DATA and CHUNK records may write: inside a region that takes
 * stored pages. */
static void check_target(const struct proc_data *d)
{
	const struct region *r = find_region(d->addr);

	if (!r || d->len > r->end - d->addr || r->kind == PROC_REGION_FILE_SHARED)
		die("the restore stream has data outside every region");
}

/* Populating in one call is cheaper than a fault per page during the copy
 * (Linux >= 5.14; older kernels just fault). */
static void populate(const struct proc_data *d)
{
	int64_t t;

	if (d->len < (2ul << 20))
		return;
	t = R.debug ? now_us() : 0;
	sys3(__NR_madvise, d->addr, d->len, MADV_POPULATE_WRITE);
	if (R.debug)
		R.populate_us += now_us() - t;
}

/* Keep the disk reading ahead of the chunk at pos. */
static void prefetch(uint64_t pos)
{
	if (R.ra_end < pos)
		R.ra_end = pos;
	if (pos + RA_WINDOW < R.ra_end + RA_STEP)
		return;
	sys4(__NR_fadvise64, R.image, R.ra_end, pos + RA_WINDOW - R.ra_end, POSIX_FADV_WILLNEED);
	R.ra_end = pos + RA_WINDOW;
}

/* One line naming the image, the section and the chunk, as the image
 * reader names a bad chunk; the program never runs. */
static void __attribute__((noreturn)) chunk_fail(const struct proc_chunk *c, const char *section,
						 const char *why, long err)
{
	struct line l = { .n = 0 };

	put(&l, "stasis: restart: ");
	put(&l, R.image_name);
	put(&l, ": section '");
	put(&l, section);
	put(&l, "' (#");
	put_dec(&l, c->section);
	put(&l, ") chunk ");
	put_dec(&l, c->index);
	put(&l, " at offset ");
	put_dec(&l, (int64_t)c->header_pos);
	put(&l, ": ");
	put(&l, why);
	die_line(&l, err);
}

static void pread_all(const struct proc_chunk *c, const char *section, char *p, uint64_t len,
		      uint64_t pos)
{
	while (len) {
		long n = sys4(__NR_pread64, R.image, p, len > (1u << 30) ? (1u << 30) : len, pos);

		if (n == -EINTR)
			continue;
		if (n == 0)
			chunk_fail(c, section, "unexpected end of file", 0);
		if (n < 0)
			chunk_fail(c, section, "read error", n);
		p += n;
		pos += (uint64_t)n;
		len -= (uint64_t)n;
	}
}

/* A raw chunk straight from the image into its pieces, then its CRC. */
static void read_chunk(const struct proc_msg *m)
{
	struct proc_chunk c;
	uint64_t pos, total = 0;
	uint32_t crc = 0;

	if (m->len < sizeof(c))
		die("the restore stream has a bad chunk record");
	read_all(&c, sizeof(c));
	if (!R.image_name[0] || c.npieces == 0 || c.npieces > PIECES_MAX || c.name_len == 0 ||
	    c.name_len > MAX_PATH ||
	    m->len != sizeof(c) + c.npieces * sizeof(struct proc_data) + c.name_len)
		die("the restore stream has a bad chunk record");
	read_all(R.pieces, c.npieces * sizeof(struct proc_data));
	read_all(R.buf, c.name_len);
	R.buf[c.name_len - 1] = 0;
	for (uint32_t i = 0; i < c.npieces; i++) {
		check_target(&R.pieces[i]);
		total += R.pieces[i].len;
	}
	if (total != c.len)
		die("the restore stream has a bad chunk record");
	pos = c.file_offset;
	for (uint32_t i = 0; i < c.npieces; i++) {
		const struct proc_data *d = &R.pieces[i];

		int64_t t0, t1;

		prefetch(pos + d->len);
		populate(d);
		t0 = R.debug ? now_us() : 0;
		pread_all(&c, R.buf, (char *)d->addr, d->len, pos);
		t1 = R.debug ? now_us() : 0;
		crc = restorer_crc32c(crc, (const void *)d->addr, d->len);
		if (R.debug) {
			R.read_us += t1 - t0;
			R.crc_us += now_us() - t1;
		}
		pos += d->len;
	}
	R.direct_bytes += c.len;
	if (crc != c.crc)
		chunk_fail(&c, R.buf, "payload checksum mismatch", 0);
}

/* The image's name, for messages; CHUNK records read from R.image. */
static void read_image(const struct proc_msg *m)
{
	if (m->len == 0 || m->len > sizeof(R.image_name))
		die("the restore stream has a bad image record");
	read_all(R.image_name, m->len);
	R.image_name[m->len - 1] = 0;
	if (!R.image_name[0])
		die("the restore stream has a bad image record");
	if (!R.pieces)
		R.pieces = map_window(PIECES_ADDR, (PIECES_MAX * sizeof(struct proc_data) + 4095) & ~4095ul);
}

/* "fill: N MiB from the image, M MiB from the stream; populate A ms, read B ms, crc C ms" */
static void fill_log(void)
{
	struct line l = { .n = 0 };

	if (!R.debug)
		return;
	put(&l, "stasis-restore[");
	put_dec(&l, sys0(__NR_getpid));
	put(&l, "]: debug: fill: ");
	put_dec(&l, (int64_t)(R.direct_bytes >> 20));
	put(&l, " MiB from the image, ");
	put_dec(&l, (int64_t)(R.stream_bytes >> 20));
	put(&l, " MiB from the stream; populate ");
	put_dec(&l, R.populate_us / 1000);
	put(&l, " ms, read ");
	put_dec(&l, R.read_us / 1000);
	put(&l, " ms, crc ");
	put_dec(&l, R.crc_us / 1000);
	put(&l, " ms");
	emit(&l);
}

/* ---- the helper thread: population ahead of the fill ---- */

static void helper_main(void *arg, void *arg2)
{
	(void)arg;
	(void)arg2;
	for (uint64_t i = 0; i < R.nahead && !R.helper_stop; i++)
		for (uint64_t off = 0; off < R.ahead[i].len && !R.helper_stop; off += POPULATE_STEP) {
			uint64_t n = R.ahead[i].len - off;

			sys3(__NR_madvise, R.ahead[i].addr + off, n < POPULATE_STEP ? n : POPULATE_STEP,
			     MADV_POPULATE_WRITE);
		}
}

static int tid_taken(int32_t tid)
{
	if (tid == R.h.pid)
		return 1;
	for (uint64_t i = 0; i < R.nthreads; i++)
		if (R.threads[i].tid == tid)
			return 1;
	return 0;
}

/* The helper needs a tid of its own in the PID namespace: one that no
 * thread of the program needs (they are created after it is gone, with
 * set_tid). Without the helper the fill only takes longer. */
static void helper_start(const struct proc_msg *m)
{
	struct pimg_clone_args ca;
	int32_t tid = R.helper_want > 1 ? R.helper_want : 2;
	long ret;

	if (m->len % sizeof(struct proc_data) || m->len > POPULATE_MAX)
		die("the restore stream has a bad populate record");
	R.nahead = m->len / sizeof(struct proc_data);
	if (!R.nahead)
		return;
	R.ahead = map_window(POPULATE_ADDR, (m->len + 4095) & ~4095ul);
	read_all(R.ahead, m->len);
	for (uint64_t i = 0; i < R.nahead; i++)
		check_target(&R.ahead[i]);
	while (tid_taken(tid))
		tid++;
	map_window(HELPER_STACK_ADDR, THREAD_STACK_SIZE);
	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
		   CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
	ca.parent_tid = ca.child_tid = (uint64_t)&R.helper_tid;
	ca.stack = HELPER_STACK_ADDR;
	ca.stack_size = THREAD_STACK_SIZE;
	ca.set_tid = (uint64_t)&tid;
	ca.set_tid_size = 1;
	ret = pimg_clone3(&ca, sizeof(ca), helper_main, 0, 0);
	if (ret < 0)
		R.helper_tid = 0;
}

/* The helper gone before anything may change protections or create
 * threads: its tid is free again, and nothing runs on its stack. */
static void helper_stop(void)
{
	int32_t tid;

	R.helper_stop = 1;
	while ((tid = R.helper_tid) != 0)
		sys6(__NR_futex, (long)&R.helper_tid, FUTEX_WAIT, tid, 0, 0, 0);
	if (R.ahead)
		sys2(__NR_munmap, HELPER_STACK_ADDR, THREAD_STACK_SIZE);
}

static void read_threads(struct proc_msg *m)
{
	R.threads = map_window(TABLE_ADDR + (512ul << 20),
			       ((R.h.nthreads + 1) * sizeof(struct proc_thread) + 4095) & ~4095ul);
	while (m->type == PROC_MSG_THREAD) {
		if (m->len < sizeof(struct proc_thread) || R.nthreads >= R.h.nthreads)
			die("the restore stream has a bad thread record");
		read_all(&R.threads[R.nthreads++], sizeof(struct proc_thread));
		skip(m->len - sizeof(struct proc_thread));
		read_msg(m);
	}
	if (m->type != PROC_MSG_THREADS_DONE || R.nthreads != R.h.nthreads || !R.nthreads)
		die("the restore stream ended without every thread");
	read_msg(m);
}

static void fill(struct proc_msg *m)
{
	struct proc_data d;
	int64_t t;

	read_threads(m);
	if (m->type == PROC_MSG_HELPER_TID) {
		if (m->len != sizeof(R.helper_want))
			die("the restore stream has a bad helper record");
		read_all(&R.helper_want, sizeof(R.helper_want));
		read_msg(m);
	}
	if (m->type == PROC_MSG_POPULATE) {
		helper_start(m);
		read_msg(m);
	}
	for (;; read_msg(m)) {
		if (m->type == PROC_MSG_IMAGE) {
			read_image(m);
			continue;
		}
		if (m->type == PROC_MSG_CHUNK) {
			read_chunk(m);
			continue;
		}
		if (m->type != PROC_MSG_DATA)
			break;
		if (m->len < sizeof(d))
			die("the restore stream has a bad data record");
		read_all(&d, sizeof(d));
		if (m->len - sizeof(d) != d.len)
			die("the restore stream has data outside every region");
		check_target(&d);
		populate(&d);
		t = R.debug ? now_us() : 0;
		read_all((void *)d.addr, d.len);
		if (R.debug)
			R.read_us += now_us() - t;
		R.stream_bytes += d.len;
	}
	helper_stop();
	fill_log();
	if (m->type != PROC_MSG_KEEP_FDS || m->len % sizeof(struct proc_keep_fd) || m->len > (64ul << 20))
		die("the restore stream has no descriptor list");
	R.nkeep = m->len / sizeof(struct proc_keep_fd);
	R.keep = map_window(TABLE_ADDR + (768ul << 20), (m->len + 4096) & ~4095ul);
	read_all(R.keep, m->len);
}

/* Close every descriptor but stdin/stdout/stderr, the channel and the
 * program's (set up before exec), then give those their close-on-exec flag. */
static void close_fds(int channel)
{
	uint64_t n = R.nkeep;
	int lo = 3;

	R.keep[n++] = (struct proc_keep_fd){ channel, 1 };
	for (uint64_t i = 1; i < n; i++)
		for (uint64_t j = i; j > 0 && R.keep[j - 1].fd > R.keep[j].fd; j--) {
			struct proc_keep_fd t = R.keep[j];

			R.keep[j] = R.keep[j - 1];
			R.keep[j - 1] = t;
		}
	for (uint64_t i = 0; i < n; i++) {
		int fd = R.keep[i].fd;

		if (fd < lo)
			continue;
		if (fd > lo)
			sys3(__NR_close_range, lo, fd - 1, 0);
		lo = fd + 1;
		if (R.keep[i].cloexec)
			sys3(__NR_fcntl, fd, 2 /* F_SETFD */, 1 /* FD_CLOEXEC */);
	}
	sys3(__NR_close_range, lo, ~0u, 0);
}

/* ---- STAGE_PROTECT, STAGE_MM ---- */

static void protect(void)
{
	for (uint64_t i = 0; i < R.nregions; i++) {
		const struct region *r = &R.regions[i];
		long ret;

		if (!r->stored_pages || r->kind == PROC_REGION_FILE_SHARED)
			continue;
		ret = sys3(__NR_mprotect, r->start, r->end - r->start, r->prot);
		if (ret)
			die_errno("cannot set a region's protection", ret);
	}
}

struct prctl_mm_map;
static void mm_fill(struct prctl_mm_map *mm, uint32_t exe_fd);

static void restore_mm(void)
{
	uint64_t mm[13];   /* struct prctl_mm_map, defined with the trampoline */
	long ret;

	mm_fill((struct prctl_mm_map *)mm, (uint32_t)-1);
	/* the auxiliary vector too, so /proc/self/auxv is the program's; a
	 * kernel whose saved vector is smaller takes the rest without it */
	mm[11] = R.h.auxv_len ? (uint64_t)R.h.auxv : 0;
	mm[12] = (uint64_t)R.h.auxv_len | 0xffffffff00000000ull;   /* auxv_size, exe_fd -1 */
	ret = sys5(__NR_prctl, PR_SET_MM, PR_SET_MM_MAP, mm, 104, 0);
	if (ret == -22 /* EINVAL */ && R.h.auxv_len) {
		mm[11] = 0;
		mm[12] = 0xffffffff00000000ull;
		ret = sys5(__NR_prctl, PR_SET_MM, PR_SET_MM_MAP, mm, 104, 0);
	}

	if (ret)
		die_errno("cannot restore brk and the stack, argument and environment "
			  "addresses (prctl PR_SET_MM_MAP)", ret);
	/* vdso/vvar: the program's libc calls the vdso where it was */
	if (R.h.vdso_start) {
		if (R.h.vdso_end - R.h.vdso_start != R.vdso.end - R.vdso.start ||
		    R.h.vvar_end - R.h.vvar_start != R.vvar.end - R.vvar.start ||
		    R.h.vclock_end - R.h.vclock_start != R.vclock.end - R.vclock.start)
			die("this kernel's vdso differs from the checkpointed one (restart on the same kernel)");
		if (find_region(R.h.vdso_start) || find_region(R.h.vvar_start) ||
		    (R.h.vclock_start && find_region(R.h.vclock_start)))
			die("an image region occupies the vdso's address");
		if (R.vvar.start)
			move_kmap(&R.vvar, R.h.vvar_start, "cannot move the vvar page back");
		if (R.vclock.start)
			move_kmap(&R.vclock, R.h.vclock_start, "cannot move the vvar_vclock page back");
		move_kmap(&R.vdso, R.h.vdso_start, "cannot move the vdso back");
	}
}

/* ---- STAGE_PROCESS ---- */

static void restore_process(void)
{
	struct proc_agent_state *st = (struct proc_agent_state *)R.h.state_addr;
	long ret;

	sys1(__NR_umask, R.h.umask);
	sys1(__NR_personality, R.h.personality);
	/* before the threads exist: they inherit it (nice is per thread); a
	 * value below the restart's own needs privileges the namespace lacks,
	 * and then the restart's stays */
	sys3(__NR_setpriority, 0 /* PRIO_PROCESS */, 0, R.h.nice);

	ret = sys1(__NR_chdir, R.cwd);
	if (ret) {
		struct line l = { .n = 0 };

		put(&l, "stasis: restart: cannot enter the working directory ");
		put(&l, R.cwd);
		emit(&l);
		sys1(__NR_exit_group, 42);
	}
	for (int sig = 1; sig <= PROC_NSIG; sig++) {
		if (sig == 9 || sig == 19)
			continue;
		ret = sys4(__NR_rt_sigaction, sig, &R.sa[sig - 1], 0, 8);
		if (ret && sig == PROC_CKPT_SIGNAL)
			die_errno("cannot install the checkpoint signal's handler", ret);
	}
	/* interval timers last: their signals wait, blocked, until the return */
	for (int i = 0; i < 3; i++) {
		struct { int64_t is, ius, vs, vus; } it = {
			(int64_t)(R.h.itimer[i][0] / 1000000), (int64_t)(R.h.itimer[i][0] % 1000000),
			(int64_t)(R.h.itimer[i][1] / 1000000), (int64_t)(R.h.itimer[i][1] % 1000000),
		};

		if (R.h.itimer[i][1])
			sys3(__NR_setitimer, i, &it, 0);
	}
	if (!find_region(R.h.state_addr) || st->magic != PROC_STATE_MAGIC)
		die("the image has no Stasis agent state where its header says");
	if (R.channel != st->channel_fd) {
		ret = sys3(__NR_dup3, R.channel, st->channel_fd, O_CLOEXEC);
		if (ret < 0)
			die_errno("cannot place the coordinator channel", ret);
	}
	st->restarts++;
	close_fds(st->channel_fd);
	/* limits as they were, once every descriptor is in place (the channel's
	 * number may be above a lowered RLIMIT_NOFILE); a hard limit above the
	 * restart's own cannot be raised without CAP_SYS_RESOURCE in the initial
	 * namespace, and then the restart's stays */
	for (uint32_t i = 0; i < R.h.nrlimits && i < 16; i++)
		sys4(__NR_prlimit64, 0, i, &R.h.rlimit[i], 0);
}

/* ---- STAGE_THREADS, STAGE_RETURN ---- */

/* The last instructions of a restore run from two pages that outlive the
 * restorer: a code page copied from tramp_begin..tramp_end and a data page.
 * Each thread leaves through tramp_thread (onto its signal frame, count
 * itself out, rt_sigreturn); once all have, the main thread jumps to
 * tramp_main, which unmaps the rest of the window (the restorer's text,
 * data and stacks), makes the program's binary /proc/self/exe again
 * (PR_SET_MM_MAP refuses while the old one is still mapped) and returns
 * into its own frame. Nothing here touches memory but the data page. */
#define TRAMP_CODE (PROC_WINDOW_SCRATCH + (3ul << 30))
#define TRAMP_DATA (TRAMP_CODE + 4096)

struct prctl_mm_map {
	uint64_t start_code, end_code, start_data, end_data;
	uint64_t start_brk, brk, start_stack;
	uint64_t arg_start, arg_end, env_start, env_end;
	uint64_t *auxv;
	uint32_t auxv_size;
	uint32_t exe_fd;
};

struct tramp_data {
	uint64_t unmap[3][2];           /*   0: three ranges to unmap */
	int64_t result;                 /*  48: of the PR_SET_MM_MAP */
	struct prctl_mm_map mm;         /*  56..159; exe_fd at 156 */
	volatile int32_t threads_left;  /* 160 */
};

_Static_assert(__builtin_offsetof(struct tramp_data, mm) == 56, "tramp_main's offsets");
_Static_assert(__builtin_offsetof(struct tramp_data, mm.exe_fd) == 156, "tramp_main's offsets");
_Static_assert(sizeof(struct prctl_mm_map) == 104, "tramp_main's offsets");

/* hidden: referenced PC-relative, never through a GOT (clang's linker
 * cannot relax a GOT load this high up) */
extern const char tramp_begin[] __attribute__((visibility("hidden")));
extern const char tramp_thread[] __attribute__((visibility("hidden")));
extern const char tramp_end[] __attribute__((visibility("hidden")));
__asm__(".text\n"
	".globl tramp_begin, tramp_thread, tramp_end\n"
	".hidden tramp_begin, tramp_thread, tramp_end\n"
	"tramp_begin:\n"                       /* tramp_main(frame, data) */
	"	mov %rdi, %r12\n"
	"	mov %rsi, %r13\n"
	"	mov 0(%r13), %rdi\n"
	"	mov 8(%r13), %rsi\n"
	"	mov $11, %eax\n"                  /* munmap */
	"	syscall\n"
	"	mov 16(%r13), %rdi\n"
	"	mov 24(%r13), %rsi\n"
	"	mov $11, %eax\n"
	"	syscall\n"
	"	mov 32(%r13), %rdi\n"
	"	mov 40(%r13), %rsi\n"
	"	mov $11, %eax\n"
	"	syscall\n"
	"	mov $35, %edi\n"                  /* prctl(PR_SET_MM, PR_SET_MM_MAP, &mm, 104) */
	"	mov $14, %esi\n"
	"	lea 56(%r13), %rdx\n"
	"	mov $104, %r10d\n"
	"	xor %r8d, %r8d\n"
	"	mov $157, %eax\n"
	"	syscall\n"
	"	mov %rax, 48(%r13)\n"
	"	mov 156(%r13), %edi\n"            /* close(exe_fd) */
	"	mov $3, %eax\n"
	"	syscall\n"
	"	mov %r12, %rsp\n"
	"	mov $15, %eax\n"                  /* rt_sigreturn */
	"	syscall\n"
	"	hlt\n"
	"tramp_thread:\n"                      /* tramp_thread(frame, &threads_left) */
	"	mov %rdi, %rsp\n"
	"	lock decl (%rsi)\n"
	"	mov $15, %eax\n"
	"	syscall\n"
	"	hlt\n"
	"tramp_end:\n");

static struct tramp_data *tramp_install(void)
{
	uint64_t n = (uint64_t)(tramp_end - tramp_begin);
	long ret;

	map_window(TRAMP_CODE, 4096);
	map_window(TRAMP_DATA, 4096);
	memcpy((void *)TRAMP_CODE, tramp_begin, n);
	ret = sys3(__NR_mprotect, TRAMP_CODE, 4096, PROT_READ | PROT_EXEC);
	if (ret)
		die_errno("cannot make the restore's last page executable", ret);
	return (struct tramp_data *)TRAMP_DATA;
}

static void mm_fill(struct prctl_mm_map *mm, uint32_t exe_fd)
{
	*mm = (struct prctl_mm_map){
		R.h.start_code, R.h.end_code, R.h.start_data, R.h.end_data,
		R.h.start_brk, R.h.brk, R.h.start_stack,
		R.h.arg_start, R.h.arg_end, R.h.env_start, R.h.env_end,
		0, 0, exe_fd,
	};
}

/* The restorer's part of starting threads (pimg_threads_restore): each
 * on a stack of its own in the window, waiting at the start line until the
 * main thread is ready, then into its frame through the trampoline, which
 * counts it out of the restorer's code and stacks. */
static uint64_t thread_stack(const struct proc_thread *t, uint32_t i, void *ctx)
{
	(void)t;
	(void)ctx;
	return THREAD_STACKS_ADDR + (i + 1) * THREAD_STACK_SIZE;
}

static void thread_leave(const struct proc_thread *t, long ret, void *ctx)
{
	void (*leave)(uint64_t, volatile int32_t *) =
		(void (*)(uint64_t, volatile int32_t *))(TRAMP_CODE + (uint64_t)(tramp_thread - tramp_begin));

	(void)ctx;
	if (ret < 0)
		die_errno("cannot register a thread's rseq area again", ret);
	while (!start_line)
		sys6(__NR_futex, (long)&start_line, FUTEX_WAIT, 0, 0, 0, 0);
	leave(t->sigframe, &((struct tramp_data *)TRAMP_DATA)->threads_left);
	__builtin_unreachable();
}

static const struct pimg_thread_ops thread_ops = { thread_stack, thread_leave };

static const struct proc_thread *start_threads(void)
{
	struct pimg_threads_restore r = {
		.threads = R.threads, .n = (uint32_t)R.nthreads, .pid = R.h.pid,
		.shared_pending = R.h.shared_pending, .ops = &thread_ops,
	};
	long ret;

	map_window(THREAD_STACKS_ADDR, R.nthreads * THREAD_STACK_SIZE);
	ret = pimg_threads_restore(&r);
	if (ret == -ENOENT)
		die("the image has no main thread (a program whose main thread exited is not supported)");
	if (ret < 0 && &R.threads[r.failed] != r.main)
		die_errno("cannot create a thread with its checkpointed tid (clone3 set_tid)", ret);
	if (ret < 0)
		die_errno("cannot register a thread's rseq area again", ret);
	return r.main;
}

/* ---- entry ---- */

static int parse_int(const char *s)
{
	int v = 0;

	while (*s >= '0' && *s <= '9')
		v = v * 10 + (*s++ - '0');
	return v;
}

static void __attribute__((noreturn)) restore(void)
{
	const struct proc_thread *main_thread;
	struct tramp_data *tramp;
	struct proc_msg m;
	long exe_fd;

	stage(STAGE_SELF);
	clear_self();
	read_header();
	stage(STAGE_HEADER);
	map_regions(&m);
	stage(STAGE_MAP);
	fill(&m);
	stage(STAGE_FILL);
	protect();
	stage(STAGE_PROTECT);
	restore_mm();
	stage(STAGE_MM);
	restore_process();
	stage(STAGE_PROCESS);
	tramp = tramp_install();
	tramp->threads_left = (int32_t)R.nthreads - 1;
	main_thread = start_threads();
	stage(STAGE_THREADS);
	exe_fd = R.exe[0] ? sys3(__NR_open, R.exe, O_RDONLY | O_CLOEXEC, 0) : -1;
	mm_fill(&tramp->mm, exe_fd >= 0 ? (uint32_t)exe_fd : (uint32_t)-1);
	/* not the agent's part of the window: the other threads run the
	 * program again from the start line on, and the agent's may already
	 * have mapped a new checkpoint's buffers there (under load this thread
	 * got here after it, unmapped them and the agent died on SIGSEGV) */
	tramp->unmap[0][0] = PROC_WINDOW_START;
	tramp->unmap[0][1] = PROC_WINDOW_AGENT - PROC_WINDOW_START;
	tramp->unmap[1][0] = PROC_WINDOW_SCRATCH;
	tramp->unmap[1][1] = TRAMP_CODE - PROC_WINDOW_SCRATCH;
	tramp->unmap[2][0] = TRAMP_DATA + 4096;
	tramp->unmap[2][1] = PROC_WINDOW_END - (TRAMP_DATA + 4096);
	stage(STAGE_RETURN);
	start_line = 1;
	sys6(__NR_futex, (long)&start_line, FUTEX_WAKE, 0x7fffffff, 0, 0, 0);
	/* every other thread off the restorer's code and stacks */
	while (tramp->threads_left > 0)
		sys0(24 /* sched_yield */);
	((void (*)(uint64_t, struct tramp_data *))TRAMP_CODE)(main_thread->sigframe, tramp);
	__builtin_unreachable();
}

static void __attribute__((noreturn)) switch_stack(uint64_t top, void (*fn)(void))
{
	__asm__ volatile("mov %0, %%rsp\n"
			 "xor %%ebp, %%ebp\n"
			 "call *%1\n"
			 "hlt\n"
			 :
			 : "r"(top), "r"(fn)
			 : "memory");
	__builtin_unreachable();
}

void restorer_main(uint64_t *sp);
void restorer_main(uint64_t *sp)
{
	long argc = (long)sp[0];
	char **argv = (char **)(sp + 1);
	uint64_t all = ~0ull;

	sys4(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, &all, 0, 8);
	if (argc != 5 && argc != 6)
		die("usage: stasis-restore STREAM_FD CHANNEL_FD IMAGE_FD LOGLEVEL [LAZY_FD] (started by "
		    "`stasis restart`)");
	R.stream = parse_int(argv[1]);
	R.channel = parse_int(argv[2]);
	R.image = parse_int(argv[3]);
	R.debug = argv[4][0] == 'd';
	R.lazy = argc == 6 ? parse_int(argv[5]) : -1;
	restorer_crc_init();
	stage(STAGE_START);
	map_window(SELF_STACK_ADDR, SELF_STACK_SIZE);
	switch_stack(SELF_STACK_ADDR + SELF_STACK_SIZE, restore);
}

__asm__(".text\n"
	".globl _start\n"
	"_start:\n"
	"	xor %ebp, %ebp\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call restorer_main\n"
	"	hlt\n");
