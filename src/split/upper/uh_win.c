/* uh_win.c - the upper half's side of windows (docs/split.md, "Windows").
 *
 * MPI_Win_allocate is MPI_Win_create over memory allocated here, in the
 * upper half, so the image saves the window's memory with the program's
 * and a restart finds it at the same address; MPI_Win_free frees it after
 * the window. MPI_Win_allocate_shared reserves the node's whole segment
 * here (every member's part, contiguous in rank order), and the lower half
 * maps the node's shared file over the reservation; MPI_Win_shared_query
 * answers from the parts recorded here. The memory's owners are kept in
 * upper-half memory too.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "uh.h"

struct part {
	MPI_Aint size;
	int disp_unit;
};

static struct owned {
	uint32_t win;           /* neutral */
	void *mem;
	size_t len;             /* a shared window's reservation (munmap); 0: calloc'd */
	struct part *part;      /* a shared window's members, by rank */
	int nparts;
} *owned;
static size_t nowned, owned_cap;

static int owned_room(void)
{
	size_t cap = owned_cap ? owned_cap * 2 : 16;
	struct owned *o;

	if (nowned < owned_cap)
		return 0;
	o = realloc(owned, cap * sizeof(*o));
	if (!o)
		return -1;
	owned = o;
	owned_cap = cap;
	return 0;
}

int PMPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
		      void *baseptr, MPI_Win *win)
{
	void *p;
	int ret;

	if (size < 0)
		return sts_fail(MPI_ERR_SIZE, sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Win_allocate");
	if (owned_room())
		return sts_fail(MPI_ERR_NO_MEM, sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Win_allocate");
	p = calloc(1, size ? (size_t)size : 1);
	if (!p)
		return sts_fail(MPI_ERR_NO_MEM, sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Win_allocate");
	ret = PMPI_Win_create(p, size, disp_unit, info, comm, win);
	if (ret != MPI_SUCCESS) {
		free(p);
		return ret;
	}
	owned[nowned++] = (struct owned){ sts_in(STS_WIN, STS_HVAL(*win)), p, 0, NULL, 0 };
	*(void **)baseptr = p;
	return MPI_SUCCESS;
}

#define SHM_FN "MPI_Win_allocate_shared"

int PMPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
			     void *baseptr, MPI_Win *win)
{
	uint32_t c = sts_in(STS_COMM, STS_HVAL(comm)), w = 0;
	struct part me = { size, disp_unit }, *part;
	struct sts_shared_mem m = { NULL, 0, 0 };
	size_t total = 0;
	int n = 0, rank = 0, ret;

	if (size < 0)
		return sts_fail(MPI_ERR_SIZE, c, SHM_FN);
	if (disp_unit <= 0)
		return sts_fail(MPI_ERR_DISP, c, SHM_FN);
	ret = PMPI_Comm_size(comm, &n);
	if (ret == MPI_SUCCESS)
		ret = PMPI_Comm_rank(comm, &rank);
	if (ret != MPI_SUCCESS)
		return ret;
	part = malloc((size_t)n * sizeof(*part));
	if (!part || owned_room()) {
		free(part);
		return sts_fail(MPI_ERR_NO_MEM, c, SHM_FN);
	}
	/* every member's size: the segment is their parts, in rank order */
	ret = PMPI_Allgather(&me, sizeof(me), MPI_BYTE, part, sizeof(me), MPI_BYTE, comm);
	if (ret != MPI_SUCCESS) {
		free(part);
		return ret;
	}
	for (int i = 0; i < n; i++) {
		if (i == rank)
			m.offset = (MPI_Aint)total;
		total += (size_t)part[i].size;
	}
	m.len = (MPI_Aint)((total + 4095) / 4096 * 4096 ?: 4096);
	m.base = mmap(NULL, (size_t)m.len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		      -1, 0);
	if (m.base == MAP_FAILED) {
		free(part);
		return sts_fail(MPI_ERR_NO_MEM, c, SHM_FN);
	}
	do
		STS_LOWER(ret = sts_lh->gen.Win_allocate_shared(size, disp_unit,
								 sts_in(STS_INFO, STS_HVAL(info)),
								 c, &m, &w));
	while (ret == STS_AGAIN);
	if (ret != 0) {
		munmap(m.base, (size_t)m.len);
		free(part);
		return sts_err_comm(ret, c, SHM_FN);
	}
	owned[nowned++] = (struct owned){ w, m.base, (size_t)m.len, part, n };
	*win = (MPI_Win)(STS_HCAST)sts_out(STS_WIN, w);
	*(void **)baseptr = (char *)m.base + m.offset;
	return MPI_SUCCESS;
}

/* MPI-3.1 11.2.3: rank's part; MPI_PROC_NULL: the lowest rank's with
 * memory (size 0 and a null base if none has) */
int PMPI_Win_shared_query(MPI_Win win, int rank, MPI_Aint *size, int *disp_unit, void *baseptr)
{
	uint32_t n = sts_in(STS_WIN, STS_HVAL(win));
	const struct owned *o = NULL;
	MPI_Aint off = 0;

	for (size_t i = 0; i < nowned && !o; i++)
		if (owned[i].win == n)
			o = &owned[i];
	if (!o || !o->part)
		return sts_err_world(sts_err_class_in(MPI_ERR_RMA_FLAVOR), "MPI_Win_shared_query");
	if (rank == MPI_PROC_NULL) {
		for (rank = 0; rank < o->nparts && o->part[rank].size == 0; rank++)
			;
		if (rank == o->nparts) {
			*size = 0;
			*disp_unit = o->part[0].disp_unit;
			*(void **)baseptr = NULL;
			return MPI_SUCCESS;
		}
	}
	if (rank < 0 || rank >= o->nparts)
		return sts_err_world(sts_err_class_in(MPI_ERR_RANK), "MPI_Win_shared_query");
	for (int i = 0; i < rank; i++)
		off += o->part[i].size;
	*size = o->part[rank].size;
	*disp_unit = o->part[rank].disp_unit;
	*(void **)baseptr = (char *)o->mem + off;
	return MPI_SUCCESS;
}

/* The predefined window attributes (MPI-3.1 11.2.6), asked of the lower
 * half on every call (after a restart, a new MPI's window); the values
 * the pointers point to are the window's own until it is freed. Keyvals
 * of the program's own are refused (MPI_Win_create_keyval). */
static struct wattr {
	uint32_t win;           /* neutral */
	MPI_Aint size;
	int disp_unit, flavor, model;
} **wattrs;
static size_t nwattrs;

static struct wattr *wattr_of(uint32_t n)
{
	struct wattr **t, *a;

	for (size_t i = 0; i < nwattrs; i++)
		if (wattrs[i]->win == n)
			return wattrs[i];
	t = realloc(wattrs, (nwattrs + 1) * sizeof(*t));
	if (!t)
		return NULL;
	wattrs = t;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->win = n;
	wattrs[nwattrs++] = a;
	return a;
}

static void wattr_drop(uint32_t n)
{
	for (size_t i = 0; i < nwattrs; i++)
		if (wattrs[i]->win == n) {
			free(wattrs[i]);
			wattrs[i] = wattrs[--nwattrs];
			return;
		}
}

int PMPI_Win_get_attr(MPI_Win win, int keyval, void *val, int *flag)
{
	static const int models[] = { [STS_WIN_MODEL_SEPARATE] = MPI_WIN_SEPARATE,
				      [STS_WIN_MODEL_UNIFIED] = MPI_WIN_UNIFIED };
	static const int keys[] = { [STS_WATTR_BASE] = MPI_WIN_BASE, [STS_WATTR_SIZE] = MPI_WIN_SIZE,
				    [STS_WATTR_DISP_UNIT] = MPI_WIN_DISP_UNIT,
				    [STS_WATTR_FLAVOR] = MPI_WIN_CREATE_FLAVOR,
				    [STS_WATTR_MODEL] = MPI_WIN_MODEL };
	uint32_t n = sts_in(STS_WIN, STS_HVAL(win));
	struct wattr *a;
	sts_aint v = 0;
	int which, ret;

	*flag = 0;
	for (which = 0; which <= STS_WATTR_MODEL && keys[which] != keyval; which++)
		;
	if (which > STS_WATTR_MODEL)
		return sts_err_world(sts_err_class_in(MPI_ERR_KEYVAL), "MPI_Win_get_attr");
	STS_LOWER(ret = sts_lh->hand.win_attr(n, which, &v));
	if (ret != 0)
		return sts_err_world(ret, "MPI_Win_get_attr");
	a = wattr_of(n);
	if (!a)
		return sts_err_world(sts_err_class_in(MPI_ERR_NO_MEM), "MPI_Win_get_attr");
	switch (which) {
	case STS_WATTR_BASE:
		*(void **)val = (void *)(uintptr_t)v;
		break;
	case STS_WATTR_SIZE:
		a->size = (MPI_Aint)v;
		*(MPI_Aint **)val = &a->size;
		break;
	case STS_WATTR_DISP_UNIT:
		a->disp_unit = (int)v;
		*(int **)val = &a->disp_unit;
		break;
	case STS_WATTR_FLAVOR:
		/* MPI_Win_allocate's window is MPI_Win_create's below */
		for (size_t i = 0; i < nowned && v == STS_WIN_FLAVOR_CREATE; i++)
			if (owned[i].win == n && !owned[i].part)
				v = STS_WIN_FLAVOR_ALLOCATE;
		a->flavor = (int)v;   /* numbered alike in every mpi.h */
		*(int **)val = &a->flavor;
		break;
	default:
		a->model = models[v == STS_WIN_MODEL_UNIFIED];
		*(int **)val = &a->model;
	}
	*flag = 1;
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
			if (owned[i].len)
				munmap(owned[i].mem, owned[i].len);
			else
				free(owned[i].mem);
			free(owned[i].part);
			owned[i] = owned[--nowned];
			break;
		}
	wattr_drop(n);
	*win = MPI_WIN_NULL;
	return MPI_SUCCESS;
}

int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
		     MPI_Win *win) __attribute__((weak, alias("PMPI_Win_allocate")));
int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
			    void *baseptr, MPI_Win *win)
	__attribute__((weak, alias("PMPI_Win_allocate_shared")));
int MPI_Win_shared_query(MPI_Win win, int rank, MPI_Aint *size, int *disp_unit, void *baseptr)
	__attribute__((weak, alias("PMPI_Win_shared_query")));
int MPI_Win_free(MPI_Win *win) __attribute__((weak, alias("PMPI_Win_free")));
int MPI_Win_get_attr(MPI_Win win, int keyval, void *val, int *flag)
	__attribute__((weak, alias("PMPI_Win_get_attr")));

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
