/* sts_mpi.h - the interface between the split process's two halves.
 *
 * The upper half (the application, its libc and Stasis's stand-in MPI
 * library, src/split/upper) and the lower half (src/split: the real MPI, loaded
 * first) share one address space and call each other only through the
 * table below, found at a fixed address. Nothing in it depends on which
 * MPI library is below or which MPI ABI the application was compiled
 * for: handles are 32-bit neutral numbers (0 the null handle of each
 * kind, then the predefined ones in the order of gen_wrappers.py, then
 * handles the program created, from STS_FIRST_USER), ranks and error
 * classes have neutral values, statuses a neutral layout. Each half
 * translates to its own ABI. docs/split.md describes the whole design.
 */
#ifndef STS_MPI_H
#define STS_MPI_H

#include <stdint.h>

#include "sts_kinds.h"
#include "sts_ops.h"
#include "sts_written.h"

#define STS_FIRST_USER 1024u    /* neutral handles below are predefined */

/* Returned by a lower-half call that waits (Recv, Send, Wait, Probe, ...)
 * when a checkpoint begins: the upper wrapper leaves the lower half (the
 * thread parks in sts_leave) and calls it again with the same arguments,
 * which goes on with the same operation (docs/split.md, "Messages in
 * flight"). Never an error class. */
#define STS_AGAIN 0x5a5a

/* The generated predef.c's tables: each half includes it after defining
 * STS_PREDEF_VALUE(name) as the value of a name in its own mpi.h. */
struct sts_predef {
	uint32_t neutral;
	const char *name;
	uint64_t value;
};
struct sts_predef_kind {
	const struct sts_predef *v;
	unsigned n;          /* names this mpi.h has */
	unsigned count;      /* neutral numbers of the kind */
};

/* neutral special values */
#define STS_IN_PLACE ((void *)-1L)
#define STS_ANY_SOURCE (-1)
#define STS_PROC_NULL (-2)
#define STS_ROOT (-4)
#define STS_UNDEFINED (-32766)   /* MPI_UNDEFINED in both */
/* MPI_Topo_test's answers (MPI_CART and MPI_GRAPH differ between the ABIs);
 * no topology: STS_UNDEFINED */
#define STS_TOPO_CART 1
#define STS_TOPO_GRAPH 2
#define STS_TOPO_DIST_GRAPH 3
/* MPI_Comm_split_type's split_type (MPI_COMM_TYPE_SHARED is 0 in Open
 * MPI's ABI, 1 in MPICH's), or STS_UNDEFINED; any other value an invalid
 * one */
#define STS_SPLIT_SHARED 1
#define STS_SPLIT_INVALID (-77)
/* MPI_Type_create_subarray's and _darray's order, _darray's distributions
 * and default distribution argument: every one differs between the ABIs
 * (MPI_ORDER_C is 0 in Open MPI's, 56 in MPICH's; MPI_DISTRIBUTE_BLOCK 0
 * and 121; MPI_DISTRIBUTE_DFLT_DARG -1 and -49767). A value that is none
 * of them crosses as STS_ENUM_INVALID, which neither MPI accepts. */
#define STS_ORDER_C 0
#define STS_ORDER_FORTRAN 1
#define STS_DISTRIBUTE_BLOCK 0
#define STS_DISTRIBUTE_CYCLIC 1
#define STS_DISTRIBUTE_NONE 2
#define STS_DISTRIBUTE_DFLT_DARG (-1)
#define STS_ENUM_INVALID (-77)
/* MPI_Type_get_envelope's combiners (an enum in Open MPI's ABI, other
 * numbers in MPICH's); MPI_Type_match_size's type classes (INTEGER and REAL
 * are 1 and 2 in Open MPI's ABI, 2 and 1 in MPICH's) */
#define STS_COMBINER_LIST(X) X(NAMED) X(DUP) X(CONTIGUOUS) X(VECTOR) X(HVECTOR) X(INDEXED) \
	X(HINDEXED) X(INDEXED_BLOCK) X(HINDEXED_BLOCK) X(STRUCT) X(RESIZED) X(SUBARRAY) X(DARRAY) \
	X(F90_REAL) X(F90_COMPLEX) X(F90_INTEGER)
#define STS_COMBINER_ENUM(name) STS_COMBINER_##name,
enum { STS_COMBINER_LIST(STS_COMBINER_ENUM) STS_COMBINERS };
/* in either half: the mpi.h in use's MPI_COMBINER_<name>, in neutral order */
#define STS_COMBINER_MPI(name) MPI_COMBINER_##name,
#define STS_TYPECLASS_INTEGER 1
#define STS_TYPECLASS_REAL 2
#define STS_TYPECLASS_COMPLEX 3
/* MPI_Win_lock's lock type (MPI_LOCK_EXCLUSIVE is 1 in Open MPI's ABI,
 * 234 in MPICH's); the lower half never passes it on (lh_win.c) */
#define STS_LOCK_EXCLUSIVE 1
#define STS_LOCK_SHARED 2
/* A distributed graph's weights: MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY are
 * 2 and 3 in Open MPI's ABI, addresses of variables in MPICH's */
#define STS_UNWEIGHTED ((int *)2)
#define STS_WEIGHTS_EMPTY ((int *)3)

struct sts_status {
	int source;
	int tag;
	int error;                  /* neutral error class */
	int cancelled;
	long long count;            /* bytes received */
};

/* Calls the upper half takes back from the lower one (set at MPI_Init):
 * user reduction operations run in the upper half, with its TLS. */
struct sts_uh_callbacks {
	void (*op_call)(int slot, void *in, void *inout, int *len, uint32_t datatype);
	/* the upper ld.so's struct r_debug: a checkpoint checks that every
	 * object loaded above lies in the upper range (lh_image.c) */
	const void *r_debug;
	/* the regular files the program opened for writing (uh_files.c), when
	 * written_magic is STS_WRITTEN_MAGIC (images of older builds lack it) */
	uint64_t written_magic;
	struct sts_written *written;
};

#define STS_OP_SLOTS 64         /* user-defined operations at once */
#define STS_OP_SLOT_BUSY 0x5a5b /* op_create: a live request may still call the
				 * slot's freed operation: take another */

/* Hand-written calls (functions.list: hand). */
struct sts_hand_ops {
	int (*init)(int required, int *provided);
	int (*finalize)(void);
	void (*abort)(uint32_t comm, int code);
	int (*waitall)(int n, uint32_t *reqs, struct sts_status *st);
	int (*waitany)(int n, uint32_t *reqs, int *index, struct sts_status *st);
	int (*testall)(int n, uint32_t *reqs, int *flag, struct sts_status *st);
	int (*testany)(int n, uint32_t *reqs, int *index, int *flag, struct sts_status *st);
	int (*type_create_struct)(int n, const int *blocklens, const sts_aint *displs,
				  const uint32_t *types, uint32_t *newtype);
	int (*op_create)(int slot, int commute, uint32_t *op);
	int (*waitsome)(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st);
	int (*testsome)(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st);
	/* MPIX_Checkpoint (stasis_mpix.h): the ticket, taken before the
	 * program's barrier, so that the checkpoint rank 0 asks for after it
	 * is later than every rank's ticket; the request (1: no coordinator,
	 * 2: wait 2 s in the upper half and ask again, fault point
	 * split.mpix.late); then the wait for its outcome, an MPIX_CR_state_t */
	void (*mpix_ticket)(uint64_t *ticket);
	int (*mpix_request)(void);
	int (*mpix_wait)(uint64_t ticket, int *state);
	/* a predefined attribute of MPI_COMM_WORLD (STS_ATTR_*) as the real
	 * MPI has it; ranks neutral */
	int (*attr_predef)(int which, int *value, int *flag);
	/* the program exits (exit(status), or returns from main) without
	 * MPI_Finalize: the node agent is told (docs/coordinator.md) */
	void (*quit)(int status);
	/* a predefined attribute of window win (STS_WATTR_*) as the lower
	 * half made it: its base address, size, displacement unit, flavor
	 * (STS_WIN_FLAVOR_*) or memory model (STS_WIN_MODEL_*) */
	int (*win_attr)(uint32_t win, int which, sts_aint *value);
};

/* the predefined attributes the lower half is asked for (uh_attr.c) */
enum { STS_ATTR_TAG_UB, STS_ATTR_HOST, STS_ATTR_IO, STS_ATTR_UNIVERSE_SIZE, STS_ATTR_APPNUM };
/* a window's (uh_win.c); the flavors are numbered as in both MPIs' mpi.h */
enum { STS_WATTR_BASE, STS_WATTR_SIZE, STS_WATTR_DISP_UNIT, STS_WATTR_FLAVOR, STS_WATTR_MODEL };
enum { STS_WIN_FLAVOR_CREATE = 1, STS_WIN_FLAVOR_ALLOCATE, STS_WIN_FLAVOR_DYNAMIC,
       STS_WIN_FLAVOR_SHARED };
enum { STS_WIN_MODEL_SEPARATE, STS_WIN_MODEL_UNIFIED };

/* The upper half's address range. Everything the upper half maps lies in
 * [STS_UPPER_LO, STS_UPPER_HI): its ld.so at STS_UH_INTERP, its first stack
 * just below STS_UH_STACK_TOP, and every other mapping (the libraries ld.so
 * loads, malloc's memory, thread stacks) in the arena below that stack. The
 * lower half never maps there (its libraries sit where the kernel puts them
 * with address randomization off, near the top of the address space), so a
 * fresh lower half at restart, of either MPI, cannot collide with the upper
 * half's memory, and a checkpoint saves exactly this range. */
#define STS_UPPER_LO 0x100000000000ull
#define STS_UH_STACK_TOP 0x1ffff0000000ull
#define STS_UH_INTERP 0x200000000000ull
#define STS_UPPER_HI 0x201000000000ull

/* The lower half's ledger (src/split/virt/lh_ledger.h): what it must know again
 * after a restart (its handle tables, how to rebuild each object, pending
 * requests, the drain buffer, message counts), kept in the upper range so
 * that it is saved and restored with the upper half's memory. Above the
 * upper half's ld.so, outside the arena; reserved, touched as it grows. */
#define STS_LEDGER_ADDR 0x200800000000ull
#define STS_LEDGER_SIZE (16ull << 30)

#define STS_LH_INFO_ADDR 0x3ff1f0000000ull   /* in Stasis's window: never saved */
#define STS_LH_MAGIC 0x53545348414c4631ull   /* "1FLAHSTS" */
#define STS_LH_VERSION 3

/* A TLS of the lower half that an upper thread borrows while it is inside
 * MPI (docs/split.md, "MPI from every thread"). Below
 * MPI_THREAD_SERIALIZED there is one, the lower half's main thread's, for
 * the one thread that calls MPI; at SERIALIZED and MULTIPLE slot 0 is the
 * program's main thread's and every other thread that calls MPI takes one
 * of the others, each the TLS of a dormant thread of the lower half: MPI's
 * and libc's per-thread state (errno, MPICH's and Open MPI's own
 * __thread variables, pthread_self()) is then its own. */
#define STS_TLS_SLOTS 64
struct sts_tls {
	uint64_t lh_fs;             /* the lower-half FS base it lends */
	uint64_t uh_fs;             /* the borrower's FS base while it is inside */
	volatile int32_t owner;     /* the borrower's thread id; 0: free (slot 0: the main thread's) */
	/* a checkpoint holds this thread at a collective's entry: it parks when
	 * it leaves the lower half (sts_leave), the others run on */
	volatile uint32_t hold;
	uint32_t held;              /* 1 + the communicator it is held at (lh_coll.c) */
	/* set by the lower half when a request of this thread's call completes
	 * in error: the communicator (neutral), or STS_ERRH_FILE | the file,
	 * whose error handler the upper half raises it on (MPI-3.1 8.3). Per
	 * thread: the upper half reads it after the call let the lock go,
	 * when another thread's call may have set its own. */
	volatile uint32_t err_on;
};

struct sts_lh_info {
	uint64_t magic;
	uint32_t version;
	uint32_t fsgsbase;          /* the wrfsbase instruction may be used */
	uint64_t lh_fs;             /* the lower half's FS base (its main thread's TLS) */
	/* slots in tls[]: 1 below SERIALIZED, STS_TLS_SLOTS at SERIALIZED and
	 * MULTIPLE, where every call also takes the lower half's lock */
	uint32_t ntls;
	uint32_t tls_gen;           /* new with every lower half: a slot claimed before a restart is stale */
	struct sts_tls tls[STS_TLS_SLOTS];
	void (*lock)(void);         /* the lower half's lock, recursive, on the borrowed TLS */
	void (*unlock)(void);
	int world_rank;
	int world_size;
	int thread_provided;
	int finalized;
	char library[256];          /* the real MPI's MPI_Get_library_version, first line */
	const struct sts_uh_callbacks *uh;
	struct sts_hand_ops hand;
	struct sts_gen_ops gen;
	/* set by the rank's checkpoint thread: an upper thread leaving the
	 * lower half parks itself (sts_leave) */
	volatile uint32_t ckpt_pending;
	uint32_t ckpt_signal;       /* the signal that parks an upper thread */
	/* called by the upper half once its libc's mmap is patched: the
	 * reservations above STS_UH_STACK_TOP go (lh_mem.c) */
	void (*mem_unfill)(void);
	/* split_onetls (docs/split.md, "One thread pointer"): the upper
	 * thread pointer serves both halves, a call swaps the DTV and the
	 * pointer guard. Set by the lower half at its start (single and
	 * funneled only); the upper half clears it where it cannot. */
	uint32_t onetls;
	uint32_t keys_upper_from;   /* pthread keys below this are the lower half's */
	uint64_t lh_guard;
	uint64_t (*tls_adopt)(uint64_t utp);
	/* called inside, on a thread it adopted: its slots of the lower
	 * half's pthread keys emptied (a restarted image's hold the old lower
	 * half's values) */
	void (*tls_fresh)(void);
	/* called inside, on an adopted thread that ends (an upper key's
	 * destructor): what the lower half's libc would free at its own
	 * threads' end, which never runs for the upper's */
	void (*tls_drop)(void);
	/* bytes below a thread pointer the lower half's static TLS reaches,
	 * and below which the upper half's must end (the padding's start) */
	uint64_t tls_need, tls_room;
	uint32_t libc_id_len;       /* the lower half's libc's build-id (sts_libc_id.h) */
	uint8_t libc_id[32];
};

#define STS_ERRH_FILE 0x80000000u

/* MPI_Win_allocate_shared's memory, passed as its baseptr from the upper
 * half to the lower (docs/split.md, "Shared-memory windows"): the upper
 * half reserves the whole node segment in its arena, the lower half maps
 * the node's shared file over that reservation and makes the window over
 * this rank's part. */
struct sts_shared_mem {
	void *base;                 /* the reservation, len bytes (pages) */
	sts_aint len;
	sts_aint offset;            /* this rank's part: base + offset */
};

/* FS base switches: wrfsbase where the kernel allows it (FSGSBASE,
 * Linux >= 5.9), arch_prctl otherwise. Raw instructions and system calls:
 * these run with the other half's TLS in place, where libc cannot. */
static inline uint64_t sts_rdfs(int fsgsbase)
{
	uint64_t v;

	if (fsgsbase) {
		__asm__ volatile("rdfsbase %0" : "=r"(v) : : "memory");
	} else {
		long r;

		__asm__ volatile("syscall" : "=a"(r) : "0"(158L), "D"(0x1003L), "S"(&v)
				 : "rcx", "r11", "memory");
	}
	return v;
}

/* The calling thread's FS base where its libc keeps it: the x86-64 TLS ABI
 * has the first word of the thread's control block point to itself. A load,
 * where rdfsbase costs what wrfsbase does (5 ns on the development VM) and
 * arch_prctl a system call; only where that thread's own libc set FS up. */
static inline uint64_t sts_tp(void)
{
	uint64_t v;

	__asm__ volatile("mov %%fs:0, %0" : "=r"(v));
	return v;
}

static inline void sts_wrfs(int fsgsbase, uint64_t v)
{
	if (fsgsbase) {
		__asm__ volatile("wrfsbase %0" : : "r"(v) : "memory");
	} else {
		long r;

		__asm__ volatile("syscall" : "=a"(r) : "0"(158L), "D"(0x1002L), "S"(v)
				 : "rcx", "r11", "memory");
	}
}

#endif
