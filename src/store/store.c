/* store.c - the checkpoint store (see store.h, docs/store.md).
 *
 * A checkpoint is established by the index alone: files become durable one
 * by one (tmp, fsync, rename, fsync dir, FILE record), and only a COMPLETE
 * record, appended after every promised file was found in place, lets
 * restart use it. Everything that reads the store (list, select, verify,
 * prune) derives the states from the index and checks the files on disk
 * before trusting them, because a crash or a user can remove either.
 */
#include "store/store.h"
#include "store/index.h"
#include "store/tier.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TMP_SUFFIX ".tmp"
#define NAME_LEN 255            /* a directory entry */
#define VERIFY_BUF (1u << 20)
/* Large files are written through an aligned staging buffer with O_DIRECT:
 * on this class of machine, buffered writes by a process that holds gigabytes
 * of its own memory (a checkpointed application) run 2-5x slower than the
 * disk, because every page-cache page must first be obtained from the host;
 * direct writes from a reused buffer run at disk speed. */
#define STAGE_SIZE (8u << 20)
/* A full stage goes to the disk on a thread of the file's own while the
 * caller fills the next one, so the disk is never idle while the writer
 * copies and checksums (a synchronous direct write of each stage left it
 * idle for that time: bench/transparent's ckpt_vs_dd). Files smaller than
 * a stage never start the thread. */
struct stage_writer {
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct store_file *f;
	unsigned char *buf;             /* the stage being written, or NULL: idle */
	size_t len;
	uint64_t off;
	unsigned char *spare;           /* the other stage buffer */
	int err;                        /* the first failed write (sticky) */
	int stop;
};

struct store {
	const struct store_tier_ops *ops;
	char job[NAME_LEN + 1];
	char dir[PATH_MAX];             /* <root>/<job> */
	struct index index;
	unsigned recycle;               /* spare files kept at most (0: none) */
	/* the highest N of ckpt-N the index named up to byte named_to (0:
	 * not read yet): a begin reads on from there */
	uint64_t named_to;
	unsigned max_named;
};

#define SPARE_DIR ".spare"
#define SPARE_SUFFIX ".img"         /* what prune keeps: images, the big files */

struct store_ckpt {
	struct store *s;
	char name[64];
	char dir[PATH_MAX];
	int annex;                      /* files commit under ANNEX records */
	int early;                      /* an annex opened before the seal (files commit after it) */
	uint64_t begun_at;              /* its BEGIN record's offset (0: unknown) */
};

struct store_file {
	struct store_ckpt *c;
	char name[NAME_LEN + 1];
	char tmp[PATH_MAX];
	char path[PATH_MAX];
	int fd;
	int dfd;                        /* O_DIRECT descriptor while staging, or -1 */
	unsigned char *stage;           /* aligned staging buffer, or NULL */
	size_t staged;                  /* bytes in stage */
	uint64_t stage_off;             /* file offset of stage[0] */
	int stage_tried;                /* staging was considered (first write) */
	struct stage_writer *bg;        /* writes full stages while stage fills, or NULL */
	uint64_t size;
	uint32_t crc;                   /* running CRC-32C of what was written */
	char head[IMG_MAGIC_BYTES];       /* its first bytes: is it an image? */
	size_t head_len;
	int error;                      /* first write error: the file cannot commit */
	int by_fd;                      /* bytes written by the caller through fd
					 * (store_file_fd): crc and head unknown */
	int vouched;                    /* vouch_crc is the whole content's CRC */
	uint32_t vouch_crc;
	int recycled;                   /* written over a spare: cut to size at commit */
	int renamed;
	int committed;
};

static const char *const state_names[] = {
	[STORE_PARTIAL] = "PARTIAL",
	[STORE_COMPLETE] = "COMPLETE",
	[STORE_FAILED] = "FAILED",
	[STORE_PRUNED] = "PRUNED",
};

const char *store_state_name(enum store_state st)
{
	return (unsigned)st < sizeof(state_names) / sizeof(state_names[0]) ? state_names[st] : "?";
}

/* err_set with ": <cause>" appended: the message of a fault point that fired
 * (public functions clear the message first, and tiers never set one) or
 * the errno's text. */
static int __attribute__((format(printf, 2, 3))) report(int ret, const char *fmt, ...)
{
	char what[512], cause[256];
	va_list ap;

	snprintf(cause, sizeof(cause), "%s", err_msg()[0] ? err_msg() : strerror(-ret));
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return err_set(ret, "%s: %s", what, cause);
}

/* ---- names and paths ---- */

/* A plain name: one directory entry that cannot escape its parent or hide
 * control characters in messages. */
static int plain_name(const char *name, size_t max)
{
	size_t len = strlen(name);

	if (len == 0 || len > max || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	for (const char *p = name; *p; p++)
		if (*p == '/' || *p < 0x20 || *p > 0x7e)
			return 0;
	return 1;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int check_job_name(const char *job)
{
	if (!job || !plain_name(job, NAME_LEN))
		return err_set(-EINVAL, "job name '%s' is not valid: a plain name is needed (printable, "
			       "no '/', not '.' or '..', at most %d bytes)", job ? job : "", NAME_LEN);
	return 0;
}

static int check_file_name(const char *name)
{
	size_t max = NAME_LEN - strlen(TMP_SUFFIX);

	if (!name || !plain_name(name, max) || ends_with(name, TMP_SUFFIX))
		return err_set(-EINVAL, "file name '%s' is not valid: a plain name is needed (printable, "
			       "no '/', not ending in %s, at most %zu bytes)", name ? name : "", TMP_SUFFIX, max);
	return 0;
}

static int join_path(char *buf, size_t len, const char *a, const char *b, const char *c)
{
	int n = c ? snprintf(buf, len, "%s/%s/%s", a, b, c) : snprintf(buf, len, "%s/%s", a, b);

	if (n < 0 || (size_t)n >= len)
		return err_set(-ENAMETOOLONG, "%s/%s%s%s: path too long", a, b, c ? "/" : "", c ? c : "");
	return 0;
}

int store_ckpt_path(const struct store *s, const char *ckpt, const char *file, char *buf, size_t len)
{
	if (!ckpt || !plain_name(ckpt, sizeof(((struct store_ckpt_info *)0)->name) - 1))
		return err_set(-EINVAL, "checkpoint name '%s' is not valid", ckpt ? ckpt : "");
	if (file && !plain_name(file, NAME_LEN))
		return err_set(-EINVAL, "file name '%s' is not valid", file);
	return join_path(buf, len, s->dir, ckpt, file);
}

const char *store_job_dir(const struct store *s)
{
	return s->dir;
}

static const struct store_tier_ops *find_tier(const char *tier)
{
	char names[128];
	const struct store_tier_ops *ops;

	if (!tier)
		tier = cfg_str(CFG_TIER);
	ops = store_tier_find(tier);
	if (!ops) {
		store_tier_names(names, sizeof(names));
		err_set(-EINVAL, "unknown storage tier '%s' (known: %s)", tier, names);
	}
	return ops;
}

static const char *tier_root(const struct store_tier_ops *ops, const char *root)
{
	if (root && !*root) {
		err_set(-EINVAL, "empty root directory for tier %s", ops->name);
		return NULL;
	}
	if (!root)
		root = cfg_str(ops->root_key);
	if (!*root) {
		err_set(-EINVAL, "tier %s has no root directory (set %s)", ops->name, cfg_name(ops->root_key));
		return NULL;
	}
	return root;
}

/* ---- opening ---- */

/* The job directory and its index. A new directory entry is fsynced in its
 * parent so that a crash cannot lose the job (and with it every later
 * checkpoint) while the files inside it were fsynced. */
static int open_job(struct store *s, const char *root)
{
	const struct store_tier_ops *ops = s->ops;
	struct store_stat st;
	int ret;

	ret = ops->stat(s->dir, &st);
	if (ret == -ENOENT) {
		ret = ops->mkdir_p(s->dir);
		if (ret == 0)
			ret = ops->fsync_dir(root);
		if (ret)
			return report(ret, "%s: cannot create the job directory", s->dir);
	} else if (ret || !st.is_dir) {
		return report(ret ? ret : -ENOTDIR, "%s: not usable as a job directory", s->dir);
	}
	ret = ops->stat(s->index.path, &st);
	if (ret == 0)
		return st.is_file ? 0 : err_set(-EINVAL, "%s: not a regular file", s->index.path);
	if (ret != -ENOENT)
		return report(ret, "%s", s->index.path);
	ret = index_create(&s->index);
	if (ret)
		return ret;
	ret = ops->fsync_dir(s->dir);
	return ret ? report(ret, "%s: cannot fsync the job directory", s->dir) : 0;
}

/* The tier named tier (NULL: configured) and its root (NULL: configured). */
static int resolve_tier(const char *tier, const char **root, const struct store_tier_ops **ops)
{
	*ops = find_tier(tier);
	if (!*ops)
		return -EINVAL;
	*root = tier_root(*ops, *root);
	return *root ? 0 : -EINVAL;
}

int store_open(const char *tier, const char *root, const char *job, struct store **out)
{
	char index_path[PATH_MAX];
	const struct store_tier_ops *ops;
	struct store *s;
	int ret;

	err_clear();
	*out = NULL;
	ret = resolve_tier(tier, &root, &ops);
	ret = ret ? ret : check_job_name(job);
	if (ret)
		return ret;
	s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(-ENOMEM, "out of memory");
	s->ops = ops;
	snprintf(s->job, sizeof(s->job), "%s", job);
	ret = join_path(s->dir, sizeof(s->dir), root, job, NULL);
	if (ret == 0)
		ret = join_path(index_path, sizeof(index_path), root, job, "index");
	if (ret) {
		free(s);
		return ret;
	}
	ret = index_init(&s->index, ops, index_path);
	if (ret) {
		free(s);
		return ret;
	}
	ret = open_job(s, root);
	if (ret) {
		store_close(&s);
		return ret;
	}
	*out = s;
	return 0;
}

void store_close(struct store **s)
{
	if (!*s)
		return;
	index_destroy(&(*s)->index);
	free(*s);
	*s = NULL;
}

void store_names_free(char **names, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keep the entries of `names` that are job directories (hold an index). */
static size_t keep_jobs(const struct store_tier_ops *ops, const char *root, char **names, size_t count)
{
	char path[PATH_MAX];
	struct store_stat st;
	size_t kept = 0;

	for (size_t i = 0; i < count; i++) {
		int n = snprintf(path, sizeof(path), "%s/%s/index", root, names[i]);

		if (plain_name(names[i], NAME_LEN) && n > 0 && (size_t)n < sizeof(path) &&
		    ops->stat(path, &st) == 0 && st.is_file)
			names[kept++] = names[i];
		else
			free(names[i]);
	}
	return kept;
}

int store_jobs(const char *tier, const char *root, char ***names, size_t *count)
{
	const struct store_tier_ops *ops;
	int ret;

	err_clear();
	*names = NULL;
	*count = 0;
	ret = resolve_tier(tier, &root, &ops);
	if (ret)
		return ret;
	ret = ops->list(root, names, count);
	if (ret == -ENOENT)
		return 0;       /* nothing was ever stored there */
	if (ret)
		return report(ret, "%s: cannot list jobs", root);
	*count = keep_jobs(ops, root, *names, *count);
	if (*count > 1)
		qsort(*names, *count, sizeof(**names), name_cmp);
	return 0;
}

/* ---- checkpoints ---- */

static void record_init(struct index_record *r, enum index_op op, const char *ckpt)
{
	memset(r, 0, sizeof(*r));
	r->op = op;
	r->time = (int64_t)time(NULL);
	snprintf(r->ckpt, sizeof(r->ckpt), "%s", ckpt);
}

static struct store_ckpt *ckpt_new(struct store *s, const char *name)
{
	struct store_ckpt *c = calloc(1, sizeof(*c));

	if (!c) {
		err_set(-ENOMEM, "out of memory");
		return NULL;
	}
	c->s = s;
	snprintf(c->name, sizeof(c->name), "%s", name);
	if (join_path(c->dir, sizeof(c->dir), s->dir, name, NULL)) {
		free(c);
		return NULL;
	}
	return c;
}

/* Claim the next name: the index's highest number plus one, past any
 * directory already there (a begin whose BEGIN record was lost). mkdir is
 * the arbiter, so even a writer that ignored the lock could not share it. */
static int claim_name(struct store *s, unsigned next, char *name, size_t len)
{
	char dir[PATH_MAX];
	int ret;

	for (;; next++) {
		if (next == 0 || next > 999999999)
			return err_set(-EOVERFLOW, "%s: checkpoint numbers exhausted", s->dir);
		snprintf(name, len, "ckpt-%06u", next);
		ret = join_path(dir, sizeof(dir), s->dir, name, NULL);
		if (ret)
			return ret;
		ret = s->ops->mkdir(dir);
		if (ret != -EEXIST)
			break;
	}
	if (ret)
		return report(ret, "%s: cannot create the checkpoint directory", dir);
	ret = s->ops->fsync_dir(s->dir);
	return ret ? report(ret, "%s: cannot fsync the job directory", s->dir) : 0;
}

static int max_named(void *ctx, const struct index_record *r, uint64_t offset)
{
	unsigned *max = ctx, n = index_ckpt_number(r->ckpt);

	(void)offset;
	if (n > *max)
		*max = n;
	return 0;
}

/* The highest N of ckpt-N the index ever named: read on from the last
 * begin of this handle (the index only grows), not every record of every
 * checkpoint (bench/scale: 65,536 FILE records a checkpoint at 65K ranks) */
static int highest_named(struct store *s, struct index_hold *h, unsigned *max)
{
	struct index_scan_stats st;
	struct index_view v;
	int ret = -ESTALE;

	*max = s->max_named;
	if (s->named_to)
		ret = index_scan_from_held(h, s->named_to, max_named, max, &st);
	if (ret == -ESTALE) {
		ret = index_view_load_held(h, &v);
		*max = v.max_number;
		st = v.stats;
		if (ret == 0)
			index_view_free(&v);
	}
	if (ret)
		return ret;
	s->max_named = *max;
	s->named_to = st.end;
	return 0;
}

static int begin_held(struct store *s, struct index_hold *h, struct store_ckpt **out)
{
	struct index_record r;
	char name[64];
	unsigned max;
	int ret;

	ret = highest_named(s, h, &max);
	if (ret)
		return ret;
	ret = claim_name(s, max + 1, name, sizeof(name));
	if (ret)
		return ret;
	/* If the BEGIN record fails, the directory stays: the name is never
	 * given out again (a log line about it keeps meaning one attempt),
	 * verify calls it not established, prune removes it. */
	record_init(&r, INDEX_BEGIN, name);
	ret = index_append_held(h, &r);
	if (ret == 0) {
		*out = ckpt_new(s, name);
		if (!*out)
			ret = -ENOMEM;
		else
			(*out)->begun_at = h->appended_at;
	}
	return ret;
}

int store_ckpt_begin(struct store *s, struct store_ckpt **out)
{
	struct index_hold h;
	int ret;

	err_clear();
	*out = NULL;
	ret = index_lock(&s->index, &h);
	if (ret)
		return ret;
	ret = begin_held(s, &h, out);
	index_unlock(&h);
	if (ret == 0)
		log_debug("%s: began %s", s->dir, (*out)->name);
	return ret;
}

/* Begin `name` or, when another process (a rank on the same node) began it
 * already, join it; both under the index lock, so exactly one BEGIN. */
static int begin_named_held(struct store *s, struct index_hold *h, const char *name,
			    struct store_ckpt **out)
{
	struct index_record r;
	struct index_view v;
	struct index_ckpt *ck;
	char dir[PATH_MAX];
	int ret;

	ret = index_view_load_held(h, &v);
	if (ret)
		return ret;
	ck = index_view_find(&v, name);
	if (ck && ck->info.state != STORE_PARTIAL)
		ret = err_set(-EEXIST, "%s: %s is already %s", s->dir, name,
			      store_state_name(ck->info.state));
	index_view_free(&v);
	if (ret)
		return ret;
	if (!ck) {
		ret = join_path(dir, sizeof(dir), s->dir, name, NULL);
		ret = ret ? ret : s->ops->mkdir(dir);
		if (ret == -EEXIST)
			return err_set(ret, "%s: directory %s exists but the index does not know it",
				       s->dir, name);
		if (ret)
			return report(ret, "%s: cannot create the checkpoint directory", dir);
		ret = s->ops->fsync_dir(s->dir);
		if (ret)
			return report(ret, "%s: cannot fsync the job directory", s->dir);
		record_init(&r, INDEX_BEGIN, name);
		ret = index_append_held(h, &r);
		if (ret)
			return ret;
	}
	*out = ckpt_new(s, name);
	return *out ? 0 : -ENOMEM;
}

int store_ckpt_begin_named(struct store *s, const char *name, struct store_ckpt **out)
{
	struct index_hold h;
	int ret;

	err_clear();
	*out = NULL;
	if (!plain_name(name, 63) || strncmp(name, "ckpt-", 5) != 0)
		return err_set(-EINVAL, "bad checkpoint name '%s'", name);
	ret = index_lock(&s->index, &h);
	if (ret)
		return ret;
	ret = begin_named_held(s, &h, name, out);
	index_unlock(&h);
	return ret;
}

static int load_ckpt(struct store *s, const char *name, struct index_view *v, struct index_ckpt **ck)
{
	int ret = index_view_load(&s->index, v);

	if (ret)
		return ret;
	*ck = index_view_find(v, name);
	if (*ck)
		return 0;
	index_view_free(v);
	return err_set(-ENOENT, "%s: no checkpoint '%s' in the index of job %s", s->dir, name, s->job);
}

/* A handle to add files to checkpoint `name`, which must be in `want`. */
static int ckpt_open(struct store *s, const char *name, enum store_state want, struct store_ckpt **out)
{
	struct index_view v;
	struct index_ckpt *ck;
	struct store_stat st;
	int ret;

	err_clear();
	*out = NULL;
	ret = load_ckpt(s, name, &v, &ck);
	if (ret)
		return ret;
	if (ck->info.state != want) {
		ret = want == STORE_PARTIAL ?
		      err_set(-EINVAL, "%s: already %s; no files can be added to it", name,
			      store_state_name(ck->info.state)) :
		      err_set(-EINVAL, "%s: %s, not COMPLETE; nothing can be added to its annex", name,
			      store_state_name(ck->info.state));
		goto out;
	}
	*out = ckpt_new(s, name);
	if (!*out) {
		ret = -ENOMEM;
		goto out;
	}
	(*out)->annex = want == STORE_COMPLETE;
	ret = s->ops->stat((*out)->dir, &st);
	if (ret || !st.is_dir) {
		ret = report(ret ? ret : -ENOTDIR, "%s: checkpoint directory unusable", (*out)->dir);
		store_ckpt_free(out);
	}
out:
	index_view_free(&v);
	return ret;
}

int store_ckpt_join(struct store *s, const char *name, struct store_ckpt **out)
{
	return ckpt_open(s, name, STORE_PARTIAL, out);
}

int store_ckpt_join_begun(struct store *s, const char *name, struct store_ckpt **out)
{
	struct store_stat st;
	int ret;

	err_clear();
	*out = NULL;
	if (!plain_name(name, 63) || strncmp(name, "ckpt-", 5) != 0)
		return err_set(-EINVAL, "bad checkpoint name '%s'", name);
	*out = ckpt_new(s, name);
	if (!*out)
		return -ENOMEM;
	/* no index read: the caller was told the checkpoint is begun (a file
	 * committed after its seal would be ignored by the index anyway) */
	ret = s->ops->stat((*out)->dir, &st);
	if (ret || !st.is_dir) {
		ret = report(ret ? ret : -ENOTDIR, "%s: no such checkpoint directory", (*out)->dir);
		store_ckpt_free(out);
	}
	return ret;
}

int store_ckpt_annex(struct store *s, const char *name, struct store_ckpt **out)
{
	return ckpt_open(s, name, STORE_COMPLETE, out);
}

int store_ckpt_annex_early(struct store *s, const char *name, struct store_ckpt **out)
{
	int ret = store_ckpt_join_begun(s, name, out);

	if (ret == 0) {
		(*out)->annex = 1;
		(*out)->early = 1;
	}
	return ret;
}

int store_ckpt_level(struct store *s, const char *name, const char *level, const char *reason)
{
	struct index_record r;

	err_clear();
	record_init(&r, INDEX_LEVEL, name);
	snprintf(r.name, sizeof(r.name), "%s", level);
	if (reason)
		snprintf(r.reason, sizeof(r.reason), "%s", *reason ? reason : "failed");
	return index_append(&s->index, &r);
}

const char *store_ckpt_name(const struct store_ckpt *c)
{
	return c->name;
}

int store_ckpt_name_cmp(const char *a, const char *b)
{
	unsigned x = index_ckpt_number(a), y = index_ckpt_number(b);

	if (x != y)
		return x < y ? -1 : 1;
	return strcmp(a, b);
}

void store_ckpt_free(struct store_ckpt **c)
{
	free(*c);
	*c = NULL;
}

/* ---- files ---- */

/* A file handle of checkpoint c: its final and *.tmp paths, no descriptor;
 * an error if name is not a file name the store takes. */
static int file_new(struct store_ckpt *c, const char *name, struct store_file **out)
{
	struct store_file *f;
	int ret;

	*out = NULL;
	ret = check_file_name(name);
	if (ret)
		return ret;
	f = calloc(1, sizeof(*f));
	if (!f)
		return err_set(-ENOMEM, "out of memory");
	f->c = c;
	f->fd = -1;
	f->dfd = -1;
	snprintf(f->name, sizeof(f->name), "%s", name);
	ret = join_path(f->path, sizeof(f->path), c->dir, name, NULL);
	if (ret == 0 && snprintf(f->tmp, sizeof(f->tmp), "%s%s", f->path, TMP_SUFFIX) >= (int)sizeof(f->tmp))
		ret = err_set(-ENAMETOOLONG, "%s%s: path too long", f->path, TMP_SUFFIX);
	if (ret)
		free(f);
	else
		*out = f;
	return ret;
}

/* ---- recycling ---- */

void store_set_recycle(struct store *s, unsigned max)
{
	s->recycle = s->ops->open_write && s->ops->truncate ? max : 0;
}

static int spare_dir(const struct store *s, char *buf, size_t len)
{
	return join_path(buf, len, s->dir, SPARE_DIR, NULL);
}

/* Write f over a spare file: rename one into place as f's *.tmp (never
 * over an existing one: then the caller's create reports it) and open it.
 * One whose name ends in f's name first, as its size will be closest, then
 * one of the same kind (the name's part up to its first '-': a rank's
 * image takes no partner copy's spare, which the next copy will want). */
static int take_spare(struct store *s, struct store_file *f)
{
	char dir[PATH_MAX], from[PATH_MAX], kind[NAME_LEN + 2], **names = NULL;
	const char *dash = strchr(f->name, '-');
	size_t count = 0, pick;
	int taken = 0;

	/* "-rank-", "-partner-": as a spare's name holds it after its own prefix */
	snprintf(kind, sizeof(kind), "-%.*s", dash ? (int)(dash - f->name + 1) : NAME_LEN, f->name);

	if (!s->recycle || spare_dir(s, dir, sizeof(dir)) || s->ops->list(dir, &names, &count))
		return 0;
	for (int pass = 0; pass < 2 && !taken; pass++) {
		for (pick = 0; pick < count && !taken; pick++) {
			size_t nl = strlen(names[pick]), fl = strlen(f->name);
			int ret;

			if (names[pick][0] == '.')
				continue;       /* a reservation being made */
			if (pass == 0 && !(nl > fl && strcmp(names[pick] + nl - fl, f->name) == 0))
				continue;
			if (pass == 1 && (!dash || !strstr(names[pick], kind)))
				continue;
			if (join_path(from, sizeof(from), dir, names[pick], NULL))
				continue;
			ret = s->ops->rename(from, f->tmp);
			if (ret == -EEXIST)
				goto out;       /* the *.tmp is there: create says so */
			if (ret)
				continue;       /* another process took it */
			/* its length is the spare's: how far it is written is
			 * said beside it, for readers following it (the mark) */
			if (s->ops->open_write(f->tmp, &f->fd) == 0 && s->ops->mark &&
			    s->ops->mark(f->fd, 0) == 0) {
				f->recycled = 1;
				taken = 1;
			} else {
				if (f->fd >= 0)
					s->ops->close(f->fd);
				f->fd = -1;
				s->ops->unlink(f->tmp);
			}
		}
	}
out:
	store_names_free(names, count);
	return taken;
}

/* A spare says it holds nothing written (the mark 0) before it is one: a
 * reader following the file written over it opens it as soon as it is
 * renamed into place, before its writer marks it, and would otherwise take
 * the old bytes up to its length for the new file's. The mark is set on
 * the file at from (open as fd, or opened here at fd < 0), then it is
 * renamed to to; a file that could not be renamed loses the mark again. */
static int spare_make(struct store *s, int fd, const char *from, const char *to)
{
	int own = -1, ret = s->ops->mark ? 0 : -EOPNOTSUPP;

	if (ret == 0 && fd < 0) {
		ret = s->ops->open_read(from, &own);
		fd = own;
	}
	ret = ret ? ret : s->ops->mark(fd, 0);
	if (ret == 0 && (ret = s->ops->rename(from, to)) != 0)
		s->ops->mark(fd, -1);   /* it stays what it was */
	if (own >= 0)
		s->ops->close(own);
	return ret;
}

/* Prune: keep the files of a checkpoint being removed as spares. */
static void keep_spares(struct store *s, const char *ckdir, const char *ckpt)
{
	char dir[PATH_MAX], from[PATH_MAX], to[PATH_MAX], spare[PATH_MAX], **have = NULL, **names = NULL;
	size_t nhave = 0, count = 0, spares;

	if (!s->recycle || spare_dir(s, dir, sizeof(dir)) || s->ops->mkdir_p(dir) ||
	    s->ops->list(dir, &have, &nhave) || s->ops->list(ckdir, &names, &count))
		goto out;
	spares = nhave;
	for (size_t i = 0; i < count && spares < s->recycle; i++) {
		if (!ends_with(names[i], SPARE_SUFFIX) ||
		    snprintf(spare, sizeof(spare), "%s-%s", ckpt, names[i]) >= NAME_LEN ||
		    join_path(from, sizeof(from), ckdir, names[i], NULL) ||
		    join_path(to, sizeof(to), dir, spare, NULL))
			continue;
		if (spare_make(s, -1, from, to) == 0)
			spares++;
	}
out:
	store_names_free(have, nhave);
	store_names_free(names, count);
}

int store_file_retire(struct store *s, const char *ckpt, const char *name)
{
	char path[PATH_MAX], dir[PATH_MAX], spare[NAME_LEN + 1], to[PATH_MAX], **have = NULL;
	size_t nhave = 0;
	int fd = -1, ret;

	ret = store_ckpt_path(s, ckpt, name, path, sizeof(path));
	if (ret)
		return ret;
	/* a reader holds its lock while it reads (store_io_open): its file is
	 * removed, never written over. So is a *.tmp: its writer may still
	 * write into it (an older checkpoint's copy still under way), and
	 * writers hold no lock */
	if (s->recycle && s->ops->trylock && !ends_with(name, TMP_SUFFIX) &&
	    spare_dir(s, dir, sizeof(dir)) == 0 &&
	    snprintf(spare, sizeof(spare), "%s-%s", ckpt, name) < (int)sizeof(spare) &&
	    join_path(to, sizeof(to), dir, spare, NULL) == 0 && s->ops->mkdir_p(dir) == 0 &&
	    s->ops->list(dir, &have, &nhave) == 0 && nhave < s->recycle &&
	    s->ops->open_read(path, &fd) == 0 && s->ops->trylock(fd) == 0 &&
	    spare_make(s, fd, path, to) == 0)
		ret = 1;
	if (fd >= 0)
		s->ops->close(fd);
	store_names_free(have, nhave);
	if (ret)
		return 0;
	ret = s->ops->unlink(path);
	return ret == -ENOENT ? 0 : ret ? report(ret, "%s: cannot remove", path) : 0;
}

int store_ckpt_retire(struct store *s, const char *ckpt)
{
	char dir[PATH_MAX], **names = NULL;
	size_t count = 0;
	int ret = store_ckpt_path(s, ckpt, NULL, dir, sizeof(dir));

	ret = ret ? ret : s->ops->list(dir, &names, &count);
	if (ret == -ENOENT)
		return 0;
	if (ret)
		return report(ret, "%s: cannot list", dir);
	for (size_t i = 0; i < count; i++) {
		int r = store_file_retire(s, ckpt, names[i]);

		ret = ret ? ret : r;
	}
	store_names_free(names, count);
	names = NULL;
	count = 0;
	/* once empty: a file made since (an older checkpoint's copy that runs
	 * on) keeps it, and its writer finds it there */
	if (!ret && s->ops->list(dir, &names, &count) == 0 && count == 0)
		s->ops->remove_tree(dir);
	store_names_free(names, count);
	return ret;
}

static int newest_first(const void *a, const void *b)
{
	return store_ckpt_name_cmp(*(char *const *)b, *(char *const *)a);
}

int store_cache_trim(struct store *s, const char *newest, unsigned keep)
{
	char **names = NULL;
	size_t count = 0, older = 0;
	int ret = s->ops->list(s->dir, &names, &count);

	if (ret == -ENOENT)
		return 0;
	if (ret)
		return report(ret, "%s: cannot list", s->dir);
	for (size_t i = 0; i < count; i++)
		if (index_ckpt_number(names[i]) && store_ckpt_name_cmp(names[i], newest) < 0)
			names[older++] = names[i];
		else
			free(names[i]);
	qsort(names, older, sizeof(*names), newest_first);
	/* newest is one of the keep */
	for (size_t i = keep ? keep - 1 : 0; i < older; i++) {
		int r = store_ckpt_retire(s, names[i]);

		ret = ret ? ret : r;
	}
	store_names_free(names, older);
	return ret;
}

/* The reservation at path claimed (an existing one: it grows) or made
 * under the name made, which no writer takes (take_spare skips names
 * starting with '.'), and opened as *fd */
static int reserve_open(struct store *s, const char *path, const char *made, int *fd)
{
	int ret = s->ops->rename(path, made);

	if (ret == -ENOENT) {
		ret = s->ops->create(made, fd);
		if (ret != -EEXIST)
			return ret;
	} else if (ret && ret != -EEXIST) {
		return ret;
	}
	return s->ops->open_write(made, fd);   /* claimed, or left by a crash */
}

int store_spare_reserve(struct store *s, const char *name, uint64_t size)
{
	char dir[PATH_MAX], spare[NAME_LEN + 2], path[PATH_MAX], made[PATH_MAX];
	int fd = -1, ret;

	if (!s->recycle || !s->ops->allocate || !s->ops->mark)
		return 0;
	ret = check_file_name(name);
	ret = ret ? ret : spare_dir(s, dir, sizeof(dir));
	ret = ret ? ret : s->ops->mkdir_p(dir);
	if (ret == 0 && snprintf(spare, sizeof(spare), ".reserve-%s", name) > NAME_LEN)
		ret = err_set(-ENAMETOOLONG, "reserve-%s: name too long", name);
	ret = ret ? ret : join_path(path, sizeof(path), dir, spare + 1, NULL);
	ret = ret ? ret : join_path(made, sizeof(made), dir, spare, NULL);
	if (ret)
		return ret;
	/* its storage is allocated out of the writers' sight: a file written
	 * over it meanwhile would get the reservation's length back after
	 * its commit cut it to its own */
	ret = reserve_open(s, path, made, &fd);
	ret = ret ? ret : s->ops->allocate(fd, size);
	ret = ret ? ret : s->ops->mark(fd, 0);
	ret = ret ? ret : s->ops->rename(made, path);
	if (fd >= 0)
		s->ops->close(fd);
	if (ret)
		s->ops->unlink(made);
	return ret ? report(ret, "%s: cannot reserve %" PRIu64 " bytes", path, size) : 0;
}

int store_spares_drop(struct store *s)
{
	char dir[PATH_MAX];
	int ret = spare_dir(s, dir, sizeof(dir));

	ret = ret ? ret : s->ops->remove_tree(dir);
	return ret == -ENOENT ? 0 : ret ? report(ret, "%s: cannot remove", dir) : 0;
}

int store_file_create(struct store_ckpt *c, const char *name, struct store_file **out)
{
	const struct store_tier_ops *ops = c->s->ops;
	struct store_stat st;
	struct store_file *f;
	int ret;

	err_clear();
	*out = NULL;
	ret = file_new(c, name, &f);
	if (ret)
		return ret;
	/* rename refuses to replace too; failing here saves writing the data. */
	if (ops->stat(f->path, &st) == 0) {
		ret = err_set(-EEXIST, "%s/%s: already committed", c->name, name);
		goto fail;
	}
	ret = take_spare(c->s, f) ? 0 : ops->create(f->tmp, &f->fd);
	if (ret == -EEXIST) {
		ret = err_set(ret, "%s/%s%s exists: another process is writing %s, or one died doing so",
			      c->name, name, TMP_SUFFIX, name);
		goto fail;
	}
	if (ret) {
		ret = report(ret, "%s: cannot create", f->tmp);
		goto fail;
	}
	*out = f;
	return 0;

fail:
	free(f);
	return ret;
}

static void keep_head(struct store_file *f, const char *p, size_t n)
{
	size_t take = sizeof(f->head) - f->head_len;

	if (take > n)
		take = n;
	memcpy(f->head + f->head_len, p, take);
	f->head_len += take;
}

/* Write all of buf at offset through fd (pwrite) or, at offset < 0, at the
 * descriptor's position (write). */
static int write_all(struct store_file *f, int fd, const void *buf, size_t len, int64_t offset)
{
	const struct store_tier_ops *ops = f->c->s->ops;
	uint64_t end = (offset < 0 ? f->size : (uint64_t)offset) + len;
	const char *p = buf;
	int ret;

	while (len) {
		ssize_t n = offset < 0 ? ops->write(fd, p, len) : ops->pwrite(fd, p, len, (uint64_t)offset);

		if (n <= 0)
			return n < 0 ? (int)n : -EIO;
		p += n;
		len -= (size_t)n;
		if (offset >= 0)
			offset += n;
	}
	/* written over a spare: the bytes before the mark (in order: the
	 * stages are written one after the other) */
	ret = f->recycled ? ops->mark(f->fd, (int64_t)end) : 0;
	return ret ? report(ret, "%s: cannot mark how far it is written", f->tmp) : 0;
}

/* On the first write: stage through O_DIRECT if the tier and the file system
 * allow it and the configuration does not forbid it. */
static void stage_setup(struct store_file *f)
{
	const struct store_tier_ops *ops = f->c->s->ops;

	f->stage_tried = 1;
	if (!ops->open_direct || !ops->pwrite || strcmp(cfg_str(CFG_DIRECT_IO), "on") != 0)
		return;
	f->stage = aligned_alloc(STORE_DIRECT_ALIGN, STAGE_SIZE);
	if (f->stage && ops->open_direct(f->tmp, &f->dfd) == 0)
		return;
	log_debug("%s: no direct I/O; writing through the page cache", f->tmp);
	free(f->stage);
	f->stage = NULL;
	f->dfd = -1;
}

/* One full stage to the disk with direct I/O, or through the page cache once
 * the file system refused a direct write (*direct is then cleared). */
static int stage_out(struct store_file *f, int *direct, const unsigned char *buf, size_t n,
		     uint64_t off)
{
	int ret;

	if (*direct) {
		ret = write_all(f, f->dfd, buf, n, (int64_t)off);
		if (ret != -EINVAL)
			return ret;
		/* the file system took the open but not the write */
		log_debug("%s: direct write refused; writing through the page cache", f->tmp);
		*direct = 0;
	}
	return write_all(f, f->fd, buf, n, (int64_t)off);
}

static void *stage_writer_main(void *arg)
{
	struct stage_writer *b = arg;
	int direct = 1, ret;

	pthread_mutex_lock(&b->lock);
	for (;;) {
		while (!b->buf && !b->stop)
			pthread_cond_wait(&b->cv, &b->lock);
		if (!b->buf)
			break;
		pthread_mutex_unlock(&b->lock);
		ret = b->err ? 0 : stage_out(b->f, &direct, b->buf, b->len, b->off);
		pthread_mutex_lock(&b->lock);
		if (ret && !b->err)
			b->err = ret;
		b->spare = b->buf;
		b->buf = NULL;
		pthread_cond_broadcast(&b->cv);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* The thread and the second stage buffer; -errno (the caller then writes
 * its stages itself). */
static int stage_writer_start(struct store_file *f)
{
	struct stage_writer *b = calloc(1, sizeof(*b));
	int ret = -ENOMEM;

	if (!b)
		return ret;
	b->f = f;
	b->spare = aligned_alloc(STORE_DIRECT_ALIGN, STAGE_SIZE);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cv, NULL);
	if (b->spare)
		ret = -pthread_create(&b->tid, NULL, stage_writer_main, b);
	if (ret) {
		pthread_mutex_destroy(&b->lock);
		pthread_cond_destroy(&b->cv);
		free(b->spare);
		free(b);
		return ret;
	}
	f->bg = b;
	return 0;
}

/* Wait until the stage being written is out; the first failed write's error. */
static int stage_wait(struct store_file *f)
{
	struct stage_writer *b = f->bg;
	int ret;

	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	while (b->buf)
		pthread_cond_wait(&b->cv, &b->lock);
	ret = b->err;
	pthread_mutex_unlock(&b->lock);
	return ret;
}

/* The final partial stage: its whole blocks with direct I/O, the last
 * partial block through the page cache, since direct I/O needs whole
 * blocks. Up to a stage of each file went through the page cache before:
 * 4 MiB a file on average, obtained page by page and written again by the
 * commit's fsync (8 processes' images: 32 MiB). */
static int stage_final(struct store_file *f, size_t n)
{
	size_t whole = f->dfd >= 0 ? n & ~(size_t)(STORE_DIRECT_ALIGN - 1) : 0;
	int direct = 1, ret = 0;

	if (whole) {
		ret = stage_out(f, &direct, f->stage, whole, f->stage_off);
		if (!direct) {
			f->c->s->ops->close(f->dfd);
			f->dfd = -1;
		}
	}
	if (!ret && n > whole)
		ret = write_all(f, f->fd, f->stage + whole, n - whole, (int64_t)(f->stage_off + whole));
	return ret;
}

/* Write the staged bytes: full stages with direct I/O, handed to the stage
 * writer, the final partial one (final=1) with stage_final. */
static int stage_flush(struct store_file *f, int final)
{
	size_t n = f->staged;
	int ret = stage_wait(f);

	if (ret || !n)
		return ret;
	if (final) {
		ret = stage_final(f, n);
	} else if (f->dfd < 0) {
		ret = write_all(f, f->fd, f->stage, n, (int64_t)f->stage_off);
	} else if (f->bg || stage_writer_start(f) == 0) {
		struct stage_writer *b = f->bg;

		pthread_mutex_lock(&b->lock);
		b->buf = f->stage;
		b->len = n;
		b->off = f->stage_off;
		f->stage = b->spare;
		b->spare = NULL;
		pthread_cond_broadcast(&b->cv);
		pthread_mutex_unlock(&b->lock);
	} else {
		int direct = 1;

		ret = stage_out(f, &direct, f->stage, n, f->stage_off);
		if (!direct) {
			f->c->s->ops->close(f->dfd);
			f->dfd = -1;
		}
	}
	if (ret)
		return ret;
	f->stage_off += n;
	f->staged = 0;
	return 0;
}

static int stage_write(struct store_file *f, const char *p, size_t len)
{
	while (len) {
		size_t n = STAGE_SIZE - f->staged < len ? STAGE_SIZE - f->staged : len;
		int ret;

		memcpy(f->stage + f->staged, p, n);
		f->staged += n;
		p += n;
		len -= n;
		if (f->staged == STAGE_SIZE) {
			ret = stage_flush(f, 0);
			if (ret)
				return ret;
		}
	}
	return 0;
}

static void stage_free(struct store_file *f)
{
	struct stage_writer *b = f->bg;

	if (b) {
		pthread_mutex_lock(&b->lock);
		b->stop = 1;
		pthread_cond_broadcast(&b->cv);
		pthread_mutex_unlock(&b->lock);
		pthread_join(b->tid, NULL);
		pthread_mutex_destroy(&b->lock);
		pthread_cond_destroy(&b->cv);
		free(b->spare);
		free(b);
		f->bg = NULL;
	}
	if (f->dfd >= 0)
		f->c->s->ops->close(f->dfd);
	f->dfd = -1;
	free(f->stage);
	f->stage = NULL;
}

static int file_write(struct store_file *f, const void *buf, size_t len, const uint32_t *crc)
{
	int ret;

	if (f->error)
		return err_set(f->error, "%s: an earlier write failed", f->tmp);
	if (f->fd < 0)
		return err_set(-EBADF, "%s/%s: already committed", f->c->name, f->name);
	err_clear();
	ret = FAULT(STORE_FILE_WRITE);
	if (ret)
		goto fail;
	if (!f->stage_tried)
		stage_setup(f);
	/* after bytes written at an offset through the descriptor, its
	 * position is not the file's end */
	ret = f->stage ? stage_write(f, buf, len) :
	      write_all(f, f->fd, buf, len, f->by_fd ? (int64_t)f->size : -1);
	if (ret)
		goto fail;
	f->crc = crc ? crc32c_combine(f->crc, *crc, len) : crc32c(f->crc, buf, len);
	keep_head(f, buf, len);
	f->size += len;
	return 0;

fail:
	f->error = ret;
	return report(ret, "%s: cannot write", f->tmp);
}

int store_file_write(void *file, const void *buf, size_t len)
{
	return file_write(file, buf, len, NULL);
}

int store_file_write_crc(void *file, const void *buf, size_t len, uint32_t crc)
{
	return file_write(file, buf, len, &crc);
}

/* A file still open for writing, its stage set up (or refused) */
static int file_writable(struct store_file *f)
{
	if (f->error)
		return err_set(f->error, "%s: an earlier write failed", f->tmp);
	if (f->fd < 0)
		return err_set(-EBADF, "%s/%s: already committed", f->c->name, f->name);
	if (!f->stage_tried)
		stage_setup(f);
	return 0;
}

int store_file_room(struct store_file *f, void **buf, size_t *len)
{
	int ret = file_writable(f);

	if (ret)
		return ret;
	if (!f->stage)
		return -EOPNOTSUPP;
	*buf = f->stage + f->staged;
	*len = STAGE_SIZE - f->staged;
	return 0;
}

int store_file_done(struct store_file *f, size_t n)
{
	const unsigned char *p;
	int ret;

	if (f->error)
		return err_set(f->error, "%s: an earlier write failed", f->tmp);
	if (!f->stage || f->fd < 0 || n > STAGE_SIZE - f->staged)
		return err_set(-EINVAL, "%s: %zu bytes done, more than the room given", f->tmp, n);
	err_clear();
	ret = FAULT(STORE_FILE_WRITE);
	if (ret) {
		f->error = ret;
		return report(ret, "%s: cannot write", f->tmp);
	}
	p = f->stage + f->staged;
	f->crc = crc32c(f->crc, p, n);
	keep_head(f, (const char *)p, n);
	f->size += n;
	f->staged += n;
	ret = f->staged == STAGE_SIZE ? stage_flush(f, 0) : 0;
	if (ret) {
		f->error = ret;
		return report(ret, "%s: cannot write", f->tmp);
	}
	return 0;
}

int store_file_write_direct(struct store_file *f, const void *buf, size_t len)
{
	const uintptr_t mask = STORE_DIRECT_ALIGN - 1;
	int ret = file_writable(f), direct = 1;

	if (ret)
		return ret;
	if (f->dfd < 0 || f->staged || ((uintptr_t)buf & mask) || (len & mask) || (f->size & mask))
		return -EOPNOTSUPP;
	err_clear();
	ret = FAULT(STORE_FILE_WRITE);
	/* a stage handed to the writer thread goes first: it is below */
	ret = ret ? ret : stage_wait(f);
	ret = ret ? ret : stage_out(f, &direct, buf, len, f->size);
	if (!ret && !direct) {
		f->c->s->ops->close(f->dfd);
		f->dfd = -1;
	}
	if (ret) {
		f->error = ret;
		return report(ret, "%s: cannot write", f->tmp);
	}
	keep_head(f, (const char *)buf, len);
	f->by_fd = 1;           /* the content's CRC: vouched for, or read back */
	f->size += len;
	f->stage_off = f->size;
	return 0;
}

int store_file_fd(struct store_file *f, uint64_t *size)
{
	if (f->error || f->fd < 0)
		return -EBADF;
	if (!f->stage_tried)
		stage_setup(f);
	if (f->stage || !f->c->s->ops->pwrite)
		return -EOPNOTSUPP;
	*size = f->size;
	return f->fd;
}

int store_file_wrote(struct store_file *f, uint64_t len, int err)
{
	if (f->error)
		return err_set(f->error, "%s: an earlier write failed", f->tmp);
	err_clear();
	err = err ? err : FAULT(STORE_FILE_WRITE);
	if (err) {
		f->error = err;
		return report(err, "%s: cannot write", f->tmp);
	}
	f->by_fd = 1;
	f->size += len;
	err = f->recycled ? f->c->s->ops->mark(f->fd, (int64_t)f->size) : 0;
	if (err) {
		f->error = err;
		return report(err, "%s: cannot mark how far it is written", f->tmp);
	}
	return 0;
}

void store_file_vouch(struct store_file *f, uint32_t crc)
{
	f->vouched = 1;
	f->vouch_crc = crc;
}

/* The CRC and first bytes of a file the caller wrote (some of) through its
 * descriptor: read back, unless its CRC was vouched for and the head is
 * all that is missing */
static int read_back(struct store_file *f)
{
	const struct store_tier_ops *ops = f->c->s->ops;
	uint64_t end = f->vouched ? sizeof(f->head) : f->size, off = 0;
	char *buf = malloc(VERIFY_BUF);
	uint32_t crc = 0;
	ssize_t n = 0;
	int fd = -1, ret = buf ? ops->open_read(f->tmp, &fd) : -ENOMEM;

	f->head_len = 0;
	while (!ret && off < end &&
	       (n = ops->pread(fd, buf, end - off < VERIFY_BUF ? end - off : VERIFY_BUF, off)) > 0) {
		crc = crc32c(crc, buf, (size_t)n);
		keep_head(f, buf, (size_t)n);
		off += (uint64_t)n;
	}
	if (!ret && n < 0)
		ret = (int)n;
	if (!ret && !f->vouched && off != f->size)
		ret = -EIO;
	if (fd >= 0)
		ops->close(fd);
	free(buf);
	if (!ret)
		f->crc = f->vouched ? f->vouch_crc : crc;
	return ret ? report(ret, "%s: cannot read back", f->tmp) : 0;
}

static int close_file(struct store_file *f)
{
	int ret = f->c->s->ops->close(f->fd);

	f->fd = -1;
	return ret;
}

/* Each step waits for the one before it to be durable: the data before the
 * name points at it, the name before the index says the file exists. With
 * rec, the record is not appended but handed back (store_ckpt_record_files
 * appends it with others). */
static int commit_steps(struct store_file *f, struct store_file_record *rec)
{
	const struct store_tier_ops *ops = f->c->s->ops;
	struct index_record r;
	int ret;

	if (f->stage) {
		ret = stage_flush(f, 1);
		stage_free(f);
		if (ret)
			return report(ret, "%s: cannot write", f->tmp);
	}
	/* a recycled file may be longer than what was written over it; cut,
	 * its length says how far it is written, as a new file's does */
	ret = f->recycled ? ops->truncate(f->fd, f->size) : 0;
	ret = ret ? ret : f->recycled ? ops->mark(f->fd, -1) : 0;
	if (ret)
		return report(ret, "%s: cannot cut to %" PRIu64 " bytes", f->tmp, f->size);
	if (f->by_fd) {
		ret = read_back(f);
		if (ret)
			return ret;
	} else if (f->vouched && f->vouch_crc != f->crc) {
		return err_set(-EBADMSG, "%s: CRC %08" PRIx32 ", not its source's %08" PRIx32
			       ": damaged on its way", f->tmp, f->crc, f->vouch_crc);
	}
	ret = FAULT(STORE_FILE_FSYNC);
	ret = ret ? ret : ops->fsync(f->fd);
	if (ret)
		return report(ret, "%s: cannot fsync", f->tmp);
	ret = close_file(f);
	if (ret)
		return report(ret, "%s: cannot close", f->tmp);
	ret = FAULT(STORE_FILE_RENAME);
	ret = ret ? ret : ops->rename(f->tmp, f->path);
	if (ret)
		return report(ret, "%s: cannot rename to %s", f->tmp, f->name);
	f->renamed = 1;
	ret = FAULT(STORE_DIR_FSYNC);
	ret = ret ? ret : ops->fsync_dir(f->c->dir);
	if (ret)
		return report(ret, "%s: cannot fsync the checkpoint directory", f->c->dir);
	record_init(&r, f->c->annex ? INDEX_ANNEX : INDEX_FILE, f->c->name);
	snprintf(r.name, sizeof(r.name), "%s", f->name);
	r.size = f->size;
	r.crc = f->crc;
	/* Recorded now, while the bytes are known good, so that verify still
	 * hands a file whose magic was damaged to the image reader. */
	r.image = img_has_magic(f->head, f->head_len);
	if (rec) {
		rec->info = (struct store_file_info){ .size = r.size, .crc = r.crc };
		snprintf(rec->info.name, sizeof(rec->info.name), "%s", r.name);
		rec->image = r.image;
		return 0;
	}
	return index_append(&f->c->s->index, &r);
}

int store_file_adopt(struct store_ckpt *c, const char *name)
{
	const struct store_tier_ops *ops = c->s->ops;
	struct store_file *f = NULL;
	char *buf = NULL;
	ssize_t n;
	int ret;

	err_clear();
	ret = file_new(c, name, &f);
	if (ret)
		return ret;
	buf = malloc(VERIFY_BUF);
	ret = buf ? ops->open_read(f->tmp, &f->fd) : err_set(-ENOMEM, "out of memory");
	if (ret == -ENOENT) {
		ret = err_set(ret, "%s/%s: was never written (no %s%s)", c->name, name, name, TMP_SUFFIX);
		goto out;
	}
	if (ret) {
		ret = report(ret, "%s: cannot open", f->tmp);
		goto out;
	}
	/* the size and CRC the FILE record vouches for, read back once */
	while ((n = ops->pread(f->fd, buf, VERIFY_BUF, f->size)) > 0) {
		f->crc = crc32c(f->crc, buf, (size_t)n);
		keep_head(f, buf, (size_t)n);
		f->size += (uint64_t)n;
	}
	if (n < 0) {
		ret = report((int)n, "%s: cannot read", f->tmp);
		goto out;
	}
	ret = commit_steps(f, NULL);
	if (ret == 0)
		f->committed = 1;
out:
	if (f && f->fd >= 0)
		close_file(f);
	free(f);
	free(buf);
	return ret;
}

static int file_commit(struct store_file *f, struct store_file_record *rec)
{
	int ret;

	if (f->committed)
		return 0;
	if (f->error)
		return err_set(f->error, "%s/%s: not committed: a write to it failed", f->c->name, f->name);
	if (f->fd < 0 || f->renamed)
		return err_set(-EINVAL, "%s/%s: not committed: an earlier commit failed", f->c->name, f->name);
	err_clear();
	if (f->c->early) {
		/* an annex file written before the seal: only a COMPLETE
		 * checkpoint takes it */
		struct index_view v;
		struct index_ckpt *ck;

		ret = load_ckpt(f->c->s, f->c->name, &v, &ck);
		if (ret)
			return ret;
		ret = ck->info.state == STORE_COMPLETE ? 0 :
		      err_set(-EINVAL, "%s: %s, not COMPLETE; nothing can be added to its annex",
			      f->c->name, store_state_name(ck->info.state));
		index_view_free(&v);
		if (ret)
			return ret;
	}
	ret = commit_steps(f, rec);
	if (ret) {
		f->error = ret;
		return ret;
	}
	f->committed = 1;
	log_debug("%s: committed %s (%" PRIu64 " bytes)%s", f->c->dir, f->name, f->size,
		  rec ? ", its record left to the caller" : "");
	return 0;
}

int store_file_commit(struct store_file *f)
{
	return file_commit(f, NULL);
}

int store_file_commit_unrecorded(struct store_file *f, struct store_file_record *rec)
{
	if (f->c->annex)
		return err_set(-EINVAL, "%s/%s: an annex file is recorded as it commits", f->c->name, f->name);
	return file_commit(f, rec);
}

static int stat_file(struct store *s, int dirfd, const char *ckpt, const char *name,
		     struct store_stat *st);

/* What a FILES record vouches for (the seal does not stat its files again):
 * each file in place with its size */
static int records_in_place(struct store_ckpt *c, const struct store_file_record *recs, unsigned n)
{
	const struct store_tier_ops *ops = c->s->ops;
	struct store_stat st;
	int dirfd = -1, ret = 0;

	if (!ops->open_dir || !ops->stat_at || ops->open_dir(c->dir, &dirfd))
		dirfd = -1;
	for (unsigned i = 0; i < n && !ret; i++) {
		const struct store_file_info *fi = &recs[i].info;

		ret = check_file_name(fi->name);
		ret = ret ? ret : stat_file(c->s, dirfd, c->name, fi->name, &st);
		if (ret == -ENOENT)
			ret = err_set(-EIO, "%s/%s is missing", c->name, fi->name);
		else if (ret && !err_msg()[0])
			ret = err_set(ret, "%s/%s: %s", c->name, fi->name, strerror(-ret));
		else if (!ret && (!st.is_file || st.size != fi->size))
			ret = err_set(-EIO, "%s/%s has %" PRIu64 " bytes, its record says %" PRIu64, c->name,
				      fi->name, st.is_file ? st.size : 0, fi->size);
	}
	if (dirfd >= 0)
		ops->close(dirfd);
	return ret;
}

int store_ckpt_record_files(struct store_ckpt *c, const struct store_file_record *recs, unsigned n)
{
	struct index_record *files = calloc(INDEX_FILES_MAX, sizeof(*files));
	struct index_hold h;
	char line[INDEX_MAX_LINE];
	unsigned done = 0, take = INDEX_FILES_MAX;
	size_t len;
	int ret;

	err_clear();
	if (!files)
		return err_set(-ENOMEM, "out of memory");
	ret = records_in_place(c, recs, n);
	if (ret) {
		free(files);
		return ret;
	}
	ret = index_lock(&c->s->index, &h);
	/* as many files a record as fit a line of the index */
	while (ret == 0 && done < n) {
		unsigned k = n - done < take ? n - done : take;

		for (unsigned i = 0; i < k; i++) {
			const struct store_file_record *fr = &recs[done + i];

			record_init(&files[i], INDEX_FILE, c->name);
			snprintf(files[i].name, sizeof(files[i].name), "%s", fr->info.name);
			files[i].size = fr->info.size;
			files[i].crc = fr->info.crc;
			files[i].image = fr->image;
		}
		ret = index_encode_files(files, k, line, sizeof(line), &len);
		if (ret == -E2BIG && k > 1) {
			take = k / 2;
			ret = 0;
			continue;
		}
		ret = ret ? err_set(ret, "%s: cannot encode a FILES record: %s", c->name, strerror(-ret))
			  : index_append_files(&h, line, len, c->name);
		done += ret ? 0 : k;
	}
	index_unlock(&h);
	free(files);
	return ret;
}

void store_file_free(struct store_file **fp)
{
	struct store_file *f = *fp;

	if (!f)
		return;
	stage_free(f);
	if (f->fd >= 0)
		close_file(f);
	/* A file without its FILE record must not linger under its final name
	 * either: nothing vouches for it. */
	if (!f->renamed)
		f->c->s->ops->unlink(f->tmp);
	else if (!f->committed)
		f->c->s->ops->unlink(f->path);
	free(f);
	*fp = NULL;
}

/* ---- sealing ---- */

/* Files of the checkpoint directory named *.tmp whose final name has no
 * FILE record: writers that did not finish, for the message. */
static void unfinished_files(struct store *s, const struct index_ckpt *ck, const char *dir,
			     char *buf, size_t len)
{
	char **names = NULL;
	size_t count = 0, used = 0;

	buf[0] = '\0';
	if (s->ops->list(dir, &names, &count))
		return;
	if (count > 1)
		qsort(names, count, sizeof(*names), name_cmp);
	for (size_t i = 0; i < count && used < len; i++) {
		size_t n = strlen(names[i]);
		int known = 0;

		if (!ends_with(names[i], TMP_SUFFIX))
			continue;
		for (size_t k = 0; k < ck->nfiles; k++)
			known |= strlen(ck->files[k].info.name) == n - strlen(TMP_SUFFIX) &&
				 strncmp(ck->files[k].info.name, names[i], n - strlen(TMP_SUFFIX)) == 0;
		if (!known)
			used += (size_t)snprintf(buf + used, len - used, "%s%.*s", used ? ", " : "",
						 (int)(n - strlen(TMP_SUFFIX)), names[i]);
	}
	store_names_free(names, count);
}

static int __attribute__((format(printf, 3, 4))) because(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -EIO;
}

/* One file of a checkpoint: through its directory when the tier can */
static int stat_file(struct store *s, int dirfd, const char *ckpt, const char *name,
		     struct store_stat *st)
{
	char path[PATH_MAX];

	if (dirfd >= 0)
		return s->ops->stat_at(dirfd, name, st);
	if (join_path(path, sizeof(path), s->dir, ckpt, name))
		return -ENAMETOOLONG;
	return s->ops->stat(path, st);
}

/* Is every file the index lists in place with its size? On the first that
 * is not, -EIO and why in `why`. The names are plain (check_file_name):
 * each is looked up in the checkpoint's directory, held open, not by a
 * walk of its whole path (65,536 of them at 65K ranks, bench/scale).
 * Files of FILES records were checked by their recorder as it appended
 * them (store_ckpt_record_files: on its node, 64 files each where the
 * seal would stat them all one after another): the seal (all=0) skips
 * them. Restart selection (all=1) does not: one may have gone since, and
 * an older checkpoint must be chosen then. */
static int files_in_place(struct store *s, const struct index_ckpt *ck, int all, char *why,
			  size_t len)
{
	char dir[PATH_MAX];
	struct store_stat st;
	int dirfd = -1, ret = 0;

	if (s->ops->open_dir && s->ops->stat_at &&
	    (join_path(dir, sizeof(dir), s->dir, ck->info.name, NULL) ||
	     s->ops->open_dir(dir, &dirfd)))
		dirfd = -1;     /* each file by its path, which says what is wrong */
	for (size_t i = 0; i < ck->nfiles && !ret; i++) {
		const struct store_file_info *fi = &ck->files[i].info;

		if (ck->files[i].vouched && !all)
			continue;
		ret = stat_file(s, dirfd, ck->info.name, fi->name, &st);
		if (ret == -ENOENT)
			ret = because(why, len, "%s is missing", fi->name);
		else if (ret == -ENAMETOOLONG)
			ret = because(why, len, "%s: path too long", fi->name);
		else if (ret)
			ret = because(why, len, "%s: %s", fi->name, strerror(-ret));
		else if (!st.is_file || st.size != fi->size)
			ret = because(why, len, "%s has %" PRIu64 " bytes, the index says %" PRIu64,
				      fi->name, st.is_file ? st.size : 0, fi->size);
	}
	if (dirfd >= 0)
		s->ops->close(dirfd);
	return ret;
}

static int commit_check(struct store *s, const struct index_ckpt *ck, unsigned expected,
			const char *dir, char *why, size_t len)
{
	char unfinished[256];
	unsigned need = expected ? expected : 1;

	if (ck->nfiles < need) {
		unfinished_files(s, ck, dir, unfinished, sizeof(unfinished));
		return because(why, len, "%u of %u expected file(s) committed%s%s%s", (unsigned)ck->nfiles,
			       need, unfinished[0] ? " (never committed: " : "", unfinished,
			       unfinished[0] ? ")" : "");
	}
	return files_in_place(s, ck, 0, why, len);
}

static int append_failed(struct index_hold *h, const char *ckpt, const char *reason)
{
	struct index_record r;
	char msg[512];
	int ret;

	record_init(&r, INDEX_FAILED, ckpt);
	snprintf(r.reason, sizeof(r.reason), "%s", reason);
	snprintf(msg, sizeof(msg), "%s", err_msg());
	ret = index_append_held(h, &r);
	if (ret)
		log_error("%s: could not mark %s FAILED: %s", h->ix->path, ckpt, err_msg());
	err_set(-EIO, "%s", msg);       /* the caller reports the first failure */
	return ret;
}

static int seal(struct store_ckpt *c, struct index_hold *h, const struct index_ckpt *ck, unsigned expected)
{
	struct index_record r;
	char why[400];
	int ret;

	if (ck->info.state == STORE_COMPLETE)
		return 0;       /* another rank sealed it */
	if (ck->info.state != STORE_PARTIAL)
		return err_set(-EIO, "%s: already %s%s%s; not committing", c->name,
			       store_state_name(ck->info.state), ck->info.reason[0] ? ": " : "", ck->info.reason);
	if (commit_check(c->s, ck, expected, c->dir, why, sizeof(why))) {
		err_set(-EIO, "%s: not committed: %s", c->name, why);
		append_failed(h, c->name, why);
		return -EIO;
	}
	record_init(&r, INDEX_COMPLETE, c->name);
	r.files = (unsigned)ck->nfiles;
	r.bytes = ck->info.bytes;
	ret = FAULT(STORE_CKPT_COMMIT);
	if (ret == 0)
		ret = index_append_held(h, &r);
	if (ret) {
		/* The COMPLETE record may even be in the file (its fsync failed):
		 * FAILED after it wins, matching what the caller is told. */
		ret = report(ret, "%s: not committed", c->name);
		snprintf(why, sizeof(why), "commit failed: %s", err_msg());
		append_failed(h, c->name, why);
	}
	return ret;
}

int store_ckpt_commit(struct store_ckpt *c, unsigned expected)
{
	struct index_hold h;
	struct index_view v;
	struct index_ckpt *ck;
	int ret;

	err_clear();
	/* Under the lock, so the files counted are the files the COMPLETE
	 * record seals: a FILE appended later does not belong to it. */
	ret = index_lock(&c->s->index, &h);
	if (ret)
		return ret;
	/* its own records, from its BEGIN on, when this handle began it */
	ret = c->begun_at ? index_view_load_one_held(&h, c->name, c->begun_at, &v) : -ESTALE;
	if (ret == 0 && c->s->named_to && c->s->named_to <= c->begun_at) {
		/* no begin of this handle since: nothing but its BEGIN lies
		 * between where that begin read to and here, so the next begin
		 * reads on from here (not through this checkpoint's FILE
		 * records: 65,536 at 65K ranks, before the next CHECKPOINT) */
		if (v.max_number > c->s->max_named)
			c->s->max_named = v.max_number;
		c->s->named_to = v.stats.end;
	}
	if (ret == -ESTALE)
		ret = index_view_load_held(&h, &v);
	if (ret)
		goto out_unlock;
	ck = index_view_find(&v, c->name);
	if (ck)
		ret = seal(c, &h, ck, expected);
	else
		ret = err_set(-ENOENT, "%s: not in the index (its BEGIN record is lost)", c->name);
	index_view_free(&v);
out_unlock:
	index_unlock(&h);
	if (ret == 0)
		log_debug("%s: %s COMPLETE", c->s->dir, c->name);
	return ret;
}

int store_ckpt_abort(struct store_ckpt *c, const char *reason)
{
	struct index_record r;
	char earlier[512];
	int ret;

	/* Called while handling an error: keep that error's message for the
	 * caller unless the abort itself fails. reason is often err_msg(). */
	snprintf(earlier, sizeof(earlier), "%s", err_msg());
	record_init(&r, INDEX_FAILED, c->name);
	snprintf(r.reason, sizeof(r.reason), "%s", reason && *reason ? reason : "aborted");
	ret = index_append(&c->s->index, &r);
	if (ret == 0)
		err_set(0, "%s", earlier);
	return ret;
}

/* ---- reading the store ---- */

/* Usable for restart: COMPLETE, every FILE record it sealed still readable
 * in the index, every file in place with its size. */
static int usable(struct store *s, const struct index_ckpt *ck, char *why, size_t len)
{
	if (ck->info.state != STORE_COMPLETE) {
		snprintf(why, len, "%s", store_state_name(ck->info.state));
		return 0;
	}
	if (ck->file_records < ck->sealed_files || ck->nfiles == 0) {
		snprintf(why, len, "the index lost %u of its %u FILE record(s) (damaged index)",
			 ck->sealed_files - ck->file_records, ck->sealed_files);
		return 0;
	}
	return files_in_place(s, ck, 1, why, len) == 0;
}

static const struct index_ckpt *select_in(struct store *s, const struct index_view *v)
{
	char why[400];

	for (size_t i = v->count; i-- > 0;) {
		const struct index_ckpt *ck = &v->ckpts[i];

		if (ck->info.state != STORE_COMPLETE)
			continue;
		if (usable(s, ck, why, sizeof(why)))
			return ck;
		log_warn("%s: %s skipped for restart: %s", s->dir, ck->info.name, why);
	}
	return NULL;
}

int store_select(struct store *s, char *name, size_t len)
{
	const struct index_ckpt *ck;
	struct index_view v;
	unsigned counts[4] = { 0 };
	int ret;

	err_clear();
	ret = index_view_load(&s->index, &v);
	if (ret)
		return ret;
	ck = select_in(s, &v);
	if (ck && (size_t)snprintf(name, len, "%s", ck->info.name) >= len)
		ret = err_set(-ENAMETOOLONG, "%s: name buffer too small", ck->info.name);
	if (!ck) {
		for (size_t i = 0; i < v.count; i++)
			counts[v.ckpts[i].info.state]++;
		ret = err_set(-ENOENT, "job %s: no complete checkpoint to restart from (%u complete but "
			      "damaged, %u partial, %u failed, %u pruned)", s->job,
			      counts[STORE_COMPLETE], counts[STORE_PARTIAL], counts[STORE_FAILED],
			      counts[STORE_PRUNED]);
	}
	index_view_free(&v);
	return ret;
}

int store_list(struct store *s, struct store_ckpt_info **list, size_t *count, unsigned *bad_records)
{
	const struct index_ckpt *cur;
	struct index_view v;
	int ret;

	err_clear();
	*list = NULL;
	*count = 0;
	ret = index_view_load(&s->index, &v);
	if (ret)
		return ret;
	cur = select_in(s, &v);
	*list = calloc(v.count ? v.count : 1, sizeof(**list));
	if (!*list) {
		index_view_free(&v);
		return err_set(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < v.count; i++) {
		(*list)[i] = v.ckpts[i].info;
		(*list)[i].current = &v.ckpts[i] == cur;
	}
	*count = v.count;
	if (bad_records)
		*bad_records = v.stats.bad;     /* torn appends are not damage */
	index_view_free(&v);
	return 0;
}

int store_ckpt_files(struct store *s, const char *name, struct store_file_info **files, size_t *count)
{
	struct index_view v;
	struct index_ckpt *ck;
	int ret;

	err_clear();
	*files = NULL;
	*count = 0;
	ret = load_ckpt(s, name, &v, &ck);
	if (ret)
		return ret;
	*files = malloc(ck->nfiles ? ck->nfiles * sizeof(**files) : 1);
	if (*files) {
		for (size_t i = 0; i < ck->nfiles; i++)
			(*files)[i] = ck->files[i].info;
		*count = ck->nfiles;
	} else {
		ret = err_set(-ENOMEM, "out of memory");
	}
	index_view_free(&v);
	return ret;
}

int store_index_check(struct store *s)
{
	struct index_scan_stats st;
	int ret;

	err_clear();
	ret = index_check(&s->index, &st);
	if (ret)
		return ret;
	if (st.bad)
		return err_set(-EBADMSG, "%s: damaged record at byte %" PRIu64 " (%u damaged record(s), "
			       "%u intact; damaged ones are ignored)", s->index.path, st.first_bad, st.bad,
			       st.records);
	if (st.torn)
		log_info("%s: %u torn record(s) from interrupted appends, ignored", s->index.path, st.torn);
	return 0;
}

/* ---- verification ---- */

/* A checkpoint directory the index does not know. */
static int orphan_dir(struct store *s, const char *name)
{
	char dir[PATH_MAX];
	struct store_stat st;

	return plain_name(name, NAME_LEN) && join_path(dir, sizeof(dir), s->dir, name, NULL) == 0 &&
	       s->ops->stat(dir, &st) == 0 && st.is_dir;
}

static int not_established(const struct index_ckpt *ck)
{
	const char *name = ck->info.name;

	switch (ck->info.state) {
	case STORE_PARTIAL:
		return err_set(-EBADMSG, "%s: not established (PARTIAL: no commit record)", name);
	case STORE_FAILED:
		return err_set(-EBADMSG, "%s: not established (FAILED: %s)", name,
			       ck->info.reason[0] ? ck->info.reason : "no reason recorded");
	case STORE_PRUNED:
		return err_set(-EBADMSG, "%s: not established (PRUNED: removed by prune)", name);
	case STORE_COMPLETE:
		break;
	}
	return 0;
}

static int crc_file(const struct store_tier_ops *ops, int fd, uint64_t size, uint32_t *crc)
{
	char *buf = malloc(VERIFY_BUF);
	uint64_t off = 0;
	ssize_t n = 0;

	if (!buf)
		return -ENOMEM;
	*crc = 0;
	while (off < size) {
		n = ops->pread(fd, buf, size - off < VERIFY_BUF ? (size_t)(size - off) : VERIFY_BUF, off);
		if (n <= 0)
			break;
		*crc = crc32c(*crc, buf, (size_t)n);
		off += (uint64_t)n;
	}
	free(buf);
	return n < 0 ? (int)n : off == size ? 0 : -EIO;
}

/* An image is checked chunk by chunk first, for a message that names the
 * section and chunk; the CRC of the whole file then covers every byte. */
static int verify_image(const char *ckpt, const struct store_file_info *fi, const char *path, int fd)
{
	char msg[512];
	struct img_reader *r = NULL;
	int ret;

	err_clear();
	ret = img_open_fd(fd, path, &r);
	if (ret == 0)
		ret = img_verify(r);
	img_close(&r);
	if (ret == 0)
		return 0;
	snprintf(msg, sizeof(msg), "%s", err_msg()[0] ? err_msg() : strerror(-ret));
	/* The reader's messages name the file already, by its path. */
	if (strstr(msg, path))
		return err_set(-EBADMSG, "%s", msg);
	return err_set(-EBADMSG, "%s/%s: %s", ckpt, fi->name, msg);
}

static int verify_file(struct store *s, const char *ckpt, const struct index_file *file)
{
	const struct store_tier_ops *ops = s->ops;
	const struct store_file_info *fi = &file->info;
	char path[PATH_MAX], head[IMG_MAGIC_BYTES];
	struct store_stat st;
	uint32_t crc;
	int fd, ret;

	ret = join_path(path, sizeof(path), s->dir, ckpt, fi->name);
	if (ret)
		return ret;
	ret = ops->open_read(path, &fd);
	if (ret == -ENOENT)
		return err_set(-EBADMSG, "%s/%s: missing", ckpt, fi->name);
	if (ret)
		return report(ret, "%s/%s: cannot open", ckpt, fi->name);
	ret = ops->fstat(fd, &st);
	if (ret) {
		ret = report(ret, "%s/%s", ckpt, fi->name);
	} else if (st.size != fi->size) {
		ret = err_set(-EBADMSG, "%s/%s: %" PRIu64 " bytes, the index says %" PRIu64 " (truncated or replaced)",
			      ckpt, fi->name, st.size, fi->size);
	} else if (file->image || (ops->pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
				   img_has_magic(head, sizeof(head)))) {
		ret = verify_image(ckpt, fi, path, fd);
	}
	if (ret == 0) {
		ret = crc_file(ops, fd, st.size, &crc);
		if (ret)
			ret = report(ret, "%s/%s: cannot read", ckpt, fi->name);
		else if (crc != fi->crc)
			ret = err_set(-EBADMSG, "%s/%s: content damaged (CRC32C %08" PRIx32 ", the index says %08" PRIx32 ")",
				      ckpt, fi->name, crc, fi->crc);
	}
	ops->close(fd);
	return ret;
}

/* Entries of the directory the index does not list: not errors (a rank that
 * died after the checkpoint was sealed leaves its *.tmp), but worth a note. */
static void note_extra(struct store *s, const struct index_ckpt *ck)
{
	char dir[PATH_MAX], **names = NULL;
	size_t count = 0;

	if (join_path(dir, sizeof(dir), s->dir, ck->info.name, NULL) || s->ops->list(dir, &names, &count))
		return;
	if (count > 1)
		qsort(names, count, sizeof(*names), name_cmp);
	for (size_t i = 0; i < count; i++) {
		int known = 0;

		for (size_t k = 0; k < ck->nfiles && !known; k++)
			known = strcmp(names[i], ck->files[k].info.name) == 0;
		if (!known)
			log_warn("%s: note: %s is not part of the checkpoint%s", ck->info.name, names[i],
				 ends_with(names[i], TMP_SUFFIX) ? " (left over from an unfinished write)" : "");
	}
	store_names_free(names, count);
}

int store_verify(struct store *s, const char *name)
{
	struct index_view v;
	struct index_ckpt *ck;
	int ret;

	err_clear();
	ret = load_ckpt(s, name, &v, &ck);
	if (ret == -ENOENT && orphan_dir(s, name))
		return err_set(-EBADMSG, "%s: not established (not in the index: its writer stopped "
			       "before the BEGIN record)", name);
	if (ret)
		return ret;
	ret = not_established(ck);
	if (ret == 0 && (ck->file_records < ck->sealed_files || ck->nfiles == 0))
		ret = err_set(-EBADMSG, "%s: the index lost %u of its %u FILE record(s) (damaged index)", name,
			      ck->sealed_files - ck->file_records, ck->sealed_files);
	for (size_t i = 0; ret == 0 && i < ck->nfiles; i++)
		ret = verify_file(s, name, &ck->files[i]);
	if (ret == 0)
		note_extra(s, ck);
	index_view_free(&v);
	return ret;
}

/* ---- pruning ---- */

/* Which checkpoints go: COMPLETE ones beyond the newest `keep` (0: none),
 * never the current one; PARTIAL and FAILED ones older than the newest
 * COMPLETE (their writers are gone: a later checkpoint finished after them);
 * PRUNED ones whose directory a crash left behind. */
static int doomed(const struct index_view *v, size_t i, const struct index_ckpt *cur, size_t newest,
		  unsigned newer_complete, unsigned keep)
{
	const struct index_ckpt *ck = &v->ckpts[i];

	switch (ck->info.state) {
	case STORE_COMPLETE:
		return keep && newer_complete >= keep && ck != cur;
	case STORE_PARTIAL:
	case STORE_FAILED:
		return newest != SIZE_MAX && i < newest;
	case STORE_PRUNED:
		return 1;
	}
	return 0;
}

static int prune_one(struct store *s, const struct index_ckpt *ck, unsigned keep)
{
	struct index_record r;
	char dir[PATH_MAX];
	int ret;

	ret = join_path(dir, sizeof(dir), s->dir, ck->info.name, NULL);
	if (ret)
		return ret;
	if (ck->info.state == STORE_PRUNED) {
		struct store_stat st;

		if (s->ops->stat(dir, &st) == -ENOENT)
			return 0;       /* nothing left to do */
	} else {
		/* Record first: a crash mid-removal then leaves a PRUNED
		 * checkpoint that nothing trusts, never a COMPLETE one with
		 * files missing. */
		record_init(&r, INDEX_PRUNED, ck->info.name);
		snprintf(r.reason, sizeof(r.reason), "was %s; prune keeping %u", store_state_name(ck->info.state), keep);
		ret = index_append(&s->index, &r);
		if (ret)
			return ret;
	}
	ret = FAULT(STORE_PRUNE_REMOVE);
	if (ret == 0)
		keep_spares(s, dir, ck->info.name);
	ret = ret ? ret : s->ops->remove_tree(dir);
	if (ret && ret != -ENOENT)
		return report(ret, "%s: cannot remove", dir);
	log_info("%s: pruned %s", s->dir, ck->info.name);
	return 1;
}

/* Remove checkpoint directories the index never heard of (a begin that died
 * between its mkdir and its BEGIN record) numbered below the newest
 * COMPLETE one: a begin in progress always takes a number above every
 * checkpoint the index knows, so these are abandoned. */
static int prune_orphans(struct store *s, const struct index_view *v, unsigned below, unsigned *done)
{
	char dir[PATH_MAX], **names = NULL;
	struct store_stat st;
	size_t count = 0;
	int ret;

	ret = s->ops->list(s->dir, &names, &count);
	if (ret)
		return report(ret, "%s: cannot list", s->dir);
	for (size_t i = 0; ret == 0 && i < count; i++) {
		unsigned n = index_ckpt_number(names[i]);

		if (n == 0 || n >= below || index_view_find(v, names[i]) ||
		    join_path(dir, sizeof(dir), s->dir, names[i], NULL) || s->ops->stat(dir, &st) || !st.is_dir)
			continue;
		ret = s->ops->remove_tree(dir);
		if (ret) {
			ret = report(ret, "%s: cannot remove", dir);
			break;
		}
		log_info("%s: removed %s, a checkpoint directory the index does not know", s->dir, names[i]);
		(*done)++;
	}
	store_names_free(names, count);
	return ret;
}

int store_prune(struct store *s, unsigned keep, unsigned *removed)
{
	const struct index_ckpt *cur;
	struct index_view v;
	size_t newest = SIZE_MAX;
	unsigned newer_complete = 0, done = 0;
	int ret;

	err_clear();
	if (removed)
		*removed = 0;
	ret = index_view_load(&s->index, &v);
	if (ret)
		return ret;
	cur = select_in(s, &v);
	for (size_t i = v.count; i-- > 0 && newest == SIZE_MAX;)
		if (v.ckpts[i].info.state == STORE_COMPLETE)
			newest = i;
	/* Newest first, so newer_complete counts the COMPLETE ones after i. */
	for (size_t i = v.count; i-- > 0;) {
		if (doomed(&v, i, cur, newest, newer_complete, keep)) {
			ret = prune_one(s, &v.ckpts[i], keep);
			if (ret < 0)
				break;
			done += (unsigned)ret;
			ret = 0;
		}
		newer_complete += v.ckpts[i].info.state == STORE_COMPLETE;
	}
	if (ret == 0 && newest != SIZE_MAX)
		ret = prune_orphans(s, &v, v.ckpts[newest].number, &done);
	index_view_free(&v);
	if (done && s->ops->fsync_dir(s->dir))
		log_warn("%s: cannot fsync the job directory after pruning", s->dir);
	if (removed)
		*removed = done;
	return ret;
}

/* ---- reading, and scratch files ---- */

struct store_io {
	const struct store_tier_ops *ops;
	int fd;
	int hold;                       /* read locked: its store recycles */
	char path[PATH_MAX];
	char tmp[PATH_MAX + 8];         /* store_io_open_writing: its *.tmp */
};

static int io_path(const struct store *s, const char *ckpt, const char *name, char *buf, size_t len)
{
	if (ckpt)
		return store_ckpt_path(s, ckpt, name, buf, len);
	if (!name || name[0] != '.' || !plain_name(name, NAME_LEN))
		return err_set(-EINVAL, "scratch file name '%s' is not valid: a plain name starting "
			       "with '.' is needed", name ? name : "");
	return join_path(buf, len, s->dir, name, NULL);
}

static int io_new(struct store *s, const char *ckpt, const char *name, struct store_io **out)
{
	struct store_io *io = calloc(1, sizeof(*io));
	int ret;

	*out = NULL;
	if (!io)
		return err_set(-ENOMEM, "out of memory");
	io->ops = s->ops;
	io->fd = -1;
	/* only a file that can be written over needs holding: a lock round
	 * trip an open on a network file system otherwise */
	io->hold = s->recycle != 0;
	ret = io_path(s, ckpt, name, io->path, sizeof(io->path));
	if (ret) {
		free(io);
		return ret;
	}
	*out = io;
	return 0;
}

/* The file io->fd opened is still named by one of its names once read
 * locked: a retirement (store_file_retire) takes the lock first and never
 * writes over a file someone holds; one that came between the open and the
 * lock took the name away (-ENOENT, as if the file had been removed) */
static int io_hold(struct store_io *io)
{
	struct store_stat held, st;

	if (!io->hold || !io->ops->trylock || io->ops->lock(io->fd, 0) ||
	    io->ops->fstat(io->fd, &held))
		return 0;       /* no recycling there: nothing writes over it */
	if (io->ops->stat(io->path, &st) == 0 && st.id == held.id)
		return 0;
	if (io->tmp[0] && io->ops->stat(io->tmp, &st) == 0 && st.id == held.id)
		return 0;
	return -ENOENT;
}

int store_io_open(struct store *s, const char *ckpt, const char *name, struct store_io **out)
{
	int ret = io_new(s, ckpt, name, out);

	if (ret)
		return ret;
	ret = s->ops->open_read((*out)->path, &(*out)->fd);
	ret = ret ? ret : io_hold(*out);
	if (ret) {
		ret = err_set(ret, "%s: %s", (*out)->path, strerror(-ret));
		store_io_close(out);
	}
	return ret;
}

int store_io_open_writing(struct store *s, const char *ckpt, const char *name,
			  struct store_io **out)
{
	int ret = io_new(s, ckpt, name, out);

	if (ret)
		return ret;
	snprintf((*out)->tmp, sizeof((*out)->tmp), "%s" TMP_SUFFIX, (*out)->path);
	/* the *.tmp first: renamed between the two opens, the file is found
	 * under its final name */
	ret = s->ops->open_read((*out)->tmp, &(*out)->fd);
	if (ret == -ENOENT)
		ret = s->ops->open_read((*out)->path, &(*out)->fd);
	ret = ret ? ret : io_hold(*out);
	if (ret) {
		ret = err_set(ret, "%s: %s", (*out)->path, strerror(-ret));
		store_io_close(out);
	}
	return ret;
}

int store_io_committed(const struct store_io *io)
{
	struct store_stat st;

	return !io->tmp[0] || (io->ops->stat(io->tmp, &st) == -ENOENT &&
			       io->ops->stat(io->path, &st) == 0);
}

int store_scratch_create(struct store *s, const char *name, struct store_io **out)
{
	int ret = io_new(s, NULL, name, out);

	if (ret)
		return ret;
	ret = s->ops->unlink((*out)->path);
	ret = ret == -ENOENT ? 0 : ret;
	ret = ret ? ret : s->ops->create((*out)->path, &(*out)->fd);
	if (ret) {
		ret = err_set(ret, "%s: %s", (*out)->path, strerror(-ret));
		store_io_close(out);
	}
	return ret;
}

int store_io_exists(struct store *s, const char *ckpt, const char *name)
{
	struct store_stat st;
	char path[PATH_MAX];

	return io_path(s, ckpt, name, path, sizeof(path)) == 0 && s->ops->stat(path, &st) == 0 &&
	       st.is_file;
}

/* The length of the file open as fd, or for one written over a spare, how
 * far its writer says it is written (its mark: the rest is the spare's) */
static uint64_t written(const struct store_tier_ops *ops, int fd)
{
	struct store_stat st;
	uint64_t mark;
	int marked;

	/* the mark before the length: a commit cuts the file, then removes
	 * the mark, and a length taken before the cut with the mark looked
	 * for after its removal would be the spare's. A mark is at most what
	 * is written; a length read after its removal is the cut one. */
	marked = ops->marked && ops->marked(fd, &mark) == 0;
	if (ops->fstat(fd, &st) != 0)
		return 0;
	return marked && mark < st.size ? mark : st.size;
}

uint64_t store_io_size(const struct store_io *io)
{
	return written(io->ops, io->fd);
}

uint64_t store_fd_written(const char *tier, int fd)
{
	const struct store_tier_ops *ops = store_tier_find(tier);

	return ops ? written(ops, fd) : 0;
}

const char *store_io_path(const struct store_io *io)
{
	return io->path;
}

int store_io_fd(const struct store_io *io)
{
	return io->fd;
}

int store_io_read(struct store_io *io, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = io->ops->pread(io->fd, (char *)buf + got, len - got, off + got);

		if (n <= 0)
			return err_set(n < 0 ? (int)n : -EIO, "%s: cannot read %zu bytes at %" PRIu64 "%s%s",
				       io->path, len, off, n < 0 ? ": " : " (it is shorter)",
				       n < 0 ? strerror((int)-n) : "");
		got += (size_t)n;
	}
	return 0;
}

int store_io_write(struct store_io *io, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = io->ops->pwrite(io->fd, (const char *)buf + done, len - done, off + done);

		if (n <= 0)
			return err_set(n < 0 ? (int)n : -EIO, "%s: cannot write: %s", io->path,
				       strerror(n < 0 ? (int)-n : EIO));
		done += (size_t)n;
	}
	return 0;
}

void store_io_close(struct store_io **io)
{
	if (!io || !*io)
		return;
	if ((*io)->fd >= 0)
		(*io)->ops->close((*io)->fd);
	free(*io);
	*io = NULL;
}

int store_scratch_remove(struct store *s, const char *name)
{
	char path[PATH_MAX];
	int ret = io_path(s, NULL, name, path, sizeof(path));

	ret = ret ? ret : s->ops->unlink(path);
	return ret == -ENOENT ? 0 : ret;
}
