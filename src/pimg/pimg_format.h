/* pimg_format.h - the records of a process image, written by both image
 * kinds (docs/format.md, "Process records").
 *
 * A process image (src/proc: one program) and a split image (src/split:
 * one rank's upper half) hold the same "process" section, the table of
 * contents of a process:
 *
 *   struct pimg_rec_header
 *   cwd_len bytes: the cwd and the executable, each NUL-terminated
 *   struct pimg_rec_sigaction[PIMG_NSIG]     signal n at index n - 1
 *   struct pimg_rec_thread[nthreads]
 *   per region: struct pimg_rec_region, its path (path_len bytes, NUL
 *               included), uint64_t nruns, struct pimg_rec_run[nruns]
 *
 * Pending signals are in the header (the process's) and in each thread
 * record (the thread's). A split image adds one "split" section
 * (src/split/split_format.h) for what only a split process has.
 *
 * The agent streams the same records to the coordinator, and the
 * coordinator to the freestanding restorer (proc_format.h), so this header
 * holds only fixed-size little-endian integer records; it includes nothing
 * but pimg.h (<stdint.h>, <stddef.h>).
 */
#ifndef STASIS_PIMG_FORMAT_H
#define STASIS_PIMG_FORMAT_H

#include "pimg.h"

/* The records' version, struct pimg_rec_header's first field:
 * 2: the nice value in the header, descriptors of origin (proc_format.h);
 * 3: as 2 (the process image's agent protocol moved to 3 alone).
 * A reader takes 2 and 3. */
#define PIMG_FORMAT_VERSION 3
#define PIMG_FORMAT_OLDEST  2

#define PIMG_NSIG 64

/* The kernel's struct sigaction on x86-64 (rt_sigaction with an 8-byte
 * mask). A split image stores only the upper half's own handlers: the
 * others are all zero. */
struct pimg_rec_sigaction {
	uint64_t handler;
	uint64_t flags;
	uint64_t restorer;
	uint64_t mask;
};

enum pimg_thread_flag {
	PIMG_THREAD_MAIN = 1u << 0,   /* tid == pid */
	PIMG_THREAD_AGENT = 1u << 1,  /* the agent's checkpoint thread (process images) */
};

struct pimg_rec_thread {
	int32_t tid;
	uint32_t flags;             /* enum pimg_thread_flag */
	uint64_t fs_base, gs_base;
	uint64_t sigframe;          /* address of the saved ucontext: rsp for rt_sigreturn */
	uint64_t rseq_addr;         /* 0: none registered */
	uint32_t rseq_len, rseq_sig;
	uint64_t robust_head, robust_len;
	uint64_t clear_child_tid;
	char comm[16];              /* thread name (PR_GET_NAME) */
	uint64_t sigpending;        /* signals pending for this thread (bit n-1: signal n) */
	uint64_t uc_size;           /* bytes of ucontext + xsave area in the thread's own
				     * section (process images); 0: only on its stack */
};

/* Region kinds are enum pimg_kind, flags enum pimg_flag (pimg.h). */
struct pimg_rec_region {
	uint64_t start, end;        /* page aligned */
	uint64_t file_offset;
	uint32_t prot;              /* PROT_* */
	uint32_t kind;              /* enum pimg_kind */
	uint32_t flags;             /* enum pimg_flag */
	uint32_t path_len;          /* bytes of path following the record, with its NUL */
	uint64_t stored_pages;      /* pages whose contents are in the image */
	/* identity of the mapped file at checkpoint time (file kinds); a
	 * window segment (PIMG_F_SEGMENT): file_size is its length */
	uint64_t file_size, file_mtime_ns, file_ino, file_dev;
};

/* A run of stored pages. */
struct pimg_rec_run {
	uint64_t addr;              /* first page */
	uint64_t npages;
};

struct pimg_rec_header {
	uint32_t version;           /* PIMG_FORMAT_VERSION */
	int32_t pid;
	uint32_t nthreads;
	uint32_t nregions;
	/* the mm fields PR_SET_MM_MAP takes (from /proc/self/stat); 0 in a
	 * split image, whose upper half shares the lower half's mm */
	uint64_t start_code, end_code, start_data, end_data;
	uint64_t start_brk, brk, start_stack;
	uint64_t arg_start, arg_end, env_start, env_end;
	/* kernel-provided mappings, moved back where the program expects
	 * them; a split image: vdso_start alone, the upper half's */
	uint64_t vvar_start, vvar_end, vclock_start, vclock_end, vdso_start, vdso_end;
	uint64_t state_addr;        /* struct proc_agent_state (process images) */
	uint32_t umask;
	uint32_t cwd_len;           /* bytes following the record: the cwd and the
				 * executable (/proc/self/exe), each NUL-terminated */
	/* ITIMER_REAL, _VIRTUAL, _PROF: interval and remaining value, microseconds */
	uint64_t itimer[3][2];
	uint64_t shared_pending;    /* signals pending for the process */
	uint64_t rlimit[16][2];     /* RLIMIT_*: soft, hard */
	uint32_t personality;
	uint32_t nrlimits;          /* how many of rlimit are meaningful */
	uint64_t auxv[64];          /* /proc/self/auxv as it was (auxv_len bytes) */
	uint32_t auxv_len;
	int32_t nice;               /* the main thread's nice value (0 in version 1) */
};

#endif
