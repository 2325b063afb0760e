/* level.h - what the level files share (private to redundancy/).
 *
 * A level is a table of operations (struct redun_level), one file each:
 * level_single.c, level_partner.c, level_rs.c, level_global.c. engine.c
 * sequences them (agreements, the level record, the global tier as the last
 * resort); xfer.c moves whole files between members and finds the files a
 * node holds for others. Calls run one way: engine.c -> level_*.c ->
 * xfer.c, comm.c. Every function here is collective over c unless it says
 * otherwise.
 */
#ifndef STASIS_REDUNDANCY_LEVEL_H
#define STASIS_REDUNDANCY_LEVEL_H

#include "redundancy/redundancy.h"

#include <stddef.h>
#include <stdint.h>

struct store_ckpt;

struct redun_level {
	const char *name;
	/* Add this level's copies for the set: files of lc, the annex of
	 * set->ckpt in set->local. *degraded: this member has no other node. */
	int (*apply)(const struct redun_set *set, const struct redun_comm *c, struct store_ckpt *lc,
		     int *degraded);
	/* Get this member a file when it has none (need); see redun_recover. */
	int (*recover)(const struct redun_set *set, const struct redun_comm *c, int need,
		       redun_accept_fn accept, void *arg, struct redun_found *found);
	/* Optional: begin this level's copies while the files are written
	 * (redun_stream_begin); *out NULL when the layout does not allow it. */
	int (*stream)(const struct redun_set *set, const struct redun_comm *c,
		      int (*abort)(void *arg), void *arg, struct redun_stream **out);
};

/* What a level's stream leaves for its apply: each level's own state
 * begins with this header, and its apply takes set->stream only when
 * level is itself. */
struct redun_stream {
	const struct redun_level *level;
	void (*free)(struct redun_stream *s);  /* drops what was not committed */
};

extern const struct redun_level redun_level_single;
extern const struct redun_level redun_level_partner;
extern const struct redun_level redun_level_rs;
extern const struct redun_level redun_level_global;

static inline int redun_rank(const struct redun_comm *c)
{
	return c->ops->rank(c->h);
}

/* A member's file names (REDUN_FILE and the others) into buf[32]. */
void redun_name(char buf[32], const char *fmt, int rank);

/* Whether rank is the lowest rank on its node now (not collective). */
int redun_node_leader(const struct redun_set *set, int rank);

/* Transfer buffers of XFER_PIECE bytes, reused across calls (fresh pages
 * cost more than the copy on this class of machine): NULL when out of
 * memory. Thread-safe. Files move in pieces of that size, small enough to
 * stay in a core's L2 cache between their receipt, their CRC and their
 * write: with 8 MiB pieces the write of a received partner copy took
 * 0.32-0.48 s per rank of 256 MiB, with 1 MiB 0.07-0.11 s. */
#define XFER_PIECE (1u << 20)
void *redun_xfer_get(void);
void redun_xfer_put(void *buf);

struct store_io;
/* Send slen bytes of in at off to dest while receiving rlen bytes from src
 * into rbuf (rlen 0: only send): with the transport's sendrecv_fd when it
 * has one, else read into buf (XFER_PIECE bytes). A read error still sends
 * slen bytes, which the receiver's checks reject, and is kept in *rerr;
 * the return value is the transport's. */
int redun_sendrecv_io(const struct redun_comm *c, struct store_io *in, uint64_t off, size_t slen,
		      int dest, void *rbuf, size_t rlen, int src, void *buf, int *rerr);

/* A stream's wait when it had nothing to move (the files it follows grew
 * too little): *idle ns, then twice as long the next time, up to max ns
 * (the writers of those files need the CPU more). The caller sets *idle
 * to REDUN_STREAM_IDLE_NS again once it moved something. */
#define REDUN_STREAM_IDLE_NS 2000000
void redun_stream_idle(long *idle, long max);

struct store_file;
/* The same, the rlen bytes received being appended to f (a copy being
 * received): straight into the file when the transport and the file allow
 * (sendrecv_files), else through back (XFER_PIECE bytes) and
 * store_file_write. The first error writing f is kept in *put, and once
 * it is set the bytes are drained, not written; f may be NULL then. */
int redun_sendrecv_file(const struct redun_comm *c, struct store_io *in, uint64_t off, size_t slen,
			int dest, struct store_file *f, size_t rlen, int src, void *buf, void *back,
			int *rerr, int *put);

/* Send a whole file (opened by the caller, NULL if it could not be: the
 * receiver is told) to dest: its size, then pieces. Not collective: the
 * receiver calls redun_recv_file at the same point of the global order. */
int redun_send_file(const struct redun_comm *c, struct store_io *in, const char *what, int dest,
		    void *buf);
/* Receive what redun_send_file sends; each piece goes to put(ctx, ...)
 * (an image sink: store_file_write) unless the receiver already failed
 * (ret): the stream is always drained. */
int redun_recv_file(const struct redun_comm *c, int src,
		    int (*put)(void *ctx, const void *buf, size_t len), void *ctx, int ret, void *buf);

/* Collective: every member that needs one (need) gets the file that
 * held(set, s, ...) says a node holds for member s: the holder (a node
 * leader, or the member itself for its own node) sends it into a scratch
 * file named scratch_fmt. Returns 1 with *found naming where the member's
 * copy is (its own node's, or the scratch file), 0 when no node holds one,
 * or a negative errno. what: "data", "image", "rs parity", for messages. */
typedef int (*redun_held_fn)(const struct redun_set *set, int me, int s, char ckpt[64], char name[64]);
int redun_fetch_held(const struct redun_set *set, const struct redun_comm *c, int need,
		     redun_held_fn held, const char *what, const char *scratch_fmt, int slot,
		     struct redun_found *found);

/* Member s's file fmt (REDUN_FILE, REDUN_RS_FILE) in this node's cache
 * when s ran here before and runs elsewhere now; _image: its REDUN_FILE
 * (single, global and rs look for moved members with them). */
int redun_held_moved(const struct redun_set *set, const char *fmt, int me, int s, char ckpt[64],
		     char name[64]);
int redun_held_moved_image(const struct redun_set *set, int me, int s, char ckpt[64],
			   char name[64]);

/* The recover of single and global: a member that moved gets its file from
 * the node it left. */
int redun_recover_moved(const struct redun_set *set, const struct redun_comm *c, int need,
			redun_accept_fn accept, void *arg, struct redun_found *found);

#endif
