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
