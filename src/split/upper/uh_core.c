/* uh_core.c - the upper half's hand-written MPI functions (functions.list:
 * hand) and the switch into the lower half. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sts_libc_id.h"
#include "uh.h"

#undef MPI_Aint_add
#undef MPI_Aint_diff
#undef PMPI_Aint_add
#undef PMPI_Aint_diff

static int initialized, finalized;
static int thread_level;
static pid_t main_tid;   /* the thread that initialized MPI */

/* No lower half below (the program was started without Stasis's lower
 * half): say so once, clearly, rather than crash on the table. */
static void check_lower(void)
{
	static int checked;

	if (checked)
		return;
	if (msync((void *)sts_lh, 4096, MS_ASYNC) != 0 || sts_lh->magic != STS_LH_MAGIC ||
	    sts_lh->version != STS_LH_VERSION) {
		static const char msg[] = "stasis: this program runs with Stasis's MPI library "
					  "but without its lower half (start it with stasis run)\n";
		if (write(2, msg, sizeof(msg) - 1) < 0) {
			/* nothing else to do */
		}
		_exit(1);
	}
	checked = 1;
}

__thread struct sts_tls *sts_me __attribute__((tls_model("initial-exec")));
__thread uint32_t sts_me_gen __attribute__((tls_model("initial-exec")));

/* split_onetls (uh.h) */
__thread uint64_t sts_ldtv __attribute__((tls_model("initial-exec")));
__thread uint64_t sts_udtv __attribute__((tls_model("initial-exec")));
__thread uint32_t sts_ldtv_gen __attribute__((tls_model("initial-exec")));
uint64_t sts_uguard;
static uint32_t keys_upto;   /* pthread keys below this are reserved for the lower half */
static int two_tp;           /* fell back once: two thread pointers for good */

/* the one line a rank says when it keeps two thread pointers, and they */
static int onetls_off(const char *why)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "stasis: rank %d: split_onetls: two thread "
			 "pointers (%s)\n", sts_lh->world_rank, why);

	(void)!write(2, msg, n > 0 && n < (int)sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	two_tp = 1;
	sts_lh->onetls = 0;
	return -1;
}

/* The pthread keys the lower half uses (lh_tls.c): indices keys_upto
 * to keys_upper_from taken in the upper libc's table, which hands out the
 * lowest free index; -1 (none kept) if the program holds one of them. */
static int reserve_keys(void)
{
	uint32_t want = sts_lh->keys_upper_from, made = keys_upto;
	pthread_key_t k;

	while (made < want && pthread_key_create(&k, NULL) == 0) {
		if (k != made) {
			pthread_key_delete(k);
			break;
		}
		made++;
	}
	if (made == want) {
		keys_upto = want;
		return 0;
	}
	while (made > keys_upto)
		pthread_key_delete(--made);
	return -1;
}

/* before the program's constructors make keys of their own (a call
 * from uh_mem.c's constructor may have reserved them already) */
static void __attribute__((constructor(102))) sts_onetls_keys(void)
{
	/* no lower half: check_lower says so at the first call */
	if (msync((void *)sts_lh, 4096, MS_ASYNC) != 0 || sts_lh->magic != STS_LH_MAGIC ||
	    sts_lh->version != STS_LH_VERSION)
		return;
	if (sts_lh->onetls && keys_upto < sts_lh->keys_upper_from && reserve_keys() != 0)
		onetls_off("pthread keys made before Stasis's library");
}

/* The upper ld.so's list of objects ends at sts_lm_tail when none was
 * loaded since the rank last looked; a dummy before the first look. */
static struct link_map lm_none;
struct link_map *sts_lm_tail = &lm_none;

static int lm_last(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct link_map **m = arg;

	(void)info;
	(void)sz;
	while ((*m)->l_next)   /* under the loader's lock */
		*m = (*m)->l_next;
	return 1;
}

/* the last object, kept loaded (RTLD_NODELETE) so that its link map,
 * whose l_next sts_enter reads, is never freed; the initial objects are */
static void lm_watch(struct link_map *from)
{
	struct link_map *m = from;

	dl_iterate_phdr(lm_last, &m);
	if (m != from && m->l_name && m->l_name[0] &&
	    !dlopen(m->l_name, RTLD_NOLOAD | RTLD_NODELETE | RTLD_LAZY))
		return;   /* closed meanwhile: looked at again at the next call */
	sts_lm_tail = m;
}

/* how far below the thread pointer the upper half's static blocks reach */
struct tls_index_ {
	unsigned long module, offset;
};
void *__tls_get_addr(struct tls_index_ *ti);

static int upper_extent(struct dl_phdr_info *info, size_t sz, void *arg)
{
	uint64_t *ext = arg, tp = sts_tp(), at = (uint64_t)(uintptr_t)info->dlpi_tls_data;

	(void)sz;
	/* a module loaded since this thread's DTV was last brought up to
	 * date shows no TLS (dlpi_tls_data is null) until __tls_get_addr
	 * looks: a static one's is below the thread pointer */
	if (info->dlpi_tls_modid && !at) {
		struct tls_index_ ti = { info->dlpi_tls_modid, 0 };
		uint64_t *dtv;

		at = (uint64_t)(uintptr_t)__tls_get_addr(&ti);
		__asm__ volatile("mov %%fs:8, %0" : "=r"(dtv));
		if (dtv[2 * info->dlpi_tls_modid + 1])
			return 0;   /* a dynamic block (to_free set) */
	}
	if (info->dlpi_tls_modid && at && at < tp && tp - at <= ext[1] && tp - at > ext[0])
		ext[0] = tp - at;
	return 0;
}

/* Whether this rank can take one thread pointer: its thread blocks (made
 * by its ld.so at its start, with the tunable or not, and kept across a
 * restart) hold the lower half's static TLS, its own static TLS stays
 * within the room kept for it, its pthread keys were reserved. A thread
 * control block is under 4 KiB (2368 bytes in glibc 2.36). */
static int onetls_fits(void)
{
	void (*info)(size_t *, size_t *) =
		(void (*)(size_t *, size_t *))dlvsym(RTLD_DEFAULT, "_dl_get_tls_static_info",
						     "GLIBC_PRIVATE");
	size_t size = 0, align = 0;
	uint64_t ext[2];
	struct sts_libc_id id;

	sts_libc_id(&id);
	if (!id.len || id.len != sts_lh->libc_id_len || memcmp(id.id, sts_lh->libc_id, id.len) != 0)
		return onetls_off("the program's libc is not the lower half's build");
	if (!info)
		return onetls_off("no static TLS size from this ld.so");
	info(&size, &align);
	if (size < 4096 || size - 4096 < sts_lh->tls_need)
		return onetls_off("thread blocks too small for the lower half's TLS");
	ext[0] = 0;
	ext[1] = size;
	dl_iterate_phdr(upper_extent, ext);
	if (ext[0] > sts_lh->tls_room)
		return onetls_off("the program's static TLS larger than the room kept for it");
	lm_watch(_r_debug.r_map);
	if (keys_upto < sts_lh->keys_upper_from && reserve_keys() != 0) {
		char why[96];

		snprintf(why, sizeof(why), "the program holds pthread keys below %u, the lower "
			 "half's, above %u", sts_lh->keys_upper_from, keys_upto);
		return onetls_off(why);
	}
	return 0;
}

/* An adopted thread that ends: what the lower half keeps for it (its
 * keys' values, DTV, tcache) freed inside (lh_tls_drop). Run as a
 * thread_local's destructor, before the upper libc empties every key
 * slot of the thread, the lower half's too. A thread adopted by an
 * earlier lower half (a restart since) leaves nothing here. */
extern void *__dso_handle;
int __cxa_thread_atexit_impl(void (*fn)(void *), void *arg, void *dso);

static void onetls_drop(void *p)
{
	uint64_t fs;

	(void)p;
	if (sts_ldtv_gen != sts_lh->tls_gen || !sts_lh->tls_drop)
		return;
	/* a rank that fell back since (pthread_cancel) keeps it: the
	 * threads adopted before, once each */
	fs = sts_enter_one();
	if (!fs)
		return;
	sts_lh->tls_drop();
	sts_leave_one(fs);
	sts_ldtv = 0;
	sts_ldtv_gen = 0;
}

/* An object loaded since the rank last looked: a library with static
 * TLS (initial-exec, or one the ld.so placed there for speed, which the
 * tunable's 80 KiB of room allows) that the ld.so put below the room
 * kept for the program's, over the lower half's blocks, into which it
 * copied its initial image in every thread. From this call on the rank
 * keeps two thread pointers: the lower half no longer writes there. A
 * thread inside MPI while another loads it is not covered. */
static int onetls_relook(void)
{
	uint64_t ext[2] = { 0, 0 };
	size_t align = 0;
	void (*info)(size_t *, size_t *) =
		(void (*)(size_t *, size_t *))dlvsym(RTLD_DEFAULT, "_dl_get_tls_static_info",
						     "GLIBC_PRIVATE");

	if (!info)
		return onetls_off("no static TLS size from this ld.so");
	info((size_t *)&ext[1], &align);
	dl_iterate_phdr(upper_extent, ext);
	if (ext[0] > sts_lh->tls_room)
		return onetls_off("a library loaded since has static TLS beyond the room kept "
				  "for the program's");
	lm_watch(sts_lm_tail);
	return 0;
}

int sts_onetls_check(void)
{
	if (sts_lm_tail->l_next && onetls_relook() != 0)
		return -1;
	if (sts_ldtv_gen != sts_lh->tls_gen)
		return sts_onetls_adopt();
	return 0;
}

/* The first call of this thread into this lower half: its lower-half TLS
 * made below its own thread pointer, through the two-pointer crossing.
 * 0, or -1 with onetls cleared (the first thread's call decides). */
int sts_onetls_adopt(void)
{
	static uint32_t checked_gen;
	int g = (int)sts_lh->fsgsbase;
	uint64_t fs = sts_tp(), d;

	if (two_tp) {   /* a restart's lower half that does not know */
		sts_lh->onetls = 0;
		return -1;
	}
	if (checked_gen != sts_lh->tls_gen) {
		if (onetls_fits() != 0)
			return -1;
		checked_gen = sts_lh->tls_gen;
	}
	__asm__ volatile("mov %%fs:0x30, %0" : "=r"(sts_uguard));
	sts_lh->tls[0].uh_fs = fs;
	sts_wrfs(g, sts_lh->tls[0].lh_fs);
	d = sts_lh->tls_adopt(fs);
	sts_wrfs(g, fs);
	if (!d)
		return onetls_off("the lower half's static TLS not laid out as expected");
	sts_ldtv = d;
	sts_ldtv_gen = sts_lh->tls_gen;
	/* the main thread's end is the process's: nothing to give back */
	if (getpid() != (pid_t)syscall(SYS_gettid))
		(void)__cxa_thread_atexit_impl(onetls_drop, NULL, &__dso_handle);
	/* the thread block's key slots are both halves': after a restart the
	 * lower half's hold pointers into the old lower half (Open MPI's
	 * MPI_Finalize died in orte_util_print_name_args on one) */
	fs = sts_enter_one();
	if (!fs)
		return -1;
	sts_lh->tls_fresh();
	sts_leave_one(fs);
	return 0;
}

/* ---- pthread_cancel with one thread pointer (docs/split.md, "One
 * thread pointer"). Both libcs read the same cancelhandling: a cancel
 * that a thread inside MPI finds at one of the lower libc's cancellation
 * points (a write of MPI-IO) unwinds with the lower half's unwinder,
 * which knows none of the program's frames, into the upper start_thread's
 * jump buffer, mangled with the other guard: the rank dies. So the
 * program's pthread_cancel (this library comes before libc in its lookup
 * scope) makes the rank take two thread pointers for good, and no thread
 * is marked canceled while it is inside a call with one: the canceller
 * marks it pending, makes every thread pass a barrier (membarrier), then
 * reads its guard (the sign of inside, in first and out last), its count
 * of callbacks out of a call, its guard again; a thread inside takes the
 * pending cancel itself in sts_leave, out of every call, and one at a
 * call's start (sts_enter_one reads onetls after its guard is in) backs
 * out to two thread pointers and takes it there. The one xchg of the
 * pending flag decides who cancels. */
__thread uint32_t sts_outs __attribute__((tls_model("initial-exec")));
__thread uint32_t sts_cancel_pending __attribute__((tls_model("initial-exec")));

static int (*real_cancel)(pthread_t);

static int cancel_now(pthread_t th)
{
	if (!real_cancel)
		real_cancel = (int (*)(pthread_t))dlsym(RTLD_NEXT, "pthread_cancel");
	return real_cancel ? real_cancel(th) : ESRCH;
}

void sts_cancel_take(void)
{
	if (sts_outs || !__atomic_load_n(&sts_cancel_pending, __ATOMIC_RELAXED))
		return;
	if (__atomic_exchange_n(&sts_cancel_pending, 0, __ATOMIC_SEQ_CST))
		(void)cancel_now(pthread_self());
}

uint64_t sts_one_back_out(void)
{
	__asm__ volatile("mov %0, %%fs:0x30" : : "r"(sts_uguard) : "memory");
	sts_cancel_take();
	return 0;
}

/* every thread of the process past a full barrier */
static void barrier_all(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return;
	(void)syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
}

/* a thread's instance of one of this library's __thread words: a
 * pthread_t is its thread pointer, initial-exec offsets are the same in
 * every thread */
static uint32_t *of_thread(pthread_t th, uint32_t *mine)
{
	return (uint32_t *)((uintptr_t)th - (sts_tp() - (uintptr_t)mine));
}

int pthread_cancel(pthread_t th)
{
	static uint64_t lg;   /* the lower guard of the lower half that had one */
	uint32_t *pending = of_thread(th, &sts_cancel_pending);
	uint64_t g1, g2;
	uint32_t outs;

	if (msync((void *)sts_lh, 4096, MS_ASYNC) != 0 || sts_lh->magic != STS_LH_MAGIC)
		return cancel_now(th);
	if (sts_lh->lh_guard)
		lg = sts_lh->lh_guard;
	if (!lg)
		return cancel_now(th);   /* never one thread pointer */
	if (sts_lh->onetls)
		onetls_off("pthread_cancel");
	__atomic_store_n(pending, 1, __ATOMIC_SEQ_CST);
	barrier_all();
	g1 = __atomic_load_n((uint64_t *)((uintptr_t)th + 0x30), __ATOMIC_SEQ_CST);
	outs = __atomic_load_n(of_thread(th, &sts_outs), __ATOMIC_SEQ_CST);
	g2 = __atomic_load_n((uint64_t *)((uintptr_t)th + 0x30), __ATOMIC_SEQ_CST);
	if (g1 == lg || outs || g2 == lg)
		return 0;   /* inside: it takes it when it is out */
	if (__atomic_exchange_n(pending, 0, __ATOMIC_SEQ_CST))
		return cancel_now(th);
	return 0;
}
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;

/* a thread that ends gives its lower-half TLS back */
static void slot_free(void *p)
{
	struct sts_tls *t = p;

	if (t && sts_me_gen == sts_lh->tls_gen && t != &sts_lh->tls[0])
		__atomic_store_n(&t->owner, 0, __ATOMIC_RELEASE);
	sts_me = NULL;
}

static void slot_key_make(void)
{
	pthread_key_create(&slot_key, slot_free);
}

/* At SERIALIZED and MULTIPLE: the program's main thread borrows the lower
 * half's main TLS, every other thread a free slot of its own, for as long
 * as it lives in this lower half (a restart's fresh one has new slots). */
struct sts_tls *sts_tls_claim(void)
{
	pid_t tid = gettid();
	struct sts_tls *t = NULL;

	if (tid == getpid()) {
		t = &sts_lh->tls[0];
	} else {
		for (uint32_t i = 1; i < sts_lh->ntls && !t; i++) {
			int32_t free_ = 0;

			if (__atomic_compare_exchange_n(&sts_lh->tls[i].owner, &free_, tid, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				t = &sts_lh->tls[i];
		}
		if (!t) {
			char msg[200];
			int n = snprintf(msg, sizeof(msg), "stasis: rank %d: more than %u threads "
					 "call MPI; the split process lends each one a TLS of "
					 "its own, %u at most\n", sts_lh->world_rank,
					 sts_lh->ntls - 1, sts_lh->ntls - 1);

			/* MPI_Abort's way down borrows the main thread's */
			sts_me = &sts_lh->tls[0];
			sts_me_gen = sts_lh->tls_gen;
			sts_die(msg, n, 1);
		}
		pthread_once(&slot_once, slot_key_make);
		pthread_setspecific(slot_key, t);
	}
	sts_me = t;
	sts_me_gen = sts_lh->tls_gen;
	return t;
}

void sts_park_pending(void)
{
	/* a checkpoint began while this thread was in an MPI call: the signal
	 * found it inside the lower half; now that it is out, it parks */
	syscall(SYS_tgkill, getpid(), gettid(), (int)sts_lh->ckpt_signal);
}

/* Wait (up to 1 s) until whoever reads stderr took the line: MPICH's
 * launcher tears the job down on MPI_Abort and dropped what was still in
 * the pipe (seen: the line missing in about 3% of runs). A pipe reports
 * its unread bytes with FIONREAD, a socket its unconsumed ones with
 * TIOCOUTQ; a terminal or file reports nothing pending. */
static void stderr_drained(void)
{
	struct timespec ts = { 0, 5 * 1000 * 1000 };

	for (int i = 0; i < 200; i++) {
		int in = 0, out = 0;

		if ((ioctl(2, FIONREAD, &in) != 0 || in <= 0) && (ioctl(2, TIOCOUTQ, &out) != 0 || out <= 0))
			break;
		nanosleep(&ts, NULL);
	}
	ts.tv_nsec = 50 * 1000 * 1000;   /* and a moment to pass it on */
	nanosleep(&ts, NULL);
}

void sts_die(const char *msg, int n, int code)
{
	if (n > 0 && write(2, msg, (size_t)n) < 0) {
		/* nothing else to do */
	}
	stderr_drained();
	check_lower();
	STS_LOWER(sts_lh->hand.abort(1 /* world */, code));
	_exit(code ? code : 1);
}

void sts_unsupported(const char *name)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "stasis: %s is not supported by the split process yet "
			 "(docs/split.md); aborting the job\n", name);

	sts_die(msg, n, 1);
}

void sts_unsupported_why(const char *name, const char *why)
{
	char msg[1024];
	int n = snprintf(msg, sizeof(msg), "stasis: %s is not supported by the split process: %s "
			 "(docs/split.md); aborting the job\n", name, why);

	if (n >= (int)sizeof(msg)) {   /* still one line */
		n = (int)sizeof(msg) - 1;
		msg[n - 1] = '\n';
	}
	sts_die(msg, n, 1);
}

/* ---- user reduction operations: called back from the lower half ---- */

/* A slot is free when op_of is 0; op_fn stays after MPI_Op_free, for the
 * reductions still running with the freed operation (lh_calls.c keeps the
 * slot from another operation until they are done) */
static MPI_User_function *op_fn[STS_OP_SLOTS];
static uint32_t op_of[STS_OP_SLOTS];   /* each slot's operation (neutral) */
static int op_next;     /* where the search for a free slot starts */

int sts_gen_Op_free(MPI_Op *op);

static void op_call(int slot, void *in, void *inout, int *len, uint32_t dt)
{
	uint64_t d = sts_out_of();   /* one thread pointer: the program's DTV and guard */
	MPI_Datatype t = (MPI_Datatype)(STS_HCAST)sts_out(STS_DATATYPE, dt);

	op_fn[slot](in, inout, len, &t);
	sts_back_in(d);
}

static const struct sts_uh_callbacks callbacks = { op_call, &_r_debug, STS_WRITTEN_MAGIC,
						     &sts_written };

int PMPI_Op_create(MPI_User_function *fn, int commute, MPI_Op *op)
{
	uint32_t n = 0;
	int slot = 0, i, ret = STS_OP_SLOT_BUSY;

	/* round the slots from the last one taken: a freed operation's slot
	 * is taken again as late as can be (the BLACS create and free one
	 * per combine, thousands in a run of NWChem); one whose freed
	 * operation a request may still call is passed over */
	for (i = 0; i < STS_OP_SLOTS && ret == STS_OP_SLOT_BUSY; i++) {
		slot = (op_next + i) % STS_OP_SLOTS;
		if (!op_of[slot])
			STS_LOWER(ret = sts_lh->hand.op_create(slot, commute, &n));
	}
	if (ret == STS_OP_SLOT_BUSY)
		return sts_fail(MPI_ERR_OTHER, 1, "MPI_Op_create");
	if (ret == 0) {
		op_fn[slot] = fn;
		*op = (MPI_Op)(STS_HCAST)sts_out(STS_OP, n);
		op_of[slot] = n;
		op_next = (slot + 1) % STS_OP_SLOTS;
	}
	return sts_err_world(ret, "MPI_Op_create");
}
int MPI_Op_create(MPI_User_function *fn, int commute, MPI_Op *op)
	__attribute__((weak, alias("PMPI_Op_create")));

/* the operation's slot is free again once the lower half freed it (its
 * function stays: a reduction started before may still call it) */
int PMPI_Op_free(MPI_Op *op)
{
	uint32_t n = sts_in(STS_OP, STS_HVAL(*op));
	int ret = sts_gen_Op_free(op);

	for (int slot = 0; ret == MPI_SUCCESS && n && slot < STS_OP_SLOTS; slot++)
		if (op_of[slot] == n) {
			op_of[slot] = 0;
			break;
		}
	return ret;
}
int MPI_Op_free(MPI_Op *op) __attribute__((weak, alias("PMPI_Op_free")));

/* ---- MPIX_Checkpoint (include/stasis_mpix.h finds this by name) ---- */

int stasis_mpix_checkpoint(int *state) __attribute__((visibility("default")));
int stasis_mpix_checkpoint(int *state)
{
	uint64_t ticket = 0;
	int ret;

	*state = 3;   /* MPIX_CR_STATE_ERROR */
	check_lower();
	STS_LOWER(sts_lh->hand.mpix_ticket(&ticket));
	ret = PMPI_Barrier(MPI_COMM_WORLD);
	if (ret != MPI_SUCCESS)
		return ret;
	STS_LOWER(ret = sts_lh->hand.mpix_request());
	if (ret == 2) {
		struct timespec late = { 2, 0 };

		while (nanosleep(&late, &late) != 0 && errno == EINTR)
			;
		STS_LOWER(ret = sts_lh->hand.mpix_request());
	}
	if (ret == 1) {
		*state = 0;   /* MPIX_CR_STATE_IGNORE: no coordinator */
		return MPI_SUCCESS;
	}
	do
		STS_LOWER(ret = sts_lh->hand.mpix_wait(ticket, state));
	while (ret == STS_AGAIN);
	return sts_err_world(ret, "MPIX_Checkpoint");
}

/* ---- initialization: the lower half initialized the real MPI already ---- */

/* on_exit: the program ends without MPI_Finalize (exit, a return from
 * main); its status tells a recovery policy that the program chose to end,
 * and did not die (docs/coordinator.md, "Events and recovery policies") */
static void quitting(int status, void *arg)
{
	(void)arg;
	/* a child the rank forked runs it too: its exit is not the rank's, and
	 * the lower half's lock may be held by a thread the child lacks
	 * (tls[0].owner: the rank's pid, set by each lower half that starts) */
	if (initialized && !finalized && getpid() == sts_lh->tls[0].owner)
		STS_LOWER(sts_lh->hand.quit(status));
}

int PMPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
	int ret;

	(void)argc;
	(void)argv;
	check_lower();
	if (initialized)
		return MPI_ERR_OTHER;
	sts_lh->uh = &callbacks;
	STS_LOWER(ret = sts_lh->hand.init(required, &thread_level));
	if (ret == 0) {
		initialized = 1;
		on_exit(quitting, NULL);
		main_tid = gettid();
		if (provided)
			*provided = thread_level;
	}
	return sts_err_out(ret);
}
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
	__attribute__((weak, alias("PMPI_Init_thread")));

int PMPI_Init(int *argc, char ***argv)
{
	return PMPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, NULL);
}
int MPI_Init(int *argc, char ***argv) __attribute__((weak, alias("PMPI_Init")));

int PMPI_Initialized(int *flag)
{
	*flag = initialized;
	return MPI_SUCCESS;
}
int MPI_Initialized(int *flag) __attribute__((weak, alias("PMPI_Initialized")));

/* the level MPI_Init_thread gave (lh_init): what the real MPI says may
 * be below it (docs/split.md, "Thread level") */
int PMPI_Query_thread(int *provided)
{
	*provided = thread_level;
	return MPI_SUCCESS;
}
int MPI_Query_thread(int *provided) __attribute__((weak, alias("PMPI_Query_thread")));

int PMPI_Is_thread_main(int *flag)
{
	*flag = gettid() == main_tid;
	return MPI_SUCCESS;
}
int MPI_Is_thread_main(int *flag) __attribute__((weak, alias("PMPI_Is_thread_main")));

int PMPI_Finalized(int *flag)
{
	*flag = finalized;
	return MPI_SUCCESS;
}
int MPI_Finalized(int *flag) __attribute__((weak, alias("PMPI_Finalized")));

int PMPI_Finalize(void)
{
	int ret;

	check_lower();
	ret = sts_attr_finalize();
	if (ret != MPI_SUCCESS)
		return ret;
	do
		STS_LOWER(ret = sts_lh->hand.finalize());
	while (ret == STS_AGAIN);
	finalized = 1;
	return sts_err_world(ret, "MPI_Finalize");
}
int MPI_Finalize(void) __attribute__((weak, alias("PMPI_Finalize")));

int PMPI_Abort(MPI_Comm comm, int code)
{
	uint32_t c = sts_in(STS_COMM, STS_HVAL(comm));

	check_lower();
	STS_LOWER(sts_lh->hand.abort(c, code));
	_exit(code ? code : 1);
}
int MPI_Abort(MPI_Comm comm, int code) __attribute__((weak, alias("PMPI_Abort")));

int PMPI_Pcontrol(const int level, ...)
{
	(void)level;
	return MPI_SUCCESS;
}
int MPI_Pcontrol(const int level, ...) __attribute__((weak, alias("PMPI_Pcontrol")));

/* Time never enters the lower half (no switch; the same clock as MPI's). */
double PMPI_Wtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
double MPI_Wtime(void) __attribute__((weak, alias("PMPI_Wtime")));

double PMPI_Wtick(void)
{
	struct timespec ts;

	clock_getres(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
double MPI_Wtick(void) __attribute__((weak, alias("PMPI_Wtick")));

MPI_Aint PMPI_Aint_add(MPI_Aint base, MPI_Aint disp)
{
	return (MPI_Aint)((char *)base + disp);
}
MPI_Aint MPI_Aint_add(MPI_Aint base, MPI_Aint disp) __attribute__((weak, alias("PMPI_Aint_add")));

MPI_Aint PMPI_Aint_diff(MPI_Aint a, MPI_Aint b)
{
	return (MPI_Aint)((char *)a - (char *)b);
}
MPI_Aint MPI_Aint_diff(MPI_Aint a, MPI_Aint b) __attribute__((weak, alias("PMPI_Aint_diff")));

/* ---- statuses and arrays of requests ---- */

long long sts_status_bytes(const MPI_Status *s);

int PMPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count)
{
	long long bytes = sts_status_bytes(status);
	uint32_t t = sts_in(STS_DATATYPE, STS_HVAL(datatype));
	int size = 0, ret;

	STS_LOWER(ret = sts_lh->gen.Type_size(t, &size));
	if (ret)
		return sts_err_world(ret, "MPI_Get_count");
	if (size == 0)
		*count = bytes == 0 ? 0 : MPI_UNDEFINED;
	else
		*count = bytes % size ? MPI_UNDEFINED : (int)(bytes / size);
	return MPI_SUCCESS;
}
int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count)
	__attribute__((weak, alias("PMPI_Get_count")));

#define REQ_STACK 64

/* neutral copies of n requests and statuses, on the stack when few */
struct reqs {
	uint32_t *r;
	struct sts_status *st;
	uint32_t r_small[REQ_STACK];
	struct sts_status st_small[REQ_STACK];
};

static int reqs_in(struct reqs *q, int n, const MPI_Request *reqs, int statuses)
{
	q->r = q->r_small;
	q->st = statuses ? q->st_small : NULL;
	if (n > REQ_STACK) {
		q->r = malloc((size_t)n * sizeof(*q->r));
		q->st = statuses ? malloc((size_t)n * sizeof(*q->st)) : NULL;
		if (!q->r || (statuses && !q->st)) {
			free(q->r);
			free(q->st);
			return MPI_ERR_NO_MEM;
		}
	}
	for (int i = 0; i < n; i++)
		q->r[i] = sts_in(STS_REQUEST, STS_HVAL(reqs[i]));
	/* the lower half writes the status of a request it completes, and
	 * only that: a null request's is the empty status */
	for (int i = 0; q->st && i < (n > 0 ? n : 1); i++)
		q->st[i] = (struct sts_status){ STS_ANY_SOURCE, MPI_ANY_TAG, 0, 0, 0 };
	return 0;
}

static void reqs_out(struct reqs *q, int n, MPI_Request *reqs, MPI_Status *st, int idx)
{
	for (int i = 0; i < n; i++)
		if (idx < 0 || i == idx)
			reqs[i] = (MPI_Request)(STS_HCAST)sts_out(STS_REQUEST, q->r[i]);
	if (st && q->st) {
		if (idx >= 0)
			sts_status_out(&q->st[0], st);
		else
			for (int i = 0; i < n; i++)
				sts_status_out(&q->st[i], &st[i]);
	}
	if (q->r != q->r_small) {
		free(q->r);
		free(q->st);
	}
}

/* A call that completes several requests, one or more in error: with
 * statuses, MPI_ERR_IN_STATUS (each status has its request's error), else
 * the first error's class; raised on the handler of that request's
 * communicator or file (MPI-3.1 3.7.5, 8.3) */
static int in_status(int neutral_class, int statuses, const char *fn)
{
	if (__builtin_expect(neutral_class == 0, 1))
		return MPI_SUCCESS;
	return sts_raise_req(statuses ? MPI_ERR_IN_STATUS : sts_err_class_out(neutral_class), fn);
}

/* one MPI_Start after the other (MPI-3.1 3.9 allows any order); the
 * first error stops it, raised by that MPI_Start */
int PMPI_Startall(int n, MPI_Request reqs[])
{
	int ret = MPI_SUCCESS;

	for (int i = 0; i < n && ret == MPI_SUCCESS; i++)
		ret = PMPI_Start(&reqs[i]);
	return ret;
}
int MPI_Startall(int n, MPI_Request reqs[]) __attribute__((weak, alias("PMPI_Startall")));

int PMPI_Waitall(int n, MPI_Request reqs[], MPI_Status st[])
{
	struct reqs q;
	int ret = reqs_in(&q, n, reqs, st != MPI_STATUSES_IGNORE);

	if (ret)
		return sts_fail(ret, 1, "MPI_Waitall");
	do
		STS_LOWER(ret = sts_lh->hand.waitall(n, q.r, q.st));
	while (ret == STS_AGAIN);
	reqs_out(&q, n, reqs, st == MPI_STATUSES_IGNORE ? NULL : st, -1);
	return in_status(ret, st != MPI_STATUSES_IGNORE, "MPI_Waitall");
}
int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status st[]) __attribute__((weak, alias("PMPI_Waitall")));

int PMPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status st[])
{
	struct reqs q;
	int ret = reqs_in(&q, n, reqs, st != MPI_STATUSES_IGNORE);

	if (ret)
		return sts_fail(ret, 1, "MPI_Testall");
	STS_LOWER(ret = sts_lh->hand.testall(n, q.r, flag, q.st));
	reqs_out(&q, n, reqs, st == MPI_STATUSES_IGNORE || !*flag ? NULL : st, -1);
	return in_status(ret, st != MPI_STATUSES_IGNORE, "MPI_Testall");
}
int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status st[])
	__attribute__((weak, alias("PMPI_Testall")));

int PMPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st)
{
	struct reqs q;
	int ret = reqs_in(&q, n, reqs, st != MPI_STATUS_IGNORE);

	if (ret)
		return sts_fail(ret, 1, "MPI_Waitany");
	do
		STS_LOWER(ret = sts_lh->hand.waitany(n, q.r, index, q.st));
	while (ret == STS_AGAIN);
	reqs_out(&q, n, reqs, st == MPI_STATUS_IGNORE || *index == MPI_UNDEFINED ? NULL : st,
		 *index == MPI_UNDEFINED ? n : *index);
	return sts_err_req(ret, "MPI_Waitany");
}
int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st)
	__attribute__((weak, alias("PMPI_Waitany")));

int PMPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st)
{
	struct reqs q;
	int ret = reqs_in(&q, n, reqs, st != MPI_STATUS_IGNORE);

	if (ret)
		return sts_fail(ret, 1, "MPI_Testany");
	STS_LOWER(ret = sts_lh->hand.testany(n, q.r, index, flag, q.st));
	reqs_out(&q, n, reqs,
		 st == MPI_STATUS_IGNORE || !*flag || *index == MPI_UNDEFINED ? NULL : st,
		 *flag && *index != MPI_UNDEFINED ? *index : n);
	return sts_err_req(ret, "MPI_Testany");
}
int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st)
	__attribute__((weak, alias("PMPI_Testany")));

static int some(int wait, const char *name, int n, MPI_Request reqs[], int *outcount, int indices[],
		MPI_Status st[])
{
	struct reqs q;
	int ret = reqs_in(&q, n, reqs, st != MPI_STATUSES_IGNORE);

	if (ret)
		return sts_fail(ret, 1, name);
	do
		STS_LOWER(ret = wait ? sts_lh->hand.waitsome(n, q.r, outcount, indices, q.st)
				     : sts_lh->hand.testsome(n, q.r, outcount, indices, q.st));
	while (ret == STS_AGAIN);
	for (int k = 0; *outcount != MPI_UNDEFINED && k < *outcount; k++) {
		int i = indices[k];

		reqs[i] = (MPI_Request)(STS_HCAST)sts_out(STS_REQUEST, q.r[i]);
		if (st != MPI_STATUSES_IGNORE)
			sts_status_out(&q.st[k], &st[k]);
	}
	if (q.r != q.r_small) {
		free(q.r);
		free(q.st);
	}
	return in_status(ret, st != MPI_STATUSES_IGNORE, name);
}

int PMPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status st[])
{
	return some(1, "MPI_Waitsome", n, reqs, outcount, indices, st);
}
int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status st[])
	__attribute__((weak, alias("PMPI_Waitsome")));

int PMPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status st[])
{
	return some(0, "MPI_Testsome", n, reqs, outcount, indices, st);
}
int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status st[])
	__attribute__((weak, alias("PMPI_Testsome")));

int PMPI_Type_create_struct(int n, const int bl[], const MPI_Aint displs[],
			    const MPI_Datatype types[], MPI_Datatype *newtype)
{
	uint32_t small[REQ_STACK], *t = n > REQ_STACK ? malloc((size_t)n * sizeof(*t)) : small;
	uint32_t out = 0;
	int ret;

	if (!t)
		return sts_fail(MPI_ERR_NO_MEM, 1, "MPI_Type_create_struct");
	for (int i = 0; i < n; i++)
		t[i] = sts_in(STS_DATATYPE, STS_HVAL(types[i]));
	STS_LOWER(ret = sts_lh->hand.type_create_struct(n, bl, displs, t, &out));
	if (ret == 0)
		*newtype = (MPI_Datatype)(STS_HCAST)sts_out(STS_DATATYPE, out);
	if (t != small)
		free(t);
	return sts_err_world(ret, "MPI_Type_create_struct");
}
int MPI_Type_create_struct(int n, const int bl[], const MPI_Aint displs[],
			   const MPI_Datatype types[], MPI_Datatype *newtype)
	__attribute__((weak, alias("PMPI_Type_create_struct")));

/* ---- datatype contents and element counts (functions.list: both) ---- */

/* a subarray's or darray's ints, neutral from the lower half, in the ABI's
 * values (lh_state.c's translate_ints, the other way) */
static void contents_out(int comb, int *I, int ni)
{
	if (comb == MPI_COMBINER_SUBARRAY && ni > 0 && ni == 3 * I[0] + 2) {
		I[3 * I[0] + 1] = sts_order_out(I[3 * I[0] + 1]);
	} else if (comb == MPI_COMBINER_DARRAY && ni > 2 && ni == 4 * I[2] + 4) {
		int n = I[2];

		for (int i = 0; i < n; i++) {
			I[3 + n + i] = sts_distrib_out(I[3 + n + i]);
			I[3 + 2 * n + i] = sts_darg_out(I[3 + 2 * n + i]);
		}
		I[3 + 4 * n] = sts_order_out(I[3 + 4 * n]);
	}
}

int PMPI_Type_get_contents(MPI_Datatype mtype, int max_integers, int max_addresses,
			   int max_datatypes, int ints[], MPI_Aint aints[], MPI_Datatype types[])
{
	uint32_t t = sts_in(STS_DATATYPE, STS_HVAL(mtype));
	uint32_t *n = calloc((size_t)(max_datatypes > 0 ? max_datatypes : 1), sizeof(*n));
	int ni = 0, na = 0, nd = 0, comb = 0, ret;

	if (!n)
		return sts_fail(MPI_ERR_NO_MEM, 1, "MPI_Type_get_contents");
	STS_LOWER(ret = sts_lh->gen.Type_get_envelope(t, &ni, &na, &nd, &comb));
	if (ret == 0)
		STS_LOWER(ret = sts_lh->gen.Type_get_contents(t, max_integers, max_addresses,
							      max_datatypes, ints, (sts_aint *)aints, n));
	if (ret == 0) {
		for (int i = 0; i < nd && i < max_datatypes; i++)
			types[i] = (MPI_Datatype)(STS_HCAST)sts_out(STS_DATATYPE, n[i]);
		if (max_integers >= ni)
			contents_out(sts_combiner_out(comb), ints, ni);
	}
	free(n);
	return sts_err_world(ret, "MPI_Type_get_contents");
}
int MPI_Type_get_contents(MPI_Datatype mtype, int max_integers, int max_addresses,
			  int max_datatypes, int ints[], MPI_Aint aints[], MPI_Datatype types[])
	__attribute__((weak, alias("PMPI_Type_get_contents")));

/* The lower half counts elements on a status of its own MPI that holds
 * the same number of bytes: the type map is the real MPI's to read. */
static int elements(const MPI_Status *status, MPI_Datatype dt, long long *count, const char *fn)
{
	struct sts_status n = { 0 };
	sts_count c = 0;
	int ret;

	n.count = sts_status_bytes(status);
	STS_LOWER(ret = sts_lh->gen.Get_elements_x(&n, sts_in(STS_DATATYPE, STS_HVAL(dt)), &c));
	*count = c;
	return sts_err_world(ret, fn);
}

int PMPI_Get_elements_x(const MPI_Status *status, MPI_Datatype dt, MPI_Count *count)
{
	long long c = 0;
	int ret = elements(status, dt, &c, "MPI_Get_elements_x");

	if (ret == MPI_SUCCESS)
		*count = (MPI_Count)c;
	return ret;
}
int MPI_Get_elements_x(const MPI_Status *status, MPI_Datatype dt, MPI_Count *count)
	__attribute__((weak, alias("PMPI_Get_elements_x")));

int PMPI_Get_elements(const MPI_Status *status, MPI_Datatype dt, int *count)
{
	long long c = 0;
	int ret = elements(status, dt, &c, "MPI_Get_elements");

	if (ret == MPI_SUCCESS)
		*count = c > 0x7fffffff ? MPI_UNDEFINED : (int)c;
	return ret;
}
int MPI_Get_elements(const MPI_Status *status, MPI_Datatype dt, int *count)
	__attribute__((weak, alias("PMPI_Get_elements")));

int PMPI_Status_set_elements_x(MPI_Status *status, MPI_Datatype dt, MPI_Count count)
{
	struct sts_status n = { 0 };
	int ret;

	STS_LOWER(ret = sts_lh->gen.Status_set_elements_x(&n, sts_in(STS_DATATYPE, STS_HVAL(dt)),
							   (sts_count)count));
	if (ret == 0)
		sts_status_set_bytes(status, n.count);
	return sts_err_world(ret, "MPI_Status_set_elements_x");
}
int MPI_Status_set_elements_x(MPI_Status *status, MPI_Datatype dt, MPI_Count count)
	__attribute__((weak, alias("PMPI_Status_set_elements_x")));

int PMPI_Status_set_elements(MPI_Status *status, MPI_Datatype dt, int count)
{
	return PMPI_Status_set_elements_x(status, dt, count);
}
int MPI_Status_set_elements(MPI_Status *status, MPI_Datatype dt, int count)
	__attribute__((weak, alias("PMPI_Status_set_elements")));

int PMPI_Status_set_cancelled(MPI_Status *status, int flag)
{
	sts_status_set_cancelled(status, flag);
	return MPI_SUCCESS;
}
int MPI_Status_set_cancelled(MPI_Status *status, int flag)
	__attribute__((weak, alias("PMPI_Status_set_cancelled")));

int PMPI_Test_cancelled(const MPI_Status *status, int *flag)
{
	*flag = sts_status_cancelled(status);
	return MPI_SUCCESS;
}
int MPI_Test_cancelled(const MPI_Status *status, int *flag)
	__attribute__((weak, alias("PMPI_Test_cancelled")));

int sts_gen_Type_match_size(int typeclass, int size, MPI_Datatype *type);

/* The same answer above either MPI (a program keeps it across a restart
 * and compares): the Fortran types of MPI-3.1 17.1.9 of that size, named
 * by Stasis (Open MPI 4.1 says MPI_INTEGER for 4 bytes where MPICH says
 * MPI_INTEGER4); other sizes the MPI's own answer. */
int PMPI_Type_match_size(int typeclass, int size, MPI_Datatype *type)
{
	MPI_Datatype t = MPI_DATATYPE_NULL;

	if (typeclass == MPI_TYPECLASS_INTEGER)
		t = size == 1 ? MPI_INTEGER1 : size == 2 ? MPI_INTEGER2 : size == 4 ? MPI_INTEGER4 :
		    size == 8 ? MPI_INTEGER8 : MPI_DATATYPE_NULL;
	else if (typeclass == MPI_TYPECLASS_REAL)
		t = size == 4 ? MPI_REAL4 : size == 8 ? MPI_REAL8 : MPI_DATATYPE_NULL;
	else if (typeclass == MPI_TYPECLASS_COMPLEX)
		t = size == 8 ? MPI_COMPLEX8 : size == 16 ? MPI_COMPLEX16 : MPI_DATATYPE_NULL;
	if (t == MPI_DATATYPE_NULL)
		return sts_gen_Type_match_size(typeclass, size, type);
	*type = t;
	return MPI_SUCCESS;
}
int MPI_Type_match_size(int typeclass, int size, MPI_Datatype *type)
	__attribute__((weak, alias("PMPI_Type_match_size")));

/* ---- the buffer of buffered sends ----
 * The program's own: the lower half sends a copy of each buffered message
 * (lh_p2p.c), so the real MPI never has a buffer attached, and there is
 * nothing to attach again at a restart. Kept here, in the upper half's
 * memory, for MPI_Buffer_detach to give back. */
static void *bsend_buf;
static int bsend_size, bsend_attached;

int PMPI_Buffer_attach(void *buffer, int size)
{
	if (bsend_attached || size < 0)   /* one buffer at a time (MPI-3.1 3.6.1) */
		return sts_fail(MPI_ERR_BUFFER, 1, "MPI_Buffer_attach");
	bsend_buf = buffer;
	bsend_size = size;
	bsend_attached = 1;
	return MPI_SUCCESS;
}
int MPI_Buffer_attach(void *buffer, int size) __attribute__((weak, alias("PMPI_Buffer_attach")));

int PMPI_Buffer_detach(void *buffer_addr, int *size)
{
	int ret;

	/* every buffered message delivered first, as MPI's detach waits */
	do
		STS_LOWER(ret = sts_lh->gen.Buffer_detach(buffer_addr, size));
	while (ret == STS_AGAIN);
	if (ret)
		return sts_err_world(ret, "MPI_Buffer_detach");
	*(void **)buffer_addr = bsend_attached ? bsend_buf : NULL;
	*size = bsend_attached ? bsend_size : 0;
	bsend_attached = 0;
	return MPI_SUCCESS;
}
int MPI_Buffer_detach(void *buffer_addr, int *size) __attribute__((weak, alias("PMPI_Buffer_detach")));
