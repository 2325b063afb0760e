/* lazy.c - lazy restore (pimg_lazy.h; docs/split.md, "Lazy restore").
 *
 * The pieces are registered with a userfaultfd; a thread then reads them
 * from the image in order, 4 MiB at a time (each chunk's CRC checked by the
 * reader), and serves first any page some thread touches before its turn.
 * The program's threads, and the kernel on their behalf (a read(2) into a
 * buffer, a peer's process_vm_readv) just wait for that page.
 *
 * The program may change its mappings meanwhile, and the kernel says so
 * (the non-cooperative events) before the change is visible:
 *   - madvise(DONTNEED/REMOVE) and munmap: those pages are settled, never
 *     filled from the image: a later touch gets zeros, as without Stasis;
 *   - mremap moving pages: their pieces move with them;
 *   - fork: the child's copy of the missing pages is served from the same
 *     image through the userfaultfd the event brings, as the parent's is.
 * A page is copied in only while no such change is pending (the kernel
 * refuses UFFDIO_COPY with EAGAIN until its event is read), so the image's
 * contents never land on memory the program has since let go of.
 *
 * Pages are numbered across the pieces in their order (page0); a bit per
 * page says it is settled. When every page is, the descriptors are closed
 * and the thread ends. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "image/image.h"
#include "pimg/pimg_lazy.h"
#include "pimg/pimg_format.h"

#define PAGE 4096ul
#define UNIT_PAGES 1024ul       /* 4 MiB, the image's default chunk */
#define MAX_MM 16               /* the first process and the children it forks meanwhile */
#define RA_AHEAD (64ul << 20)   /* the disk reads this far ahead of the fill */

struct piece {
	uint64_t addr, npages, page0;   /* page0: its first page's number */
	uint64_t off;                   /* of its first page in section */
	unsigned section;
};

/* one address space being filled: the first one, or a child's */
struct mm {
	int fd;
	struct piece *v;
	unsigned n, cap;
	uint8_t *settled;               /* a bit per page */
	uint64_t left;                  /* pages not settled */
	uint64_t cursor;                /* the background fill's next page */
	uint64_t *faults;               /* touched pages waiting for an answer */
	unsigned nfaults, capfaults;
};

struct pimg_lazy {
	pthread_t th;
	int go, failed;
	struct img_reader *img;
	uint64_t npages;
	unsigned char *buf;
	struct mm mm[MAX_MM];
	unsigned nmm;
	const struct pimg_lazy_ops *ops;
	void *arg;
	uint64_t bytes, served;
	struct timespec t0;
	/* read_ahead's: the section, its size and chunk size, what was asked */
	unsigned ra_sec;
	uint64_t ra_size, ra_csize, ra_begin, ra_end;
};

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

/* p's part from address s on, as a piece of its own */
static struct piece tail(const struct piece *p, uint64_t s)
{
	uint64_t skip = (s - p->addr) / PAGE;

	return (struct piece){ s, p->npages - skip, p->page0 + skip, p->off + skip * PAGE, p->section };
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
		if (e < end && add_piece(m, tail(p, e)))
			return -ENOMEM;
		p = &m->v[i];
		if (s > p->addr) {
			struct piece head = *p;

			head.npages = (s - p->addr) / PAGE;
			if (add_piece(m, head))
				return -ENOMEM;
			p = &m->v[i];
			*p = tail(p, s);
		}
		p->npages = (e - s) / PAGE;
		p->addr = s - from + to;
	}
	return 0;
}

/* The owner says what failed; from then on nothing is served. */
static int fail(struct pimg_lazy *z, const char *what)
{
	z->failed = 1;
	z->ops->fatal(z->arg, what);
	return -EIO;
}

/* Copy [pg, pg + n) of piece p in from z->buf (which holds page buf_pg on).
 * 0 when every page of it is settled, -EAGAIN when a change to the address
 * space is pending: read the events, then try again. */
static int copy_in(struct pimg_lazy *z, struct mm *m, const struct piece *p, uint64_t pg, uint64_t n,
		   uint64_t buf_pg)
{
	while (n) {
		struct uffdio_copy c = {
			.dst = p->addr + (pg - p->page0) * PAGE,
			.src = (uint64_t)(uintptr_t)(z->buf + (pg - buf_pg) * PAGE),
			.len = n * PAGE,
		};
		uint64_t done;

		if (ioctl(m->fd, UFFDIO_COPY, &c) == 0) {
			settle(m, pg, n);
			z->bytes += n * PAGE;
			return 0;
		}
		if (c.copy > 0) {                       /* part of it: go on from there */
			done = (uint64_t)c.copy / PAGE;
			settle(m, pg, done);
			z->bytes += done * PAGE;
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
		case ESRCH:     /* the address space is gone (the process exited) */
			settle(m, 0, z->npages);
			return 0;
		default:
			return fail(z, strerror(errno));
		}
	}
	return 0;
}

/* Keep the disk reading ahead of the fill at off of section sec, as the
 * restorer does for an eager restore: a 4 MiB read at a time from a cold
 * cache left the disk idle while each unit was copied in (2.7 times an
 * eager restore's time until every page was in, 256 MiB). Asked for:
 * [ra_begin, ra_end) of section ra_sec. */
static void read_ahead(struct pimg_lazy *z, unsigned sec, uint64_t off)
{
	struct img_section_info si;
	struct img_chunk_loc loc;
	uint64_t from = off, to;

	if (sec != z->ra_sec || !z->ra_csize) {
		if (img_section_get(z->img, sec, &si) != 0 || !si.chunks ||
		    img_chunk_locate(z->img, sec, 0, &loc) != 0 || !loc.raw_len)
			return;
		z->ra_sec = sec;
		z->ra_size = si.size;
		z->ra_csize = loc.raw_len;   /* every chunk's but the last */
		z->ra_begin = z->ra_end = 0;
	}
	if (off >= z->ra_begin && off < z->ra_end) {
		if (off + RA_AHEAD / 2 <= z->ra_end)
			return;
		from = z->ra_end;
	} else {
		z->ra_begin = off;
	}
	to = off + RA_AHEAD < z->ra_size ? off + RA_AHEAD : z->ra_size;
	for (uint64_t c = from / z->ra_csize; c * z->ra_csize < to; c++)
		if (img_chunk_locate(z->img, sec, (uint32_t)c, &loc) == 0 && loc.form != IMG_FORM_ZERO)
			posix_fadvise(img_fd(z->img), (off_t)loc.payload_pos, loc.stored_len,
				      POSIX_FADV_WILLNEED);
	z->ra_end = to;
}

/* Fill the unit (4 MiB of its section) holding page pg of piece p. */
static int fill(struct pimg_lazy *z, struct mm *m, const struct piece *p, uint64_t pg)
{
	uint64_t first = p->off / PAGE;   /* p's first page in its section */
	uint64_t u0 = (first + pg - p->page0) / UNIT_PAGES * UNIT_PAGES, u1 = u0 + UNIT_PAGES, a;
	int loaded = 0, ret;

	/* from section pages to page numbers, within p */
	u0 = u0 < first ? p->page0 : p->page0 + (u0 - first);
	u1 = u1 - first > p->npages ? p->page0 + p->npages : p->page0 + (u1 - first);
	for (a = u0; a < u1;) {
		uint64_t b;

		if (is_settled(m, a)) {
			a++;
			continue;
		}
		for (b = a + 1; b < u1 && !is_settled(m, b); b++)
			;
		if (!loaded) {
			read_ahead(z, p->section, p->off + (u0 - p->page0) * PAGE);
			if (img_read(z->img, p->section, p->off + (u0 - p->page0) * PAGE, z->buf,
				     (u1 - u0) * PAGE) != (ssize_t)((u1 - u0) * PAGE))
				return fail(z, *err_msg() ? err_msg() : "a section is short");
			loaded = 1;
		}
		ret = copy_in(z, m, p, a, b - a, u0);
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
	struct uffdio_zeropage zp = { .range = { addr, PAGE } };
	struct uffdio_range w = { addr, PAGE };

	if (ioctl(m->fd, UFFDIO_ZEROPAGE, &zp) == 0)
		return 0;
	if (errno == EAGAIN && zp.zeropage == -EAGAIN)
		return -EAGAIN;
	if (ioctl(m->fd, UFFDIO_WAKE, &w) != 0 && errno != ENOENT && errno != ESRCH)
		return -errno;
	return 0;
}

static int add_mm(struct pimg_lazy *z, int fd, const struct mm *from)
{
	struct mm *m;
	size_t bits = (z->npages + 7) / 8;

	if (z->nmm == MAX_MM)
		return -EMFILE;
	m = &z->mm[z->nmm];
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
	z->nmm++;
	return 0;
}

/* Read and act on m's events; touched pages are queued for serve(). */
static int events(struct pimg_lazy *z, struct mm *m)
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
						return fail(z, "out of memory");
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
					return fail(z, "out of memory");
				break;
			case UFFD_EVENT_FORK:
				if (add_mm(z, (int)g->arg.fork.ufd, m))
					return fail(z, "the program forked more children than it follows");
				break;
			}
		}
	}
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
		settle(m, 0, z->npages);   /* the address space is gone */
	return 0;
}

/* Serve m's touched pages; 0 when none waits, -EAGAIN to read events first. */
static int serve(struct pimg_lazy *z, struct mm *m)
{
	while (m->nfaults) {
		uint64_t addr = m->faults[0];
		struct piece *p = piece_at(m, addr);
		int ret = 0;

		if (p && !is_settled(m, p->page0 + (addr - p->addr) / PAGE))
			ret = fill(z, m, p, p->page0 + (addr - p->addr) / PAGE);
		ret = ret ? ret : answer(m, addr);
		if (ret == -EAGAIN || z->failed)
			return ret;
		if (ret)
			return fail(z, strerror(-ret));
		z->served++;
		memmove(m->faults, m->faults + 1, --m->nfaults * sizeof(m->faults[0]));
	}
	return 0;
}

/* The next unit of the background fill; -EAGAIN to read events first. */
static int background(struct pimg_lazy *z, struct mm *m)
{
	while (m->cursor < z->npages && is_settled(m, m->cursor))
		m->cursor++;
	if (m->cursor < z->npages) {
		struct piece *p = piece_of_page(m, m->cursor);

		if (!p) {
			settle(m, m->cursor, 1);   /* moved away and unmapped in part */
			return 0;
		}
		return fill(z, m, p, m->cursor);
	}
	return 0;
}

static void *run(void *arg)
{
	struct pimg_lazy *z = arg;
	struct pollfd pf[MAX_MM];
	struct pimg_lazy_stats st;
	struct timespec t1;

	while (!z->failed) {
		unsigned busy = 0;
		int idle = 1;

		for (unsigned i = 0; i < z->nmm; i++) {
			pf[i] = (struct pollfd){ .fd = z->mm[i].fd, .events = POLLIN };
			busy += z->mm[i].left > 0 || z->mm[i].nfaults > 0;
		}
		if (!busy)
			break;
		/* before pimg_lazy_go, only touched pages: the owner's restart
		 * has the CPUs */
		if (poll(pf, z->nmm, __atomic_load_n(&z->go, __ATOMIC_ACQUIRE) ? 0 : 5) > 0)
			idle = 0;
		for (unsigned i = 0; i < z->nmm && !z->failed; i++)
			if (pf[i].revents)
				events(z, &z->mm[i]);
		for (unsigned i = 0; i < z->nmm && !z->failed; i++) {
			if (serve(z, &z->mm[i]) == -EAGAIN) {
				events(z, &z->mm[i]);
				idle = 0;
			}
		}
		if (z->failed || !idle || !__atomic_load_n(&z->go, __ATOMIC_ACQUIRE))
			continue;
		for (unsigned i = 0; i < z->nmm; i++)
			if (z->mm[i].left) {
				if (background(z, &z->mm[i]) == -EAGAIN)
					events(z, &z->mm[i]);
				break;
			}
	}
	for (unsigned i = 0; i < z->nmm; i++) {
		close(z->mm[i].fd);
		free(z->mm[i].faults);
		free(z->mm[i].v);
		free(z->mm[i].settled);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	st = (struct pimg_lazy_stats){ z->bytes, z->served,
				       (double)(t1.tv_sec - z->t0.tv_sec) +
					       (double)(t1.tv_nsec - z->t0.tv_nsec) * 1e-9 };
	free(z->buf);
	z->buf = NULL;
	img_close(&z->img);
	if (!z->failed && z->ops->done)
		z->ops->done(z->arg, &st);
	return NULL;
}

/* The non-cooperative events above; UFFD_FEATURE_EVENT_FORK needs
 * CAP_SYS_PTRACE of whoever calls UFFDIO_API. */
#define FEATURES (UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE | \
		  UFFD_FEATURE_EVENT_UNMAP)

static int setup(int fd, const struct pimg_lazy_piece *v, unsigned n)
{
	struct uffdio_api api = { .api = UFFD_API, .features = FEATURES };

	if (ioctl(fd, UFFDIO_API, &api) != 0)
		return err_set(-errno, "UFFDIO_API: %s", strerror(errno));
	for (unsigned i = 0; i < n; i++) {
		struct uffdio_register r = {
			.range = { v[i].addr, v[i].npages * PAGE },
			.mode = UFFDIO_REGISTER_MODE_MISSING,
		};

		if (ioctl(fd, UFFDIO_REGISTER, &r) != 0)
			return err_set(-errno, "UFFDIO_REGISTER %#lx: %s", (unsigned long)v[i].addr,
				       strerror(errno));
	}
	return 0;
}

int pimg_lazy_start(int uffd, struct img_reader *img, const struct pimg_lazy_piece *v, unsigned n,
		    int go, const struct pimg_lazy_ops *ops, void *arg, struct pimg_lazy **out)
{
	struct pimg_lazy *z;
	struct mm seed = { 0 };
	int ret;

	*out = NULL;
	if (n == 0) {
		close(uffd);
		return err_set(-EINVAL, "nothing to restore lazily");
	}
	ret = setup(uffd, v, n);
	if (ret) {
		close(uffd);   /* unregisters what was */
		return ret;
	}
	z = calloc(1, sizeof(*z));
	if (!z) {
		close(uffd);
		return err_set(-ENOMEM, "cannot start the lazy restore: %s", strerror(ENOMEM));
	}
	z->img = img;
	z->go = go;
	z->ops = ops;
	z->arg = arg;
	for (unsigned i = 0; i < n; i++)
		z->npages += v[i].npages;
	z->buf = malloc(UNIT_PAGES * PAGE);
	seed.settled = calloc(1, (z->npages + 7) / 8);
	seed.v = malloc(n * sizeof(*seed.v));
	ret = !z->buf || !seed.settled || !seed.v ? -ENOMEM : 0;
	if (!ret) {
		uint64_t page0 = 0;

		for (unsigned i = 0; i < n; i++) {
			seed.v[i] = (struct piece){ v[i].addr, v[i].npages, page0, v[i].off, v[i].section };
			page0 += v[i].npages;
		}
		seed.n = n;
		seed.left = z->npages;
		ret = add_mm(z, uffd, &seed);
	}
	free(seed.settled);
	free(seed.v);
	clock_gettime(CLOCK_MONOTONIC, &z->t0);
	if (!ret) {
		ret = -pthread_create(&z->th, NULL, run, z);
		if (!ret) {
			*out = z;
			return 0;
		}
	}
	free(z->buf);
	if (z->nmm) {
		free(z->mm[0].settled);
		free(z->mm[0].v);
	}
	close(uffd);
	free(z);
	return err_set(ret, "cannot start the lazy restore: %s", strerror(-ret));
}

void pimg_lazy_go(struct pimg_lazy *z)
{
	if (z)
		__atomic_store_n(&z->go, 1, __ATOMIC_RELEASE);
}

void pimg_lazy_wait(struct pimg_lazy **z)
{
	if (!*z)
		return;
	pimg_lazy_go(*z);
	pthread_join((*z)->th, NULL);
	free(*z);
	*z = NULL;
}

int pimg_lazy_region(const struct pimg_rec_region *r, uint64_t stored)
{
	return r->kind == PIMG_ANON && r->prot == (PROT_READ | PROT_WRITE) &&
	       !(r->flags & PIMG_F_STACK) && stored >= PIMG_LAZY_MIN;
}
