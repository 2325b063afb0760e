/* sys.h - raw x86-64 system calls and the few libc-like helpers the
 * restorer needs. No libc: the restorer replaces the whole address space
 * and must not depend on anything mapped in it but its own window. */
#ifndef STASIS_RESTORER_SYS_H
#define STASIS_RESTORER_SYS_H

#include <stddef.h>
#include <stdint.h>

#define __NR_read 0
#define __NR_write 1
#define __NR_open 2
#define __NR_close 3
#define __NR_mmap 9
#define __NR_pread64 17
#define __NR_mprotect 10
#define __NR_munmap 11
#define __NR_rt_sigaction 13
#define __NR_rt_sigprocmask 14
#define __NR_madvise 28
#define __NR_dup3 292
#define __NR_mremap 25
#define __NR_getpid 39
#define __NR_setitimer 38
#define __NR_exit 60
#define __NR_kill 62
#define __NR_chdir 80
#define __NR_fcntl 72
#define __NR_umask 95
#define __NR_prctl 157
#define __NR_arch_prctl 158
#define __NR_gettid 186
#define __NR_futex 202
#define __NR_tgkill 234
#define __NR_clock_gettime 228
#define __NR_fadvise64 221
#define __NR_set_tid_address 218
#define __NR_exit_group 231
#define __NR_set_robust_list 273
#define __NR_rseq 334
#define __NR_prlimit64 302
#define __NR_personality 135
#define __NR_setpriority 141
#define __NR_clone3 435
#define __NR_close_range 436

#define O_RDONLY 0
#define O_RDWR 2
#define O_CLOEXEC 02000000
#define PROT_NONE 0
#define PROT_READ 1
#define PROT_WRITE 2
#define PROT_EXEC 4
#define MAP_SHARED 0x01
#define MAP_PRIVATE 0x02
#define MAP_FIXED 0x10
#define MAP_ANONYMOUS 0x20
#define MAP_GROWSDOWN 0x100
#define MAP_NORESERVE 0x4000
#define MAP_FIXED_NOREPLACE 0x100000
#define MREMAP_MAYMOVE 1
#define MREMAP_FIXED 2
#define MADV_HUGEPAGE 14
#define MADV_POPULATE_WRITE 23
#define POSIX_FADV_WILLNEED 3
#define ARCH_SET_GS 0x1001
#define ARCH_SET_FS 0x1002
#define PR_SET_NAME 15
#define PR_SET_MM 35
#define PR_SET_MM_MAP 14
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define CLONE_VM 0x100
#define CLONE_FS 0x200
#define CLONE_FILES 0x400
#define CLONE_SIGHAND 0x800
#define CLONE_THREAD 0x10000
#define CLONE_SYSVSEM 0x40000
#define CLONE_PARENT_SETTID 0x100000
#define CLONE_CHILD_CLEARTID 0x200000
#define ENOENT 2
#define EEXIST 17
#define EINTR 4
#define ENOSPC 28

static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

#define sys0(n) sys6(n, 0, 0, 0, 0, 0, 0)
#define sys1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

void *memset(void *s, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);
void *memmove(void *d, const void *s, size_t n);
int memcmp(const void *a, const void *b, size_t n);

/* CRC-32C (crc32c.c), chained like src/common/crc32c.h: crc32c(0, ab) ==
 * crc32c(crc32c(0, a), b). restorer_crc_init first. */
void restorer_crc_init(void);
uint32_t restorer_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
