/* api.c - libstasis's entry points: initialisation, types, protected
 * regions, checkpoint and recover, finalize (the state is in state.c). */
#include "api/api.h"
#include "common/config.h"
#include "common/err.h"
#include "common/log.h"
#include "coord/jobenv.h"
#include "redundancy/redundancy.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int require_init(const char *fn)
{
	err_clear();
	if (api.finalized)
		return api_fail(err_set(-EINVAL, "%s: called after stasis_finalize", fn));
	if (!api.initialized)
		return api_fail(err_set(-EINVAL, "%s: call stasis_init first", fn));
	return 0;
}

/* A job name must be a plain directory name. */
static void sanitize(char *name)
{
	for (char *p = name; *p; p++)
		if (*p == '/' || *p < 0x21 || *p > 0x7e)
			*p = '_';
	if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		snprintf(name, API_NAME_LEN, "job");
}

/* The configured job, else the launcher's job id, else the program name:
 * a rerun of the same batch job or program finds its checkpoints. */
static void derive_job(char *job)
{
	static const char *const vars[] = { "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID",
					    "COBALT_JOBID" };
	char exe[PATH_MAX];
	ssize_t n;

	if (*cfg_str(CFG_JOB)) {
		snprintf(job, API_NAME_LEN, "%s", cfg_str(CFG_JOB));
		sanitize(job);
		return;
	}
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (v && *v) {
			snprintf(job, API_NAME_LEN, "%s", v);
			sanitize(job);
			return;
		}
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	snprintf(job, API_NAME_LEN, "%s", n > 0 ? strrchr(exe, '/') + 1 : "job");
	sanitize(job);
}

#define RECYCLE_MAX 4096         /* spare files a node's cache keeps at most */
#define IMG_CHUNK_SLACK (64u << 10)     /* per region: chunk headers, zero-page maps */

static int open_stores(void)
{
	char root[PATH_MAX];
	int ret = 0, ok;
	int64_t flag;

	/* rank 0 creates the job's global directory and index, node leaders
	 * their node's; the others open what exists */
	for (int pass = 0; pass < 2; pass++) {
		if ((pass == 0) == (api.rank == 0))
			ret = store_open("global", NULL, api.job, &api.global);
		if ((pass == 0) == (api.node_leader != 0) && ret == 0) {
			if (snprintf(root, sizeof(root), "%s/%s", cfg_str(CFG_LOCAL_DIR), api.node) >=
			    (int)sizeof(root))
				ret = err_set(-ENAMETOOLONG, "local_dir: path too long");
			else
				ret = store_open("local", root, api.job, &api.local);
		}
		ok = ret == 0;
		flag = ok;
		api.comm.ops->allreduce_i64(api.comm.h, &flag, 1, REDUN_MIN);
		if (!flag)
			return ret ? ret : err_set(-EIO, "stasis_init: another rank could not open "
						   "its checkpoint store (see its message)");
	}
	/* the cache writes new checkpoints over the files of pruned ones */
	store_set_recycle(api.local, strcmp(cfg_str(CFG_RECYCLE), "on") == 0 ? RECYCLE_MAX : 0);
	return 0;
}

static int find_node_peers(void)
{
	api.nodes = calloc((size_t)api.size, sizeof(*api.nodes));
	if (!api.nodes)
		return err_set(-ENOMEM, "out of memory");
	if (api.comm.ops->allgather(api.comm.h, api.node, API_NAME_LEN, api.nodes))
		return -EIO;
	api.node_names = calloc((size_t)api.size, sizeof(*api.node_names));
	if (!api.node_names)
		return err_set(-ENOMEM, "out of memory");
	for (int r = 0; r < api.size; r++)
		api.node_names[r] = api.nodes[r];
	api.one_node = 1;
	for (int r = 0; r < api.size; r++)
		api.one_node &= strcmp(api.nodes[r], api.nodes[0]) == 0;
	api.group_size = (int64_t)cfg_u64(CFG_GROUP_SIZE);
	api.rs_parity = (int64_t)cfg_u64(CFG_RS_PARITY);
	/* the rs layout must be the same on every rank: rank 0's */
	api.comm.ops->bcast(api.comm.h, &api.group_size, sizeof(api.group_size), 0);
	api.comm.ops->bcast(api.comm.h, &api.rs_parity, sizeof(api.rs_parity), 0);
	api.node_leader = 1;
	api.node_ranks = 0;
	for (int r = 0; r < api.size; r++) {
		if (strcmp(api.nodes[r], api.node) != 0)
			continue;
		api.node_ranks++;
		if (r < api.rank)
			api.node_leader = 0;
	}
	return 0;
}

/* The progress thread, over its own TCP link between the ranks (the
 * application's MPI may not be thread-safe); one rank needs no link. */
static int start_progress(void)
{
	struct redun_comm link = { &redun_comm_serial, NULL };
	int ret = api.size > 1 ? redun_link_open(&api.comm, &link) : 0;

	if (ret)
		return ret;
	ret = redun_progress_start(&link, strcmp(cfg_str(CFG_PROGRESS_PRIORITY), "idle") == 0,
				   &api.progress);
	return ret ? err_set(ret, "rank %d: %s", api.rank, err_msg()) : 0;
}

/* Under `stasis run` (its job directory in the environment) rank 0 tells
 * the coordinator where the job's checkpoints are (jobenv.h): a recovery
 * then names the one this library recovers from. Best effort: without
 * it the relaunch still recovers, its line says less. */
static void tell_coordinator(void)
{
	const char *jdir = getenv(JOBENV_JOB_DIR), *local = cfg_str(CFG_LOCAL_DIR);
	char where[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 8], cwd[PATH_MAX], abs[2 * PATH_MAX];
	FILE *f;
	int ok;

	if (api.rank != 0 || !jdir || !*jdir || !realpath(store_job_dir(api.global), where) ||
	    snprintf(path, sizeof(path), "%s/%s", jdir, JOBENV_APPLEVEL_FILE) >= (int)sizeof(path))
		return;
	/* the coordinator moves node-local caches from another directory: a
	 * relative local_dir is made absolute here (it need not exist yet) */
	if (*local && *local != '/' && getcwd(cwd, sizeof(cwd))) {
		snprintf(abs, sizeof(abs), "%s/%s", cwd, local);
		local = abs;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (f) {
		ok = fprintf(f, "global %s\nlocal %s\n", where, local) > 0;
		ok = fclose(f) == 0 && ok;
		if (ok && rename(tmp, path) == 0)
			return;
		unlink(tmp);
	}
	log_warn("cannot tell the coordinator where the checkpoints are: cannot write %s", path);
}

int api_init_common(const char *config)
{
	char name[64], msg[API_MSG_LEN] = "";
	int ret, bad;

	api.rank = api.comm.ops->rank(api.comm.h);
	api.size = api.comm.ops->size(api.comm.h);
	ret = cfg_load(config);
	/* a rank whose configuration is bad must not leave the others waiting
	 * in a collective: every rank fails, naming it */
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		ret = err_set(ret ? ret : -EINVAL, "stasis_init: rank %d: %s", bad, msg);
		goto fail;
	}
	if (*cfg_str(CFG_NODE))
		snprintf(api.node, sizeof(api.node), "%s", cfg_str(CFG_NODE));
	else if (gethostname(api.node, sizeof(api.node) - 1) != 0)
		snprintf(api.node, sizeof(api.node), "localhost");
	sanitize(api.node);
	derive_job(api.job);
	/* every rank must file under rank 0's job name and use its layout */
	ret = api.comm.ops->bcast(api.comm.h, api.job, sizeof(api.job), 0);
	ret = ret ? ret : find_node_peers();
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		ret = err_set(ret ? ret : -EIO, "stasis_init: rank %d: %s", bad, msg);
		goto fail;
	}
	ret = ret ? ret : open_stores();
	if (ret)
		goto fail;
	if (strcmp(cfg_str(CFG_ASYNC), "on") == 0) {
		ret = start_progress();
		bad = api_agree(ret == 0, msg);
		if (bad < api.size) {
			/* the message names the rank that failed (link.c, progress.c) */
			redun_progress_stop(&api.progress);
			ret = err_set(ret ? ret : -EIO, "stasis_init: %s", msg);
			goto fail;
		}
	}
	api.initialized = 1;
	api.started = api.last_ckpt = api_now();
	ret = api_ckpt_latest(name, sizeof(name));
	if (ret < 0)
		goto fail;
	api.status = ret == 1 ? STASIS_RESTARTED : STASIS_FRESH;
	tell_coordinator();
	log_info("rank %d/%d on node %s, job %s: %s", api.rank, api.size, api.node, api.job,
		 api.status == STASIS_RESTARTED ? name : "no established checkpoint");
	return 0;

fail:
	api.initialized = 0;
	redun_progress_stop(&api.progress);
	store_close(&api.global);
	store_close(&api.local);
	free(api.nodes);
	api.nodes = NULL;
	free(api.node_names);
	api.node_names = NULL;
	redun_comm_close(&api.comm);
	return api_fail(ret);
}

int stasis_init_serial(const char *config)
{
	err_clear();
	if (api.initialized)
		return api_fail(err_set(-EALREADY, "stasis_init_serial: already initialized"));
	api.comm.ops = &redun_comm_serial;
	api.comm.h = NULL;
	return api_init_common(config);
}

/* ---- types ---- */

static size_t type_size(stasis_type t)
{
	switch (t) {
	case STASIS_BYTE: return 1;
	case STASIS_INT: return sizeof(int);
	case STASIS_LONG: return sizeof(long);
	case STASIS_FLOAT: return sizeof(float);
	case STASIS_DOUBLE: return sizeof(double);
	default:
		if (t >= 6 && (size_t)(t - 6) < api.ntypes)
			return api.types[t - 6];
		return 0;
	}
}

stasis_type stasis_type_create(size_t size)
{
	size_t *grown;
	int ret = require_init("stasis_type_create");

	if (ret)
		return ret;
	if (size == 0)
		return api_fail(err_set(-EINVAL, "stasis_type_create: size 0"));
	if (api.ntypes >= 1 << 20)
		return api_fail(err_set(-ENOSPC, "stasis_type_create: too many types"));
	grown = realloc(api.types, (api.ntypes + 1) * sizeof(*grown));
	if (!grown)
		return api_fail(err_set(-ENOMEM, "out of memory"));
	api.types = grown;
	api.types[api.ntypes] = size;
	return (stasis_type)(6 + api.ntypes++);
}

/* ---- protected regions ---- */

struct api_var *api_var_find(int id)
{
	for (size_t i = 0; i < api.nvars; i++)
		if (api.vars[i].id == id)
			return &api.vars[i];
	return NULL;
}

/* Room in the node cache for this rank's first image, taken now (at
 * protect time) rather than inside its first checkpoint: on a RAM disk,
 * writing over allocated pages runs about twice as fast as getting new
 * ones. An upper bound (zero pages are not stored; the file is cut to its
 * length), grown only when the protected data grows. */
/* The same for the copies the configured level makes this rank hold (a
 * partner's image, rs parity): a job checkpointing at AUTO says its level
 * in the configuration. */
static int reserve_level(uint64_t need)
{
	int level = api_level_parse(cfg_str(CFG_LEVEL));
	struct redun_set set = {
		.local = api.local, .nranks = api.size, .node = api.node_names,
		.group_size = (unsigned)api.group_size, .rs_parity = (unsigned)api.rs_parity,
	};

	if (api.one_node || (level != STASIS_LEVEL_PARTNER && level != STASIS_LEVEL_RS))
		return 0;
	return redun_reserve(&set, redun_level_find(api_level_names[level]), api.rank, need);
}

static void reserve_cache(void)
{
	uint64_t need = 1u << 20;       /* headers, manifest, footer */
	char name[32];

	for (size_t i = 0; i < api.nvars; i++)
		need += (uint64_t)api.vars[i].count * api.vars[i].elem + IMG_CHUNK_SLACK;
	if (need <= api.reserved)
		return;
	snprintf(name, sizeof(name), "rank-%05d.img", api.rank);
	if (store_spare_reserve(api.local, name, need) || reserve_level(need))
		log_debug("rank %d: %s", api.rank, err_msg());
	else
		api.reserved = need;
}

static int protect(int id, void *ptr, size_t count, stasis_type type, int distributed,
		   size_t global_count, size_t offset)
{
	const char *fn = distributed ? "stasis_protect_distributed" : "stasis_protect";
	size_t elem = type_size(type);
	struct api_var *v;
	int ret = require_init(fn);

	if (ret)
		return ret;
	if (id < 0)
		return api_fail(err_set(-EINVAL, "%s: id %d is negative", fn, id));
	if (!elem)
		return api_fail(err_set(-EINVAL, "%s: id %d: unknown type %d", fn, id, type));
	if (!ptr && count)
		return api_fail(err_set(-EINVAL, "%s: id %d: NULL pointer", fn, id));
	if (count > SIZE_MAX / elem)
		return api_fail(err_set(-EOVERFLOW, "%s: id %d: %zu elements of %zu bytes overflow",
					fn, id, count, elem));
	if (distributed && (offset > global_count || count > global_count - offset))
		return api_fail(err_set(-EINVAL, "%s: id %d: elements [%zu, %zu) outside the global "
					"array of %zu", fn, id, offset, offset + count, global_count));
	v = api_var_find(id);
	if (v && v->elem != elem)
		return api_fail(err_set(-EINVAL, "%s: id %d was protected with %zu-byte elements, "
					"now %zu", fn, id, v->elem, elem));
	if (!v) {
		if (api.nvars == api.cap) {
			size_t cap = api.cap ? api.cap * 2 : 16;
			struct api_var *grown = realloc(api.vars, cap * sizeof(*grown));

			if (!grown)
				return api_fail(err_set(-ENOMEM, "out of memory"));
			api.vars = grown;
			api.cap = cap;
		}
		v = &api.vars[api.nvars++];
	}
	*v = (struct api_var){ .id = id, .ptr = ptr, .count = count, .elem = elem, .type = type,
			       .distributed = distributed, .global_count = global_count,
			       .offset = offset };
	reserve_cache();
	return 0;
}

int stasis_protect(int id, void *ptr, size_t count, stasis_type type)
{
	return protect(id, ptr, count, type, 0, 0, 0);
}

int stasis_protect_distributed(int id, void *ptr, size_t count, stasis_type type,
			       size_t global_count, size_t offset)
{
	return protect(id, ptr, count, type, 1, global_count, offset);
}

int stasis_unprotect(int id)
{
	struct api_var *v;
	int ret = require_init("stasis_unprotect");

	if (ret)
		return ret;
	v = api_var_find(id);
	if (!v)
		return api_fail(err_set(-ENOENT, "stasis_unprotect: id %d is not protected", id));
	*v = api.vars[--api.nvars];
	return 0;
}

/* ---- checkpoint and restart ---- */

int stasis_status(void)
{
	int ret = require_init("stasis_status");

	return ret ? ret : api.status;
}

int stasis_recover(void)
{
	int ret = require_init("stasis_recover");

	if (ret)
		return ret;
	api_upgrades_wait(0, 0);        /* the caches hold what they will hold */
	ret = api_ckpt_recover(-1);
	return ret ? api_fail(ret) : 0;
}

int stasis_recover_var(int id)
{
	int ret = require_init("stasis_recover_var");

	if (ret)
		return ret;
	if (!api_var_find(id))
		return api_fail(err_set(-ENOENT, "stasis_recover_var: id %d is not protected", id));
	api_upgrades_wait(0, 0);
	ret = api_ckpt_recover(id);
	return ret ? api_fail(ret) : 0;
}

int stasis_checkpoint_valid(int level, int valid)
{
	double t0 = api_now();
	int ret = require_init("stasis_checkpoint");

	if (ret)
		return ret;
	if (level < STASIS_LEVEL_AUTO || level > STASIS_LEVEL_GLOBAL)
		return api_fail(err_set(-EINVAL, "stasis_checkpoint: unknown level %d", level));
	ret = api_ckpt_write(level, valid);
	if (ret)
		return api_fail(ret);
	api.taken++;
	api.cost_sum += api_now() - t0;
	api.cost_n++;
	api.last_ckpt = api_now();
	return 0;
}

int stasis_checkpoint(int level)
{
	return stasis_checkpoint_valid(level, 1);
}

int stasis_checkpoint_wait(void)
{
	int ret = require_init("stasis_checkpoint_wait");

	if (ret)
		return ret;
	ret = api_upgrades_wait(0, 1);
	return ret ? api_fail(err_set(-EIO, "stasis_checkpoint_wait: %s", err_msg())) : 0;
}

int stasis_finalize(void)
{
	int ret = require_init("stasis_finalize");

	if (ret)
		return ret;
	/* every upgrade finishes first: the job's redundancy is what it promised */
	if (api_upgrades_wait(0, 1))
		log_warn("rank %d: %s", api.rank, err_msg());
	redun_progress_stop(&api.progress);
	/* spare files are for this run's next checkpoints: give the memory
	 * back. No rank of the node writes into the cache any more: every
	 * write of a checkpoint or an upgrade precedes the agreement that ends
	 * it, and this rank has seen the last of those. */
	if (api.node_leader && store_spares_drop(api.local))
		log_warn("node %s: %s", api.node, err_msg());
	api_files_release();
	store_close(&api.global);
	store_close(&api.local);
	free(api.nodes);
	free(api.node_names);
	free(api.vars);
	free(api.types);
	redun_comm_close(&api.comm);
	memset(&api, 0, sizeof(api));
	api.finalized = 1;
	return 0;
}
