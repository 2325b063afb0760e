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

#include "common/log.h"
#include "sts_mpi.h"

/* A handle's value as a number, whatever the ABI makes handles (pointers in
 * Open MPI's, ints in MPICH's but for MPI_File): ints as unsigned 32 bits. */
#define LH_HVAL(h) _Generic((h), int: (uint64_t)(uint32_t)(uintptr_t)(h), \
			      default: (uint64_t)(uintptr_t)(h))
#define LH_HCAST uintptr_t

extern struct sts_lh_info *lh_info;

/* lh_tls.c: the lower-half TLS slot of the thread now running (lh_info->
 * tls[0] below MPI_THREAD_SERIALIZED; NULL on the lower half's own
 * threads); the dormant threads that lend theirs, started after MPI_Init
 * (0, or -1 when none could be); the lock every call takes at SERIALIZED
 * and MULTIPLE, let go of for a moment by a waiting call when another
 * thread wants it; the slot a thread of the program borrows (NULL: none);
 * whether fs is a lent TLS (a thread inside MPI: no TLS used, for the
 * checkpoint signal's handler); and "park this thread when it leaves" for
 * a checkpoint's hold at a collective (the rank's every thread below
 * SERIALIZED). */
extern __thread struct sts_tls *lh_me;
int lh_tls_start(void);
void lh_onetls_setup(void);   /* split_onetls, read once (lh_tls.c) */
void lh_lock(void);
void lh_unlock(void);
void lh_tls_yield(void);
/* around a real call that blocks until the other members of a communicator
 * join it (one made, a collective on a file): the lock let go of, so the
 * rank's other threads go on (one of them may be the member another rank
 * waits for); lh_lock_out's result back to lh_lock_back */
unsigned lh_lock_out(void);
void lh_lock_back(unsigned depth);
struct sts_tls *lh_tls_of_tid(int32_t tid);
int lh_tls_lent(uint64_t fs);
void lh_hold_me(void);

/* "stasis: lower half: ..." on stderr in one write, then exit status 127
 * (lh_log.c) */
void lh_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* the same line, without exiting, when STASIS_LOG is level or more verbose
 * (LOG_INFO or LOG_DEBUG of common/log.h); lh_log_on(level) says whether
 * it would be written */
void lh_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lh_log_on(int level);

/* MPI's own signal handlers (Open MPI's and UCX's backtrace on SIGSEGV)
 * run on the lower half's TLS whichever thread they arrive on (lh_sig.c):
 * lh_sig_wrap after MPI_Init (returns how many it wrapped) */
int lh_sig_wrap(void);

/* lh_real(kind, n), the real handle of a neutral one: lh_ledger.h */
/* a new real handle: its neutral number (predefined ones keep theirs) */
uint32_t lh_new(int kind, uint64_t real);
/* the communicator (neutral), or STS_ERRH_FILE | the file, on whose error
 * handler an error of request req is raised (lh_me->err_on) */
void lh_req_raises_on(uint32_t req, uint32_t obj);
/* n after a call that may have changed or freed its real handle */
uint32_t lh_update(int kind, uint32_t n, uint64_t real);
void lh_handles_init(int restored);
/* handles of the kind the program created and holds (not freed) */
unsigned lh_live(int kind);

void lh_status_out(const MPI_Status *s, struct sts_status *n);
int lh_err_class(int real_code);

/* a real error code as a neutral error class (0 for MPI_SUCCESS) */
static inline int lh_err(int real_code)
{
	return real_code == MPI_SUCCESS ? 0 : lh_err_class(real_code);
}

/* a neutral error class as the real MPI's (MPI_ERR_UNKNOWN if it has none) */
int lh_err_in(int neutral_class);
#define lh_err_out lh_err   /* MPI_Error_class's answer (gen_wrappers.py) */

static inline void *lh_buf(const void *p)
{
	return p == STS_IN_PLACE ? MPI_IN_PLACE : (void *)p;
}

static inline int *lh_weights(const int *w)
{
	return w == STS_UNWEIGHTED ? MPI_UNWEIGHTED : w == STS_WEIGHTS_EMPTY ? MPI_WEIGHTS_EMPTY :
	       (int *)w;
}

/* The datatypes one per peer of MPI_Alltoallw or a neighbourhood
 * collective on c (lh_state.c): how many (neighbor 0: the group's or the
 * remote group's size; 1: out-neighbours when out, else in-neighbours),
 * and the real ones of n neutral ones in new memory (NULL without it) */
int lh_coll_peers(MPI_Comm c, int neighbor, int out);
MPI_Datatype *lh_types_in(const uint32_t *v, int n);
/* p (malloc'd) is freed with the request req (the arrays the MPI may read
 * until a non-blocking collective completes) */
void lh_keep(uint32_t req, void *p);
/* lh_p2p.c: a buffered send's request let go of */
void lh_bsend_gone(uint32_t req);
/* lh_p2p.c: every buffered send delivered, its request freed; 0, or
 * STS_AGAIN when a checkpoint comes first */
int lh_bsends_flush(void);

/* lh_io.c: a non-blocking collective on a file, counted on the file's
 * own communicator (as lh_coll_enter) */
int lh_io_enter(uint32_t fh);

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

static inline int lh_splittype_in(int t)
{
	return t == STS_SPLIT_SHARED ? MPI_COMM_TYPE_SHARED : t == STS_UNDEFINED ? MPI_UNDEFINED :
	       STS_SPLIT_INVALID;
}

/* MPI_Type_get_envelope's combiners: neutral (sts_mpi.h) and this MPI's */
static const int lh_combiners[STS_COMBINERS] = { STS_COMBINER_LIST(STS_COMBINER_MPI) };

static inline int lh_combiner_out(int c)
{
	for (int i = 0; i < STS_COMBINERS; i++)
		if (lh_combiners[i] == c)
			return i;
	return STS_ENUM_INVALID;
}

static inline int lh_typeclass_in(int t)
{
	return t == STS_TYPECLASS_INTEGER ? MPI_TYPECLASS_INTEGER :
	       t == STS_TYPECLASS_REAL ? MPI_TYPECLASS_REAL :
	       t == STS_TYPECLASS_COMPLEX ? MPI_TYPECLASS_COMPLEX : STS_ENUM_INVALID;
}

/* subarray and darray arguments (sts_mpi.h): neutral to this MPI's (_in)
 * and back (_out), for the calls and for a datatype's record */
static inline int lh_order_in(int o)
{
	return o == STS_ORDER_C ? MPI_ORDER_C : o == STS_ORDER_FORTRAN ? MPI_ORDER_FORTRAN :
	       STS_ENUM_INVALID;
}

static inline int lh_order_out(int o)
{
	return o == MPI_ORDER_C ? STS_ORDER_C : o == MPI_ORDER_FORTRAN ? STS_ORDER_FORTRAN :
	       STS_ENUM_INVALID;
}

static inline int lh_distrib_in(int d)
{
	return d == STS_DISTRIBUTE_BLOCK ? MPI_DISTRIBUTE_BLOCK :
	       d == STS_DISTRIBUTE_CYCLIC ? MPI_DISTRIBUTE_CYCLIC :
	       d == STS_DISTRIBUTE_NONE ? MPI_DISTRIBUTE_NONE : STS_ENUM_INVALID;
}

static inline int lh_distrib_out(int d)
{
	return d == MPI_DISTRIBUTE_BLOCK ? STS_DISTRIBUTE_BLOCK :
	       d == MPI_DISTRIBUTE_CYCLIC ? STS_DISTRIBUTE_CYCLIC :
	       d == MPI_DISTRIBUTE_NONE ? STS_DISTRIBUTE_NONE : STS_ENUM_INVALID;
}

/* a positive distribution argument is a number, the same in both */
static inline int lh_darg_in(int a)
{
	return a >= 0 ? a : a == STS_DISTRIBUTE_DFLT_DARG ? MPI_DISTRIBUTE_DFLT_DARG : STS_ENUM_INVALID;
}

static inline int lh_darg_out(int a)
{
	return a >= 0 ? a : a == MPI_DISTRIBUTE_DFLT_DARG ? STS_DISTRIBUTE_DFLT_DARG : STS_ENUM_INVALID;
}

/* n ints of v, each through tr, in new memory (free() it); NULL without
 * memory. n <= 0: an empty array, not NULL */
int *lh_ints_in(const int *v, int n, int (*tr)(int));

static inline int lh_topo_out(int t)
{
	return t == MPI_CART ? STS_TOPO_CART : t == MPI_GRAPH ? STS_TOPO_GRAPH :
	       t == MPI_DIST_GRAPH ? STS_TOPO_DIST_GRAPH : STS_UNDEFINED;
}

static inline uint64_t lh_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* MPI_Test for the loops that wait: with Open MPI, a test of a request not
 * yet complete costs what a turn of its own MPI_Wait does (lh_poll.c);
 * lh_poll_init answers 1 when it does, 0 when lh_test is MPI_Test */
int lh_poll_init(void);
#ifdef OPEN_MPI
/* Open MPI's Isend of a message it sent at once (its inline path) returns
 * this request, complete: testing it would cost a call and two memory
 * barriers on the sender's side of every small message */
extern struct ompi_request_t ompi_request_empty __attribute__((weak));
extern int lh_poll_fast;
int lh_test_word(MPI_Request *r, int *flag, MPI_Status *st);
extern int opal_progress(void) __attribute__((weak));

/* Open MPI 4's ompi_request_t, as lh_poll_init checked it: the completion
 * word (volatile void *req_complete: 0 pending, 1 complete) and the state
 * (2: active) */
#define LH_REQ_COMPLETE_OFF 0x58
#define LH_REQ_STATE_OFF 0x60
#define LH_REQ_ACTIVE 2

static inline int lh_req_active(MPI_Request r)
{
	return *(volatile int *)((char *)r + LH_REQ_STATE_OFF) == LH_REQ_ACTIVE;
}

static inline int lh_req_complete(MPI_Request r)
{
	return *(void *volatile *)((char *)r + LH_REQ_COMPLETE_OFF) == (void *)1;
}
#endif

static inline int lh_test(MPI_Request *r, int *flag, MPI_Status *st)
{
#ifdef OPEN_MPI
	if (lh_poll_fast)
		return lh_test_word(r, flag, st);
#endif
	return MPI_Test(r, flag, st);
}

/* Wait for req with MPI_Test every 200 us, sleeping between: a collective
 * of the lower half's own whose members may be late (still initializing
 * or restoring) leaves them the CPUs instead of busy-polling (MPICH and
 * Open MPI both spin in MPI_Wait; ranks of other nodes share CPUs with
 * them on an oversubscribed host). Returns MPI_Test's error code. */
int lh_wait_idle(MPI_Request *req);

/* While the program's threads are stopped, only the lower half's own
 * collectives run (the drain, a move's communicators, a spare's adoption):
 * lh_yield_idle(1) has Open MPI's blocking waits yield the CPU when there
 * is nothing to progress, as it does for a job it sees oversubscribed;
 * lh_yield_idle(0) gives it back its own choice. Open MPI spins otherwise,
 * and on a host whose CPUs its ranks share (the simulated cluster: 4 ranks
 * and a spare on 2 CPUs) each spinning member holds a CPU for its whole
 * time slice while the member it waits for cannot run: a move's
 * communicators took 190-430 ms under load instead of 25-35. */
void lh_yield_idle(int on);

/* lh_test with the status ignored, of a request the caller forgets once it
 * completed: with Open MPI one that completed without error is freed only
 * at the same thread's next lh_done_free (blocking receives, lh_p2p.c) */
int lh_test_done(MPI_Request *r, int *flag);
void lh_done_free(void);

static inline int lh_sent_at_once(MPI_Request r)
{
#ifdef OPEN_MPI
	return r == &ompi_request_empty;
#else
	(void)r;
	return 0;
#endif
}

void sts_gen_ops_fill(struct sts_gen_ops *ops);
void lh_hand_ops_fill(struct sts_hand_ops *ops);

/* PROT_NONE reservations over every free gap above the upper half's stack
 * while its ld.so maps the program, and their removal (lh_mem.c) */
void lh_mem_fill(void);
void lh_mem_unfill(void);

/* The guard that keeps the program break from moving (lh_main.c): 0 at a
 * checkpoint if it held, else -ENOTSUP with the message in err_msg() */
#define LH_BRK_GUARD (16ul << 20)
int lh_brk_check(void);

#endif
