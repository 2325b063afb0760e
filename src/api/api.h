/* api.h - inside libstasis, the application-level library (private).
 *
 * The public contract is include/stasis.h. libstasis keeps the public entry
 * points and the application's bookkeeping (protected regions, checkpoint
 * names, checkpoint.json, verification of what it loads); the redundancy
 * engine (src/redundancy: transport, levels, progress thread) moves and
 * codes the bytes. Calls run one way, top to bottom:
 *   api.c, comm_mpi.c     public entry points: init, protect, checkpoint...
 *   files.c, interval.c   routed files; when to checkpoint (entry points too)
 *   checkpoint.c          writing a checkpoint, its upgrade as a task
 *   recover.c             restart, on the same or another number of ranks
 *   info.c                levels, agreement, checkpoint.json, candidates
 *   state.c               the state, errors, time
 * docs/applevel.md describes the levels and the restart rules.
 */
#ifndef STASIS_API_API_H
#define STASIS_API_API_H

#include <stddef.h>
#include <stdint.h>

#include "stasis.h"

#include "redundancy/redundancy.h"

struct store;
struct store_ckpt;

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
	struct redun_comm comm;                 /* the job's: MPI, or serial */
	struct redun_progress *progress;        /* the upgrades' thread, when async */
	int rank, size;
	char job[API_NAME_LEN];
	char node[API_NAME_LEN];
	char (*nodes)[API_NAME_LEN];            /* every rank's node */
	int node_leader;                        /* lowest rank on its node */
	unsigned node_ranks;                    /* ranks on this node */
	const char **node_names;                /* nodes[r] as strings (the engine's) */
	int one_node;                           /* every rank on one node */
	int warned_partner;
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

/* state.c: record err_msg() as the message for code, return code. */
int api_fail(int code);
double api_now(void);

/* api.c: common initialisation once api.comm is set (comm_mpi.c). */
int api_init_common(const char *config);
struct api_var *api_var_find(int id);

/* files.c: drop an open output or restart set (finalize). */
void api_files_release(void);

/* info.c */
#define API_MSG_LEN REDUN_MSG_LEN
/* Collective over the job: the lowest rank whose ok is 0 (api.size if
 * none); msg gets that rank's err_msg(). */
int api_agree(int ok, char msg[API_MSG_LEN]);
extern const char *const api_level_names[];
int api_level_parse(const char *name);
/* AUTO from the configuration, degrading partner/rs on one node; or a
 * negative errno. */
int api_level_resolve(int level);
struct img_writer_opts;
/* The image writer's options from the configuration, with worker threads
 * only where the node has cores to spare for them (unless configured). */
void api_writer_opts(struct img_writer_opts *opts);
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
int api_ckpt_latest(char *name, size_t len);
#define API_INFO_FILE "checkpoint.json"

/* checkpoint.c */
int api_ckpt_write(int level, int valid);
/* Wait until at most `pending` upgrades run (none without a progress
 * thread); with report, the error of one that failed. */
int api_upgrades_wait(unsigned pending, int report);

/* recover.c */
int api_ckpt_recover(int only_id);        /* -1: every variable */

#endif
