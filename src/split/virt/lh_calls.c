/* lh_calls.c - the lower half's hand-written calls (sts_hand_ops). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fault.h"
#include "lh.h"
#include "lh_ledger.h"
#include "lh_spare.h"

/* MPICH's MPI_STATUS(ES)_IGNORE is the address 1: gcc sees an access to it */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

static int lh_init(int required, int *provided)
{
	/* MPI is initialized already, at the level the lower half asked for.
	 * At MPI_THREAD_SINGLE the program is offered FUNNELED all the same:
	 * every call reaches MPI on the main thread, the checkpoint's own
	 * included (lh_agent.c), which is all FUNNELED asks of MPI, and the
	 * libraries take locks above SINGLE (Open MPI 4.1: 0.03 µs a message) */
	int level = lh_info->thread_provided;

	if (level == MPI_THREAD_SINGLE)
		level = MPI_THREAD_FUNNELED;
	*provided = required < level ? required : level;
	return 0;
}

/* the checkpoint engine, from lh_engine_set; none until then (no agent) */
static struct lh_engine_ops engine;

void lh_engine_set(const struct lh_engine_ops *ops)
{
	engine = *ops;
	lh_hooks = (struct lh_object_hooks){
		.created = lh_state_created, .freed = lh_state_freed,
		.comm_made = lh_coll_comm_made, .comm_gone = lh_coll_comm_gone,
		.comm_retire = lh_coll_comm_retire, .comm_retired = lh_coll_retired,
		.comm_freeing = lh_coll_comm_freeing, .request_gone = lh_bsend_gone,
		.file_unsupported = lh_io_unsupported, .file_rebuild = lh_io_rebuild,
		.file_forget = lh_io_forget, .win_rebuild = lh_win_rebuild,
		.op_build = lh_op_build,
	};
}

static int lh_finalize(void)
{
	if (lh_info->finalized)
		return 0;
	/* a checkpoint lets this rank run (behind a target, or a release) while
	 * others are stopped: stop at the entry, as at a collective's */
	if (lh_lg->advancing) {
		lh_info->ckpt_pending = 1;
		return STS_AGAIN;
	}
	/* buffered sends still on their way: delivered first, their requests
	 * freed (the real MPI_Finalize would leave them to the MPI) */
	if (lh_bsends_flush() == STS_AGAIN)
		return STS_AGAIN;
	lh_info->finalized = 1;
	lh_done_free();
	if (engine.bye)
		engine.bye();
	lh_spare_release();
	lh_coll_farewells_end();
	return lh_err(MPI_Finalize());
}

static void lh_abort(uint32_t comm, int code)
{
	if (engine.quit)
		engine.quit("abort", code);
	MPI_Abort((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm), code);
}

/* the program exits without MPI_Finalize (uh_core.c's on_exit) */
static void lh_quit(int status)
{
	if (!lh_info->finalized && engine.quit)
		engine.quit("exit", status);
}

#define SMALL 64

static int lh_type_create_struct(int n, const int *bl, const sts_aint *displs,
				 const uint32_t *types, uint32_t *newtype)
{
	MPI_Datatype small[SMALL] = { 0 }, *t = small;
	MPI_Datatype out;
	int ret;

	if (n > SMALL && !(t = malloc((size_t)n * sizeof(*t))))
		return lh_err(MPI_ERR_NO_MEM);
	for (int i = 0; i < n; i++)
		t[i] = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, types[i]);
	ret = MPI_Type_create_struct(n, bl, displs, t, &out);
	if (ret == MPI_SUCCESS)
		*newtype = lh_new(STS_DATATYPE, LH_HVAL(out));
	if (t != small)
		free(t);
	return lh_err(ret);
}

/* ---- user reduction operations ----
 * MPI calls a user function without saying which operation it belongs to,
 * so each of the STS_OP_SLOTS slots has its own trampoline: it switches to
 * the calling thread's upper-half TLS and calls back into the upper half,
 * which calls the application's function with its own datatype handle. */
static int dtype_neutral(MPI_Datatype t)
{
	uint32_t n = lh_find(STS_DATATYPE, LH_HVAL(t));

	return (int)(n != UINT32_MAX ? n : lh_new(STS_DATATYPE, LH_HVAL(t)));
}

static void op_trampoline(int slot, void *in, void *inout, int *len, MPI_Datatype *dt)
{
	int g = (int)lh_info->fsgsbase;
	uint32_t n = (uint32_t)dtype_neutral(*dt);
	uint64_t fs = sts_rdfs(g);

	sts_wrfs(g, lh_me->uh_fs);
	lh_info->uh->op_call(slot, in, inout, len, n);
	sts_wrfs(g, fs);
}

#define T(n, s) \
	static void op_##n(void *a, void *b, int *l, MPI_Datatype *d) { op_trampoline(s, a, b, l, d); }
#define T8(i) T(i##0, i * 8 + 0) T(i##1, i * 8 + 1) T(i##2, i * 8 + 2) T(i##3, i * 8 + 3) \
	T(i##4, i * 8 + 4) T(i##5, i * 8 + 5) T(i##6, i * 8 + 6) T(i##7, i * 8 + 7)
T8(0) T8(1) T8(2) T8(3) T8(4) T8(5) T8(6) T8(7)
#undef T
#define T(n, s) op_##n,
static MPI_User_function *const op_slots[STS_OP_SLOTS] = {
	T8(0) T8(1) T8(2) T8(3) T8(4) T8(5) T8(6) T8(7)
};

/* A user operation's slot stays its own while a request that may still
 * call it lives: the program may free the operation right after starting
 * a non-blocking reduction with it (MPI-3.1 5.9.5: the MPI keeps it until
 * the reduction completes), and the real operation keeps calling its
 * slot's trampoline. So op_create refuses a slot a live request holds
 * (STS_OP_SLOT_BUSY) and the upper half takes another. Held: the
 * requests of the non-blocking reductions (generated wrappers,
 * lh_op_hold), until the program frees them, or, freed while MPI still
 * runs them (MPI_Request_free), until a look at the slot finds them
 * complete (before, until the drain of the next checkpoint: a program
 * freeing such requests ran out of the 64 slots); a restart finds them
 * complete (the drain), so the list is the lower half's alone. */
struct op_hold {
	uint32_t req;
	int slot;
	uint64_t seq;   /* the request's: a slot taken again is another */
};
static struct op_hold *holds;
static size_t nholds, holds_cap;

void lh_op_hold(uint32_t op, uint32_t req)
{
	const struct lh_slot *s = lh_slot_of(STS_REQUEST, req);
	int slot = lh_state_op_slot(op);

	if (slot < 0 || !s)
		return;   /* a predefined operation */
	if (nholds == holds_cap) {
		size_t cap = holds_cap ? holds_cap * 2 : 16;
		struct op_hold *h = realloc(holds, cap * sizeof(*h));

		if (!h)
			abort();
		holds = h;
		holds_cap = cap;
	}
	holds[nholds++] = (struct op_hold){ req, slot, s->seq };
}

static int slot_busy(int slot)
{
	const struct lh_table *t = &lh_lg->tables[STS_REQUEST];
	int busy = 0;

	for (size_t i = 0; i < nholds; i++) {
		const struct lh_slot *s = lh_slot_of(STS_REQUEST, holds[i].req);

		if (!s || s->seq != holds[i].seq || (!s->rec && s->real == t->slot[0].real) ||
		    (holds[i].slot == slot && lh_req_detached_done(holds[i].req))) {
			holds[i--] = holds[--nholds];   /* freed */
			continue;
		}
		busy |= holds[i].slot == slot;
	}
	return busy;
}

static int lh_op_create(int slot, int commute, uint32_t *op)
{
	MPI_Op out;
	int ret;

	if (slot < 0 || slot >= STS_OP_SLOTS)
		return lh_err(MPI_ERR_ARG);
	if (slot_busy(slot))
		return STS_OP_SLOT_BUSY;
	ret = MPI_Op_create(op_slots[slot], commute, &out);
	if (ret == MPI_SUCCESS) {
		*op = lh_new(STS_OP, LH_HVAL(out));
		lh_state_op(*op, slot, commute);
	}
	return lh_err(ret);
}

/* the operation of slot again, on a fresh MPI (lh_state.c) */
int lh_op_build(int slot, int commute, uint64_t *real)
{
	MPI_Op out;
	int ret;

	if (slot < 0 || slot >= STS_OP_SLOTS)
		return MPI_ERR_OP;
	ret = MPI_Op_create(op_slots[slot], commute, &out);
	if (ret == MPI_SUCCESS)
		*real = LH_HVAL(out);
	return ret;
}

/* ---- MPIX_Checkpoint (include/stasis_mpix.h): every rank takes a ticket,
 * then after a barrier of the program's rank 0 asks the coordinator; every
 * rank waits for the end of the first checkpoint after its ticket, or for a
 * restart from it. A ticket taken after the barrier could come after that
 * checkpoint (a rank descheduled on leaving the barrier is stopped and
 * checkpointed there) and wait for good. ---- */
static void lh_mpix_ticket(uint64_t *ticket)
{
	*ticket = ((uint64_t)lh_lg->restarts << 32) | lh_lg->mpix_gen;
}

static int lh_mpix_request(void)
{
	const char *only = getenv("STASIS_FAULT_RANK");

	if ((!only || atoi(only) == lh_info->world_rank) && FAULT(SPLIT_MPIX_LATE))
		return 2;   /* the upper half waits, then asks again */
	if (!getenv("STASIS_COORD_ADDR"))
		return 1;
	if (lh_info->world_rank == 0 && (!engine.request || engine.request() != 0))
		return 1;
	return 0;
}

static int lh_mpix_wait(uint64_t ticket, int *state)
{
	struct timespec ts = { 0, 1000000 };

	for (;;) {
		if (lh_lg->restarts > (uint32_t)(ticket >> 32)) {
			*state = 2;   /* MPIX_CR_STATE_RESTART */
			return 0;
		}
		if (lh_lg->mpix_gen != (uint32_t)ticket) {
			*state = lh_lg->mpix_ok ? 1 : 3;   /* CHECKPOINT, ERROR */
			return 0;
		}
		if (lh_info->ckpt_pending)
			return STS_AGAIN;
		lh_tls_yield();
		nanosleep(&ts, NULL);
	}
}

/* A predefined attribute as this MPI library has it (src/split/upper/uh_attr.c
 * keeps every other attribute in the upper half). */
static int lh_attr_predef(int which, int *value, int *flag)
{
	static const int keys[] = { [STS_ATTR_TAG_UB] = MPI_TAG_UB, [STS_ATTR_HOST] = MPI_HOST,
				    [STS_ATTR_IO] = MPI_IO, [STS_ATTR_UNIVERSE_SIZE] = MPI_UNIVERSE_SIZE,
				    [STS_ATTR_APPNUM] = MPI_APPNUM };
	int *v = NULL, ret;

	*flag = 0;
	if (which < 0 || which >= (int)(sizeof(keys) / sizeof(keys[0])))
		return lh_err(MPI_ERR_KEYVAL);
	ret = MPI_Comm_get_attr(MPI_COMM_WORLD, keys[which], &v, flag);
	if (ret == MPI_SUCCESS && *flag)
		*value = which == STS_ATTR_HOST || which == STS_ATTR_IO ? lh_rank_out(*v) : *v;
	return lh_err(ret);
}

void lh_hand_ops_fill(struct sts_hand_ops *ops)
{
	ops->attr_predef = lh_attr_predef;
	ops->win_attr = lh_win_attr;
	ops->init = lh_init;
	ops->finalize = lh_finalize;
	ops->abort = lh_abort;
	ops->quit = lh_quit;
	ops->waitall = lh_waitall;
	ops->waitany = lh_waitany;
	ops->testall = lh_testall;
	ops->testany = lh_testany;
	ops->waitsome = lh_waitsome;
	ops->testsome = lh_testsome;
	ops->mpix_ticket = lh_mpix_ticket;
	ops->mpix_request = lh_mpix_request;
	ops->mpix_wait = lh_mpix_wait;
	ops->type_create_struct = lh_type_create_struct;
	ops->op_create = lh_op_create;
}

/* Strings into the program's buffers: sized by the program's mpi.h, which
 * may be the other MPI's. Open MPI's MPI_MAX_LIBRARY_VERSION_STRING is
 * 256, MPICH's 8192; MPI_MAX_ERROR_STRING 256 and 1024;
 * MPI_MAX_PROCESSOR_NAME 256 and 128. The real MPI writes into a buffer of
 * its own size, and the program gets at most the smaller of the two ABIs'
 * sizes (a program built with Open MPI above MPICH had its stack
 * overwritten by MPICH's 2019-byte version string). */
#define STS_MAX_LIBRARY_VERSION_STRING 256
#define STS_MAX_ERROR_STRING 256
#define STS_MAX_PROCESSOR_NAME 128

static void copy_out(char *to, int *len, const char *from, int max)
{
	int n = (int)strnlen(from, (size_t)max - 1);

	memcpy(to, from, (size_t)n);
	to[n] = 0;
	*len = n;
}

int lh_Get_library_version(char *version, int *resultlen)
{
	char buf[MPI_MAX_LIBRARY_VERSION_STRING] = "";
	int n = 0, ret = MPI_Get_library_version(buf, &n);

	copy_out(version, resultlen, buf, STS_MAX_LIBRARY_VERSION_STRING);
	return lh_err(ret);
}

int lh_Get_processor_name(char *name, int *resultlen)
{
	char buf[MPI_MAX_PROCESSOR_NAME] = "";
	int n = 0, ret = MPI_Get_processor_name(buf, &n);

	copy_out(name, resultlen, buf, STS_MAX_PROCESSOR_NAME);
	return lh_err(ret);
}

int lh_Error_string(int errorcode, char *string, int *resultlen)
{
	char buf[MPI_MAX_ERROR_STRING] = "";
	int n = 0, ret = MPI_Error_string(lh_err_in(errorcode), buf, &n);

	copy_out(string, resultlen, buf, STS_MAX_ERROR_STRING);
	return lh_err(ret);
}
