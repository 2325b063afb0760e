/* split_format.h - a rank's image in the split process (docs/split.md,
 * docs/format.md "Process records").
 *
 * One image per rank, <checkpoint>/rank-NNNNN.img, written by the rank's
 * lower half while the upper half is parked. It holds only the upper half:
 * the memory in [SPLIT_SAVED_LO, STS_UPPER_HI) and what the kernel keeps
 * for it outside memory (its threads' FS bases and signal frames, the
 * signal handlers it installed). It is a process image plus one split
 * section:
 *
 *   "process" (kind process) the process records (src/pimg/pimg_format.h),
 *                          as a process image has them
 *   "split" (kind split)   struct split_info: what only a rank has
 *   "mem.<start>" (kind memory) per region, its stored pages (pimg_mem.h);
 *                          versions 4 to 6: one section "pages" with those
 *                          of every run, in the order of "process"
 *   "fds" (kind fds)       the program's descriptors: uint64_t n, then per
 *                          descriptor struct proc_fd (src/proc/proc_format.h),
 *                          its path (path_len bytes, NUL included) and
 *                          data_len bytes of data (src/proc/fds.h)
 *   "written" (kind written) the regular files the program opened for
 *                          writing and had closed at the checkpoint
 *                          (lh_written.c): uint64_t n, then per file struct
 *                          split_written, its path (path_len bytes, NUL
 *                          included) and, when saved, its size bytes.
 *                          Images without it (older ones) restore none.
 *
 * Little-endian fixed-size records; the split section's version is
 * checked at restart. Version 6 moved the threads, signal handlers and
 * regions into the process records. Versions 4 and 5 held them in the
 * split section (struct split_header, split_thread, split_sigaction,
 * split_region, split_run below); split_convert() turns such a section
 * into version 6's at load (version 5 added the segment flags, SPLIT_SEGMENT
 * and SPLIT_SEG_OWNER). Meta: producer "stasis split", job, rank, size,
 * library.
 */
#ifndef STS_SPLIT_FORMAT_H
#define STS_SPLIT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "../pimg/pimg_format.h"

#define SPLIT_FORMAT_VERSION 7
#define SPLIT_FORMAT_OLDEST 4
/* From version 7 each region's stored pages are in a memory section of
 * its own (pimg_mem.h), as in any process image; 4 to 6 held them all in
 * one section "pages", in the order of the regions and runs. */
#define SPLIT_FORMAT_MEM_SECTIONS 7

/* What an image holds: every mapping in [SPLIT_SAVED_LO, STS_UPPER_HI).
 * The upper half's arena starts at STS_UPPER_LO, but a program linked
 * without PIE (Debian's python3: 0x400000) is mapped by its ld.so at its
 * link address, below; the lower half (PIE, at 0x555555554000 with
 * address randomization off, its libraries near the top) never maps
 * below STS_UPPER_LO. */
#define SPLIT_SAVED_LO 0x10000ull
#define SPLIT_IMAGE_FMT "rank-%05d.img"

/* The split section of versions 6 and 7. */
struct split_info {
	uint32_t version;           /* SPLIT_FORMAT_VERSION */
	int32_t rank, size;
	uint32_t tid_offset;        /* of the thread id in glibc's struct pthread */
	uint64_t uh_callbacks;      /* the upper half's sts_uh_callbacks (sts_lh_info.uh) */
	uint32_t restarts;          /* restarts the job went through before this image */
	uint32_t pad;
};

/* A file of the "written" section. */
struct split_written {
	uint32_t saved;             /* 1: its contents follow; 0: over file_save_max */
	uint32_t mode;              /* st_mode's permission bits */
	uint64_t size;
	uint64_t mtime_ns;
	uint32_t path_len;
	uint32_t pad;
};

/* A version 4 or 5 split section (old, len bytes) as version 6's: *process
 * (malloc'd, *process_len bytes) the process section, *info the split
 * section. 0, or -EBADMSG / -ENOMEM with err_msg(). (split_convert.c) */
int split_convert(const void *old, size_t len, void **process, size_t *process_len,
		  struct split_info *info);

struct split_thread;
/* A version 4 or 5 thread record as a process record. */
void split_thread_to_rec(const struct split_thread *t, struct pimg_rec_thread *rec);
/* A region's kind and flags (pimg.h) from a version 4 or 5 region's flags. */
void split_region_kind(uint32_t old_flags, uint32_t *kind, uint32_t *flags);

/* The records of versions 4 and 5, read only (the lower half holds the
 * parked upper half in process records, lh_ckpt.h). */

struct split_header {
	uint32_t version;
	uint32_t nthreads;
	uint32_t nregions;
	uint32_t nsigs;
	int32_t rank, size;
	uint64_t uh_callbacks;      /* the upper half's sts_uh_callbacks (sts_lh_info.uh) */
	uint64_t vdso;              /* AT_SYSINFO_EHDR the upper half was given */
	uint64_t stored_pages;
	uint32_t tid_offset;        /* of the thread id in glibc's struct pthread */
	uint32_t restarts;          /* restarts the job went through before this image */
	uint64_t shared_pending;    /* signals pending for the process (bit s-1: signal s) */
};

/* A parked upper thread. */
struct split_thread {
	uint64_t fs;                /* its FS base: the upper libc's struct pthread */
	uint64_t frame;             /* its ucontext in the signal frame on its stack */
	uint64_t robust_head, robust_len;
	int32_t tid;
	uint32_t main;              /* the process's main thread */
	uint64_t pending;           /* signals pending for this thread (bit s-1: signal s) */
};

/* A signal handler of the upper half (one whose handler lies in its range):
 * the kernel's struct sigaction as rt_sigaction takes it. */
struct split_sigaction {
	uint32_t signo;
	uint32_t pad;
	uint64_t handler, flags, restorer, mask;
};

enum split_region_flag {
	SPLIT_SHARED = 1,           /* MAP_SHARED */
	SPLIT_FILE = 2,             /* mapped from the file at path, file_offset */
	/* a shared-memory window's node segment (docs/split.md, "Shared-memory
	 * windows"): the file at path, file_size bytes, made again at restart;
	 * SPLIT_SEG_OWNER: this image holds its contents (every page), the
	 * other members' images none */
	SPLIT_SEGMENT = 4,
	SPLIT_SEG_OWNER = 8,
};

struct split_region {
	uint64_t start, end;
	uint64_t file_offset;
	uint32_t prot, flags;
	uint32_t path_len;
	uint32_t nruns;
	/* SPLIT_FILE: the file as it was (a changed library is refused) */
	uint64_t file_size, file_mtime_ns, file_ino;
};

struct split_run {
	uint64_t addr;
	uint64_t npages;
};

#endif
