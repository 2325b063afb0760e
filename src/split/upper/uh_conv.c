/* uh_conv.c - handles between C and Fortran (MPI_X_c2f, MPI_X_f2c,
 * MPI_Status_c2f, MPI_Status_f2c) and the arrays of values that differ
 * between the ABIs (docs/split.md, "The function list" and "Fortran").
 *
 * A Fortran handle is an integer that must mean the same object after a
 * restart, above either MPI. In MPICH's ABI it is the C handle, which
 * already does (a created handle carries its neutral number). In Open
 * MPI's, a predefined handle that mpif.h names is its PARAMETER
 * (MPI_COMM_WORLD is 0, MPI_INTEGER 7: sts_fhandles, generated from the
 * ABI's mpif-handles.h by gen_fortran.py --handles), any other one, created
 * or predefined (MPI_INT has no PARAMETER), its neutral number plus
 * STS_F_USER_OFFSET, the first power of two above every PARAMETER. The
 * Fortran stand-in (uh_fortran.c) translates every handle with these two
 * functions too, so a program mixing C and Fortran sees one numbering.
 * Nothing reaches the lower half: the numbers are the upper half's.
 */
#include <stdlib.h>
#include <string.h>

#include "uh.h"

/* MPICH's mpi.h makes most of them macros (casts) */
#undef MPI_Comm_c2f
#undef MPI_Comm_f2c
#undef MPI_Type_c2f
#undef MPI_Type_f2c
#undef MPI_Group_c2f
#undef MPI_Group_f2c
#undef MPI_Op_c2f
#undef MPI_Op_f2c
#undef MPI_Request_c2f
#undef MPI_Request_f2c
#undef MPI_Info_c2f
#undef MPI_Info_f2c
#undef MPI_Errhandler_c2f
#undef MPI_Errhandler_f2c
#undef MPI_File_c2f
#undef MPI_File_f2c
#undef MPI_Message_c2f
#undef MPI_Message_f2c
#undef MPI_Status_c2f
#undef MPI_Status_f2c
#undef PMPI_Comm_c2f
#undef PMPI_Comm_f2c
#undef PMPI_Type_c2f
#undef PMPI_Type_f2c
#undef PMPI_Group_c2f
#undef PMPI_Group_f2c
#undef PMPI_Op_c2f
#undef PMPI_Op_f2c
#undef PMPI_Request_c2f
#undef PMPI_Request_f2c
#undef PMPI_Info_c2f
#undef PMPI_Info_f2c
#undef PMPI_Errhandler_c2f
#undef PMPI_Errhandler_f2c
#undef PMPI_File_c2f
#undef PMPI_File_f2c
#undef PMPI_Message_c2f
#undef PMPI_Message_f2c
#undef PMPI_Status_c2f
#undef PMPI_Status_f2c

int *sts_ints_in(const int *v, int n, int (*tr)(int))
{
	int *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));

	if (out)
		for (int i = 0; i < n; i++)
			out[i] = tr(v[i]);
	return out;
}

#define STS_PEERS_CALL(f) PMPI_##f
#include "sts_coll_peers.h"

int sts_coll_peers(MPI_Comm comm, int neighbor, int out)
{
	return coll_peers(comm, neighbor, out);
}

/* v NULL: MPI_Alltoallw's send types in place, which MPI ignores (MPI-3.1
 * 5.8) and a program may leave NULL; null handles go down instead */
uint32_t *sts_types_in(const MPI_Datatype *v, int n)
{
	uint32_t *out = calloc((size_t)(n > 0 ? n : 1), sizeof(*out));

	if (out && v)
		for (int i = 0; i < n; i++)
			out[i] = sts_in(STS_DATATYPE, STS_HVAL(v[i]));
	return out;
}

#ifdef OPEN_MPI
struct sts_fhandle {
	int kind;
	MPI_Fint f;
	uint64_t c;
};

#ifdef STS_FHANDLES
#include "uh_fhandles.c"
#else
/* built without Open MPI's mpif.h (and so without the Fortran stand-in):
 * every Fortran handle is the neutral number, which C alone round-trips */
static const struct sts_fhandle sts_fhandles[] = { { -1, 0, 0 } };
#define STS_F_USER_OFFSET 0u
#endif

#define NO_HANDLE 0xfffffffeu
#define NEUTRAL_MAX (1u << 24)   /* uh_abi.c keeps 24 bits of a neutral number */

#if STS_F_USER_OFFSET
static uint64_t f2c_tab[STS_KINDS][STS_F_USER_OFFSET];
static int f2c_ready;
#endif

uint64_t sts_f2c(int kind, int f)
{
	uint32_t u = (uint32_t)f;

	if (kind < 0 || kind >= STS_KINDS)
		return 0;
#if STS_F_USER_OFFSET
	if (u < STS_F_USER_OFFSET) {
		if (!f2c_ready) {
			for (const struct sts_fhandle *h = sts_fhandles; h->kind >= 0; h++)
				f2c_tab[h->kind][h->f] = h->c;
			f2c_ready = 1;
		}
		return f2c_tab[kind][u];   /* 0: no handle of Open MPI's */
	}
#endif
	u -= STS_F_USER_OFFSET;
	return u < NEUTRAL_MAX ? sts_out(kind, u) : 0;
}

int sts_c2f(int kind, uint64_t c)
{
	uint32_t n = sts_in(kind, c);

	if (n == NO_HANDLE)
		return -1;
	if (n < STS_FIRST_USER)
		for (const struct sts_fhandle *h = sts_fhandles; h->kind >= 0; h++)
			if (h->kind == kind && h->c == c)
				return h->f;
	return (int)(n + STS_F_USER_OFFSET);
}
#else
uint64_t sts_f2c(int kind, int f)
{
	(void)kind;
	return (uint64_t)(uint32_t)f;
}

int sts_c2f(int kind, uint64_t c)
{
	(void)kind;
	return (int)c;
}
#endif

#define CONVERSIONS(Name, Type, kind)                                                      \
	MPI_Fint PMPI_##Name##_c2f(Type h)                                                 \
	{                                                                                  \
		return sts_c2f(kind, STS_HVAL(h));                                         \
	}                                                                                  \
	Type PMPI_##Name##_f2c(MPI_Fint f)                                                 \
	{                                                                                  \
		return (Type)(STS_HCAST)sts_f2c(kind, f);                                  \
	}                                                                                  \
	MPI_Fint MPI_##Name##_c2f(Type h) __attribute__((weak, alias("PMPI_" #Name "_c2f"))); \
	Type MPI_##Name##_f2c(MPI_Fint f) __attribute__((weak, alias("PMPI_" #Name "_f2c")));

CONVERSIONS(Comm, MPI_Comm, STS_COMM)
CONVERSIONS(Type, MPI_Datatype, STS_DATATYPE)
CONVERSIONS(Group, MPI_Group, STS_GROUP)
CONVERSIONS(Op, MPI_Op, STS_OP)
CONVERSIONS(Request, MPI_Request, STS_REQUEST)
CONVERSIONS(Info, MPI_Info, STS_INFO)
CONVERSIONS(Errhandler, MPI_Errhandler, STS_ERRHANDLER)
CONVERSIONS(File, MPI_File, STS_FILE)
CONVERSIONS(Message, MPI_Message, STS_MESSAGE)

/* A Fortran status is the C MPI_Status bit for bit in both ABIs (the
 * Fortran stand-in checks it against mpif.h when it is built); passing
 * MPI_STATUS_IGNORE is erroneous (MPI-3.1 17.2.5). */
int PMPI_Status_c2f(const MPI_Status *c_status, MPI_Fint *f_status)
{
	if (!c_status || c_status == MPI_STATUS_IGNORE || c_status == MPI_STATUSES_IGNORE ||
	    !f_status)
		return sts_fail(MPI_ERR_ARG, 1, "MPI_Status_c2f");
	memcpy(f_status, c_status, sizeof(*c_status));
	return MPI_SUCCESS;
}
int MPI_Status_c2f(const MPI_Status *c_status, MPI_Fint *f_status)
	__attribute__((weak, alias("PMPI_Status_c2f")));

int PMPI_Status_f2c(const MPI_Fint *f_status, MPI_Status *c_status)
{
	if (!f_status || !c_status || c_status == MPI_STATUS_IGNORE ||
	    c_status == MPI_STATUSES_IGNORE)
		return sts_fail(MPI_ERR_ARG, 1, "MPI_Status_f2c");
	memcpy(c_status, f_status, sizeof(*c_status));
	return MPI_SUCCESS;
}
int MPI_Status_f2c(const MPI_Fint *f_status, MPI_Status *c_status)
	__attribute__((weak, alias("PMPI_Status_f2c")));
