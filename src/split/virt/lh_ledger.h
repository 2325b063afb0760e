/* lh_ledger.h - what the lower half must know again after a restart
 * (internal; docs/split.md, "The ledger").
 *
 * The lower half's state that outlives its MPI: the neutral handle tables
 * with, for every object the program created, how to build it again
 * (lh_state.c), every request with its envelope and state, the drain
 * buffer of messages received at a checkpoint on the program's behalf, and
 * the point-to-point counts per world rank (lh_p2p.c). It lives at
 * STS_LEDGER_ADDR, inside the upper half's range, so the rank's image
 * saves it with the upper half's memory and lh_restore maps it back; a
 * fresh lower half then finds it there, fills in the real handles of its
 * own MPI, and goes on. Nothing in it points into the lower half.
 *
 * One allocator (size classes of powers of two, free lists) serves it; it
 * is used by one thread at a time (the rank's MPI thread, or the
 * checkpoint thread while the upper half is parked).
 */
#ifndef STS_LH_LEDGER_H
#define STS_LH_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "sts_mpi.h"

#define LG_MAGIC 0x5245474445484c53ull   /* "SLHEDGER" */
#define LG_VERSION 6
#define LG_CLASSES 40

/* One neutral handle of a kind. */
struct lh_slot {
	uint64_t real;          /* the real MPI's handle (filled again at restart) */
	uint64_t seq;           /* creation order: restart rebuilds in it */
	void *rec;              /* how to rebuild it, or the request's record */
};

struct lh_table {
	struct lh_slot *slot;
	uint32_t cap;
	uint32_t next;          /* first never-used user slot */
	uint32_t *free_list;    /* freed user slots */
	uint32_t nfree, free_cap;
};

/* A message the drain (or an Mprobe) received on the program's behalf. */
struct lh_msg {
	struct lh_msg *next;
	uint32_t comm;          /* neutral */
	int source;             /* rank in comm (neutral values) */
	int tag;
	uint32_t pad;
	uint64_t bytes;
	unsigned char data[];
};

/* A blocking call that returned STS_AGAIN and will be called again: one
 * per thread of the program caught in one (at MULTIPLE, every thread). */
#define LH_CONTS 64
struct lh_cont {
	uint64_t owner;         /* the thread's upper FS base (the same after a restart) */
	uint32_t op;            /* 0: none */
	uint32_t req[2];        /* its requests (neutral) */
	uint64_t key;           /* its arguments, hashed */
	void *tmp;              /* Sendrecv_replace's packed copy */
};

struct lh_ledger {
	uint64_t magic;
	uint32_t version;
	int world_rank, world_size;
	uint32_t restarts;
	uint64_t top;           /* first never-allocated byte */
	void *free_class[LG_CLASSES];
	uint64_t seq;           /* the last creation number handed out */
	struct lh_table tables[STS_KINDS];
	uint64_t *sent_to, *recv_from;   /* messages per world rank */
	struct lh_msg *drain_head, *drain_tail;
	uint64_t drain_n, drain_bytes;
	struct lh_cont cont[LH_CONTS];
	uint32_t nconts;                 /* of cont[] in use */
	uint32_t pending_sends;          /* send requests MPI has not completed */
	/* collectives (lh_coll.c), per neutral communicator: how many this rank
	 * started, the checkpoint's target, the key its members agreed on
	 * (0: none, its collectives uncounted), and whether the program freed
	 * it while other members may still hold it (retired: kept, with its
	 * final count, until a checkpoint's round finds no member holds it) */
	uint64_t *coll_seq, *coll_target, *key, *retired;
	uint32_t coll_cap;
	uint32_t advancing;              /* LH_RUN_*: how it runs during the rounds */
	uint32_t held;                   /* 1 + the communicator at whose
					  * collective's entry it was held */
	/* 1 + the communicator past whose blocking collective's entry barrier
	 * it is held (LH_BLOCKING_NONE: at one of a file), and 1 + the one
	 * whose members, all held there, go in together (lh_coll_passed) */
	uint32_t held_blocking, go_blocking;
	/* checkpoints this rank saw end (MPIX_Checkpoint waits for the next) */
	uint32_t mpix_gen, mpix_ok;
};

/* A request's record (lh_slot.rec of every request), made and freed with
 * its handle by lh_handles.c, not through the hooks. */
enum lh_req_kind { REQ_OTHER, REQ_SEND, REQ_RECV };
enum lh_req_state {
	REQ_PENDING,            /* the real request is active */
	REQ_DONE,               /* completed in MPI (or from the drain buffer): status kept */
	REQ_INACTIVE,           /* a persistent request not started (or seen complete) */
};
struct lh_req {
	uint32_t kind, state;
	uint32_t detached;      /* freed by the program while active: the drain completes it */
	uint32_t persist;       /* persistent (MPI_Send_init, ...): 1 + the send mode (0
				 * standard, 1 synchronous, 2 ready); a receive's 1; else 0 */
	uint32_t errh;          /* its error's handler: the communicator's or STS_ERRH_FILE |
				 * the file's (lh_req_raises_on); 0: comm's, of a send or receive */
	uint64_t seq;           /* posting order: restart re-posts receives in it */
	void *buf;
	int count;
	uint32_t datatype, comm;
	int peer, tag;          /* neutral rank values */
	struct sts_status status;
};

extern struct lh_ledger *lh_lg;

static inline int lh_live_slot(const struct lh_table *t, uint32_t n)
{
	return n < t->cap && (n < STS_FIRST_USER || n < t->next);
}

/* the real handle of a neutral one (the real null handle for an unknown
 * one); on every call's way in, so inline */
static inline uint64_t lh_real(int kind, uint32_t n)
{
	const struct lh_table *t = &lh_lg->tables[kind];

	return lh_live_slot(t, n) ? t->slot[n].real : t->slot[0].real;
}

/* A new ledger at STS_LEDGER_ADDR (fresh start); 0 or a negative errno. */
int lh_ledger_create(int world_rank, int world_size);
/* The ledger the restored upper half brought back; 0 or a negative errno
 * with err_msg(). */
int lh_ledger_attach(int world_rank, int world_size);

/* What the handle tables (lh_handles.c) and the records of objects
 * (lh_state.c) tell the files above them: a handle made or freed (to
 * lh_state.c; a request's record is lh_handles.c's own), a
 * communicator's collective counts (lh_coll.c), buffered sends
 * (lh_p2p.c), files (lh_io.c), windows (lh_win.c), operations
 * (lh_calls.c). Defined in lh_handles.c and filled once by lh_calls.c
 * (lh_engine_set, before any object exists), so the calls inside the
 * virtualization run one way (src/split/parts.txt). Each is the function
 * of the same meaning declared in this header. */
struct lh_object_hooks {
	void (*created)(int kind, uint32_t n);
	void (*freed)(int kind, uint32_t n);
	void (*comm_made)(uint32_t comm);
	void (*comm_gone)(uint32_t comm);
	int (*comm_retire)(uint32_t comm);
	int (*comm_retired)(uint32_t comm);
	int (*comm_freeing)(uint32_t comm, MPI_Comm *real);
	void (*request_gone)(uint32_t req);
	const char *(*file_unsupported)(const void *rec);
	int (*file_rebuild)(struct lh_slot *s);
	void (*file_forget)(void *rec);
	int (*win_rebuild)(struct lh_slot *s);
	int (*op_build)(int slot, int commute, uint64_t *real);
};
extern struct lh_object_hooks lh_hooks;

/* lh_state.c: objects the program created, recorded when they are made,
 * and built again on a fresh MPI at restart. */
void lh_state_created(int kind, uint32_t n);
void lh_state_freed(int kind, uint32_t n);
/* a rank of comm as a world rank, -1 when it is none */
int lh_world_of(uint32_t comm, int rank);
/* what of the program's objects a restart cannot rebuild, in a sentence
 * for the error, or "" */
void lh_state_unsupported(char *why, size_t len);
/* every object again on this MPI, pending receives posted again; 0 or a
 * negative errno with err_msg() */
int lh_state_rebuild(void);
/* What keeps a live rank from taking part in a migration into a spare
 * (lh_state_relink cannot make it again yet: a window, a file, a
 * non-blocking operation other than a receive, a communicator freed here
 * but not by every member), in a sentence, or "" */
void lh_state_unmovable(char *why, size_t len);
/* A live rank after lh_world was made again over a new rank map: every
 * communicator and group again over it, in creation order (as the
 * restored rank's lh_state_rebuild makes them), the old ones freed, its
 * pending receives cancelled and posted again on the new ones;
 * 0 or a negative errno with err_msg() */
int lh_state_relink(void);
/* an operation's trampoline slot (lh_calls.c makes them) */
void lh_state_op(uint32_t n, int slot, int commute);
int lh_op_build(int slot, int commute, uint64_t *real);
/* the trampoline slot of user operation n, or -1 (lh_state.c) */
int lh_state_op_slot(uint32_t n);
/* request req, just started, may call operation op until it is freed: op's
 * slot is not given to another operation until then (lh_calls.c) */
void lh_op_hold(uint32_t op, uint32_t req);
/* request n, a collective's the program freed while MPI still ran it: 1
 * when it completed, and it is let go of now; 0 when it runs on, or is no
 * such request (lh_p2p.c; the drain completes the others) */
int lh_req_detached_done(uint32_t n);

/* a datatype's construction, to build it again (a file's view, lh_io.c):
 * NULL and *pre its neutral number for a predefined one */
void *lh_type_record(MPI_Datatype t, uint32_t *pre);
int lh_type_bad(const void *rec);       /* cannot be built again */
int lh_type_build(const void *rec, MPI_Datatype *out);   /* and committed */
void lh_type_forget(void *rec);

/* lh_io.c: open files. Every file pointer recorded at a checkpoint (0 or
 * an MPI error code); what of a file cannot be restored, or NULL; the
 * file opened again at restart; its record dropped. */
int lh_io_save(void);
/* every MPI_Info the program created: its pairs read into its record
 * (lh_state.c), which a restart builds it again from; 0 or -errno */
int lh_info_save(void);
const char *lh_io_unsupported(const void *rec);
int lh_io_rebuild(struct lh_slot *s);
void lh_io_forget(void *rec);
/* a collective with no non-blocking form on file fh is about to start: as
 * lh_coll_blocking, on the file's own communicator */
int lh_io_blocking(uint32_t fh);

/* lh_win.c: every window flushed, then a barrier over ctl: no RMA
 * operation of any rank is in flight (an MPI error code); a window made
 * again over its memory, its epoch open again (at restart) */
int lh_win_quiesce(MPI_Comm ctl);
/* MPI driven once (a parked target's part in another rank's operation) */
int lh_win_progress(MPI_Comm ctl);
int lh_win_rebuild(struct lh_slot *s);
/* the segment of a window of MPI_Win_allocate_shared that holds the
 * mapping [start, end), if one does: 1 with the file's name, the mapping's
 * offset in it, the segment's length and whether this rank's image saves
 * its contents (the window's rank 0); 0 if none */
int lh_win_segment(uint64_t start, uint64_t end, const char **name, uint64_t *offset,
		   uint64_t *len, int *owner);
/* a predefined attribute of window win (struct sts_hand_ops's win_attr) */
int lh_win_attr(uint32_t win, int which, sts_aint *value);

/* lh_handles.c */
/* NULL: not a live user handle (inline: several times on every request's
 * way) */
static inline struct lh_slot *lh_slot_of(int kind, uint32_t n)
{
	struct lh_table *t = &lh_lg->tables[kind];

	return n >= STS_FIRST_USER && n < t->next ? &t->slot[n] : NULL;
}
/* the neutral number of a real handle the program holds, or UINT32_MAX */
uint32_t lh_find(int kind, uint64_t real);
/* a new user handle for real, even if real is a predefined value */
uint32_t lh_alloc(int kind, uint64_t real);
/* let go of neutral handle n (its real object is gone); a communicator
 * may stay retired (lh_coll.c), lh_release_now lets go of it for good */
void lh_release(int kind, uint32_t n);
void lh_release_now(int kind, uint32_t n);

/* lh_coll.c: a collective is about to start on comm: 0 (counted), or
 * STS_AGAIN (a checkpoint holds it) */
int lh_coll_enter(uint32_t comm);
/* lh_coll.c: some communicator's count is below its checkpoint target */
int lh_coll_behind(void);
/* lh_p2p.c: a collective with no non-blocking form (a communicator
 * made, a file opened, collective MPI-IO on the file's own communicator;
 * LH_BLOCKING_NONE: on a file with no record) is about to start: 0 (go
 * in), or STS_AGAIN (parks, and is called again). On a communicator: the
 * entry barrier (lh_coll_entry), then lh_coll_passed (lh_coll.c): 0, or
 * STS_AGAIN while a checkpoint lets this rank run and the other members
 * may be stopped (held past the barrier until every member is). With
 * LH_BLOCKING_NONE: STS_AGAIN while a checkpoint lets this rank run.
 * docs/protocol.md, "Blocking collectives". */
#define LH_BLOCKING_NONE UINT32_MAX
int lh_coll_blocking(uint32_t comm);
int lh_coll_entry(uint32_t comm);
int lh_coll_passed(uint32_t comm);
/* a new communicator's key (its first collective, over its members: the
 * rounds name it by it), and its end; lh_state.c calls them */
void lh_coll_comm_made(uint32_t comm);
void lh_coll_comm_gone(uint32_t comm);
/* the program freed comm (its real one is freed): 1 if its record is
 * kept, retired, until a checkpoint's round finds every member freed it
 * (its slot then released), 0 if it goes now */
int lh_coll_comm_retire(uint32_t comm);
int lh_coll_retired(uint32_t comm);
/* the program frees comm, whose real communicator is *real: 1 when a
 * barrier posted on it took it (*real is then MPI_COMM_NULL; it is freed,
 * and comm's retired record goes, once every member freed it: lh_coll.c,
 * "farewells"), 0 when the caller frees it now; and at MPI_Finalize, the
 * ones still pending completed (every member freed them by then) */
int lh_coll_comm_freeing(uint32_t comm, MPI_Comm *real);
void lh_coll_farewells_end(void);
/* One round of targets (collective over ctl; every rank parked, on its
 * program's thread): LH_ROUND_ADVANCE when this rank is behind and must
 * run on until it parks at its targets, LH_ROUND_AGAIN when another is,
 * LH_ROUND_RELEASE (every rank) when a rank that ran on did not get to its
 * targets in the time given (stuck): every rank runs for a while, the ones
 * held at a collective's entry start it (docs/protocol.md, "Release rule"),
 * ranks held at the entry of a blocking collective on a communicator
 * whose every member is held there get LH_ROUND_ADVANCE and start it,
 * LH_ROUND_DONE when none is behind (every target met: the next is the
 * drain), or a negative errno with err_msg() when a rank failed.
 * *failed: this rank failed (past the deadline; set by the round when it
 * cannot take part), told to every rank in the next round; stuck: it ran
 * on in the last ADVANCE and did not park by itself (or parked held at a
 * blocking collective while behind). */
#define LH_QUIESCE_TIMEOUT_MS 30000
enum { LH_ROUND_DONE, LH_ROUND_AGAIN, LH_ROUND_ADVANCE, LH_ROUND_RELEASE };
/* lh_ledger.advancing: 0 the program runs normally (no checkpoint, or
 * parked); ADVANCE behind a target, runs on to it; RELEASE a release's
 * run, in which it starts the collective it was held at */
enum { LH_RUN_ADVANCE = 1, LH_RUN_RELEASE };
int lh_coll_round(MPI_Comm ctl, int *failed, int stuck);
/* lh_p2p.c: a blocking collective's start and wait, with its continuation:
 * lh_coll_begin gives 1 (continuing: *req), 0 (start it now: counted) or
 * STS_AGAIN (held) */
int lh_coll_begin(uint32_t comm, uint64_t key, uint32_t *req);
uint32_t lh_coll_started(MPI_Request r);
int lh_coll_wait(uint64_t key, uint32_t *req);

/* What the MPI virtualization asks of the checkpoint engine (lh_agent.c),
 * set by lh_main.c before the program runs (lh_engine_set): no file of the
 * virtualization calls the engine itself (docs/split.md, "Parts of the
 * split process"). */
struct lh_engine_ops {
	/* ask the job's coordinator for a checkpoint; -1 when the rank has none */
	int (*request)(void);
	/* the program ends the rank itself without MPI_Finalize (how: "exit"
	 * with its status, "abort" with MPI_Abort's code) */
	void (*quit)(const char *how, int code);
	/* the program ends (MPI_Finalize) */
	void (*bye)(void);
};
/* also the one place that fills lh_hooks */
void lh_engine_set(const struct lh_engine_ops *ops);

/* lh_p2p.c: arrays of requests (sts_hand_ops) */
int lh_waitall(int n, uint32_t *reqs, struct sts_status *st);
int lh_testall(int n, uint32_t *reqs, int *flag, struct sts_status *st);
int lh_waitany(int n, uint32_t *reqs, int *index, struct sts_status *st);
int lh_testany(int n, uint32_t *reqs, int *index, int *flag, struct sts_status *st);
int lh_waitsome(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st);
int lh_testsome(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st);

/* lh_p2p.c: the checkpoint's drain, on the program's thread while it is
 * parked (every rank's is); 0 or a negative errno with err_msg() */
int lh_p2p_drain(MPI_Comm ctl, int timeout_ms);

void *lg_alloc(size_t n);
void *lg_calloc(size_t n);
void lg_free(void *p);
void *lg_realloc(void *p, size_t n);

#endif
