/* xfer.c - whole files between members, and the files a node's cache holds
 * for members that moved.
 *
 * A restart need not put every rank back on the node it ran on: a spare
 * replaces a lost node, and a launcher given the nodes in another order
 * (srun in a new allocation, mpirun --host) shifts ranks by one node or
 * more. A member's files then sit in the cache of a node it left: the node
 * leaders there offer them (redun_fetch_held).
 */
#include "redundancy/level.h"
#include "common/err.h"
#include "common/log.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XFER_FAILED UINT64_MAX  /* size sent by a member that cannot send its file */
#define POOL 4

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pool[POOL];

void *redun_xfer_get(void)
{
	void *buf = NULL;

	pthread_mutex_lock(&pool_lock);
	for (int i = 0; i < POOL && !buf; i++)
		if (pool[i]) {
			buf = pool[i];
			pool[i] = NULL;
		}
	pthread_mutex_unlock(&pool_lock);
	return buf ? buf : malloc(XFER_PIECE);
}

void redun_xfer_put(void *buf)
{
	if (!buf)
		return;
	pthread_mutex_lock(&pool_lock);
	for (int i = 0; i < POOL && buf; i++)
		if (!pool[i]) {
			pool[i] = buf;
			buf = NULL;
		}
	pthread_mutex_unlock(&pool_lock);
	free(buf);
}

void redun_name(char buf[32], const char *fmt, int rank)
{
	snprintf(buf, 32, fmt, rank);
}

int redun_node_leader(const struct redun_set *set, int rank)
{
	for (int r = 0; r < rank; r++)
		if (strcmp(set->node[r], set->node[rank]) == 0)
			return 0;
	return 1;
}

int redun_sendrecv_io(const struct redun_comm *c, struct store_io *in, uint64_t off, size_t slen,
		      int dest, void *rbuf, size_t rlen, int src, void *buf, int *rerr)
{
	if (slen && c->ops->sendrecv_fd)
		return c->ops->sendrecv_fd(c->h, store_io_fd(in), off, slen, dest, rbuf, rlen, src);
	/* a short read still sends slen bytes, which the image CRCs reject */
	if (slen && store_io_read(in, buf, slen, off) && !*rerr)
		*rerr = err_set(-EIO, "%s: short read while sending to rank %d", store_io_path(in), dest);
	if (!rlen)
		return c->ops->send(c->h, buf, slen, dest);
	return c->ops->sendrecv(c->h, buf, slen, dest, rbuf, rlen, src);
}

void redun_stream_idle(long *idle, long max)
{
	struct timespec ts = { 0, *idle };

	nanosleep(&ts, NULL);
	*idle = *idle * 2 > max ? max : *idle * 2;
}

int redun_sendrecv_file(const struct redun_comm *c, struct store_io *in, uint64_t off, size_t slen,
			int dest, struct store_file *f, size_t rlen, int src, void *buf, void *back,
			int *rerr, int *put)
{
	uint64_t at = 0;
	int fd = rlen && !*put && c->ops->sendrecv_files ? store_file_fd(f, &at) : -1, werr = 0, ret;

	if (fd >= 0 || (rlen && *put && c->ops->sendrecv_files)) {
		ret = c->ops->sendrecv_files(c->h, slen ? store_io_fd(in) : -1, off, slen, dest, fd, at,
					     rlen, src, &werr);
		if (!ret && fd >= 0)
			*put = store_file_wrote(f, rlen, werr);
		return ret;
	}
	ret = slen ? redun_sendrecv_io(c, in, off, slen, dest, back, rlen, src, buf, rerr) :
	      c->ops->sendrecv(c->h, NULL, 0, dest, back, rlen, src);
	if (!ret && rlen && !*put)
		*put = store_file_write(f, back, rlen);
	return ret;
}

int redun_send_file(const struct redun_comm *c, struct store_io *in, const char *what, int dest,
		    void *buf)
{
	uint64_t size = in ? store_io_size(in) : XFER_FAILED;
	int ret = 0;

	if (!in)
		ret = err_set(-EIO, "%s: cannot read it to send to rank %d", what, dest);
	if (c->ops->send(c->h, &size, sizeof(size), dest) && !ret)
		ret = -EIO;
	for (uint64_t off = 0; size != XFER_FAILED && off < size;) {
		size_t n = size - off < XFER_PIECE ? (size_t)(size - off) : XFER_PIECE;

		if (redun_sendrecv_io(c, in, off, n, dest, NULL, 0, -1, buf, &ret) && !ret)
			ret = -EIO;
		off += n;
	}
	return ret;
}

int redun_recv_file(const struct redun_comm *c, int src,
		    int (*put)(void *ctx, const void *buf, size_t len), void *ctx, int ret, void *buf)
{
	uint64_t size = 0;

	if (c->ops->recv(c->h, &size, sizeof(size), src))
		return ret ? ret : -EIO;
	if (size == XFER_FAILED)
		return ret ? ret : err_set(-EIO, "rank %d could not send its image", src);
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < XFER_PIECE ? (size_t)(size - off) : XFER_PIECE;

		if (c->ops->recv(c->h, buf, n, src))
			return ret ? ret : -EIO;   /* the communicator failed: nothing more comes */
		if (!ret)
			ret = put(ctx, buf, n);
		off += n;
	}
	return ret;
}

int redun_held_moved(const struct redun_set *set, const char *fmt, int me, int s, char ckpt[64],
		     char name[64])
{
	char file[32];

	redun_name(file, fmt, s);
	if (strcmp(set->node[s], set->node[me]) == 0 || !store_io_exists(set->local, set->ckpt, file))
		return 0;
	snprintf(ckpt, 64, "%s", set->ckpt);
	snprintf(name, 64, "%s", file);
	return 1;
}

int redun_held_moved_image(const struct redun_set *set, int me, int s, char ckpt[64], char name[64])
{
	return redun_held_moved(set, REDUN_FILE, me, s, ckpt, name);
}

/* A scratch file as a sink, written in order. */
struct scratch_sink {
	struct store_io *io;
	uint64_t off;
};

static int put_scratch(void *ctx, const void *buf, size_t len)
{
	struct scratch_sink *k = ctx;
	int ret = store_io_write(k->io, buf, len, k->off);

	k->off += len;
	return ret;
}

/* The holder's side: send member s's file held here. */
static int send_held(const struct redun_set *set, const struct redun_comm *c, redun_held_fn held,
		     int me, int s, void *buf)
{
	char ckpt[64], name[64];
	struct store_io *in = NULL;
	int ret;

	held(set, me, s, ckpt, name);
	if (store_io_open(set->local, ckpt, name, &in))
		log_warn("rank %d: %s", me, err_msg());
	ret = redun_send_file(c, in, in ? store_io_path(in) : name, s, buf);
	store_io_close(&in);
	return ret;
}

int redun_fetch_held(const struct redun_set *set, const struct redun_comm *c, int need,
		     redun_held_fn held, const char *what, const char *scratch_fmt, int slot,
		     struct redun_found *found)
{
	int me = redun_rank(c), n = set->nranks, leader = redun_node_leader(set, me);
	int64_t *needs = calloc((size_t)n, sizeof(int64_t));
	int64_t *holder = calloc((size_t)n, sizeof(int64_t));
	void *buf = redun_xfer_get();
	char ckpt[64], name[64];
	int ret = 0, sent = 0, any = 0, ok = needs && holder && buf;
	int64_t all_ok = ok;

	/* every buffer first, agreed on: no member receives into nothing */
	c->ops->allreduce_i64(c->h, &all_ok, 1, REDUN_MIN);
	if (!all_ok) {
		ret = err_set(-ENOMEM, "%s", ok ? "another rank is out of memory" : "out of memory");
		goto out;
	}
	needs[me] = need;
	c->ops->allreduce_i64(c->h, needs, (size_t)n, REDUN_MAX);
	for (int s = 0; s < n; s++) {
		/* -1: the member's own node holds it, nothing to move */
		holder[s] = !needs[s] ? INT64_MAX :
			    s == me ? (held(set, me, s, ckpt, name) ? -1 : INT64_MAX) :
			    leader && held(set, me, s, ckpt, name) ? me : INT64_MAX;
		any |= needs[s] != 0;
	}
	if (any)
		c->ops->allreduce_i64(c->h, holder, (size_t)n, REDUN_MIN);
	for (int s = 0; any && s < n; s++) {
		if (!needs[s] || holder[s] == INT64_MAX)
			continue;
		if (holder[s] < 0) {
			if (me == s) {
				held(set, me, s, found->ckpt, found->name);
				found->s = set->local;
				ret = 1;
				log_info("rank %d: found its %s in this node's cache", s, what);
			}
		} else if (me == holder[s]) {
			sent = send_held(set, c, held, me, s, buf) ?: sent;
		} else if (me == s) {
			struct scratch_sink k = { NULL, 0 };
			char file[32];

			redun_name(file, scratch_fmt, s);
			snprintf(found->scratch[slot], sizeof(found->scratch[slot]), "%s", file);
			found->scratch_in = set->local;
			ret = store_scratch_create(set->local, file, &k.io);
			ret = redun_recv_file(c, (int)holder[s], put_scratch, &k, ret, buf);
			store_io_close(&k.io);
			if (!ret) {
				found->s = set->local;
				found->ckpt[0] = '\0';
				snprintf(found->name, sizeof(found->name), "%s", file);
				ret = 1;
				log_info("rank %d: fetched its %s from rank %d's node", s, what,
					 (int)holder[s]);
			}
		}
	}
out:
	free(needs);
	free(holder);
	redun_xfer_put(buf);
	return ret < 0 ? ret : sent ? sent : ret;
}

/* The recover of single and global (the global tier's copy is engine.c's
 * last resort). */
int redun_recover_moved(const struct redun_set *set, const struct redun_comm *c, int need,
			redun_accept_fn accept, void *arg, struct redun_found *found)
{
	char why[REDUN_MSG_LEN];
	int ret;

	/* the error of looking in this node's cache, kept when no node has it */
	snprintf(why, sizeof(why), "%s", err_msg());
	ret = redun_fetch_held(set, c, need, redun_held_moved_image, "image", ".fetched-%05d.img", 0,
			       found);
	if (ret > 0)
		return accept(arg, found->s, found->ckpt[0] ? found->ckpt : NULL, found->name);
	if (ret == 0 && need)
		ret = err_set(-ENOENT, "%s", why);
	return ret;
}

void redun_found_drop(struct redun_found *found)
{
	for (int i = 0; i < 2; i++)
		if (found->scratch[i][0] && found->scratch_in &&
		    store_scratch_remove(found->scratch_in, found->scratch[i]))
			log_debug("%s: %s", found->scratch[i], err_msg());
	memset(found, 0, sizeof(*found));
}
