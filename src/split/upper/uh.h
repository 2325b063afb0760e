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
#include <link.h>
#include <stdint.h>

#include "sts_mpi.h"

/* A handle's value as a number, whatever the ABI makes handles (pointers in
 * Open MPI's, ints in MPICH's but for MPI_File): ints as unsigned 32 bits. */
#define STS_HVAL(h) _Generic((h), int: (uint64_t)(uint32_t)(uintptr_t)(h), \
			      default: (uint64_t)(uintptr_t)(h))
#define STS_HCAST uintptr_t
#define STS_STATUS_IGNORED(s) ((s) == MPI_STATUS_IGNORE)

/* the lower half's table, at its fixed address: a constant, so a call
 * loads its fields without first loading a pointer from the GOT */
#define sts_lh ((struct sts_lh_info *)STS_LH_INFO_ADDR)

/* Run stmt in the lower half: its TLS in place, ours back after. */
#define STS_LOWER(stmt)                                          \
	do {                                                     \
		uint64_t fs_ = sts_enter();                      \
		stmt;                                            \
		sts_leave(fs_);                                  \
	} while (0)

/* the thread was in the lower half when a checkpoint began: park now */
void sts_park_pending(void);

/* The lower-half TLS this thread borrows (sts_mpi.h, struct sts_tls):
 * slot 0 below SERIALIZED; at SERIALIZED and MULTIPLE the thread's own,
 * claimed on its first call into the lower half since that one started
 * (uh_core.c). */
extern __thread struct sts_tls *sts_me __attribute__((tls_model("initial-exec")));
extern __thread uint32_t sts_me_gen __attribute__((tls_model("initial-exec")));
struct sts_tls *sts_tls_claim(void);

static inline struct sts_tls *sts_slot(void)
{
	struct sts_tls *me = sts_me;

	if (__builtin_expect(sts_lh->ntls == 1, 1))
		return &sts_lh->tls[0];
	if (__builtin_expect(!me || sts_me_gen != sts_lh->tls_gen, 0))
		me = sts_tls_claim();
	return me;
}

/* split_onetls (docs/split.md, "One thread pointer"): the thread's
 * lower-half DTV and the generation it was made for, the upper half's
 * pointer guard. A call keeps this thread pointer and swaps the DTV
 * (%fs:8) and the pointer guard (%fs:0x30); the lower half's static TLS
 * is below it (sts_onetls_adopt, once a thread and lower half). */
extern __thread uint64_t sts_ldtv __attribute__((tls_model("initial-exec")));
extern __thread uint64_t sts_udtv __attribute__((tls_model("initial-exec")));
extern __thread uint32_t sts_ldtv_gen __attribute__((tls_model("initial-exec")));
extern uint64_t sts_uguard;
int sts_onetls_adopt(void);
/* the last object of the upper ld.so's list when the rank last looked:
 * one loaded since (dlopen) may have static TLS where the lower half's is */
extern struct link_map *sts_lm_tail;
int sts_onetls_check(void);
/* split_onetls and pthread_cancel (uh_core.c): callbacks of the program's
 * running out of a call with one thread pointer (sts_out_of), and a
 * cancel this thread takes itself when it is out of every call */
extern __thread uint32_t sts_outs __attribute__((tls_model("initial-exec")));
extern __thread uint32_t sts_cancel_pending __attribute__((tls_model("initial-exec")));
void sts_cancel_take(void);
uint64_t sts_one_back_out(void);

/* Returns the upper DTV with bit 0 set (a DTV is malloc'd, an FS base a
 * thread block's address: both even), so that sts_leave undoes what this
 * call's sts_enter did whatever onetls says by then (a call a checkpoint
 * held inside and a restart's lower half continued). The guard is the
 * sign of "inside" (lh_agent.c's park): it goes in first, out last. */
static inline uint64_t sts_enter_one(void)
{
	uint64_t udtv;

	__asm__ volatile("mov %%fs:8, %0" : "=r"(udtv));
	sts_udtv = udtv;   /* for a handler or a reduction of the program's (sts_out_of) */
	__asm__ volatile("mov %0, %%fs:0x30" : : "r"(sts_lh->lh_guard) : "memory");
	/* read again after the guard is in: a pthread_cancel that made the
	 * rank fall back either sees this thread inside or is seen here
	 * (uh_core.c); 0: two thread pointers for this call */
	if (__builtin_expect(!*(volatile uint32_t *)&sts_lh->onetls, 0))
		return sts_one_back_out();
	__asm__ volatile("mov %0, %%fs:8" : : "r"(sts_ldtv) : "memory");
	return udtv | 1;
}

/* the DTV __tls_get_addr may have replaced kept, the upper's put back */
static inline void sts_leave_one(uint64_t udtv)
{
	uint64_t l;

	__asm__ volatile("mov %%fs:8, %0" : "=r"(l) : : "memory");
	sts_ldtv = l;
	(void)udtv;   /* sts_udtv: a handler that ran inside may have replaced it */
	__asm__ volatile("mov %0, %%fs:8" : : "r"(sts_udtv) : "memory");
	__asm__ volatile("mov %0, %%fs:0x30" : : "r"(sts_uguard) : "memory");
}

/* A signal handler or reduction of the program's that runs on a thread
 * inside MPI with one thread pointer (the lower pointer guard in its own
 * thread block): the upper DTV and guard in place for it, the ones it
 * found back after (uh_signal.c, uh_core.c's op_call). Returns the DTV
 * found, 0 when the thread was not inside so. */
static inline uint64_t sts_out_of(void)
{
	uint64_t g, d, tp = sts_tp();

	__asm__ volatile("mov %%fs:0x30, %0" : "=r"(g));
	if (!sts_lh->lh_guard || g != sts_lh->lh_guard || tp < STS_UPPER_LO || tp >= STS_UPPER_HI)
		return 0;
	/* counted before the guard goes out, uncounted after it is back in:
	 * pthread_cancel reads the guard, this, the guard (uh_core.c) */
	sts_outs++;
	__asm__ volatile("" : : : "memory");
	__asm__ volatile("mov %%fs:8, %0" : "=r"(d));
	__asm__ volatile("mov %0, %%fs:8" : : "r"(sts_udtv) : "memory");
	__asm__ volatile("mov %0, %%fs:0x30" : : "r"(sts_uguard) : "memory");
	return d;
}

static inline void sts_back_in(uint64_t d)
{
	uint64_t u;

	if (!d)
		return;
	__asm__ volatile("mov %%fs:8, %0" : "=r"(u) : : "memory");
	sts_udtv = u;
	__asm__ volatile("mov %0, %%fs:0x30" : : "r"(sts_lh->lh_guard) : "memory");
	__asm__ volatile("mov %0, %%fs:8" : : "r"(d) : "memory");
	sts_outs--;
}

static inline uint64_t sts_enter(void)
{
	/* one word read for both ways; the lower half sets onetls only
	 * where ntls is 1, and only the first call of a thread (or after
	 * a restart) may clear it (sts_onetls_adopt) */
	if (__builtin_expect(sts_lh->onetls, 0) &&
	    (__builtin_expect(sts_ldtv_gen == sts_lh->tls_gen && !sts_lm_tail->l_next, 1) ||
	     sts_onetls_check() == 0)) {
		uint64_t one = sts_enter_one();

		if (__builtin_expect(one != 0, 1))
			return one;
	}
	int g = (int)sts_lh->fsgsbase;
	struct sts_tls *me = sts_slot();
	uint64_t fs = sts_tp();

	me->uh_fs = fs;
	sts_wrfs(g, me->lh_fs);
	if (__builtin_expect(sts_lh->ntls > 1, 0))
		sts_lh->lock();
	return fs;
}

static inline void sts_leave(uint64_t fs)
{
	if (__builtin_expect(fs & 1, 0)) {
		sts_leave_one(fs);
		if (__builtin_expect(sts_lh->ckpt_pending, 0))
			sts_park_pending();
		if (__builtin_expect(!*(volatile uint32_t *)&sts_lh->onetls, 0))
			sts_cancel_take();   /* the guard out, then the flag read */
		return;
	}
	if (__builtin_expect(sts_lh->ntls > 1, 0))
		sts_lh->unlock();
	sts_wrfs((int)sts_lh->fsgsbase, fs);
	if (__builtin_expect(sts_lh->ckpt_pending, 0) ||
	    (__builtin_expect(sts_lh->ntls > 1, 0) && sts_me->hold))
		sts_park_pending();
}

/* ABI <-> neutral (uh_abi.c) */
uint32_t sts_in(int kind, uint64_t abi_handle);
uint64_t sts_out(int kind, uint32_t neutral);
void sts_status_out(const struct sts_status *n, MPI_Status *s);
/* the fields of the ABI's status that MPI_Status_set_elements and
 * MPI_Status_set_cancelled write, MPI_Test_cancelled reads */
void sts_status_set_bytes(MPI_Status *s, long long bytes);
int sts_status_cancelled(const MPI_Status *s);
void sts_status_set_cancelled(MPI_Status *s, int flag);
int sts_err_class_out(int neutral_class);

/* the neutral class of one of the ABI's error classes; -1 if none */
int sts_err_class_in(int abi_class);
#define sts_err_in sts_err_class_in   /* MPI_Error_string's code (gen_wrappers.py) */
/* a neutral class's name in MPI ("MPI_ERR_RANK") */
const char *sts_err_class_name(int neutral_class);

static inline int sts_err_out(int neutral_class)
{
	return neutral_class == 0 ? MPI_SUCCESS : sts_err_class_out(neutral_class);
}

/* ---- errors raised on the program's error handlers (uh_err.c) ----
 * A failed call's error (an ABI code) raised on the handler of the
 * call's object: a communicator or file of kind, by neutral number (an
 * invalid or null communicator: MPI_COMM_WORLD's; file 0: MPI_FILE_NULL's).
 * Returns the code to return, if the handler returns. fn names the call. */
int sts_raise(int kind, uint32_t obj, int code, const char *fn);

static inline int sts_err_comm(int neutral_class, uint32_t comm, const char *fn)
{
	return __builtin_expect(neutral_class == 0, 1) ? MPI_SUCCESS :
	       sts_raise(STS_COMM, comm, sts_err_class_out(neutral_class), fn);
}

static inline int sts_err_file(int neutral_class, uint32_t file, const char *fn)
{
	return __builtin_expect(neutral_class == 0, 1) ? MPI_SUCCESS :
	       sts_raise(STS_FILE, file, sts_err_class_out(neutral_class), fn);
}

/* a call on no communicator or file (a request, a datatype): raised on
 * MPI_COMM_WORLD, as MPI-3.1 8.3 says */
static inline int sts_err_world(int neutral_class, const char *fn)
{
	return sts_err_comm(neutral_class, 1, fn);
}

/* an error of a request's completion (Wait, Test, ...): raised on the
 * handler of the request's communicator or file, which the lower half
 * left in its slot's err_on (MPI_COMM_WORLD's for an invalid request) */
int sts_raise_req(int code, const char *fn);

static inline int sts_err_req(int neutral_class, const char *fn)
{
	return __builtin_expect(neutral_class == 0, 1) ? MPI_SUCCESS :
	       sts_raise_req(sts_err_class_out(neutral_class), fn);
}

/* an error the upper half found itself (an ABI code) */
static inline int sts_fail(int code, uint32_t comm, const char *fn)
{
	return code == MPI_SUCCESS ? MPI_SUCCESS : sts_raise(STS_COMM, comm, code, fn);
}

/* A handler made through another language's binding (uh_fortran.c):
 * raising an error calls call(fn, the object's ABI handle, &code) instead
 * of fn with the C signature. kind: STS_COMM or STS_FILE. */
typedef void sts_errh_caller(void (*fn)(void), uint64_t obj, int *code);
int sts_errhandler_create(int kind, void (*fn)(void), sts_errh_caller *call, MPI_Errhandler *out,
			  const char *name);

/* a new communicator has its parent's handler; a file opened, the one
 * of MPI_FILE_NULL */
void sts_comm_made(uint32_t parent, uint32_t comm);
void sts_file_made(uint32_t file);

static inline void *sts_buf_in(const void *p)
{
	return p == MPI_IN_PLACE ? STS_IN_PLACE : (void *)p;
}

static inline int *sts_weights_in(const int *w)
{
	return w == MPI_UNWEIGHTED ? STS_UNWEIGHTED : w == MPI_WEIGHTS_EMPTY ? STS_WEIGHTS_EMPTY :
	       (int *)w;
}

/* The datatypes one per peer of MPI_Alltoallw or a neighbourhood
 * collective on comm (uh_conv.c): how many (as lh_coll_peers), and their
 * neutral handles in new memory (free() it; NULL without memory; v NULL:
 * null handles) */
int sts_coll_peers(MPI_Comm comm, int neighbor, int out);
uint32_t *sts_types_in(const MPI_Datatype *v, int n);

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

static inline int sts_splittype_in(int t)
{
	return t == MPI_COMM_TYPE_SHARED ? STS_SPLIT_SHARED : t == MPI_UNDEFINED ? STS_UNDEFINED :
	       STS_SPLIT_INVALID;
}

static inline int sts_locktype_in(int t)
{
	return t == MPI_LOCK_EXCLUSIVE ? STS_LOCK_EXCLUSIVE : t == MPI_LOCK_SHARED ? STS_LOCK_SHARED :
	       STS_ENUM_INVALID;
}

/* subarray and darray arguments (sts_mpi.h) */
static inline int sts_order_in(int o)
{
	return o == MPI_ORDER_C ? STS_ORDER_C : o == MPI_ORDER_FORTRAN ? STS_ORDER_FORTRAN :
	       STS_ENUM_INVALID;
}

static inline int sts_distrib_in(int d)
{
	return d == MPI_DISTRIBUTE_BLOCK ? STS_DISTRIBUTE_BLOCK :
	       d == MPI_DISTRIBUTE_CYCLIC ? STS_DISTRIBUTE_CYCLIC :
	       d == MPI_DISTRIBUTE_NONE ? STS_DISTRIBUTE_NONE : STS_ENUM_INVALID;
}

static inline int sts_darg_in(int a)
{
	return a >= 0 ? a : a == MPI_DISTRIBUTE_DFLT_DARG ? STS_DISTRIBUTE_DFLT_DARG : STS_ENUM_INVALID;
}

static inline int sts_order_out(int o)
{
	return o == STS_ORDER_C ? MPI_ORDER_C : o == STS_ORDER_FORTRAN ? MPI_ORDER_FORTRAN :
	       STS_ENUM_INVALID;
}

static inline int sts_distrib_out(int d)
{
	return d == STS_DISTRIBUTE_BLOCK ? MPI_DISTRIBUTE_BLOCK :
	       d == STS_DISTRIBUTE_CYCLIC ? MPI_DISTRIBUTE_CYCLIC :
	       d == STS_DISTRIBUTE_NONE ? MPI_DISTRIBUTE_NONE : STS_ENUM_INVALID;
}

static inline int sts_darg_out(int a)
{
	return a >= 0 ? a : a == STS_DISTRIBUTE_DFLT_DARG ? MPI_DISTRIBUTE_DFLT_DARG : STS_ENUM_INVALID;
}

/* MPI_Type_get_envelope's combiner, MPI_Type_match_size's type class */
static inline int sts_combiner_out(int c)
{
	static const int abi[STS_COMBINERS] = { STS_COMBINER_LIST(STS_COMBINER_MPI) };

	return c >= 0 && c < STS_COMBINERS ? abi[c] : STS_ENUM_INVALID;
}

static inline int sts_typeclass_in(int t)
{
	return t == MPI_TYPECLASS_INTEGER ? STS_TYPECLASS_INTEGER :
	       t == MPI_TYPECLASS_REAL ? STS_TYPECLASS_REAL :
	       t == MPI_TYPECLASS_COMPLEX ? STS_TYPECLASS_COMPLEX : STS_ENUM_INVALID;
}

/* n ints of v, each through tr, in new memory (free() it); NULL without
 * memory. n <= 0: an empty array, not NULL (uh_conv.c) */
int *sts_ints_in(const int *v, int n, int (*tr)(int));

/* Fortran handles (uh_conv.c; MPI_X_c2f, MPI_X_f2c, and the Fortran
 * stand-in's every handle): in MPICH's ABI the C handle itself; in Open
 * MPI's, a predefined handle of mpif.h its PARAMETER, any other its
 * neutral number plus STS_F_USER_OFFSET, so that a Fortran handle means
 * the same object after a restart. sts_f2c of a value that is none: 0;
 * sts_c2f of one: -1. */
uint64_t sts_f2c(int kind, int f);
int sts_c2f(int kind, uint64_t c);

static inline int sts_topo_out(int t)
{
	return t == STS_TOPO_CART ? MPI_CART : t == STS_TOPO_GRAPH ? MPI_GRAPH :
	       t == STS_TOPO_DIST_GRAPH ? MPI_DIST_GRAPH : MPI_UNDEFINED;
}

/* MPI_LASTUSEDCODE: the last code or class MPI_Add_error_* made, or the
 * ABI's MPI_ERR_LASTCODE (uh_err.c) */
int sts_err_last_used(void);

/* A predefined handle's name in MPI ("MPI_COMM_WORLD"), "" if none. */
const char *sts_predef_name(int kind, uint32_t neutral);

/* Before MPI_Finalize: MPI_COMM_SELF's attributes deleted (uh_attr.c). */
int sts_attr_finalize(void);

/* A function the split process does not support yet: one line naming it
 * on stderr, then the job is aborted. */
void sts_unsupported(const char *name) __attribute__((noreturn));
/* One the split process refuses (functions.list's "no"): one line naming
 * it and what supporting it would need, then the job is aborted. */
void sts_unsupported_why(const char *name, const char *why) __attribute__((noreturn));

/* msg (n bytes, one line) on stderr, then the job is aborted with code */
void sts_die(const char *msg, int n, int code) __attribute__((noreturn));

#endif
