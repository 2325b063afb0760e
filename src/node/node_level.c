/* node_level.c - levels partner and rs for the staged images of an MPI job,
 * and their rebuild after a node's loss (node_level.h, docs/levels.md).
 *
 * The redundancy engine (src/redundancy) does the work: one member per rank,
 * its file rank-NNNNN.img of the checkpoint in the node-local store. What is
 * here is how node agents become members: a thread per rank of the node, a
 * bootstrap transport through the coordinator (GATHER lines up, GATHERED
 * down: the engine's TCP link needs an allgather of addresses and a secret
 * to open), then the link itself, agent to agent on the cluster network.
 */
#include "node/node_level.h"
#include "node/node.h"

#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/line.h"
#include "common/log.h"
#include "image/image.h"
#include "redundancy/redundancy.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IMAGE_FMT "rank-%05d.img"
#define CHUNK 150                       /* bytes per GATHER line (300 hex) */
#define RELAY_TIMEOUT_S 120             /* a bootstrap step that takes longer failed */
#define LAYOUT_MAGIC "stasis-layout 1"

static struct node_level_env E;
static int busy;                        /* member threads running */
static char last_upgraded[64];          /* the checkpoint of the last upgrade to end */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

void node_level_init(const struct node_level_env *env)
{
	E = *env;
}

int node_level_busy(void)
{
	int n;

	pthread_mutex_lock(&lock);
	n = busy;
	pthread_mutex_unlock(&lock);
	return n;
}

int node_level_over(const char *ckpt)
{
	int over;

	pthread_mutex_lock(&lock);
	over = !busy && !strcmp(last_upgraded, ckpt);
	pthread_mutex_unlock(&lock);
	return over;
}

/* ---- the bootstrap transport: allgathers relayed by the coordinator ---- */

/* One tag's contributions as they come back; shared by the node's members */
struct wait {
	char tag[96];
	int size, have, refs;
	size_t len;
	uint8_t *buf;                   /* size * len, once the first line came */
	uint8_t *got;                   /* got[rank] */
	struct wait *next;
};
static struct wait *waits;

static int unhex(const char *hex, uint8_t *out, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		out[i] = (uint8_t)v;
	}
	return 0;
}

void node_level_gathered(const char *args)
{
	char tag[96], hex[CHUNK * 2 + 2];
	int rank;
	struct wait *w;

	if (sscanf(args, "%95s %d %301s", tag, &rank, hex) != 3)
		return;
	pthread_mutex_lock(&lock);
	for (w = waits; w && strcmp(w->tag, tag); w = w->next)
		;
	if (w && rank >= 0 && rank < w->size && !w->got[rank]) {
		size_t len = strcmp(hex, "-") ? strlen(hex) / 2 : 0;

		if (!w->buf && (w->len = len) &&
		    !(w->buf = calloc((size_t)w->size, len)))
			w->len = 0;
		if (len == w->len && (!len || unhex(hex, w->buf + (size_t)rank * len, len) == 0)) {
			w->got[rank] = 1;
			w->have++;
		}
		pthread_cond_broadcast(&cond);
	}
	pthread_mutex_unlock(&lock);
}

struct relay {
	int rank, size;
	char base[80];                  /* unique to this set of members */
	unsigned seq;
};

static struct wait *wait_get(const char *tag, int size)
{
	struct wait *w;

	for (w = waits; w; w = w->next)
		if (!strcmp(w->tag, tag))
			break;
	if (!w) {
		w = calloc(1, sizeof(*w));
		if (!w || !(w->got = calloc((size_t)size, 1))) {
			free(w);
			return NULL;
		}
		snprintf(w->tag, sizeof(w->tag), "%s", tag);
		w->size = size;
		w->next = waits;
		waits = w;
	}
	w->refs++;
	return w;
}

static void wait_put(struct wait *w)
{
	if (--w->refs)
		return;
	for (struct wait **p = &waits; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	free(w->buf);
	free(w->got);
	free(w);
}

/* One round: len <= CHUNK bytes from every member */
static int relay_round(struct relay *r, const void *mine, size_t len, uint8_t *all)
{
	char tag[96], hex[CHUNK * 2 + 2] = "-";
	struct timespec until;
	struct wait *w;
	int ret = 0;

	snprintf(tag, sizeof(tag), "%s.%u", r->base, r->seq++);
	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", ((const uint8_t *)mine)[i]);
	pthread_mutex_lock(&lock);
	w = wait_get(tag, r->size);
	pthread_mutex_unlock(&lock);
	if (!w)
		return err_set(-ENOMEM, "out of memory");
	E.to_coord("GATHER %s %d %d %s", tag, r->rank, r->size, hex);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += RELAY_TIMEOUT_S;
	pthread_mutex_lock(&lock);
	while (w->have < w->size && !ret)
		ret = -pthread_cond_timedwait(&cond, &lock, &until);
	if (w->have == w->size && w->len == len)
		memcpy(all, w->buf, (size_t)w->size * len);
	else
		ret = err_set(ret ? ret : -EPROTO, "node level: %d of %d ranks reached the "
			      "coordinator's relay for %s within %d s (a node agent died?)", w->have,
			      w->size, tag, RELAY_TIMEOUT_S);
	wait_put(w);
	pthread_mutex_unlock(&lock);
	return ret;
}

static int relay_allgather(void *h, const void *mine, size_t len, void *all)
{
	struct relay *r = h;
	uint8_t *tmp = malloc((size_t)r->size * CHUNK);
	int ret = tmp ? 0 : err_set(-ENOMEM, "out of memory");

	for (size_t off = 0; !ret && (off < len || !len); off += CHUNK) {
		size_t n = len - off < CHUNK ? len - off : CHUNK;

		ret = relay_round(r, (const uint8_t *)mine + off, n, tmp);
		for (int k = 0; !ret && k < r->size; k++)
			memcpy((uint8_t *)all + (size_t)k * len + off, tmp + (size_t)k * n, n);
		if (!len)
			break;
	}
	free(tmp);
	return ret;
}

static int relay_rank(void *h)
{
	return ((struct relay *)h)->rank;
}

static int relay_size(void *h)
{
	return ((struct relay *)h)->size;
}

static int relay_barrier(void *h)
{
	return relay_allgather(h, NULL, 0, NULL);
}

static int relay_allreduce(void *h, int64_t *v, size_t n, enum redun_op op)
{
	struct relay *r = h;
	int64_t *all = malloc((size_t)r->size * n * sizeof(*v));
	int ret = all ? relay_allgather(h, v, n * sizeof(*v), all) : err_set(-ENOMEM, "out of memory");

	for (size_t i = 0; !ret && i < n; i++)
		for (int k = 0; k < r->size; k++) {
			int64_t x = all[(size_t)k * n + i];

			v[i] = k == 0 ? x : op == REDUN_MIN ? (x < v[i] ? x : v[i]) :
			       op == REDUN_MAX ? (x > v[i] ? x : v[i]) : v[i] + x;
		}
	free(all);
	return ret;
}

/* Every member sends len bytes, the root's count: a few bytes each way
 * (the link's secret, an agreement's message) */
static int relay_bcast(void *h, void *buf, size_t len, int root)
{
	struct relay *r = h;
	uint8_t *all = malloc((size_t)r->size * len);
	int ret = all ? relay_allgather(h, buf, len, all) : err_set(-ENOMEM, "out of memory");

	if (!ret)
		memcpy(buf, all + (size_t)root * len, len);
	free(all);
	return ret;
}

static int relay_p2p(void *h, const void *buf, size_t len, int peer)
{
	(void)h, (void)buf, (void)len, (void)peer;
	return err_set(-ENOTSUP, "node level: the coordinator's relay carries no point-to-point "
		       "traffic");
}

static int relay_recv(void *h, void *buf, size_t len, int peer)
{
	return relay_p2p(h, buf, len, peer);
}

static int relay_sendrecv(void *h, const void *sbuf, size_t slen, int dest, void *rbuf,
			  size_t rlen, int src)
{
	(void)rbuf, (void)rlen, (void)src;
	return relay_p2p(h, sbuf, slen, dest);
}

static void relay_free(void *h)
{
	(void)h;
}

static const struct redun_comm_ops relay_ops = {
	.name = "coordinator relay",
	.rank = relay_rank,
	.size = relay_size,
	.barrier = relay_barrier,
	.allreduce_i64 = relay_allreduce,
	.bcast = relay_bcast,
	.allgather = relay_allgather,
	.send = relay_p2p,
	.recv = relay_recv,
	.sendrecv = relay_sendrecv,
	.free = relay_free,
};

/* ---- the layout ---- */

struct layout {
	char level[16];
	unsigned group, parity;
	int size;
	char (*host)[64];
	char (*id)[33];
	int64_t *bytes;
};

static void layout_free(struct layout *l)
{
	free(l->host);
	free(l->id);
	free(l->bytes);
	memset(l, 0, sizeof(*l));
}

static int layout_alloc(struct layout *l, int size)
{
	l->size = size;
	l->host = calloc((size_t)size, sizeof(*l->host));
	l->id = calloc((size_t)size, sizeof(*l->id));
	l->bytes = calloc((size_t)size, sizeof(*l->bytes));
	return l->host && l->id && l->bytes ? 0 : err_set(-ENOMEM, "out of memory");
}

static int layout_write(struct store *global, const char *ckpt, const struct layout *l)
{
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	char line[256];
	int ret, n;

	ret = store_ckpt_annex(global, ckpt, &ck);
	ret = ret ? ret : store_file_create(ck, NODE_LAYOUT_FILE, &f);
	n = snprintf(line, sizeof(line), LAYOUT_MAGIC " %d %s %u %u\n", l->size, l->level, l->group,
		     l->parity);
	ret = ret ? ret : store_file_write(f, line, (size_t)n);
	for (int r = 0; !ret && r < l->size; r++) {
		n = snprintf(line, sizeof(line), "%d %s %s %lld\n", r, l->host[r], l->id[r],
			     (long long)l->bytes[r]);
		ret = store_file_write(f, line, (size_t)n);
	}
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	store_ckpt_free(&ck);
	return ret;
}

static int layout_read(struct store *global, const char *ckpt, struct layout *l)
{
	struct store_io *io = NULL;
	char *text = NULL, *p, *nl;
	uint64_t len;
	int ret, size = 0, pos = 0;

	memset(l, 0, sizeof(*l));
	ret = store_io_open(global, ckpt, NODE_LAYOUT_FILE, &io);
	if (ret)
		return err_set(ret, "%s has no layout: it never reached level partner or rs", ckpt);
	len = store_io_size(io);
	text = len < (1u << 24) ? calloc(1, len + 1) : NULL;
	ret = text ? store_io_read(io, text, len, 0) : err_set(-EFBIG, "%s: too large",
								store_io_path(io));
	if (!ret && (sscanf(text, LAYOUT_MAGIC " %d %15s %u %u%n", &size, l->level, &l->group,
			    &l->parity, &pos) != 4 || size < 1 || size > 1 << 20))
		ret = err_set(-EBADMSG, "%s: not a layout", store_io_path(io));
	ret = ret ? ret : layout_alloc(l, size);
	p = text ? text + pos : NULL;
	for (int r = 0; !ret && r < size; r++) {
		int k;
		long long b;

		nl = p ? strchr(p, '\n') : NULL;
		if (!nl || sscanf(nl + 1, "%d %63s %32s %lld", &k, l->host[r], l->id[r], &b) != 4 ||
		    k != r)
			ret = err_set(-EBADMSG, "%s: rank %d's line is damaged", store_io_path(io), r);
		else
			l->bytes[r] = b;
		p = nl ? nl + 1 : NULL;
	}
	store_io_close(&io);
	free(text);
	if (ret)
		layout_free(l);
	return ret;
}

/* ---- streaming: partner copies and rs parity made while the ranks write ---- */

struct member {
	int rank, size;
	char ckpt[64];
	char level[16];
	unsigned group, parity;
	int fd;                 /* rebuild: the rank's connection (answered), else -1 */
	int have_own;
	struct stream *ss;      /* an upgrade begun at STREAM, while the ranks write; or NULL */
};


/* One checkpoint's STREAM: its members send the images, or encode their
 * parity, as they are written (redun_stream_begin), then wait for its verdict: UPGRADE (it
 * is established and sealed: the level goes on) or its failure */
struct stream {
	char ckpt[64], level[16];
	unsigned group, parity;
	int verdict;            /* 0: being written; 1: UPGRADE came; -1: it failed */
	uint64_t upgrade_ms;    /* when UPGRADE came (monotonic), for the log */
	int refs;
};
static struct stream *streaming;        /* the latest STREAM's (under lock) */

#define VERDICT_TIMEOUT_S 600           /* a checkpoint's write that takes longer failed */

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* This thread's CPU time: a member's CPU beside its phases' wall times
 * says whether it computed or waited for its peers */
static uint64_t thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void stream_put(struct stream *ss)
{
	if (ss && --ss->refs == 0)
		free(ss);
}

static int stream_abort(void *arg)
{
	struct stream *ss = arg;
	int v;

	pthread_mutex_lock(&lock);
	v = ss->verdict;
	pthread_mutex_unlock(&lock);
	return v < 0;
}

/* The checkpoint's verdict; on UPGRADE the member takes its level */
static int stream_verdict(struct member *m)
{
	struct timespec until;
	int v = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += VERDICT_TIMEOUT_S;
	pthread_mutex_lock(&lock);
	while (!m->ss->verdict && !v)
		v = pthread_cond_timedwait(&cond, &lock, &until);
	if (!m->ss->verdict)
		m->ss->verdict = -1;
	v = m->ss->verdict;
	snprintf(m->level, sizeof(m->level), "%s", m->ss->level);
	m->group = m->ss->group;
	m->parity = m->ss->parity;
	pthread_mutex_unlock(&lock);
	return v;
}

void node_level_abort(void)
{
	pthread_mutex_lock(&lock);
	if (streaming && !streaming->verdict) {
		streaming->verdict = -1;
		pthread_cond_broadcast(&cond);
	}
	pthread_mutex_unlock(&lock);
}

/* ---- members ---- */


/* Spare files of the node's cache at most (store_file_retire): in
 * practice one checkpoint's, each checkpoint taking as many as it retires */
#define LEVEL_SPARES_MAX 4096

/* The node-local store; its partner copies and parity are written over
 * the spares of older ones (docs/levels.md, "Spare files") */
static int job_dir_exists(void)
{
	char dir[PATH_MAX];

	return snprintf(dir, sizeof(dir), "%s/%s", E.stage_dir, E.local_job) < (int)sizeof(dir) &&
	       access(dir, F_OK) == 0;
}

static int open_local(struct store **out)
{
	int ret = store_open("local", E.stage_dir, E.local_job, out);

	if (!ret)
		store_set_recycle(*out, strcmp(cfg_str(CFG_RECYCLE), "off") ? LEVEL_SPARES_MAX : 0);
	return ret;
}

static int open_global(struct store **out)
{
	const char *tier = getenv("STASIS_STORE_TIER");

	return store_open(tier && *tier ? tier : NULL, getenv("STASIS_STORE_ROOT"),
			  getenv("STASIS_JOB_NAME"), out);
}

static void hex16(const uint8_t id[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* This member's image in the node's store: its id and size */
static int own_image(struct store *local, const char *ckpt, int rank, uint8_t id[16],
		     int64_t *bytes)
{
	struct store_io *io = NULL;
	struct img_reader *r = NULL;
	char file[32];
	int ret;

	snprintf(file, sizeof(file), IMAGE_FMT, rank);
	ret = store_io_open(local, ckpt, file, &io);
	if (!ret) {
		*bytes = (int64_t)store_io_size(io);
		ret = img_open(store_io_path(io), &r);
	}
	ret = ret ? ret : img_image_id(r, id);
	img_close(&r);
	store_io_close(&io);
	return ret;
}

/* Both transports of a member: the bootstrap, then the engine's link */
static int open_link(struct relay *rl, const struct member *m, const char *what,
		     const struct redun_comm *boot_in, struct redun_comm *boot, struct redun_comm *link)
{
	rl->rank = m->rank;
	rl->size = m->size;
	rl->seq = 0;
	snprintf(rl->base, sizeof(rl->base), "%s.%s", m->ckpt, what);
	if (boot_in)
		*boot = *boot_in;
	else
		*boot = (struct redun_comm){ &relay_ops, rl };
	return redun_link_open(boot, link);
}

/* The fault point node.level, as the engine begins this member's copies */
static int level_stage(void *arg, enum redun_stage st)
{
	(void)arg;
	return st == REDUN_STAGE_BEGIN ? FAULT(NODE_LEVEL) : 0;
}

static int upgrade_member(struct member *m)
{
	const struct redun_level *level = NULL;
	struct store *local = NULL, *global = NULL;
	struct redun_comm boot, link = { 0 };
	struct redun_stream *stream = NULL;
	struct relay rl;
	struct layout l = { 0 };
	char (*node)[64] = NULL, host[64] = "", msg[REDUN_MSG_LEN];
	const char **names = NULL;
	uint8_t id[16] = { 0 }, (*ids)[16] = NULL;
	int64_t bytes = 0;
	uint64_t t0 = mono_ms(), t_link = t0, t_stream = t0, t_seal = t0, t_upgrade = t0;
	uint64_t cpu0 = thread_cpu_ms(), cpu_stream = cpu0;
	int ret, bad, quiet = 0;

	/* the buffers of the exchanges first: a member that fails later still
	 * takes part in them */
	names = calloc((size_t)m->size, sizeof(*names));
	ids = calloc((size_t)m->size, sizeof(*ids));
	if (layout_alloc(&l, m->size) != 0 || !names || !ids) {
		ret = err_set(-ENOMEM, "out of memory");
		goto out;
	}
	node = l.host;
	ret = open_local(&local);
	/* the bootstrap goes on for a member that failed: the others must not
	 * wait for it; the link's agreements carry the failure */
	if (open_link(&rl, m, "up", NULL, &boot, &link) != 0) {
		ret = ret ? ret : -EIO;
		goto out;
	}
	t_link = mono_ms();
	snprintf(host, sizeof(host), "%s", E.host);
	ret = link.ops->allgather(link.h, host, sizeof(host), node) ?: ret;
	for (int r = 0; r < m->size; r++)
		names[r] = node[r];
	if (m->ss) {
		struct redun_set set = { .ckpt = m->ckpt, .local = ret ? NULL : local,
					 .nranks = m->size, .node = names, .group_size = m->group,
					 .rs_parity = m->parity, .producer = "stasis-node" };
		struct sched_param sp = { 0 };

		if (redun_stream_begin(redun_level_find(m->level), &set, &link, stream_abort, m->ss,
				       &stream) != 0)
			log_warn("node agent on %s: rank %d: %s: the copies go after the write: %s",
				 E.host, m->rank, m->ckpt, err_msg());
		t_stream = mono_ms();
		cpu_stream = thread_cpu_ms();
		if (stream_verdict(m) < 0) {
			quiet = 1;      /* not established: no level to say */
			goto out;
		}
		t_seal = mono_ms();
		t_upgrade = m->ss->upgrade_ms;
		/* the ranks run again: their CPU comes first */
		pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	}
	level = redun_level_find(m->level);
	ret = ret ? ret : level ? 0 : -EINVAL;
	ret = ret ? ret : own_image(local, m->ckpt, m->rank, id, &bytes);
	if (!ret && m->rank == 0)
		ret = open_global(&global);
	ret = link.ops->allgather(link.h, &bytes, sizeof(bytes), l.bytes) ?: ret;
	ret = link.ops->allgather(link.h, id, sizeof(id), ids) ?: ret;
	bad = redun_agree(&link, ret == 0, msg);
	if (bad < m->size) {
		ret = err_set(-EIO, "rank %d: %s", bad, msg);
		goto out;
	}
	for (int r = 0; r < m->size; r++)
		hex16(ids[r], l.id[r]);
	snprintf(l.level, sizeof(l.level), "%s", m->level);
	l.group = m->group;
	l.parity = m->parity;
	/* the layout first: a level recorded always has one */
	ret = m->rank == 0 ? layout_write(global, m->ckpt, &l) : 0;
	bad = redun_agree(&link, ret == 0, msg);
	if (bad < m->size) {
		ret = err_set(-EIO, "rank %d: %s", bad, msg);
		goto out;
	}
	{
		struct redun_set set = {
			.ckpt = m->ckpt, .local = local, .global = NULL, .nranks = m->size,
			.node = names, .size = l.bytes, .group_size = m->group,
			.rs_parity = m->parity, .producer = "stasis-node",
			.stream = stream,       /* taken by its own level only */
		};
		struct redun_request req = { .level = level, .stage = level_stage };

		ret = redun_upgrade(&set, &link, &req);
	}
	/* with the phases' monotonic times, comparable across the nodes of
	 * one machine (docs/levels.md) */
	log_info("node agent on %s: rank %d: %s at level %s %s after %llu ms (streamed while "
		 "written: %llu ms, then %llu ms after the seal; at ms %llu: link %llu, streamed "
		 "%llu, UPGRADE %llu, level %llu; CPU %llu ms, %llu of them streaming)", E.host,
		 m->rank, m->ckpt, m->level, ret ? "failed" : "reached",
		 (unsigned long long)(mono_ms() - t0), (unsigned long long)(t_stream - t0),
		 (unsigned long long)(mono_ms() - t_seal), (unsigned long long)t0,
		 (unsigned long long)t_link, (unsigned long long)t_stream,
		 (unsigned long long)t_upgrade, (unsigned long long)mono_ms(),
		 (unsigned long long)(thread_cpu_ms() - cpu0),
		 (unsigned long long)(cpu_stream - cpu0));
out:
	redun_stream_free(&stream);
	if (m->rank == 0 && !quiet) {
		/* the engine's "checkpoint C stays established at level L: why":
		 * the coordinator records the level, why is the rest */
		const char *why = err_msg(), *p = strstr(why, "stays established at level ");

		if (p && (p = strstr(p, ": ")))
			why = p + 2;
		E.to_coord("LEVEL %s %s %s", m->ckpt, ret ? "local" : m->level, ret ? why : "ok");
	}
	if (ret && !quiet)
		log_warn("node agent on %s: rank %d: checkpoint %s: %s", E.host, m->rank, m->ckpt,
			 err_msg());
	redun_comm_close(&link);
	layout_free(&l);
	free(names);
	free(ids);
	store_close(&local);
	store_close(&global);
	return ret;
}

/* ---- rebuild ---- */

struct accept_ctx {
	const struct layout *l;
	int rank;
};

/* A candidate image: every chunk's CRC, and the id the layout recorded */
static int accept_image(void *arg, struct store *s, const char *ckpt, const char *name)
{
	const struct accept_ctx *a = arg;
	struct store_io *io = NULL;
	struct img_reader *r = NULL;
	uint8_t id[16];
	char hex[33];
	int ret = store_io_open(s, ckpt, name, &io);

	ret = ret ? ret : img_open(store_io_path(io), &r);
	ret = ret ? ret : img_verify(r);
	ret = ret ? ret : img_image_id(r, id);
	if (!ret) {
		hex16(id, hex);
		if (strcmp(hex, a->l->id[a->rank]) != 0)
			ret = err_set(-EBADMSG, "%s is not rank %d's image of %s (id %s, the layout "
				      "says %s)", store_io_path(io), a->rank, ckpt ? ckpt : "?", hex,
				      a->l->id[a->rank]);
	}
	img_close(&r);
	store_io_close(&io);
	return ret;
}

/* Which ranks of an older checkpoint the nodes here now could rebuild:
 * 1 in ok[r] for each (its image on a node of the set, or a partner copy;
 * rs: enough of its group's images and parity). Collective over c. */
static int plan(const char *ckpt, struct store *local, struct store *global,
		const struct redun_comm *c, int size, int leader, char *ok)
{
	struct layout l;
	int64_t *held = calloc((size_t)size * 2, sizeof(int64_t));
	char file[32];
	int ret = held ? layout_read(global, ckpt, &l) : -ENOMEM, fail = ret != 0;
	int64_t f = fail;

	/* every member takes part in the same reductions */
	c->ops->allreduce_i64(c->h, &f, 1, REDUN_MAX);
	if (f) {
		if (!fail)
			layout_free(&l);
		free(held);
		return -ENOENT;
	}
	for (int s = 0; leader && s < size && l.size == size; s++) {
		snprintf(file, sizeof(file), IMAGE_FMT, s);
		held[s] = store_io_exists(local, ckpt, file);
		snprintf(file, sizeof(file), REDUN_PARTNER_FILE, s);
		held[s] |= !strcmp(l.level, "partner") && store_io_exists(local, ckpt, file);
		snprintf(file, sizeof(file), REDUN_RS_FILE, s);
		held[size + s] = !strcmp(l.level, "rs") && store_io_exists(local, ckpt, file);
	}
	ret = c->ops->allreduce_i64(c->h, held, (size_t)size * 2, REDUN_MAX);
	if (!ret && !strcmp(l.level, "rs") && l.size == size) {
		int *group = calloc((size_t)size, sizeof(int)), ngroups = 0, alone = 0;
		const char **names = calloc((size_t)size, sizeof(*names));

		for (int r = 0; names && r < size; r++)
			names[r] = l.host[r];
		ret = group && names ? redun_layout_groups(size, names, l.group, group, &ngroups,
							  &alone) : -ENOMEM;
		for (int r = 0; !ret && r < size; r++) {
			int n = 0, have = 0, m;

			for (int s = 0; s < size; s++)
				if (group[s] == group[r]) {
					n++;
					have += (int)held[s] + (int)held[size + s];
				}
			m = (int)l.parity < n ? (int)l.parity : n - 1;
			ok[r] = held[r] || (n > 1 && have >= n - m);
		}
		free(group);
		free(names);
	} else {
		for (int r = 0; r < size; r++)
			ok[r] = held[r] != 0;
	}
	layout_free(&l);
	free(held);
	return ret;
}

static int node_leader(char (*node)[64], int size, int me)
{
	for (int r = 0; r < me && r < size; r++)
		if (!strcmp(node[r], node[me]))
			return 0;
	return 1;
}

/* The refusal: the ranks that cannot be rebuilt, and the newest older
 * checkpoint that can be (whole) */
static void refusal(const char *ckpt, const struct layout *l, const int64_t *failed,
		    struct store *local, struct store *global, const struct redun_comm *c,
		    int leader, char *out, size_t len)
{
	char ranks[256] = "", hosts[256] = "", offer[200] = "", *ok = calloc((size_t)l->size, 1);
	struct store_ckpt_info *list = NULL;
	size_t n = 0;

	for (int r = 0; r < l->size; r++) {
		if (!failed[r])
			continue;
		snprintf(ranks + strlen(ranks), sizeof(ranks) - strlen(ranks), "%s%d",
			 ranks[0] ? ", " : "", r);
		if (!strstr(hosts, l->host[r]))
			snprintf(hosts + strlen(hosts), sizeof(hosts) - strlen(hosts), "%s%s",
				 hosts[0] ? ", " : "", l->host[r]);
	}
	/* every member walks the same list (the global index), newest first */
	if (ok && store_list(global, &list, &n, NULL) == 0) {
		for (size_t i = n; i-- > 0 && !offer[0];) {
			int all = 1;

			if (list[i].state != STORE_COMPLETE || store_ckpt_name_cmp(list[i].name, ckpt) >= 0)
				continue;
			if (plan(list[i].name, local, global, c, l->size, leader, ok) == 0) {
				for (int r = 0; r < l->size; r++)
					all &= ok[r];
				if (all)
					snprintf(offer, sizeof(offer), "%s can be rebuilt from the nodes: "
						 "stasis restart %s", list[i].name, list[i].name);
			}
			if (!offer[0] && strstr(list[i].level, "global"))
				snprintf(offer, sizeof(offer), "%s has every image in the global tier: "
					 "stasis restart %s", list[i].name, list[i].name);
		}
	}
	snprintf(out, len, "%s cannot be rebuilt: rank%s %s (on %s) ha%s no copy left on the "
		 "surviving nodes (level %s) nor in the global tier; %s", ckpt,
		 strchr(ranks, ',') ? "s" : "", ranks, hosts, strchr(ranks, ',') ? "ve" : "s",
		 l->level, offer[0] ? offer : "no older checkpoint can be rebuilt either");
	free(list);
	free(ok);
}

int node_level_rebuild(const char *ckpt, int rank, int size, int have_own, struct store *local,
		       struct store *global, const struct redun_comm *boot_in, char *path, size_t len,
		       char scratch[64])
{
	struct member m = { .rank = rank, .size = size, .have_own = have_own };
	struct redun_comm boot, link = { 0 };
	struct redun_found found = { 0 };
	struct relay rl;
	struct layout l = { 0 };
	char (*node)[64] = NULL, host[64], file[32];
	const char **names = NULL, **then = NULL;
	int64_t *failed = NULL;
	int ret, lret;

	snprintf(m.ckpt, sizeof(m.ckpt), "%s", ckpt);
	scratch[0] = '\0';
	lret = !local || !global ? err_set(-EIO, "the node-local or the global store cannot be "
					   "opened") : layout_read(global, ckpt, &l);
	node = calloc((size_t)size, sizeof(*node));
	names = calloc((size_t)size, sizeof(*names));
	then = calloc((size_t)size, sizeof(*then));
	failed = calloc((size_t)size, sizeof(*failed));
	ret = lret;
	if (!node || !names || !then || !failed) {
		ret = err_set(-ENOMEM, "out of memory");
		snprintf(path, len, "%s", err_msg());
		goto out;
	}
	if (!ret && l.size != size)
		ret = err_set(-EINVAL, "%s was taken with %d ranks, not %d", ckpt, l.size, size);
	if (open_link(&rl, &m, "rb", boot_in, &boot, &link) != 0) {
		snprintf(path, len, "%s", err_msg());
		ret = -EIO;
		goto out;
	}
	snprintf(host, sizeof(host), "%s", E.host ? E.host : "");
	if (!E.host)
		gethostname(host, sizeof(host) - 1);
	if (link.ops->allgather(link.h, host, sizeof(host), node) && !ret)
		ret = -EIO;
	{
		int64_t f = ret != 0;

		/* a member without the layout: all stop here, saying why */
		link.ops->allreduce_i64(link.h, &f, 1, REDUN_MAX);
		if (f) {
			ret = ret ? ret : err_set(-EIO, "another rank could not read %s's layout", ckpt);
			snprintf(path, len, "%s", err_msg());
			goto out;
		}
	}
	for (int r = 0; r < size; r++) {
		names[r] = node[r];
		then[r] = l.host[r];
	}
	{
		struct redun_set set = {
			.ckpt = ckpt, .local = local, .global = global, .nranks = size,
			.node = names, .node_then = then, .size = l.bytes, .group_size = l.group,
			.rs_parity = l.parity, .producer = "stasis-node",
		};
		struct accept_ctx a = { &l, rank };
		struct store_ckpt_info *list = NULL;
		size_t n = 0;
		int flushed = 0;

		/* the global tier's copy, the last resort, only when it is whole */
		if (store_list(global, &list, &n, NULL) == 0)
			for (size_t i = 0; i < n; i++)
				if (!strcmp(list[i].name, ckpt))
					flushed = strstr(list[i].level, "global") != NULL;
		free(list);
		ret = redun_recover(redun_level_find(l.level), &set, &link, have_own, flushed,
				    accept_image, &a, &found);
	}
	failed[rank] = ret != 0;
	if (ret)
		log_warn("node agent on %s: rank %d: %s", host, rank, err_msg());
	if (link.ops->allreduce_i64(link.h, failed, (size_t)size, REDUN_MAX) && !ret)
		ret = -EIO;
	for (int r = 0; r < size; r++)
		if (failed[r])
			ret = -ENODATA;
	if (ret == -ENODATA) {
		refusal(ckpt, &l, failed, local, global, &link, node_leader(node, size, rank), path,
			len);
		goto out;
	}
	if (ret) {
		snprintf(path, len, "%s", err_msg());
		goto out;
	}
	if (have_own) {
		snprintf(file, sizeof(file), IMAGE_FMT, rank);
		ret = store_ckpt_path(local, ckpt, file, path, len);
	} else {
		struct store_io *io = NULL;

		ret = store_io_open(found.s, found.ckpt[0] ? found.ckpt : NULL, found.name, &io);
		if (!ret)
			snprintf(path, len, "%s", store_io_path(io));
		store_io_close(&io);
		/* the image handed out, a scratch file: the caller's to remove */
		for (int i = 0; !ret && !found.ckpt[0] && i < 2; i++)
			if (!strcmp(found.scratch[i], found.name)) {
				snprintf(scratch, 64, "%s", found.name);
				found.scratch[i][0] = '\0';
			}
		if (!ret)
			log_info("node agent on %s: rank %d's image of %s rebuilt into %s", host, rank,
				 ckpt, path);
	}
out:
	redun_found_drop(&found);       /* every other scratch file (parity fetched) */
	redun_comm_close(&link);
	layout_free(&l);
	free(node);
	free(names);
	free(then);
	free(failed);
	return ret;
}

/* Scratch files handed to ranks as their images (fetched or rebuilt):
 * removed once the ranks have surely read them, at the next UPGRADE (the
 * ranks run again) or when the agent ends (node_level_fini) */
#define HANDED_MAX 64
static char handed[HANDED_MAX][64];
static int nhanded;

static void handed_add(const char *name)
{
	pthread_mutex_lock(&lock);
	if (nhanded < HANDED_MAX)
		snprintf(handed[nhanded++], sizeof(handed[0]), "%s", name);
	pthread_mutex_unlock(&lock);
}

void node_level_fini(void)
{
	struct store *local = NULL;

	pthread_mutex_lock(&lock);
	if (nhanded && open_local(&local) == 0)
		for (int i = 0; i < nhanded; i++)
			if (store_scratch_remove(local, handed[i]))
				log_warn("node agent on %s: %s", E.host, err_msg());
	nhanded = 0;
	pthread_mutex_unlock(&lock);
	store_close(&local);
}

void node_level_end(void)
{
	struct store *local = NULL;

	node_level_fini();
	/* a job's directory removed before (a move's source, docs/coordinator.md)
	 * has no spares: opening its store would make it again */
	if (E.stage_dir && job_dir_exists() && open_local(&local) == 0 &&
	    store_spares_drop(local))
		log_warn("node agent on %s: %s", E.host, err_msg());
	store_close(&local);
}

static int recover_member(struct member *m)
{
	struct store *local = NULL, *global = NULL;
	char path[PATH_MAX], scratch[64];
	int ret;

	ret = open_local(&local);
	ret = ret ? ret : open_global(&global);
	if (ret) {
		/* take part all the same, failing: the others wait for this member */
		snprintf(path, sizeof(path), "%s", err_msg());
	}
	ret = node_level_rebuild(m->ckpt, m->rank, m->size, m->have_own, local, global, NULL, path,
				 sizeof(path), scratch);
	if (scratch[0])
		handed_add(scratch);
	{
		char line[PATH_MAX + 16];
		int n = snprintf(line, sizeof(line), "%s %s\n", ret ? "ERR" : "OK", path);

		if (n > 0 && send(m->fd, line, (size_t)n, MSG_NOSIGNAL) != n)
			log_warn("node agent on %s: rank %d went before its answer", E.host, m->rank);
	}
	store_close(&local);
	store_close(&global);
	return ret;
}

static void *member_main(void *arg)
{
	struct member *m = arg;
	struct sched_param sp = { 0 };

	if (m->fd < 0) {
		/* an upgrade: the ranks' CPU comes first (a stream's member runs
		 * while they are stopped, and yields once they run again) */
		if (!m->ss)
			pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
		upgrade_member(m);
	} else {
		recover_member(m);
		close(m->fd);
	}
	pthread_mutex_lock(&lock);
	if (m->fd < 0)
		snprintf(last_upgraded, sizeof(last_upgraded), "%s", m->ckpt);
	stream_put(m->ss);
	busy--;
	pthread_mutex_unlock(&lock);
	free(m);
	return NULL;
}

static int member_start(struct member *m)
{
	sigset_t all, old;
	pthread_t th;
	int ret;

	pthread_mutex_lock(&lock);
	busy++;
	pthread_mutex_unlock(&lock);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&th, NULL, member_main, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		pthread_mutex_lock(&lock);
		busy--;
		pthread_mutex_unlock(&lock);
		return err_set(-ret, "cannot start a thread: %s", strerror(ret));
	}
	pthread_detach(th);
	return 0;
}

/* The node's images of ckpt are complete in the node-local store: sealed
 * there, so that the level's copies can go into its annex */
static int seal_local(const char *ckpt, unsigned n)
{
	struct store *local = NULL;
	struct store_ckpt *ck = NULL;
	int ret = open_local(&local);

	ret = ret ? ret : store_ckpt_join(local, ckpt, &ck);
	ret = ret ? ret : store_ckpt_commit(ck, n);
	store_ckpt_free(&ck);
	store_close(&local);
	return ret;
}

void node_level_verdict(const char *ckpt, int established)
{
	const char *env = getenv("STASIS_CACHE_KEEP");     /* coord/jobenv.h */
	unsigned keep = env && atoi(env) > 0 ? (unsigned)atoi(env) : 2;
	struct store *local = NULL;
	int ret;

	/* a job's directory removed before (a move's source) stays removed */
	if (!E.stage_dir || !job_dir_exists() || open_local(&local) != 0)
		return;
	/* only once the new checkpoint is established: should it fail, the
	 * node still has the images of the one before it */
	ret = established ? store_cache_trim(local, ckpt, keep) : store_ckpt_retire(local, ckpt);
	if (ret)
		log_warn("node agent on %s: %s", E.host, err_msg());
	store_close(&local);
}

static int members_start(const char *ckpt, const char *level, unsigned group, unsigned parity,
			 struct stream *ss, const int *ranks, unsigned n, int size);

int node_level_upgrade(const char *args, const int *ranks, unsigned n, int size)
{
	char ckpt[64], level[16];
	unsigned group = 0, parity = 0;
	struct stream *ss;
	uint64_t t_in = mono_ms();
	int ret;

	if (sscanf(args, "%63s %15s %u %u", ckpt, level, &group, &parity) != 4 ||
	    !redun_level_find(level))
		return err_set(-EINVAL, "bad UPGRADE '%.80s'", args);
	pthread_mutex_lock(&lock);
	ss = streaming && !strcmp(streaming->ckpt, ckpt) && !streaming->verdict ? streaming : NULL;
	pthread_mutex_unlock(&lock);
	/* a node whose seal fails still runs its members: they fail at the
	 * annex and say so, and the others do not wait for them */
	ret = seal_local(ckpt, n);
	if (ret)
		log_warn("node agent on %s: %s: %s", E.host, ckpt, err_msg());
	node_level_fini();      /* the ranks run again: they read their images */
	if (ss) {
		/* the members of its STREAM go on, at the level asked now */
		pthread_mutex_lock(&lock);
		snprintf(ss->level, sizeof(ss->level), "%s", level);
		ss->group = group;
		ss->parity = parity;
		ss->verdict = 1;
		ss->upgrade_ms = t_in;
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&lock);
		return 0;
	}
	return members_start(ckpt, level, group, parity, NULL, ranks, n, size);
}

int node_level_stream(const char *args, const int *ranks, unsigned n, int size)
{
	char ckpt[64], level[16];
	unsigned group = 0, parity = 0;
	struct stream *ss;

	if (sscanf(args, "%63s %15s %u %u", ckpt, level, &group, &parity) != 4)
		return err_set(-EINVAL, "bad STREAM '%.80s'", args);
	if ((strcmp(level, "partner") && strcmp(level, "rs")) || !n)
		return 0;       /* only partner copies and rs parity stream */
	ss = calloc(1, sizeof(*ss));
	if (!ss)
		return err_set(-ENOMEM, "out of memory");
	snprintf(ss->ckpt, sizeof(ss->ckpt), "%s", ckpt);
	snprintf(ss->level, sizeof(ss->level), "%s", level);
	ss->group = group;
	ss->parity = parity;
	ss->refs = 1;           /* streaming's */
	pthread_mutex_lock(&lock);
	if (streaming && !streaming->verdict) {
		streaming->verdict = -1;        /* a new checkpoint: that one is over */
		pthread_cond_broadcast(&cond);
	}
	stream_put(streaming);
	streaming = ss;
	pthread_mutex_unlock(&lock);
	return members_start(ckpt, level, group, parity, ss, ranks, n, size);
}

static int members_start(const char *ckpt, const char *level, unsigned group, unsigned parity,
			 struct stream *ss, const int *ranks, unsigned n, int size)
{
	int ret;

	for (unsigned i = 0; i < n; i++) {
		struct member *m = calloc(1, sizeof(*m));

		if (!m)
			return err_set(-ENOMEM, "out of memory");
		*m = (struct member){ .rank = ranks[i], .size = size, .group = group,
				      .parity = parity, .fd = -1, .ss = ss };
		if (ss) {
			pthread_mutex_lock(&lock);
			ss->refs++;
			pthread_mutex_unlock(&lock);
		}
		snprintf(m->ckpt, sizeof(m->ckpt), "%s", ckpt);
		snprintf(m->level, sizeof(m->level), "%s", level);
		ret = member_start(m);
		if (ret) {
			pthread_mutex_lock(&lock);
			stream_put(ss);
			pthread_mutex_unlock(&lock);
			free(m);
			return ret;
		}
	}
	return 0;
}

int node_level_recover(int fd, const char *line, const char *secret)
{
	char sec[128], ckpt[64];
	unsigned version;
	struct member *m = calloc(1, sizeof(*m));
	int ret = 0;

	if (!m)
		return err_set(-ENOMEM, "out of memory");
	if (sscanf(line, "RECOVER %u %127s %d %d %63s %d", &version, sec, &m->rank, &m->size, ckpt,
		   &m->have_own) != 6 || m->rank < 0 || m->rank >= m->size)
		ret = err_set(-EPROTO, "expected RECOVER <version> <secret> <rank> <size> "
			      "<checkpoint> <have own image>");
	else if (version != NODE_PROTOCOL_VERSION)
		ret = err_set(-EPROTO, "protocol version %u not supported (this node agent speaks %d)",
			      version, NODE_PROTOCOL_VERSION);
	else if (!line_secret_equal(sec, secret))
		ret = err_set(-EACCES, "wrong secret");
	if (!ret) {
		snprintf(m->ckpt, sizeof(m->ckpt), "%s", ckpt);
		m->fd = dup(fd);
		ret = m->fd < 0 ? err_set(-errno, "dup: %s", strerror(errno)) : member_start(m);
	}
	if (ret) {
		char out[320];
		int n = snprintf(out, sizeof(out), "ERR %s\n", err_msg());

		if (send(fd, out, (size_t)n, MSG_NOSIGNAL) != n) {
			/* the rank went */
		}
		if (m->fd >= 0)
			close(m->fd);
		free(m);
	}
	return ret;
}
