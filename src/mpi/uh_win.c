/* uh_win.c - the upper half's side of windows (docs/split.md, "Windows").
 *
 * MPI_Win_allocate is MPI_Win_create over memory allocated here, in the
 * upper half, so the image saves the window's memory with the program's
 * and a restart finds it at the same address; MPI_Win_free frees it after
 * the window. The memory's owners are kept in upper-half memory too.
 */
#include <stdlib.h>

#include "uh.h"

static struct owned {
	uint32_t win;           /* neutral */
	void *mem;
} *owned;
static size_t nowned, owned_cap;

int PMPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
		      void *baseptr, MPI_Win *win)
{
	void *p;
	int ret;

	if (size < 0)
		return sts_fail(MPI_ERR_SIZE, sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Win_allocate");
	if (nowned == owned_cap) {
		size_t cap = owned_cap ? owned_cap * 2 : 16;
		struct owned *o = realloc(owned, cap * sizeof(*o));

		if (!o)
			return sts_fail(MPI_ERR_NO_MEM, sts_in(STS_COMM, STS_HVAL(comm)),
					"MPI_Win_allocate");
		owned = o;
		owned_cap = cap;
	}
	p = calloc(1, size ? (size_t)size : 1);
	if (!p)
		return sts_fail(MPI_ERR_NO_MEM, sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Win_allocate");
	ret = PMPI_Win_create(p, size, disp_unit, info, comm, win);
	if (ret != MPI_SUCCESS) {
		free(p);
		return ret;
	}
	owned[nowned++] = (struct owned){ sts_in(STS_WIN, STS_HVAL(*win)), p };
	*(void **)baseptr = p;
	return MPI_SUCCESS;
}

int PMPI_Win_free(MPI_Win *win)
{
	uint32_t n = sts_in(STS_WIN, STS_HVAL(*win)), m = n;
	int ret;

	do
		STS_LOWER(ret = sts_lh->gen.Win_free(&m));
	while (ret == STS_AGAIN);
	if (ret != 0)
		return sts_err_world(ret, "MPI_Win_free");
	for (size_t i = 0; i < nowned; i++)
		if (owned[i].win == n) {
			free(owned[i].mem);
			owned[i] = owned[--nowned];
			break;
		}
	*win = MPI_WIN_NULL;
	return MPI_SUCCESS;
}

int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
		     MPI_Win *win) __attribute__((weak, alias("PMPI_Win_allocate")));
int MPI_Win_free(MPI_Win *win) __attribute__((weak, alias("PMPI_Win_free")));

/* The request-based operations: the operation, MPI_Win_flush (complete
 * at origin and target: more than the request's completion says,
 * MPI-3.1 11.3.5; Open MPI's osc/pt2pt never ended MPI_Win_flush_local
 * of an MPI_Rget here), then a request already complete, so no RMA
 * request is ever pending in the lower half at a checkpoint. */
static int done(int ret, int target_rank, MPI_Win win, MPI_Request *request)
{
	if (ret == MPI_SUCCESS && target_rank != MPI_PROC_NULL)
		ret = PMPI_Win_flush(target_rank, win);
	if (ret != MPI_SUCCESS)
		return ret;
	return PMPI_Irecv(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, request);
}

int PMPI_Rput(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
	      int target_rank, MPI_Aint target_disp, int target_count,
	      MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request)
{
	return done(PMPI_Put(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
			     target_count, target_datatype, win), target_rank, win, request);
}

int PMPI_Rget(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
	      int target_rank, MPI_Aint target_disp, int target_count,
	      MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request)
{
	return done(PMPI_Get(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
			     target_count, target_datatype, win), target_rank, win, request);
}

int PMPI_Raccumulate(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
		     int target_rank, MPI_Aint target_disp, int target_count,
		     MPI_Datatype target_datatype, MPI_Op op, MPI_Win win, MPI_Request *request)
{
	return done(PMPI_Accumulate(origin_addr, origin_count, origin_datatype, target_rank,
				    target_disp, target_count, target_datatype, op, win),
		    target_rank, win, request);
}

int PMPI_Rget_accumulate(const void *origin_addr, int origin_count,
			 MPI_Datatype origin_datatype, void *result_addr, int result_count,
			 MPI_Datatype result_datatype, int target_rank, MPI_Aint target_disp,
			 int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win,
			 MPI_Request *request)
{
	return done(PMPI_Get_accumulate(origin_addr, origin_count, origin_datatype, result_addr,
					result_count, result_datatype, target_rank, target_disp,
					target_count, target_datatype, op, win),
		    target_rank, win, request);
}

int MPI_Rput(const void *, int, MPI_Datatype, int, MPI_Aint, int, MPI_Datatype, MPI_Win,
	     MPI_Request *) __attribute__((weak, alias("PMPI_Rput")));
int MPI_Rget(void *, int, MPI_Datatype, int, MPI_Aint, int, MPI_Datatype, MPI_Win,
	     MPI_Request *) __attribute__((weak, alias("PMPI_Rget")));
int MPI_Raccumulate(const void *, int, MPI_Datatype, int, MPI_Aint, int, MPI_Datatype, MPI_Op,
		    MPI_Win, MPI_Request *) __attribute__((weak, alias("PMPI_Raccumulate")));
int MPI_Rget_accumulate(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int,
			MPI_Aint, int, MPI_Datatype, MPI_Op, MPI_Win, MPI_Request *)
	__attribute__((weak, alias("PMPI_Rget_accumulate")));
