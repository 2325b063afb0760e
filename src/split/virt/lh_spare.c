/* lh_spare.c - ranks held in reserve (lh_spare.h).
 *
 * The split is made once, right after MPI_Init, by every rank of the real
 * MPI_COMM_WORLD: the active ranks keep their order in lh_world, so that
 * the rank map is the identity until a migration moves a rank into a
 * spare. A spare's lower half loads no program: it posts one receive on
 * the real MPI_COMM_WORLD from the program's rank 0 and tests it every
 * 2 ms, sleeping between (MPI_Recv would busy-poll a CPU for the job's
 * whole life: MPICH and Open MPI both spin). The word that comes is the
 * job's end: the spare then calls MPI_Finalize with the active ranks
 * (Open MPI's and MPICH's finalize wait for every process of the job) and
 * exits 0, leaving the job's status to the program's ranks.
 *
 * A migration into a spare (docs/coordinator.md, "Moving a rank into a
 * spare"): every active rank knows every rank's host (gathered at the
 * split) and the rank map, so all choose the same spare on the target
 * host. The moving rank's lower half sends that spare the word MOVE with
 * the program rank it becomes, the new map and the checkpoint's name;
 * the spare and the active ranks then make the new lh_world over the map
 * (MPI_Comm_create_group over the real world: the old process is not a
 * member), the spare restores the image as a restart does, and the old
 * process ends at once where the MPI lets it (lh_spare_may_leave), or
 * waits as a spare does for the job's end, its upper half unmapped.
 *
 * Nothing but this file sends on the real MPI_COMM_WORLD once lh_world
 * exists: every call of the program goes to lh_world or to communicators
 * made from it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lh.h"
#include "lh_spare.h"

#define SPARE_TAG 0x5350      /* on the real MPI_COMM_WORLD only */
#define SPARE_WORLD_TAG 0x5351 /* MPI_Comm_create_group of a new lh_world */
#define SPARE_END 1           /* the word: the job ends */
#define SPARE_MOVE 2          /* the word: become a rank (struct move_word) */
#define SPARE_END_UNFENCED 3  /* the job ends, and an old process has left:
				 finalize without Open MPI's fence */
#define SPARE_POLL_NS 2000000
/* A moved rank's old process waits only for the job's end, which this
 * delays by as much: 20 wake-ups a second instead of 500 on the node the
 * rank left (a spare's 2 ms cost 0.9% of a CPU, MPICH on one host) */
#define OLD_POLL_NS 50000000
#define HOST_LEN 64

MPI_Comm lh_world = MPI_COMM_WORLD;

static int spares = -1;   /* STASIS_SPARES; -1 until read */
static int active_n;      /* the program's ranks (N) */
static int *map;          /* [active_n]: the real rank holding program rank i */
static char (*hosts)[HOST_LEN];   /* [real size]: every real rank's host */
static char *retired;     /* [real size]: 1 for a moved rank's old process */
static int real_size;     /* the real MPI_COMM_WORLD's */
static char adopted[64];  /* a spare told to become a rank: the checkpoint */

/* Open MPI's mpirun, told orte_allowed_exit_without_sync (`stasis run`
 * does for a job with spares, coord.c), lets a process end with status 0
 * before MPI_Finalize and the job go on; its finalize then waits for no
 * such process. MPICH 4.0's Hydra does not: a process that ends without
 * PMI's finalize has its proxy kill the job, one that sends it leaves
 * MPI_Finalize's PMI barrier (every process the proxy started) waiting
 * for good (docs/coordinator.md, "A moved rank's old process"). */
#ifdef OPEN_MPI
/* Open MPI 4.1's (libmpi.so.40 exports it): MPI_Finalize skips its PMIx
 * fence over every process of the job when set. The fence would wait for
 * good for a process that left: its node's daemon, with no process of the
 * job left there, never joins it (a node's last process that left hung
 * every MPI_Finalize; one of several on a node did not). */
extern _Bool ompi_async_mpi_finalize __attribute__((weak));
/* The selected PML's module (libmpi.so.40): its first member, add_procs,
 * is a function of the component's own library */
extern void *mca_pml[] __attribute__((weak));

/* Whether the job's PML is ob1 (the same on every process), the only one
 * whose MPI_Finalize has no fence but the one skipped: pml/ucx's
 * del_procs has its own PMIx fence over every process of the job
 * (opal_common_ucx_del_procs), which waited for good for a process that
 * left (a job over UCX, moved into a spare, never ended). Unknown (a
 * build without component libraries): not ob1, the process stays. */
static int pml_ob1(void)
{
	Dl_info d;

	return mca_pml && mca_pml[0] && dladdr(mca_pml[0], &d) && d.dli_fname &&
	       strstr(d.dli_fname, "mca_pml_ob1.so");
}
#endif

int lh_spare_may_leave(void)
{
#ifdef OPEN_MPI
	const char *v = getenv(LH_EXIT_NO_SYNC_ENV);

	return v && v[0] && strchr("1tTyY", v[0]) != NULL && &ompi_async_mpi_finalize &&
	       pml_ob1();
#else
	return 0;
#endif
}

/* Before MPI_Finalize, on every process of the job alike: no fence once
 * an old process has left */
static void unfenced(void)
{
#ifdef OPEN_MPI
	if (&ompi_async_mpi_finalize)
		ompi_async_mpi_finalize = 1;
#endif
}

static int any_left(void)
{
	if (!lh_spare_may_leave())
		return 0;
	for (int r = 0; r < real_size; r++)
		if (retired[r])
			return 1;
	return 0;
}

/* SPARE_MOVE's word: header, then map[n], then retired[real size] (a
 * spare was not told of the moves before its own) */
struct move_word {
	int word, rank, n;
	char ckpt[64];
	int map[];
};

static size_t move_word_len(void)
{
	return sizeof(struct move_word) + (size_t)active_n * sizeof(int) + (size_t)real_size;
}

static int spare_count(void)
{
	const char *v = getenv(LH_SPARES_ENV);
	char *end;
	long n;

	if (spares >= 0)
		return spares;
	spares = 0;
	if (!v || !*v)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < 0 || n > 4096)
		lh_die("%s=%s: expected a number of spare ranks from 0 to 4096", LH_SPARES_ENV, v);
	spares = (int)n;
	return spares;
}

int lh_spare_env(int *rank, int *size)
{
	int s = spare_count();

	if (!s || *size <= 0)
		return 0;
	*size -= s;
	return *rank >= *size;
}

/* The world over the map, in its order (collective over the map's ranks) */
static int make_world(MPI_Comm *out)
{
	MPI_Group all, g;
	int ret;

	MPI_Comm_group(MPI_COMM_WORLD, &all);
	ret = MPI_Group_incl(all, active_n, map, &g);
	MPI_Group_free(&all);
	if (ret != MPI_SUCCESS)
		return ret;
	ret = MPI_Comm_create_group(MPI_COMM_WORLD, g, SPARE_WORLD_TAG, out);
	MPI_Group_free(&g);
	return ret;
}

/* Wait for a word on the real MPI_COMM_WORLD without spinning, testing
 * every poll_ns; 1 when it is MOVE (a spare becomes a rank: *w, to free),
 * 0 when the job ends */
static int await_word(int real_rank, long poll_ns, struct move_word **w)
{
	const struct timespec nap = { 0, poll_ns };
	MPI_Status st;
	int flag = 0, len = 0;

	while (!flag) {
		if (MPI_Iprobe(MPI_ANY_SOURCE, SPARE_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS)
			lh_die("spare rank %d: its receive failed", real_rank);
		if (!flag)
			nanosleep(&nap, NULL);
	}
	MPI_Get_count(&st, MPI_BYTE, &len);
	if (len < (int)sizeof(int) || !(*w = calloc(1, (size_t)len + sizeof(**w))))
		lh_die("spare rank %d: a word of %d bytes", real_rank, len);
	if (MPI_Recv(*w, len, MPI_BYTE, st.MPI_SOURCE, SPARE_TAG, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE) != MPI_SUCCESS)
		lh_die("spare rank %d: its receive failed", real_rank);
	if ((*w)->word == SPARE_END || (*w)->word == SPARE_END_UNFENCED) {
		if ((*w)->word == SPARE_END_UNFENCED)
			unfenced();
		return 0;
	}
	if ((*w)->word != SPARE_MOVE || len < (int)sizeof(**w) ||
	    (*w)->n != active_n || len != (int)move_word_len())
		lh_die("spare rank %d: unknown word %d from rank %d", real_rank, (*w)->word,
		       st.MPI_SOURCE);
	return 1;
}

static void __attribute__((noreturn)) job_end(void)
{
	MPI_Finalize();
	fflush(NULL);
	_exit(0);
}

/* A spare: it waits for the job's end, or becomes a rank (returns) */
static void spare_wait(int real_rank)
{
	struct move_word *w = NULL;

	lh_log(LOG_DEBUG, "rank %d of MPI_COMM_WORLD is a spare: it waits for the job's end",
	       real_rank);
	if (!await_word(real_rank, SPARE_POLL_NS, &w)) {
		free(w);
		job_end();
	}
	/* the new world and the restore's communicators, made with ranks
	 * whose programs are stopped: until it enters the program */
	lh_yield_idle(1);
	memcpy(map, w->map, (size_t)active_n * sizeof(int));
	memcpy(retired, w->map + active_n, (size_t)real_size);
	snprintf(adopted, sizeof(adopted), "%.63s", w->ckpt);
	lh_log(LOG_INFO, "rank %d of MPI_COMM_WORLD becomes rank %d (%s)", real_rank, w->rank,
	       adopted);
	free(w);
	if (make_world(&lh_world) != MPI_SUCCESS || lh_world == MPI_COMM_NULL)
		lh_die("spare rank %d: cannot join the ranks' new world", real_rank);
}

void lh_spare_start(void)
{
	int s = spare_count(), rank = 0, size = 0;

	if (!s)
		return;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (s >= size) {
		if (rank == 0)
			lh_die("%s=%d leaves none of the launcher's %d ranks to the program",
			       LH_SPARES_ENV, s, size);
		_exit(127);
	}
	active_n = size - s;
	real_size = size;
	map = calloc((size_t)active_n, sizeof(int));
	hosts = calloc((size_t)size, HOST_LEN);
	retired = calloc((size_t)size, 1);
	if (!map || !hosts || !retired)
		lh_die("rank %d: out of memory", rank);
	for (int i = 0; i < active_n; i++)
		map[i] = i;
	gethostname(hosts[rank], HOST_LEN - 1);
	if (MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hosts, HOST_LEN, MPI_CHAR,
			  MPI_COMM_WORLD) != MPI_SUCCESS)
		lh_die("rank %d: cannot gather the ranks' hosts", rank);
	if (MPI_Comm_split(MPI_COMM_WORLD, rank < active_n ? 0 : 1, rank, &lh_world) != MPI_SUCCESS)
		lh_die("rank %d: cannot split MPI_COMM_WORLD into %d ranks and %d spares", rank,
		       active_n, s);
	if (rank >= active_n) {
		MPI_Comm_free(&lh_world);
		spare_wait(rank);
	}
}

void lh_spare_environ(char **envp)
{
	static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE=", "OMPI_UNIVERSE_SIZE=",
					     "PMI_SIZE=", "PMIX_SIZE=" };
	static char put[sizeof(sizes) / sizeof(sizes[0])][40];

	if (!spare_count() || lh_world == MPI_COMM_WORLD)
		return;
	for (char **e = envp; *e; e++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			if (!strncmp(*e, sizes[i], strlen(sizes[i]))) {
				snprintf(put[i], sizeof(put[i]), "%s%d", sizes[i], active_n);
				*e = put[i];
			}
}

static int in_map(int real)
{
	for (int i = 0; i < active_n; i++)
		if (map[i] == real)
			return 1;
	return 0;
}

void lh_spare_release(void)
{
	static int released;
	int word = SPARE_END, rank = 0, size = 0;

	if (released || !spare_count() || lh_world == MPI_COMM_WORLD)
		return;
	released = 1;
	if (any_left()) {   /* every active rank knows the moves alike */
		unfenced();
		word = SPARE_END_UNFENCED;
	}
	MPI_Comm_rank(lh_world, &rank);
	if (rank != 0)
		return;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int r = 0; r < size; r++)
		/* a moved rank's old process that ended is told nothing */
		if (!in_map(r) && !(retired[r] && lh_spare_may_leave()) &&
		    MPI_Send(&word, (int)sizeof(word), MPI_BYTE, r, SPARE_TAG, MPI_COMM_WORLD) != MPI_SUCCESS)
			lh_log(LOG_WARN, "cannot tell spare rank %d that the job ends: it waits "
			       "until the launcher ends it", r);
}

const char *lh_spare_adopted(void)
{
	return adopted[0] ? adopted : NULL;
}

int lh_spare_choose(const char *host, const int *ranks, int n, char *why, size_t len)
{
	int size = 0;

	if (!spare_count() || lh_world == MPI_COMM_WORLD)
		return snprintf(why, len, "the job runs without spares (--spares)"), -1;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int i = 0; i < n; i++) {
		int r = 0;

		if (ranks[i] < 0 || ranks[i] >= active_n)
			return snprintf(why, len, "no rank %d", ranks[i]), -1;
		/* a moved rank's old process waits as a spare does: not one */
		while (r < size && (in_map(r) || retired[r] || strcmp(hosts[r], host)))
			r++;
		if (r == size)
			return snprintf(why, len, "no spare left on %s for rank %d", host, ranks[i]), -1;
		retired[map[ranks[i]]] = 1;
		map[ranks[i]] = r;
	}
	return 0;
}

int lh_spare_send(int rank, const char *ckpt)
{
	size_t len = move_word_len();
	struct move_word *w = calloc(1, len);
	int ret;

	if (!w)
		return MPI_ERR_NO_MEM;
	w->word = SPARE_MOVE;
	w->rank = rank;
	w->n = active_n;
	snprintf(w->ckpt, sizeof(w->ckpt), "%.63s", ckpt);
	memcpy(w->map, map, (size_t)active_n * sizeof(int));
	memcpy(w->map + active_n, retired, (size_t)real_size);
	ret = MPI_Send(w, (int)len, MPI_BYTE, map[rank], SPARE_TAG, MPI_COMM_WORLD);
	free(w);
	return ret;
}

int lh_spare_world(MPI_Comm *old)
{
	MPI_Comm c = MPI_COMM_NULL;
	int ret = make_world(&c);

	if (ret != MPI_SUCCESS)
		return ret;
	*old = lh_world;
	lh_world = c;
	return MPI_SUCCESS;
}

void lh_spare_leave(void)
{
	struct move_word *w = NULL;
	int rank = 0;

	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (lh_spare_may_leave()) {
		lh_log(LOG_DEBUG, "rank %d of MPI_COMM_WORLD moved: its old process ends", rank);
		fflush(NULL);
		_exit(0);
	}
	while (await_word(rank, OLD_POLL_NS, &w)) {
		/* (a MOVE is for a spare: none comes to a rank that left) */
		free(w);
		w = NULL;
	}
	free(w);
	job_end();
}
