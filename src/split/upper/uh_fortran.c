/* uh_fortran.c - the upper half's stand-in Fortran MPI library.
 *
 * Compiled once per MPI ABI against that ABI's mpi.h, with that ABI's
 * Fortran description generated from its mpif.h (gen_fortran.py), as
 * libmpi_mpifh.so.40 (Open MPI's ABI) or libmpichfort.so.12 (MPICH's), the
 * sonames gfortran programs built with mpif90/mpifort are linked against.
 * Each function takes gfortran's arguments (everything by reference,
 * ierror last), translates them to the ABI's C ones and calls the C
 * stand-in's PMPI_ function in libmpi.so.40 / libmpich.so.12:
 *
 *  - handles: in MPICH's ABI a Fortran handle is the C handle. In Open
 *    MPI's, predefined handles are the small integers of mpif-handles.h
 *    (sts_fhandles, generated); any other handle is its neutral number
 *    plus STS_F_USER_OFFSET, so it survives a restart like the C one. The
 *    C stand-in translates (sts_f2c, sts_c2f in uh_conv.c), for its
 *    MPI_X_c2f and MPI_X_f2c too;
 *  - statuses: a Fortran status is the C MPI_Status bit for bit (checked
 *    below at compile time);
 *  - MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS(ES)_IGNORE: addresses in COMMON
 *    blocks the program defines (the generated definitions here are
 *    interposed by the program's);
 *  - LOGICAL: gfortran's .TRUE. is 1;
 *  - CHARACTER arguments: gfortran passes each one's length after the
 *    others (size_t); a string going in loses its trailing blanks, one
 *    coming out is padded with blanks (fstr_in, fstr_out).
 *
 * The functions here are those whose translation is not mechanical or
 * that came first; every other one is generated from its C prototype by
 * gen_fortran.py (included at the end), or, when it takes what no rule
 * translates (a callback, an attribute, MPI's memory), names itself
 * ("MPI_X (Fortran)") and aborts the job (docs/split.md, "Fortran").
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "uh.h"

#include "uh_fortran_abi.c"

_Static_assert(sizeof(MPI_Status) == STS_F_STATUS_SIZE * sizeof(MPI_Fint),
	       "a Fortran status is not the C MPI_Status");
_Static_assert(offsetof(MPI_Status, MPI_SOURCE) == STS_F_SOURCE * sizeof(MPI_Fint) &&
	       offsetof(MPI_Status, MPI_TAG) == STS_F_TAG * sizeof(MPI_Fint) &&
	       offsetof(MPI_Status, MPI_ERROR) == STS_F_ERROR * sizeof(MPI_Fint),
	       "MPI_SOURCE, MPI_TAG, MPI_ERROR differ between the Fortran and C statuses");

#define PMPI_ALIAS(f) __typeof__(f##_) p##f##_ __attribute__((alias(#f "_")))

/* ---- handles ---- */

/* the C stand-in's (uh_conv.c), which MPI_X_c2f and MPI_X_f2c use too, so
 * that a program mixing C and Fortran sees one numbering */
#define f2c sts_f2c
#define c2f sts_c2f

#define COMM(f) ((MPI_Comm)(STS_HCAST)f2c(STS_COMM, f))
#define TYPE(f) ((MPI_Datatype)(STS_HCAST)f2c(STS_DATATYPE, f))
#define OP(f) ((MPI_Op)(STS_HCAST)f2c(STS_OP, f))
#define REQ(f) ((MPI_Request)(STS_HCAST)f2c(STS_REQUEST, f))
#define ERRH(f) ((MPI_Errhandler)(STS_HCAST)f2c(STS_ERRHANDLER, f))
#define F(kind, c) c2f(kind, STS_HVAL(c))

/* ---- sentinels ---- */

static void *buf(void *b)
{
	return b == STS_F_BOTTOM ? MPI_BOTTOM : b == STS_F_IN_PLACE ? MPI_IN_PLACE : b;
}

static MPI_Status *status(MPI_Fint *s)
{
	return (void *)s == STS_F_STATUS_IGNORE ? MPI_STATUS_IGNORE : (MPI_Status *)(void *)s;
}

/* not inlined: GCC takes MPICH's MPI_STATUSES_IGNORE, (MPI_Status *)1, for
 * an array of no statuses and refuses the call */
static __attribute__((noinline)) MPI_Status *statuses(MPI_Fint *s)
{
	return (void *)s == STS_F_STATUSES_IGNORE ? MPI_STATUSES_IGNORE : (MPI_Status *)(void *)s;
}

/* a Fortran string going in: a copy without its trailing blanks (NULL: no memory) */
static char *fstr_in(const char *f, size_t len)
{
	char *c;

	while (len > 0 && f[len - 1] == ' ')
		len--;
	c = malloc(len + 1);
	if (c) {
		memcpy(c, f, len);
		c[len] = 0;
	}
	return c;
}

/* room for a string coming out (a C stand-in writes at most the ABI's
 * MPI_MAX_* of it, the terminating NUL included) */
#define FSTR_OUT 8192
_Static_assert(MPI_MAX_LIBRARY_VERSION_STRING <= FSTR_OUT && MPI_MAX_PROCESSOR_NAME <= FSTR_OUT &&
	       MPI_MAX_ERROR_STRING <= FSTR_OUT && MPI_MAX_OBJECT_NAME <= FSTR_OUT,
	       "a string coming out may not fit");

/* a C string coming out into a Fortran one of len characters: cut, or
 * padded with blanks */
static void fstr_out(char *f, size_t len, const char *c)
{
	size_t n = strnlen(c, len);

	memcpy(f, c, n);
	memset(f + n, ' ', len - n);
}

/* ---- initialization ---- */

void mpi_init_(MPI_Fint *ierr)
{
	*ierr = PMPI_Init(NULL, NULL);
}
PMPI_ALIAS(mpi_init);

void mpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
	int p = 0;

	*ierr = PMPI_Init_thread(NULL, NULL, *required, &p);
	*provided = p;
}
PMPI_ALIAS(mpi_init_thread);

void mpi_initialized_(MPI_Fint *flag, MPI_Fint *ierr)
{
	int f = 0;

	*ierr = PMPI_Initialized(&f);
	*flag = f ? 1 : 0;
}
PMPI_ALIAS(mpi_initialized);

void mpi_finalized_(MPI_Fint *flag, MPI_Fint *ierr)
{
	int f = 0;

	*ierr = PMPI_Finalized(&f);
	*flag = f ? 1 : 0;
}
PMPI_ALIAS(mpi_finalized);

void mpi_finalize_(MPI_Fint *ierr)
{
	*ierr = PMPI_Finalize();
}
PMPI_ALIAS(mpi_finalize);

void mpi_abort_(MPI_Fint *comm, MPI_Fint *code, MPI_Fint *ierr)
{
	*ierr = PMPI_Abort(COMM(*comm), *code);
}
PMPI_ALIAS(mpi_abort);

double mpi_wtime_(void)
{
	return PMPI_Wtime();
}
PMPI_ALIAS(mpi_wtime);

double mpi_wtick_(void)
{
	return PMPI_Wtick();
}
PMPI_ALIAS(mpi_wtick);

/* ---- communicators ---- */

void mpi_comm_rank_(MPI_Fint *comm, MPI_Fint *rank, MPI_Fint *ierr)
{
	int r = 0;

	*ierr = PMPI_Comm_rank(COMM(*comm), &r);
	*rank = r;
}
PMPI_ALIAS(mpi_comm_rank);

void mpi_comm_size_(MPI_Fint *comm, MPI_Fint *size, MPI_Fint *ierr)
{
	int s = 0;

	*ierr = PMPI_Comm_size(COMM(*comm), &s);
	*size = s;
}
PMPI_ALIAS(mpi_comm_size);

void mpi_comm_dup_(MPI_Fint *comm, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;

	*ierr = PMPI_Comm_dup(COMM(*comm), &c);
	if (*ierr == MPI_SUCCESS)
		*newcomm = F(STS_COMM, c);
}
PMPI_ALIAS(mpi_comm_dup);

/* error handlers: a Fortran program's own is called as
 * SUBROUTINE HANDLER(COMM, CODE) with the Fortran handle of its
 * communicator and the code, both INTEGER by reference (uh_err.c raises
 * it; files have no Fortran binding here, nor their handlers) */
static void comm_caller(void (*fn)(void), uint64_t obj, int *code)
{
	MPI_Fint c = c2f(STS_COMM, obj), e = *code;

	((void (*)(MPI_Fint *, MPI_Fint *))fn)(&c, &e);
}

void mpi_comm_create_errhandler_(void (*fn)(void), MPI_Fint *errhandler, MPI_Fint *ierr)
{
	MPI_Errhandler e = MPI_ERRHANDLER_NULL;

	*ierr = sts_errhandler_create(STS_COMM, fn, comm_caller, &e, "MPI_Comm_create_errhandler");
	if (*ierr == MPI_SUCCESS)
		*errhandler = F(STS_ERRHANDLER, e);
}
PMPI_ALIAS(mpi_comm_create_errhandler);

void mpi_comm_call_errhandler_(MPI_Fint *comm, MPI_Fint *code, MPI_Fint *ierr)
{
	*ierr = PMPI_Comm_call_errhandler(COMM(*comm), *code);
}
PMPI_ALIAS(mpi_comm_call_errhandler);

void mpi_errhandler_free_(MPI_Fint *errhandler, MPI_Fint *ierr)
{
	MPI_Errhandler e = ERRH(*errhandler);

	*ierr = PMPI_Errhandler_free(&e);
	if (*ierr == MPI_SUCCESS)
		*errhandler = F(STS_ERRHANDLER, e);
}
PMPI_ALIAS(mpi_errhandler_free);

void mpi_comm_set_errhandler_(MPI_Fint *comm, MPI_Fint *errhandler, MPI_Fint *ierr)
{
	*ierr = PMPI_Comm_set_errhandler(COMM(*comm), ERRH(*errhandler));
}
PMPI_ALIAS(mpi_comm_set_errhandler);

void mpi_comm_get_errhandler_(MPI_Fint *comm, MPI_Fint *errhandler, MPI_Fint *ierr)
{
	MPI_Errhandler e = MPI_ERRHANDLER_NULL;

	*ierr = PMPI_Comm_get_errhandler(COMM(*comm), &e);
	if (*ierr == MPI_SUCCESS)
		*errhandler = F(STS_ERRHANDLER, e);
}
PMPI_ALIAS(mpi_comm_get_errhandler);

void mpi_comm_split_(MPI_Fint *comm, MPI_Fint *color, MPI_Fint *key, MPI_Fint *newcomm,
		     MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;

	*ierr = PMPI_Comm_split(COMM(*comm), *color, *key, &c);
	if (*ierr == MPI_SUCCESS)
		*newcomm = F(STS_COMM, c);
}
PMPI_ALIAS(mpi_comm_split);

void mpi_comm_free_(MPI_Fint *comm, MPI_Fint *ierr)
{
	MPI_Comm c = COMM(*comm);

	*ierr = PMPI_Comm_free(&c);
	if (*ierr == MPI_SUCCESS)
		*comm = F(STS_COMM, c);
}
PMPI_ALIAS(mpi_comm_free);

/* ---- point to point ---- */

void mpi_send_(void *b, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag,
	       MPI_Fint *comm, MPI_Fint *ierr)
{
	*ierr = PMPI_Send(buf(b), *count, TYPE(*type), *dest, *tag, COMM(*comm));
}
PMPI_ALIAS(mpi_send);

void mpi_recv_(void *b, MPI_Fint *count, MPI_Fint *type, MPI_Fint *source, MPI_Fint *tag,
	       MPI_Fint *comm, MPI_Fint *st, MPI_Fint *ierr)
{
	*ierr = PMPI_Recv(buf(b), *count, TYPE(*type), *source, *tag, COMM(*comm), status(st));
}
PMPI_ALIAS(mpi_recv);

void mpi_isend_(void *b, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag,
		MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr)
{
	MPI_Request r = MPI_REQUEST_NULL;

	*ierr = PMPI_Isend(buf(b), *count, TYPE(*type), *dest, *tag, COMM(*comm), &r);
	if (*ierr == MPI_SUCCESS)
		*req = F(STS_REQUEST, r);
}
PMPI_ALIAS(mpi_isend);

void mpi_irecv_(void *b, MPI_Fint *count, MPI_Fint *type, MPI_Fint *source, MPI_Fint *tag,
		MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr)
{
	MPI_Request r = MPI_REQUEST_NULL;

	*ierr = PMPI_Irecv(buf(b), *count, TYPE(*type), *source, *tag, COMM(*comm), &r);
	if (*ierr == MPI_SUCCESS)
		*req = F(STS_REQUEST, r);
}
PMPI_ALIAS(mpi_irecv);

void mpi_sendrecv_(void *sb, MPI_Fint *scount, MPI_Fint *stype, MPI_Fint *dest, MPI_Fint *stag,
		   void *rb, MPI_Fint *rcount, MPI_Fint *rtype, MPI_Fint *source, MPI_Fint *rtag,
		   MPI_Fint *comm, MPI_Fint *st, MPI_Fint *ierr)
{
	*ierr = PMPI_Sendrecv(buf(sb), *scount, TYPE(*stype), *dest, *stag, buf(rb), *rcount,
			      TYPE(*rtype), *source, *rtag, COMM(*comm), status(st));
}
PMPI_ALIAS(mpi_sendrecv);

void mpi_wait_(MPI_Fint *req, MPI_Fint *st, MPI_Fint *ierr)
{
	MPI_Request r = REQ(*req);

	*ierr = PMPI_Wait(&r, status(st));
	*req = F(STS_REQUEST, r);
}
PMPI_ALIAS(mpi_wait);

void mpi_test_(MPI_Fint *req, MPI_Fint *flag, MPI_Fint *st, MPI_Fint *ierr)
{
	MPI_Request r = REQ(*req);
	int f = 0;

	*ierr = PMPI_Test(&r, &f, status(st));
	*req = F(STS_REQUEST, r);
	*flag = f ? 1 : 0;
}
PMPI_ALIAS(mpi_test);

#define REQ_STACK 64

void mpi_waitall_(MPI_Fint *count, MPI_Fint *reqs, MPI_Fint *st, MPI_Fint *ierr)
{
	MPI_Request small[REQ_STACK], *r = small;
	int n = *count;

	if (n > REQ_STACK && !(r = malloc((size_t)n * sizeof(*r)))) {
		*ierr = MPI_ERR_NO_MEM;
		return;
	}
	for (int i = 0; i < n; i++)
		r[i] = REQ(reqs[i]);
	*ierr = PMPI_Waitall(n, r, statuses(st));
	for (int i = 0; i < n; i++)
		reqs[i] = F(STS_REQUEST, r[i]);
	if (r != small)
		free(r);
}
PMPI_ALIAS(mpi_waitall);

void mpi_get_count_(MPI_Fint *st, MPI_Fint *type, MPI_Fint *count, MPI_Fint *ierr)
{
	int c = 0;

	*ierr = PMPI_Get_count((MPI_Status *)(void *)st, TYPE(*type), &c);
	*count = c;
}
PMPI_ALIAS(mpi_get_count);

/* ---- collectives ---- */

void mpi_barrier_(MPI_Fint *comm, MPI_Fint *ierr)
{
	*ierr = PMPI_Barrier(COMM(*comm));
}
PMPI_ALIAS(mpi_barrier);

void mpi_bcast_(void *b, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm,
		MPI_Fint *ierr)
{
	*ierr = PMPI_Bcast(buf(b), *count, TYPE(*type), *root, COMM(*comm));
}
PMPI_ALIAS(mpi_bcast);

void mpi_reduce_(void *sb, void *rb, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
		 MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr)
{
	*ierr = PMPI_Reduce(buf(sb), buf(rb), *count, TYPE(*type), OP(*op), *root, COMM(*comm));
}
PMPI_ALIAS(mpi_reduce);

void mpi_allreduce_(void *sb, void *rb, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
		    MPI_Fint *comm, MPI_Fint *ierr)
{
	*ierr = PMPI_Allreduce(buf(sb), buf(rb), *count, TYPE(*type), OP(*op), COMM(*comm));
}
PMPI_ALIAS(mpi_allreduce);

/* ---- every other function, generated (gen_fortran.py) ---- */

#define STS_F_FUNCTIONS
#include "uh_fortran_abi.c"
