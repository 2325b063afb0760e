/* uh_mem.c - the upper half's mappings stay in its range.
 *
 * Why: a checkpoint saves the upper half alone, and a restart puts a fresh
 * lower half under it, of either MPI, with its libraries wherever the
 * kernel puts them. That can work only if every upper mapping lies in
 * [STS_UPPER_LO, STS_UPPER_HI), where the lower half never maps
 * (sts_mpi.h). ld.so's startup mappings get there because the lower half
 * filled the address space above the upper stack (src/split/lower/lh_mem.c);
 * everything after goes through the upper libc's mmap, munmap and mremap,
 * whose glibc-internal callers (malloc, thread stacks, stdio) call the same
 * code. So the constructor below overwrites the entry of those three with
 * an absolute jump to the functions here, then lets the lower half remove
 * its reservations. A request without a fixed address is placed in the
 * arena [STS_UPPER_LO, STS_UH_STACK_TOP): at its hint if that lies in the
 * arena and is free, else at the top of the first free hole that fits, else
 * just below "next", which moves down. Everything is placed with
 * MAP_FIXED_NOREPLACE, so a mapping this allocator was not told about (the
 * lower half's during startup, a program's MAP_FIXED) shows up as EEXIST
 * and is stepped around, never overwritten; fixed requests pass through.
 * The state is this library's .bss, inside the range: it is saved and
 * restored with the upper half. System calls are raw (no libc call that
 * could come back here), errno is the upper libc's (this code runs with
 * the upper TLS). A dlopen after startup maps with ld.so's own copy of mmap
 * and munmap, which are patched the same way (patch_ldso).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uh.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#define MAP_HUGE_MASK 0x3f
#endif

#define PAGE 4096ull
#define ARENA_LO STS_UPPER_LO
#define ARENA_HI STS_UH_STACK_TOP
#define THP (2ull << 20)        /* large anonymous mappings start on a huge page */
#define HOLES 256
#define TRIES 64                /* conflicts stepped around per request */
#define IS_ERR(r) ((unsigned long)(r) > -4096ul)

static struct {
	int lock;
	uint64_t next;          /* [ARENA_LO, next) was never handed out */
	int nholes;
	struct {
		uint64_t lo, hi;
	} hole[HOLES];          /* free ranges above next, disjoint, not touching */
} mem;

static long sys(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long r;

	__asm__ volatile("syscall" : "=a"(r) : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8),
			 "r"(r9) : "rcx", "r11", "memory");
	return r;
}

/* the allocator's lock: a spinlock that yields the CPU when it waits long */
static void lock(void)
{
	while (__atomic_exchange_n(&mem.lock, 1, __ATOMIC_ACQUIRE))
		for (int i = 0; __atomic_load_n(&mem.lock, __ATOMIC_RELAXED); i++)
			if (i < 100)
				__builtin_ia32_pause();
			else
				sys(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
}

static void unlock(void)
{
	__atomic_store_n(&mem.lock, 0, __ATOMIC_RELEASE);
}

static void hole_del(int i)
{
	mem.hole[i] = mem.hole[--mem.nholes];
}

static void hole_put(uint64_t lo, uint64_t hi)
{
	if (mem.nholes < HOLES) {   /* else forgotten: address space lost, no memory */
		mem.hole[mem.nholes].lo = lo;
		mem.hole[mem.nholes++].hi = hi;
	}
}

/* [lo, hi) is free: a hole, merged with the ones it touches; a hole that
 * reaches down to next moves next up instead. */
static void hole_add(uint64_t lo, uint64_t hi)
{
	if (lo < mem.next)
		lo = mem.next;
	if (hi > ARENA_HI)
		hi = ARENA_HI;
	if (lo >= hi)
		return;
	for (int i = 0; i < mem.nholes; i++)
		if (mem.hole[i].lo <= hi && mem.hole[i].hi >= lo) {
			lo = mem.hole[i].lo < lo ? mem.hole[i].lo : lo;
			hi = mem.hole[i].hi > hi ? mem.hole[i].hi : hi;
			hole_del(i--);
		}
	if (lo == mem.next)
		mem.next = hi;
	else
		hole_put(lo, hi);
}

/* [lo, hi) is mapped now: no hole covers it */
static void hole_carve(uint64_t lo, uint64_t hi)
{
	for (int i = 0; i < mem.nholes; i++) {
		uint64_t a = mem.hole[i].lo, b = mem.hole[i].hi;

		if (b <= lo || a >= hi)
			continue;
		hole_del(i--);
		if (a < lo)
			hole_put(a, lo);
		if (b > hi)
			hole_put(hi, b);
	}
}

/* The mappings of /proc/self/maps that meet [lo, hi) (raw reads): the free
 * gaps between them become holes (the one below the lowest too if bottom);
 * returns the lowest one's start (below lo if it begins there, not below
 * ARENA_LO), hi if none, lo if the file cannot be read (the whole window
 * then counts as taken). */
static long scan_err;            /* why scan last returned lo: -errno */
static long scan_fd;             /* with scan_err: the descriptor read, or -1 if the open failed */
static uint64_t scan_first[2];   /* or the mapping that meets lo */

static uint64_t scan_maps(uint64_t lo, uint64_t hi, int bottom)
{
	char buf[2048];
	uint64_t v[2] = { 0, 0 }, prev = lo, lowest = hi;
	int field = 0;
	long fd = sys(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0, 0,
		      0);
	long n;

	scan_err = 0;
	scan_fd = -1;
	if (IS_ERR(fd)) {
		scan_err = fd;
		return lo;
	}
	while ((n = sys(SYS_read, fd, (long)buf, sizeof(buf), 0, 0, 0)) > 0) {
		for (long i = 0; i < n; i++) {
			char c = buf[i];

			if (c == '\n') {
				field = 0;
				v[0] = v[1] = 0;
			} else if (field == 2) {
				continue;
			} else if (c == '-' && field == 0) {
				field = 1;
			} else if (c == ' ' && field == 1) {
				uint64_t s = v[0] > lo ? v[0] : lo, e = v[1] < hi ? v[1] : hi;

				field = 2;
				if (s >= e)
					continue;
				if (s > prev && (bottom || lowest != hi))
					hole_add(prev, s);
				if (lowest == hi) {
					lowest = v[0] > ARENA_LO ? v[0] : ARENA_LO;
					scan_first[0] = v[0];
					scan_first[1] = v[1];
				}
				if (e > prev)
					prev = e;
			} else {
				v[field] = v[field] * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 32) - 'a' + 10);
			}
		}
	}
	sys(SYS_close, fd, 0, 0, 0, 0, 0);
	if (n < 0) {
		scan_err = n;
		scan_fd = fd;
		return lo;
	}
	if (lowest == hi && bottom)
		hole_add(lo, hi);
	else if (lowest != hi && prev < hi)
		hole_add(prev, hi);
	return lowest;
}

/* scan_maps with the checkpoint's signal blocked: a thread parked between
 * its open and its last read would come back, at a restart, to a
 * descriptor the new process does not have (EBADF; a checkpoint taken while
 * a rank was still starting did that) */
static uint64_t scan(uint64_t lo, uint64_t hi, int bottom)
{
	uint32_t sig = sts_lh->ckpt_signal;
	uint64_t set = sig ? 1ull << (sig - 1) : 0, old = 0, r;

	if (set)
		sys(SYS_rt_sigprocmask, SIG_BLOCK, (long)&set, (long)&old, 8, 0, 0);
	r = scan_maps(lo, hi, bottom);
	if (set)
		sys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8, 0, 0);
	return r;
}

/* mmap at exactly a, never over anything: 0, -EEXIST or another error */
static long place(uint64_t a, uint64_t len, int prot, int flags, int fd, long off)
{
	long r = sys(SYS_mmap, (long)a, (long)len, prot, (flags & ~MAP_FIXED) | MAP_FIXED_NOREPLACE,
		     fd, off);

	if ((uint64_t)r == a)
		return 0;
	if (IS_ERR(r))
		return r;
	sys(SYS_munmap, r, (long)len, 0, 0, 0, 0);   /* a kernel that took it as a hint */
	return -EEXIST;
}

/* A new mapping of len bytes in the arena (lock held): its address or -errno. */
static long arena_map(uint64_t hint, uint64_t len, int prot, int flags, int fd, long off)
{
	uint64_t align = PAGE, a = 0;
	long r;

	if (flags & MAP_HUGETLB) {
		int shift = (flags >> MAP_HUGE_SHIFT) & MAP_HUGE_MASK;

		align = 1ull << (shift ? shift : 21);
		len = (len + align - 1) & ~(align - 1);
	} else if ((flags & MAP_ANONYMOUS) && len >= THP) {
		align = THP;
	}
	hint = (hint + PAGE - 1) & ~(PAGE - 1);
	if (hint >= ARENA_LO && hint < ARENA_HI && len <= ARENA_HI - hint && !(hint & (align - 1))) {
		r = place(hint, len, prot, flags, fd, off);
		if (r == 0) {
			if (hint < mem.next) {
				uint64_t old = mem.next;

				mem.next = hint;
				hole_add(hint + len, old);
			}
			hole_carve(hint, hint + len);
			return (long)hint;
		}
		if (r != -EEXIST)
			return r;
	}
	for (int t = 0; t < TRIES; t++) {   /* first fit, at the top of the hole */
		int i;

		for (i = 0; i < mem.nholes; i++) {
			a = (mem.hole[i].hi - len) & ~(align - 1);
			if (mem.hole[i].hi - mem.hole[i].lo >= len && a >= mem.hole[i].lo)
				break;
		}
		if (i == mem.nholes)
			break;
		r = place(a, len, prot, flags, fd, off);
		if (r == 0) {
			hole_carve(a, a + len);
			return (long)a;
		}
		if (r != -EEXIST)
			return r;
		a = mem.hole[i].lo;   /* somebody mapped in it: keep what is left */
		r = (long)mem.hole[i].hi;
		hole_del(i);
		scan(a, (uint64_t)r, 1);
	}
	for (int t = 0; t < TRIES; t++) {   /* below everything handed out */
		uint64_t old = mem.next;

		if (old - ARENA_LO < len)
			return -ENOMEM;
		a = (old - len) & ~(align - 1);
		if (a < ARENA_LO)
			return -ENOMEM;
		r = place(a, len, prot, flags, fd, off);
		mem.next = a;
		if (r == 0) {
			hole_add(a + len, old);
			return (long)a;
		}
		if (r != -EEXIST) {
			mem.next = old;
			return r;
		}
		mem.next = scan(a, old, 0);   /* go on below the conflict */
	}
	return -ENOMEM;
}

static void *map_result(long r)
{
	if (IS_ERR(r)) {
		errno = (int)-r;
		return MAP_FAILED;
	}
	return (void *)r;
}

static int in_arena(uint64_t lo, uint64_t hi)
{
	return hi > ARENA_LO && lo < ARENA_HI;
}

static void *uh_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uint64_t rlen = ((uint64_t)len + PAGE - 1) & ~(PAGE - 1);
	long r;

	if (off & (off_t)(PAGE - 1))
		return map_result(-EINVAL);
	if (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_32BIT)) {
		r = sys(SYS_mmap, (long)addr, (long)len, prot, flags, fd, off);
		if (!IS_ERR(r) && in_arena((uint64_t)r, (uint64_t)r + rlen)) {
			lock();
			hole_carve((uint64_t)r, (uint64_t)r + rlen);
			unlock();
		}
		return map_result(r);
	}
	if (len == 0)
		return map_result(-EINVAL);
	if (rlen < len)
		return map_result(-ENOMEM);
	lock();
	r = arena_map((uint64_t)addr, rlen, prot, flags, fd, off);
	unlock();
	return map_result(r);
}

static int uh_munmap(void *addr, size_t len)
{
	uint64_t a = (uint64_t)addr, b = a + (((uint64_t)len + PAGE - 1) & ~(PAGE - 1));
	long r;

	if (b > a && in_arena(a, b)) {
		lock();
		r = sys(SYS_munmap, (long)addr, (long)len, 0, 0, 0, 0);
		if (r == 0)
			hole_add(a, b);
		unlock();
	} else {
		r = sys(SYS_munmap, (long)addr, (long)len, 0, 0, 0, 0);
	}
	if (r) {
		errno = (int)-r;
		return -1;
	}
	return 0;
}

/* mremap(2) is variadic; its fifth argument comes in r8 all the same */
static void *uh_mremap(void *old, size_t olen, size_t nlen, int flags, void *to)
{
	uint64_t o = (uint64_t)old, ol = ((uint64_t)olen + PAGE - 1) & ~(PAGE - 1);
	uint64_t nl = ((uint64_t)nlen + PAGE - 1) & ~(PAGE - 1);
	int keep_old = (flags & MREMAP_DONTUNMAP) || olen == 0;
	long r, d;

	if (flags & MREMAP_FIXED) {
		r = sys(SYS_mremap, (long)old, (long)olen, (long)nlen, flags, (long)to, 0);
		if (!IS_ERR(r)) {
			lock();
			if (!keep_old)
				hole_add(o, o + ol);
			hole_carve((uint64_t)r, (uint64_t)r + nl);
			unlock();
		}
		return map_result(r);
	}
	lock();
	if (!keep_old || !(flags & MREMAP_MAYMOVE)) {   /* in place first */
		r = sys(SYS_mremap, (long)old, (long)olen, (long)nlen,
			keep_old ? flags : flags & ~MREMAP_MAYMOVE, 0, 0);
		if (!IS_ERR(r)) {
			if (nl < ol)
				hole_add(o + nl, o + ol);
			else if (nl > ol)
				hole_carve(o + ol, o + nl);
		}
		if (!IS_ERR(r) || !(flags & MREMAP_MAYMOVE) || nl < ol) {
			unlock();
			return map_result(r);
		}
	}
	/* a reservation in the arena, then the mapping moved onto it */
	d = nl ? arena_map(0, nl, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
	       : -EINVAL;
	if (IS_ERR(d)) {
		unlock();
		return map_result(d);
	}
	r = sys(SYS_mremap, (long)old, (long)olen, (long)nlen, flags | MREMAP_FIXED, d, 0);
	if (IS_ERR(r)) {
		sys(SYS_munmap, d, (long)nl, 0, 0, 0, 0);
		hole_add((uint64_t)d, (uint64_t)d + nl);
	} else if (!keep_old) {
		hole_add(o, o + ol);
	}
	unlock();
	return map_result(r);
}

/* ---- the patch: an absolute jump at the entry of the libc functions ---- */

static void __attribute__((noreturn)) refuse(const char *name, const char *what)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "stasis: cannot keep the upper half's memory in its "
			 "range: %s %s (the split process patches glibc 2.36's)\n", name, what);

	if (n > 0 && write(2, msg, (size_t)n) < 0) {
		/* nothing else to do */
	}
	_exit(1);
}

/* glibc 2.36's first instructions, which the 13-byte jump replaces: nothing
 * in these functions branches back into them (objdump) */
static const unsigned char mmap_entry[] = {
	0x41, 0x89, 0xca,                               /* mov %ecx,%r10d */
	0x41, 0xf7, 0xc1, 0xff, 0x0f, 0x00, 0x00,       /* test $0xfff,%r9d */
	0x75, 0x14,                                     /* jne +0x14 */
	0xb8, 0x09, 0x00, 0x00, 0x00,                   /* mov $SYS_mmap,%eax */
};
static const unsigned char munmap_entry[] = {
	0xb8, 0x0b, 0x00, 0x00, 0x00,                   /* mov $SYS_munmap,%eax */
	0x0f, 0x05,                                     /* syscall */
	0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff,             /* cmp $-4095,%rax */
};
static const unsigned char mremap_entry[] = {
	0x48, 0x83, 0xec, 0x58,                         /* sub $0x58,%rsp */
	0x4c, 0x89, 0x44, 0x24, 0x40,                   /* mov %r8,0x40(%rsp) */
	0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0,    /* mov %fs:0x28,%rax */
};

/* Overwrite the entry of f with an absolute jump to to. */
static void patch_at(unsigned char *f, const char *name, void *to)
{
	unsigned char jmp[13] = { 0x49, 0xbb };   /* movabs $to,%r11 */
	uint64_t target = (uint64_t)(uintptr_t)to;
	uintptr_t lo, hi;

	memcpy(jmp + 2, &target, 8);
	jmp[10] = 0x41, jmp[11] = 0xff, jmp[12] = 0xe3;   /* jmp *%r11 */
	lo = (uintptr_t)f & ~(uintptr_t)(PAGE - 1);
	hi = ((uintptr_t)f + sizeof(jmp) + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
		refuse(name, "cannot be made writable");
	memcpy(f, jmp, sizeof(jmp));
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC) != 0)
		refuse(name, "cannot be made read-only again");
}

static void patch(void *libc, const char *name, void *to, const unsigned char *entry, size_t n)
{
	unsigned char *f = dlsym(libc, name);
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (!f)
		refuse(name, "is missing from libc.so.6");
	if (!dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || info.dli_saddr != f ||
	    sym->st_size < 13)
		refuse(name, "is shorter than the 13-byte jump");
	if (memcmp(f, entry, n) != 0)
		refuse(name, "does not begin with the instructions of glibc 2.36's");
	patch_at(f, name, to);
}

/* ld.so maps the libraries a dlopen() loads with its own copy of mmap, not
 * libc's, and exports no symbol for it: it is found in ld.so's text by its
 * first instructions, which must occur there exactly once (they do in
 * glibc 2.36's ld.so, the same code as libc's mmap and munmap: objdump),
 * and patched like libc's. Without it a library loaded after startup would
 * land near the top of the address space, outside the range. */
static void patch_ldso(const char *name, void *to, const unsigned char *entry, size_t n)
{
	Dl_info info;
	const ElfW(Ehdr) *eh;
	const ElfW(Phdr) *ph;
	unsigned char *found = NULL;
	int count = 0;

	if (!dladdr((void *)&_r_debug, &info) || !info.dli_fbase)
		refuse(name, "of ld.so: ld.so is not found");
	eh = info.dli_fbase;
	ph = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff);
	for (int i = 0; i < eh->e_phnum; i++) {
		unsigned char *lo, *hi;

		if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X))
			continue;
		lo = (unsigned char *)eh + ph[i].p_vaddr;
		hi = lo + ph[i].p_filesz;
		for (unsigned char *p = lo; p + n <= hi; p++)
			if (p[0] == entry[0] && memcmp(p, entry, n) == 0) {
				found = p;
				count++;
			}
	}
	if (count != 1)
		refuse(name, count ? "of ld.so: its first instructions occur more than once"
				   : "of ld.so: its first instructions (glibc 2.36's) are not found");
	patch_at(found, name, to);
}

static void mem_child(void)
{
	mem.lock = 0;   /* a thread of the parent may have held it at the fork */
}

__attribute__((constructor(101))) static void uh_mem_init(void)
{
	void *libc;

	/* no lower half: nothing to keep apart (check_lower says so later) */
	if (msync((void *)sts_lh, 4096, MS_ASYNC) != 0 || sts_lh->magic != STS_LH_MAGIC ||
	    sts_lh->version != STS_LH_VERSION)
		return;
	mem.next = ARENA_LO;
	/* an open that failed added no hole: try again, for up to 0.5 s */
	for (int i = 0; i < 25 && (mem.next = scan(ARENA_LO, ARENA_HI, 0)) == ARENA_LO &&
			    scan_err && !scan_first[1]; i++)
		usleep(20000);
	if (mem.next == ARENA_LO) {
		char what[128];

		if (scan_err && scan_fd >= 0)
			snprintf(what, sizeof(what), "cannot be read (error %ld reading descriptor %ld, "
				 "25 tries)", -scan_err, scan_fd);
		else if (scan_err)
			snprintf(what, sizeof(what), "cannot be opened (error %ld, 25 tries)", -scan_err);
		else
			snprintf(what, sizeof(what), "shows %#llx-%#llx at the range's start",
				 (unsigned long long)scan_first[0], (unsigned long long)scan_first[1]);
		refuse("/proc/self/maps", what);
	}
	libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
	if (!libc)
		refuse("libc.so.6", "is not loaded");
	patch(libc, "mmap", (void *)uh_mmap, mmap_entry, sizeof(mmap_entry));
	if (dlsym(libc, "mmap64") != dlsym(libc, "mmap"))
		patch(libc, "mmap64", (void *)uh_mmap, mmap_entry, sizeof(mmap_entry));
	patch(libc, "munmap", (void *)uh_munmap, munmap_entry, sizeof(munmap_entry));
	patch(libc, "mremap", (void *)uh_mremap, mremap_entry, sizeof(mremap_entry));
	patch_ldso("mmap", (void *)uh_mmap, mmap_entry, sizeof(mmap_entry));
	patch_ldso("munmap", (void *)uh_munmap, munmap_entry, sizeof(munmap_entry));
	pthread_atfork(NULL, NULL, mem_child);
	if (sts_lh->mem_unfill)
		STS_LOWER(sts_lh->mem_unfill());
}
