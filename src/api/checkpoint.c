/* checkpoint.c - write application checkpoints at a level; recover them.
 *
 * Names: rank 0 begins every checkpoint in the global tier's job index, so
 * the name (ckpt-000042) is the job's; every tier then files that rank's
 * image, rank-00007.img, under the same name. A checkpoint is established
 * when rank 0 has written checkpoint.json (level, ranks, nodes) into the
 * global tier and sealed it there: restart reads only checkpoints sealed
 * there, then looks for each rank's image where the level put it.
 *
 * Every step that can fail on one rank is followed by an agreement
 * (allreduce), so all ranks take the same branch and report the same error.
 */
#include "api/api.h"
#include "api/rs.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
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
#include <sys/stat.h>
#include <unistd.h>

#define INFO_FILE "checkpoint.json"

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

/* All ranks learn the lowest rank whose ok is 0 (api.size if none) and that
 * rank's message. */
int api_agree(int ok, char msg[API_MSG_LEN])
{
	int64_t first = ok ? api.size : api.rank;
	char mine[API_MSG_LEN];

	snprintf(mine, sizeof(mine), "%s", ok ? "" : err_msg());
	if (api_allreduce(&first, 1, API_MIN)) {
		/* the communicator itself failed (a progress link to a dead rank) */
		snprintf(msg, API_MSG_LEN, "%s", err_msg());
		return 0;
	}
	if (first < api.size) {
		if (api.rank == first)
			memcpy(msg, mine, API_MSG_LEN);
		api_bcast(msg, API_MSG_LEN, (int)first);
	}
	return (int)first;
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

static void rank_file(char *buf, size_t len, int rank)
{
	snprintf(buf, len, "rank-%05d.img", rank);
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
	return api_write_json(gc, INFO_FILE, o);
}

/* ---- moving images between ranks ---- */

#define XFER_PIECE (8u << 20)
#define XFER_FAILED UINT64_MAX  /* size sent by a rank that cannot send its file */

static void partner_file(char *buf, size_t len, int rank)
{
	snprintf(buf, len, "partner-%05d.img", rank);
}

/* One buffer for every transfer: allocated once, so a transfer never fails
 * half-way for want of memory (a receiver must post pieces of the sender's
 * size, or MPI truncates). Transfers run on one thread at a time: the
 * progress thread's upgrades, or the application's recovery, which first
 * waits for every upgrade (stasis_recover). */
static char xfer_buf[XFER_PIECE];

/* Send a whole file to dest: its size, then pieces. A sender that cannot
 * read it says so (XFER_FAILED), so the receiver never waits forever. */
static int send_file(const char *path, int dest)
{
	uint64_t size = XFER_FAILED;
	FILE *f = fopen(path, "rb");
	int ret = 0;

	if (f && fseek(f, 0, SEEK_END) == 0) {
		long end = ftell(f);

		if (end >= 0 && fseek(f, 0, SEEK_SET) == 0)
			size = (uint64_t)end;
	}
	if (size == XFER_FAILED)
		ret = err_set(f ? -EIO : -errno, "%s: cannot read it to send to rank %d", path, dest);
	if (api_send(&size, sizeof(size), dest) && !ret)
		ret = -EIO;
	for (uint64_t off = 0; size != XFER_FAILED && off < size;) {
		size_t n = size - off < XFER_PIECE ? (size_t)(size - off) : XFER_PIECE;

		/* a short read still sends n bytes, which the image CRCs reject */
		if (fread(xfer_buf, 1, n, f) != n && !ret)
			ret = err_set(-EIO, "%s: short read while sending to rank %d", path, dest);
		if (api_send(xfer_buf, n, dest) && !ret)
			ret = -EIO;
		off += n;
	}
	if (f)
		fclose(f);
	return ret;
}

/* Receive a file sent by send_file; each piece goes to put(ctx, ...) unless
 * the receiver already failed (ret): the whole stream is always drained, so
 * the sender never blocks on a receiver that gave up. */
static int recv_file(int src, int (*put)(void *ctx, const void *buf, size_t len), void *ctx,
		     int ret)
{
	uint64_t size = 0;

	if (api_recv(&size, sizeof(size), src))
		return ret ? ret : -EIO;
	if (size == XFER_FAILED)
		return ret ? ret : err_set(-EIO, "rank %d could not send its image", src);
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < XFER_PIECE ? (size_t)(size - off) : XFER_PIECE;

		if (api_recv(xfer_buf, n, src))
			return ret ? ret : -EIO;   /* the communicator failed: nothing more comes */
		if (!ret)
			ret = put(ctx, xfer_buf, n);
		off += n;
	}
	return ret;
}

static int put_fd(void *ctx, const void *buf, size_t len)
{
	FILE *f = ctx;

	return fwrite(buf, 1, len, f) == len ? 0 : err_set(-EIO, "cannot write a received image");
}

static char xfer_back[XFER_PIECE];      /* what a paired exchange receives */

/* When every rank holds exactly one copy (the partners form a permutation,
 * as with equal ranks per node), all copies move at once: each rank sends
 * its image to its partner while receiving the one it keeps. */
static int partner_pairwise(struct store_ckpt *lc, const char *ckpt, int from)
{
	char path[PATH_MAX], file[32];
	uint64_t mine = XFER_FAILED, theirs = 0;
	struct store_file *f = NULL;
	FILE *in = NULL;
	int ret, put = 0;

	rank_file(file, sizeof(file), api.rank);
	ret = store_ckpt_path(api.local, ckpt, file, path, sizeof(path));
	in = ret ? NULL : fopen(path, "rb");
	if (in && fseeko(in, 0, SEEK_END) == 0) {
		off_t end = ftello(in);

		if (end >= 0 && fseeko(in, 0, SEEK_SET) == 0)
			mine = (uint64_t)end;
	}
	if (mine == XFER_FAILED)
		ret = ret ? ret : err_set(-EIO, "%s: cannot read it to send to rank %d", path,
					   api.partner[api.rank]);
	if (api_sendrecv(&mine, sizeof(mine), api.partner[api.rank], &theirs,
			       sizeof(theirs), from)) {
		ret = ret ? ret : -EIO;
		goto out;
	}
	partner_file(file, sizeof(file), from);
	put = store_file_create(lc, file, &f);
	if (theirs == XFER_FAILED)
		put = put ? put : err_set(-EIO, "rank %d could not send its image", from);
	for (uint64_t so = 0, ro = 0; (mine != XFER_FAILED && so < mine) ||
				      (theirs != XFER_FAILED && ro < theirs);) {
		size_t sn = mine == XFER_FAILED || so >= mine ? 0 :
			    mine - so < XFER_PIECE ? (size_t)(mine - so) : XFER_PIECE;
		size_t rn = theirs == XFER_FAILED || ro >= theirs ? 0 :
			    theirs - ro < XFER_PIECE ? (size_t)(theirs - ro) : XFER_PIECE;

		if (sn && fread(xfer_buf, 1, sn, in) != sn && !ret)
			ret = err_set(-EIO, "%s: short read", path);
		if (api_sendrecv(xfer_buf, sn, api.partner[api.rank], xfer_back, rn, from)) {
			ret = ret ? ret : -EIO;
			goto out;
		}
		if (rn && !put)
			put = store_file_write(f, xfer_back, rn);
		so += sn;
		ro += rn;
	}
	put = put ? put : store_file_commit(f);
out:
	if (in)
		fclose(in);
	store_file_free(&f);    /* an uncommitted copy's *.tmp goes with it */
	return ret ? ret : put;
}

/* PARTNER: every rank's image goes to its partner (on another node), which
 * files it as partner-<rank>.img in its node's cache. The transfers run in
 * one global order, so blocking send and receive always pair up. */
static int partner_exchange(struct store_ckpt *lc, const char *ckpt)
{
	char path[PATH_MAX], file[32];
	int ret = 0;

	if (api.partner_from >= 0)      /* the same decision on every rank (init) */
		return partner_pairwise(lc, ckpt, api.partner_from);

	for (int s = 0; s < api.size; s++) {
		int p = api.partner[s];
		struct store_file *f = NULL;
		int r = 0;

		if (p < 0)
			continue;
		if (api.rank == s) {
			rank_file(file, sizeof(file), s);
			r = store_ckpt_path(api.local, ckpt, file, path, sizeof(path));
			r = r ? r : send_file(path, p);
		} else if (api.rank == p) {
			partner_file(file, sizeof(file), s);
			r = store_file_create(lc, file, &f);
			r = recv_file(s, store_file_write, f, r);
			r = r ? r : store_file_commit(f);
			store_file_free(&f);
		}
		ret = ret ? ret : r;
	}
	return ret;
}

/* GLOBAL, or global_flush: this rank's image, from its node's cache into the
 * global tier's annex of the checkpoint. */
static int flush_image(const char *ckpt)
{
	char file[32], src[PATH_MAX];
	struct store_ckpt *gc = NULL;
	struct store_file *f = NULL;
	char *buf = malloc(XFER_PIECE);
	FILE *in = NULL;
	size_t n;
	int ret;

	rank_file(file, sizeof(file), api.rank);
	ret = buf ? 0 : err_set(-ENOMEM, "out of memory");
	ret = ret ? ret : store_ckpt_path(api.local, ckpt, file, src, sizeof(src));
	if (!ret && !(in = fopen(src, "rb")))
		ret = err_set(-errno, "%s: cannot read it to copy to the global tier: %s", src,
			      strerror(errno));
	ret = ret ? ret : store_ckpt_annex(api.global, ckpt, &gc);
	ret = ret ? ret : store_file_create(gc, file, &f);
	while (!ret && (n = fread(buf, 1, XFER_PIECE, in)) > 0)
		ret = store_file_write(f, buf, n);
	if (!ret && ferror(in))
		ret = err_set(-EIO, "%s: read error while copying to the global tier", src);
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	store_ckpt_free(&gc);
	if (in)
		fclose(in);
	free(buf);
	return ret;
}

static void add_reason(char *reason, size_t len, const char *what, int bad, const char *msg)
{
	size_t used = strlen(reason);

	snprintf(reason + used, len - used, "%s%s: rank %d: %s", used ? "; " : "", what, bad, msg);
}

/* Node leaders keep their cache to cache_keep checkpoints. */
static void prune_cache(void)
{
	if (api.node_leader && store_prune(api.local, (unsigned)cfg_u64(CFG_CACHE_KEEP), NULL))
		log_warn("node %s: pruning the local cache: %s", api.node, err_msg());
}

int api_upgrade_run(const struct api_upgrade *u)
{
	char msg[API_MSG_LEN] = "", reached[32] = "single", reason[2 * API_MSG_LEN] = "";
	struct store_ckpt *lc = NULL;
	int ret = 0, bad, level = u->level, begin;

	if (level == STASIS_LEVEL_SINGLE && !u->flush) {
		prune_cache();
		return 0;
	}
	begin = FAULT(API_UPGRADE_BEGIN);

	/* a rank that fails still takes part in every agreement below: the
	 * progress threads must stay in step */
	if (level == STASIS_LEVEL_PARTNER || level == STASIS_LEVEL_RS) {
		ret = begin ? begin : store_ckpt_annex(api.local, u->name, &lc);
		/* the exchanges pair every send with a receive: all go, or none */
		bad = api_agree(ret == 0, msg);
		if (bad == api.size && level == STASIS_LEVEL_PARTNER) {
			ret = partner_exchange(lc, u->name);
		} else if (bad == api.size) {
			char file[32], path[PATH_MAX];
			int degraded = 0;

			rank_file(file, sizeof(file), api.rank);
			store_ckpt_path(api.local, u->name, file, path, sizeof(path));
			ret = api_rs_encode(lc, u->name, path, u->sizes, &degraded);
			if (degraded && !api.warned_rs)
				log_warn("rank %d has no rs group (one node): its data is only in "
					 "the node's cache", api.rank);
			api.warned_rs |= degraded;
		}
		if (bad == api.size)
			bad = api_agree(ret == 0, msg);
		if (bad < api.size)
			add_reason(reason, sizeof(reason), api_level_names[level], bad, msg);
		else
			snprintf(reached, sizeof(reached), "%s", api_level_names[level]);
		store_ckpt_free(&lc);
	}
	if (level == STASIS_LEVEL_GLOBAL || u->flush) {
		ret = begin ? begin : flush_image(u->name);
		bad = api_agree(ret == 0, msg);
		if (bad < api.size)
			add_reason(reason, sizeof(reason), "global", bad, msg);
		else if (strcmp(reached, "single") == 0)
			snprintf(reached, sizeof(reached), "global");
		else
			strcat(reached, "+global");
	}
	/* recorded in the job's index: `stasis ls` shows it, and a restart
	 * knows what to expect (restart still checks every copy it uses) */
	if (api.rank == 0) {
		ret = FAULT(API_UPGRADE_LEVEL);
		ret = ret ? ret : store_ckpt_level(api.global, u->name, reached, reason[0] ? reason : NULL);
		if (ret)
			log_warn("checkpoint %s: cannot record its level: %s", u->name, err_msg());
		if (reason[0])
			log_warn("checkpoint %s stays established at level %s: %s", u->name, reached, reason);
	}
	/* older checkpoints leave the cache only once this one has all its
	 * copies: never is a node's loss unrecoverable for want of an upgrade */
	if (!reason[0])
		prune_cache();
	log_debug("rank %d: checkpoint %s: level %s reached", api.rank, u->name, reached);
	if (reason[0])
		return err_set(-EIO, "checkpoint %s stays established at level %s: %s", u->name, reached,
			       reason);
	return 0;
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
	api_barrier();
	return err_set(valid_all ? -EIO : -ECANCELED, "checkpoint %s failed: %s", name, reason);
}

/* Upgrades in flight when a new checkpoint begins: the cache keeps
 * cache_keep checkpoints, and the oldest of them must have all its copies
 * (api_upgrade_run prunes only after an upgrade). */
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
	api_progress_wait(room(), 0);
	level = api_level_resolve(level);
	/* rank 0's level and flush are everyone's, whatever each rank's
	 * configuration says: ranks on different levels would wait in
	 * different calls */
	{
		int64_t lv[2] = { level, flush };

		api_bcast(lv, sizeof(lv), 0);
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
		api_barrier();
		store_ckpt_free(&gc);
		free(sizes);
		free(u);
		return err_set(level > 0 ? -EIO : level, "stasis_checkpoint: %s", msg);
	}
	api_bcast(name, sizeof(name), 0);

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
		ret = api_allgather(&mysize, sizeof(mysize), sizes);
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
		api_barrier();      /* the records first, as in fail_ckpt */
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
	if (api.async) {
		api_progress_queue(u);
		ret = 0;
	} else {
		ret = api_upgrade_run(u);
		free(u->sizes);
		free(u);
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

/* ---- restart ---- */

/* Established checkpoints, newest first (rank 0 reads, everyone learns). */
/* Rank 0: is ckpt an output set (its checkpoint.json has "output")? One
 * whose checkpoint.json cannot be read counts as memory, so that recovery
 * tries it and says what is wrong with it. */
static int is_output_set(const char *ckpt)
{
	json_t *o = api_load_json(api.global, ckpt, INFO_FILE);
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
	api_bcast(n, sizeof(*n), 0);
	api_bcast(names, API_MAX_CANDIDATES * 64, 0);
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
		o = api_load_json(api.global, ckpt, INFO_FILE);
		if (!o)
			ret = -EBADMSG;
		snprintf(path, sizeof(path), "%s/%s", ckpt, INFO_FILE);
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
	api_bcast(info, 6 * sizeof(int64_t), 0);
	if (info->sizes && info->nodes && info->ranks == api.size) {
		api_bcast(info->sizes, (size_t)api.size * sizeof(int64_t), 0);
		api_bcast(info->nodes, (size_t)api.size * API_NAME_LEN, 0);
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

static int open_verified(const char *ckpt, const char *path, int only_id, struct img_reader **r)
{
	int ret = img_open(path, r);

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
	return ret;
}

/* This rank's image in one tier. */
static int open_in(struct store *s, const char *ckpt, int only_id, struct img_reader **r)
{
	char file[32], path[PATH_MAX];
	int ret;

	rank_file(file, sizeof(file), api.rank);
	ret = store_ckpt_path(s, ckpt, file, path, sizeof(path));
	if (ret == 0 && access(path, F_OK) != 0)
		return err_set(-ENOENT, "%s: no copy of rank %d's data in %s", ckpt, api.rank,
			       s == api.global ? "the global directory" : "this node's cache");
	return ret ? ret : open_verified(ckpt, path, only_id, r);
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

/* ---- copies on other nodes ----
 *
 * A restart need not put every rank back on the node it ran on: a spare
 * replaces a lost node, and a launcher given the nodes in another order
 * (srun in a new allocation, mpirun --host) shifts ranks by one node or
 * more. A rank's files then sit in the cache of a node it left: the node
 * leaders there offer them. */

/* Rank s's partner copy in this node's cache, or its own image when s ran
 * on this node before and not now. */
static int held_copy(const char *ckpt, int s, char *path, size_t len)
{
	char file[32];

	partner_file(file, sizeof(file), s);
	if (store_ckpt_path(api.local, ckpt, file, path, len) == 0 && access(path, R_OK) == 0)
		return 1;
	rank_file(file, sizeof(file), s);
	return strcmp(api.nodes[s], api.node) != 0 &&
	       store_ckpt_path(api.local, ckpt, file, path, len) == 0 && access(path, R_OK) == 0;
}

/* A file of rank s's left in this node's cache when s ran here and runs
 * elsewhere now. */
static int held_moved(const char *ckpt, const char *file, int s, char *path, size_t len)
{
	return strcmp(api.nodes[s], api.node) != 0 &&
	       store_ckpt_path(api.local, ckpt, file, path, len) == 0 && access(path, R_OK) == 0;
}

static int held_moved_image(const char *ckpt, int s, char *path, size_t len)
{
	char file[32];

	rank_file(file, sizeof(file), s);
	return held_moved(ckpt, file, s, path, len);
}

static int held_moved_rs(const char *ckpt, int s, char *path, size_t len)
{
	char file[32];

	snprintf(file, sizeof(file), "rs-%05d.img", s);
	return held_moved(ckpt, file, s, path, len);
}

static char fetched[PATH_MAX];  /* a copy received from another rank, removed after use */
static char fetched_rs[PATH_MAX];       /* the same for a moved rs parity file */

static void drop_fetched(void)
{
	if (fetched[0])
		unlink(fetched);
	if (fetched_rs[0])
		unlink(fetched_rs);
	fetched[0] = fetched_rs[0] = '\0';
}

/* Collective: every rank that needs one gets the file of its that a node's
 * cache holds (held(ckpt, s, ...), asked of each node's leader, and of the
 * rank itself for its own node): the holder sends it into dst, kept in
 * keep (fetched or fetched_rs) to be removed after use. Returns 1 with path
 * naming the file (dst, or the rank's own node's copy), 0 when no node
 * holds one, or a negative errno. */
static int fetch_held(const char *ckpt, int need, int (*held)(const char *, int, char *, size_t),
		      const char *what, const char *dst, char keep[PATH_MAX], char *path, size_t len)
{
	int64_t *needs = calloc((size_t)api.size, sizeof(int64_t));
	int64_t *holder = calloc((size_t)api.size, sizeof(int64_t));
	char mine[PATH_MAX];
	int ret = 0, sent = 0, any = 0;

	if (!needs || !holder) {
		free(needs);
		free(holder);
		return err_set(-ENOMEM, "out of memory");
	}
	needs[api.rank] = need;
	api_allreduce(needs, (size_t)api.size, API_MAX);
	for (int s = 0; s < api.size; s++) {
		/* -1: the rank's own node holds it, nothing to move */
		holder[s] = !needs[s] ? INT64_MAX :
			    s == api.rank ? (held(ckpt, s, mine, sizeof(mine)) ? -1 : INT64_MAX) :
			    api.node_leader && held(ckpt, s, mine, sizeof(mine)) ? api.rank : INT64_MAX;
		any |= needs[s] != 0;
	}
	if (any)
		api_allreduce(holder, (size_t)api.size, API_MIN);
	for (int s = 0; any && s < api.size; s++) {
		if (!needs[s] || holder[s] == INT64_MAX)
			continue;
		if (holder[s] < 0) {
			if (api.rank == s) {
				held(ckpt, s, path, len);
				ret = 1;
				log_info("rank %d: found its %s in this node's cache", s, what);
			}
		} else if (api.rank == holder[s]) {
			held(ckpt, s, mine, sizeof(mine));
			sent = send_file(mine, s) ?: sent;
		} else if (api.rank == s) {
			FILE *f = fopen(dst, "wb");

			snprintf(keep, PATH_MAX, "%s", dst);
			ret = f ? 0 : err_set(-errno, "%s: %s", dst, strerror(errno));
			ret = recv_file((int)holder[s], put_fd, f, ret);
			if (f && fclose(f) && !ret)
				ret = err_set(-EIO, "%s: cannot write", dst);
			if (!ret) {
				snprintf(path, len, "%s", dst);
				ret = 1;
				log_info("rank %d: fetched its %s from rank %d's node", s, what,
					 (int)holder[s]);
			}
		}
	}
	free(needs);
	free(holder);
	return ret < 0 ? ret : sent ? sent : ret;
}

/* Collective: every rank that has no good copy of its own (need) gets one
 * from a rank whose node holds it, verified like its own. */
static int fetch_copies(const char *ckpt, int need, int only_id, struct img_reader **r)
{
	char dst[PATH_MAX], path[PATH_MAX];
	int ret;

	snprintf(dst, sizeof(dst), "%s/.fetched-%05d.img", store_job_dir(api.local), api.rank);
	ret = fetch_held(ckpt, need, held_copy, "data", dst, fetched, path, sizeof(path));
	if (ret > 0)
		return open_verified(ckpt, path, only_id, r);
	if (ret == 0 && need)
		ret = err_set(-ENOENT, "%s: no copy of rank %d's data: not in node %s's cache, and no "
			      "partner copy survives", ckpt, api.rank, api.node);
	return ret;
}

/* Collective: ranks whose image is not in their node's cache get it from
 * the node they ran on when it was taken (SINGLE and GLOBAL; PARTNER's
 * fetch_copies and RS's rebuild_rs look there too). why: the error of
 * looking in this node's cache, kept when no node has it. */
static int fetch_moved(const char *ckpt, int need, int only_id, struct img_reader **r)
{
	char dst[PATH_MAX], path[PATH_MAX], why[API_MSG_LEN];
	int ret;

	snprintf(why, sizeof(why), "%s", err_msg());
	snprintf(dst, sizeof(dst), "%s/.fetched-%05d.img", store_job_dir(api.local), api.rank);
	ret = fetch_held(ckpt, need, held_moved_image, "image", dst, fetched, path, sizeof(path));
	if (ret > 0)
		return open_verified(ckpt, path, only_id, r);
	if (ret == 0 && need)
		ret = err_set(-ENOENT, "%s", why);
	return ret;
}

/* Collective: ranks without a good image get it rebuilt from their rs
 * group (rs.c), then verified like their own. A rank that runs on another
 * node than when the checkpoint was taken first gets its image and its
 * parity from that node, so that only the files of lost nodes count as
 * missing. */
static int rebuild_rs(const char *ckpt, const struct ckpt_info *info, int have_own, int only_id,
		      struct img_reader **r)
{
	char own[PATH_MAX], rs[PATH_MAX], path[PATH_MAX], dst[PATH_MAX], why[API_MSG_LEN];
	char file[32];
	int ret;

	snprintf(why, sizeof(why), "%s", err_msg());
	rank_file(file, sizeof(file), api.rank);
	store_ckpt_path(api.local, ckpt, file, own, sizeof(own));
	snprintf(file, sizeof(file), "rs-%05d.img", api.rank);
	store_ckpt_path(api.local, ckpt, file, rs, sizeof(rs));
	/* a fetch that fails leaves the file missing: the rebuild covers it */
	snprintf(dst, sizeof(dst), "%s/.fetched-%05d.img", store_job_dir(api.local), api.rank);
	if (fetch_held(ckpt, !have_own, held_moved_image, "image", dst, fetched, path,
		       sizeof(path)) > 0 && open_verified(ckpt, path, only_id, r) == 0) {
		snprintf(own, sizeof(own), "%s", path);
		have_own = 1;
	} else if (fetched[0]) {
		unlink(fetched);
		fetched[0] = '\0';
	}
	snprintf(dst, sizeof(dst), "%s/.fetched-rs-%05d.img", store_job_dir(api.local), api.rank);
	if (fetch_held(ckpt, access(rs, R_OK) != 0, held_moved_rs, "rs parity", dst, fetched_rs, path,
		       sizeof(path)) > 0)
		snprintf(rs, sizeof(rs), "%s", path);
	if (!have_own)
		log_info("rank %d: %s; rebuilding from its rs group", api.rank, why);
	snprintf(dst, sizeof(dst), "%s/.rebuilt-%05d.img", store_job_dir(api.local), api.rank);
	if (!have_own)
		snprintf(fetched, sizeof(fetched), "%s", dst);
	ret = api_rs_rebuild(ckpt, (const char (*)[API_NAME_LEN])info->nodes, info->sizes,
			     (unsigned)info->group_size, (unsigned)info->rs_parity, own, have_own,
			     access(rs, R_OK) == 0 ? rs : NULL, dst);
	if (have_own)
		return ret;
	return ret ? ret : open_verified(ckpt, dst, only_id, r);
}

/* ---- restart on another number of ranks ---- */

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
	char file[32], path[PATH_MAX];
	int ret = other ? 0 : err_set(-ENOMEM, "out of memory");

	for (int64_t q = 0; q < old && !ret; q++) {
		struct img_section_info si;
		struct img_reader *r = NULL;
		int idx;

		rank_file(file, sizeof(file), (int)q);
		ret = store_ckpt_path(api.global, ckpt, file, path, sizeof(path));
		ret = ret ? ret : img_open(path, &r);
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
	char file[32], path[PATH_MAX];
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
			uint64_t off = 0, cnt = 0, glob = 0, elem = 0, lo, hi;
			struct img_section_info si;
			int idx;

			rank_file(file, sizeof(file), (int)q);
			ret = store_ckpt_path(api.global, ckpt, file, path, sizeof(path));
			ret = ret ? ret : img_open(path, &r);
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
			if (info.level == STASIS_LEVEL_PARTNER && info.ranks == api.size) {
				if (ret)
					log_info("rank %d: %s; asking the partner copies", api.rank,
						 err_msg());
				ret = fetch_copies(names[c], ret != 0, only_id, &r);
			} else if (info.level == STASIS_LEVEL_RS && info.ranks == api.size) {
				ret = rebuild_rs(names[c], &info, ret == 0, only_id, &r);
			} else if (info.ranks == api.size) {
				ret = fetch_moved(names[c], ret != 0, only_id, &r);
			}
			/* the most expensive place last */
			if (ret && info.ranks == api.size &&
			    (info.level == STASIS_LEVEL_GLOBAL || info.flush)) {
				char why[API_MSG_LEN], more[API_MSG_LEN];

				snprintf(why, sizeof(why), "%s", err_msg());
				ret = open_in(api.global, names[c], only_id, &r);
				snprintf(more, sizeof(more), "%s", err_msg());
				if (ret)
					err_set(ret, "%s; %s", why, more);
				else
					log_info("rank %d: %s; took the global tier's copy", api.rank, why);
			}
			bad = api_agree(ret == 0, msg);
		} else {
			bad = 0;
		}
		if (bad < api.size) {
			img_close(&r);
			drop_fetched();
			if (!first_why[0])
				snprintf(first_why, sizeof(first_why), "rank %d: %s", bad, msg);
			if (api.rank == 0)
				log_warn("cannot restart from %s: rank %d: %s%s", names[c], bad, msg,
					 c + 1 < n ? "; trying an older checkpoint" : "");
			continue;
		}
		ret = load(r, only_id);
		img_close(&r);
		drop_fetched();
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
