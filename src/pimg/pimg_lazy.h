/* pimg_lazy.h - lazy restore: a restored address space runs before its large
 * runs of pages are in; a thread brings them in from the image, the pages
 * some thread touches first (docs/transparent.md and docs/split.md, "Lazy
 * restore"). The split process's lower half serves its own upper half
 * (src/split/lower/lh_lazy.c); `stasis restart` serves a restored single process
 * or tree from outside (src/proc/restore.c), with the userfaultfd the
 * restorer made.
 *
 * Unlike the rest of pimg/ this is ordinary threaded C with libc: it runs
 * in a normal process, never in the agent or the restorer.
 */
#ifndef STASIS_PIMG_LAZY_H
#define STASIS_PIMG_LAZY_H

#include <stdint.h>

struct img_reader;
struct pimg_lazy;
struct pimg_rec_region;

/* The one rule for what a lazy restore serves, in both restores: every
 * stored run of a private anonymous read-write region (not the main
 * thread's [stack]) with at least PIMG_LAZY_MIN bytes stored (stored: the
 * region's runs together). Everything else is read before the program
 * runs. 1 or 0. */
#define PIMG_LAZY_MIN (1ul << 20)
int pimg_lazy_region(const struct pimg_rec_region *r, uint64_t stored);

/* A run of pages, mapped and empty (private anonymous, read-write) in the
 * address space, whose bytes are off.. of the image's section. */
struct pimg_lazy_piece {
	uint64_t addr, npages;
	uint64_t off;               /* page aligned */
	uint32_t section;
	uint32_t pad;
};

struct pimg_lazy_stats {
	uint64_t bytes;             /* copied in */
	uint64_t served;            /* touched pages served before their turn */
	double seconds;             /* from start to the last page */
};

/* What the owner does; both run on the lazy restore's thread. */
struct pimg_lazy_ops {
	/* A page cannot be brought in (the image unreadable, a copy refused):
	 * what, one phrase. May not return; when it does the thread ends with
	 * the missing pages never served. */
	void (*fatal)(void *arg, const char *what);
	/* Every page settled and the descriptors closed (may be NULL). */
	void (*done)(void *arg, const struct pimg_lazy_stats *st);
};

/* Serve v[0..n) of the address space of userfaultfd uffd (made by that
 * address space's process, not yet through UFFDIO_API) from img, on a
 * thread started with the caller's signal mask. go: read the pieces in
 * order at once; else only touched pages until pimg_lazy_go. 0 with *out,
 * uffd and img are the lazy restore's (img closed when done); or -errno
 * with err_msg() (UFFDIO_API refused, ...), uffd closed and img the
 * caller's still. */
int pimg_lazy_start(int uffd, struct img_reader *img, const struct pimg_lazy_piece *v, unsigned n,
		    int go, const struct pimg_lazy_ops *ops, void *arg, struct pimg_lazy **out);
/* Start reading the pieces in order. */
void pimg_lazy_go(struct pimg_lazy *z);
/* Wait until every page is in (or let go of by the program), then free
 * *z and set it to NULL. */
void pimg_lazy_wait(struct pimg_lazy **z);

#endif
