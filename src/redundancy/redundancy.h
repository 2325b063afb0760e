/* redundancy.h - the redundancy engine: parity over equal-length blocks in
 * memory, where each rank's redundancy goes (groups, partners), and the
 * levels (single, partner, rs, global) applied to a set of files in the
 * store's tiers, over a transport, by an idle-priority progress engine.
 * The second half of this header (after "the engine") is the part callers
 * other than libstasis use: a node agent holding a rank's image file in a
 * tier asks for a level of that file set with redun_upgrade().
 *
 * A scheme is a table of operations chosen by name (redun_find): "xor" (k data
 * blocks + 1 parity block, the XOR of the data) and "rs" (k data + m parity,
 * Reed-Solomon over GF(2^8) with a Cauchy matrix, computed by ISA-L). The math
 * and the layout rules are in docs/redundancy.md.
 *
 * Blocks are plain memory of one common length. The schemes do not know what a
 * block holds: a caller whose pieces (files, images) have different lengths
 * pads each to the longest with zeros and records the true lengths itself
 * (in a manifest or index record), then cuts the padding off after a rebuild.
 * Block i < k is data block i, block k + j is parity block j.
 *
 * Lifecycle (the SCR component style): redun_create() builds the tables of one
 * scheme for one (k, m) once; redun_encode() and redun_rebuild() use them as
 * often as needed; redun_free() releases them. A context is read-only after
 * creation, so several threads may encode and rebuild with one context at once
 * (on different blocks).
 *
 * Functions return 0 or a negative errno, with a one-line message in err_msg()
 * (common/err.h) on failure.
 */
#ifndef STASIS_REDUNDANCY_REDUNDANCY_H
#define STASIS_REDUNDANCY_REDUNDANCY_H

#include <stddef.h>
#include <stdint.h>

/* Most blocks (k + m) in one stripe: GF(2^8) has 256 elements and the Cauchy
 * construction needs k + m distinct ones. The same bound caps a group. */
#define REDUN_MAX_BLOCKS 255

struct redun_scheme;    /* a table of operations; static, never freed */
struct redun_ctx;       /* one scheme's tables for one (k, m) */

/* The scheme called name ("xor" or "rs"); NULL with a message naming the
 * known schemes if there is none. */
const struct redun_scheme *redun_find(const char *name);
const char *redun_scheme_name(const struct redun_scheme *scheme);

/* Build the tables of scheme for k data and m parity blocks.
 * in: k >= 1, m >= 1, k + m <= REDUN_MAX_BLOCKS; "xor" needs m == 1.
 * out: *out, freed with redun_free(). -EINVAL with a message on a bad (k, m),
 * -ENOMEM. */
int redun_create(const struct redun_scheme *scheme, unsigned k, unsigned m,
		 struct redun_ctx **out);
/* Free the context and set *ctx to NULL; NULL and *ctx == NULL are fine. */
void redun_free(struct redun_ctx **ctx);

/* Compute the m parity blocks of k data blocks of len bytes each.
 * in: data[k] (read only). out: parity[m] (overwritten; must not overlap the
 * data). Any len, including 0; no alignment needed. A caller holding
 * `uint8_t *blocks[k + m]` passes (const uint8_t *const *)blocks and
 * blocks + k: C does not add the inner const by itself. */
int redun_encode(const struct redun_ctx *ctx, size_t len,
		 const uint8_t *const data[], uint8_t *parity[]);

/* Regenerate, in place, every block whose present[i] is 0, from the others.
 * in: present[k + m] (non-zero: blocks[i] holds its bytes), blocks[i] for
 *     present i (read only).
 * out: blocks[i] for missing i (each a buffer of len bytes, overwritten).
 * Data and parity blocks alike may be missing. Nothing is written and
 * -ENODATA is returned, with a message saying how many blocks are missing and
 * how many the scheme tolerates, when more than m are missing. */
int redun_rebuild(const struct redun_ctx *ctx, size_t len, uint8_t *blocks[],
		  const uint8_t present[]);

/* Group layout for RS (and xor) sets: which ranks encode together.
 * in: nranks, node[nranks] (the name of each rank's node: ranks with equal
 *     names share a node, the failure domain), group_size (2..255, the
 *     largest group wanted, k + m).
 * out: group[nranks] (the group of each rank, numbered 0..*ngroups-1 in the
 *      order of their lowest rank; a group's members in rank order are its
 *      block order), *ngroups, *alone (ranks left in a group of their own:
 *      their level degrades; 0 when every rank has a group of >= 2 nodes).
 * Rule: no group holds two ranks of one node; the fewest groups that allows,
 * with sizes that differ by at most one and never exceed group_size. A pure
 * function of its input, so every rank computes the same layout. */
int redun_layout_groups(int nranks, const char *const node[], unsigned group_size,
			int group[], int *ngroups, int *alone);

/* Partner layout for PARTNER copies: where each rank's copy goes.
 * in: nranks, node[nranks] as above.
 * out: partner[nranks] (the rank that holds rank r's copy, always on another
 *      node; -1 when there is only one node), *alone (ranks without a
 *      partner: their level degrades).
 * Rule: nodes in the order their first rank appears form a ring; the rank at
 * position p on its node (p-th lowest rank there) sends to the rank at
 * position p mod n on the next node, which has n ranks. A rank may therefore
 * hold several copies, or none. A pure function of its input. */
int redun_layout_partners(int nranks, const char *const node[], int partner[], int *alone);

/* ==== the engine: levels over a set of files (docs/redundancy.md) ====
 *
 * A file set has one member per rank of a communicator. Member r's file is
 * REDUN_FILE (rank-<r>.img) in checkpoint `ckpt` of its node's tier, already
 * committed and sealed there (the level adds redundancy to an established
 * checkpoint, under the store's ANNEX records). Every call below is
 * collective over the communicator: each member calls it with the same set
 * description, and every member returns the same verdict (a member that
 * fails still takes part in every exchange, so the others never wait for
 * bytes that do not come). */

#define REDUN_MSG_LEN 384
#define REDUN_FILE "rank-%05d.img"        /* member r's file */
#define REDUN_PARTNER_FILE "partner-%05d.img" /* the copy of member r's file on its partner's node */
#define REDUN_RS_FILE "rs-%05d.img"       /* the parity member r holds */

struct store;
struct store_file;
struct img_writer_opts;

/* -- transport: a table of operations; the job's MPI (redun_comm_mpi), the
 * TCP link (redun_link_open), one process (redun_comm_serial) -- */

enum redun_op { REDUN_MIN, REDUN_MAX, REDUN_SUM };

struct redun_comm_ops {
	const char *name;
	int (*rank)(void *h);
	int (*size)(void *h);
	int (*barrier)(void *h);
	/* In place, element-wise over n values. */
	int (*allreduce_i64)(void *h, int64_t *v, size_t n, enum redun_op op);
	int (*bcast)(void *h, void *buf, size_t len, int root);
	/* Every rank contributes len bytes; all receive size * len bytes. */
	int (*allgather)(void *h, const void *mine, size_t len, void *all);
	/* Blocking point to point; callers pair them in one global order. */
	int (*send)(void *h, const void *buf, size_t len, int dest);
	int (*recv)(void *h, void *buf, size_t len, int src);
	/* Send to dest and receive from src at once. A length of 0 sends or
	 * receives nothing at all (no empty message). */
	int (*sendrecv)(void *h, const void *sbuf, size_t slen, int dest, void *rbuf, size_t rlen,
			int src);
	/* Optional (NULL: the engine reads into memory and calls sendrecv):
	 * the same, the bytes sent being slen bytes of the open file fd at
	 * offset off (sendfile: one copy fewer). A file shorter than that is
	 * made up with zeros, so the receiver still gets slen bytes. */
	int (*sendrecv_fd)(void *h, int fd, uint64_t off, size_t slen, int dest, void *rbuf,
			   size_t rlen, int src);
	/* Optional (NULL: sendrecv_fd and a write): the same, the bytes
	 * received going into the open file rfd at offset roff (the TCP link
	 * splices them from the socket: no copy through a buffer), or nowhere
	 * with rfd < 0. A write error is the receiver's own: the bytes are
	 * drained all the same, *werr gets it (0: none), the return value is
	 * the transport's. */
	int (*sendrecv_files)(void *h, int sfd, uint64_t soff, size_t slen, int dest, int rfd,
			      uint64_t roff, size_t rlen, int src, int *werr);
	void (*free)(void *h);
};

struct redun_comm {
	const struct redun_comm_ops *ops;
	void *h;                /* the backend's handle, owned by the comm */
};

extern const struct redun_comm_ops redun_comm_serial;   /* one rank, h NULL */

#ifdef MPI_VERSION
/* The MPI backend on a duplicate of comm (only for callers that include
 * <mpi.h> first; built once per MPI library, as comm_mpi.c). */
int redun_comm_mpi(MPI_Comm comm, struct redun_comm *out);
#endif

/* The TCP link: a transport of its own between the members of job (another
 * communicator, used only here to exchange addresses and a secret), for
 * threads that must not call the job's MPI. Collective over job.
 * out: *out, released with redun_comm_close. Configuration: link_address,
 * link_timeout. */
int redun_link_open(const struct redun_comm *job, struct redun_comm *out);
/* Free the backend's handle; *c becomes empty. */
void redun_comm_close(struct redun_comm *c);

/* Collective: the lowest rank whose ok is 0 (the communicator's size if
 * none); msg gets that rank's err_msg(). A failing communicator counts as
 * rank 0 failing, with its message. */
int redun_agree(const struct redun_comm *c, int ok, char msg[REDUN_MSG_LEN]);

/* -- levels -- */

struct redun_set {
	const char *ckpt;               /* the checkpoint's name, the same in every tier */
	struct store *local;            /* this member's node tier: its file, copies, parity */
	struct store *global;           /* the global tier (level global, flush); or NULL */
	int nranks;                     /* the communicator's size */
	const char *const *node;        /* node[nranks]: where each member runs now */
	const char *const *node_then;   /* where each ran when the checkpoint was taken
					 * (its layout); NULL: node */
	const int64_t *size;            /* size[nranks]: each member's file */
	unsigned group_size, rs_parity; /* rs: group size (2..255), parity per group */
	const struct img_writer_opts *writer;   /* for parity images; NULL: defaults */
	const char *producer;           /* the "producer" of parity images */
	struct redun_stream *stream;    /* partner, rs: the copies sent or parity encoded
					 * while the files were written
					 * (redun_stream_begin); NULL: none */
};

/* A level: "single", "partner", "rs" or "global" (a table of operations,
 * one file each: level_*.c). NULL with a message naming them if unknown. */
struct redun_level;
const struct redun_level *redun_level_find(const char *name);
const char *redun_level_name(const struct redun_level *level);

/* Stages at which a caller's hook may fail this member (its fault points). */
enum redun_stage {
	REDUN_STAGE_BEGIN,              /* before the level's copies */
	REDUN_STAGE_RECORD,             /* before rank 0 records the level (rank 0 only) */
};

struct redun_request {
	const struct redun_level *level;
	int flush;                      /* also copy every file to the global tier */
	/* Optional: a nonzero return fails this member at that stage. */
	int (*stage)(void *arg, enum redun_stage st);
	void *arg;
};

/* Collective: bring checkpoint set->ckpt to req's level. The level's copies
 * (partner copies, rs parity, the flush) are files of the checkpoint's annex
 * in set->local (set->global for the flush); then rank 0 records the level
 * reached in set->global's index (set->local's when there is no global
 * tier). Partner and rs degrade, with a warning, where a member has no
 * other node. Returns 0, or -EIO with "checkpoint C stays established at
 * level L: why" on every member when some copy failed (what was reached is
 * recorded all the same). Single without flush does nothing. */
int redun_upgrade(const struct redun_set *set, const struct redun_comm *c,
		  const struct redun_request *req);

/* Room in set->local for what member `rank` will hold at level, taken
 * before its first checkpoint: a spare file (store_spare_reserve) for each
 * partner copy it keeps, or for its rs parity, assuming every member's file
 * is about size bytes. Writing over allocated pages of a RAM disk runs
 * about twice as fast as getting new ones. Nothing for single and global,
 * or without recycling. Not collective: set->node, nranks, group_size and
 * rs_parity are all it reads. */
int redun_reserve(const struct redun_set *set, const struct redun_level *level, int rank,
		  uint64_t size);

/* -- streaming: partner copies and rs parity made while the files are written --
 *
 * A member whose file is still being written by another process (the
 * *.tmp of begun checkpoint set->ckpt in set->local) starts its level's
 * copies as it grows, so that the level is reached shortly after the
 * write ends instead of a whole copy or encode later. redun_stream_begin
 * (collective; reads set->ckpt, local, nranks, node, and for rs
 * group_size, rs_parity, producer) returns once every member's file is
 * committed (its writer gave it its final name) or the stream was
 * abandoned: abort(arg) is polled while a member waits for bytes, and
 * nonzero (the checkpoint failed) ends the stream on every member.
 * partner sends every member's file but its last piece; rs encodes the
 * parity of every row of 1 MiB cells but the last (a streamed parity
 * image lays its segments out in rows: docs/redundancy.md). What was
 * received or encoded waits, uncommitted, as *.tmp files of the
 * checkpoint's early annex (store_ckpt_annex_early). partner streams only
 * when the partners form a permutation (every member keeps one copy, as
 * with equal ranks per node); other levels never: then *out is NULL and
 * the level runs as usual. Then redun_upgrade at that level, with
 * set->stream, does only what is left (the last pieces or rows) and
 * commits, with the same fault points and agreements as without a stream:
 * a stream cut off never yields a committed copy or parity.
 * redun_stream_free drops what was not committed (its *.tmp). */
struct redun_stream;
int redun_stream_begin(const struct redun_level *level, const struct redun_set *set,
		       const struct redun_comm *c, int (*abort)(void *arg), void *arg,
		       struct redun_stream **out);
void redun_stream_free(struct redun_stream **s);

/* -- checked copies: an image copied into a store file, every checksum of
 * its format (each chunk's CRC32C, the header's, the manifest's, the
 * footer's) verified on the bytes copied, while the image may still grow:
 * the copies to the global tier (level global and the flush; the node
 * agents' staged images) --
 *
 * redun_ccopy_create: fd is the image (read only; the caller's, left
 * open), name its path (messages, and the manifest read at the end), f the
 * copy (the caller's: it commits or frees it). redun_ccopy_to copies the
 * image's bytes up to byte upto (which its writer has written), in pieces
 * of at most `piece` bytes, each read straight into f's stage where it has
 * room (one copy of the bytes less); hook (NULL: none) sees each piece
 * after it is read and before it is checked and written (fault points: a
 * nonzero return fails the copy; it may alter the bytes as a bad page
 * would), with last set for the piece that ends the image (final: upto is
 * its end). redun_ccopy_end: the bytes copied make a whole image and every
 * chunk its manifest names passed; -EBADMSG with a message naming the
 * image and the place otherwise. */
struct redun_ccopy;
typedef int (*redun_ccopy_hook)(void *arg, void *piece, size_t len, int last);
int redun_ccopy_create(int fd, const char *name, struct store_file *f, struct redun_ccopy **out);
int redun_ccopy_to(struct redun_ccopy *c, uint64_t upto, size_t piece, int final,
		   redun_ccopy_hook hook, void *arg);
uint64_t redun_ccopy_copied(const struct redun_ccopy *c);
int redun_ccopy_end(struct redun_ccopy *c);
void redun_ccopy_free(struct redun_ccopy **c);

/* Where recovery found a member's file: in checkpoint ckpt of store s, or
 * (ckpt "") in a scratch file of s's job directory. */
struct redun_found {
	struct store *s;
	char ckpt[64];
	char name[64];
	char scratch[2][64];            /* scratch files to remove after use ("": none) */
	struct store *scratch_in;       /* the store holding them */
};

/* The caller's check of a candidate file (chunk CRCs, image identity):
 * 0 to take it, else a negative errno with a message. Called only on the
 * member that needs the file. */
typedef int (*redun_accept_fn)(void *arg, struct store *s, const char *ckpt, const char *name);

/* Collective: every member without a good file of its own (have_own 0)
 * gets one through the level: single and global fetch it from the node
 * where it ran when the checkpoint was taken; partner from the node
 * holding its partner copy; rs rebuilds it from its group's files and
 * parity. With flushed (or level global), the global tier's copy is the
 * last resort. Every candidate goes through accept; *found says where the
 * accepted one is (remove its scratch files with redun_found_drop once
 * read). Returns 0 (this member has a file: its own, or *found), or a
 * negative errno with a message (each member its own: the caller agrees). */
int redun_recover(const struct redun_level *level, const struct redun_set *set,
		  const struct redun_comm *c, int have_own, int flushed, redun_accept_fn accept,
		  void *arg, struct redun_found *found);
void redun_found_drop(struct redun_found *found);

/* -- the progress engine: upgrades on a thread at idle priority -- */

/* A unit of work, run on the progress thread with its communicator. The
 * engine calls free once run returned. */
struct redun_task {
	int (*run)(struct redun_task *t, const struct redun_comm *c);
	void (*free)(struct redun_task *t);
	struct redun_task *next;        /* the queue's */
};

struct redun_progress;
/* Start the thread; it takes over comm (closed by redun_progress_stop).
 * idle: run at SCHED_IDLE except while someone waits for it. */
int redun_progress_start(struct redun_comm *comm, int idle, struct redun_progress **out);
/* Queue a task (never fails: every member runs the same tasks in order). */
void redun_progress_queue(struct redun_progress *p, struct redun_task *t);
/* Wait until at most `pending` tasks are queued or running, at normal
 * priority meanwhile. With report, returns (and forgets) the error of a task
 * that failed since the last report, with its message. */
int redun_progress_wait(struct redun_progress *p, unsigned pending, int report);
/* Finish every task, stop the thread, close its comm; *p becomes NULL. */
void redun_progress_stop(struct redun_progress **p);

#endif
