/* threads.pml - the collective rule for ranks whose threads all call MPI
 * (docs/protocol.md, "Threads"; src/split/virt/lh_coll.c, thread_enter), for
 * spin.
 *
 * 2 ranks of 2 threads; thread t of every rank runs K iterations of a
 * collective on its own communicator t (started, then waited for until
 * every member started it), then a message to thread t of the other rank
 * and one from it (rank 1's thread 0 sends each message only once it
 * started the next iteration's collective, the last after its loop: a
 * message that comes after a collective, as in model/ckpt.pml's
 * programs); thread 1 starts iteration i only once thread 0 of its
 * rank finished iteration i (data one thread computes for the other, as
 * hybrid codes have). So a rank behind on communicator 1 may need a
 * message from a rank that is not behind, whose threads are stopped: the
 * round is stuck, and only a release gets it on. A checkpoint may begin at any
 * moment, once: every thread stops where it is; then rounds as
 * lh_agent.c's coll_quiesce runs them:
 *   - the targets: per communicator the largest count of any rank;
 *   - a rank behind on some communicator runs (ADVANCE): a thread starts
 *     a collective only where its communicator is behind, and is held
 *     alone at any other; the rank stops when no communicator of it is
 *     behind, or when nothing can move any more (spin's timeout: the
 *     implementation's RELEASE_MS), which makes the next round a release;
 *   - a release (RELEASE): every rank runs until nothing moves; a thread
 *     held before starts the collective it is held at, any other
 *     collective is entered only where its communicator is behind;
 *   - a round in which no rank is behind ends the rounds: the snapshot.
 * Then the job resumes and every thread finishes its program.
 *
 * Checked (model/check.sh): at the snapshot every communicator has the
 * same count on every rank (no collective half started: the ones started
 * complete in the drain); the rounds end (at most MAXROUNDS); the job
 * always finishes (no invalid end state).
 *
 * Variants, each of which model/check.sh must see refused:
 * BROKEN_NORELEASE (a stuck round is followed by another advance, never a
 * release): the rounds never end; BROKEN_NOROUNDS (the snapshot at once,
 * without targets): a collective started on one rank only.
 */

#define R 2                /* ranks (the macros below spell both out) */
#define T 2                /* threads per rank, communicators */
#ifndef K
#define K 2
#endif
#define MAXROUNDS 12

#define RUNNING 0
#define ADVANCE 1
#define RELEASE 2
#define STOPPED 3

byte seq[R * T];           /* collectives rank r started on communicator t */
byte done[R * T];          /* iterations thread t of rank r finished */
byte msgs[R * T];          /* messages to thread t of rank r, in flight or drained */
bool held[R * T];          /* thread t of rank r is held at its collective's entry */
byte tgt[T];
bool go[R];                 /* in ADVANCE: this rank runs */
byte mode = RUNNING;
bool ckpt = 0;             /* the checkpoint began (threads stop unless let run) */
byte finished = 0;

#define S(r, t) seq[(r) * T + (t)]
#define MAYRUN(r) (!ckpt || (mode == ADVANCE && go[r]) || mode == RELEASE)
#define BEHIND(r, t) (S(r, t) < tgt[t])
#define RANK_BEHIND(r) (BEHIND(r, 0) || BEHIND(r, 1))
/* every rank let run is at its targets */
#define ADVANCED (!(go[0] && RANK_BEHIND(0)) && !(go[1] && RANK_BEHIND(1)))
/* the collective thread t of rank r started last is complete in MPI */
#define COMPLETE(r, t) (S(0, t) >= S(r, t) && S(1, t) >= S(r, t))

inline rank_behind(r, b) {
	b = 0; k = 0;
	do
	:: k < T -> if :: BEHIND(r, k) -> b = 1 :: else fi; k++
	:: else -> break
	od;
	k = 0
}

proctype Thread(byte r; byte t)
{
	byte i = 0;

	do
	:: i == K -> break
	:: else ->
		/* the data of the thread before it, this iteration */
		(t == 0 || done[r * T + t - 1] > i);
		/* the collective's entry */
		do
		:: atomic { MAYRUN(r) &&
			(!ckpt || BEHIND(r, t) || (mode == RELEASE && held[r * T + t])) ->
			S(r, t)++; held[r * T + t] = 0; break }
		:: atomic { ckpt && MAYRUN(r) && !BEHIND(r, t) && !held[r * T + t] ->
			held[r * T + t] = 1 }
		od;
		/* rank 1's thread 0 sends the message of the iteration before
		 * only once it started this one's collective */
		if
		:: r == 1 && t == 0 && i > 0 -> atomic { MAYRUN(r) -> msgs[t]++ }
		:: else
		fi;
		/* waited for (a loop of tests; stopped, it waits again after) */
		MAYRUN(r) && COMPLETE(r, t);
		/* a message to the same thread of the other rank, and its */
		if
		:: !(r == 1 && t == 0) -> atomic { MAYRUN(r) -> msgs[(1 - r) * T + t]++ }
		:: else
		fi;
		atomic { MAYRUN(r) && msgs[r * T + t] > 0 -> msgs[r * T + t]-- }
		done[r * T + t]++;
		i++
	od;
	if
	:: r == 1 && t == 0 -> atomic { MAYRUN(r) -> msgs[t]++ }
	:: else
	fi;
	finished++
}

proctype Checkpoint()
{
	byte r = 0, t = 0, k = 0, rounds = 0;
	bool b = 0, any = 0, stuck = 0;

	/* at any moment, or never */
	if
	:: skip
	:: finished == R * T -> goto end
	fi;
	atomic { ckpt = 1; mode = STOPPED }
	do
	:: atomic {
		/* the targets, and who is behind */
		t = 0;
		do
		:: t < T ->
			tgt[t] = 0; r = 0;
			do
			:: r < R -> if :: S(r, t) > tgt[t] -> tgt[t] = S(r, t) :: else fi; r++
			:: else -> break
			od;
			t++
		:: else -> break
		od;
		any = 0; r = 0;
		do
		:: r < R -> rank_behind(r, b); go[r] = b; any = any || b; r++
		:: else -> break
		od;
		r = 0; t = 0; b = 0 }
#ifdef BROKEN_NOROUNDS
		any = 0;
#endif
		if
		:: !any -> break
		:: else
		fi;
		rounds++;
		assert(rounds <= MAXROUNDS);
#ifndef BROKEN_NORELEASE
		if
		:: stuck ->
			/* a release: every rank runs until nothing moves */
			atomic { mode = RELEASE }
			timeout;
			stuck = 0
		:: else ->
#endif
			atomic { mode = ADVANCE }
			/* until every rank that runs is at its targets, or stuck */
			if
			:: ADVANCED
			:: timeout -> stuck = 1
			fi
#ifndef BROKEN_NORELEASE
		fi;
#endif
		atomic { mode = STOPPED; r = 0;
			do
			:: r < R -> go[r] = 0; r++
			:: else -> break
			od;
			r = 0 }
	od;
	/* the snapshot: no collective half started on any communicator */
	t = 0;
	do
	:: t < T ->
		r = 1;
		do
		:: r < R -> assert(S(r, t) == S(0, t)); r++
		:: else -> break
		od;
		t++
	:: else -> break
	od;
	/* resume */
	atomic { r = 0;
		do
		:: r < R * T -> held[r] = 0; r++
		:: else -> break
		od;
		r = 0; mode = RUNNING; ckpt = 0 }
end:
	skip
}

init {
	byte r = 0, t = 0;

	atomic {
		do
		:: r < R ->
			t = 0;
			do
			:: t < T -> run Thread(r, t); t++
			:: else -> break
			od;
			r++
		:: else -> break
		od;
		run Checkpoint()
	}
}
