/* comms.c - intercommunicators and the communicator and group calls made
 * before the loop and used in it (tests/split).
 *
 *   comms ITERATIONS SLEEP_MS
 *
 * An even number of ranks >= 2. Before the loop each rank makes:
 *  - local: MPI_COMM_WORLD split by parity (color: rank % 2);
 *  - inter: MPI_Intercomm_create between the two local communicators
 *    (leaders: world ranks 0 and 1), and its remote group
 *    (MPI_Comm_remote_group);
 *  - evens, odds: the groups of the even and the odd ranks of
 *    MPI_COMM_WORLD, by MPI_Group_range_incl and MPI_Group_range_excl of
 *    the range (0, size - 1, 2);
 *  - even: MPI_Comm_create_group of evens, on the even ranks only;
 *  - dwi: MPI_Comm_dup_with_info of MPI_COMM_WORLD, then
 *    MPI_Comm_set_info and MPI_Comm_get_info on it;
 *  - idup: MPI_Comm_idup of MPI_COMM_WORLD, waited for.
 * Each iteration I prints "rank R iteration I", then with v(w) = 1000 * w
 * + I (w: a world rank): sends local rank k's v to remote rank k of inter
 * and receives the remote one's (MPI_Isend, MPI_Recv, MPI_Wait); reduces
 * the world ranks over inter (each group gets the other's sum); broadcasts
 * from group 0's leader to group 1 (MPI_ROOT, MPI_PROC_NULL); merges inter
 * (MPI_Intercomm_merge, group 0 low) and checks the merged ranks' order
 * and a reduction on it, then frees it; checks evens, odds and the remote
 * group by rank translation; reduces on even, dwi and idup; duplicates
 * MPI_COMM_WORLD, reduces on it and disconnects it. Then, across inter
 * with remote rank k, it posts an MPI_Irecv from MPI_ANY_SOURCE and sends
 * an MPI_Isend, and sleeps SLEEP_MS with both in flight (the checkpoint
 * comes there: the drain counts the send through inter's remote group and
 * buffers it, the receive is posted again at a restart); the next
 * iteration receives the message, sends the one the MPI_Irecv waits for,
 * and checks both values and sources. Every iteration also duplicates
 * inter and reduces on the duplicate; group 0 frees it at once, group 1
 * only in the next iteration, after that iteration's broadcast across
 * inter (which group 0 enters once it freed the new duplicate): a
 * checkpoint anywhere in the loop, not only in the sleep, finds a
 * duplicate freed by some members and held by others (a restart makes it
 * again on all; a move into a spare refuses it).
 *
 * At the end rank 0 sums the checks made (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I checks=K". Any wrong value prints a FAIL line
 * and aborts the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

static int rank, size, it;
static long checks;

/* one check, counted */
static void eq(const char *what, long got, long want)
{
	fail_unless(rank, it, what, got, want);
	checks++;
}

static int v(int w)
{
	return 1000 * w + it;
}

static int world_of(MPI_Group g, int r)
{
	MPI_Group wg;
	int w;

	MPI_Comm_group(MPI_COMM_WORLD, &wg);
	MPI_Group_translate_ranks(g, 1, &r, wg, &w);
	MPI_Group_free(&wg);
	return w;
}

/* Messages across inter left in flight across the sleep: from local rank
 * k to remote rank k, one sent (tag 9) and one waited for (tag 10) */
static int fl_x, fl_r, fl_it;
static MPI_Request fl_sq, fl_rq;

static void in_flight_start(MPI_Comm inter, int lrank)
{
	fl_it = it;
	fl_x = 1000 * rank + it + 500;
	fl_r = -1;
	MPI_Irecv(&fl_r, 1, MPI_INT, MPI_ANY_SOURCE, 10, inter, &fl_rq);
	MPI_Isend(&fl_x, 1, MPI_INT, lrank, 9, inter, &fl_sq);
}

static void in_flight_check(MPI_Comm inter, int lrank, int remote)
{
	int got = -1, y = 1000 * rank + fl_it + 600;
	MPI_Status st;

	MPI_Recv(&got, 1, MPI_INT, lrank, 9, inter, &st);
	eq("inter in flight", got, 1000 * remote + fl_it + 500);
	eq("inter in flight's source", st.MPI_SOURCE, lrank);
	MPI_Send(&y, 1, MPI_INT, lrank, 10, inter);
	MPI_Wait(&fl_rq, &st);
	eq("inter Irecv across the sleep", fl_r, 1000 * remote + fl_it + 600);
	eq("inter Irecv's source", st.MPI_SOURCE, lrank);
	MPI_Wait(&fl_sq, MPI_STATUS_IGNORE);
}

static int sum(MPI_Comm c, int x)
{
	int s = 0;

	MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, c);
	return s;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 5, ms = argc > 2 ? atoi(argv[2]) : 100;
	struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };
	int color, lrank, rsize, flag, half, sum_even = 0, sum_odd = 0;
	MPI_Comm local, inter, even = MPI_COMM_NULL, dwi, idup, held = MPI_COMM_NULL, last;
	MPI_Group wg, rgroup, evens, odds;
	MPI_Info info, used;
	MPI_Request q;
	long total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size % 2) {
		printf("FAIL comms needs an even number of ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	half = size / 2;
	for (int w = 0; w < size; w++)
		*(w % 2 ? &sum_odd : &sum_even) += w;
	color = rank % 2;
	MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local);
	MPI_Comm_rank(local, &lrank);
	MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, !color, 77, &inter);
	MPI_Comm_remote_group(inter, &rgroup);
	MPI_Comm_group(MPI_COMM_WORLD, &wg);
	MPI_Group_range_incl(wg, 1, (int[][3]){ { 0, size - 1, 2 } }, &evens);
	MPI_Group_range_excl(wg, 1, (int[][3]){ { 0, size - 1, 2 } }, &odds);
	MPI_Group_free(&wg);
	if (!color)
		MPI_Comm_create_group(MPI_COMM_WORLD, evens, 5, &even);
	MPI_Info_create(&info);
	MPI_Info_set(info, "stasis_test", "1");
	MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &dwi);
	MPI_Comm_set_info(dwi, info);
	MPI_Comm_get_info(dwi, &used);
	MPI_Info_free(&used);
	MPI_Info_free(&info);
	MPI_Comm_idup(MPI_COMM_WORLD, &idup, &q);
	MPI_Wait(&q, MPI_STATUS_IGNORE);

	for (it = 0; it < iters; it++) {
		int x, got, high, mr, ms_;
		MPI_Comm merged;
		MPI_Request sq;

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (it > 0)
			in_flight_check(inter, lrank, world_of(rgroup, lrank));
		MPI_Comm_test_inter(inter, &flag);
		eq("Comm_test_inter", flag, 1);
		MPI_Comm_remote_size(inter, &rsize);
		eq("Comm_remote_size", rsize, half);

		/* point to point across inter: local rank k with remote rank k */
		x = v(rank);
		MPI_Isend(&x, 1, MPI_INT, lrank, 3, inter, &sq);
		MPI_Recv(&got, 1, MPI_INT, lrank, 3, inter, MPI_STATUS_IGNORE);
		MPI_Wait(&sq, MPI_STATUS_IGNORE);
		eq("inter send", got, v(world_of(rgroup, lrank)));

		/* each group gets the other's sum */
		eq("inter Allreduce", sum(inter, rank), color ? sum_even : sum_odd);
		last = held;   /* group 1's, from the last iteration */
		MPI_Comm_dup(inter, &held);
		eq("Allreduce on a duplicate of inter", sum(held, rank + 1),
		   color ? sum_even + half : sum_odd + half);
		if (!color)
			MPI_Comm_free(&held);
		x = color || lrank ? -1 : 7 * it + 1;
		MPI_Bcast(&x, 1, MPI_INT, color ? 0 : lrank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
		eq("inter Bcast", x, color ? 7 * it + 1 : lrank == 0 ? 7 * it + 1 : -1);
		if (last != MPI_COMM_NULL)
			MPI_Comm_free(&last);

		high = color;
		MPI_Intercomm_merge(inter, high, &merged);
		MPI_Comm_rank(merged, &mr);
		MPI_Comm_size(merged, &ms_);
		eq("merged size", ms_, size);
		eq("merged rank", mr, color * half + lrank);
		eq("merged Allreduce", sum(merged, rank), size * (size - 1) / 2);
		MPI_Comm_free(&merged);

		MPI_Group_size(evens, &x);
		eq("evens", x, half);
		MPI_Group_size(odds, &x);
		eq("odds", x, half);
		eq("evens' last", world_of(evens, half - 1), 2 * (half - 1));
		eq("odds' last", world_of(odds, half - 1), 2 * half - 1);
		eq("remote group", world_of(rgroup, 0), !color);
		if (even != MPI_COMM_NULL)
			eq("even Allreduce", sum(even, rank), sum_even);
		eq("dup_with_info Allreduce", sum(dwi, rank + 1), size * (size + 1) / 2);
		eq("idup Allreduce", sum(idup, 2 * rank), size * (size - 1));
		{
			MPI_Comm d;

			MPI_Comm_dup(MPI_COMM_WORLD, &d);
			eq("Allreduce before MPI_Comm_disconnect", sum(d, 1), size);
			MPI_Comm_disconnect(&d);
			eq("disconnected", d == MPI_COMM_NULL, 1);
		}
		in_flight_start(inter, lrank);
		nanosleep(&nap, NULL);
	}
	in_flight_check(inter, lrank, world_of(rgroup, lrank));
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	if (held != MPI_COMM_NULL)
		MPI_Comm_free(&held);
	if (even != MPI_COMM_NULL)
		MPI_Comm_free(&even);
	MPI_Group_free(&evens);
	MPI_Group_free(&odds);
	MPI_Group_free(&rgroup);
	MPI_Comm_free(&inter);
	MPI_Comm_free(&local);
	MPI_Comm_free(&dwi);
	MPI_Comm_free(&idup);
	MPI_Finalize();
	return 0;
}
