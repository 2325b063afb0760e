/* lh_agent.c - a rank's checkpoint thread, in the lower half.
 *
 * The thread belongs to the lower half (its libc, its TLS) and is never
 * stopped: it can use malloc, stdio and the store while every upper thread
 * is parked, whatever locks of the upper libc those hold. Conversation with
 * the node's agent (src/node, docs/coordinator.md "Node agents"), which
 * speaks for the node's ranks to the coordinator: text lines over a Unix
 * socket.
 *
 *   rank:  RANK 5 <secret> <rank> <size> <pid> <host> <restarts>
 *   agent: OK <slot> <gen> (with the board's descriptors) | OK | ERR <why>
 *   agent: CHECKPOINT <name>          (on the board: node_park.h)
 *   rank:  PARKED <us> | FAILED <why> (on the board, FAILED on the socket)
 *   agent: WRITE [ONLY|EXCEPT <rank>...] | RESUME failed
 *   rank:  DONE <regions> <pages> [<file> <size> <crc> <image>] | FAILED <why>
 *   agent: RESUME | RESUME failed | EXIT | MOVE <host> <rank>... | WRITE...
 *   rank:  REQUEST (MPIX_Checkpoint), BYE (MPI_Finalize: it ends)
 *
 * The thread never calls MPI: the checkpoint's MPI calls are jobs it posts
 * to the parked main thread (on_main, below).
 *
 * Parking: LH_CKPT_SIGNAL goes to every thread but the lower half's own.
 * Its handler runs on whatever TLS the thread has, so it uses none (raw
 * system calls only) and tells threads apart by their FS base: the lower
 * half's main TLS means an upper thread inside an MPI call (it parks when it
 * leaves, sts_leave), a base in the upper range an upper thread outside
 * (it parks now, in the handler: its registers are in the signal frame on
 * its stack, saved with its memory), anything else a lower-half thread (it
 * returns at once).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/line.h"
#include "node/node_migrate.h"
#include "image/image.h"
#include "lh.h"
#include "lh_ckpt.h"
#include "lh_fds.h"
#include "lh_ledger.h"
#include "lh_spare.h"
#include "lh_stage.h"
#include "node/node.h"
#include "node/node_park.h"
#include "pimg/pimg_threads.h"
#include "store/store.h"

#define PARK_TIMEOUT_MS 10000
#define DRAIN_TIMEOUT_MS 30000
#define TID_OFFSET 0x2d0   /* struct pthread's tid in glibc 2.36, x86-64 (checked) */

static int coord_fd = -1;
/* the node agent's board (node_park.h): CHECKPOINT is posted there and
 * this rank counts itself parked there; NULL: both are lines */
static struct {
	struct node_park *p;
	int ep;                 /* coord_fd and the ranks' bell (edge-triggered) */
	int ranks_bell, agent_bell;
	unsigned slot;
	uint32_t seen;          /* the last generation posted for this rank */
} board = { .ep = -1, .ranks_bell = -1, .agent_bell = -1 };
static char job_secret[33];   /* coord.secret: a move's stream presents it */
static MPI_Comm agent_comm = MPI_COMM_NULL;   /* the lower halves' own */
static struct store *store;
static struct lh_ckpt_state st;
static pid_t lower_tids[256];
static unsigned nlower;

/* the park protocol (pimg_threads.h): parked threads take a slot of
 * st.threads; lower-half threads answer, and say who they are in
 * answered[]. Room for more threads than the table holds: those are
 * refused once parked (check_parked). */
#define PARK_CAP (LH_MAX_THREADS + sizeof(lower_tids) / sizeof(lower_tids[0]) + 2)
static int32_t park_tids[3][PARK_CAP];
static int skip_thread(int32_t tid, void *ctx);
static struct pimg_park pk = {
	.sig = LH_CKPT_SIGNAL, .signaled = park_tids[0], .seen = park_tids[1],
	.tasks = park_tids[2], .cap = PARK_CAP, .skip = skip_thread,
};
static uint32_t inlower_n, main_in, lower_n;
static pid_t answered[64];

static inline long rsys(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;

	__asm__ volatile("syscall" : "=a"(r) : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return r;
}

/* The MPI calls of a checkpoint (rounds, drain, Finalize) are made by the
 * program's main thread while it is parked, never by the checkpoint thread:
 * MPI is used by one thread only, so the lower half can ask for
 * MPI_THREAD_SINGLE, whose libraries take no locks (docs/split.md, "Thread
 * level"). The checkpoint thread posts a job (on_main) and waits; the
 * parked thread runs it on the lower half's TLS and goes on waiting. */
static int (*job_fn)(void);
static int job_ret;
static uint32_t job_gen, job_done;
static int parked_main;   /* the main thread is parked, alone: it takes jobs */

static char job_msg[512];   /* err_msg() is per thread: the job's, for the checkpoint thread */

static int job_call(void)
{
	int ret;

	err_clear();
	ret = job_fn();
	snprintf(job_msg, sizeof(job_msg), "%s", ret < 0 ? err_msg() : "");
	return ret;
}

static void __attribute__((no_stack_protector)) run_job(uint32_t job, uint64_t upper_fs)
{
	sts_wrfs((int)lh_info->fsgsbase, lh_info->lh_fs);
	job_ret = job_call();
	sts_wrfs((int)lh_info->fsgsbase, upper_fs);
	__atomic_store_n(&job_done, job, __ATOMIC_SEQ_CST);
	rsys(SYS_futex, (long)&job_done, FUTEX_WAKE, 1, 0);
}

/* the parked main thread's work: the job posted since it last looked */
struct parked {
	uint32_t job;
	uint64_t fs;
};

static int __attribute__((no_stack_protector)) main_work(void *arg)
{
	struct parked *pw = arg;
	uint32_t job = __atomic_load_n(&job_gen, __ATOMIC_SEQ_CST);

	if (job == pw->job)
		return 0;
	pw->job = job;
	run_job(job, pw->fs);
	return 1;
}

/* split_onetls: an upper thread runs the lower half's code on its own
 * thread pointer while the lower half's pointer guard is in its TCB
 * (sts_enter swaps it in): the guard tells "inside" */
static int __attribute__((no_stack_protector)) lh_onetls_inside(uint64_t fs)
{
	uint64_t g;

	if (!lh_info->onetls || fs < STS_UPPER_LO || fs >= STS_UPPER_HI)
		return 0;
	__asm__ volatile("mov %%fs:0x30, %0" : "=r"(g));
	return g == lh_info->lh_guard;
}

static void __attribute__((no_stack_protector)) park(int sig, siginfo_t *si, void *uc)
{
	uint64_t fs = sts_rdfs((int)lh_info->fsgsbase);
	struct parked pw = { 0, fs };
	uint32_t gen, i;
	long tid;
	int is_main;

	(void)sig;
	(void)si;
	if (lh_tls_lent(fs) || lh_onetls_inside(fs)) {
		/* inside an MPI call: it parks when it leaves (sts_leave) */
		__atomic_add_fetch(&inlower_n, 1, __ATOMIC_SEQ_CST);
		return;
	}
	if (!lh_info->uh && fs >= STS_UPPER_LO && fs < STS_UPPER_HI) {
		/* the upper half is still starting (its ld.so, its libraries'
		 * constructors, its main before MPI_Init): it holds descriptors
		 * and half-built state no restart gives back. It parks when its
		 * MPI_Init leaves the lower half, as from any call (sts_leave) */
		__atomic_add_fetch(&inlower_n, 1, __ATOMIC_SEQ_CST);
		return;
	}
	tid = rsys(SYS_gettid, 0, 0, 0, 0);
	if (fs < STS_UPPER_LO || fs >= STS_UPPER_HI) {
		i = __atomic_fetch_add(&lower_n, 1, __ATOMIC_SEQ_CST);
		if (i < sizeof(answered) / sizeof(answered[0]))
			__atomic_store_n(&answered[i], (pid_t)tid, __ATOMIC_SEQ_CST);
		pimg_park_answer(&pk, (int32_t)tid);
		return;
	}
	/* the generation first: a resume between these two loads is seen by
	 * one or the other, never missed (resume clears pending, then counts) */
	gen = pimg_park_gen(&pk);
	if (!lh_info->ckpt_pending) {
		/* at SERIALIZED or MULTIPLE a checkpoint may hold this thread
		 * alone at a collective's entry (lh_coll.c); the others run on */
		struct sts_tls *me = lh_info->ntls > 1 ? lh_tls_of_tid((int32_t)tid) : NULL;

		if (!me || !me->hold)
			return;
		me->hold = 0;
	}
	is_main = tid == rsys(SYS_getpid, 0, 0, 0, 0);
	i = pimg_park_slot(&pk);
	if (i < LH_MAX_THREADS) {
		/* zeroed by reset_parking; what the single-process agent records too */
		pimg_thread_capture(&st.threads[i], uc, fs, 0);
	}
	pw.job = __atomic_load_n(&job_gen, __ATOMIC_SEQ_CST);
	if (is_main)
		__atomic_store_n(&main_in, 1, __ATOMIC_SEQ_CST);
	pimg_park_parked(&pk, (int32_t)tid);
	pimg_park_hold(&pk, gen, is_main ? main_work : NULL, &pw);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int is_lower(pid_t tid)
{
	for (unsigned i = 0; i < nlower; i++)
		if (lower_tids[i] == tid)
			return 1;
	return 0;
}

static void resume(void)
{
	parked_main = 0;
	lh_info->ckpt_pending = 0;
	pimg_park_release(&pk);
}

/* fn on the parked main thread; its result (err_msg() set from the job's) */
static int on_main(int (*fn)(void))
{
	uint32_t job;

	if (!parked_main)
		return err_set(-EDEADLK, "rank %d: the program's thread is not stopped; the "
			       "checkpoint cannot go on", lh_info->world_rank);
	job_fn = fn;
	job = __atomic_add_fetch(&job_gen, 1, __ATOMIC_SEQ_CST);
	pimg_park_wake(&pk);
	for (;;) {
		uint32_t d = __atomic_load_n(&job_done, __ATOMIC_SEQ_CST);

		if (d == job)
			return job_ret < 0 && *job_msg ? err_set(job_ret, "%s", job_msg) : job_ret;
		syscall(SYS_futex, &job_done, FUTEX_WAIT, d, NULL, NULL, 0);
	}
}

static void reset_parking(void)
{
	memset(st.threads, 0, sizeof(st.threads));
	inlower_n = main_in = lower_n = 0;
	pimg_park_reset(&pk);
}

/* never signaled: this thread and the lower half's */
static int skip_thread(int32_t tid, void *ctx)
{
	(void)ctx;
	return tid == (int32_t)syscall(SYS_gettid) || is_lower(tid);
}

/* Every thread parked: the main thread first in st.threads, and what the
 * image needs of each one there. */
static int check_parked(void)
{
	uint32_t n = __atomic_load_n(&pk.slots, __ATOMIC_SEQ_CST);
	int main = -1;

	if (n > LH_MAX_THREADS)
		return err_set(-ENOTSUP, "rank %d: the program runs %u threads; the split process "
			       "checkpoints at most %d per rank", lh_info->world_rank, n,
			       LH_MAX_THREADS);
	for (uint32_t i = 0; i < n; i++)
		if (st.threads[i].flags & PIMG_THREAD_MAIN)
			main = (int)i;
	if (main < 0)
		return err_set(-EDEADLK, "rank %d: the program's main thread did not stop",
			       lh_info->world_rank);
	if (main > 0) {
		struct pimg_rec_thread t = st.threads[0];

		st.threads[0] = st.threads[main];
		st.threads[main] = t;
	}
	for (uint32_t i = 0; i < n; i++)
		if (*(int32_t *)(uintptr_t)(st.threads[i].fs_base + TID_OFFSET) != st.threads[i].tid)
			return err_set(-ENOTSUP, "rank %d: the program's libc keeps its thread "
				       "ids where Stasis does not expect them (glibc 2.36 is "
				       "supported)", lh_info->world_rank);
	/* signals sent while the threads were blocking them, or during the
	 * checkpoint (its handler blocks every one): sent again at a restart */
	for (uint32_t i = 0; i < n; i++)
		st.threads[i].sigpending = pimg_pending(st.threads[i].tid, 0, LH_CKPT_SIGNAL);
	st.shared_pending = pimg_pending(0, 1, LH_CKPT_SIGNAL);
	st.nthreads = n;
	st.tid_offset = TID_OFFSET;
	parked_main = 1;
	return 0;
}

/* Signal every thread that may be the upper half's and has not parked yet
 * (the main thread may have, at its targets), and wait until each has
 * parked, said it is the lower half's, or ended; then check what the image
 * needs of them. */
static int park_all(void)
{
	int ret;

	lh_info->ckpt_pending = 1;
	parked_main = 0;
	ret = pimg_park_all(&pk, PARK_TIMEOUT_MS);
	if (ret == -E2BIG)
		return err_set(-ENOTSUP, "rank %d: the program runs more than %d threads; "
			       "the split process checkpoints at most %d per rank",
			       lh_info->world_rank, LH_MAX_THREADS, LH_MAX_THREADS);
	if (ret == -ETIMEDOUT && !lh_info->uh)
		return err_set(-ETIMEDOUT, "rank %d: the program did not call MPI_Init within "
			       "%d s; a checkpoint waits for that", lh_info->world_rank,
			       PARK_TIMEOUT_MS / 1000);
	if (ret == -ETIMEDOUT)
		return err_set(-ETIMEDOUT, "rank %d: %u thread(s) of the program did not stop "
			       "within %d s (inside an MPI call that waits for a stopped rank?)",
			       lh_info->world_rank, pk.left, PARK_TIMEOUT_MS / 1000);
	if (ret)
		return err_set(ret, "cannot list /proc/self/task: %s", strerror(-ret));
	if (lh_log_on(LOG_DEBUG))
		lh_log(LOG_DEBUG, "rank %d: %u thread(s) stopped, %u of them on their way out "
		       "of an MPI call", lh_info->world_rank, __atomic_load_n(&pk.slots, __ATOMIC_SEQ_CST),
		       __atomic_load_n(&inlower_n, __ATOMIC_SEQ_CST));
	/* threads of the lower half started after this one: never signaled again */
	for (uint32_t i = 0; i < lower_n && i < sizeof(answered) / sizeof(answered[0]); i++)
		if (!is_lower(answered[i]) && nlower < sizeof(lower_tids) / sizeof(lower_tids[0]))
			lower_tids[nlower++] = answered[i];
	return check_parked();
}

/* at SERIALIZED or MULTIPLE: no communicator is behind its target (the
 * lock, wanted, is let go of by a thread waiting in a loop of tests) */
static int at_targets(void)
{
	int behind;

	lh_lock();
	behind = lh_coll_behind();
	lh_unlock();
	return !behind;
}

/* A rank behind a collective target (lh_coll.c): its threads run on until
 * the main thread parks itself at its targets (at SERIALIZED or MULTIPLE:
 * until no communicator is behind, whichever threads brought it there), or
 * are parked by force after timeout_ms; then the others are stopped
 * again. */
static int run_until_parked(int timeout_ms)
{
	uint64_t deadline = lh_now_ms() + (uint64_t)timeout_ms;
	int ret, parked;

	reset_parking();
	resume();
	for (;;) {
		uint32_t a = __atomic_load_n(&pk.answers, __ATOMIC_SEQ_CST);
		struct timespec ts = { 0, lh_info->ntls > 1 ? 2 * 1000 * 1000 : 20 * 1000 * 1000 };

		parked = lh_info->ntls > 1 ? at_targets()
					   : (int)__atomic_load_n(&main_in, __ATOMIC_SEQ_CST);
		if (parked || lh_now_ms() >= deadline)
			break;
		syscall(SYS_futex, &pk.answers, FUTEX_WAIT_PRIVATE, a, &ts, NULL, 0);
	}
	ret = park_all();
	return ret ? ret : parked ? 0 : -ETIMEDOUT;
}

/* The rank's image of checkpoint name: into its node's local directory
 * with staging on (lh_stage.c), else into the global tier, its record
 * left to the node agent (*rec, named in DONE: one append to the job's
 * index a node, docs/coordinator.md "Records a node"); rec->info.name
 * empty when the rank appended it itself */
static int write_image(const char *name, const char *stream, struct lh_dump_info *info,
		       struct store_file_record *rec)
{
	struct store *to = lh_stage_on() && !stream ? lh_stage_store() : NULL;
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	struct img_writer *w = NULL;
	struct img_writer_opts opts;
	char file[64], num[32], path[PATH_MAX];
	struct node_migrate_stream sfd = { -1, 0 };
	int ret;

	snprintf(file, sizeof(file), SPLIT_IMAGE_FMT, lh_info->world_rank);
	img_writer_opts_default(&opts);
	ret = 0;
	if (!getenv("STASIS_FAULT_RANK") || atoi(getenv("STASIS_FAULT_RANK")) == lh_info->world_rank)
		ret = FAULT(SPLIT_RANK_WRITE);
	if (ret)
		ret = err_set(ret, "rank %d: fault point split.rank.write", lh_info->world_rank);
	else if (lh_stage_on() && !stream && !to)
		ret = err_set(-EIO, "rank %d: cannot open the node-local directory %s: %s",
			      lh_info->world_rank, getenv("STASIS_STAGE_DIR"), err_msg());
	if (stream) {
		/* a move into a spare: to the target's receiver, at the path the
		 * spare reads, nothing on this node (node_migrate.h) */
		ret = ret ? ret : lh_stage_path(name, lh_info->world_rank, path, sizeof(path));
		ret = ret ? ret : node_migrate_stream_open(stream, job_secret, path, &sfd);
		ret = ret ? ret : img_writer_create(node_migrate_stream_write, &sfd, &opts, &w);
		goto meta;
	}
	/* the coordinator began it: no rank reads the index (docs/scale.md) */
	ret = ret ? ret : to ? store_ckpt_begin_named(to, name, &ck)
			     : store_ckpt_join_begun(store, name, &ck);
	ret = ret ? ret : store_file_create(ck, file, &f);
	ret = ret ? ret : img_writer_create(store_file_write, f, &opts, &w);
	if (!ret)
		img_writer_sink_crc(w, store_file_write_crc);
meta:
	ret = ret ? ret : img_writer_meta(w, "producer", "stasis split");
	ret = ret ? ret : img_writer_meta(w, "job", getenv("STASIS_JOB_NAME"));
	snprintf(num, sizeof(num), "%d", lh_info->world_rank);
	ret = ret ? ret : img_writer_meta(w, "rank", num);
	snprintf(num, sizeof(num), "%d", lh_info->world_size);
	ret = ret ? ret : img_writer_meta(w, "size", num);
	ret = ret ? ret : img_writer_meta(w, "library", lh_info->library);
	ret = ret ? ret : lh_dump(w, &st, info);
	ret = ret ? ret : img_writer_finish(w, NULL);
	/* the writer's threads joined before its sink closes: after a failure
	 * in lh_dump one may still be writing, and a closed stream's number
	 * can be taken by the next open (the cut ends a write under way) */
	if (stream && ret)
		node_migrate_stream_cut(&sfd);
	img_writer_free(&w);
	rec->info.name[0] = '\0';
	if (stream) {
		int closed = node_migrate_stream_close(&sfd, ret != 0);

		ret = ret ? ret : closed;
	} else {
		ret = ret ? ret : to ? store_file_commit(f) : store_file_commit_unrecorded(f, rec);
	}
	store_file_free(&f);
	store_ckpt_free(&ck);
	return ret;
}

static int send_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int send_line(const char *fmt, ...)
{
	/* the checkpoint thread and the main thread (BYE, REQUEST) both speak */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	char buf[512];
	va_list ap;
	int n, ret;

	va_start(ap, fmt);
	n = line_vformat(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return n;
	pthread_mutex_lock(&lock);
	ret = coord_fd >= 0 && send(coord_fd, buf, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -EPIPE;
	pthread_mutex_unlock(&lock);
	return ret;
}

static int read_line(char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read(coord_fd, buf + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		if (buf[n] == '\n') {
			buf[n] = 0;
			return 0;
		}
		n++;
	}
	return -E2BIG;
}

/* ---- the board (node_park.h) ---- */

static void board_close(void)
{
	node_park_unmap(&board.p);
	for (int *f = (int[]){ board.ep, board.ranks_bell, board.agent_bell }, k = 0; k < 3; k++)
		if (f[k] >= 0)
			close(f[k]);
	board.ep = board.ranks_bell = board.agent_bell = -1;
}

/* The board and its bells (fds, from OK <slot> <gen>): this rank's slot,
 * the generation it starts from, and one epoll set for the socket and the
 * ranks' bell */
static int board_open(const int *fds, unsigned slot, uint32_t gen)
{
	int ret = node_park_map(fds[0], &board.p);

	close(fds[0]);
	board.ranks_bell = lh_fd_take(fds[1]);
	board.agent_bell = lh_fd_take(fds[2]);
	board.ep = ret ? -1 : epoll_create1(EPOLL_CLOEXEC);
	if (!ret && board.ep < 0)
		ret = err_set(-errno, "epoll: %s", strerror(errno));
	/* each write of the bell an event here: nobody reads it */
	if (!ret && (epoll_ctl(board.ep, EPOLL_CTL_ADD, coord_fd,
			       &(struct epoll_event){ .events = EPOLLIN, .data.fd = coord_fd }) != 0 ||
		     epoll_ctl(board.ep, EPOLL_CTL_ADD, board.ranks_bell,
			       &(struct epoll_event){ .events = EPOLLIN | EPOLLET,
						      .data.fd = board.ranks_bell }) != 0))
		ret = err_set(-errno, "epoll: %s", strerror(errno));
	if (!ret && slot >= NODE_PARK_SLOTS)
		ret = err_set(-EPROTO, "the node agent gave this rank slot %u of %d", slot,
			      NODE_PARK_SLOTS);
	if (ret) {
		board_close();
		return ret;
	}
	board.slot = slot;
	board.seen = gen;
	return 0;
}

/* The agent's answer to RANK, with the board's descriptors when it has a
 * slot for this rank: 0 once registered, else the answer in line */
static int registered(char *line, size_t len)
{
	int fds[NODE_PARK_FDS], nfds = 0;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(fds))];
	} u;
	struct iovec iov = { line, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			    .msg_controllen = sizeof(u.b) };
	unsigned slot, gen;
	int ret = 0, n = 0;
	ssize_t r;

	/* the descriptors come with the first byte */
	do
		r = recvmsg(coord_fd, &m, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	for (struct cmsghdr *c = r == 1 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && !nfds) {
			nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), (size_t)(nfds < NODE_PARK_FDS ? nfds : NODE_PARK_FDS) *
						  sizeof(int));
		}
	if (r != 1)
		ret = -EPIPE;
	else if (line[0] == '\n')
		line[0] = 0;
	else
		ret = read_line(line + 1, len - 1);
	if (ret)
		line[0] = 0;
	else if (!strcmp(line, "OK"))
		ret = 0;
	else if (nfds == NODE_PARK_FDS && sscanf(line, "OK %u %u%n", &slot, &gen, &n) == 2 &&
		 !line[n])
		ret = board_open(fds, slot, gen), nfds = 0;
	else
		ret = -EPROTO;
	for (int i = 0; i < nfds && i < NODE_PARK_FDS; i++)
		close(fds[i]);
	return ret;
}

/* The next line from the node agent, or a CHECKPOINT posted on the board
 * (*posted). Lines first: a rank stopped past a whole checkpoint finds its
 * verdict there, and reads it before the board's next post, so that it
 * never takes an old verdict for the new checkpoint's (node_park_posted
 * then skips the old one) */
static int next_line(char *line, size_t len, int *posted)
{
	char name[sizeof(board.p->ckpt)];
	struct epoll_event ev[2];

	*posted = 0;
	while (board.p) {
		struct pollfd q = { .fd = coord_fd, .events = POLLIN };
		int n;

		if (poll(&q, 1, 0) == 1)
			return read_line(line, len);
		if (node_park_posted(board.p, &board.seen, name, sizeof(name))) {
			snprintf(line, len, "CHECKPOINT %s", name);
			*posted = 1;
			return 0;
		}
		n = epoll_wait(board.ep, ev, 2, -1);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++)
			if (ev[i].data.fd == coord_fd)
				return read_line(line, len);
	}
	return read_line(line, len);
}

/* An RMA operation of another rank may wait inside MPI for this one, its
 * target, to drive MPI (Open MPI's accumulates do): while it waits for the
 * coordinator's word, a parked rank that holds windows has its main thread
 * drive MPI every millisecond, so that rank can leave the call and park. */
static int progress(void)
{
	return lh_win_progress(agent_comm);
}

static int await_line(char *buf, size_t len)
{
	struct pollfd p = { .fd = coord_fd, .events = POLLIN };

	while (parked_main && lh_live(STS_WIN) > 0 && poll(&p, 1, 1) == 0)
		on_main(progress);
	return read_line(buf, len);
}

/* Rounds until no rank is behind a collective target (lh_coll.c); a rank
 * behind runs on until it parks at its targets. One that has not parked
 * after RELEASE_MS is stuck, and the next round is a release: every rank
 * runs for RELEASE_MS (doubled after each release, up to RELEASE_MAX_MS),
 * the ones held at a collective's entry starting it. */
#define RELEASE_MS 100
#define RELEASE_MAX_MS 2000
static int coll_failed, coll_stuck;

static int coll_round(void)
{
	return lh_coll_round(agent_comm, &coll_failed, coll_stuck);
}

static int coll_quiesce(void)
{
	uint64_t deadline = lh_now_ms() + LH_QUIESCE_TIMEOUT_MS;
	int ret, release_ms = RELEASE_MS;

	coll_failed = coll_stuck = 0;
	lh_lg->held = lh_lg->held_blocking = lh_lg->go_blocking = 0;
	for (uint32_t i = 0; i < lh_info->ntls; i++)
		lh_info->tls[i].held = lh_info->tls[i].hold = 0;
	while ((ret = on_main(coll_round)) > 0) {
		uint64_t now = lh_now_ms();
		int left = now < deadline ? (int)(deadline - now) : 1, parked;

		coll_stuck = 0;
		if (ret == LH_ROUND_AGAIN)
			continue;
		lh_lg->advancing = ret == LH_ROUND_RELEASE ? LH_RUN_RELEASE : LH_RUN_ADVANCE;
		/* a blocking collective that every member starts now ends when
		 * they all are in it: until then this thread cannot park */
		parked = run_until_parked(release_ms < left && !lh_lg->go_blocking ? release_ms
											: left) == 0;
		lh_lg->advancing = 0;
		/* out of time (ranks held at blocking collectives park every
		 * round without getting anywhere), or not stopped again (on_main
		 * will say why) */
		if (lh_now_ms() >= deadline || (!parked && !parked_main))
			coll_failed = 1;
		else if (!parked && ret == LH_ROUND_ADVANCE)
			coll_stuck = 1;
		if (ret == LH_ROUND_RELEASE && release_ms < RELEASE_MAX_MS)
			release_ms *= 2;
	}
	return ret;
}

/* Every rank is parked at its targets: receive what is in flight into the
 * drain buffer, complete every send (lh_p2p.c), then refuse what a restart
 * could not rebuild. The drain stays for the program after a refusal too. */
static int quiesce(void)
{
	char why[256];
	int ret = lh_win_quiesce(agent_comm);

	if (ret != MPI_SUCCESS)
		return err_set(-EIO, "rank %d: cannot complete the RMA operations in flight "
			       "(MPI error %d)", lh_info->world_rank, ret);
	ret = lh_p2p_drain(agent_comm, DRAIN_TIMEOUT_MS);
	if (ret)
		return ret;
	ret = lh_io_save();
	if (ret != MPI_SUCCESS)
		return err_set(-EIO, "rank %d: cannot read a file's position (MPI error %d)",
			       lh_info->world_rank, ret);
	ret = lh_info_save();
	if (ret)
		return ret;
	lh_state_unsupported(why, sizeof(why));
	if (*why)
		return err_set(-ENOTSUP, "rank %d: %s: the split process cannot restore it yet "
			       "(docs/split.md)", lh_info->world_rank, why);
	return 0;
}

static int finalize(void)
{
	lh_spare_release();
	return MPI_Finalize();
}

static int idle_dup(void);

/* MOVE <host> <rank>...: the ranks named go into spares on host, the job
 * keeps every other process (docs/coordinator.md, "Moving a rank into a
 * spare"). Each step runs on the parked main thread. */
static struct {
	char host[64], ckpt[64];
	int ranks[LINE_MOVE_RANKS_MAX], n, moving;
} mv;

/* every active rank can take part, and the same spares are chosen on all
 * (collective over agent_comm) */
static int move_check(void)
{
	char why[256];
	int mine, first = 0;

	lh_state_unmovable(why, sizeof(why));
	if (!*why)
		lh_spare_choose(mv.host, mv.ranks, mv.n, why, sizeof(why));
	/* the first rank that refuses says why, the same on every rank */
	mine = *why ? lh_info->world_rank : lh_info->world_size;
	if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, agent_comm) != MPI_SUCCESS ||
	    (first < lh_info->world_size &&
	     MPI_Bcast(why, (int)sizeof(why), MPI_CHAR, first, agent_comm) != MPI_SUCCESS))
		return err_set(-EIO, "rank %d: the ranks cannot agree on the move",
			       lh_info->world_rank);
	if (first < lh_info->world_size)
		return err_set(-ENOTSUP, "%s", why);
	return 0;
}

static int move_send(void)
{
	if (lh_spare_send(lh_info->world_rank, mv.ckpt) != MPI_SUCCESS)
		return err_set(-EIO, "rank %d: cannot reach its spare on %s", lh_info->world_rank,
			       mv.host);
	return 0;
}

/* a rank that stays: MPI_COMM_WORLD, every communicator and group, and the
 * checkpoint threads' communicator made again over the new map, with the
 * spares that became ranks (their lh_state_rebuild, then lh_agent_start) */
static int move_relink(void)
{
	MPI_Comm old = MPI_COMM_NULL;
	int ret;

	if (FAULT(SPLIT_MOVE_RELINK) != 0)
		return err_set(-EIO, "rank %d: fault point split.move.relink", lh_info->world_rank);
	if (lh_spare_world(&old) != MPI_SUCCESS)
		return err_set(-EIO, "rank %d: cannot make MPI_COMM_WORLD again with the moved "
			       "ranks", lh_info->world_rank);
	lh_handles_init(1);   /* the program's MPI_COMM_WORLD: the new one */
	ret = lh_state_relink();
	if (!ret) {
		MPI_Comm_free(&agent_comm);
		if (idle_dup() != MPI_SUCCESS)
			ret = err_set(-EIO, "rank %d: cannot make the checkpoint threads' "
				      "communicator again", lh_info->world_rank);
	}
	MPI_Comm_free(&old);
	return ret;
}

/* a rank that moved: its old process ends (lh_spare_leave), or, where
 * the MPI keeps it to the job's end, holds nothing of the program's but
 * its threads' stacks, which their parked frames (and this one) are on */
static int move_leave(void)
{
	uint64_t keep[LH_MAX_THREADS + 1], freed, kept;
	int n = 0;

	if (!lh_spare_may_leave()) {
		keep[n++] = (uint64_t)(uintptr_t)__builtin_frame_address(0);
		for (uint32_t i = 0; i < st.nthreads && n < LH_MAX_THREADS + 1; i++)
			keep[n++] = st.threads[i].sigframe;
		lh_image_release(keep, n, &freed, &kept);
		lh_log(LOG_INFO, "rank %d moved: its old process waits for the job's end, its "
		       "upper half unmapped (%llu MiB) but its %d threads' stacks (%llu MiB "
		       "mapped)", lh_info->world_rank, (unsigned long long)(freed >> 20),
		       (int)st.nthreads, (unsigned long long)(kept >> 20));
	}
	lh_spare_leave();
}

/* 0 when this rank moved or relinked, the answer (MOVED or FAILED) sent */
static int move(const char *ckpt, const char *args)
{
	int pos = 0, r, ret;

	snprintf(mv.ckpt, sizeof(mv.ckpt), "%.63s", ckpt);
	mv.n = mv.moving = 0;
	if (sscanf(args, "%63s%n", mv.host, &pos) != 1)
		return send_line("FAILED rank %d: a MOVE without a host", lh_info->world_rank), -1;
	for (args += pos; sscanf(args, "%d%n", &r, &pos) == 1; args += pos) {
		/* every rank reads the same line: all refuse alike */
		if (mv.n == LINE_MOVE_RANKS_MAX)
			return send_line("FAILED rank %d: a MOVE of more than %d ranks",
					 lh_info->world_rank, LINE_MOVE_RANKS_MAX), -1;
		mv.ranks[mv.n++] = r;
		mv.moving |= r == lh_info->world_rank;
	}
	err_clear();
	ret = on_main(move_check);
	if (ret) {   /* refused alike by every rank: all stay parked */
		send_line("FAILED %s", *err_msg() ? err_msg() : strerror(-ret));
		return -1;
	}
	/* agreed: the others are in the move's collective calls, which only
	 * the job's end releases should this rank fail (mpirun ends the job
	 * for a rank that exits; --recover auto then recovers it) */
	if (on_main(mv.moving ? move_send : move_relink) != 0)
		lh_die("%s; the move was agreed: the job ends", *err_msg() ? err_msg() :
		       "the move failed");
	send_line("MOVED %d", mv.moving);
	return 0;
}

/* WRITE, WRITE ONLY <rank>... [TO <host:port>], WRITE EXCEPT <rank>...
 * (every rank is parked): drain once a checkpoint, then write the image if
 * the line names this rank, and say DONE (or FAILED). A move into spares
 * has only the moving ranks write (ONLY), straight to the target's
 * receiver (TO); the others, should the move fail, write theirs after it
 * (EXCEPT: docs/coordinator.md, "Moving a rank into a spare"). */
static void write_phase(const char *name, const char *args, int *drained)
{
	struct lh_dump_info info = { 0 };
	struct store_file_record rec = { 0 };
	const char *to = strstr(args, " TO ");   /* ONLY ... TO <host:port>: streamed */
	int ret = 0;

	err_clear();
	if (!*drained) {
		ret = coll_quiesce();
		if (!ret)
			ret = on_main(quiesce);
		*drained = !ret;
	}
	if (!ret && !line_write_names(args, lh_info->world_rank)) {
		send_line("DONE 0 0");
		return;
	}
	if (!ret)
		ret = write_image(name, to ? to + 4 : NULL, &info, &rec);
	if (ret)
		send_line("FAILED %s", *err_msg() ? err_msg() : strerror(-ret));
	else if (rec.info.name[0])
		send_line("DONE %u %llu %s %llu %08x %d", info.regions, (unsigned long long)info.pages,
			  rec.info.name, (unsigned long long)rec.info.size, rec.info.crc, rec.image);
	else
		send_line("DONE %u %llu", info.regions, (unsigned long long)info.pages);
}

/* The WRITE lines in a row, each answered, until another line (in line) */
static int write_phases(const char *name, char *line, size_t len, int *drained)
{
	while (!strncmp(line, "WRITE", 5) && (!line[5] || line[5] == ' ')) {
		write_phase(name, line + 5, drained);
		if (read_line(line, len) != 0)
			return -EPIPE;
	}
	return 0;
}

/* CHECKPOINT: park, say PARKED (or FAILED); on WRITE check, write and say
 * DONE (or FAILED); then RESUME or EXIT, or MOVE. posted: the CHECKPOINT
 * came on the board, which the answer goes to (FAILED's reason on the
 * socket, after this rank counted itself: node_park.h) */
static void checkpoint(const char *name, int posted)
{
	char line[LINE_MOVE_LEN];   /* WRITE..., MOVE <host> <rank>..., RESUME... */
	uint64_t t0 = now_us();
	int ret, drained = 0;

	err_clear();
	reset_parking();
	lh_yield_idle(1);   /* until the program runs again */
	ret = park_all();
	if (posted)
		node_park_answer(board.p, board.slot, board.seen, !ret, now_us() - t0,
				 board.agent_bell);
	if (ret)
		send_line("FAILED %s", *err_msg() ? err_msg() : strerror(-ret));
	else if (!posted)
		send_line("PARKED %llu", (unsigned long long)(now_us() - t0));
	if (await_line(line, sizeof(line)) != 0)
		goto gone;
	/* every rank stays parked until the coordinator has every image: a
	 * rank running on could send to one that is not written yet */
	if (write_phases(name, line, sizeof(line), &drained) != 0)
		goto gone;
	if (!strncmp(line, "MOVE ", 5)) {
		/* into spares: on failure the others write their images (WRITE
		 * EXCEPT) and the coordinator relaunches (KILL) */
		int moved = move(name, line + 5) == 0;

		if (read_line(line, sizeof(line)) != 0)
			goto gone;
		if (moved && mv.moving) {
			/* out of the coordinator's table; the process ends, or
			 * waits as a spare does without its upper half
			 * (move_leave) */
			send_line("BYE");
			board_close();
			close(coord_fd);
			coord_fd = -1;
			on_main(move_leave);
		}
		if (write_phases(name, line, sizeof(line), &drained) != 0)
			goto gone;
	}
	if (!strcmp(line, "EXIT")) {
		/* checkpoint --stop: end the whole job cleanly */
		on_main(finalize);
		send_line("BYE");
		_exit(0);
	}
	/* "RESUME": established; "RESUME failed": not (MPIX_Checkpoint says).
	 * The node agent copies a staged image to the global tier. */
	lh_lg->mpix_ok = !strcmp(line, "RESUME") || !strcmp(line, "RESUME moved");
	lh_lg->mpix_gen++;
	lh_yield_idle(0);
	resume();
	return;
gone:
	/* the coordinator is gone: run on without checkpoints */
	lh_lg->mpix_ok = 0;
	lh_lg->mpix_gen++;
	lh_yield_idle(0);
	resume();
	board_close();
	close(coord_fd);
	coord_fd = -1;
}

static int quit_acked;   /* the node agent passed this rank's QUIT on (QUITOK) */
static pid_t agent_pid;  /* the rank's process: a child it forked is not the rank */

static void *agent(void *arg)
{
	char line[256];
	int posted;

	(void)arg;
	while (coord_fd >= 0 && next_line(line, sizeof(line), &posted) == 0) {
		if (!strncmp(line, "CHECKPOINT ", 11))
			checkpoint(line + 11, posted);
		else if (!strcmp(line, "QUITOK"))
			__atomic_store_n(&quit_acked, 1, __ATOMIC_RELEASE);
	}
	/* the coordinator is gone: the program runs on without checkpoints */
	board_close();
	if (coord_fd >= 0)
		close(coord_fd);
	coord_fd = -1;
	return NULL;
}

int lh_agent_request(void)
{
	return coord_fd >= 0 && send_line("REQUEST") == 0 ? 0 : -1;
}

void lh_agent_quit(const char *how, int code)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	/* a child the rank forked inherits the upper half's on_exit handler
	 * and the connection, but its exit is not the rank's */
	if (coord_fd < 0 || getpid() != agent_pid || send_line("QUIT %s %d", how, code) != 0)
		return;
	/* until the node agent has passed it on (QUITOK, which the agent
	 * thread reads): the launcher ends the other ranks once this one
	 * ends, and their losses must not reach the coordinator first. A
	 * checkpoint that began meanwhile holds the agent thread until this
	 * one leaves the lower half: QUITOK cannot be read before, so the
	 * wait ends (the QUIT went out; the node agent passes it on as it
	 * comes) */
	for (int i = 0; i < 200 && !__atomic_load_n(&quit_acked, __ATOMIC_ACQUIRE) &&
	     !__atomic_load_n(&lh_info->ckpt_pending, __ATOMIC_ACQUIRE); i++)
		nanosleep(&ts, NULL);
}

void lh_agent_bye(void)
{
	/* the node agent then knows the rank ends, and did not die */
	if (coord_fd >= 0)
		send_line("BYE");
}

static void warn(const char *what)
{
	fprintf(stderr, "stasis: rank %d: %s; it runs on without checkpoints\n", lh_info->world_rank,
		what);
}

/* agent_comm, a duplicate of MPI_COMM_WORLD, made without busy-polling:
 * on a restart the ranks of other nodes may still be restoring, and on a
 * fresh launch still initializing, on the same CPUs (the 4 nodes of the
 * simulated cluster share 2: there MPI_Comm_dup took 38 ms of a restart,
 * this 14 ms, medians of 4 restarts at a load of 13-18) */
static int idle_dup(void)
{
	MPI_Request req;
	int ret = MPI_Comm_idup(lh_world, &agent_comm, &req);

	return ret == MPI_SUCCESS ? lh_wait_idle(&req) : ret;
}

void lh_agent_start(uint32_t restarts)
{
	const char *addr = getenv("STASIS_COORD_ADDR"), *dir = getenv("STASIS_JOB_DIR");
	char why[400];
	char path[PATH_MAX], secret[64] = "", host[128] = "?", line[256];
	struct sigaction sa;
	sigset_t all, old;
	pthread_t th;
	int32_t tids[sizeof(lower_tids) / sizeof(lower_tids[0]) + 1];
	long ntids;
	int fd, ret;

	if (!addr || !*addr || !dir || !getenv("STASIS_JOB_NAME"))
		return;
	/* collective: before anything that may fail on one rank only */
	if (idle_dup() != MPI_SUCCESS) {
		warn("cannot create the checkpoint threads' communicator");
		return;
	}
	/* the configuration as the coordinator has it: file and STASIS_* */
	if (cfg_load(NULL) != 0) {
		warn(err_msg());
		return;
	}
	if (lh_spare_adopted() && FAULT(SPLIT_SPARE_ADOPT) != 0)
		lh_die("rank %d: fault split.spare.adopt", lh_info->world_rank);
	st.restarts = restarts;
	st.vdso = getauxval(AT_SYSINFO_EHDR);
	/* every thread now is the lower half's (MPI's) */
	ntids = pimg_tasks(tids, sizeof(tids) / sizeof(tids[0]));
	for (long i = 0; i < ntids && i < (long)(sizeof(tids) / sizeof(tids[0])) && nlower < 256; i++)
		if (tids[i] > 0 && tids[i] != getpid())
			lower_tids[nlower++] = tids[i];
	snprintf(path, sizeof(path), "%s/coord.secret", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, secret, 32) != 32) {
		if (fd >= 0)
			close(fd);
		warn("cannot read the job's secret");
		return;
	}
	close(fd);
	secret[32] = 0;
	memcpy(job_secret, secret, sizeof(job_secret));
	ret = store_open(getenv("STASIS_STORE_TIER") && *getenv("STASIS_STORE_TIER")
			 ? getenv("STASIS_STORE_TIER") : NULL,
			 getenv("STASIS_STORE_ROOT"), getenv("STASIS_JOB_NAME"), &store);
	if (ret) {
		warn(err_msg());
		return;
	}
	/* started before MPI_Init (lh_main.c), by this rank or another of the node */
	if (node_agent_connect(&coord_fd) != 0) {
		snprintf(why, sizeof(why), "%s", err_msg());
		coord_fd = -1;
		warn(why);
		return;
	}
	gethostname(host, sizeof(host) - 1);
	agent_pid = getpid();
	send_line("RANK %d %s %d %d %d %s %u", NODE_RANK_PROTOCOL_VERSION, secret,
		  lh_info->world_rank, lh_info->world_size, (int)agent_pid, host, restarts);
	err_clear();
	if (registered(line, sizeof(line)) != 0) {
		/* a board it cannot use: gone from the agent's ranks, which says LOST */
		warn(*err_msg() ? err_msg() : line[0] ? line : "the node agent did not answer");
		close(coord_fd);
		coord_fd = -1;
		return;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = park;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	sigaction(LH_CKPT_SIGNAL, &sa, NULL);
	lh_info->ckpt_signal = LH_CKPT_SIGNAL;
	/* the program's process-directed signals are not for this thread: its
	 * handlers would run on the lower half's TLS */
	sigfillset(&all);
	sigdelset(&all, LH_CKPT_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pthread_create(&th, NULL, agent, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret != 0) {
		warn("cannot start the checkpoint thread");
		board_close();
		close(coord_fd);
		coord_fd = -1;
		return;
	}
	pthread_detach(th);
}

/* The upper half's threads again (pimg_threads_restore): each a thread of
 * this process with a new tid on its own FS base and stack, started right
 * below the signal frame the checkpoint left there, and this thread the
 * main one; each returns from its signal with rt_sigreturn: registers,
 * signal mask and extended state as they were. */
void lh_enter_upper(const struct lh_restored *r)
{
	struct pimg_threads_restore tr = {
		.threads = r->threads, .n = r->nthreads, .pid = getpid(),
		.shared_pending = r->shared_pending, .new_tids = 1,
	};
	uint64_t all = ~0ULL;
	int ret;

	for (unsigned i = 0; i < PIMG_NSIG; i++) {
		const struct pimg_rec_sigaction *s = &r->sigs[i];
		uint64_t k[4] = { s->handler, s->flags, s->restorer, s->mask };

		if (s->handler)
			rsys(SYS_rt_sigaction, i + 1, (long)k, 0, 8);
	}
	/* every signal blocked until each thread's own mask comes back with
	 * its frame */
	rsys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, 0, 8);
	ret = pimg_threads_restore(&tr);
	if (ret == -ENOENT)
		lh_die("rank %d: the image has no main thread", lh_info->world_rank);
	if (ret < 0)
		lh_die("rank %d: cannot start thread %u of the program again: %s",
		       lh_info->world_rank, tr.failed, strerror(-ret));
	pimg_thread_return(tr.main);
}
