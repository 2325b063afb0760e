/* p2p.c - point-to-point traffic with messages in flight (tests/split).
 *
 *   p2p ITERATIONS SLEEP_MS [NO_SLEEP_FILE]
 *
 * Once NO_SLEEP_FILE exists (checked at each iteration's start) the ranks
 * no longer sleep: a test whose events are over lets the job run to its
 * end at once, instead of waiting out the sleeps that were there to find
 * messages in flight.
 *
 * Any number of ranks >= 2, MPI_COMM_WORLD and predefined datatypes only.
 * Every iteration prints "rank R iteration I" and runs five phases; every
 * payload depends on (sender, receiver, iteration, tag, index) and every
 * received message is checked bit-exactly, with its status:
 *
 *  a. pairs (0,1), (2,3), ...: the even rank MPI_Send's 1000 ints and
 *     MPI_Isend's 256 KiB (over the eager limits), then sleeps SLEEP_MS;
 *     the odd rank sleeps first, receives both and replies with 1000 ints.
 *     A last odd rank without a partner skips.
 *  b. every rank but 0 sends rank 0 three messages (tags 10, 11, 12) and
 *     waits for rank 0's acknowledgement (tag 13); rank 0 sleeps SLEEP_MS/2,
 *     receives them with MPI_ANY_SOURCE/MPI_ANY_TAG, checks each source's
 *     order, MPI_SOURCE, MPI_TAG and MPI_Get_count, then acknowledges. (The
 *     acknowledgement keeps later messages to rank 0 out of its wildcards.)
 *  c. five ring rounds: MPI_Irecv a small and an 80 KB message from the
 *     left, MPI_Isend two to the right, sleep SLEEP_MS/5, complete the four
 *     requests with MPI_Waitall, MPI_Waitany, MPI_Testany polling,
 *     MPI_Testall polling and MPI_Waitsome respectively.
 *  d. MPI_Sendrecv to the right and MPI_Sendrecv_replace to the left.
 *  e. every rank MPI_Isend's the right neighbour eight messages (pairs of
 *     different sizes and tags), sleeps SLEEP_MS/2, and receives its left
 *     neighbour's with MPI_Probe + MPI_Get_count + MPI_Recv, an MPI_Iprobe
 *     loop + MPI_Recv, MPI_Mprobe + MPI_Mrecv and MPI_Improbe + MPI_Imrecv +
 *     MPI_Wait, two messages each, in the order they were sent.
 *
 * So a checkpoint at a random moment most likely finds messages sent and not
 * received, and requests posted and not completed. There is no collective
 * in the loop. At the end each rank prints how many messages it verified,
 * rank 0 sums them (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I messages=M" if M is the count expected from N
 * and I alone. Any wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "payload.h"

#define SMALL 1000		/* ints, phase a */
#define LARGE (64 * 1024)	/* ints: 256 KiB, phase a */
#define RING_SMALL 100		/* ints at most, phase c */
#define RING_BIG 20000		/* ints: 80 KB, phase c */
#define ROUNDS 5
#define SR 64			/* ints, phase d */
#define PROBE_MAX 500		/* ints at most, phase e */

static int rank, size;
static long verified;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL rank %d: ", rank);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 3);
	exit(3);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* The payload word i of the message src sends dst with tag in iteration it. */
static int pay(int src, int dst, int it, int tag, int i)
{
	return (int)pay_word(src, dst, it, tag, i);
}

static void fill(int *v, int n, int src, int dst, int it, int tag)
{
	for (int i = 0; i < n; i++)
		v[i] = pay(src, dst, it, tag, i);
}

/* Check a received message and its status; count it. */
static void verify(const int *v, int n, const MPI_Status *st, int src, int dst, int it, int tag,
		   const char *what)
{
	int count = -1;

	if (st) {
		MPI_Get_count(st, MPI_INT, &count);
		if (st->MPI_SOURCE != src || st->MPI_TAG != tag || count != n)
			fail("%s iteration %d: status source %d tag %d count %d, expected %d %d %d",
			     what, it, st->MPI_SOURCE, st->MPI_TAG, count, src, tag, n);
	}
	for (int i = 0; i < n; i++)
		if (v[i] != pay(src, dst, it, tag, i))
			fail("%s iteration %d: from %d tag %d word %d of %d is %d, expected %d", what,
			     it, src, tag, i, n, v[i], pay(src, dst, it, tag, i));
	verified++;
}

/* a. ping-pong in flight, and a large message per pair */
static void phase_a(int it, long ms, int *small, int *large)
{
	MPI_Request req;
	MPI_Status st;
	int peer = rank ^ 1;

	if (peer >= size) {
		return;
	} else if (rank % 2 == 0) {
		fill(small, SMALL, rank, peer, it, 1);
		MPI_Send(small, SMALL, MPI_INT, peer, 1, MPI_COMM_WORLD);
		fill(large, LARGE, rank, peer, it, 2);
		MPI_Isend(large, LARGE, MPI_INT, peer, 2, MPI_COMM_WORLD, &req);
		sleep_ms(ms);
		MPI_Wait(&req, MPI_STATUS_IGNORE);
		if (req != MPI_REQUEST_NULL)
			fail("a: MPI_Wait left the request");
		memset(small, 0, SMALL * sizeof(int));
		MPI_Recv(small, SMALL, MPI_INT, peer, 3, MPI_COMM_WORLD, &st);
		verify(small, SMALL, &st, peer, rank, it, 3, "a: reply");
	} else {
		sleep_ms(ms);
		memset(small, 0, SMALL * sizeof(int));
		MPI_Recv(small, SMALL, MPI_INT, peer, 1, MPI_COMM_WORLD, &st);
		verify(small, SMALL, &st, peer, rank, it, 1, "a: ping");
		memset(large, 0, LARGE * sizeof(int));
		MPI_Recv(large, LARGE, MPI_INT, peer, 2, MPI_COMM_WORLD, &st);
		verify(large, LARGE, &st, peer, rank, it, 2, "a: large");
		fill(small, SMALL, rank, peer, it, 3);
		MPI_Send(small, SMALL, MPI_INT, peer, 3, MPI_COMM_WORLD);
	}
}

static int b_len(int src, int it, int tag)
{
	return 1 + (src * 3 + tag + it) % 40;
}

/* b. several senders to one receiver, wildcards */
static void phase_b(int it, long ms)
{
	int buf[64], *next;
	MPI_Status st;

	if (rank != 0) {
		for (int tag = 10; tag <= 12; tag++) {
			fill(buf, b_len(rank, it, tag), rank, 0, it, tag);
			MPI_Send(buf, b_len(rank, it, tag), MPI_INT, 0, tag, MPI_COMM_WORLD);
		}
		memset(buf, 0, sizeof(buf));
		MPI_Recv(buf, 4, MPI_INT, 0, 13, MPI_COMM_WORLD, &st);
		verify(buf, 4, &st, 0, rank, it, 13, "b: acknowledgement");
		return;
	}
	next = malloc(size * sizeof(int));
	for (int s = 0; s < size; s++)
		next[s] = 10;
	sleep_ms(ms);
	for (int m = 0; m < 3 * (size - 1); m++) {
		int src;

		memset(buf, 0, sizeof(buf));
		MPI_Recv(buf, 64, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
		src = st.MPI_SOURCE;
		if (src <= 0 || src >= size || next[src] > 12)
			fail("b iteration %d: message %d from source %d tag %d", it, m, src, st.MPI_TAG);
		if (st.MPI_TAG != next[src])
			fail("b iteration %d: from %d tag %d came before tag %d", it, src, st.MPI_TAG,
			     next[src]);
		verify(buf, b_len(src, it, next[src]), &st, src, 0, it, next[src], "b");
		next[src]++;
	}
	free(next);
	for (int s = 1; s < size; s++) {
		fill(buf, 4, 0, s, it, 13);
		MPI_Send(buf, 4, MPI_INT, s, 13, MPI_COMM_WORLD);
	}
}

static int c_len(int src, int it, int round)
{
	return 50 + (src + it + round) % 50;
}

/* c. Isend/Irecv pending across a sleep, five ways to complete them */
static void phase_c(int it, long ms, int *rsmall, int *rbig, int *ssmall, int *sbig)
{
	int left = (rank + size - 1) % size, right = (rank + 1) % size;

	for (int round = 0; round < ROUNDS; round++) {
		int tag = 20 + 2 * round, done = 0, seen[4] = { 0 }, flag, idx, out, idxs[4];
		MPI_Request req[4];
		MPI_Status st[4], some[4], one;
		const char *what[ROUNDS] = { "c: Waitall", "c: Waitany", "c: Testany", "c: Testall",
					     "c: Waitsome" };

		memset(rsmall, 0, RING_SMALL * sizeof(int));
		memset(rbig, 0, RING_BIG * sizeof(int));
		MPI_Irecv(rsmall, RING_SMALL, MPI_INT, left, tag, MPI_COMM_WORLD, &req[0]);
		MPI_Irecv(rbig, RING_BIG, MPI_INT, left, tag + 1, MPI_COMM_WORLD, &req[1]);
		fill(ssmall, c_len(rank, it, round), rank, right, it, tag);
		fill(sbig, RING_BIG, rank, right, it, tag + 1);
		MPI_Isend(ssmall, c_len(rank, it, round), MPI_INT, right, tag, MPI_COMM_WORLD, &req[2]);
		MPI_Isend(sbig, RING_BIG, MPI_INT, right, tag + 1, MPI_COMM_WORLD, &req[3]);
		sleep_ms(ms);
		switch (round) {
		case 0:
			MPI_Waitall(4, req, st);
			for (int i = 0; i < 4; i++)
				seen[i] = 1;
			break;
		case 1:
			for (int n = 0; n < 4; n++) {
				MPI_Waitany(4, req, &idx, &one);
				if (idx < 0 || idx >= 4 || seen[idx])
					fail("c: Waitany iteration %d: index %d", it, idx);
				seen[idx] = 1;
				st[idx] = one;
			}
			MPI_Waitany(4, req, &idx, &one);
			if (idx != MPI_UNDEFINED)
				fail("c: Waitany on null requests iteration %d: index %d", it, idx);
			break;
		case 2:
			while (done < 4) {
				MPI_Testany(4, req, &idx, &flag, &one);
				if (!flag) {
					sleep_ms(1);
					continue;
				}
				if (idx < 0 || idx >= 4 || seen[idx])
					fail("c: Testany iteration %d: index %d", it, idx);
				seen[idx] = 1;
				st[idx] = one;
				done++;
			}
			MPI_Testany(4, req, &idx, &flag, &one);
			if (!flag || idx != MPI_UNDEFINED)
				fail("c: Testany on null requests iteration %d: flag %d index %d", it, flag,
				     idx);
			break;
		case 3:
			do {
				MPI_Testall(4, req, &flag, st);
				if (!flag)
					sleep_ms(1);
			} while (!flag);
			for (int i = 0; i < 4; i++)
				seen[i] = 1;
			break;
		case 4:
			while (done < 4) {
				MPI_Waitsome(4, req, &out, idxs, some);
				if (out == MPI_UNDEFINED || out < 1 || done + out > 4)
					fail("c: Waitsome iteration %d: outcount %d", it, out);
				for (int i = 0; i < out; i++) {
					if (idxs[i] < 0 || idxs[i] >= 4 || seen[idxs[i]])
						fail("c: Waitsome iteration %d: index %d", it, idxs[i]);
					seen[idxs[i]] = 1;
					st[idxs[i]] = some[i];
				}
				done += out;
			}
			MPI_Waitsome(4, req, &out, idxs, some);
			if (out != MPI_UNDEFINED)
				fail("c: Waitsome on null requests iteration %d: outcount %d", it, out);
			break;
		}
		for (int i = 0; i < 4; i++)
			if (!seen[i] || req[i] != MPI_REQUEST_NULL)
				fail("%s iteration %d: request %d not completed", what[round], it, i);
		verify(rsmall, c_len(left, it, round), &st[0], left, rank, it, tag, what[round]);
		verify(rbig, RING_BIG, &st[1], left, rank, it, tag + 1, what[round]);
	}
}

/* d. Sendrecv to the right, Sendrecv_replace to the left */
static void phase_d(int it)
{
	int left = (rank + size - 1) % size, right = (rank + 1) % size;
	int out[SR], in[SR] = { 0 };
	MPI_Status st;

	fill(out, SR, rank, right, it, 40);
	MPI_Sendrecv(out, SR, MPI_INT, right, 40, in, SR, MPI_INT, left, 40, MPI_COMM_WORLD, &st);
	verify(in, SR, &st, left, rank, it, 40, "d: Sendrecv");
	fill(out, SR, rank, left, it, 41);
	MPI_Sendrecv_replace(out, SR, MPI_INT, left, 41, right, 41, MPI_COMM_WORLD, &st);
	verify(out, SR, &st, right, rank, it, 41, "d: Sendrecv_replace");
}

static int e_len(int src, int it, int tag)
{
	if (tag % 2 == 0)
		return 1 + (it * 7 + tag * 13 + src) % 60;
	return 200 + (it * 11 + tag * 5 + src) % 300;
}

/* e. messages waiting for probes */
static void phase_e(int it, long ms, int *sbuf)
{
	int left = (rank + size - 1) % size, right = (rank + 1) % size;
	MPI_Request sreq[8], req;
	MPI_Message msg;
	MPI_Status st, st2, sst[8];
	int n, flag;

	for (int k = 0; k < 8; k++) {
		int tag = 50 + k;

		fill(sbuf + k * PROBE_MAX, e_len(rank, it, tag), rank, right, it, tag);
		MPI_Isend(sbuf + k * PROBE_MAX, e_len(rank, it, tag), MPI_INT, right, tag,
			  MPI_COMM_WORLD, &sreq[k]);
	}
	sleep_ms(ms);
	for (int k = 0; k < 8; k++) {
		int tag = 50 + k, *buf;
		const char *what;

		msg = MPI_MESSAGE_NULL;
		/* MPI_ANY_TAG: the left neighbour's earlier messages were all
		 * received, its later ones were sent after these */
		switch (k / 2) {
		case 0:
			what = "e: Probe";
			MPI_Probe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
			break;
		case 1:
			what = "e: Iprobe";
			for (flag = 0; !flag;) {
				MPI_Iprobe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
				if (!flag)
					sleep_ms(1);
			}
			break;
		case 2:
			what = "e: Mprobe";
			MPI_Mprobe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
			break;
		default:
			what = "e: Improbe";
			for (flag = 0; !flag;) {
				MPI_Improbe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
				if (!flag)
					sleep_ms(1);
			}
			break;
		}
		MPI_Get_count(&st, MPI_INT, &n);
		if (st.MPI_SOURCE != left || st.MPI_TAG != tag || n != e_len(left, it, tag))
			fail("%s iteration %d: source %d tag %d count %d, expected %d %d %d", what, it,
			     st.MPI_SOURCE, st.MPI_TAG, n, left, tag, e_len(left, it, tag));
		buf = calloc(n, sizeof(int));
		switch (k / 2) {
		case 0:
		case 1:
			MPI_Recv(buf, n, MPI_INT, left, st.MPI_TAG, MPI_COMM_WORLD, &st2);
			break;
		case 2:
			MPI_Mrecv(buf, n, MPI_INT, &msg, &st2);
			break;
		default:
			MPI_Imrecv(buf, n, MPI_INT, &msg, &req);
			if (msg != MPI_MESSAGE_NULL)
				fail("%s iteration %d: MPI_Imrecv left the message", what, it);
			MPI_Wait(&req, &st2);
			break;
		}
		if (k >= 4 && msg != MPI_MESSAGE_NULL)
			fail("%s iteration %d: the message handle is not MPI_MESSAGE_NULL", what, it);
		verify(buf, n, &st2, left, rank, it, tag, what);
		free(buf);
	}
	MPI_Waitall(8, sreq, sst);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20;
	long ms = argc > 2 ? atol(argv[2]) : 100, total = 0, expect;
	int *small = malloc(SMALL * sizeof(int)), *large = malloc(LARGE * sizeof(int));
	int *rsmall = malloc(RING_SMALL * sizeof(int)), *rbig = malloc(RING_BIG * sizeof(int));
	int *ssmall = malloc(RING_SMALL * sizeof(int)), *sbig = malloc(RING_BIG * sizeof(int));
	int *probe = malloc(8 * PROBE_MAX * sizeof(int));

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2)
		fail("p2p needs at least 2 ranks, not %d", size);
	for (int it = 0; it < iters; it++) {
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (argc > 3 && ms && access(argv[3], F_OK) == 0)
			ms = 0;
		phase_a(it, ms, small, large);
		phase_b(it, ms / 2);
		phase_c(it, ms / ROUNDS, rsmall, rbig, ssmall, sbig);
		phase_d(it);
		phase_e(it, ms / 2, probe);
	}
	printf("rank %d verified %ld messages\n", rank, verified);
	fflush(stdout);
	MPI_Reduce(&verified, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	/* per iteration: a: 3 per pair; b: 3 per sender and its acknowledgement;
	 * c: 2 per round per rank; d: 2 per rank; e: 8 per rank */
	expect = (long)iters * (3 * (size / 2) + 4 * (size - 1) + (2 * ROUNDS + 2 + 8) * size);
	if (rank == 0) {
		printf("%s ranks=%d iterations=%d messages=%ld\n", total == expect ? "PASS" : "FAIL",
		       size, iters, total);
		fflush(stdout);
	}
	MPI_Finalize();
	free(small);
	free(large);
	free(rsmall);
	free(rbig);
	free(ssmall);
	free(sbig);
	free(probe);
	return total == expect || rank != 0 ? 0 : 1;
}
