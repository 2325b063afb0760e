/* info.c - what the rest of libstasis shares: level names and the
 * configured level, agreement between ranks, the image writer's options,
 * checkpoint.json and the list of established checkpoints.
 *
 * Names: rank 0 begins every checkpoint in the global tier's job index, so
 * the name (ckpt-000042) is the job's; every tier then files that rank's
 * image, rank-00007.img, under the same name. A checkpoint is established
 * when rank 0 has written checkpoint.json (level, ranks, nodes) into the
 * global tier and sealed it there: restart reads only checkpoints sealed
 * there, then looks for each rank's image where the level put it.
 */
#include "api/api.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/log.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const api_level_names[] = {
	[STASIS_LEVEL_AUTO] = "auto", [STASIS_LEVEL_SINGLE] = "single",
	[STASIS_LEVEL_PARTNER] = "partner", [STASIS_LEVEL_RS] = "rs",
	[STASIS_LEVEL_GLOBAL] = "global",
};

int api_level_parse(const char *name)
{
	for (int l = STASIS_LEVEL_SINGLE; l <= STASIS_LEVEL_GLOBAL; l++)
		if (strcmp(api_level_names[l], name) == 0)
			return l;
	return -1;
}

int api_level_resolve(int level)
{
	uint64_t every = cfg_u64(CFG_GLOBAL_EVERY);

	if (level == STASIS_LEVEL_AUTO) {
		level = api_level_parse(cfg_str(CFG_LEVEL));
		if (every && (api.taken + 1) % every == 0)
			level = STASIS_LEVEL_GLOBAL;
	}
	if ((level == STASIS_LEVEL_PARTNER || level == STASIS_LEVEL_RS) && api.one_node) {
		if (!api.warned_partner)
			log_warn("level %s needs ranks on at least two nodes (all on %s): "
				 "degrading to single", api_level_names[level], api.node);
		api.warned_partner = 1;
		level = STASIS_LEVEL_SINGLE;
	}
	return level;
}

int api_agree(int ok, char msg[API_MSG_LEN])
{
	return redun_agree(&api.comm, ok, msg);
}

void api_writer_opts(struct img_writer_opts *opts)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned per_rank;

	img_writer_opts_default(opts);
	if (strcmp(cfg_origin(CFG_THREADS), "default") != 0)
		return;         /* the user chose */
	/* Worker threads help only with cores to spare: ranks sharing the
	 * node's cores write fastest on their own thread. */
	per_rank = cpus > 0 && api.node_ranks ? (unsigned)cpus / api.node_ranks : 1;
	opts->threads = per_rank > 1 ? (per_rank - 1 < opts->threads ? per_rank - 1 : opts->threads) : 0;
}

json_t *api_load_json(struct store *s, const char *ckpt, const char *name)
{
	struct store_file_info *files = NULL;
	char path[PATH_MAX], *text = NULL;
	json_error_t jerr;
	json_t *o = NULL;
	size_t count = 0, i;
	FILE *f = NULL;
	int ret;

	ret = store_ckpt_path(s, ckpt, name, path, sizeof(path));
	ret = ret ? ret : store_ckpt_files(s, ckpt, &files, &count);
	for (i = 0; ret == 0 && i < count && strcmp(files[i].name, name) != 0; i++)
		;
	if (ret == 0 && i == count)
		ret = err_set(-ENOENT, "%s: %s is not committed in it", ckpt, name);
	if (ret == 0 && files[i].size > (1u << 26))
		ret = err_set(-EFBIG, "%s: %s is implausibly large", ckpt, name);
	if (ret == 0) {
		text = malloc(files[i].size + 1);
		f = fopen(path, "rb");
		if (!text || !f || fread(text, 1, files[i].size, f) != files[i].size || fgetc(f) != EOF)
			ret = err_set(-EBADMSG, "%s: missing, unreadable or of the wrong size", path);
		else if (crc32c(0, text, files[i].size) != files[i].crc)
			ret = err_set(-EBADMSG, "%s: damaged (its CRC differs from the index)", path);
	}
	if (ret == 0) {
		o = json_loadb(text, files[i].size, 0, &jerr);
		if (!o)
			err_set(-EBADMSG, "%s: %s", path, jerr.text);
	}
	if (f)
		fclose(f);
	free(text);
	free(files);
	return o;
}

json_t *api_info_base(int level)
{
	json_t *o = json_object(), *nodes = json_array();

	for (int r = 0; r < api.size; r++)
		json_array_append_new(nodes, json_string(api.nodes[r]));
	json_object_set_new(o, "level", json_string(api_level_names[level]));
	json_object_set_new(o, "ranks", json_integer(api.size));
	json_object_set_new(o, "job", json_string(api.job));
	json_object_set_new(o, "nodes", nodes);
	return o;
}

int api_write_json(struct store_ckpt *c, const char *name, json_t *o)
{
	struct store_file *f = NULL;
	char *text = json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS);
	int ret;

	json_decref(o);
	if (!text)
		return err_set(-ENOMEM, "out of memory");
	ret = store_file_create(c, name, &f);
	ret = ret ? ret : store_file_write(f, text, strlen(text));
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	free(text);
	return ret;
}

/* Rank 0: is ckpt an output set (its checkpoint.json has "output")? One
 * whose checkpoint.json cannot be read counts as memory, so that recovery
 * tries it and says what is wrong with it. */
static int is_output_set(const char *ckpt)
{
	json_t *o = api_load_json(api.global, ckpt, API_INFO_FILE);
	int yes;

	yes = o && json_object_get(o, "output") != NULL;
	json_decref(o);
	return yes;
}

int api_candidates(char names[API_MAX_CANDIDATES][64], int64_t *n, int output)
{
	struct store_ckpt_info *list = NULL;
	size_t count = 0;
	int ret = 0;

	*n = 0;
	memset(names, 0, API_MAX_CANDIDATES * 64);
	if (api.rank == 0) {
		ret = store_list(api.global, &list, &count, NULL);
		for (size_t i = count; ret == 0 && i-- > 0 && *n < API_MAX_CANDIDATES;)
			if (list[i].state == STORE_COMPLETE && is_output_set(list[i].name) == output)
				snprintf(names[(*n)++], 64, "%s", list[i].name);
		free(list);
	}
	if (api_agree(ret == 0, (char[API_MSG_LEN]){ 0 }) < api.size)
		return -EIO;
	api.comm.ops->bcast(api.comm.h, n, sizeof(*n), 0);
	api.comm.ops->bcast(api.comm.h, names, API_MAX_CANDIDATES * 64, 0);
	return 0;
}

int api_ckpt_latest(char *name, size_t len)
{
	char names[API_MAX_CANDIDATES][64];
	int64_t n;
	int ret = api_candidates(names, &n, 0);

	if (ret)
		return ret;
	snprintf(name, len, "%s", n ? names[0] : "");
	return n > 0;
}

