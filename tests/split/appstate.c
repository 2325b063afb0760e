/* appstate.c - state a real application acquires after MPI_Init, checked
 * across restarts (issue 20, docs/split.md "Upper-half memory" and "The
 * upper half's descriptors").
 *
 *   appstate ITERATIONS SLEEP_MS DIR [heap] [dlopen LIB_A LIB_B] [files]
 *            [shm] [thread] [unlinked] [rwfile] [wfile] [memfd] [socket]
 *
 * heap    every iteration allocates 64 blocks of 4000 bytes (below malloc's
 *         mmap threshold: the heap grows by small allocations, before and
 *         after every restart) and checks every block allocated so far;
 * dlopen  LIB_A is dlopen()ed after MPI_Init and LIB_B after the first
 *         restart; each iteration calls their step function, which keeps a
 *         running sum in the library's own data and returns it;
 * files   rank 0 writes one line per iteration to DIR/log.txt (fopen "w",
 *         fflush'ed) and every rank appends one line per iteration to
 *         DIR/append-R.txt (open with O_APPEND, write);
 * shm     a POSIX shared memory object (shm_open, named after DIR and the
 *         rank), mapped shared and its descriptor closed: one word per
 *         iteration, all of them checked every iteration;
 * thread  at start and after every restart, a thread that lives on: it
 *         checks an array on its own stack, a __thread variable and a
 *         block it allocated, every 5 ms, across the later restarts;
 * unlinked  a file unlinked while open, one line appended per iteration,
 *         all of them read back and checked every iteration;
 * rwfile  every rank keeps DIR/rw-R.db open for reading and writing and
 *         updates it in place each iteration, as a database does: a count
 *         of updates at offset 0 (read back and checked against its own)
 *         and a word per iteration in a ring of 64, under an flock; after
 *         a restart the file must hold what it held at the checkpoint;
 * wfile   every iteration every rank reads DIR/w-R.txt, which must hold
 *         the previous iteration's number, and writes its own there
 *         (fopen "w", fprintf, fclose); and the same with DIR/r-R.txt,
 *         written as DIR/r-R.txt.tmp and renamed over it: after a restart
 *         each must hold what it held at the checkpoint, not what the
 *         killed run wrote after it;
 * many    at start every rank writes and deletes 300 files DIR/gone-R-N,
 *         then writes 300 it keeps, DIR/many-R-N: more than the 256 the
 *         split process lists (docs/split.md, "Files written after the
 *         checkpoint"), where the deleted ones make room;
 * memfd   a memfd mapped shared: a checkpoint must refuse it;
 * socket  a UDP socket kept open: a checkpoint must refuse it.
 *
 * A restart is seen as a change of pid: "rank R restarted K". Each
 * iteration rank 0 prints "rank 0 iteration I"; at the end "PASS ranks=N
 * iterations=I blocks=B restarts=MIN/MAX" (the fewest and most restarts a
 * rank saw). A failed check prints "FAIL ..." and exits with 1. The
 * files' contents depend only on the iterations: a run checkpointed,
 * killed and restarted must leave them equal to an uninterrupted run's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#define BLOCK 4000
#define PER_ITER 64

static int rank;

static void fail(const char *fmt, long a, long b)
{
	printf("rank %d: FAIL ", rank);
	printf(fmt, a, b);
	printf("\n");
	fflush(stdout);
	_exit(1);
}

struct block {
	struct block *next;
	uint32_t it, i;
	unsigned char fill[BLOCK - 16];
};

static struct block *blocks;
static long nblocks;

static unsigned char byte_of(const struct block *b, size_t k)
{
	return (unsigned char)(b->it * 131u + b->i * 7u + k + (unsigned)rank);
}

static void heap_step(int it)
{
	long n = 0;

	for (const struct block *b = blocks; b; b = b->next, n++)
		for (size_t k = 0; k < sizeof(b->fill); k++)
			if (b->fill[k] != byte_of(b, k))
				fail("block of iteration %ld: byte %ld changed", (long)b->it, (long)k);
	if (n != nblocks)
		fail("%ld blocks found, %ld allocated", n, nblocks);
	for (unsigned i = 0; i < PER_ITER; i++) {
		struct block *b = malloc(sizeof(*b));

		if (!b)
			fail("malloc returned NULL at block %ld%ld", nblocks, 0);
		b->it = (uint32_t)it;
		b->i = i;
		for (size_t k = 0; k < sizeof(b->fill); k++)
			b->fill[k] = byte_of(b, k);
		b->next = blocks;
		blocks = b;
		nblocks++;
	}
}

typedef long (*step_fn)(long);

struct lib {
	const char *path;
	step_fn step;
	long expect;
};

static struct lib libs[2];

static void lib_open(struct lib *l)
{
	void *h = dlopen(l->path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		printf("rank %d: FAIL dlopen: %s\n", rank, dlerror());
		fflush(stdout);
		_exit(1);
	}
	l->step = (step_fn)(uintptr_t)dlsym(h, "plugin_step");
	if (!l->step)
		fail("plugin_step not found in library %ld%ld", (long)(l - libs), 0);
}

static void lib_step(int it)
{
	for (unsigned i = 0; i < 2; i++) {
		struct lib *l = &libs[i];

		if (!l->step)
			continue;
		l->expect += it + 1 + (long)i * 1000;
		long got = l->step(it + 1 + (long)i * 1000);

		if (got != l->expect)
			fail("the dlopen()ed library's sum is %ld, expected %ld", got, l->expect);
	}
}

static FILE *logf;
static int appfd = -1;

static void files_open(const char *dir)
{
	char path[4096];

	if (rank == 0) {
		snprintf(path, sizeof(path), "%s/log.txt", dir);
		logf = fopen(path, "w");
		if (!logf)
			fail("cannot create log.txt%ld%ld", 0, 0);
	}
	snprintf(path, sizeof(path), "%s/append-%d.txt", dir, rank);
	appfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
	if (appfd < 0)
		fail("cannot create append-%ld.txt%ld", rank, 0);
}

static void files_step(int it)
{
	char line[128];
	int n = snprintf(line, sizeof(line), "rank %d appends line %d of %ld blocks\n", rank, it,
			 nblocks);

	if (logf) {
		if (fprintf(logf, "iteration %d: %ld blocks, sum %ld\n", it, nblocks,
			    libs[0].expect) < 0 || fflush(logf) != 0)
			fail("cannot write log.txt at iteration %ld%ld", it, 0);
	}
	if (appfd >= 0 && write(appfd, line, (size_t)n) != n)
		fail("cannot append at iteration %ld%ld", it, 0);
}

static uint64_t *shm;
static char shm_name[64];

static void shm_open_map(const char *dir)
{
	unsigned h = 5381;
	int fd;

	for (const char *p = dir; *p; p++)
		h = h * 33 + (unsigned char)*p;
	snprintf(shm_name, sizeof(shm_name), "/appstate-%08x-%d", h, rank);
	fd = shm_open(shm_name, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 1 << 20) != 0)
		fail("shm_open %ld%ld", fd, 0);
	shm = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (shm == MAP_FAILED)
		fail("mmap of the shared memory object%ld%ld", 0, 0);
	close(fd);
}

static void shm_step(int it)
{
	for (int i = 0; i < it; i++)
		if (shm[i] != 0x5348000000000000ull + (uint64_t)i * 977 + (uint64_t)rank)
			fail("shared memory word %ld is %ld", i, (long)shm[i]);
	shm[it] = 0x5348000000000000ull + (uint64_t)it * 977 + (uint64_t)rank;
}

/* threads that live on across restarts: each checks its own state */
static __thread long tls_word;
static volatile int thread_bad, nthreads_live;
static volatile long thread_turns[64];

static void *thread_main(void *arg)
{
	long id = (long)(intptr_t)arg;
	uint64_t local[512];
	uint64_t *blk = malloc(64 << 10);
	struct timespec ts = { 0, 5 * 1000000 };

	if (!blk)
		thread_bad = 1;
	for (unsigned i = 0; i < 512; i++)
		local[i] = 0x7468000000000000ull ^ ((uint64_t)id << 32) ^ i;
	for (unsigned i = 0; blk && i < (64 << 10) / 8; i++)
		blk[i] = (uint64_t)id * 31 + i;
	for (long turn = 0;; turn++) {
		tls_word = id * 1000003 + turn;
		nanosleep(&ts, NULL);
		for (unsigned i = 0; i < 512; i++)
			if (local[i] != (0x7468000000000000ull ^ ((uint64_t)id << 32) ^ i))
				thread_bad = 1;
		for (unsigned i = 0; blk && i < (64 << 10) / 8; i++)
			if (blk[i] != (uint64_t)id * 31 + i)
				thread_bad = 1;
		if (tls_word != id * 1000003 + turn)
			thread_bad = 1;
		thread_turns[id] = turn;
	}
	return NULL;
}

static void thread_start(void)
{
	pthread_t t;

	if (nthreads_live == 64 ||
	    pthread_create(&t, NULL, thread_main, (void *)(intptr_t)nthreads_live) != 0)
		fail("cannot start thread %ld%ld", nthreads_live, 0);
	pthread_detach(t);
	nthreads_live++;
}

static void thread_step(void)
{
	if (thread_bad)
		fail("a thread found its stack, TLS or heap changed (%ld threads)%ld", nthreads_live, 0);
}

static int unl = -1;

static void unlinked_open(const char *dir)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/unlinked-%d.txt", dir, rank);
	unl = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (unl < 0 || unlink(path) != 0)
		fail("cannot make the unlinked file%ld%ld", unl, 0);
}

static void unlinked_step(int it)
{
	char want[64], got[64];

	for (int i = 0; i < it; i++) {
		int n = snprintf(want, sizeof(want), "line %05d\n", i);

		if (pread(unl, got, (size_t)n, (off_t)i * n) != n || memcmp(got, want, (size_t)n))
			fail("line %ld of the unlinked file is lost (of %ld)", i, it);
	}
	int n = snprintf(want, sizeof(want), "line %05d\n", it);

	if (lseek(unl, (off_t)it * n, SEEK_SET) < 0 || write(unl, want, (size_t)n) != n)
		fail("cannot write the unlinked file at %ld%ld", it, 0);
}

static int rwf = -1;

static void rwfile_open(const char *dir)
{
	char path[4096];
	uint64_t zero[65] = { 0 };

	snprintf(path, sizeof(path), "%s/rw-%d.db", dir, rank);
	rwf = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	/* locked, as a database is: the restart takes the lock again from the
	 * lines that follow the saved contents */
	if (rwf < 0 || pwrite(rwf, zero, sizeof(zero), 0) != (ssize_t)sizeof(zero) ||
	    flock(rwf, LOCK_EX | LOCK_NB) != 0)
		fail("cannot make rw-%ld.db%ld", rank, 0);
}

static void rwfile_step(int it)
{
	uint64_t count = 0, word = ((uint64_t)it << 32) | (uint64_t)rank;

	if (pread(rwf, &count, sizeof(count), 0) != (ssize_t)sizeof(count) || count != (uint64_t)it)
		fail("rw.db holds %ld updates, the program made %ld", (long)count, it);
	count++;
	if (pwrite(rwf, &word, sizeof(word), (off_t)(8 + 8 * (it % 64))) != (ssize_t)sizeof(word) ||
	    pwrite(rwf, &count, sizeof(count), 0) != (ssize_t)sizeof(count))
		fail("cannot update rw.db at %ld%ld", it, 0);
}

static const char *wdir;

static void many_files(const char *dir)
{
	char path[4096];

	for (int k = 0; k < 600; k++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s-%d-%03d", dir, k < 300 ? "gone" : "many", rank,
			 k % 300);
		f = fopen(path, "w");
		if (!f || fprintf(f, "%d\n", k) < 0 || fclose(f) != 0 || (k < 300 && unlink(path)))
			fail("cannot write file %ld of many%ld", k, 0);
	}
}

/* DIR/<name>-R.txt must hold the previous iteration's number; then it
 * holds this one's, written in place or (tmp) into a temporary file
 * renamed over it, the safe-write pattern */
static void wfile_one(int it, const char *name, int tmp)
{
	char path[4096], tmpath[4200];
	FILE *f;
	int prev = -2;

	snprintf(path, sizeof(path), "%s/%s-%d.txt", wdir, name, rank);
	snprintf(tmpath, sizeof(tmpath), "%s.tmp", path);
	if (it > 0) {
		f = fopen(path, "r");
		if (!f || fscanf(f, "iteration %d", &prev) != 1 || prev != it - 1)
			fail(tmp ? "r.txt holds iteration %ld, the program wrote %ld"
				 : "w.txt holds iteration %ld, the program wrote %ld", prev, it - 1);
		fclose(f);
	}
	f = fopen(tmp ? tmpath : path, "w");
	if (!f || fprintf(f, "iteration %d\n", it) < 0 || fclose(f) != 0 ||
	    (tmp && rename(tmpath, path) != 0))
		fail(tmp ? "cannot write r-%ld.txt at %ld" : "cannot write w-%ld.txt at %ld", rank, it);
}

static void wfile_step(int it)
{
	wfile_one(it, "w", 0);
	wfile_one(it, "r", 1);
}

int main(int argc, char **argv)
{
	int size, iters, heap = 0, files = 0, restarts = 0, shared = 0, threads = 0, unlinked = 0;
	int rw = 0;
	long ms;
	pid_t pid = getpid();
	struct timespec ts;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 4)
		fail("usage: appstate ITERATIONS SLEEP_MS DIR [heap] [dlopen A B] [files]%ld%ld", 0, 0);
	iters = atoi(argv[1]);
	ms = atol(argv[2]);
	ts = (struct timespec){ ms / 1000, (ms % 1000) * 1000000 };
	for (int a = 4; a < argc; a++) {
		if (!strcmp(argv[a], "heap")) {
			heap = 1;
		} else if (!strcmp(argv[a], "files")) {
			files = 1;
		} else if (!strcmp(argv[a], "shm")) {
			shared = 1;
			shm_open_map(argv[3]);
		} else if (!strcmp(argv[a], "unlinked")) {
			unlinked = 1;
			unlinked_open(argv[3]);
		} else if (!strcmp(argv[a], "rwfile")) {
			rw = 1;
			rwfile_open(argv[3]);
		} else if (!strcmp(argv[a], "wfile")) {
			wdir = argv[3];
		} else if (!strcmp(argv[a], "many")) {
			many_files(argv[3]);
		} else if (!strcmp(argv[a], "socket")) {
			if (socket(AF_INET, SOCK_DGRAM, 0) < 0)
				fail("socket%ld%ld", 0, 0);
		} else if (!strcmp(argv[a], "thread")) {
			threads = 1;
			thread_start();
		} else if (!strcmp(argv[a], "memfd")) {
			int fd = memfd_create("appstate", 0);

			if (fd < 0 || ftruncate(fd, 1 << 16) != 0 ||
			    mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
				fail("memfd %ld%ld", fd, 0);
		} else if (!strcmp(argv[a], "dlopen") && a + 2 < argc) {
			libs[0].path = argv[++a];
			libs[1].path = argv[++a];
			lib_open(&libs[0]);
		} else {
			fail("unknown argument %ld%ld", a, 0);
		}
	}
	if (files)
		files_open(argv[3]);
	for (int it = 0; it < iters; it++) {
		if (getpid() != pid) {
			pid = getpid();
			restarts++;
			if (libs[1].path && !libs[1].step)
				lib_open(&libs[1]);
			if (threads)
				thread_start();
			printf("rank %d restarted %d\n", rank, restarts);
			fflush(stdout);
		}
		if (heap)
			heap_step(it);
		lib_step(it);
		if (files)
			files_step(it);
		if (shared)
			shm_step(it);
		if (unlinked)
			unlinked_step(it);
		if (rw)
			rwfile_step(it);
		if (wdir)
			wfile_step(it);
		if (threads)
			thread_step();
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < nthreads_live; i++)
		if (thread_turns[i] < 1)
			fail("thread %ld did not run%ld", i, 0);
	if (shm && shm_unlink(shm_name) != 0)
		fail("shm_unlink%ld%ld", 0, 0);
	if (logf && fclose(logf) != 0)
		fail("cannot close log.txt%ld%ld", 0, 0);
	if (appfd >= 0 && close(appfd) != 0)
		fail("cannot close the appended file%ld%ld", 0, 0);
	/* every rank's restarts, through MPI: a line a rank printed right after
	 * a restart does not always reach the launcher's output under Open MPI
	 * (docs/split.md, "Open questions") */
	{
		int lo = 0, hi = 0;

		MPI_Allreduce(&restarts, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		MPI_Allreduce(&restarts, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (rank == 0)
			printf("PASS ranks=%d iterations=%d blocks=%ld restarts=%d/%d\n", size, iters,
			       nblocks, lo, hi);
	}
	fflush(stdout);
	MPI_Finalize();
	return 0;
}
