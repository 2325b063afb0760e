/* test_pimg.c - the process-image core (src/pimg/pimg.h): maps lines
 * parsed, this process's own mappings classified, and the page-storing
 * rule's runs over its pagemap, for each region kind, and the record an
 * image stores of a region; a parked thread's record (pimg_threads.h)
 * taken in a signal handler of the main thread and of another one. */
#include "pimg/pimg.h"
#include "pimg/pimg_format.h"
#include "pimg/pimg_threads.h"
#include "check.h"

#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096ul

static char *maps;
static size_t maps_cap;

static void reread(void)
{
	long n;

	if (!maps_cap)
		maps_cap = 4096;
	for (;;) {
		maps = realloc(maps, maps_cap);
		n = pimg_maps_read(maps, maps_cap);
		if (n != -ENOSPC)
			break;
		maps_cap *= 2;
	}
	CHECK(n > 0);
}

/* The mapping of this process that holds addr, classified. */
static int find(const void *addr, struct pimg_mapping *m, struct pimg_region *r, char *path)
{
	uint64_t a = (uint64_t)(uintptr_t)addr;
	const char *c;

	reread();
	c = maps;
	while (pimg_maps_next(&c, m))
		if (m->start <= a && a < m->end) {
			pimg_mapping_path(m, path, 4096);
			return pimg_classify(m, path, r);
		}
	CHECK(!"mapping found");
	return -ENOENT;
}

/* The runs of stored pages as page numbers from base ("0+1,5+1"), by
 * PAGEMAP_SCAN (scan 1; cap under 3 entries holds no range: reads) or by
 * pagemap reads (scan 0, as on a kernel before 6.7). */
static void runs_by(const struct pimg_mapping *m, const struct pimg_region *r, size_t cap,
		    int scan, char *out, size_t outcap)
{
	uint64_t buf[8], addr, npages;
	struct pimg_runs it;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC), ret;
	size_t n = 0;

	CHECK(fd >= 0 && cap <= 8);
	out[0] = 0;
	pimg_runs_init(&it, r, m->start, m->end, fd, buf, cap);
	CHECK_EQ(it.scan, cap >= 3);
	scan = scan && cap >= 3;
	it.scan = scan;
	while ((ret = pimg_runs_next(&it, &addr, &npages)) == 1)
		n += (size_t)snprintf(out + n, outcap - n, "%s%lu+%lu", n ? "," : "",
				      (unsigned long)((addr - m->start) / PAGE), (unsigned long)npages);
	CHECK_EQ(ret, 0);
	CHECK_EQ(it.scan, scan);   /* this kernel (>= 6.7) has the ioctl: no fallback */
	close(fd);
}

/* The runs, checked to be the same both ways. */
static void runs_of(const struct pimg_mapping *m, const struct pimg_region *r, size_t cap,
		    char *out, size_t outcap)
{
	char read[1024];

	runs_by(m, r, cap, 0, read, sizeof(read));
	runs_by(m, r, cap, 1, out, outcap);
	CHECK(strcmp(out, read) == 0);
	if (strcmp(out, read))
		fprintf(stderr, "runs by PAGEMAP_SCAN %s, by pagemap reads %s\n", out, read);
}

/* 1 GiB reserved, a few pages touched: present, the zero page (read), a
 * huge page where the kernel gives one, and runs across the scan's
 * batches (one range each, cap 3) and across 2 MiB page tables. */
static void test_sparse_reservation(void)
{
	const size_t len = 1ul << 30, huge = 2ul << 20;
	struct pimg_mapping m;
	struct pimg_region r;
	char path[4096], runs[256];
	volatile char *p;
	char *base;

	base = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
		    MAP_NORESERVE, -1, 0);
	CHECK(base != MAP_FAILED);
	p = (char *)(((uintptr_t)base + huge - 1) & ~(uintptr_t)(huge - 1));
	madvise((void *)p, len, MADV_NOHUGEPAGE);
	madvise((void *)(p + 256 * huge), huge, MADV_HUGEPAGE);   /* may be refused */
	p[0] = 1;
	(void)p[PAGE];                                /* the zero page: present */
	p[2 * PAGE] = 1;
	for (size_t i = huge - 2 * PAGE; i < huge + 2 * PAGE; i += PAGE)
		p[i] = 1;                             /* across a page table */
	memset((void *)(p + 256 * huge), 1, huge);    /* maybe one huge page */
	p[len - PAGE] = 1;
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(m.end, (uint64_t)(uintptr_t)p + 256 * huge);   /* madvise split it */
	runs_of(&m, &r, 8, runs, sizeof(runs));
	CHECK(strcmp(runs, "0+3,510+4") == 0);
	/* the huge page's mapping and the rest, each batch size, both ways */
	for (const char *c = maps; pimg_maps_next(&c, &m);) {
		if (m.end <= (uint64_t)(uintptr_t)base || m.start >= (uint64_t)(uintptr_t)base + len + huge)
			continue;
		pimg_mapping_path(&m, path, sizeof(path));
		CHECK_EQ(pimg_classify(&m, path, &r), 0);
		for (size_t cap = 2; cap <= 8; cap += 3)
			runs_of(&m, &r, cap, runs, sizeof(runs));
	}
	munmap(base, len + huge);
}

static void test_parse(void)
{
	const char *text =
		"00400000-00452000 r-xp 00001000 fd:01 1234567                            /usr/bin/a b\n"
		"7f0000000000-7f0000002000 rw-s 00000000 00:01 42 /SYSV00000000 (deleted)\n"
		"7f0000002000-7f0000003000 ---p 00000000 00:00 0 \n"
		"7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0                          [vdso]\n"
		"7ffff7fc3000-7ffff7fc4000 rw-p 00000000 00:00 0                          [anon:glibc]\n"
		"7ffff7fc4000-7ffff7fc5000 rw-s 00000000 00:01 7                          [anon_shmem:x]";
	const char *c = text;
	struct pimg_mapping m;
	struct pimg_region r;
	char path[4096];

	CHECK(pimg_maps_next(&c, &m));
	CHECK_EQ(m.start, 0x400000);
	CHECK_EQ(m.end, 0x452000);
	CHECK_EQ(m.prot, PROT_READ | PROT_EXEC);
	CHECK_EQ(m.shared, 0);
	CHECK_EQ(m.offset, 0x1000);
	CHECK_EQ(m.dev_major, 0xfd);
	CHECK_EQ(m.dev_minor, 1);
	CHECK_EQ(m.ino, 1234567);
	CHECK_EQ(pimg_mapping_path(&m, path, sizeof(path)), 12);
	CHECK(strcmp(path, "/usr/bin/a b") == 0);
	CHECK_EQ(pimg_mapping_path(&m, path, 5), 4);
	CHECK(strcmp(path, "/usr") == 0);

	CHECK(pimg_maps_next(&c, &m));
	CHECK_EQ(m.shared, 1);
	CHECK_EQ(m.prot, PROT_READ | PROT_WRITE);
	pimg_mapping_path(&m, path, sizeof(path));
	CHECK_EQ(pimg_classify(&m, path, &r), 0);
	CHECK_EQ(r.kind, PIMG_SHARED_ANON);
	CHECK_EQ(r.flags, PIMG_F_DELETED);
	CHECK_EQ(r.file_ino, 42);
	CHECK_EQ(r.file_dev, 1);
	CHECK_EQ(pimg_pages(&r), PIMG_PAGES_ALL);

	CHECK(pimg_maps_next(&c, &m));
	CHECK_EQ(m.prot, 0);
	CHECK_EQ(m.path_len, 0);
	CHECK_EQ(pimg_classify(&m, "", &r), 0);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(r.flags, 0);

	CHECK(pimg_maps_next(&c, &m));
	CHECK_EQ(pimg_special(&m), PIMG_VDSO);
	CHECK_EQ(pimg_classify(&m, "[vdso]", &r), PIMG_SKIP);

	CHECK(pimg_maps_next(&c, &m));
	CHECK_EQ(pimg_special(&m), PIMG_PLAIN);
	CHECK_EQ(pimg_classify(&m, "[anon:glibc]", &r), 0);
	CHECK_EQ(r.kind, PIMG_ANON);

	CHECK(pimg_maps_next(&c, &m));     /* the last line has no newline */
	CHECK_EQ(pimg_special(&m), PIMG_OTHER);
	CHECK_EQ(pimg_classify(&m, "[anon_shmem:x]", &r), -EINVAL);
	CHECK_EQ(pimg_maps_next(&c, &m), 0);
	CHECK_EQ(pimg_maps_next(&c, &m), 0);
}

/* A path that names another inode than the mapping's: replaced, kept as
 * memory; a device: refused. */
static void test_files_by_name(void)
{
	struct pimg_mapping m = { .start = 0x10000, .end = 0x11000, .prot = PROT_READ };
	struct pimg_region r;
	struct stat st;

	CHECK_EQ(stat("/dev/null", &st), 0);
	m.path = "/dev/null";
	m.path_len = 9;
	m.ino = st.st_ino;
	CHECK_EQ(pimg_classify(&m, "/dev/null", &r), -ENODEV);
	m.ino = st.st_ino + 1;
	CHECK_EQ(pimg_classify(&m, "/dev/null", &r), 0);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(r.flags, PIMG_F_DELETED);
	m.path = "relative";
	m.path_len = 8;
	CHECK_EQ(pimg_classify(&m, "relative", &r), -EINVAL);
}

static int temp_file(char *name, size_t pages)
{
	const char *dir = getenv("TMPDIR");
	char page[PAGE];
	int fd;

	snprintf(name, 4096, "%s/test_pimg.XXXXXX", dir && *dir ? dir : "/tmp");
	fd = mkstemp(name);
	CHECK(fd >= 0);
	memset(page, 'f', sizeof(page));
	for (size_t i = 0; i < pages; i++)
		CHECK_EQ(write(fd, page, sizeof(page)), (long)sizeof(page));
	return fd;
}

static void test_own_mappings(void)
{
	struct pimg_mapping m;
	struct pimg_region r;
	char path[4096], name[4096], runs[256];
	volatile char *p;
	char *guard;
	int fd, local = 0;

	/* private anonymous: the pages touched, in runs across pagemap batches */
	guard = mmap(NULL, 10 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(guard != MAP_FAILED);
	/* between two PROT_NONE pages, it merges with no neighbour */
	p = guard + PAGE;
	CHECK_EQ(mprotect((void *)p, 8 * PAGE, PROT_READ | PROT_WRITE), 0);
	p[0] = 1;
	p[2 * PAGE] = p[3 * PAGE] = p[4 * PAGE] = 1;
	p[7 * PAGE] = 1;
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK_EQ(m.start, (uint64_t)(uintptr_t)p);
	CHECK_EQ(m.end, (uint64_t)(uintptr_t)p + 8 * PAGE);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(pimg_pages(&r), PIMG_PAGES_PAGEMAP);
	runs_of(&m, &r, 8, runs, sizeof(runs));
	CHECK(strcmp(runs, "0+1,2+3,7+1") == 0);
	runs_of(&m, &r, 3, runs, sizeof(runs));     /* batches of 3 pages */
	CHECK(strcmp(runs, "0+1,2+3,7+1") == 0);
	if (strcmp(runs, "0+1,2+3,7+1"))
		fprintf(stderr, "anonymous runs: %s\n", runs);
	munmap(guard, 10 * PAGE);

	/* shared anonymous: every page, touched here or not */
	p = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	p[PAGE] = 1;
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK_EQ(r.kind, PIMG_SHARED_ANON);
	CHECK(r.flags & PIMG_F_DELETED);
	runs_of(&m, &r, 8, runs, sizeof(runs));
	CHECK(strcmp(runs, "0+4") == 0);
	munmap((void *)p, 4 * PAGE);

	/* a private file mapping: the written page only, not the one read */
	fd = temp_file(name, 4);
	p = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(p != MAP_FAILED);
	CHECK_EQ(p[0], 'f');
	p[2 * PAGE] = 'w';
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK(strcmp(path, name) == 0);
	CHECK_EQ(r.kind, PIMG_FILE_PRIVATE);
	CHECK_EQ(r.flags, 0);
	CHECK_EQ(r.file_size, 4 * PAGE);
	runs_of(&m, &r, 8, runs, sizeof(runs));
	CHECK(strcmp(runs, "2+1") == 0);
	munmap((void *)p, 4 * PAGE);

	/* the same file shared: nothing, the file holds it */
	p = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED);
	p[PAGE] = 'w';
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK_EQ(r.kind, PIMG_FILE_SHARED);
	runs_of(&m, &r, 8, runs, sizeof(runs));
	CHECK(strcmp(runs, "") == 0);

	/* the record an image stores of it, mapped from its second page */
	{
		struct pimg_rec_region rec;
		struct stat st;
		char *q = mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, fd, PAGE);

		CHECK(q != MAP_FAILED && fstat(fd, &st) == 0);
		CHECK_EQ(find(q, &m, &r, path), 0);
		memset(&rec, 0xff, sizeof(rec));
		pimg_region_record(&m, &r, path, &rec);
		CHECK_EQ(rec.start, (uint64_t)(uintptr_t)q);
		CHECK_EQ(rec.end, (uint64_t)(uintptr_t)q + 2 * PAGE);
		CHECK_EQ(rec.prot, PROT_READ);
		CHECK_EQ(rec.kind, PIMG_FILE_SHARED);
		CHECK_EQ(rec.flags, 0);
		CHECK_EQ(rec.file_offset, PAGE);
		CHECK_EQ(rec.path_len, strlen(name) + 1);
		CHECK_EQ(rec.stored_pages, 0);
		CHECK_EQ(rec.file_size, 4 * PAGE);
		CHECK_EQ(rec.file_mtime_ns, (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
					    (uint64_t)st.st_mtim.tv_nsec);
		CHECK_EQ(rec.file_ino, st.st_ino);
		CHECK_EQ(rec.file_dev, st.st_dev);
		munmap(q, 2 * PAGE);
	}

	/* unlinked while mapped: deleted, every page kept */
	CHECK_EQ(unlink(name), 0);
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK_EQ(r.kind, PIMG_SHARED_ANON);
	CHECK_EQ(r.flags, PIMG_F_DELETED);
	CHECK_EQ(r.file_ino, m.ino);
	munmap((void *)p, 4 * PAGE);
	p = mmap(NULL, 4 * PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK(p != MAP_FAILED);
	CHECK_EQ(find((void *)p, &m, &r, path), 0);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(r.flags, PIMG_F_DELETED);
	runs_of(&m, &r, 8, runs, sizeof(runs));
	CHECK(strcmp(runs, "0+4") == 0);
	munmap((void *)p, 4 * PAGE);
	close(fd);

	/* the main stack */
	CHECK_EQ(find(&local, &m, &r, path), 0);
	CHECK_EQ(pimg_special(&m), PIMG_STACK);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(r.flags, PIMG_F_STACK);
}

/* The kernel's own mappings are skipped; a buffer too small says so. */
static void test_kernel_and_sizes(void)
{
	const char *c;
	struct pimg_mapping m;
	struct pimg_region r;
	char path[4096], small[64];
	int vdso = 0;

	reread();
	for (c = maps; pimg_maps_next(&c, &m);) {
		pimg_mapping_path(&m, path, sizeof(path));
		if (pimg_special(&m) == PIMG_VDSO) {
			vdso++;
			CHECK_EQ(pimg_classify(&m, path, &r), PIMG_SKIP);
		}
		/* every line of a real process classifies */
		CHECK(pimg_classify(&m, path, &r) >= 0);
	}
	CHECK_EQ(vdso, 1);
	CHECK_EQ(pimg_maps_read(small, sizeof(small)), -ENOSPC);
	CHECK_EQ(small[sizeof(small) - 1], 0);
	CHECK_EQ(pimg_maps_read(small, 1), -ENOSPC);
}

static struct pimg_rec_thread captured;
static void *volatile captured_uc;   /* set by the handler: read again after tgkill */

static void capture_handler(int sig, siginfo_t *si, void *uc)
{
	uint64_t fs = 0;

	(void)sig;
	(void)si;
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
	memset(&captured, 0, sizeof(captured));
	pimg_thread_capture(&captured, uc, fs, PIMG_THREAD_AGENT);
	captured_uc = uc;
}

/* The calling thread's record, taken in a handler of SIGUSR2, checked
 * against what the kernel says of the thread outside it. */
static void capture_and_check(const char *name, int is_main)
{
	uint64_t fs = 0, gs = 0, head = 0, len = 0;
	int *ctid = NULL;

	prctl(PR_SET_NAME, name);
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
	syscall(SYS_arch_prctl, ARCH_GET_GS, &gs);
	syscall(SYS_get_robust_list, 0, &head, &len);
	prctl(PR_GET_TID_ADDRESS, &ctid);
	captured_uc = NULL;
	CHECK_EQ(syscall(SYS_tgkill, getpid(), gettid(), SIGUSR2), 0);
	CHECK(captured_uc != NULL);
	CHECK_EQ(captured.tid, gettid());
	CHECK_EQ(captured.flags, PIMG_THREAD_AGENT | (is_main ? PIMG_THREAD_MAIN : 0));
	CHECK_EQ(captured.fs_base, fs);
	CHECK_EQ(captured.gs_base, gs);
	CHECK_EQ(captured.sigframe, (uint64_t)(uintptr_t)captured_uc);
	CHECK(head != 0);
	CHECK_EQ(captured.robust_head, head);
	CHECK_EQ(captured.robust_len, len);
	CHECK_EQ(captured.clear_child_tid, (uint64_t)(uintptr_t)ctid);
	CHECK(strcmp(captured.comm, name) == 0);
	CHECK_EQ(captured.rseq_addr, 0);   /* the agent's own, not the capture's */
}

static void *capture_thread(void *arg)
{
	(void)arg;
	capture_and_check("pimg-other", 0);
	return NULL;
}

static void test_thread_capture(void)
{
	struct sigaction sa = { .sa_sigaction = capture_handler, .sa_flags = SA_SIGINFO };
	pthread_t t;

	sigaction(SIGUSR2, &sa, NULL);
	capture_and_check("pimg-main", 1);
	CHECK_EQ(pthread_create(&t, NULL, capture_thread, NULL), 0);
	pthread_join(t, NULL);
	signal(SIGUSR2, SIG_DFL);
}

/* pimg_pending: a blocked signal sent to this thread is pending for it
 * (read as the calling thread's and by its tid), one sent to the process
 * for the process; the checkpoint's own left out. Runs first, while this
 * is the process's only thread. */
static void test_pending(void)
{
	sigset_t set, old;
	struct timespec zero = { 0, 0 };
	pid_t tid = (pid_t)syscall(SYS_gettid);
	uint64_t usr1 = 1ull << (SIGUSR1 - 1), usr2 = 1ull << (SIGUSR2 - 1), rt = 1ull << 61;
	uint64_t ours = usr1 | usr2 | rt;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, 62);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
	CHECK_EQ(pimg_pending(0, 0, 62) & ours, 0);
	CHECK_EQ(syscall(SYS_tgkill, getpid(), tid, SIGUSR1), 0);
	CHECK_EQ(syscall(SYS_tgkill, getpid(), tid, 62), 0);
	CHECK_EQ(kill(getpid(), SIGUSR2), 0);
	CHECK_EQ(pimg_pending(0, 0, 62) & ours, usr1);
	CHECK_EQ(pimg_pending(0, 0, 0) & ours, usr1 | rt);
	CHECK_EQ(pimg_pending(tid, 0, 62) & ours, usr1);
	CHECK_EQ(pimg_pending(0, 1, 62) & ours, usr2);
	CHECK_EQ(pimg_pending(tid, 1, 62) & ours, usr2);
	while (sigtimedwait(&set, NULL, &zero) > 0)
		;
	CHECK_EQ(pimg_pending(0, 0, 0) & ours, 0);
	CHECK_EQ(pimg_pending(0, 1, 0) & ours, 0);
	CHECK_EQ(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

int main(void)
{
	test_pending();
	test_parse();
	test_files_by_name();
	test_own_mappings();
	test_sparse_reservation();
	test_kernel_and_sizes();
	test_thread_capture();
	free(maps);
	return check_result("test_pimg");
}
