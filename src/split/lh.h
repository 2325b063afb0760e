/* lh.h - the split process's lower half (internal).
 *
 * The lower half is the program the kernel starts (stasis-lh-openmpi or
 * stasis-lh-mpich, linked with the real MPI): it initializes MPI, fills
 * the table of sts_mpi.h at STS_LH_INFO_ADDR, then loads the application
 * with its own ld.so as the upper half (lh_main.c). These functions map
 * neutral handles to the real MPI's and back (lh_handles.c).
 */
#ifndef STS_LH_H
#define STS_LH_H

#include <mpi.h>
#include <stdint.h>
#include <time.h>

#include "sts_mpi.h"

/* A handle's value as a number, whatever the ABI makes handles (pointers in
 * Open MPI's, ints in MPICH's but for MPI_File): ints as unsigned 32 bits. */
#define LH_HVAL(h) _Generic((h), int: (uint64_t)(uint32_t)(uintptr_t)(h), \
			      default: (uint64_t)(uintptr_t)(h))
#define LH_HCAST uintptr_t

extern struct sts_lh_info *lh_info;

/* the real handle of a neutral one (the real null handle for an unknown one) */
uint64_t lh_real(int kind, uint32_t n);
/* a new real handle: its neutral number (predefined ones keep theirs) */
uint32_t lh_new(int kind, uint64_t real);
/* n after a call that may have changed or freed its real handle */
uint32_t lh_update(int kind, uint32_t n, uint64_t real);
void lh_handles_init(int restored);
/* handles of the kind the program created and holds (not freed) */
unsigned lh_live(int kind);

void lh_status_out(const MPI_Status *s, struct sts_status *n);
int lh_err(int real_code);

static inline void *lh_buf(const void *p)
{
	return p == STS_IN_PLACE ? MPI_IN_PLACE : (void *)p;
}

static inline int lh_rank_in(int r)
{
	if (r >= 0)
		return r;
	return r == STS_ANY_SOURCE ? MPI_ANY_SOURCE : r == STS_PROC_NULL ? MPI_PROC_NULL :
	       r == STS_ROOT ? MPI_ROOT : r;
}

static inline int lh_rank_out(int r)
{
	if (r >= 0)
		return r;
	return r == MPI_ANY_SOURCE ? STS_ANY_SOURCE : r == MPI_PROC_NULL ? STS_PROC_NULL :
	       r == MPI_ROOT ? STS_ROOT : r;
}

static inline int lh_topo_out(int t)
{
	return t == MPI_CART ? STS_TOPO_CART : t == MPI_GRAPH ? STS_TOPO_GRAPH :
	       t == MPI_DIST_GRAPH ? STS_TOPO_DIST_GRAPH : STS_TOPO_NONE;
}

static inline uint64_t lh_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sts_gen_ops_fill(struct sts_gen_ops *ops);
void lh_hand_ops_fill(struct sts_hand_ops *ops);

/* PROT_NONE reservations over every free gap above the upper half's stack
 * while its ld.so maps the program, and their removal (lh_mem.c) */
void lh_mem_fill(void);
void lh_mem_unfill(void);

#endif
