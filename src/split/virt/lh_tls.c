/* lh_tls.c - a lower-half TLS for every upper thread that calls MPI, and
 * the lower half's lock (docs/split.md, "MPI from every thread").
 *
 * An upper thread inside an MPI call runs the lower half's code on the
 * lower half's TLS. Below MPI_THREAD_SERIALIZED one thread calls MPI, and
 * it borrows the main thread's. At SERIALIZED and MULTIPLE each calling
 * thread borrows one of its own: the TLS of a dormant thread started here
 * (it only waits, its stack unused), so that libc's errno and
 * pthread_self(), MPICH's and Open MPI's per-thread state, and the lower
 * half's own __thread variables (lh_me: which slot is this thread's) are
 * per thread as MPI expects. The dormant threads exist before the
 * checkpoint thread lists the lower half's threads, so they are never
 * signaled.
 *
 * The lower half's own state (handle tables, the ledger, message counts,
 * the drain buffer) is kept by one thread at a time: at those levels every
 * call takes the lock (sts_enter), recursive for a callback into the upper
 * half that calls MPI again. A call that waits lets it go between two
 * tests of its requests when another thread wants it (lh_tls_yield), so a
 * thread that waits for a message another thread of the rank sends gets
 * it. A call that waits inside the real MPI for the other members of a
 * communicator (one made, a collective on a file) lets it go for that
 * call (lh_lock_out): the member another rank waits for may be another
 * thread of this one.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <link.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "lh.h"
#include "lh_ckpt.h"
#include "sts_libc_id.h"

__thread struct sts_tls *lh_me;

void *lh_tls_pad_at(size_t *len);   /* lh_tlspad.c */

#define DORMANT_STACK (64 * 1024)
#define DORMANT_PAD (80 * 1024)   /* more where the padding is linked (lh_tlspad.c) */

static uint32_t lock_word;            /* 0 free, 1 held, 2 held and wanted */
static struct sts_tls *lock_owner;    /* whose TLS holds it (NULL: the checkpoint thread's) */
static unsigned lock_depth;
static uint32_t started;

static long futex(uint32_t *w, int op, uint32_t v)
{
	return syscall(SYS_futex, w, op, v, NULL, NULL, 0);
}

static void lock_take(void)
{
	uint32_t c = 0;

	if (__atomic_compare_exchange_n(&lock_word, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	if (c != 2)
		c = __atomic_exchange_n(&lock_word, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		futex(&lock_word, FUTEX_WAIT_PRIVATE, 2);
		c = __atomic_exchange_n(&lock_word, 2, __ATOMIC_ACQUIRE);
	}
}

static void lock_give(void)
{
	if (__atomic_exchange_n(&lock_word, 0, __ATOMIC_RELEASE) == 2)
		futex(&lock_word, FUTEX_WAKE_PRIVATE, 1);
}

void lh_lock(void)
{
	if (lh_me && __atomic_load_n(&lock_owner, __ATOMIC_RELAXED) == lh_me) {
		lock_depth++;
		return;
	}
	lock_take();
	lock_owner = lh_me;
	lock_depth = 1;
}

void lh_unlock(void)
{
	if (--lock_depth)
		return;
	lock_owner = NULL;
	lock_give();
}

void lh_tls_yield(void)
{
	struct sts_tls *me;
	unsigned depth;

	if (lh_info->ntls == 1 || __atomic_load_n(&lock_word, __ATOMIC_RELAXED) != 2)
		return;
	me = lock_owner;
	depth = lock_depth;
	lock_owner = NULL;
	lock_give();
	sched_yield();
	lock_take();
	lock_owner = me;
	lock_depth = depth;
}

/* Only the outermost call of an upper thread lets go: one made inside a
 * callback of another (an error handler, a reduction) keeps the lock,
 * which the outer call's frame relies on, and so does the lower half's own
 * (the checkpoint thread's, a restart's rebuild). */
unsigned lh_lock_out(void)
{
	unsigned depth = lock_depth;

	if (lh_info->ntls == 1 || !lh_me ||
	    __atomic_load_n(&lock_owner, __ATOMIC_RELAXED) != lh_me || depth != 1)
		return 0;
	lock_owner = NULL;
	lock_depth = 0;
	lock_give();
	return depth;
}

void lh_lock_back(unsigned depth)
{
	if (!depth)
		return;
	lock_take();
	lock_owner = lh_me;
	lock_depth = depth;
}

static void *dormant(void *arg)
{
	struct sts_tls *t = arg;

	lh_me = t;
	t->lh_fs = sts_rdfs(0);
	__atomic_add_fetch(&started, 1, __ATOMIC_RELEASE);
	futex(&started, FUTEX_WAKE_PRIVATE, 1);
	for (;;)
		pause();
	return NULL;
}

int lh_tls_start(void)
{
	struct timespec ts;
	pthread_attr_t attr;
	sigset_t all, old;
	uint32_t want = STS_TLS_SLOTS - 1, n;
	size_t padlen;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	lh_info->tls_gen = (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ getpid()) | 1;
	lh_info->tls[0].lh_fs = lh_info->lh_fs;
	lh_info->tls[0].owner = getpid();
	lh_info->ntls = 1;
	lh_info->lock = lh_lock;
	lh_info->unlock = lh_unlock;
	lh_me = &lh_info->tls[0];
	if (lh_info->thread_provided < MPI_THREAD_SERIALIZED)
		return 0;
	sigfillset(&all);
	sigdelset(&all, LH_CKPT_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_attr_init(&attr);
	lh_tls_pad_at(&padlen);
	pthread_attr_setstacksize(&attr, DORMANT_STACK + (padlen ? DORMANT_PAD : 0));
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (uint32_t i = 1; i <= want; i++) {
		pthread_t th;

		if (pthread_create(&th, &attr, dormant, &lh_info->tls[i]) != 0) {
			want = i - 1;
			break;
		}
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	while ((n = __atomic_load_n(&started, __ATOMIC_ACQUIRE)) < want)
		futex(&started, FUTEX_WAIT_PRIVATE, n);
	if (want < 1)
		return -1;
	lh_info->ntls = want + 1;
	return 0;
}

struct sts_tls *lh_tls_of_tid(int32_t tid)
{
	for (uint32_t i = 0; i < lh_info->ntls; i++)
		if (__atomic_load_n(&lh_info->tls[i].owner, __ATOMIC_RELAXED) == tid)
			return &lh_info->tls[i];
	return NULL;
}

int lh_tls_lent(uint64_t fs)
{
	for (uint32_t i = 0; i < lh_info->ntls; i++)
		if (lh_info->tls[i].lh_fs == fs)
			return 1;
	return 0;
}

void lh_hold_me(void)
{
	if (lh_info->ntls > 1)
		lh_me->hold = 1;
	else
		lh_info->ckpt_pending = 1;
}

/* ---- split_onetls: the lower half's TLS below the upper
 * thread pointer (docs/split.md, "One thread pointer"). Called once per
 * upper thread and lower half through the two-pointer crossing, on
 * the lower half's main TLS: initializes every static TLS block of the
 * lower half at the same offset below utp as below its own thread
 * pointer (lh_tlspad.c's padding left out: the upper half's static TLS
 * is there), and returns a DTV for the thread, to be put at %fs:8 while
 * it runs the lower half's code. */
struct adopt {
	uint64_t ltp, utp;
	uint64_t *ldtv;             /* the main thread's DTV: dtv[0] at ldtv[0..1] */
	uint64_t *dtv;              /* the new one, same layout */
	int bad;
};

static int adopt_module(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct adopt *a = arg;
	const ElfW(Phdr) *tls = NULL;
	size_t mod = info->dlpi_tls_modid, padlen, memsz, filesz;
	uint64_t at, dest;
	char *pad;

	(void)sz;
	for (int i = 0; mod && i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_TLS)
			tls = &info->dlpi_phdr[i];
	/* a module of dynamic TLS (to_free set) or none yet: __tls_get_addr
	 * allocates it for this thread when it is first used */
	if (!tls || !info->dlpi_tls_data || a->ldtv[2 * mod + 1] != 0)
		return 0;
	at = (uint64_t)(uintptr_t)info->dlpi_tls_data;
	dest = a->utp - (a->ltp - at);
	memsz = tls->p_memsz;
	filesz = tls->p_filesz;
	pad = lh_tls_pad_at(&padlen);
	if ((uint64_t)(uintptr_t)pad >= at && (uint64_t)(uintptr_t)pad < at + memsz) {
		if ((uint64_t)(uintptr_t)pad + padlen != at + memsz)
			a->bad = 1;    /* something of ours above the padding */
		memsz = (size_t)((uint64_t)(uintptr_t)pad - at);
		if (filesz > memsz)
			filesz = memsz;
	}
	memcpy((void *)(uintptr_t)dest, (const void *)(info->dlpi_addr + tls->p_vaddr), filesz);
	memset((char *)(uintptr_t)dest + filesz, 0, memsz - filesz);
	a->dtv[2 * mod] = dest;
	a->dtv[2 * mod + 1] = 0;
	return 0;
}

static uint64_t lh_tls_adopt(uint64_t utp)
{
	struct adopt a = { .ltp = sts_tp(), .utp = utp };
	uint64_t *d, len;

	__asm__ volatile("mov %%fs:8, %0" : "=r"(a.ldtv));
	len = a.ldtv[-2];                        /* dtv[-1].counter: entries */
	d = calloc(len + 2, 16);
	if (!d)
		return 0;
	d[0] = len;
	a.dtv = d + 2;
	a.dtv[0] = a.ldtv[0];                    /* dtv[0].counter: generation */
	for (uint64_t i = 1; i <= len; i++)
		a.dtv[2 * i] = (uint64_t)-1;     /* TLS_DTV_UNALLOCATED */
	dl_iterate_phdr(adopt_module, &a);
	if (a.bad) {
		free(d);
		return 0;
	}
	/* the lower half's code on this thread may race its own threads in
	 * catomic_* (malloc), which skip the lock prefix while this is 0 */
	((volatile int *)(uintptr_t)utp)[6] = 1;   /* tcbhead_t.multiple_threads */
	/* what the lower libc's start_thread sets in a new thread
	 * (__ctype_init): the ctype tables of the global locale */
	{
		const void *loc[3] = { __ctype_b_loc(), __ctype_toupper_loc(),
				       __ctype_tolower_loc() };

		for (int i = 0; i < 3; i++)
			*(const void **)(uintptr_t)((uint64_t)(uintptr_t)loc[i] - a.ltp + utp) =
				*(const void *const *)loc[i];
	}
	/* the lower half's own per-thread state: this thread's slot */
	*(struct sts_tls **)(uintptr_t)((uint64_t)(uintptr_t)&lh_me - a.ltp + utp) = &lh_info->tls[0];
	return (uint64_t)(uintptr_t)a.dtv;
}

/* Both libcs index the same struct pthread's key slots with their own
 * tables: the lower half keeps the indices below keys_upper_from (the
 * ones it uses and 8 more for keys it makes later), every other one is
 * taken in its table; the upper half reserves those below in its own. */
#define LH_KEYS_SPARE 8

static void lh_onetls_keys(void)
{
	pthread_key_t k, first = 0;
	int n = 0;

	while (pthread_key_create(&k, NULL) == 0) {
		if (!n++)
			first = k;
	}
	for (pthread_key_t i = first; n && i < first + LH_KEYS_SPARE; i++)
		pthread_key_delete(i);
	lh_info->keys_upper_from = (uint32_t)first + LH_KEYS_SPARE;
}

static void lh_tls_fresh(void)
{
	for (pthread_key_t k = 0; k < lh_info->keys_upper_from; k++)
		(void)pthread_setspecific(k, NULL);   /* EINVAL: an index not in use */
}

/* glibc's table of pthread keys (GLIBC_PRIVATE, the layout
 * libthread_db reads): an odd seq is a key in use */
struct lh_key {
	uintptr_t seq;
	void (*destr)(void *);
};
static struct lh_key *lh_keys;

/* The lower libc's tcache pointer (a static TLS word of libc's, not
 * exported): its offset below the thread pointer, found once on a lower
 * thread of our own as the word pointing to a tcache whose first bin holds
 * the chunk just freed; 0 if none was. glibc 2.36's layout (malloc.c):
 * 64 uint16_t counts, then 64 entries, each a chunk whose first word is
 * its next, mangled with its own address >> 12, its second the key. */
#define TC_BINS 64
static uint64_t tcache_off;

static int lh_mapped(uint64_t at, uint64_t len)
{
	uint64_t pg = at & ~4095ull;

	return msync((void *)(uintptr_t)pg, at + len - pg, MS_ASYNC) == 0;
}

static void *tcache_probe(void *arg)
{
	uint64_t tp = sts_tp(), *word = (uint64_t *)(uintptr_t)__errno_location();
	void *p = malloc(24);
	int found = 0;

	(void)arg;
	free(p);
	/* libc's static block: 0x90 bytes around errno's word */
	for (int i = -32; p && i < 32; i++) {
		uint64_t v = word[i];

		if (!v || (v & 15) || !lh_mapped(v, 128 + 8 * TC_BINS) ||
		    ((void **)(uintptr_t)(v + 128))[0] != p)
			continue;
		tcache_off = tp - (uint64_t)(uintptr_t)&word[i];
		found++;
	}
	if (found != 1)
		tcache_off = 0;
	return NULL;
}

/* What glibc's tcache_thread_shutdown does, with frees that stay out of
 * the tcache (its counts full) rather than a shutting-down flag */
static void lh_tcache_flush(void)
{
	uint64_t *word;
	char *tc;
	void *head[TC_BINS];

	if (!tcache_off)
		return;
	word = (uint64_t *)(uintptr_t)(sts_tp() - tcache_off);
	tc = (char *)(uintptr_t)*word;
	if (!tc)
		return;
	for (int i = 0; i < TC_BINS; i++) {
		head[i] = ((void **)(tc + 128))[i];
		((void **)(tc + 128))[i] = NULL;
		((uint16_t *)tc)[i] = UINT16_MAX;
	}
	for (int i = 0; i < TC_BINS; i++) {
		for (uintptr_t *e = head[i], *next; e; e = next) {
			next = (uintptr_t *)(((uintptr_t)e >> 12) ^ e[0]);
			e[1] = 0;
			free(e);
		}
	}
	free(tc);
	*word = 0;
}

/* An upper thread that ends: glibc's start_thread frees a thread's key
 * values, DTV, dynamic TLS and tcache, but the upper libc's knows none
 * of the lower half's. Its keys' destructors run as glibc runs them, up
 * to PTHREAD_DESTRUCTOR_ITERATIONS rounds; the DTV's dynamic blocks and
 * the DTV (lh_tls_adopt's, or __tls_get_addr's larger one) go; then the
 * tcache and the chunks it holds (Open MPI's Comm_dup and Comm_free left
 * 9 KiB a thread there). Not undone: the arena's count of its threads
 * (static in libc), which only decides which arena a new thread takes. */
static void lh_tls_drop(void)
{
	uint64_t *dtv, len;

	for (int round = 0, again = 1; lh_keys && again && round < 4; round++) {
		again = 0;
		for (pthread_key_t k = 0; k < lh_info->keys_upper_from; k++) {
			void *v = pthread_getspecific(k);

			if (!v || !(lh_keys[k].seq & 1) || !lh_keys[k].destr)
				continue;
			(void)pthread_setspecific(k, NULL);
			lh_keys[k].destr(v);
			again = 1;
		}
	}
	__asm__ volatile("mov %%fs:8, %0" : "=r"(dtv));
	len = dtv[-2];
	for (uint64_t i = 1; i <= len; i++)
		free((void *)(uintptr_t)dtv[2 * i + 1]);   /* to_free: a dynamic block */
	free(dtv - 2);
	lh_tcache_flush();
}

/* how far below the thread pointer the static blocks reach (the
 * padding's start for the upper half, the lowest block for the lower) */
static int tls_extent(struct dl_phdr_info *info, size_t sz, void *arg)
{
	uint64_t *ext = arg, tp = sts_tp(), at = (uint64_t)(uintptr_t)info->dlpi_tls_data;
	uint64_t *dtv;

	(void)sz;
	__asm__ volatile("mov %%fs:8, %0" : "=r"(dtv));
	if (!info->dlpi_tls_modid || !at || dtv[2 * info->dlpi_tls_modid + 1] != 0)
		return 0;   /* none, or dynamic TLS (to_free set) */
	if (tp - at > ext[0])
		ext[0] = tp - at;
	return 0;
}

/* Read split_onetls once, at the rank's start and at each restart's
 * fresh lower half. Only below SERIALIZED: a thread of its own per
 * caller needs none of the one-TLS machinery (docs/split.md). */
void lh_onetls_setup(void)
{
	size_t padlen;
	uint64_t need = 0;
	char *pad = lh_tls_pad_at(&padlen);
	struct sts_libc_id id;

	lh_info->onetls = 0;
	if (cfg_load(NULL) != 0 || strcmp(cfg_str(CFG_SPLIT_ONETLS), "on") != 0)
		return;   /* a bad configuration: lh_agent_start says why */
	if (lh_info->ntls != 1) {
		lh_log(LOG_WARN, "rank %d: split_onetls: two thread pointers (thread level "
		       "serialized or multiple)", lh_info->world_rank);
		return;
	}
	if (!pad) {
		lh_log(LOG_WARN, "rank %d: split_onetls: two thread pointers (a lower half "
		       "without the room for the program's TLS: its -nopad executable)",
		       lh_info->world_rank);
		return;
	}
	sts_libc_id(&id);
	lh_info->libc_id_len = id.len;
	memcpy(lh_info->libc_id, id.id, sizeof(lh_info->libc_id));
	dl_iterate_phdr(tls_extent, &need);
	lh_info->tls_need = need;
	lh_info->tls_room = sts_tp() - (uint64_t)(uintptr_t)pad;
	__asm__ volatile("mov %%fs:0x30, %0" : "=r"(lh_info->lh_guard));
	lh_info->tls_adopt = lh_tls_adopt;
	lh_info->tls_fresh = lh_tls_fresh;
	lh_keys = dlvsym(RTLD_DEFAULT, "__pthread_keys", "GLIBC_PRIVATE");
	lh_info->tls_drop = lh_tls_drop;
	{
		pthread_t th;

		if (pthread_create(&th, NULL, tcache_probe, NULL) == 0)
			pthread_join(th, NULL);
	}
	lh_onetls_keys();
	lh_info->onetls = 1;
}
