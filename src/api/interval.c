/* interval.c - when to checkpoint (Young/Daly) and when to stop.
 *
 * Daly's first-order optimum for the compute time between checkpoints is
 * sqrt(2 C M) - C for a checkpoint cost C and a mean time between failures M
 * (M for C >= M/2). C is the mean time this run was blocked in
 * stasis_checkpoint; M is the configuration key `mtbf`. Rank 0 decides and
 * tells the others, so every rank takes the same branch.
 */
#include "api/api.h"
#include "common/config.h"
#include "common/err.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

static double daly_interval(double cost, double mtbf)
{
	if (cost >= mtbf / 2)
		return mtbf;
	return sqrt(2 * cost * mtbf) - cost;
}

static int decide(int64_t *flag)
{
	int ret = api.comm.ops->bcast(api.comm.h, flag, sizeof(*flag), 0);

	return ret ? api_fail(ret) : 0;
}

int stasis_need_checkpoint(int *flag)
{
	int64_t due = 0;
	int ret;

	err_clear();
	if (!api.initialized || !flag)
		return api_fail(err_set(-EINVAL, "stasis_need_checkpoint: %s",
					flag ? "call stasis_init first" : "NULL flag"));
	if (api.rank == 0) {
		/* no measurement yet: take one, it measures the cost */
		if (api.cost_n == 0)
			due = 1;
		else
			due = api_now() - api.last_ckpt >=
			      daly_interval(api.cost_sum / api.cost_n, (double)cfg_u64(CFG_MTBF));
	}
	ret = decide(&due);
	if (ret == 0)
		*flag = (int)due;
	return ret;
}

int stasis_should_exit(int *flag)
{
	char path[PATH_MAX];
	int64_t stop = 0;
	int ret;

	err_clear();
	if (!api.initialized || !flag)
		return api_fail(err_set(-EINVAL, "stasis_should_exit: %s",
					flag ? "call stasis_init first" : "NULL flag"));
	/* `touch <global_dir>/<job>/halt` asks a running job to stop cleanly;
	 * the request is taken (the file goes) once every rank was told: so
	 * `stasis migrate` knows the program stopped because it was asked,
	 * not because it had come to its end */
	if (api.rank == 0 && snprintf(path, sizeof(path), "%s/halt", store_job_dir(api.global)) <
	    (int)sizeof(path))
		stop = access(path, F_OK) == 0;
	ret = decide(&stop);
	if (ret == 0)
		*flag = (int)stop;
	if (ret == 0 && stop && api.rank == 0)
		unlink(path);
	return ret;
}
