/* uh.h - the upper half's stand-in MPI library (internal).
 *
 * Compiled once per MPI ABI against that ABI's mpi.h: as libmpi.so.40 for
 * programs built with Open MPI's mpicc, as libmpich.so.12 for MPICH's.
 * Every function translates the ABI's handles, ranks, buffers and
 * statuses to the neutral ones of sts_mpi.h and calls the lower half
 * through the table at STS_LH_INFO_ADDR with the FS base switched.
 */
#ifndef STS_UH_H
#define STS_UH_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "sts_mpi.h"

/* A handle's value as a number, whatever the ABI makes handles (pointers in
 * Open MPI's, ints in MPICH's but for MPI_File): ints as unsigned 32 bits. */
#define STS_HVAL(h) _Generic((h), int: (uint64_t)(uint32_t)(uintptr_t)(h), \
			      default: (uint64_t)(uintptr_t)(h))
#define STS_HCAST uintptr_t
#define STS_STATUS_IGNORED(s) ((s) == MPI_STATUS_IGNORE)

extern struct sts_lh_info *const sts_lh;

/* Run stmt in the lower half: its TLS in place, ours back after. */
#define STS_LOWER(stmt)                                          \
	do {                                                     \
		uint64_t fs_ = sts_enter();                      \
		stmt;                                            \
		sts_leave(fs_);                                  \
	} while (0)

/* the thread was in the lower half when a checkpoint began: park now */
void sts_park_pending(void);

static inline uint64_t sts_enter(void)
{
	int g = (int)sts_lh->fsgsbase;
	uint64_t fs = sts_rdfs(g);

	sts_lh->uh_fs = fs;
	sts_wrfs(g, sts_lh->lh_fs);
	return fs;
}

static inline void sts_leave(uint64_t fs)
{
	sts_wrfs((int)sts_lh->fsgsbase, fs);
	if (__builtin_expect(sts_lh->ckpt_pending, 0))
		sts_park_pending();
}

/* ABI <-> neutral (uh_abi.c) */
uint32_t sts_in(int kind, uint64_t abi_handle);
uint64_t sts_out(int kind, uint32_t neutral);
void sts_status_out(const struct sts_status *n, MPI_Status *s);
int sts_err_class_out(int neutral_class);

static inline int sts_err_out(int neutral_class)
{
	return neutral_class == 0 ? MPI_SUCCESS : sts_err_class_out(neutral_class);
}

static inline void *sts_buf_in(const void *p)
{
	return p == MPI_IN_PLACE ? STS_IN_PLACE : (void *)p;
}

static inline int sts_rank_in(int r)
{
	if (r >= 0)
		return r;
	return r == MPI_ANY_SOURCE ? STS_ANY_SOURCE : r == MPI_PROC_NULL ? STS_PROC_NULL :
	       r == MPI_ROOT ? STS_ROOT : r;
}

static inline int sts_rank_out(int r)
{
	if (r >= 0)
		return r;
	return r == STS_ANY_SOURCE ? MPI_ANY_SOURCE : r == STS_PROC_NULL ? MPI_PROC_NULL :
	       r == STS_ROOT ? MPI_ROOT : r;
}

static inline int sts_topo_out(int t)
{
	return t == STS_TOPO_CART ? MPI_CART : t == STS_TOPO_GRAPH ? MPI_GRAPH :
	       t == STS_TOPO_DIST_GRAPH ? MPI_DIST_GRAPH : MPI_UNDEFINED;
}

/* A predefined handle's name in MPI ("MPI_COMM_WORLD"), "" if none. */
const char *sts_predef_name(int kind, uint32_t neutral);

/* Before MPI_Finalize: MPI_COMM_SELF's attributes deleted (uh_attr.c). */
int sts_attr_finalize(void);

/* A function the split process does not support yet: one line naming it
 * on stderr, then the job is aborted. */
void sts_unsupported(const char *name) __attribute__((noreturn));

#endif
