/* files.c - routed files: checkpoints of codes that do their own I/O.
 *
 * The SCR model. stasis_start_output() begins a checkpoint (named by rank 0
 * in the job's global index, like every checkpoint); stasis_route_file()
 * tells each rank where to write each of its files: <name>.tmp in the
 * checkpoint's directory of its node's cache (or of the global tier when the
 * level is global); stasis_complete_output() commits them through the store
 * (read back for size and CRC, fsync, rename, FILE record), files each rank's
 * list (files-<rank>.json: original path -> stored name) and establishes the
 * set with checkpoint.json {"output": <label>, ...}. On restart,
 * stasis_start_restart() finds the newest established output set whose lists
 * every rank can read, and stasis_route_file() gives the stored file for a
 * path after checking its size and CRC against the index.
 *
 * Output sets are kept at the single or global level for now: partner and rs
 * copies of routed files are not made (the level degrades with a warning).
 */
#include "api/api.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/log.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum mode { IDLE, OUTPUT, RESTART };

struct routed {
	char *path;             /* as the application names it */
	char *name;             /* as stored: f<rank>-<path with / as %> */
};

static struct {
	enum mode mode;
	int level;
	char ckpt[64];
	char label[API_NAME_LEN];
	struct store_ckpt *gc, *c;      /* global entry (rank 0), where files go */
	struct store *where;
	struct routed *files;
	size_t n;
	char failed[API_MAX_CANDIDATES][64];    /* restarts that failed in this run */
	int nfailed;
} io;

static void forget_files(void)
{
	for (size_t i = 0; i < io.n; i++) {
		free(io.files[i].path);
		free(io.files[i].name);
	}
	free(io.files);
	io.files = NULL;
	io.n = 0;
}

static void reset(void)
{
	forget_files();
	store_ckpt_free(&io.gc);
	store_ckpt_free(&io.c);
	io.mode = IDLE;
	io.ckpt[0] = '\0';
}

static int require(const char *fn, enum mode mode)
{
	static const char *const need[] = {
		[IDLE] = "a previous output or restart set is still open; complete it first",
		[OUTPUT] = "call stasis_start_output first",
		[RESTART] = "call stasis_start_restart first",
	};

	err_clear();
	if (!api.initialized)
		return api_fail(err_set(-EINVAL, "%s: call stasis_init first", fn));
	if (io.mode != mode)
		return api_fail(err_set(-EINVAL, "%s: %s", fn, need[mode]));
	return 0;
}

static int add_file(const char *path, const char *name)
{
	struct routed *grown = realloc(io.files, (io.n + 1) * sizeof(*grown));

	if (!grown)
		return err_set(-ENOMEM, "out of memory");
	io.files = grown;
	io.files[io.n].path = strdup(path);
	io.files[io.n].name = strdup(name);
	if (!io.files[io.n].path || !io.files[io.n].name) {
		free(io.files[io.n].path);
		free(io.files[io.n].name);
		return err_set(-ENOMEM, "out of memory");
	}
	io.n++;
	return 0;
}

static const struct routed *find_file(const char *path)
{
	for (size_t i = 0; i < io.n; i++)
		if (strcmp(io.files[i].path, path) == 0)
			return &io.files[i];
	return NULL;
}

/* ---- output ---- */

int stasis_start_output(const char *label)
{
	char msg[API_MSG_LEN] = "";
	int ret = require("stasis_start_output", IDLE), bad;

	if (ret)
		return ret;
	if (!label || !*label || strlen(label) >= API_NAME_LEN)
		return api_fail(err_set(-EINVAL, "stasis_start_output: the name must be 1 to %d bytes",
					API_NAME_LEN - 1));
	{
		int64_t lv = api_level_resolve(STASIS_LEVEL_AUTO);

		api.comm.ops->bcast(api.comm.h, &lv, sizeof(lv), 0);     /* rank 0's is everyone's */
		io.level = (int)lv;
	}
	if (io.level <= 0)
		return api_fail(io.level ? io.level : -EINVAL);
	if (io.level == STASIS_LEVEL_PARTNER || io.level == STASIS_LEVEL_RS) {
		log_warn("routed files are kept at the single level; %s copies are not made yet",
			 api_level_names[io.level]);
		io.level = STASIS_LEVEL_SINGLE;
	}
	io.where = io.level == STASIS_LEVEL_GLOBAL ? api.global : api.local;
	ret = 0;
	if (api.rank == 0) {
		ret = store_ckpt_begin(api.global, &io.gc);
		if (ret == 0)
			snprintf(io.ckpt, sizeof(io.ckpt), "%s", store_ckpt_name(io.gc));
	}
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		reset();
		return api_fail(err_set(-EIO, "stasis_start_output: %s", msg));
	}
	api.comm.ops->bcast(api.comm.h, io.ckpt, sizeof(io.ckpt), 0);
	if (io.where == api.global)
		ret = api.rank == 0 ? 0 : store_ckpt_join_begun(api.global, io.ckpt, &io.c);
	else
		ret = store_ckpt_begin_named(api.local, io.ckpt, &io.c);
	bad = api_agree(ret == 0, msg);
	if (bad < api.size) {
		if (api.rank == 0)
			store_ckpt_abort(io.gc, msg);
		reset();
		return api_fail(err_set(-EIO, "stasis_start_output: rank %d: %s", bad, msg));
	}
	snprintf(io.label, sizeof(io.label), "%s", label);
	io.mode = OUTPUT;
	return 0;
}

static struct store_ckpt *files_ckpt(void)
{
	return io.c ? io.c : io.gc;
}

static int route_output(const char *path, char *routed, size_t len)
{
	char name[256], full[PATH_MAX];
	int n = snprintf(name, sizeof(name), "f%d-", api.rank);

	for (const char *p = path; *p && n < (int)sizeof(name) - 4; p++)
		name[n++] = *p == '/' ? '%' : (*p < 0x21 || *p > 0x7e) ? '_' : *p;
	name[n] = '\0';
	if (strlen(path) + 8 > sizeof(name) - 4)
		return err_set(-ENAMETOOLONG, "stasis_route_file: %s: path too long to route", path);
	if (find_file(path))
		return err_set(-EEXIST, "stasis_route_file: %s is already routed in this output set",
			       path);
	for (size_t i = 0; i < io.n; i++)
		if (strcmp(io.files[i].name, name) == 0)
			return err_set(-EEXIST, "stasis_route_file: %s and %s would be stored under one "
				       "name; rename one of them", path, io.files[i].path);
	if (store_ckpt_path(io.where, io.ckpt, name, full, sizeof(full)) ||
	    snprintf(routed, len, "%s.tmp", full) >= (int)len)
		return err_set(-ENAMETOOLONG, "stasis_route_file: %s: the routed path does not fit "
			       "in %zu bytes", path, len);
	return add_file(path, name);
}

static int write_list(void)
{
	json_t *o = json_object();
	char name[64];

	for (size_t i = 0; i < io.n; i++)
		json_object_set_new(o, io.files[i].path, json_string(io.files[i].name));
	snprintf(name, sizeof(name), "files-%05d.json", api.rank);
	return api_write_json(files_ckpt(), name, o);
}

static int write_output_info(void)
{
	json_t *o = api_info_base(io.level);

	json_object_set_new(o, "output", json_string(io.label));
	return api_write_json(io.gc, "checkpoint.json", o);
}

int stasis_complete_output(int valid)
{
	char msg[API_MSG_LEN] = "";
	int64_t count, *counts = NULL, valid_all = valid != 0;
	unsigned on_node = 0, total = 0;
	int ret = require("stasis_complete_output", OUTPUT), bad;

	if (ret)
		return ret;
	for (size_t i = 0; ret == 0 && i < io.n; i++) {
		ret = store_file_adopt(files_ckpt(), io.files[i].name);
		if (ret == -ENOENT)
			ret = err_set(ret, "routed file %s was not written", io.files[i].path);
	}
	ret = ret ? ret : write_list();
	api.comm.ops->allreduce_i64(api.comm.h, &valid_all, 1, REDUN_MIN);
	bad = api_agree(ret == 0 && valid, msg);
	counts = calloc((size_t)api.size, sizeof(*counts));
	count = (int64_t)io.n + 1;
	if (counts)
		api.comm.ops->allgather(api.comm.h, &count, sizeof(count), counts);
	for (int r = 0; counts && r < api.size; r++) {
		total += (unsigned)counts[r];
		on_node += strcmp(api.nodes[r], api.node) == 0 ? (unsigned)counts[r] : 0;
	}
	free(counts);
	if (bad < api.size) {
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "%s",
			 valid_all ? "" : " (a rank declared its output invalid)");
		goto fail;
	}
	ret = 0;
	if (io.where == api.local && api.node_leader)
		ret = store_ckpt_commit(io.c, on_node);
	bad = api_agree(ret == 0, msg);
	if (bad < api.size)
		goto fail;
	if (api.rank == 0) {
		ret = write_output_info();
		ret = ret ? ret : store_ckpt_commit(io.gc, io.where == api.global ? total + 1 : 1);
	}
	bad = api_agree(ret == 0, msg);
	if (bad < api.size)
		goto fail;
	reset();
	return 0;

fail:
	if (io.where == api.local && api.node_leader && io.c)
		store_ckpt_abort(io.c, msg);
	if (api.rank == 0 && io.gc)
		store_ckpt_abort(io.gc, msg);
	api.comm.ops->barrier(api.comm.h);      /* FAILED recorded before any rank returns */
	ret = err_set(valid_all ? -EIO : -ECANCELED, "output set %s (%s) failed: rank %d: %s",
		      io.label, io.ckpt, bad, msg[0] ? msg : "invalid");
	reset();
	return api_fail(ret);
}

/* ---- restart ---- */

static int failed_before(const char *ckpt)
{
	for (int i = 0; i < io.nfailed; i++)
		if (strcmp(io.failed[i], ckpt) == 0)
			return 1;
	return 0;
}

/* Rank 0: is ckpt an output set this job can use? Its label and level. */
static int output_info(const char *ckpt, char *label, int64_t *level)
{
	int64_t ranks;
	json_t *o = api_load_json(api.global, ckpt, "checkpoint.json"), *out;
	int is_output;

	out = o ? json_object_get(o, "output") : NULL;
	is_output = json_is_string(out);
	if (is_output) {
		snprintf(label, API_NAME_LEN, "%s", json_string_value(out));
		*level = api_level_parse(json_string_value(json_object_get(o, "level")) ?: "");
		ranks = json_integer_value(json_object_get(o, "ranks"));
		/* each rank's files are its own: another number of ranks would
		 * leave some unread without a word */
		if (ranks != api.size) {
			log_warn("output set %s (%s) was written by %" PRId64 " ranks, this job has %d; "
				 "skipped", label, ckpt, ranks, api.size);
			is_output = 0;
		}
	}
	json_decref(o);         /* out dies with o */
	return is_output && *level > 0;
}

static int read_list(void)
{
	char name[64], path[PATH_MAX];
	const char *key;
	json_t *o, *v;
	int ret = 0;

	snprintf(name, sizeof(name), "files-%05d.json", api.rank);
	if (store_ckpt_path(io.where, io.ckpt, name, path, sizeof(path)))
		return err_set(-ENAMETOOLONG, "path too long");
	o = api_load_json(io.where, io.ckpt, name);
	if (!o) {
		char why[256];

		snprintf(why, sizeof(why), "%s", err_msg());
		return err_set(-ENOENT, "%s: rank %d's file list is not usable here (%s)", io.ckpt,
			       api.rank, why);
	}
	json_object_foreach(o, key, v) {
		if (!json_is_string(v) || strchr(json_string_value(v), '/'))
			ret = err_set(-EBADMSG, "%s: damaged file list", path);
		ret = ret ? ret : add_file(key, json_string_value(v));
		if (ret)
			break;
	}
	json_decref(o);
	return ret;
}

int stasis_start_restart(char *label, size_t len)
{
	char names[API_MAX_CANDIDATES][64], msg[API_MSG_LEN] = "";
	int64_t n = 0, level = 0;
	int ret = require("stasis_start_restart", IDLE), bad;

	if (ret)
		return ret;
	if (!label || !len)
		return api_fail(err_set(-EINVAL, "stasis_start_restart: no buffer for the name"));
	ret = api_candidates(names, &n, 1);
	if (ret)
		return api_fail(ret);
	for (int64_t c = 0; c < n; c++) {
		int64_t is_output = 0;

		if (failed_before(names[c]))
			continue;
		if (api.rank == 0)
			is_output = output_info(names[c], io.label, &level);
		api.comm.ops->bcast(api.comm.h, &is_output, sizeof(is_output), 0);
		if (!is_output)
			continue;
		api.comm.ops->bcast(api.comm.h, &level, sizeof(level), 0);
		api.comm.ops->bcast(api.comm.h, io.label, sizeof(io.label), 0);
		snprintf(io.ckpt, sizeof(io.ckpt), "%.63s", names[c]);
		io.level = (int)level;
		io.where = level == STASIS_LEVEL_GLOBAL ? api.global : api.local;
		forget_files();
		ret = read_list();
		bad = api_agree(ret == 0, msg);
		if (bad < api.size) {
			if (api.rank == 0)
				log_warn("cannot restart from output set %s: rank %d: %s", names[c], bad, msg);
			continue;
		}
		if (snprintf(label, len, "%s", io.label) >= (int)len) {
			forget_files();
			return api_fail(err_set(-ENAMETOOLONG, "stasis_start_restart: the name %s does "
						"not fit in %zu bytes", io.label, len));
		}
		io.mode = RESTART;
		return 0;
	}
	forget_files();
	return api_fail(err_set(-ENOENT, "stasis_start_restart: job %s has no usable output set",
				api.job));
}

/* The stored copy of path: present, and the size and CRC the index has. */
static int route_restart(const char *path, char *routed, size_t len)
{
	const struct routed *r = find_file(path);
	struct store_file_info *files = NULL;
	char full[PATH_MAX], *buf = NULL;
	size_t count = 0;
	uint64_t size = 0;
	uint32_t crc = 0;
	ssize_t got;
	int fd = -1, ret;

	if (!r)
		return err_set(-ENOENT, "stasis_route_file: %s is not in output set %s (%s) of rank %d",
			       path, io.label, io.ckpt, api.rank);
	ret = store_ckpt_path(io.where, io.ckpt, r->name, full, sizeof(full));
	ret = ret ? ret : store_ckpt_files(io.where, io.ckpt, &files, &count);
	for (size_t i = 0; ret == 0 && i < count; i++) {
		if (strcmp(files[i].name, r->name) != 0)
			continue;
		buf = malloc(1 << 20);
		fd = open(full, O_RDONLY | O_CLOEXEC);
		if (!buf || fd < 0) {
			ret = err_set(-ENOENT, "%s: missing", full);
			break;
		}
		while ((got = read(fd, buf, 1 << 20)) > 0) {
			crc = crc32c(crc, buf, (size_t)got);
			size += (uint64_t)got;
		}
		if (got < 0 || size != files[i].size || crc != files[i].crc)
			ret = err_set(-EBADMSG, "%s: damaged (%llu bytes, the index says %llu, or its "
				      "CRC differs)", full, (unsigned long long)size,
				      (unsigned long long)files[i].size);
		count = 0;      /* found */
		goto done;
	}
	if (ret == 0)
		ret = err_set(-ENOENT, "%s: not committed in %s", r->name, io.ckpt);
done:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(files);
	if (ret == 0 && snprintf(routed, len, "%s", full) >= (int)len)
		ret = err_set(-ENAMETOOLONG, "stasis_route_file: the routed path does not fit in %zu bytes",
			      len);
	return ret;
}

int stasis_route_file(const char *path, char *routed, size_t len)
{
	int ret;

	err_clear();
	if (!api.initialized)
		return api_fail(err_set(-EINVAL, "stasis_route_file: call stasis_init first"));
	if (!path || !*path || !routed || !len)
		return api_fail(err_set(-EINVAL, "stasis_route_file: NULL or empty argument"));
	if (io.mode == IDLE)
		return api_fail(err_set(-EINVAL, "stasis_route_file: call stasis_start_output or "
					"stasis_start_restart first"));
	ret = io.mode == OUTPUT ? route_output(path, routed, len) : route_restart(path, routed, len);
	return ret ? api_fail(ret) : 0;
}

int stasis_complete_restart(int valid)
{
	char msg[API_MSG_LEN] = "";
	int ret = require("stasis_complete_restart", RESTART), bad;

	if (ret)
		return ret;
	bad = api_agree(valid != 0, msg);
	if (bad < api.size && io.nfailed < API_MAX_CANDIDATES)
		snprintf(io.failed[io.nfailed++], sizeof(io.failed[0]), "%s", io.ckpt);
	ret = bad < api.size ? err_set(-ECANCELED, "restart from output set %s (%s) declared "
				       "invalid by rank %d; the next stasis_start_restart tries an "
				       "older one", io.label, io.ckpt, bad) : 0;
	reset();
	return ret ? api_fail(ret) : 0;
}

void api_files_release(void)
{
	reset();
}
