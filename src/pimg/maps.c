/* maps.c - /proc/self/maps read, parsed and classified, and the one rule
 * for which pages an image stores (pimg.h).
 *
 * Compiled into the agent (libstasis-inject.so), the freestanding restorer,
 * the lower halves and stasis_pimg: raw system calls only, no libc calls
 * (loops instead of memcmp and strlen), so it runs with other threads stopped
 * anywhere in libc and in a process that has no libc mapped.
 */
#include "pimg/pimg.h"
#include "pimg/pimg_format.h"
#include "pimg/pimg_scan.h"

#include <asm/stat.h>
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>

static long sys4(long n, long a, long b, long c, long d)
{
	long ret;
	register long r10 __asm__("r10") = d;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

long pimg_maps_read(char *buf, size_t cap)
{
	long fd = sys4(__NR_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	size_t used = 0;
	long n = 0;

	if (fd < 0)
		return fd;
	for (;;) {
		if (used + 1 >= cap) {
			n = -ENOSPC;    /* a full buffer may have more behind it */
			break;
		}
		n = sys4(__NR_read, fd, (long)(buf + used), (long)(cap - 1 - used), 0);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
	}
	sys4(__NR_close, fd, 0, 0, 0);
	if (cap)
		buf[used < cap ? used : cap - 1] = 0;
	return n < 0 ? n : (long)used;
}

static uint64_t parse_num(const char **s, const char *e, unsigned base)
{
	uint64_t v = 0;

	for (; *s < e; (*s)++) {
		char c = **s;
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			break;
		v = v * base + d;
	}
	return v;
}

static void skip(const char **s, const char *e, char c)
{
	while (*s < e && **s == c)
		(*s)++;
}

int pimg_maps_next(const char **cursor, struct pimg_mapping *m)
{
	const char *l = *cursor, *e = l, *q = l;

	if (!l || !*l)
		return 0;
	while (*e && *e != '\n')
		e++;
	*cursor = *e ? e + 1 : e;
	m->line = l;
	m->line_len = (uint32_t)(e - l);
	m->start = parse_num(&q, e, 16);
	skip(&q, e, '-');
	m->end = parse_num(&q, e, 16);
	skip(&q, e, ' ');
	m->prot = m->shared = 0;
	if (e - q >= 4) {
		m->prot = (q[0] == 'r' ? 1u : 0) | (q[1] == 'w' ? 2u : 0) | (q[2] == 'x' ? 4u : 0);
		m->shared = q[3] == 's';
		q += 4;
	}
	skip(&q, e, ' ');
	m->offset = parse_num(&q, e, 16);
	skip(&q, e, ' ');
	m->dev_major = (uint32_t)parse_num(&q, e, 16);
	skip(&q, e, ':');
	m->dev_minor = (uint32_t)parse_num(&q, e, 16);
	skip(&q, e, ' ');
	m->ino = parse_num(&q, e, 10);
	skip(&q, e, ' ');
	m->path = q;
	m->path_len = (uint32_t)(e - q);
	return 1;
}

static int path_is(const struct pimg_mapping *m, const char *name)
{
	uint32_t i = 0;

	for (; name[i]; i++)
		if (i >= m->path_len || m->path[i] != name[i])
			return 0;
	return i == m->path_len;
}

static int path_starts(const struct pimg_mapping *m, const char *prefix)
{
	for (uint32_t i = 0; prefix[i]; i++)
		if (i >= m->path_len || m->path[i] != prefix[i])
			return 0;
	return 1;
}

static int path_ends(const struct pimg_mapping *m, const char *suffix)
{
	uint32_t n = 0;

	while (suffix[n])
		n++;
	if (n > m->path_len)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (m->path[m->path_len - n + i] != suffix[i])
			return 0;
	return 1;
}

enum pimg_special pimg_special(const struct pimg_mapping *m)
{
	static const struct {
		const char *name;
		enum pimg_special s;
	} names[] = {
		{ "[heap]", PIMG_HEAP },
		{ "[stack]", PIMG_STACK },
		{ "[vdso]", PIMG_VDSO },
		{ "[vvar]", PIMG_VVAR },
		{ "[vvar_vclock]", PIMG_VVAR_VCLOCK },
		{ "[vsyscall]", PIMG_VSYSCALL },
		{ "[uprobes]", PIMG_UPROBES },
	};

	if (!m->path_len || m->path[0] != '[' || path_starts(m, "[anon:"))
		return PIMG_PLAIN;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (path_is(m, names[i].name))
			return names[i].s;
	return PIMG_OTHER;
}

size_t pimg_mapping_path(const struct pimg_mapping *m, char *buf, size_t cap)
{
	size_t n = m->path_len < cap ? m->path_len : cap - 1;

	for (size_t i = 0; i < n; i++)
		buf[i] = m->path[i];
	buf[n] = 0;
	return n;
}

static void zero_region(struct pimg_region *r)
{
	r->kind = r->flags = 0;
	r->file_size = r->file_mtime_ns = r->file_ino = r->file_dev = 0;
}

int pimg_classify(const struct pimg_mapping *m, const char *path, struct pimg_region *r)
{
	struct stat st;

	zero_region(r);
	r->kind = m->shared ? PIMG_SHARED_ANON : PIMG_ANON;
	switch (pimg_special(m)) {
	case PIMG_PLAIN:
		break;
	case PIMG_HEAP:
		r->flags |= PIMG_F_HEAP;
		return 0;
	case PIMG_STACK:
		r->flags |= PIMG_F_STACK;
		return 0;
	case PIMG_OTHER:
		return -EINVAL;
	default:
		return PIMG_SKIP;
	}
	if (!m->path_len || path_starts(m, "[anon:"))
		return 0;
	if (m->path[0] != '/')
		return -EINVAL;
	if (path_ends(m, " (deleted)") || path_starts(m, "/SYSV")) {
		r->flags |= PIMG_F_DELETED;
		if (m->shared) {
			/* shared memory: which object, so that processes of a tree
			 * that share it share it again after a restart */
			r->file_ino = m->ino;
			r->file_dev = ((uint64_t)m->dev_major << 32) | m->dev_minor;
		}
		return 0;
	}
	if (sys4(__NR_newfstatat, AT_FDCWD, (long)path, (long)&st, 0) != 0 || st.st_ino != m->ino) {
		/* replaced since it was mapped: keep the contents as memory */
		r->flags |= PIMG_F_DELETED;
		return 0;
	}
	if ((st.st_mode & 0170000) != 0100000)
		return -ENODEV;
	r->kind = m->shared ? PIMG_FILE_SHARED : PIMG_FILE_PRIVATE;
	r->file_size = (uint64_t)st.st_size;
	r->file_mtime_ns = (uint64_t)st.st_mtime * 1000000000ull + (uint64_t)st.st_mtime_nsec;
	r->file_ino = st.st_ino;
	r->file_dev = st.st_dev;
	return 0;
}

void pimg_region_record(const struct pimg_mapping *m, const struct pimg_region *r,
			const char *path, struct pimg_rec_region *rec)
{
	uint32_t len = 0;

	while (path[len])
		len++;
	*rec = (struct pimg_rec_region){
		.start = m->start, .end = m->end, .file_offset = m->offset, .prot = m->prot,
		.kind = r->kind, .flags = r->flags, .path_len = len + 1,
		.file_size = r->file_size, .file_mtime_ns = r->file_mtime_ns,
		.file_ino = r->file_ino, .file_dev = r->file_dev,
	};
}

enum pimg_pages pimg_pages(const struct pimg_region *r)
{
	if (r->kind == PIMG_FILE_SHARED)
		return PIMG_PAGES_NONE;
	if (r->kind == PIMG_SHARED_ANON || (r->flags & PIMG_F_DELETED))
		return PIMG_PAGES_ALL;
	return PIMG_PAGES_PAGEMAP;
}

int pimg_page_stored(const struct pimg_region *r, uint64_t pm)
{
	switch (pimg_pages(r)) {
	case PIMG_PAGES_NONE:
		return 0;
	case PIMG_PAGES_ALL:
		return 1;
	case PIMG_PAGES_PAGEMAP:
		break;
	}
	if (r->kind == PIMG_FILE_PRIVATE)
		/* a private page that is not the file's is a written (copied) page */
		return (pm & PIMG_PM_SWAPPED) || ((pm & PIMG_PM_PRESENT) && !(pm & PIMG_PM_FILE));
	return (pm & (PIMG_PM_PRESENT | PIMG_PM_SWAPPED)) != 0;
}

void pimg_runs_init(struct pimg_runs *it, const struct pimg_region *r, uint64_t start,
		    uint64_t end, int pagemap_fd, uint64_t *buf, size_t cap)
{
	it->r = *r;
	it->next = start;
	it->end = end;
	it->pagemap_fd = pagemap_fd;
	it->scan = cap * sizeof(*buf) >= sizeof(struct pimg_scan_range);
	it->how = pimg_pages(r);
	it->buf = buf;
	it->cap = cap;
	it->batch_addr = 0;
	it->batch_n = 0;
	it->batch_i = 0;
}

/* The pagemap entry bits pimg_page_stored reads, of a scanned range's
 * categories: the kernel sets PRESENT, SWAPPED and FILE by the same tests
 * of the same page table entry as pagemap's bits 63, 62 and 61. */
static uint64_t scan_entry(uint64_t categories)
{
	return (categories & PIMG_SCAN_PRESENT ? PIMG_PM_PRESENT : 0) |
	       (categories & PIMG_SCAN_SWAPPED ? PIMG_PM_SWAPPED : 0) |
	       (categories & PIMG_SCAN_FILE ? PIMG_PM_FILE : 0);
}

/* The next ranges of present or swapped pages from it->next into buf
 * (it->batch_n of them, maybe none), it->next moved to where the kernel's
 * walk stopped. 0, or -ENOTTY or -EINVAL from a kernel without the ioctl,
 * or -errno. */
static int scan_batch(struct pimg_runs *it)
{
	struct pimg_scan_arg a = {
		.size = sizeof(a),
		.start = it->next,
		.end = it->end,
		.vec = (uint64_t)(uintptr_t)it->buf,
		.vec_len = it->cap * sizeof(*it->buf) / sizeof(struct pimg_scan_range),
		/* every page that may be stored; pimg_page_stored picks */
		.category_anyof_mask = PIMG_SCAN_PRESENT | PIMG_SCAN_SWAPPED,
		.return_mask = PIMG_SCAN_PRESENT | PIMG_SCAN_SWAPPED,
	};

	if (it->r.kind == PIMG_FILE_PRIVATE)
		/* only asked where the rule reads it: the kernel looks up each
		 * present page's struct page for it */
		a.return_mask |= PIMG_SCAN_FILE;
	long n;

	do
		n = sys4(__NR_ioctl, it->pagemap_fd, (long)PIMG_PAGEMAP_SCAN, (long)&a, 0);
	while (n == -EINTR);
	if (n < 0)
		return (int)n;
	if (a.walk_end <= it->next || a.walk_end > it->end || (uint64_t)n > a.vec_len)
		return -EIO;    /* no progress: never loop on it */
	it->batch_n = (size_t)n;
	it->batch_i = 0;
	it->next = a.walk_end;
	return 0;
}

/* pimg_runs_next by PAGEMAP_SCAN: ranges next to each other that are both
 * stored make one run, as the pagemap reads would (the kernel splits them
 * where their categories differ or its vector was full). */
static int scan_next(struct pimg_runs *it, uint64_t *addr, uint64_t *npages)
{
	const struct pimg_scan_range *v = (const struct pimg_scan_range *)(void *)it->buf;
	uint64_t first = 0, last = 0;    /* the run so far; last 0: none */
	int ret;

	for (;;) {
		const struct pimg_scan_range *g;

		if (it->batch_i == it->batch_n) {
			if (it->next >= it->end)
				break;
			ret = scan_batch(it);
			if (ret && last)
				break;  /* the run so far; the error comes again next call */
			if (ret)
				return ret;
			continue;
		}
		g = &v[it->batch_i];
		if (last && g->start != last)
			break;
		it->batch_i++;
		if (!pimg_page_stored(&it->r, scan_entry(g->categories))) {
			if (last)
				break;
			continue;
		}
		if (!last)
			first = g->start;
		last = g->end;
	}
	if (!last)
		return 0;
	*addr = first;
	*npages = (last - first) / PIMG_PAGE_SIZE;
	return 1;
}

/* The pagemap entry of page a (a >= it->next); 0 with *ret set on error. */
static uint64_t entry(struct pimg_runs *it, uint64_t a, int *ret)
{
	uint64_t idx;

	if (it->batch_n == 0 || a < it->batch_addr ||
	    a >= it->batch_addr + it->batch_n * PIMG_PAGE_SIZE) {
		uint64_t n = (it->end - a) / PIMG_PAGE_SIZE;
		long got;

		if (n > it->cap)
			n = it->cap;
		got = sys4(__NR_pread64, it->pagemap_fd, (long)it->buf, (long)(n * 8),
			   (long)(a / PIMG_PAGE_SIZE * 8));
		if (got != (long)(n * 8)) {
			*ret = got < 0 ? (int)got : -EIO;
			it->batch_n = 0;
			return 0;
		}
		it->batch_addr = a;
		it->batch_n = n;
	}
	idx = (a - it->batch_addr) / PIMG_PAGE_SIZE;
	return it->buf[idx];
}

int pimg_runs_next(struct pimg_runs *it, uint64_t *addr, uint64_t *npages)
{
	uint64_t a, first = 0;
	int ret = 0, in_run = 0;
	int scanned = it->scan && it->batch_i < it->batch_n;   /* ranges not used yet */

	if ((it->next >= it->end && !scanned) || it->how == PIMG_PAGES_NONE) {
		it->next = it->end;
		return 0;
	}
	if (it->how == PIMG_PAGES_ALL) {
		*addr = it->next;
		*npages = (it->end - it->next) / PIMG_PAGE_SIZE;
		it->next = it->end;
		return 1;
	}
	if (!it->cap)
		return -EINVAL;
	if (it->scan) {
		ret = scan_next(it, addr, npages);
		if (ret != -ENOTTY && ret != -EINVAL)
			return ret;
		it->scan = 0;   /* an older kernel: read from where the walk stopped */
		it->batch_n = 0;
	}
	for (a = it->next; a < it->end; a += PIMG_PAGE_SIZE) {
		int stored = pimg_page_stored(&it->r, entry(it, a, &ret));

		if (ret)
			return ret;
		if (stored && !in_run) {
			first = a;
			in_run = 1;
		} else if (!stored && in_run) {
			break;
		}
	}
	it->next = a;
	if (!in_run)
		return 0;
	*addr = first;
	*npages = (a - first) / PIMG_PAGE_SIZE;
	return 1;
}
