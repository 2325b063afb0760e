/* comm_mpi.c - stasis_init(): libstasis over MPI. Compiled once per MPI
 * library (Open MPI, MPICH); the transport itself is redundancy/comm_mpi.c. */
#include <mpi.h>

#include "api/api.h"
#include "common/err.h"

#include <errno.h>

int stasis_init(MPI_Comm comm, const char *config)
{
	int inited = 0, ret;

	err_clear();
	if (api.initialized)
		return api_fail(err_set(-EALREADY, "stasis_init: already initialized"));
	MPI_Initialized(&inited);
	if (!inited)
		return api_fail(err_set(-EINVAL, "stasis_init: call MPI_Init first"));
	if (comm == MPI_COMM_NULL)
		return api_fail(err_set(-EINVAL, "stasis_init: MPI_COMM_NULL"));
	ret = redun_comm_mpi(comm, &api.comm);
	if (ret)
		return api_fail(err_set(ret, "stasis_init: %s", err_msg()));
	return api_init_common(config);
}

/* For Fortran (an integer communicator) and Python (mpi4py's comm.py2f()). */
int stasis_init_fortran(int fcomm, const char *config)
{
	return stasis_init(MPI_Comm_f2c((MPI_Fint)fcomm), config);
}
