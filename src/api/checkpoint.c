/* checkpoint.c - write an application checkpoint, and queue its upgrade.
 *
 * Every rank's image goes to its node's cache; once all are there (and
 * every rank said valid), rank 0 establishes the checkpoint at SINGLE. What
 * its level adds (partner copies, rs parity, the flush to the global tier)
 * is an upgrade: a task of the redundancy engine's progress thread
 * (src/redundancy), or run here when async is off.
 *
 * Every step that can fail on one rank is followed by an agreement
 * (allreduce), so all ranks take the same branch and report the same error.
 */
#include "api/api.h"
#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void rank_file(char *buf, size_t len, int rank)
{
	snprintf(buf, len, REDUN_FILE, rank);
}

/* ---- writing ---- */

static int write_vars(struct img_writer *w)
{
	char name[32];
	int ret = 0;

	for (size_t i = 0; i < api.nvars && !ret; i++) {
		const struct api_var *v = &api.vars[i];

		snprintf(name, sizeof(name), "var-%d", v->id);
		ret = img_section_begin(w, "variable", name);
		ret = ret ? ret : img_section_attr_u64(w, "id", (uint64_t)v->id);
		ret = ret ? ret : img_section_attr_u64(w, "elem", v->elem);
		ret = ret ? ret : img_section_attr_u64(w, "count", v->count);
		if (v->distributed) {
			ret = ret ? ret : img_section_attr_u64(w, "global_count", v->global_count);
			ret = ret ? ret : img_section_attr_u64(w, "offset", v->offset);
		}
		ret = ret ? ret : img_write(w, v->ptr, v->count * v->elem);
		ret = ret ? ret : img_section_end(w);
	}
	return ret;
}

static int write_image(struct store_ckpt *c, int level)
{
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store_file *f = NULL;
	char name[32], num[32];
	int ret;

	rank_file(name, sizeof(name), api.rank);
	snprintf(num, sizeof(num), "%d", api.rank);
	api_writer_opts(&opts);
	ret = FAULT(API_CKPT_WRITE);
	ret = ret ? ret : store_file_create(c, name, &f);
	ret = ret ? ret : img_writer_create(store_file_write, f, &opts, &w);
	if (!ret)
		img_writer_sink_crc(w, store_file_write_crc);
	ret = ret ? ret : img_writer_meta(w, "producer", "libstasis");
	ret = ret ? ret : img_writer_meta(w, "job", api.job);
	ret = ret ? ret : img_writer_meta(w, "checkpoint", store_ckpt_name(c));
	ret = ret ? ret : img_writer_meta(w, "rank", num);
	ret = ret ? ret : img_writer_meta(w, "node", api.node);
	ret = ret ? ret : img_writer_meta(w, "level", api_level_names[level]);
	ret = ret ? ret : write_vars(w);
	ret = ret ? ret : img_writer_finish(w, NULL);
	ret = ret ? ret : store_file_commit(f);
	img_writer_free(&w);
	store_file_free(&f);
	return ret;
}

/* checkpoint.json: what restart needs to find every rank's image. */
static int write_info(struct store_ckpt *gc, int level, int flush, const int64_t *sizes)
{
	json_t *o = api_info_base(level), *sz = json_array();

	if (flush)
		json_object_set_new(o, "flush", json_string("global"));
	for (int r = 0; r < api.size; r++)
		json_array_append_new(sz, json_integer(sizes[r]));
	json_object_set_new(o, "sizes", sz);
	json_object_set_new(o, "group_size", json_integer(api.group_size));
	json_object_set_new(o, "rs_parity", json_integer(api.rs_parity));
	return api_write_json(gc, API_INFO_FILE, o);
}

/* Node leaders keep their cache to cache_keep checkpoints. */
static void prune_cache(void)
{
	if (api.node_leader && store_prune(api.local, (unsigned)cfg_u64(CFG_CACHE_KEEP), NULL))
		log_warn("node %s: pruning the local cache: %s", api.node, err_msg());
}

/* ---- the upgrade ---- */

struct api_upgrade {
	struct redun_task task;         /* first: the engine's handle on it */
	char name[64];
	int level;                      /* the checkpoint's level */
	int flush;                      /* also copy every image to the global tier */
	int64_t *sizes;                 /* every rank's image size */
	struct img_writer_opts opts;    /* for rs parity images */
};

/* The fault points of the upgrade, where they always were. */
static int upgrade_stage(void *arg, enum redun_stage st)
{
	(void)arg;
	return st == REDUN_STAGE_BEGIN ? FAULT(API_UPGRADE_BEGIN) : FAULT(API_UPGRADE_LEVEL);
}

/* Collective over c: bring an established checkpoint to its level, record
 * the level reached in the job's index, and prune the node caches. */
static int upgrade_run(struct redun_task *t, const struct redun_comm *c)
{
	struct api_upgrade *u = (struct api_upgrade *)t;
	struct redun_set set = {
		.ckpt = u->name, .local = api.local, .global = api.global, .nranks = api.size,
		.node = api.node_names, .size = u->sizes, .group_size = (unsigned)api.group_size,
		.rs_parity = (unsigned)api.rs_parity, .writer = &u->opts, .producer = "libstasis rs",
	};
	struct redun_request req = {
		.level = redun_level_find(api_level_names[u->level]), .flush = u->flush,
		.stage = upgrade_stage,
	};
	int ret = redun_upgrade(&set, c, &req);

	/* older checkpoints leave the cache only once this one has all its
	 * copies: never is a node's loss unrecoverable for want of an upgrade */
	if (ret == 0)
		prune_cache();
	return ret;
}

static void upgrade_free(struct redun_task *t)
{
	struct api_upgrade *u = (struct api_upgrade *)t;

	free(u->sizes);
	free(u);
}

int api_upgrades_wait(unsigned pending, int report)
{
	return redun_progress_wait(api.progress, pending, report);
}

static int fail_ckpt(struct store_ckpt *gc, struct store_ckpt *lc, int bad, int valid_all,
		     const char *name, const char *msg)
{
	char reason[API_MSG_LEN + 32];

	if (!valid_all)
		snprintf(reason, sizeof(reason), "rank %d declared its data invalid", bad);
	else
		snprintf(reason, sizeof(reason), "rank %d: %s", bad, msg);
	if (api.node_leader && lc)
		store_ckpt_abort(lc, reason);
	if (api.rank == 0 && gc)
		store_ckpt_abort(gc, reason);
	/* no rank returns before the FAILED records are written: an
	 * application that aborts on the error must not cut them off */
	api.comm.ops->barrier(api.comm.h);
	return err_set(valid_all ? -EIO : -ECANCELED, "checkpoint %s failed: %s", name, reason);
}

/* Upgrades in flight when a new checkpoint begins: the cache keeps
 * cache_keep checkpoints, and the oldest of them must have all its copies
 * (upgrade_run prunes only after an upgrade). */
static unsigned room(void)
{
	return (unsigned)cfg_u64(CFG_CACHE_KEEP) - 1;
}

/* Every rank's image goes to its node's cache; once all are there (and
 * every rank said valid), rank 0 establishes the checkpoint. Its level's
 * copies are an upgrade, run by the progress thread (or here when async is
 * off). */
int api_ckpt_write(int level, int valid)
{
	struct store_ckpt *gc = NULL, *lc = NULL;
	char name[64] = "", msg[API_MSG_LEN] = "";
	int64_t mysize, *sizes = calloc((size_t)api.size, sizeof(int64_t));
	struct api_upgrade *u = calloc(1, sizeof(*u));
	int ret = 0, bad, flush = strcmp(cfg_str(CFG_GLOBAL_FLUSH), "on") == 0;

	/* what the upgrade needs is allocated first: once established, the
	 * checkpoint is queued on every rank alike, without a way to fail */
	if (!sizes || !u)
		ret = err_set(-ENOMEM, "out of memory");
	api_upgrades_wait(room(), 0);
	level = api_level_resolve(level);
	/* rank 0's level and flush are everyone's, whatever each rank's
	 * configuration says: ranks on different levels would wait in
	 * different calls */
	{
		int64_t lv[2] = { level, flush };

		api.comm.ops->bcast(api.comm.h, lv, sizeof(lv), 0);
		level = (int)lv[0];
		flush = (int)lv[1];
		if (level <= 0 && api.rank != 0)
			err_set(level, "rank 0 could not choose a level");
	}
	if (api.rank == 0 && level > 0 && ret == 0) {
		ret = store_ckpt_begin(api.global, &gc);
		if (ret == 0)
			snprintf(name, sizeof(name), "%s", store_ckpt_name(gc));
	}
	bad = api_agree(level > 0 && ret == 0, msg);
	if (bad < api.size) {
		if (gc)
			store_ckpt_abort(gc, msg);
		api.comm.ops->barrier(api.comm.h);
		store_ckpt_free(&gc);
		free(sizes);
		free(u);
		return err_set(level > 0 ? -EIO : level, "stasis_checkpoint: %s", msg);
	}
	api.comm.ops->bcast(api.comm.h, name, sizeof(name), 0);

	ret = store_ckpt_begin_named(api.local, name, &lc);
	ret = ret ? ret : write_image(lc, level);
	/* I/O first, then validity, so the message blames the right rank */
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		ret = fail_ckpt(gc, lc, bad, 1, name, msg);
		goto out;
	}
	bad = api_agree(valid != 0, msg);
	if (bad < api.size) {
		ret = fail_ckpt(gc, lc, bad, 0, name, msg);
		goto out;
	}

	/* every image's size: checkpoint.json records them (rs pads to them) */
	{
		char file[32], path[PATH_MAX];
		struct stat st;

		rank_file(file, sizeof(file), api.rank);
		mysize = store_ckpt_path(api.local, name, file, path, sizeof(path)) == 0 &&
			 stat(path, &st) == 0 ? st.st_size : -1;
		ret = api.comm.ops->allgather(api.comm.h, &mysize, sizeof(mysize), sizes);
		if (ret)
			goto out;
	}

	/* sealed where the data is, then established in the job's index */
	ret = api.node_leader ? store_ckpt_commit(lc, api.node_ranks) : 0;
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		/* FAILED over a node's seal too: a checkpoint that is not
		 * established must not take a place in the cache */
		ret = fail_ckpt(gc, lc, bad, 1, name, msg);
		goto out;
	}
	if (api.rank == 0) {
		ret = write_info(gc, level, flush, sizes);
		ret = ret ? ret : FAULT(API_CKPT_COMMIT);
		ret = ret ? ret : store_ckpt_commit(gc, 1);
		if (ret)
			store_ckpt_abort(gc, err_msg());
	}
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		if (api.node_leader && lc)
			store_ckpt_abort(lc, msg);
		api.comm.ops->barrier(api.comm.h);      /* the records first, as in fail_ckpt */
		ret = err_set(-EIO, "checkpoint %s failed: rank %d: %s", name, bad, msg);
		goto out;
	}
	log_debug("rank %d: checkpoint %s established (level single so far, %s to come)", api.rank,
		  name, api_level_names[level]);

	/* the upgrade, or for SINGLE only the prune: after the upgrades still
	 * running, which read files the prune would remove */
	snprintf(u->name, sizeof(u->name), "%s", name);
	u->level = level;
	u->flush = flush;
	u->sizes = sizes;
	sizes = NULL;
	u->task.run = upgrade_run;
	u->task.free = upgrade_free;
	api_writer_opts(&u->opts);
	if (api.progress) {
		redun_progress_queue(api.progress, &u->task);
		ret = 0;
	} else {
		ret = upgrade_run(&u->task, &api.comm);
		upgrade_free(&u->task);
	}
	u = NULL;
out:
	if (u)
		free(u);
	free(sizes);
	store_ckpt_free(&gc);
	store_ckpt_free(&lc);
	return ret;
}
