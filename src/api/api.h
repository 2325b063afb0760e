/* api.h - inside libstasis, the application-level library (private).
 *
 * The public contract is include/stasis.h. The library is a serial core
 * (api.c: state, types, protection, errors; checkpoint.c: writing and
 * recovering checkpoints; interval.c: when to checkpoint) that talks to the
 * other ranks only through a communicator backend, a table of operations:
 * comm_serial.c for one process, comm_mpi.c for MPI (compiled once per MPI
 * library). docs/applevel.md describes the levels and the restart rules.
 */
#ifndef STASIS_API_API_H
#define STASIS_API_API_H

#include <stddef.h>
#include <stdint.h>

#include "stasis.h"

struct store;
struct store_ckpt;

enum api_op { API_MIN, API_MAX, API_SUM };

/* Collective operations over the job's ranks; every one returns 0 or a
 * negative errno (a failing communicator is fatal to the job anyway). */
struct api_comm_ops {
	const char *name;
	int (*rank)(void *h);
	int (*size)(void *h);
	int (*barrier)(void *h);
	/* In place, element-wise over n values. */
	int (*allreduce_i64)(void *h, int64_t *v, size_t n, enum api_op op);
	int (*bcast)(void *h, void *buf, size_t len, int root);
	/* Every rank contributes len bytes; all receives size*len bytes. */
	int (*allgather)(void *h, const void *mine, size_t len, void *all);
	/* Blocking point to point; callers pair them in one global order. */
	int (*send)(void *h, const void *buf, size_t len, int dest);
	int (*recv)(void *h, void *buf, size_t len, int src);
	/* Send to dest and receive from src at once. A length of 0 sends or
	 * receives nothing at all (no empty message): callers pair only the
	 * transfers that carry bytes. */
	int (*sendrecv)(void *h, const void *sbuf, size_t slen, int dest, void *rbuf, size_t rlen,
			int src);
	void (*free)(void *h);
};

extern const struct api_comm_ops api_comm_serial;

/* The communicator the calling thread uses: the progress link (link.c) on
 * the progress thread, the job's (MPI or serial) everywhere else. The code
 * shared by both (agreement, partner copies, rs parity) calls these. */
struct api_comm {
	const struct api_comm_ops *ops;
	void *h;
};
const struct api_comm *api_cur(void);
static inline int api_barrier(void) { return api_cur()->ops->barrier(api_cur()->h); }
static inline int api_allreduce(int64_t *v, size_t n, enum api_op op)
{
	return api_cur()->ops->allreduce_i64(api_cur()->h, v, n, op);
}
static inline int api_bcast(void *buf, size_t len, int root)
{
	return api_cur()->ops->bcast(api_cur()->h, buf, len, root);
}
static inline int api_allgather(const void *mine, size_t len, void *all)
{
	return api_cur()->ops->allgather(api_cur()->h, mine, len, all);
}
static inline int api_send(const void *buf, size_t len, int dest)
{
	return api_cur()->ops->send(api_cur()->h, buf, len, dest);
}
static inline int api_recv(void *buf, size_t len, int src)
{
	return api_cur()->ops->recv(api_cur()->h, buf, len, src);
}
static inline int api_sendrecv(const void *sbuf, size_t slen, int dest, void *rbuf, size_t rlen, int src)
{
	return api_cur()->ops->sendrecv(api_cur()->h, sbuf, slen, dest, rbuf, rlen, src);
}

/* link.c: the progress threads' own transport, TCP between ranks (the
 * application's MPI may not be thread-safe, so they never call it).
 * api_link_open is collective over the job's communicator: every rank
 * listens, and one allgather tells all the others where, with a secret
 * drawn by rank 0 that every connection must present. */
extern const struct api_comm_ops api_comm_link;
int api_link_open(void **out);

/* progress.c: upgrades of established checkpoints (partner copies, rs
 * parity, the flush to the global tier) on a progress thread at idle
 * priority, one checkpoint at a time, in the order they were taken. */
struct api_upgrade {
	char name[64];
	int level;              /* the checkpoint's level */
	int flush;              /* also copy every image to the global tier */
	int64_t *sizes;         /* every rank's image size (owned by the upgrade) */
	struct api_upgrade *next;       /* the queue's */
};
int api_progress_start(void);
/* Queue an upgrade allocated by the caller (calloc; with its sizes): the
 * queue owns and frees it. Never fails, so a rank never skips an upgrade
 * the others run. */
void api_progress_queue(struct api_upgrade *u);
/* Wait until at most `pending` upgrades are queued or running; the progress
 * thread runs at normal priority while someone waits for it. With report,
 * returns (and forgets) the error of an upgrade that failed since the last
 * report, or 0; without, returns 0 and keeps it. */
int api_progress_wait(unsigned pending, int report);
void api_progress_stop(void);

struct api_var {
	int id;
	void *ptr;
	size_t count;
	size_t elem;            /* bytes per element */
	stasis_type type;
	int distributed;
	uint64_t global_count, offset;   /* in elements, when distributed */
};

#define API_NAME_LEN 128
#define API_MAX_CANDIDATES 16

struct api_state {
	int initialized;
	int finalized;
	const struct api_comm_ops *comm;
	void *ch;                               /* the backend's handle */
	int rank, size;
	char job[API_NAME_LEN];
	char node[API_NAME_LEN];
	char (*nodes)[API_NAME_LEN];            /* every rank's node */
	int node_leader;                        /* lowest rank on its node */
	unsigned node_ranks;                    /* ranks on this node */
	int *partner;                           /* rank holding each rank's copy, or -1 */
	int partner_alone;                      /* some rank has no partner */
	int partner_from;                       /* whose copy this rank keeps, when every
						 * rank keeps exactly one; else -1 */
	int one_node;                           /* every rank on one node */
	int warned_partner, warned_rs;
	int async;                              /* upgrades run on the progress thread */
	uint64_t reserved;                      /* node cache room taken for this rank's image */
	int64_t group_size, rs_parity;          /* rs level layout, from the configuration */
	struct store *local;                    /* this node's cache */
	struct store *global;                   /* the global directory */
	struct api_var *vars;
	size_t nvars, cap;
	size_t *types;                          /* user type sizes, index = type - 6 */
	size_t ntypes;
	int status;                             /* STASIS_FRESH or STASIS_RESTARTED */
	unsigned taken;                         /* checkpoints taken by this run */
	double cost_sum;                        /* seconds blocked in checkpoints */
	unsigned cost_n;
	double last_ckpt;                       /* monotonic time of the last one */
	double started;
};

extern struct api_state api;

/* Common initialisation once the communicator is set (api.c). */
int api_init_common(const char *config);
/* Record err_msg() as the message for code, return code (api.c). */
int api_fail(int code);
double api_now(void);
struct api_var *api_var_find(int id);

/* files.c: drop an open output or restart set (finalize). */
void api_files_release(void);

/* checkpoint.c */
struct img_writer_opts;
/* The image writer's options from the configuration, with worker threads
 * only where the node has cores to spare for them (unless configured). */
void api_writer_opts(struct img_writer_opts *opts);
#define API_MSG_LEN 384
/* Collective: the lowest rank whose ok is 0 (api.size if none); msg gets
 * that rank's err_msg(). */
int api_agree(int ok, char msg[API_MSG_LEN]);
extern const char *const api_level_names[];
int api_level_parse(const char *name);
/* AUTO from the configuration, degrading partner/rs on one node; or a
 * negative errno. */
int api_level_resolve(int level);
int api_ckpt_write(int level, int valid);
/* Collective over the calling thread's communicator: bring an established
 * checkpoint to its level (partner copies, rs parity, flush), record the
 * level reached in the indexes and prune the node caches. */
int api_upgrade_run(const struct api_upgrade *u);
int api_ckpt_recover(int only_id);        /* -1: every variable */
int api_ckpt_latest(char *name, size_t len);
/* checkpoint.json's common fields (level, ranks, job, nodes), and writing a
 * JSON object (reference taken) as a committed file of a checkpoint. */
struct json_t;
struct json_t *api_info_base(int level);
/* A committed JSON file of a checkpoint, checked against the size and CRC
 * the index recorded for it; NULL with a message if missing or damaged. */
struct json_t *api_load_json(struct store *s, const char *ckpt, const char *name);
int api_write_json(struct store_ckpt *c, const char *name, struct json_t *o);
/* Collective: established checkpoints of the job, newest first: those of
 * protected memory (output 0) or the output sets of routed files (1). */
int api_candidates(char names[API_MAX_CANDIDATES][64], int64_t *n, int output);

#endif
