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
 * Nothing but this file sends on the real MPI_COMM_WORLD once lh_world
 * exists: every call of the program goes to lh_world or to communicators
 * made from it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lh.h"
#include "lh_spare.h"

#define SPARE_TAG 0x5350      /* on the real MPI_COMM_WORLD only */
#define SPARE_END 1           /* the word: the job ends */
#define SPARE_POLL_NS 2000000

MPI_Comm lh_world = MPI_COMM_WORLD;

static int spares = -1;   /* STASIS_SPARES; -1 until read */
static int active_n;      /* the program's ranks (N) */

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

static void __attribute__((noreturn)) spare_wait(int real_rank)
{
	const struct timespec nap = { 0, SPARE_POLL_NS };
	MPI_Request req;
	int word = 0, done = 0;

	lh_log(LOG_DEBUG, "rank %d of MPI_COMM_WORLD is a spare: it waits for the job's end",
	       real_rank);
	if (MPI_Irecv(&word, 1, MPI_INT, MPI_ANY_SOURCE, SPARE_TAG, MPI_COMM_WORLD, &req) != MPI_SUCCESS)
		lh_die("spare rank %d: cannot post its receive", real_rank);
	while (!done) {
		if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			lh_die("spare rank %d: its receive failed", real_rank);
		if (!done)
			nanosleep(&nap, NULL);
	}
	if (word != SPARE_END)
		lh_die("spare rank %d: unknown word %d from rank 0", real_rank, word);
	MPI_Finalize();
	exit(0);
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

void lh_spare_release(void)
{
	static int released;
	int word = SPARE_END, rank = 0, size = 0;

	if (released || !spare_count() || lh_world == MPI_COMM_WORLD)
		return;
	released = 1;
	MPI_Comm_rank(lh_world, &rank);
	if (rank != 0)
		return;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int r = active_n; r < size; r++)
		if (MPI_Send(&word, 1, MPI_INT, r, SPARE_TAG, MPI_COMM_WORLD) != MPI_SUCCESS)
			lh_log(LOG_WARN, "cannot tell spare rank %d that the job ends: it waits "
			       "until the launcher ends it", r);
}
