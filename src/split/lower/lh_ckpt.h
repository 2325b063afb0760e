/* lh_ckpt.h - checkpoint and restart of the upper half, in the lower half
 * (internal; docs/split.md, split_format.h).
 *
 * lh_agent.c: the rank's checkpoint thread (lower libc, never stopped),
 * registered with the job's coordinator over TCP; it parks the upper
 * half's threads with a signal whose handler runs without TLS, writes the
 * rank's image into the store, and resumes or ends the rank.
 * lh_image.c: the upper half's memory to an image and back.
 */
#ifndef STS_LH_CKPT_H
#define STS_LH_CKPT_H

#include <stdint.h>

#include "lh_fds.h"
#include "split_format.h"

struct img_writer;
struct img_reader;

#define LH_MAX_THREADS 64
#define LH_CKPT_SIGNAL 62       /* the process checkpointer's signal (proc_format.h) */

/* What the parked upper half left for the image. Its threads are the
 * image's own records (pimg_format.h): tid, flags (MAIN), fs_base,
 * sigframe, robust list and sigpending are what the split process sets. */
struct lh_ckpt_state {
	struct pimg_rec_thread threads[LH_MAX_THREADS];
	unsigned nthreads;
	uint64_t vdso;
	uint32_t tid_offset;
	uint32_t restarts;
	uint64_t shared_pending;       /* signals pending for the process */
};

struct lh_dump_info {
	unsigned regions;
	uint64_t pages;
};

struct lh_restored {
	struct pimg_rec_thread threads[LH_MAX_THREADS];
	unsigned nthreads;
	/* signal n at n - 1: the upper half's own handlers, the others zero */
	struct pimg_rec_sigaction sigs[PIMG_NSIG];
	uint64_t uh_callbacks, vdso, bytes;
	uint32_t tid_offset, restarts;
	uint64_t shared_pending;
	unsigned regions;
	struct proc_fd_entry *fds;   /* the program's descriptors (lh_fds.h) */
	size_t nfds;
	void *written;               /* the files it wrote and closed (lh_written.h) */
	size_t written_len;
};

/* The upper half's sections of a rank's image (lh_image.c). */
int lh_dump(struct img_writer *w, const struct lh_ckpt_state *st, struct lh_dump_info *info);
/* Map and fill the upper half from the image at path, which must be rank's
 * of size; *out tells how to enter it again. Needs neither MPI nor the
 * table (it runs while MPI initializes). Dies on nothing: returns a
 * negative errno and err_msg(). */
int lh_restore(const char *path, int rank, int size, struct lh_restored *out);

/* A moved rank's old process that must stay until the job's end
 * (lh_spare_may_leave() is 0): every mapping of the upper half's range
 * unmapped but those holding an address of keep[n] (the threads' stacks,
 * which their parked frames run on), and the upper half's signal handlers
 * set back to their defaults. *freed gets the bytes unmapped, *kept those
 * left (virtual sizes). */
void lh_image_release(const uint64_t *keep, int n, uint64_t *freed, uint64_t *kept);

/* Lazy restore (lh_lazy.c): pieces of the upper half, mapped and empty,
 * filled from their memory sections of img by a thread of the lower half,
 * the pages the rank touches first. 0, and img is the lazy restore's
 * (closed when done); or -errno with err_msg() (no userfaultfd for this
 * user, ...) and nothing changed. */
struct lh_lazy_piece {
	uint64_t addr, npages, off;   /* off: the bytes' offset in section sec */
	unsigned sec;
};
int lh_lazy_start(struct img_reader *img, int rank, const struct lh_lazy_piece *v, unsigned n);
/* Start reading the pieces in order; until then only the pages touched
 * are read (the rank's restart has the CPUs). */
void lh_lazy_go(void);
/* Wait until every page of the pieces is in (or let go of by the program). */
void lh_lazy_wait(void);

/* Register with the job's coordinator when the rank runs under `stasis run`
 * or `stasis restart` (STASIS_COORD_ADDR set) and start the checkpoint
 * thread; every thread that exists now belongs to the lower half. */
void lh_agent_start(uint32_t restarts);
/* lh_agent.c: ask the job's coordinator for a checkpoint; -1 when the
 * rank has none */
int lh_agent_request(void);
/* The program ends the rank itself without MPI_Finalize (how: "exit" with
 * its status, "abort" with MPI_Abort's code): tell the node agent, so that
 * a recovery policy does not take it for a death (docs/coordinator.md) */
void lh_agent_quit(const char *how, int code);
/* The program ends (MPI_Finalize): tell the node agent, which otherwise
 * reports the rank dead when its connection closes */
void lh_agent_bye(void);
/* Enter the restored upper half where its main thread was parked. */
void lh_enter_upper(const struct lh_restored *r) __attribute__((noreturn));

#endif
