/* pimg.h - the process-image core: what the single-process checkpointer
 * (src/proc: the agent inside the program, the restorer) and the split
 * process (src/split: the lower half saving its upper half) share about a
 * process's memory (docs/format.md, "Process memory in images").
 *
 * One reader of /proc/self/maps, one classification of its lines into region
 * kinds, and one rule for which pages of a region an image stores, applied
 * run by run over /proc/self/pagemap. Everything here is libc-free and
 * async-signal-safe: raw system calls, no allocation, no locks, every buffer
 * the caller's. So the agent may call it while the program's threads are
 * stopped holding libc's locks, and the freestanding restorer links it too.
 * This header includes nothing but <stdint.h> and <stddef.h>.
 */
#ifndef STASIS_PIMG_H
#define STASIS_PIMG_H

#include <stddef.h>
#include <stdint.h>

#define PIMG_PAGE_SIZE 4096u

/* /proc/self/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst) */
#define PIMG_PM_PRESENT (1ull << 63)
#define PIMG_PM_SWAPPED (1ull << 62)
#define PIMG_PM_FILE    (1ull << 61)   /* a file page or shared anonymous */

/* One line of /proc/self/maps. path and line point into the text read. */
struct pimg_mapping {
	uint64_t start, end;        /* page aligned, end exclusive */
	uint64_t offset;            /* in the file */
	uint64_t ino;
	uint32_t dev_major, dev_minor;
	uint32_t prot;              /* PROT_READ | PROT_WRITE | PROT_EXEC */
	uint32_t shared;            /* 1: MAP_SHARED ('s') */
	const char *path;           /* path_len bytes, not NUL-terminated; "" when none */
	uint32_t path_len;
	uint32_t line_len;          /* the whole line, without its newline */
	const char *line;
};

/* Read /proc/self/maps into buf (cap bytes, NUL-terminated). Returns the
 * length, -ENOSPC if it did not fit (call again with more), or -errno. */
long pimg_maps_read(char *buf, size_t cap);

/* Parse the line at *cursor into m and move *cursor to the next line.
 * Returns 1, or 0 at the end of the text. */
int pimg_maps_next(const char **cursor, struct pimg_mapping *m);

/* Mappings the kernel names in brackets. */
enum pimg_special {
	PIMG_PLAIN = 0,             /* a file, anonymous memory or [anon:name] */
	PIMG_HEAP,                  /* [heap] */
	PIMG_STACK,                 /* [stack]: the main thread's */
	PIMG_VDSO,                  /* [vdso] */
	PIMG_VVAR,                  /* [vvar] */
	PIMG_VVAR_VCLOCK,           /* [vvar_vclock] (Linux >= 6.13) */
	PIMG_VSYSCALL,              /* [vsyscall] */
	PIMG_UPROBES,               /* [uprobes] */
	PIMG_OTHER,                 /* any other bracketed name */
};
enum pimg_special pimg_special(const struct pimg_mapping *m);

/* Region kinds and flags: the values of enum proc_region_kind and
 * proc_region_flag (src/proc/proc_format.h), which images store. */
enum pimg_kind {
	PIMG_ANON = 1,              /* private anonymous, [heap], [stack], deleted files */
	PIMG_FILE_PRIVATE,          /* private file mapping: the file + written pages */
	PIMG_FILE_SHARED,           /* shared file mapping: mapped from the file again */
	PIMG_SHARED_ANON,           /* shared anonymous, memfd, SysV, deleted shared file */
};
enum pimg_flag {
	PIMG_F_HEAP = 1u << 0,
	PIMG_F_STACK = 1u << 1,
	PIMG_F_DELETED = 1u << 2,   /* its file is gone or replaced: saved as memory */
	/* 1u << 3 is proc_format.h's PROC_RF_SHM_FD (restore stream only) */
	PIMG_F_SEGMENT = 1u << 4,   /* split: a shared-memory window's node segment, the
				     * file at path, file_size bytes, made again at restart */
	PIMG_F_SEG_OWNER = 1u << 5, /* split: this image holds the segment's pages */
};

/* What a mapping is, and the identity of its file when it has one. */
struct pimg_region {
	uint32_t kind;              /* enum pimg_kind */
	uint32_t flags;             /* enum pimg_flag */
	uint64_t file_size, file_mtime_ns, file_ino, file_dev;
};

/* Classify m; path is its path NUL-terminated (pimg_mapping_path). A file
 * is looked at with stat: one that is no longer the mapped inode counts as
 * deleted. A deleted shared mapping keeps the maps line's inode and device
 * (major << 32 | minor), which name its shared-memory object. Returns 0,
 * PIMG_SKIP for the kernel's mappings ([vdso], [vvar], [vvar_vclock],
 * [vsyscall], [uprobes]), -EINVAL for another name that is not a path, or
 * -ENODEV for a mapped file that is not a regular file. */
#define PIMG_SKIP 1
int pimg_classify(const struct pimg_mapping *m, const char *path, struct pimg_region *r);

/* The region record an image stores for m classified as r (pimg_format.h):
 * start, end, protection, kind, flags, the file offset and the file's
 * identity as r has them, path_len for path (NUL-terminated, NUL counted)
 * and no stored pages yet; the rest zero. Both kinds of image make their
 * records here. */
struct pimg_rec_region;
void pimg_region_record(const struct pimg_mapping *m, const struct pimg_region *r,
			const char *path, struct pimg_rec_region *rec);

/* m's path, NUL-terminated, into buf (truncated to cap - 1 bytes).
 * Returns its length. */
size_t pimg_mapping_path(const struct pimg_mapping *m, char *buf, size_t cap);

/* The one page-storing rule: which pages of a region go into an image.
 *   PIMG_FILE_SHARED                 none: the file holds them
 *   PIMG_SHARED_ANON, PIMG_F_DELETED all: a page this process never touched
 *                                    may hold another process's data, or
 *                                    the only copy of a deleted file's
 *   PIMG_FILE_PRIVATE                written pages: swapped, or present and
 *                                    not the file's
 *   PIMG_ANON                        present or swapped pages */
enum pimg_pages {
	PIMG_PAGES_NONE,
	PIMG_PAGES_ALL,
	PIMG_PAGES_PAGEMAP,         /* page by page, by pimg_page_stored */
};
enum pimg_pages pimg_pages(const struct pimg_region *r);
int pimg_page_stored(const struct pimg_region *r, uint64_t pagemap_entry);

/* The runs of stored pages of one region, in address order: set up with
 * pimg_runs_init, then pimg_runs_next until it returns 0. buf (cap
 * entries) is the caller's scratch for pagemap reads; pagemap_fd is an open
 * /proc/self/pagemap (unused when the rule needs no pagemap).
 *
 * The runs are found with the PAGEMAP_SCAN ioctl (Linux >= 6.7), which
 * reports only the ranges of present or swapped pages, so an empty
 * reservation costs nothing; where the kernel refuses it (ENOTTY, EINVAL),
 * or cap is under 3 entries (one range), by reading the pagemap entries.
 * Both give the same runs: each range's categories become the entry bits
 * pimg_page_stored reads. scan is 1 after init when cap holds a range; a
 * test sets it to 0 to force the reads, and the iterator does when the
 * kernel refuses. */
struct pimg_runs {
	struct pimg_region r;
	uint64_t next, end;         /* the pages not yet looked at */
	int pagemap_fd;
	int scan;                   /* 1: PAGEMAP_SCAN, 0: pagemap reads */
	enum pimg_pages how;
	uint64_t *buf;
	size_t cap;
	uint64_t batch_addr;        /* reads: buf holds batch_n entries from here */
	size_t batch_n;             /* scan: buf holds batch_n ranges... */
	size_t batch_i;             /* ...of which batch_i are used */
};
void pimg_runs_init(struct pimg_runs *it, const struct pimg_region *r, uint64_t start,
		    uint64_t end, int pagemap_fd, uint64_t *buf, size_t cap);
/* The next run: 1 with *addr and *npages, 0 when there is none, -errno if
 * the pagemap cannot be read. */
int pimg_runs_next(struct pimg_runs *it, uint64_t *addr, uint64_t *npages);

#endif
