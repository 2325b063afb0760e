/* lh_lazy.c - lazy restore: the upper half runs before its large runs of
 * pages are in memory (docs/split.md, "Lazy restore").
 *
 * lh_restore() maps every region and hands the large anonymous runs
 * (pieces) here instead of reading them. They are registered with a
 * userfaultfd; a thread of the lower half then reads them from the image
 * in order, chunk by chunk (each chunk's CRC checked by the reader), and
 * serves first any page some thread touches before its turn. The rank's
 * threads, MPI included, and the kernel on their behalf (a read(2) into an
 * upper-half buffer, a peer's process_vm_readv) just wait for that page.
 *
 * The upper half may change its mappings meanwhile, and the kernel says
 * so (the non-cooperative events) before the change is visible:
 *   - madvise(DONTNEED/REMOVE) and munmap: those pages are settled, never
 *     filled from the image: a later touch gets zeros, as without Stasis;
 *   - mremap moving pages: their pieces move with them;
 *   - fork: the child's copy of the missing pages is served from the same
 *     image through the userfaultfd the event brings, as the parent's is.
 * A page is copied in only while no such change is pending (the kernel
 * refuses UFFDIO_COPY with EAGAIN until its event is read), so the image's
 * contents never land on memory the program has since let go of.
 *
 * When every page is settled the descriptors are closed and the thread
 * ends; a checkpoint waits for that first (lh_lazy_wait), since the
 * pagemap would not show pages that are not in yet. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "image/image.h"
#include "lh.h"
#include "lh_fds.h"
#include "lh_ckpt.h"

#define PAGE 4096ul
#define UNIT_PAGES 1024ul       /* 4 MiB, the image's default chunk */
#define MAX_MM 16               /* this process and the children it forks meanwhile */

struct piece {
	uint64_t addr, npages, page0;   /* page0: its first page's index in the pages section */
};

/* one address space being filled: this process's, or a child's */
struct mm {
	int fd;
	struct piece *v;
	unsigned n, cap;
	uint8_t *settled;               /* a bit per page of the pages section */
	uint64_t left;                  /* pages of the pieces not settled */
	uint64_t cursor;                /* the background fill's next page */
	uint64_t *faults;               /* touched pages waiting for an answer */
	unsigned nfaults, capfaults;
};

static struct {
	pthread_t th;
	int running, go;
	struct img_reader *img;
	unsigned sec;
	uint64_t npages;                /* in the pages section */
	unsigned char *buf;
	struct mm mm[MAX_MM];
	unsigned nmm;
	int rank;
	uint64_t bytes, served;
	struct timespec t0;
} L;

static int is_settled(const struct mm *m, uint64_t pg)
{
	return m->settled[pg >> 3] >> (pg & 7) & 1;
}

static void settle(struct mm *m, uint64_t pg, uint64_t n)
{
	for (uint64_t i = pg; i < pg + n; i++)
		if (!is_settled(m, i)) {
			m->settled[i >> 3] |= (uint8_t)(1u << (i & 7));
			m->left--;
		}
}

static struct piece *piece_at(struct mm *m, uint64_t addr)
{
	for (unsigned i = 0; i < m->n; i++)
		if (addr >= m->v[i].addr && addr < m->v[i].addr + m->v[i].npages * PAGE)
			return &m->v[i];
	return NULL;
}

static struct piece *piece_of_page(struct mm *m, uint64_t pg)
{
	for (unsigned i = 0; i < m->n; i++)
		if (pg >= m->v[i].page0 && pg < m->v[i].page0 + m->v[i].npages)
			return &m->v[i];
	return NULL;
}

/* settle the pages of [a, b) (addresses) that are in pieces */
static void settle_range(struct mm *m, uint64_t a, uint64_t b)
{
	for (unsigned i = 0; i < m->n; i++) {
		const struct piece *p = &m->v[i];
		uint64_t s = a > p->addr ? a : p->addr, e = p->addr + p->npages * PAGE;

		if (b < e)
			e = b;
		if (s < e)
			settle(m, p->page0 + (s - p->addr) / PAGE, (e - s + PAGE - 1) / PAGE);
	}
}

static int add_piece(struct mm *m, struct piece p)
{
	if (m->n == m->cap) {
		unsigned cap = m->cap ? 2 * m->cap : 16;
		struct piece *v = realloc(m->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = cap;
	}
	m->v[m->n++] = p;
	return 0;
}

/* mremap moved [from, from + len) to to: so do the pieces there */
static int remap(struct mm *m, uint64_t from, uint64_t to, uint64_t len)
{
	for (unsigned i = 0; i < m->n; i++) {
		struct piece *p = &m->v[i];
		uint64_t end = p->addr + p->npages * PAGE, s, e;

		if (p->addr >= from + len || end <= from)
			continue;
		s = p->addr > from ? p->addr : from;
		e = end < from + len ? end : from + len;
		/* split off what stays before and after the moved range */
		if (e < end && add_piece(m, (struct piece){ e, (end - e) / PAGE,
							    p->page0 + (e - p->addr) / PAGE }))
			return -ENOMEM;
		p = &m->v[i];
		if (s > p->addr) {
			if (add_piece(m, (struct piece){ p->addr, (s - p->addr) / PAGE, p->page0 }))
				return -ENOMEM;
			p = &m->v[i];
			p->page0 += (s - p->addr) / PAGE;
		}
		p->npages = (e - s) / PAGE;
		p->addr = s - from + to;
	}
	return 0;
}

static void fatal(const char *what)
{
	lh_die("rank %d: lazy restore: %s; the restarted rank cannot go on", L.rank, what);
}

/* Copy [pg, pg + n) of piece p in from L.buf (which holds page buf_pg on).
 * 0 when every page of it is settled, -EAGAIN when a change to the address
 * space is pending: read the events, then try again. */
static int copy_in(struct mm *m, const struct piece *p, uint64_t pg, uint64_t n, uint64_t buf_pg)
{
	while (n) {
		struct uffdio_copy c = {
			.dst = p->addr + (pg - p->page0) * PAGE,
			.src = (uint64_t)(uintptr_t)(L.buf + (pg - buf_pg) * PAGE),
			.len = n * PAGE,
		};
		uint64_t done;

		if (ioctl(m->fd, UFFDIO_COPY, &c) == 0) {
			settle(m, pg, n);
			L.bytes += n * PAGE;
			return 0;
		}
		if (c.copy > 0) {                       /* part of it: go on from there */
			done = (uint64_t)c.copy / PAGE;
			settle(m, pg, done);
			L.bytes += done * PAGE;
			pg += done;
			n -= done;
			continue;
		}
		switch (errno) {
		case EAGAIN:
			return -EAGAIN;
		case EEXIST:    /* in already (the bitmap lags a zero page we gave) */
		case ENOENT:    /* no longer registered: unmapped, and the event read */
			settle(m, pg, 1);
			pg++;
			n--;
			break;
		case ESRCH:     /* the address space is gone (the child exited) */
			settle(m, 0, L.npages);
			return 0;
		default:
			fatal(strerror(errno));
		}
	}
	return 0;
}

/* Fill the unit (4 MiB of the image) holding page pg of piece p. */
static int fill(struct mm *m, const struct piece *p, uint64_t pg)
{
	uint64_t u0 = pg / UNIT_PAGES * UNIT_PAGES, u1 = u0 + UNIT_PAGES, a;
	int loaded = 0, ret;

	if (u0 < p->page0)
		u0 = p->page0;
	if (u1 > p->page0 + p->npages)
		u1 = p->page0 + p->npages;
	for (a = u0; a < u1;) {
		uint64_t b;

		if (is_settled(m, a)) {
			a++;
			continue;
		}
		for (b = a + 1; b < u1 && !is_settled(m, b); b++)
			;
		if (!loaded) {
			if (img_read(L.img, L.sec, u0 * PAGE, L.buf, (u1 - u0) * PAGE) !=
			    (ssize_t)((u1 - u0) * PAGE))
				fatal(*err_msg() ? err_msg() : "the pages section is short");
			loaded = 1;
		}
		ret = copy_in(m, p, a, b - a, u0);
		if (ret)
			return ret;
		a = b;
	}
	return 0;
}

/* Answer a touched page once it is settled: a zero page if it is still
 * missing (let go of by the program, or never stored), else just wake. */
static int answer(struct mm *m, uint64_t addr)
{
	struct uffdio_zeropage z = { .range = { addr, PAGE } };
	struct uffdio_range w = { addr, PAGE };

	if (ioctl(m->fd, UFFDIO_ZEROPAGE, &z) == 0)
		return 0;
	if (errno == EAGAIN && z.zeropage == -EAGAIN)
		return -EAGAIN;
	if (ioctl(m->fd, UFFDIO_WAKE, &w) != 0 && errno != ENOENT && errno != ESRCH)
		return -errno;
	return 0;
}

static int add_mm(int fd, const struct mm *from)
{
	struct mm *m;
	size_t bits = (L.npages + 7) / 8;

	if (L.nmm == MAX_MM)
		return -EMFILE;
	m = &L.mm[L.nmm];
	memset(m, 0, sizeof(*m));
	m->fd = fd;
	m->settled = malloc(bits);
	m->cap = from->n ? from->n : 1;
	m->v = malloc(m->cap * sizeof(*m->v));
	if (!m->settled || !m->v) {
		free(m->settled);
		free(m->v);
		return -ENOMEM;
	}
	memcpy(m->settled, from->settled, bits);
	memcpy(m->v, from->v, from->n * sizeof(*m->v));
	m->n = from->n;
	m->left = from->left;
	L.nmm++;
	return 0;
}

/* Read and act on m's events; touched pages are queued for serve(). */
static void events(struct mm *m)
{
	struct uffd_msg msg[16];
	ssize_t r;

	while ((r = read(m->fd, msg, sizeof(msg))) > 0) {
		for (size_t i = 0; i < (size_t)r / sizeof(msg[0]); i++) {
			const struct uffd_msg *g = &msg[i];

			switch (g->event) {
			case UFFD_EVENT_PAGEFAULT:
				if (m->nfaults == m->capfaults) {
					unsigned cap = m->capfaults ? 2 * m->capfaults : 64;
					uint64_t *f = realloc(m->faults, cap * sizeof(*f));

					if (!f)
						fatal("out of memory");
					m->faults = f;
					m->capfaults = cap;
				}
				m->faults[m->nfaults++] = g->arg.pagefault.address & ~(PAGE - 1);
				break;
			case UFFD_EVENT_REMOVE:   /* both fill arg.remove */
			case UFFD_EVENT_UNMAP:
				settle_range(m, g->arg.remove.start, g->arg.remove.end);
				break;
			case UFFD_EVENT_REMAP:
				if (remap(m, g->arg.remap.from, g->arg.remap.to, g->arg.remap.len))
					fatal("out of memory");
				break;
			case UFFD_EVENT_FORK:
				if (add_mm((int)g->arg.fork.ufd, m))
					fatal("the program forked more children than it follows");
				break;
			}
		}
	}
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
		settle(m, 0, L.npages);   /* the address space is gone */
}

/* Serve m's touched pages; 0 when none waits, -EAGAIN to read events first. */
static int serve(struct mm *m)
{
	while (m->nfaults) {
		uint64_t addr = m->faults[0];
		struct piece *p = piece_at(m, addr);
		int ret = 0;

		if (p && !is_settled(m, p->page0 + (addr - p->addr) / PAGE))
			ret = fill(m, p, p->page0 + (addr - p->addr) / PAGE);
		ret = ret ? ret : answer(m, addr);
		if (ret == -EAGAIN)
			return ret;
		if (ret)
			fatal(strerror(-ret));
		L.served++;
		memmove(m->faults, m->faults + 1, --m->nfaults * sizeof(m->faults[0]));
	}
	return 0;
}

/* The next unit of the background fill; -EAGAIN to read events first. */
static int background(struct mm *m)
{
	while (m->cursor < L.npages && is_settled(m, m->cursor))
		m->cursor++;
	if (m->cursor < L.npages) {
		struct piece *p = piece_of_page(m, m->cursor);

		if (!p) {
			settle(m, m->cursor, 1);   /* cannot happen: every lazy page is in a piece */
			return 0;
		}
		return fill(m, p, m->cursor);
	}
	return 0;
}

static void *run(void *arg)
{
	struct pollfd pf[MAX_MM];
	struct timespec t1;

	(void)arg;
	for (;;) {
		unsigned busy = 0;
		int idle = 1;

		for (unsigned i = 0; i < L.nmm; i++) {
			pf[i] = (struct pollfd){ .fd = L.mm[i].fd, .events = POLLIN };
			busy += L.mm[i].left > 0 || L.mm[i].nfaults > 0;
		}
		if (!busy)
			break;
		/* before lh_lazy_go, only touched pages: MPI_Init and the
		 * rebuild have the CPUs (4 ranks on 2 here: 0.2-0.3 s) */
		if (poll(pf, L.nmm, __atomic_load_n(&L.go, __ATOMIC_ACQUIRE) ? 0 : 5) > 0)
			idle = 0;
		for (unsigned i = 0; i < L.nmm; i++)
			if (pf[i].revents)
				events(&L.mm[i]);
		for (unsigned i = 0; i < L.nmm; i++) {
			if (serve(&L.mm[i]) == -EAGAIN) {
				events(&L.mm[i]);
				idle = 0;
			}
		}
		if (!idle || !__atomic_load_n(&L.go, __ATOMIC_ACQUIRE))
			continue;
		for (unsigned i = 0; i < L.nmm; i++)
			if (L.mm[i].left) {
				if (background(&L.mm[i]) == -EAGAIN)
					events(&L.mm[i]);
				break;
			}
	}
	for (unsigned i = 0; i < L.nmm; i++) {
		close(L.mm[i].fd);
		free(L.mm[i].faults);
		free(L.mm[i].v);
		free(L.mm[i].settled);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	lh_log(LOG_INFO, "rank %d: lazy restore done, %llu MiB in %.3f s, "
	       "%llu touched pages served first", L.rank,
			(unsigned long long)(L.bytes >> 20),
			(double)(t1.tv_sec - L.t0.tv_sec) + (t1.tv_nsec - L.t0.tv_nsec) * 1e-9,
			(unsigned long long)L.served);
	free(L.buf);
	img_close(&L.img);
	return NULL;
}

int lh_lazy_start(struct img_reader *img, unsigned sec, uint64_t npages, int rank,
		  const struct lh_lazy_piece *v, unsigned n)
{
	struct uffdio_api api = {
		.api = UFFD_API,
		.features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
			    UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP,
	};
	struct mm seed = { 0 };
	int fd, ret;

	if (L.running || n == 0)
		return -EBUSY;
	/* not UFFD_USER_MODE_ONLY: the kernel's own touches must wait too */
	fd = lh_fd_take((int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
	if (fd < 0)
		return err_set(-errno, "userfaultfd: %s", strerror(errno));
	if (ioctl(fd, UFFDIO_API, &api) != 0) {
		ret = err_set(-errno, "UFFDIO_API: %s", strerror(errno));
		close(fd);
		return ret;
	}
	for (unsigned i = 0; i < n; i++) {
		struct uffdio_register r = {
			.range = { v[i].addr, v[i].npages * PAGE },
			.mode = UFFDIO_REGISTER_MODE_MISSING,
		};

		if (ioctl(fd, UFFDIO_REGISTER, &r) != 0) {
			ret = err_set(-errno, "UFFDIO_REGISTER %#lx: %s", (unsigned long)v[i].addr,
				      strerror(errno));
			close(fd);   /* unregisters what was */
			return ret;
		}
	}
	memset(&L, 0, sizeof(L));
	L.img = img;
	L.sec = sec;
	L.npages = npages;
	L.rank = rank;
	L.buf = malloc(UNIT_PAGES * PAGE);
	seed.settled = malloc((npages + 7) / 8);
	seed.v = malloc(n * sizeof(*seed.v));
	ret = !L.buf || !seed.settled || !seed.v ? -ENOMEM : 0;
	if (!ret) {
		memset(seed.settled, 0xff, (npages + 7) / 8);
		seed.left = 0;
		for (unsigned i = 0; i < n; i++) {
			seed.v[i] = (struct piece){ v[i].addr, v[i].npages, v[i].off / PAGE };
			for (uint64_t pg = seed.v[i].page0; pg < seed.v[i].page0 + v[i].npages; pg++)
				seed.settled[pg >> 3] &= (uint8_t)~(1u << (pg & 7));
			seed.left += v[i].npages;
		}
		seed.n = n;
		ret = add_mm(fd, &seed);
	}
	free(seed.settled);
	free(seed.v);
	clock_gettime(CLOCK_MONOTONIC, &L.t0);
	if (!ret) {
		sigset_t all, old;

		/* no signal of the program's may run its handler here, on the
		 * lower half's TLS: the thread starts with every one blocked */
		sigfillset(&all);
		sigdelset(&all, LH_CKPT_SIGNAL);   /* answered as the lower half's */
		pthread_sigmask(SIG_BLOCK, &all, &old);
		ret = -pthread_create(&L.th, NULL, run, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (!ret) {
			L.running = 1;
			return 0;
		}
	}
	free(L.buf);
	if (L.nmm) {
		free(L.mm[0].settled);
		free(L.mm[0].v);
	}
	close(fd);
	memset(&L, 0, sizeof(L));
	return err_set(ret, "cannot start the lazy restore: %s", strerror(-ret));
}

void lh_lazy_go(void)
{
	__atomic_store_n(&L.go, 1, __ATOMIC_RELEASE);
}

void lh_lazy_wait(void)
{
	if (!L.running)
		return;
	lh_lazy_go();
	pthread_join(L.th, NULL);
	L.running = 0;
}
