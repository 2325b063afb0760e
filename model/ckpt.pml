/* ckpt.pml - the checkpoint protocol of an MPI job (docs/protocol.md), for spin.
 *
 * One coordinator and N ranks. Each rank runs a small, correct MPI program
 * (point-to-point sends and receives, a pending Irecv, blocking and
 * non-blocking barriers over WORLD and over the sub-communicator SUB = {1, 2},
 * MPI_Finalize); the coordinator starts a checkpoint at any moment, up to
 * NCKPT times. The protocol's messages are the lines of docs/protocol.md:
 *
 *   coordinator -> rank: CKPT TARGETS STOP SNAP RESUME FINOK
 *   rank -> coordinator: SEQS STATE RAISE DRAINED DONE FIN DIED
 *
 * (the SEQ/TARGET lines of a block are folded into SEQS/TARGETS, which carry
 * the two communicators' numbers; DONE with a = 0 is the document's FAIL;
 * DIED is the end of file of a dead rank's connection; RESUME's a is 0 for
 * "failed", 1 for "ok", 2 for "ok" followed by a restart)
 *
 * Checked by spin (model/check.sh):
 *   - no invalid end state: the job always finishes (no deadlock of the
 *     protocol, of the program under it, or of the two together), and the
 *     coordinator never waits forever;
 *   - at every rank's image (the snapshot): every message sent to it before
 *     the snapshot was received by the program or is in its drain buffer,
 *     exactly once, and nothing is left in MPI's channels; no buffered message
 *     matches a receive still pending (so re-posting at restart keeps MPI's
 *     order); on every communicator all members have started the same number
 *     of collectives and none has one outstanding (no collective half done);
 *   - the program receives every message exactly once and in the order sent
 *     (non-overtaking), across resume and restart;
 *   - when the job is stuck in the quiesce phase (spin's timeout; in the
 *     implementation, the release delay) the coordinator always finds a held
 *     collective to release (the release rule is complete for these programs);
 *   - a failed image write, a deadline abort, or (with -DFAIL) a rank dying
 *     at any point of the checkpoint: the checkpoint is FAILED, the previous
 *     one stays established, and nothing waits forever.
 *
 * Variants (-D... on `spin -a`):
 *   FAIL              a rank may die at any step of a checkpoint
 *   NCKPT, NABORT, NWFAIL  bounds (defaults 2, 0, 1; model/check.sh also runs
 *                     NABORT=1: the deadline at any moment of the quiesce phase)
 *   BROKEN_NODRAIN    ranks skip the drain            -> spin must find a lost message
 *   BROKEN_NOTARGETS  the coordinator stops the ranks without sequence
 *                     targets                         -> a collective half done at the snapshot
 *   BROKEN_NORELEASE  the coordinator never releases a held collective
 *                                                     -> an invalid end state (deadlock)
 *
 * Abstractions: MPI sends are eager (a send completes at once; the message is
 * in the channel mpi[src*N+dst], one FIFO per pair: one communicator and one
 * tag for point-to-point, so FIFO order is MPI's non-overtaking order);
 * each rank's connection to the coordinator is a FIFO channel per direction
 * (TCP); every MPI call is one atomic step; the checkpoint thread and the hook of the
 * rank's MPI thread are the same Promela process (any point between two calls
 * is a safe point); the exchange of counts (MPI_Alltoall in the lower half)
 * is "wait until every rank froze, then read the senders' counters".
 */

#ifndef N
#define N 3
#endif
#ifndef NCKPT
#define NCKPT 2            /* checkpoint attempts the coordinator may start */
#endif
#ifndef NABORT
#define NABORT 0           /* deadline aborts (in the quiesce phase) */
#endif
#ifndef NWFAIL
#define NWFAIL 1           /* failed image writes */
#endif

#define NONE 255
#define W 0                /* MPI_COMM_WORLD */
#define S 1                /* SUB = {1, 2} */
#define NC 2
#define MEMBER(r, c) ((c) == W || (r) == 1 || (r) == 2)
#define SEQ(r, c) seq[(r) * NC + (c)]

/* opcodes of the ranks' programs */
#define OSEND 1            /* MPI_Send(dst)                            */
#define ORECV 2            /* MPI_Recv(src)                            */
#define OIRECV 3           /* MPI_Irecv(src, &rreq)                    */
#define OWAITR 4           /* MPI_Wait(&rreq)                          */
#define OIBAR 5            /* MPI_Ibarrier(comm, &creq)                */
#define OBAR 6             /* MPI_Barrier(comm): its Ibarrier, then OWAITC */
#define OWAITC 7           /* MPI_Wait(&creq)                          */
#define OFIN 8             /* MPI_Finalize: the FIN handshake (its barrier is left out) */
#define MAXPC 8

mtype = { CKPT, TARGETS, STOP, SNAP, RESUME, FINOK,
	  SEQS, STATE, RAISE, DRAINED, DONE, FIN, DIED };

/* rank -> coordinator, one connection per rank: type, rank, checkpoint id, a, b, c */
chan toC[N] = [6] of { mtype, byte, byte, byte, byte, byte };
/* coordinator -> rank: type, a, b, c */
chan toR[N] = [6] of { mtype, byte, byte, byte };
/* MPI point-to-point: message ids, per (source, destination) */
chan mpi[N * N] = [2] of { byte };

hidden byte pop[N * MAXPC];    /* constant after init: not in the state vector */
hidden byte parg[N * MAXPC];

/* shared state (the ranks' counters as the model sees them) */
byte seq[N * NC];          /* collectives started, per rank and communicator */
bool incoll[N];            /* a started collective not yet seen complete */
byte minseq[NC];           /* min over members of seq: instance k complete iff minseq >= k */
byte sent[N * N];          /* sent[s*N+d]: messages s sent to d (upper-half counter) */
byte recvd[N * N];         /* recvd[d*N+s]: messages d took out of MPI from s */
byte frozen[N];            /* id of the checkpoint whose counts this rank froze */
byte established = 0;      /* checkpoints established (COMPLETE) */
byte wfail = NWFAIL;
bool died = 0;
bool killed = 0;           /* the job was torn down after a rank died */

inline recompute_min(c) {
	j = 0; mn = NONE;
	do
	:: j < N -> if :: MEMBER(j, c) && SEQ(j, c) < mn -> mn = SEQ(j, c) :: else fi; j++
	:: else -> break
	od;
	minseq[c] = mn; j = 0; mn = 0
}

/* the program receives message x from source s: exactly once, in order */
inline consume(s, x) {
	assert(x == last[s] + 1);
	last[s] = x
}

inline buf_push(s, x) {
	assert(bufn[s] < 2);
	buf[s * 2 + bufn[s]] = x;
	bufn[s]++
}

inline buf_pop(s, x) {
	x = buf[s * 2];
	buf[s * 2] = buf[s * 2 + 1];
	buf[s * 2 + 1] = 0;
	bufn[s]--
}

#define BEHIND ((SEQ(me, W) < tgt[W]) || (MEMBER(me, S) && SEQ(me, S) < tgt[S]))
#define OP pop[me * MAXPC + pc]
#define ARG parg[me * MAXPC + pc]

/* STATE line: ready (bit 0), held at a collective's entry (bit 1),
 * that collective is non-blocking (bit 2), the held communicator (bits 3..) */
inline report() {
	if
	:: ck == 1 && epoch > 0 ->
		st = ((BEHIND || incoll[me]) -> 0 : 1) |
		     ((held != NONE) -> (2 | (heldnb -> 4 : 0) | (held << 3)) : 0);
		if
		:: st != lastst && st != 0 -> toC[me]!STATE(me, myck, epoch, st, 0); lastst = st
		:: else
		fi;
		st = 0
	:: else
	fi
}

proctype Rank(byte me)
{
	byte pc = 0, x = 0, s = 0, j = 0, mn = 0, st = 0;
	byte ck = 0;               /* 0 running, 1 quiescing, 2 stopped, 3 drained, 4 image written */
	byte myck = 0, epoch = 0, lastst = NONE;
	byte tgt[NC];
	byte held = NONE;          /* communicator at whose collective entry the rank is held */
	bool heldnb = 0;
	byte collc = 0, collk = 0; /* the outstanding collective */
	byte irsrc = NONE;         /* the pending Irecv */
	bool irdone = 0;
	byte buf[N * 2];           /* the drain buffer, per source, in arrival order */
	byte bufn[N];
	byte last[N];              /* last message id the program received from each source */
	bool finsent = 0;
	mtype m;
	byte a, b, c;

{
	do
	/* ---- the program, one MPI call per step; nothing runs once stopped ---- */
	:: atomic { ck < 2 && OP == OSEND ->
		sent[me * N + ARG]++;
		mpi[me * N + ARG]!sent[me * N + ARG];
		pc++ }
	:: atomic { ck < 2 && OP == ORECV && (bufn[ARG] > 0 || len(mpi[ARG * N + me]) > 0) ->
		assert(irsrc != ARG);      /* the programs never overlap receives from one source */
		if
		:: bufn[ARG] > 0 -> buf_pop(ARG, x)        /* the drain buffer first */
		:: else -> mpi[ARG * N + me]?x; recvd[me * N + ARG]++
		fi;
		consume(ARG, x); x = 0;
		pc++ }
	:: atomic { ck < 2 && OP == OIRECV ->
		irsrc = ARG; irdone = 0;
		if
		:: bufn[ARG] > 0 -> buf_pop(ARG, x); consume(ARG, x); x = 0; irdone = 1
		:: else
		fi;
		pc++ }
	:: atomic { ck < 2 && OP == OWAITR && (irdone || len(mpi[irsrc * N + me]) > 0) ->
		if
		:: !irdone -> mpi[irsrc * N + me]?x; recvd[me * N + irsrc]++; consume(irsrc, x); x = 0
		:: else
		fi;
		irsrc = NONE; irdone = 0;
		pc++ }
	/* collective entry: outside a checkpoint, or behind a target: start it */
	:: atomic { ck < 2 && (OP == OIBAR || OP == OBAR) && (ck == 0 || BEHIND) ->
		c = ARG;
		SEQ(me, c)++;
		recompute_min(c);
		incoll[me] = 1; collc = c; collk = SEQ(me, c);
		held = NONE; heldnb = 0;
		if
		:: ck == 1 && SEQ(me, c) > tgt[c] ->     /* pushes the frontier */
			tgt[c] = SEQ(me, c);
			toC[me]!RAISE(me, myck, c, SEQ(me, c), 0)
		:: else
		fi;
		c = 0;
		pc++;
		report() }
	/* ... at every target: held at the entry, the collective not started */
	:: atomic { ck == 1 && (OP == OIBAR || OP == OBAR) && !BEHIND && held == NONE ->
		held = ARG; heldnb = (OP == OIBAR);
		report() }
	:: atomic { ck < 2 && OP == OWAITC && (!incoll[me] || minseq[collc] >= collk) ->
		incoll[me] = 0;
		pc++;
		report() }
	/* the hook (and the park loop) test the outstanding collective */
	:: atomic { ck == 1 && held != NONE && incoll[me] && minseq[collc] >= collk ->
		incoll[me] = 0;
		report() }
	:: atomic { ck < 2 && OP == OFIN && !finsent ->
		/* everything sent to this rank was received (the programs match) */
		s = 0;
		do
		:: s < N -> assert(last[s] == sent[s * N + me] && bufn[s] == 0); s++
		:: else -> break
		od;
		s = 0;
		toC[me]!FIN(me, 0, 0, 0, 0);
		finsent = 1 }

	/* ---- the checkpoint thread: lines from the coordinator ---- */
	:: atomic { toR[me]?m, a, b, c ->
		if
		:: m == CKPT -> atomic {
			assert(ck == 0);
			ck = 1; myck = a; epoch = 0; lastst = NONE;
			tgt[W] = SEQ(me, W); tgt[S] = SEQ(me, S);
			toC[me]!SEQS(me, myck, SEQ(me, W), SEQ(me, S), 0) }
		:: m == TARGETS -> atomic {
			assert(ck == 1);
			epoch = a;
			if :: b > tgt[W] -> tgt[W] = b :: else fi;
			if :: c > tgt[S] -> tgt[S] = c :: else fi;
			if :: BEHIND -> held = NONE; heldnb = 0 :: else fi;
			lastst = NONE;
			report() }
		:: m == STOP ->
			atomic {
			assert(ck == 1);
			ck = 2;                     /* parked, wherever it is */
			frozen[me] = myck }
			/* exchange the counts (MPI_Alltoall on the lower half's own
			 * communicator): every rank's counts are frozen */
			s = 0;
			do
			:: s < N -> (frozen[s] == myck); s++
			:: else -> break
			od;
			atomic {
#ifndef BROKEN_NODRAIN
			/* drain: receive what each peer sent that is not received yet */
			s = 0;
			do
			:: s < N ->
				if
				:: recvd[me * N + s] < sent[s * N + me] ->
					assert(len(mpi[s * N + me]) > 0);
					mpi[s * N + me]?x; recvd[me * N + s]++;
					if
					:: irsrc == s && !irdone -> consume(s, x); irdone = 1  /* MPI matched the posted receive */
					:: else -> buf_push(s, x)
					fi;
					x = 0
				:: else -> s++
				fi
			:: else -> break
			od;
#endif
			s = 0;
			ck = 3;
			toC[me]!DRAINED(me, myck, 0, 0, 0) }
		:: m == SNAP -> atomic {
			assert(ck == 3);
			/* the image: everything sent to me is received or buffered, once */
			s = 0;
			do
			:: s < N ->
				assert(len(mpi[s * N + me]) == 0);
				assert(sent[s * N + me] == last[s] + bufn[s]);
				assert(!(irsrc == s && !irdone && bufn[s] > 0));
				s++
			:: else -> break
			od;
			/* no collective half done: same count on every member, none outstanding */
			s = 0;
			do
			:: s < N ->
				assert(!incoll[s]);
				assert(SEQ(s, W) == SEQ(me, W));
				assert(!(MEMBER(s, S) && MEMBER(me, S)) || SEQ(s, S) == SEQ(me, S));
				s++
			:: else -> break
			od;
			s = 0;
			ck = 4;
			if
			:: wfail > 0 -> wfail--; toC[me]!DONE(me, myck, 0, 0, 0)   /* the image write failed */
			:: true -> toC[me]!DONE(me, myck, 1, 0, 0)
			fi }
		:: m == RESUME -> atomic {
			assert(ck == 1 || ck == 4);       /* an abort comes in the quiesce phase only */
			ck = 0; myck = 0; epoch = 0; lastst = NONE; held = NONE; heldnb = 0;
			frozen[me] = 0;
			tgt[W] = 0; tgt[S] = 0 }
		:: m == FINOK ->
			assert(ck == 0 && finsent && OP == OFIN);
			break
		fi;
		m = 0; a = 0; b = 0; c = 0 }

#ifdef FAIL
	/* the rank dies (killed, its node lost) during the checkpoint: at each
	 * step of the protocol (a line from the coordinator waiting: before its
	 * SEQS, in the quiesce phase, before the drain, before or while
	 * writing its image) or after its DONE */
	:: atomic { ck > 0 && !died && (len(toR[me]) > 0 || ck == 4) ->
		died = 1; toC[me]!DIED(me, myck, 0, 0, 0) }; goto gone
#endif
	od
} unless { killed };
gone:	skip
}

/* ---------------------------------------------------------------------- */

#define CIDLE 0
#define CQ 1               /* quiesce: collectives run to the targets */
#define CSTOP 2            /* stopped, draining */
#define CSNAP 3            /* images being written */

inline bcast(mm, x1, x2, x3) {
	i = 0;
	do
	:: i < N -> toR[i]!mm(x1, x2, x3); i++
	:: else -> break
	od;
	i = 0
}

inline flush_fin() {
	i = 0;
	do
	:: i < N -> if :: finp[i] -> toR[i]!FINOK(0, 0, 0); finp[i] = 0; nfin++ :: else fi; i++
	:: else -> break
	od;
	i = 0
}

/* back to idle: forget the attempt (keeps the state space canonical) */
inline idle() {
	cst = CIDLE; epoch = 0; nseq = 0; ndr = 0; ndone = 0; allok = 0; est0 = 0;
	T[W] = 0; T[S] = 0;
	i = 0;
	do :: i < N -> stE[i] = 0; stF[i] = 0; i++ :: else -> break od;
	i = 0;
	flush_fin()
}

/* one line from a rank: m, r (the rank), k (attempt id), a, b, c */
inline handle() {
		if
		:: m == SEQS && k == ck && cst == CQ ->
			if :: a > T[W] -> T[W] = a :: else fi;
			if :: b > T[S] -> T[S] = b :: else fi;
			nseq++;
			if
			:: nseq == N ->
#ifdef BROKEN_NOTARGETS
				cst = CSTOP; ndr = 0; bcast(STOP, 0, 0, 0)
#else
				epoch = 1; bcast(TARGETS, epoch, T[W], T[S])
#endif
			:: else
			fi
		:: m == STATE && k == ck && cst == CQ ->
			stE[r] = a; stF[r] = b;
			/* converged: every rank ready at the current targets */
			conv = 1; i = 0;
			do
			:: i < N -> if :: stE[i] != epoch || !(stF[i] & 1) -> conv = 0 :: else fi; i++
			:: else -> break
			od;
			i = 0;
			if
			:: conv -> cst = CSTOP; ndr = 0; bcast(STOP, 0, 0, 0)
			:: else
			fi;
			conv = 0
		:: m == RAISE && k == ck && cst != CIDLE ->
			assert(cst == CQ);      /* no rank starts a collective after convergence */
			if
			:: b > T[a] -> T[a] = b; epoch++; bcast(TARGETS, epoch, T[W], T[S])
			:: else
			fi
		:: m == DRAINED && k == ck && cst == CSTOP ->
			ndr++;
			if
			:: ndr == N -> cst = CSNAP; ndone = 0; allok = 1; bcast(SNAP, 0, 0, 0)
			:: else
			fi
		:: m == DONE && k == ck && cst == CSNAP ->
			ndone++; allok = allok && a;
			if
			:: ndone == N ->
				if
				:: allok -> established++;
					if
					:: bcast(RESUME, 1, 0, 0)      /* the job runs on */
					:: /* or is restarted from it: every rank's fresh MPI starts
					    * empty, before any rank runs; the upper halves re-post
					    * their pending receives (nothing buffered matches them) */
					   i = 0;
					   do
					   :: i < N * N -> if :: len(mpi[i]) > 0 -> mpi[i]?_ :: else -> i++ fi
					   :: else -> break
					   od;
					   bcast(RESUME, 2, 0, 0)
					fi
				:: else -> assert(established == est0); bcast(RESUME, 0, 0, 0)  /* FAILED */
				fi;
				idle()
			:: else
			fi
		:: m == FIN ->
			finishing = 1; finp[r] = 1;
			if :: cst == CIDLE -> flush_fin() :: else fi
		:: m == DIED ->
			/* EOF on the rank's connection: FAILED if a checkpoint was in
			 * progress; an MPI job does not survive a rank: end it */
			assert(cst == CIDLE || established == est0);
			killed = 1;
			break
		:: else                     /* a stale line of an aborted attempt */
		fi;
		m = 0; r = 0; k = 0; a = 0; b = 0; c = 0
}

#define FROM(rr) :: atomic { toC[rr]?m, r, k, a, b, c -> handle() }
#if N > 5
#error "ckpt.pml: the coordinator polls 5 connections; add FROM lines for more ranks"
#endif

proctype Coord()
{
	byte cst = CIDLE, ck = 0, epoch = 0, nseq = 0, ndr = 0, ndone = 0, nfin = 0;
	byte est0 = 0, naborts = 0;
	byte T[NC];
	byte stE[N], stF[N];
	bool finp[N];
	bool finishing = 0, allok = 0, conv = 0;
	byte r, k, a, b, c, i, j;
	mtype m;

	do
	/* a checkpoint request (client, interval, signal): any moment */
	:: atomic { cst == CIDLE && ck < NCKPT && !finishing ->
		ck++; cst = CQ; est0 = established;
		bcast(CKPT, ck, 0, 0) }

	/* a line from rank rr (the coordinator polls every connection) */
	FROM(0)
	FROM(1)
	FROM(2)
#if N > 3
	FROM(3)
#endif
#if N > 4
	FROM(4)
#endif

	/* the deadline of the quiesce phase: abort, the program runs on */
	:: atomic { cst == CQ && naborts < NABORT ->
		naborts++;
		bcast(RESUME, 0, 0, 0);
		idle() }

#ifndef BROKEN_NORELEASE
	/* stuck (no rank can move; in the implementation: no STATE or RAISE for
	 * the release delay): raise the target of one held collective */
	:: atomic { cst == CQ && timeout ->
		assert(epoch > 0);
		c = NONE;
		/* 1. a rank held at a non-blocking collective's entry */
		i = 0;
		do
		:: i < N && c == NONE -> if :: stE[i] == epoch && (stF[i] & 6) == 6 -> c = stF[i] >> 3 :: else fi; i++
		:: else -> break
		od;
		/* 2. a blocking collective whose members are all held at its entry */
		j = 0;
		do
		:: j < NC && c == NONE ->
			conv = 1; i = 0;
			do
			:: i < N -> if :: MEMBER(i, j) && !(stE[i] == epoch && (stF[i] & 2) && (stF[i] >> 3) == j) -> conv = 0 :: else fi; i++
			:: else -> break
			od;
			if :: conv -> c = j :: else fi;
			j++
		:: else -> break
		od;
		i = 0; j = 0; conv = 0;
		assert(c != NONE);          /* stuck with nothing to release */
		T[c]++; epoch++;
		c = 0;
		bcast(TARGETS, epoch, T[W], T[S]) }
#endif

	:: atomic { cst == CIDLE && nfin == N -> break }
	od
}

init {
	byte r;
	atomic {
	/* rank 0: Irecv(2); Ibarrier(WORLD); Send(1); Wait(ibarrier); Wait(irecv); Finalize */
	pop[0] = OIRECV; parg[0] = 2;
	pop[1] = OIBAR;  parg[1] = W;
	pop[2] = OSEND;  parg[2] = 1;
	pop[3] = OWAITC;
	pop[4] = OWAITR;
	pop[5] = OFIN;
	/* rank 1: Recv(0); Barrier(SUB); Ibarrier(WORLD); Wait; Recv(2); Recv(2); Finalize */
	pop[MAXPC + 0] = ORECV;  parg[MAXPC + 0] = 0;
	pop[MAXPC + 1] = OBAR;   parg[MAXPC + 1] = S;
	pop[MAXPC + 2] = OWAITC;
	pop[MAXPC + 3] = OIBAR;  parg[MAXPC + 3] = W;
	pop[MAXPC + 4] = OWAITC;
	pop[MAXPC + 5] = ORECV;  parg[MAXPC + 5] = 2;
	pop[MAXPC + 6] = ORECV;  parg[MAXPC + 6] = 2;
	pop[MAXPC + 7] = OFIN;
	/* rank 2: Send(0); Send(1); Send(1); Barrier(SUB); Ibarrier(WORLD); Wait; Finalize */
	pop[2 * MAXPC + 0] = OSEND;  parg[2 * MAXPC + 0] = 0;
	pop[2 * MAXPC + 1] = OSEND;  parg[2 * MAXPC + 1] = 1;
	pop[2 * MAXPC + 2] = OSEND;  parg[2 * MAXPC + 2] = 1;
	pop[2 * MAXPC + 3] = OBAR;   parg[2 * MAXPC + 3] = S;
	pop[2 * MAXPC + 4] = OWAITC;
	pop[2 * MAXPC + 5] = OIBAR;  parg[2 * MAXPC + 5] = W;
	pop[2 * MAXPC + 6] = OWAITC;
	pop[2 * MAXPC + 7] = OFIN;
	/* ranks 3..N-1: Ibarrier(WORLD); Wait; Finalize */
	r = 3;
	do
	:: r < N ->
		pop[r * MAXPC + 0] = OIBAR; parg[r * MAXPC + 0] = W;
		pop[r * MAXPC + 1] = OWAITC;
		pop[r * MAXPC + 2] = OFIN;
		r++
	:: else -> break
	od;
	minseq[W] = 0; minseq[S] = 0;
	run Coord();
	r = 0;
	do
	:: r < N -> run Rank(r); r++
	:: else -> break
	od
	}
}
