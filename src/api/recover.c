/* recover.c - restart: load the newest established checkpoint that every
 * rank can recover, on the same number of ranks or another.
 *
 * Each rank first opens its own image in its node's cache and verifies it
 * (chunk CRCs, that it is this rank's data of this checkpoint, that it holds
 * every protected region at its size now). What a rank lacks, the
 * redundancy engine gets through the checkpoint's level (redun_recover: a
 * node it left, a partner copy, an rs rebuild, the global tier), checked by
 * the same verification. A checkpoint that some rank cannot recover is
 * skipped for an older one, on every rank alike.
 */
#include "api/api.h"
#include "common/err.h"
#include "common/log.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rank_file(char *buf, size_t len, int rank)
{
	snprintf(buf, len, REDUN_FILE, rank);
}

/* The store handle the reader of this rank's data reads through (one at a
 * time: the candidate being verified or loaded). */
static struct store_io *held_io;

static void close_reader(struct img_reader **r)
{
	img_close(r);
	store_io_close(&held_io);
}

struct ckpt_info {
	int64_t level;
	int64_t ranks;
	int64_t group_size;
	int64_t rs_parity;
	int64_t output;                         /* an output set of routed files */
	int64_t flush;                          /* images copied to the global tier too */
	int64_t *sizes;                         /* per rank, when ranks == api.size */
	char (*nodes)[API_NAME_LEN];
};

static void info_free(struct ckpt_info *info)
{
	free(info->sizes);
	free(info->nodes);
	info->sizes = NULL;
	info->nodes = NULL;
}

static int read_info(const char *ckpt, struct ckpt_info *info)
{
	char path[PATH_MAX];
	json_t *o = NULL;
	int ret = 0;

	info_free(info);
	memset(info, 0, sizeof(*info));
	info->sizes = calloc((size_t)api.size, sizeof(int64_t));
	info->nodes = calloc((size_t)api.size, API_NAME_LEN);
	if (!info->sizes || !info->nodes)
		ret = err_set(-ENOMEM, "out of memory");
	if (api.rank == 0 && !ret) {
		o = api_load_json(api.global, ckpt, API_INFO_FILE);
		if (!o)
			ret = -EBADMSG;
		snprintf(path, sizeof(path), "%s/%s", ckpt, API_INFO_FILE);
		if (o) {
			json_t *sz = json_object_get(o, "sizes"), *nodes = json_object_get(o, "nodes");

			info->level = api_level_parse(json_string_value(json_object_get(o, "level")) ?: "");
			info->ranks = json_integer_value(json_object_get(o, "ranks"));
			info->group_size = json_integer_value(json_object_get(o, "group_size"));
			info->rs_parity = json_integer_value(json_object_get(o, "rs_parity"));
			info->output = json_object_get(o, "output") != NULL;
			info->flush = json_object_get(o, "flush") != NULL;
			if (info->level <= 0 || info->ranks <= 0 ||
			    (!info->output && json_array_size(sz) != (size_t)info->ranks) ||
			    json_array_size(nodes) != (size_t)info->ranks)
				ret = err_set(-EBADMSG, "%s: no valid level, ranks, sizes and nodes", path);
			for (int r = 0; !ret && info->ranks == api.size && r < api.size; r++) {
				info->sizes[r] = json_integer_value(json_array_get(sz, (size_t)r));
				snprintf(info->nodes[r], API_NAME_LEN, "%s",
					 json_string_value(json_array_get(nodes, (size_t)r)) ?: "");
			}
			json_decref(o);
		}
	}
	api.comm.ops->bcast(api.comm.h, info, 6 * sizeof(int64_t), 0);
	if (info->sizes && info->nodes && info->ranks == api.size) {
		api.comm.ops->bcast(api.comm.h, info->sizes, (size_t)api.size * sizeof(int64_t), 0);
		api.comm.ops->bcast(api.comm.h, info->nodes, (size_t)api.size * API_NAME_LEN, 0);
	}
	return ret;
}

static const char *var_section(int id)
{
	static char name[32];

	snprintf(name, sizeof(name), "var-%d", id);
	return name;
}

/* Open and fully verify an image of this rank's data, and check that it
 * holds every region asked for with the size it has now. */
/* The image says it is this rank's data of checkpoint ckpt: a copy filed
 * under the wrong name (a partner copy of another checkpoint, another rank's
 * image) is refused even though its checksums hold. */
static int check_owner(const char *ckpt, const char *path, struct img_reader *r)
{
	json_t *m = json_loads(img_manifest(r), 0, NULL), *meta = json_object_get(m, "meta");
	const char *c = json_string_value(json_object_get(meta, "checkpoint"));
	const char *k = json_string_value(json_object_get(meta, "rank"));
	char want[16];
	int ret = 0;

	snprintf(want, sizeof(want), "%d", api.rank);
	if (!c || !k || strcmp(c, ckpt) != 0 || strcmp(k, want) != 0)
		ret = err_set(-EBADMSG, "%s: holds rank %s's data of %s, not rank %d's of %s", path,
			      k ? k : "?", c ? c : "?", api.rank, ckpt);
	json_decref(m);
	return ret;
}

static int open_verified(const char *ckpt, struct store *s, const char *in, const char *name,
			 int only_id, struct img_reader **r)
{
	struct store_io *io = NULL;
	const char *path;
	int ret = store_io_open(s, in, name, &io);

	path = io ? store_io_path(io) : name;
	ret = ret ? ret : img_open_fd(store_io_fd(io), path, r);

	ret = ret ? ret : img_verify(*r);
	ret = ret ? ret : check_owner(ckpt, path, *r);
	for (size_t i = 0; ret == 0 && i < api.nvars; i++) {
		const struct api_var *v = &api.vars[i];
		struct img_section_info si;
		int idx;

		if (only_id >= 0 && v->id != only_id)
			continue;
		idx = img_section_find(*r, var_section(v->id));
		if (idx < 0 || img_section_get(*r, (unsigned)idx, &si))
			ret = err_set(-ENOENT, "%s: rank %d: id %d is not in the checkpoint", ckpt,
				      api.rank, v->id);
		else if (si.size != (uint64_t)v->count * v->elem)
			ret = err_set(-EINVAL, "%s: rank %d: id %d holds %" PRIu64 " bytes in the "
				      "checkpoint, %zu protected now", ckpt, api.rank, v->id, si.size,
				      v->count * v->elem);
	}
	if (ret)
		img_close(r);
	if (ret)
		store_io_close(&io);
	else
		held_io = io;   /* the reader reads through it: closed with the reader */
	return ret;
}

/* This rank's image in one tier. */
static int open_in(struct store *s, const char *ckpt, int only_id, struct img_reader **r)
{
	char file[32];

	rank_file(file, sizeof(file), api.rank);
	if (!store_io_exists(s, ckpt, file))
		return err_set(-ENOENT, "%s: no copy of rank %d's data in %s", ckpt, api.rank,
			       s == api.global ? "the global directory" : "this node's cache");
	return open_verified(ckpt, s, ckpt, file, only_id, r);
}

/* This rank's image in its node's cache, where every checkpoint is written
 * first (a GLOBAL checkpoint of an older version is only in the global
 * tier: looked for there after the level's own copies, see recover). */
static int open_own(const char *ckpt, const struct ckpt_info *info, int only_id,
		    struct img_reader **r)
{
	if (info->ranks != api.size)
		return err_set(-EINVAL, "%s has %" PRId64 " ranks, this job %d", ckpt, info->ranks,
			       api.size);
	return open_in(api.local, ckpt, only_id, r);
}

/* ---- through the level ---- */

struct accept_arg {
	const char *ckpt;
	int only_id;
	struct img_reader **r;
};

/* The engine's candidates for this rank's data, verified like its own. */
static int accept_copy(void *arg, struct store *s, const char *in, const char *name)
{
	struct accept_arg *a = arg;

	close_reader(a->r);
	return open_verified(a->ckpt, s, in, name, a->only_id, a->r);
}

/* Collective: ranks without a good image of their own (have_own 0) get one
 * through the checkpoint's level; *found names scratch files to drop. */
static int recover_level(const char *ckpt, const struct ckpt_info *info, int have_own, int only_id,
			 struct img_reader **r, struct redun_found *found)
{
	const char **then = calloc((size_t)api.size, sizeof(*then));
	struct accept_arg a = { ckpt, only_id, r };
	struct redun_set set = {
		.ckpt = ckpt, .local = api.local, .global = api.global, .nranks = api.size,
		.node = api.node_names, .node_then = then, .size = info->sizes,
		.group_size = (unsigned)info->group_size, .rs_parity = (unsigned)info->rs_parity,
	};
	const struct redun_level *level = redun_level_find(api_level_names[info->level]);
	int ret;

	if (!then)
		return err_set(-ENOMEM, "out of memory");
	for (int q = 0; q < api.size; q++)
		then[q] = info->nodes[q];
	ret = redun_recover(level, &set, &api.comm, have_own, (int)info->flush, accept_copy, &a, found);
	free(then);
	return ret;
}

/* ---- restart on another number of ranks ---- */

/* Old rank's image `file` in the global tier (no verification: each read
 * checks its chunks). */
static int open_global(const char *ckpt, const char *file, struct store_io **io,
		       struct img_reader **r)
{
	int ret = store_io_open(api.global, ckpt, file, io);

	return ret ? ret : img_open_fd(store_io_fd(*io), store_io_path(*io), r);
}

/* Attributes of section idx in an image's manifest. */
static int section_attr(struct img_reader *r, int idx, const char *key, uint64_t *out)
{
	json_t *m = json_loads(img_manifest(r), 0, NULL);
	json_t *v = json_object_get(json_object_get(json_array_get(json_object_get(m, "sections"),
								   (size_t)idx), "attrs"), key);
	int ret = json_is_integer(v) && json_integer_value(v) >= 0 ? 0 : -ENOENT;

	if (ret == 0)
		*out = (uint64_t)json_integer_value(v);
	json_decref(m);
	return ret;
}

/* A region that is not a distributed array can follow the job to another
 * number of ranks only if every old rank held the same bytes (an iteration
 * counter, a parameter): take old rank 0's and check the others agree. */
static int read_replicated(const char *ckpt, int64_t old, const struct api_var *v,
			   unsigned char *staged)
{
	size_t bytes = v->count * v->elem;
	unsigned char *other = malloc(bytes ? bytes : 1);
	char file[32];
	int ret = other ? 0 : err_set(-ENOMEM, "out of memory");

	for (int64_t q = 0; q < old && !ret; q++) {
		struct img_section_info si;
		struct img_reader *r = NULL;
		struct store_io *io = NULL;
		int idx;

		rank_file(file, sizeof(file), (int)q);
		ret = open_global(ckpt, file, &io, &r);
		idx = ret ? -1 : img_section_find(r, var_section(v->id));
		if (!ret && idx < 0)
			ret = err_set(-ENOENT, "%s: rank %" PRId64 "'s image has no id %d", ckpt, q, v->id);
		if (!ret && img_section_get(r, (unsigned)idx, &si) == 0 && si.size != bytes)
			ret = err_set(-EINVAL, "%s: rank %" PRId64 ": id %d holds %" PRIu64 " bytes in the "
				      "checkpoint, %zu protected now", ckpt, q, v->id, si.size, bytes);
		if (!ret && img_read(r, (unsigned)idx, 0, q ? other : staged, bytes) != (ssize_t)bytes)
			ret = err_set(-EIO, "%s: rank %" PRId64 "'s id %d: %s", ckpt, q, v->id,
				      err_msg()[0] ? err_msg() : "not the size protected now");
		if (!ret && q && memcmp(other, staged, bytes) != 0)
			ret = err_set(-EINVAL, "%s had %" PRId64 " ranks, this job %d: id %d differs "
				      "between old ranks 0 and %" PRId64 ", and it is not a distributed "
				      "array, so it cannot be redistributed", ckpt, old, api.size, v->id, q);
		img_close(&r);
		store_io_close(&io);
	}
	free(other);
	return ret;
}

/* Gather this rank's part of every distributed array from the images of a
 * GLOBAL checkpoint written by `old` ranks, into staged[] (one buffer per
 * protected region, in api.vars order), and the replicated regions whole.
 * Nothing touches protected memory. */
static int read_redistributed(const char *ckpt, int64_t old, int only_id, unsigned char **staged)
{
	char file[32];
	int ret = 0;

	for (size_t i = 0; i < api.nvars && !ret; i++) {
		const struct api_var *v = &api.vars[i];
		uint64_t covered = 0;

		if (only_id >= 0 && v->id != only_id)
			continue;
		staged[i] = malloc(v->count ? v->count * v->elem : 1);
		if (!staged[i])
			return err_set(-ENOMEM, "out of memory");
		if (!v->distributed) {
			ret = read_replicated(ckpt, old, v, staged[i]);
			continue;
		}
		for (int64_t q = 0; q < old && !ret; q++) {
			struct img_reader *r = NULL;
			struct store_io *io = NULL;
			uint64_t off = 0, cnt = 0, glob = 0, elem = 0, lo, hi;
			struct img_section_info si;
			int idx;

			rank_file(file, sizeof(file), (int)q);
			ret = open_global(ckpt, file, &io, &r);
			idx = ret ? -1 : img_section_find(r, var_section(v->id));
			if (!ret && (idx < 0 || section_attr(r, idx, "offset", &off) ||
				     section_attr(r, idx, "count", &cnt) ||
				     section_attr(r, idx, "global_count", &glob)))
				ret = err_set(-ENOENT, "%s: rank %" PRId64 "'s image has no distributed "
					      "id %d", ckpt, q, v->id);
			if (!ret && (section_attr(r, idx, "elem", &elem) || elem != v->elem ||
				     img_section_get(r, (unsigned)idx, &si) || si.size != cnt * elem))
				ret = err_set(-EINVAL, "%s: rank %" PRId64 ": id %d has %" PRIu64 "-byte "
					      "elements in the checkpoint, %zu-byte now", ckpt, q, v->id, elem,
					      v->elem);
			if (!ret && glob != v->global_count)
				ret = err_set(-EINVAL, "%s: id %d had %" PRIu64 " elements in all, now "
					      "%" PRIu64, ckpt, v->id, glob, v->global_count);
			lo = off > v->offset ? off : v->offset;
			hi = off + cnt < v->offset + v->count ? off + cnt : v->offset + v->count;
			if (!ret && lo < hi) {
				size_t len = (size_t)(hi - lo) * v->elem;

				if (img_read(r, (unsigned)idx, (lo - off) * v->elem,
					     staged[i] + (lo - v->offset) * v->elem, len) != (ssize_t)len)
					ret = err_set(-EIO, "%s: rank %" PRId64 "'s part of id %d: %s", ckpt, q,
						      v->id, err_msg());
				covered += hi - lo;
			}
			img_close(&r);
			store_io_close(&io);
		}
		if (!ret && covered != v->count)
			ret = err_set(-ENOENT, "%s: only %" PRIu64 " of this rank's %zu elements of id %d "
				      "are in the checkpoint", ckpt, covered, v->count, v->id);
	}
	return ret;
}

static int recover_redistributed(const char *ckpt, const struct ckpt_info *info, int only_id,
				 char msg[API_MSG_LEN], int *bad)
{
	unsigned char **staged = calloc(api.nvars ? api.nvars : 1, sizeof(*staged));
	int ret;

	if (info->level != STASIS_LEVEL_GLOBAL && !info->flush)
		ret = err_set(-EINVAL, "%s had %" PRId64 " ranks, this job %d: only a checkpoint in the "
			      "global tier can be redistributed", ckpt, info->ranks, api.size);
	else
		ret = staged ? read_redistributed(ckpt, info->ranks, only_id, staged)
			     : err_set(-ENOMEM, "out of memory");
	*bad = api_agree(ret == 0, msg);
	for (size_t i = 0; i < api.nvars; i++) {
		if (*bad == api.size && staged[i])
			memcpy(api.vars[i].ptr, staged[i], api.vars[i].count * api.vars[i].elem);
		if (staged)
			free(staged[i]);
	}
	free(staged);
	return ret;
}

static int load(struct img_reader *r, int only_id)
{
	for (size_t i = 0; i < api.nvars; i++) {
		const struct api_var *v = &api.vars[i];
		size_t bytes = v->count * v->elem;
		ssize_t n;

		if (only_id >= 0 && v->id != only_id)
			continue;
		n = img_read(r, (unsigned)img_section_find(r, var_section(v->id)), 0, v->ptr, bytes);
		if (n != (ssize_t)bytes)
			return n < 0 ? (int)n : err_set(-EIO, "id %d: short read", v->id);
	}
	return 0;
}

int api_ckpt_recover(int only_id)
{
	char names[API_MAX_CANDIDATES][64], msg[API_MSG_LEN] = "", first_why[API_MSG_LEN + 64] = "";
	struct ckpt_info info = { 0 };
	struct redun_found found = { 0 };
	int64_t n;
	int ret, bad, ok;

	ret = api_candidates(names, &n, 0);
	if (ret)
		return err_set(ret, "stasis_recover: cannot read the index of job %s", api.job);
	if (n == 0)
		return err_set(-ENOENT, "stasis_recover: job %s has no established checkpoint of "
			       "protected memory", api.job);
	for (int64_t c = 0; c < n; c++) {
		struct img_reader *r = NULL;

		ret = read_info(names[c], &info);
		ok = api_agree(ret == 0, msg) == api.size;
		if (ok && info.ranks != api.size) {
			ret = recover_redistributed(names[c], &info, only_id, msg, &bad);
			if (bad == api.size) {
				if (api.rank == 0)
					log_info("recovered from %s, written by %" PRId64 " ranks",
						 names[c], info.ranks);
				api.last_ckpt = api_now();
				info_free(&info);
				return 0;
			}
		} else if (ok) {
			ret = open_own(names[c], &info, only_id, &r);
			if (info.level == STASIS_LEVEL_PARTNER && info.ranks == api.size && ret)
				log_info("rank %d: %s; asking the partner copies", api.rank, err_msg());
			if (info.ranks == api.size)
				ret = recover_level(names[c], &info, ret == 0, only_id, &r, &found);
			bad = api_agree(ret == 0, msg);
		} else {
			bad = 0;
		}
		if (bad < api.size) {
			close_reader(&r);
			redun_found_drop(&found);
			if (!first_why[0])
				snprintf(first_why, sizeof(first_why), "rank %d: %s", bad, msg);
			if (api.rank == 0)
				log_warn("cannot restart from %s: rank %d: %s%s", names[c], bad, msg,
					 c + 1 < n ? "; trying an older checkpoint" : "");
			continue;
		}
		ret = load(r, only_id);
		close_reader(&r);
		redun_found_drop(&found);
		bad = api_agree(ret == 0, msg);
		if (bad < api.size)
			return err_set(-EIO, "stasis_recover: loading %s failed: rank %d: %s", names[c],
				       bad, msg);
		if (api.rank == 0)
			log_info("recovered from %s (%s level)", names[c], api_level_names[info.level]);
		api.last_ckpt = api_now();
		info_free(&info);
		return 0;
	}
	info_free(&info);
	return err_set(-ENOENT, "stasis_recover: no established checkpoint of job %s could be "
		       "recovered; the newest failed with %s", api.job, first_why);
}
