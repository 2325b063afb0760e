/* lh_image.c - the upper half to an image and back (split_format.h).
 *
 * Checkpoint: the rank's lower half writes every mapping of the upper
 * half's range, with the pages that are not the file's (pagemap), the
 * parked threads and the upper half's signal handlers, as the process
 * records of any process image (pimg_format.h), and what only a rank has
 * in the split section. An image of split format 4 or 5 is converted to
 * those records as it is read (split_convert.c). Restart: a fresh
 * lower half, MPI initialized, maps them back at their addresses
 * (MAP_FIXED_NOREPLACE: a collision is refused, naming both), fills them
 * and returns what the jump back into the upper half needs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/err.h"
#include "image/image.h"
#include "lh.h"
#include "pimg/pimg.h"
#include "pimg/pimg_lazy.h"
#include "pimg/pimg_mem.h"
#include "lh_ckpt.h"
#include "lh_ledger.h"
#include "lh_written.h"
#include "split_format.h"

#define PAGE 4096ul

struct kact {                      /* the kernel's struct sigaction */
	uint64_t handler, flags, restorer, mask;
};

struct region {
	struct pimg_rec_region r;
	char path[PATH_MAX];
	struct pimg_rec_run *runs;
	uint64_t nruns;
};

struct layout {
	struct region *v;
	unsigned n, cap;
	uint64_t pages;
};

static void layout_free(struct layout *l)
{
	for (unsigned i = 0; i < l->n; i++)
		free(l->v[i].runs);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static char *read_maps(void)
{
	size_t cap = 1 << 16;

	for (;;) {
		char *buf = malloc(cap);
		long n = buf ? pimg_maps_read(buf, cap) : -ENOMEM;

		if (n >= 0)
			return buf;
		free(buf);
		if (n != -ENOSPC)
			return NULL;
		cap *= 4;
	}
}

/* The runs of pages of r whose contents go into the image (pimg.h's rule). */
static int region_runs(int pm_fd, struct region *g, const struct pimg_region *pr)
{
	uint64_t batch[4096], addr, npages;
	struct pimg_runs it;
	unsigned cap = 0;
	int ret;

	pimg_runs_init(&it, pr, g->r.start, g->r.end, pm_fd, batch, 4096);
	while ((ret = pimg_runs_next(&it, &addr, &npages)) == 1) {
		if (g->nruns == cap) {
			struct pimg_rec_run *v = realloc(g->runs, (cap ? cap * 2 : 16) * sizeof(*v));

			if (!v)
				return err_set(-ENOMEM, "out of memory");
			g->runs = v;
			cap = cap ? cap * 2 : 16;
		}
		g->runs[g->nruns++] = (struct pimg_rec_run){ addr, npages };
		g->r.stored_pages += npages;
	}
	if (ret)
		return err_set(-EIO, "cannot read /proc/self/pagemap at %#lx", (unsigned long)it.next);
	return 0;
}

static int holds(const struct pimg_mapping *m, const uint64_t *keep, int n)
{
	for (int i = 0; i < n; i++)
		if (keep[i] >= m->start && keep[i] < m->end)
			return 1;
	return 0;
}

void lh_image_release(const uint64_t *keep, int n, uint64_t *freed, uint64_t *kept)
{
	char *maps = read_maps();
	const char *c = maps;
	struct pimg_mapping m;

	*freed = *kept = 0;
	/* a handler of the program's would run code unmapped below: the
	 * signal's default instead (the process ends, as the program's
	 * would have made it) */
	for (int s = 1; s <= PIMG_NSIG; s++) {
		struct kact k, dfl = { 0 };

		if (s != SIGKILL && s != SIGSTOP && syscall(SYS_rt_sigaction, s, NULL, &k, 8) == 0 &&
		    k.handler >= SPLIT_SAVED_LO && k.handler < STS_UPPER_HI)
			syscall(SYS_rt_sigaction, s, &dfl, NULL, 8);
	}
	/* maps was read whole before the first munmap: what it lists stays
	 * true of every other line */
	while (maps && pimg_maps_next(&c, &m)) {
		if (m.start < SPLIT_SAVED_LO || m.start >= STS_UPPER_HI)
			continue;
		if (m.end > STS_UPPER_HI)
			m.end = STS_UPPER_HI;
		if (holds(&m, keep, n))
			*kept += m.end - m.start;
		else if (munmap((void *)(uintptr_t)m.start, m.end - m.start) == 0)
			*freed += m.end - m.start;
	}
	free(maps);
}

/* Every mapping of the upper half's range, with its stored runs. */
static int scan(struct layout *l)
{
	char *maps = read_maps();
	const char *c = maps;
	int pm_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC), ret = 0;
	struct pimg_mapping m;

	if (!maps || pm_fd < 0) {
		free(maps);
		if (pm_fd >= 0)
			close(pm_fd);
		return err_set(-EIO, "cannot read /proc/self/maps or pagemap");
	}
	while (!ret && pimg_maps_next(&c, &m)) {
		struct pimg_region pr;
		struct region *g;
		const char *seg_name = NULL;
		uint64_t seg_off = 0, seg_len = 0;
		int seg, owner = 0;

		if (m.start < SPLIT_SAVED_LO || m.start >= STS_UPPER_HI)
			continue;
		if (m.end > STS_UPPER_HI)
			m.end = STS_UPPER_HI;
		if (l->n == l->cap) {
			struct region *v = realloc(l->v, (l->cap ? l->cap * 2 : 64) * sizeof(*v));

			if (!v) {
				ret = err_set(-ENOMEM, "out of memory");
				break;
			}
			l->v = v;
			l->cap = l->cap ? l->cap * 2 : 64;
		}
		g = &l->v[l->n];
		memset(g, 0, sizeof(*g));
		pimg_mapping_path(&m, g->path, sizeof(g->path));
		ret = pimg_classify(&m, g->path, &pr);
		if (ret == PIMG_SKIP) {
			ret = 0;
			continue;
		}
		if (ret) {
			ret = err_set(-ENOTSUP, "rank %d: the upper half maps %s at %#lx: not a regular file",
				      lh_info->world_rank, g->path, (unsigned long)m.start);
			break;
		}
		seg = m.shared ? lh_win_segment(m.start, m.end, &seg_name, &seg_off, &seg_len,
						&owner) : 0;
		if (seg) {
			/* a shared-memory window's segment (lh_win.c): its
			 * owner's image holds every page, the others' none */
			pr.kind = owner ? PIMG_SHARED_ANON : PIMG_FILE_SHARED;
			snprintf(g->path, sizeof(g->path), "%s", seg_name);
		} else if (pr.kind == PIMG_SHARED_ANON && m.ino != 0) {
			ret = err_set(-ENOTSUP, "rank %d: the upper half maps %s shared at %#lx: memfd, "
				      "SysV and deleted shared files are not supported by the split "
				      "process yet", lh_info->world_rank, g->path, (unsigned long)m.start);
			break;
		}
		l->n++;
		pimg_region_record(&m, &pr, g->path, &g->r);
		if (seg) {
			/* the segment's place in its file, not the mapped file's */
			g->r.flags |= PIMG_F_SEGMENT | (owner ? PIMG_F_SEG_OWNER : 0);
			g->r.file_offset = seg_off;
			g->r.file_size = seg_len;
			g->r.file_mtime_ns = g->r.file_ino = g->r.file_dev = 0;
		}
		ret = region_runs(pm_fd, g, &pr);
		l->pages += g->r.stored_pages;
	}
	close(pm_fd);
	free(maps);
	return ret;
}

/* Every object the upper ld.so loaded lies in the range: a library mapped
 * outside it (by a path that escaped the arena) would be left out of the
 * image without a word. Its dynamic section is the address checked. */
static int check_objects(uint64_t vdso)
{
	const struct r_debug *r = lh_info->uh ? lh_info->uh->r_debug : NULL;
	unsigned n = 0;

	if (!r)
		return 0;
	for (const struct link_map *m = r->r_map; m && n < 100000; m = m->l_next, n++) {
		uint64_t ld = (uint64_t)(uintptr_t)m->l_ld;

		if (!ld || (ld >= SPLIT_SAVED_LO && ld < STS_UPPER_HI) ||
		    (ld >= vdso && ld < vdso + (64 << 10)))
			continue;
		return err_set(-ENOTSUP, "rank %d: the upper half's %s lies at %#lx, outside its "
			       "range: it would not be saved", lh_info->world_rank, m->l_name && *m->l_name ? m->l_name : "program",
			       (unsigned long)ld);
	}
	return 0;
}

static int put(struct img_writer *w, const void *p, size_t n)
{
	return img_write(w, p, n);
}

/* Whether [x - 64 KiB, x + 64 KiB) meets region g */
static int near(const struct region *g, uint64_t x)
{
	return x && x < g->r.end + (64 << 10) && x + (64 << 10) > g->r.start;
}

/* Whether region g holds what a parked thread may still write while the
 * image is written: its stack below the signal frame it waits in, its
 * TLS and thread block around its FS base (errno; the rseq area and the
 * robust list the kernel writes). Every other page of the upper half
 * stays as it is until the program resumes. */
static int region_live(const struct region *g, const struct lh_ckpt_state *st)
{
	for (unsigned i = 0; i < st->nthreads; i++)
		if (near(g, st->threads[i].sigframe) || near(g, st->threads[i].fs_base) ||
		    near(g, st->threads[i].rseq_addr) || near(g, st->threads[i].robust_head))
			return 1;
	return 0;
}

/* Whether pages of the process are lazily freed (MADV_FREE, as jemalloc
 * frees memory): the kernel drops such a page under memory pressure at
 * any time, and it reads as zeros from then on. Written from the upper
 * half itself, a chunk would then no longer match the CRC its worker
 * computed (the image refused at restart: a stand-alone img_write_stable
 * over MADV_FREE'd pages paged out from its sink failed img_verify, "payload
 * checksum mismatch"), so every region is copied then, as any a parked
 * thread writes. Unknown (no smaps_rollup): copied too. */
static int lazily_freed(void)
{
	char buf[4096];
	int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	const char *p;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 1;
	buf[n] = 0;
	p = strstr(buf, "\nLazyFree:");
	return !p || strtoull(p + strlen("\nLazyFree:"), NULL, 10) != 0;
}

/* The stored pages of region g, into its open memory section: written
 * from the stopped upper half itself, with no copy, but for a region a
 * parked thread still writes (copied: a chunk's CRC must be that of the
 * bytes written). Unreadable ones (PROT_NONE with pages) through
 * /proc/self/mem: *mem_fd and *bounce are opened and allocated on first
 * need, the caller's to free. */
static int put_runs(struct img_writer *w, const struct region *g, const struct lh_ckpt_state *st,
		    int copy, int *mem_fd, char **bounce)
{
	int ret = 0, live = copy || region_live(g, st);

	for (unsigned j = 0; !ret && j < g->nruns; j++) {
		uint64_t a = g->runs[j].addr, len = g->runs[j].npages * PAGE;

		if (g->r.prot & PROT_READ) {
			ret = live ? put(w, (const void *)(uintptr_t)a, len) :
			      img_write_stable(w, (const void *)(uintptr_t)a, len);
			continue;
		}
		if (*mem_fd < 0)
			*mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
		if (!*bounce)
			*bounce = malloc(1 << 20);
		if (*mem_fd < 0 || !*bounce)
			return err_set(-EIO, "cannot read the upper half's unreadable pages");
		for (uint64_t o = 0; !ret && o < len; o += 1 << 20) {
			size_t n = len - o < (1 << 20) ? len - o : (1 << 20);

			if (pread(*mem_fd, *bounce, n, (off_t)(a + o)) != (ssize_t)n)
				ret = err_set(-EIO, "cannot read %#lx through /proc/self/mem",
					      (unsigned long)(a + o));
			else
				ret = put(w, *bounce, n);
		}
	}
	return ret;
}

/* The "process" section: the process records of the upper half. */
static int write_process(struct img_writer *w, const struct lh_ckpt_state *st,
			 const struct layout *l)
{
	struct pimg_rec_header h = { 0 };
	struct pimg_rec_sigaction sa[PIMG_NSIG];
	char cwd[PATH_MAX + 1] = "";
	int ret;

	memset(sa, 0, sizeof(sa));
	for (int s = 1; s <= PIMG_NSIG; s++) {
		struct kact k;

		if (s == SIGKILL || s == SIGSTOP || syscall(SYS_rt_sigaction, s, NULL, &k, 8) != 0)
			continue;
		/* the upper half's own handlers; the lower half's stay its own */
		if (k.handler >= SPLIT_SAVED_LO && k.handler < STS_UPPER_HI)
			sa[s - 1] = (struct pimg_rec_sigaction){ k.handler, k.flags, k.restorer, k.mask };
	}
	if (!getcwd(cwd, PATH_MAX))
		cwd[0] = 0;
	h.version = PIMG_FORMAT_VERSION;
	h.pid = (int32_t)getpid();
	h.nthreads = st->nthreads;
	h.nregions = l->n;
	h.vdso_start = st->vdso;
	h.shared_pending = st->shared_pending;
	/* the cwd, and no executable: the lower half is the process's */
	h.cwd_len = (uint32_t)strlen(cwd) + 2;
	ret = img_section_begin(w, "process", "process");
	ret = ret ? ret : img_section_attr_u64(w, "pid", (uint64_t)h.pid);
	ret = ret ? ret : img_section_attr_u64(w, "format", PIMG_FORMAT_VERSION);
	ret = ret ? ret : put(w, &h, sizeof(h));
	ret = ret ? ret : put(w, cwd, h.cwd_len - 1);
	ret = ret ? ret : put(w, "", 1);
	ret = ret ? ret : put(w, sa, sizeof(sa));
	ret = ret ? ret : put(w, st->threads, st->nthreads * sizeof(*st->threads));
	for (unsigned i = 0; !ret && i < l->n; i++) {
		ret = put(w, &l->v[i].r, sizeof(l->v[i].r));
		ret = ret ? ret : put(w, l->v[i].path, l->v[i].r.path_len);
		ret = ret ? ret : put(w, &l->v[i].nruns, sizeof(l->v[i].nruns));
		ret = ret ? ret : put(w, l->v[i].runs, l->v[i].nruns * sizeof(struct pimg_rec_run));
	}
	return ret ? ret : img_section_end(w);
}

/* A rank whose program has child processes (running or not yet reaped) is
 * refused: the children are not in the image, so after a restart the
 * program would wait for processes that no longer exist. */
static int check_children(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int ret = 0;

	if (!d)
		return 0;   /* no /proc: nothing to say (the fds' dump needs it anyway) */
	while (!ret && (e = readdir(d))) {
		char path[64], buf[64];
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%.16s/children", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		buf[strcspn(buf, " \n")] = 0;
		ret = err_set(-ENOTSUP, "rank %d: the program has a child process (pid %s): the "
			      "split process does not checkpoint process trees",
			      lh_info->world_rank, buf);
	}
	closedir(d);
	return ret;
}

int lh_dump(struct img_writer *w, const struct lh_ckpt_state *st, struct lh_dump_info *info)
{
	struct layout l = { 0 };
	struct split_info si = { 0 };
	int ret, mem_fd = -1;
	char *bounce = NULL;
	int copy;

	lh_lazy_wait();   /* the pagemap shows only pages that are in */
	ret = lh_brk_check();
	ret = ret ? ret : check_objects(st->vdso);
	ret = ret ? ret : check_children();
	ret = ret ? ret : scan(&l);
	si.version = SPLIT_FORMAT_VERSION;
	si.rank = lh_info->world_rank;
	si.size = lh_info->world_size;
	si.uh_callbacks = (uint64_t)(uintptr_t)lh_info->uh;
	si.tid_offset = st->tid_offset;
	si.restarts = st->restarts;
	ret = ret ? ret : write_process(w, st, &l);
	ret = ret ? ret : img_section_begin(w, "split", "split");
	ret = ret ? ret : put(w, &si, sizeof(si));
	ret = ret ? ret : img_section_end(w);
	copy = lazily_freed();
	for (unsigned i = 0; !ret && i < l.n; i++) {
		const struct region *g = &l.v[i];

		ret = pimg_mem_begin(w, &g->r, g->path);
		ret = ret ? ret : put_runs(w, g, st, copy, &mem_fd, &bounce);
		ret = ret ? ret : img_section_end(w);
	}
	ret = ret ? ret : lh_fds_dump(w, NULL);
	ret = ret ? ret : lh_written_dump(w);
	if (info) {
		info->regions = l.n;
		info->pages = l.pages;
	}
	if (mem_fd >= 0)
		close(mem_fd);
	free(bounce);
	layout_free(&l);
	return ret;
}

/* What occupies [a, b) now, for the collision message. */
static void occupant(uint64_t a, uint64_t b, char *out, size_t len)
{
	char *maps = read_maps();
	const char *c = maps;
	struct pimg_mapping m;

	snprintf(out, len, "another mapping");
	while (c && pimg_maps_next(&c, &m))
		if (m.start < b && m.end > a) {
			snprintf(out, len, "%.*s", (int)m.line_len, m.line);
			break;
		}
	free(maps);
}

/* A shared-memory window's segment, made again: every member of the node
 * opens (or creates) the file and maps it; the owner empties it first and
 * fills it from its image; the rebuild unlinks it once all have it
 * (lh_win.c). An fd or -errno. */
static int seg_open(const struct pimg_rec_region *r, const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	struct stat st;

	if (fd < 0)
		return err_set(-errno, "cannot make %s, a shared-memory window's memory: %s", path,
			       strerror(errno));
	/* a file left by an earlier try holds stale pages: emptied by the
	 * owner (its first region) before any member reads it */
	if (((r->flags & PIMG_F_SEG_OWNER) && r->file_offset == 0 && ftruncate(fd, 0) != 0) ||
	    fstat(fd, &st) != 0 ||
	    ((uint64_t)st.st_size < r->file_size && ftruncate(fd, (off_t)r->file_size) != 0)) {
		int e = errno;

		close(fd);
		return err_set(-e, "cannot size %s, a shared-memory window's memory: %s", path,
			       strerror(e));
	}
	return fd;
}

static int region_shared(const struct pimg_rec_region *r)
{
	return r->kind == PIMG_FILE_SHARED || r->kind == PIMG_SHARED_ANON;
}

/* Mapped from its file: a window segment is made again instead */
static int region_file(const struct pimg_rec_region *r)
{
	return (r->kind == PIMG_FILE_SHARED || r->kind == PIMG_FILE_PRIVATE) &&
	       !(r->flags & PIMG_F_SEGMENT);
}

static int map_region(const struct pimg_rec_region *r, const char *path, uint64_t nruns)
{
	int prot = r->prot | (nruns ? PROT_READ | PROT_WRITE : 0);
	int flags = MAP_FIXED_NOREPLACE | (region_shared(r) ? MAP_SHARED : MAP_PRIVATE);
	size_t len = r->end - r->start;
	void *p;
	int fd = -1;

	if (r->flags & PIMG_F_SEGMENT) {
		fd = seg_open(r, path);
		if (fd < 0)
			return fd;
	} else if (region_file(r)) {
		struct stat st;

		fd = open(path, (region_shared(r) && (r->prot & PROT_WRITE)) ? O_RDWR : O_RDONLY);
		if (fd < 0)
			return err_set(-errno, "cannot open %s, mapped by the upper half at %#lx: %s", path,
				       (unsigned long)r->start, strerror(errno));
		/* a rebuilt library under the same name would run the old code's
		 * saved state against new text: refuse it */
		if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != r->file_size ||
		    (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec !=
			    r->file_mtime_ns) {
			close(fd);
			return err_set(-ESTALE, "%s changed since the checkpoint (size or modification "
				       "time): the restart needs the files the program had mapped", path);
		}
	} else {
		flags |= MAP_ANONYMOUS | MAP_NORESERVE;   /* the ledger is a 16 GiB reservation */
	}
	p = mmap((void *)(uintptr_t)r->start, len, prot, flags, fd, fd >= 0 ? (off_t)r->file_offset : 0);
	if (fd >= 0)
		close(fd);
	if (p != (void *)(uintptr_t)r->start) {
		char who[512];
		int e = p == MAP_FAILED ? errno : EEXIST;

		if (p != MAP_FAILED)
			munmap(p, len);
		occupant(r->start, r->end, who, sizeof(who));
		return err_set(-e, "cannot map the upper half's %#lx-%#lx (%s): %s%s%s",
			       (unsigned long)r->start, (unsigned long)r->end, *path ? path : "anonymous",
			       strerror(e), e == EEXIST ? "; it holds " : "", e == EEXIST ? who : "");
	}
	return 0;
}

/* The runs pimg_lazy_region picks are read lazily (lh_lazy.c), unless
 * STASIS_RESTORE_LAZY=0. */
static int lazy_wanted(const struct pimg_rec_region *r, const unsigned char *runs, uint64_t nruns)
{
	const char *v = getenv("STASIS_RESTORE_LAZY");
	uint64_t stored = 0;

	for (uint64_t j = 0; j < nruns; j++) {
		struct pimg_rec_run run;

		memcpy(&run, runs + j * sizeof(run), sizeof(run));
		stored += run.npages * PAGE;
	}
	return !(v && !strcmp(v, "0")) && pimg_lazy_region(r, stored);
}

/* The pieces to read lazily: to the lazy restore, or read here if it cannot
 * start (no userfaultfd for this user, ...). *img is the restore's then. */
static int lazy_or_read(struct img_reader **img, int rank, const struct lh_lazy_piece *v, unsigned n)
{
	if (n == 0)
		return 0;
	if (lh_lazy_start(*img, rank, v, n) == 0) {
		*img = NULL;
		return 0;
	}
	lh_log(LOG_INFO, "rank %d: no lazy restore (%s), reading it all", rank, err_msg());
	for (unsigned i = 0; i < n; i++) {
		size_t len = v[i].npages * PAGE;

		if (img_read(*img, v[i].sec, v[i].off, (void *)(uintptr_t)v[i].addr, len) != (ssize_t)len)
			return -EBADMSG;
	}
	return 0;
}

/* Where region r's stored pages begin: *sec and *off. Split format 7 on,
 * its own memory section (pimg_mem.h), as any process image has it; 4 to
 * 6, the one "pages" section, where they follow the earlier regions'. */
static int region_pages(struct img_reader *img, uint32_t version, int pages,
			const struct pimg_rec_region *r, const char *rpath, const unsigned char *runs,
			uint64_t nruns, unsigned *sec, uint64_t *off)
{
	uint64_t bytes = 0;
	int ret;

	if (version < SPLIT_FORMAT_MEM_SECTIONS) {
		*sec = (unsigned)pages;   /* *off: where the previous region's ended */
		return 0;
	}
	for (uint64_t j = 0; j < nruns; j++) {
		struct pimg_rec_run run;

		memcpy(&run, runs + j * sizeof(run), sizeof(run));
		bytes += run.npages * PAGE;
	}
	ret = pimg_mem_find(img, r, rpath, bytes);
	if (ret < 0)
		return ret;
	*sec = (unsigned)ret;
	*off = 0;
	return 0;
}

/* The sections the restart reads: the process records and the split
 * section, converted from version 4 or 5 when the image is that old. */
static int read_records(struct img_reader *img, const char *path, unsigned char **proc,
			size_t *proc_len, struct split_info *info)
{
	void *buf = NULL, *p = NULL;
	size_t len = 0;
	uint32_t version = 0;
	int ret = img_section_load(img, "split", 1 << 20, &buf, &len);

	*proc = NULL;
	if (!ret && len >= sizeof(version))
		memcpy(&version, buf, sizeof(version));
	if (ret || len < sizeof(version)) {
		ret = err_set(-EBADMSG, "%s is not a split-process image", path);
	} else if (version < SPLIT_FORMAT_OLDEST || version > SPLIT_FORMAT_VERSION) {
		ret = err_set(-EBADMSG, "%s: split format version %u, this Stasis reads %d to %d",
			      path, version, SPLIT_FORMAT_OLDEST, SPLIT_FORMAT_VERSION);
	} else if (version < 6) {
		ret = split_convert(buf, len, &p, proc_len, info);
		if (ret)
			ret = err_set(ret, "%s: %s", path, err_msg());
	} else if (len != sizeof(*info)) {
		ret = err_set(-EBADMSG, "%s: the split section is %zu bytes", path, len);
	} else {
		memcpy(info, buf, sizeof(*info));
		ret = img_section_load(img, "process", 256u << 20, &p, proc_len);
		if (ret)
			ret = err_set(ret, "%s: %s", path, err_msg());
	}
	*proc = p;
	free(buf);
	return ret;
}

int lh_restore(const char *path, int rank, int size, struct lh_restored *out)
{
	struct img_reader *img = NULL;
	struct pimg_rec_header h;
	struct pimg_rec_sigaction sa[PIMG_NSIG];
	struct split_info info;
	struct lh_lazy_piece *lazy = NULL;
	unsigned nlazy = 0, caplazy = 0;
	unsigned char *buf = NULL;
	size_t proc_len = 0;
	const unsigned char *p, *end;
	int ret, pages;
	unsigned sec = 0;
	uint64_t off = 0;

	memset(out, 0, sizeof(*out));
	ret = img_open(path, &img);
	if (ret)
		return ret;
	pages = img_section_find(img, "pages");
	ret = read_records(img, path, &buf, &proc_len, &info);
	if (!ret && ((pages < 0 && info.version < SPLIT_FORMAT_MEM_SECTIONS) || proc_len < sizeof(h)))
		ret = err_set(-EBADMSG, "%s is not a split-process image", path);
	if (ret)
		goto out;
	memcpy(&h, buf, sizeof(h));
	if (info.rank != rank || info.size != size) {
		ret = err_set(-EINVAL, "%s is rank %d of %d, but this process is rank %d of %d", path,
			      info.rank, info.size, rank, size);
		goto out;
	}
	if (h.nthreads == 0 || h.nthreads > LH_MAX_THREADS) {
		ret = err_set(-EBADMSG, "%s: %u threads", path, h.nthreads);
		goto out;
	}
	p = buf + sizeof(h);
	end = buf + proc_len;
	if ((size_t)(end - p) < (uint64_t)h.cwd_len + sizeof(sa) +
				h.nthreads * sizeof(struct pimg_rec_thread)) {
		ret = err_set(-EBADMSG, "%s: the process section is truncated", path);
		goto out;
	}
	p += h.cwd_len;
	memcpy(sa, p, sizeof(sa));
	p += sizeof(sa);
	for (unsigned s = 0; s < PIMG_NSIG; s++)
		if (sa[s].handler >= SPLIT_SAVED_LO && sa[s].handler < STS_UPPER_HI)
			out->sigs[s] = sa[s];
	memcpy(out->threads, p, h.nthreads * sizeof(*out->threads));
	p += h.nthreads * sizeof(*out->threads);
	out->nthreads = h.nthreads;
	/* each thread's tid in its struct pthread, where glibc has it cleared
	 * when the thread ends (pimg_threads_restore): the main thread's own
	 * clear_child_tid was the lower half's */
	for (unsigned i = 0; i < h.nthreads; i++)
		out->threads[i].clear_child_tid = out->threads[i].fs_base + info.tid_offset;
	out->uh_callbacks = info.uh_callbacks;
	out->vdso = h.vdso_start;
	out->tid_offset = info.tid_offset;
	out->restarts = info.restarts;
	out->shared_pending = h.shared_pending;
	/* map and fill, region by region */
	for (unsigned i = 0; i < h.nregions; i++) {
		struct pimg_rec_region r;
		const char *rpath;
		const unsigned char *runs;
		uint64_t nruns = 0;
		int lazy_region;

		if ((size_t)(end - p) < sizeof(r) + sizeof(nruns)) {
			ret = err_set(-EBADMSG, "%s: the process section is truncated", path);
			goto out;
		}
		memcpy(&r, p, sizeof(r));
		p += sizeof(r);
		rpath = (const char *)p;
		if ((size_t)(end - p) >= (uint64_t)r.path_len + sizeof(nruns))
			memcpy(&nruns, p + r.path_len, sizeof(nruns));
		if ((size_t)(end - p) < (uint64_t)r.path_len + sizeof(nruns) ||
		    nruns > ((size_t)(end - p) - r.path_len - sizeof(nruns)) / sizeof(struct pimg_rec_run) ||
		    r.path_len == 0 || rpath[r.path_len - 1] != 0 || r.start < SPLIT_SAVED_LO ||
		    r.end > STS_UPPER_HI || r.end <= r.start) {
			ret = err_set(-EBADMSG, "%s: bad region record %u", path, i);
			goto out;
		}
		p += r.path_len + sizeof(nruns);
		runs = p;
		p += nruns * sizeof(struct pimg_rec_run);
		ret = region_pages(img, info.version, pages, &r, rpath, runs, nruns, &sec, &off);
		if (ret)
			ret = err_set(ret, "%s: %s", path, err_msg());
		ret = ret ? ret : map_region(&r, rpath, nruns);
		lazy_region = lazy_wanted(&r, runs, nruns);
		for (uint64_t j = 0; !ret && j < nruns; j++) {
			struct pimg_rec_run run;
			size_t len;

			memcpy(&run, runs + j * sizeof(run), sizeof(run));
			len = run.npages * PAGE;
			if (run.addr < r.start || run.addr + len > r.end) {
				ret = err_set(-EBADMSG, "%s: bad run in region %u", path, i);
				break;
			}
			if (lazy_region) {
				if (nlazy == caplazy) {
					unsigned cap = caplazy ? 2 * caplazy : 64;
					struct lh_lazy_piece *v = realloc(lazy, cap * sizeof(*v));

					if (!v) {
						ret = err_set(-ENOMEM, "out of memory");
						break;
					}
					lazy = v;
					caplazy = cap;
				}
				lazy[nlazy++] = (struct lh_lazy_piece){ run.addr, run.npages, off, sec };
			} else if (img_read(img, sec, off, (void *)(uintptr_t)run.addr, len) !=
			    (ssize_t)len) {
				ret = *err_msg() ? -EBADMSG
						 : err_set(-EBADMSG, "%s: the memory of region %u is short",
							   path, i);
				break;
			}
			off += len;
			out->bytes += len;
		}
		if (!ret && nruns && mprotect((void *)(uintptr_t)r.start, r.end - r.start, (int)r.prot))
			ret = err_set(-errno, "mprotect %#lx: %s", (unsigned long)r.start, strerror(errno));
		if (ret)
			goto out;
		out->regions++;
	}
	ret = lh_fds_read(img, &out->fds, &out->nfds);
	ret = ret ? ret : lh_written_read(img, &out->written, &out->written_len);
	if (ret)
		goto out;
	ret = lazy_or_read(&img, rank, lazy, nlazy);
	if (ret && !*err_msg())
		ret = err_set(-EBADMSG, "%s: the memory sections are short", path);
out:
	free(lazy);
	free(buf);
	img_close(&img);
	return ret;
}
