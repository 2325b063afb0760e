/* node_level.h - redundancy levels for the staged images of an MPI job
 * (docs/levels.md): the node agents bring an established checkpoint to
 * level partner or rs with the redundancy engine (src/redundancy), agent to
 * agent over its TCP link, and rebuild at a restart the images of ranks
 * whose node was lost from what the surviving nodes hold.
 *
 * Every rank of the job is one member of the engine's file set, served by
 * a thread of its node's agent; the members find each other through the
 * coordinator (GATHER/GATHERED lines, src/coord/relay.h), which carries
 * their addresses and a few agreements, and nothing else.
 *
 * The agent's loop calls the node_level_* functions below from its one
 * thread; members run on threads of their own and speak to the coordinator
 * through the agent's locked sender. Functions return 0 or a negative
 * errno with a message in err_msg().
 */
#ifndef STASIS_NODE_NODE_LEVEL_H
#define STASIS_NODE_NODE_LEVEL_H

#include <stddef.h>

struct store;

/* The checkpoint's layout, a file of its directory in the global tier
 * (metadata only, as the launch record): where each rank ran, its image's
 * id and size, and the level asked for. Written by rank 0's member before
 * the level's copies begin. */
#define NODE_LAYOUT_FILE "layout"

/* What the agent lends: its host, the node-local store's place, the global
 * tier, and its line sender to the coordinator (thread-safe). */
struct node_level_env {
	const char *host;
	const char *stage_dir;          /* STASIS_STAGE_DIR */
	const char *local_job;          /* <job>.<stage id>: the node-local store's job */
	void (*to_coord)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};
void node_level_init(const struct node_level_env *env);

/* UPGRADE <ckpt> <level> <group size> <rs parity> from the coordinator
 * (after RESUME): ranks[n] are this node's ranks that wrote their image of
 * ckpt, of a job of size ranks. The node's checkpoint is sealed in the
 * node-local store, then one member thread per rank runs the level; rank
 * 0's says LEVEL <ckpt> <reached> ok|<why> to the coordinator. */
int node_level_upgrade(const char *args, const int *ranks, unsigned n, int size);

/* STREAM <ckpt> <level> <group size> <rs parity> from the coordinator
 * (with WRITE, while the ranks write their images): at level partner or
 * rs, one member thread per rank of ranks[n] (the node's ranks in the
 * checkpoint) sends its rank's image to its partner, or encodes its rs
 * parity, as it is written (redun_stream_begin), then waits for the
 * checkpoint's verdict: its UPGRADE (node_level_upgrade hands it the level
 * asked then, and the members end the copies or parity and commit them)
 * or node_level_abort (the checkpoint failed: what they made goes). Other
 * levels: nothing. */
int node_level_stream(const char *args, const int *ranks, unsigned n, int size);
void node_level_abort(void);

/* The verdict on checkpoint ckpt (RESUME or RESUME failed, before the
 * agent's copies and UPGRADE): established, the node's older checkpoints
 * beyond cache_keep go, their images, partner copies and parity retired
 * into spares the next ones are written over (docs/levels.md, "Spare
 * files"); failed, its own files go. Nothing without staging. */
void node_level_verdict(const char *ckpt, int established);

/* GATHERED <tag> <rank> <hex> from the coordinator (its arguments). */
void node_level_gathered(const char *args);

/* A rank's connection whose first line is RECOVER (lh_stage.c, at a
 * restart): node_level serves it on a member thread (it takes a duplicate
 * of fd) and answers OK <path of the image to read> or ERR <why>. secret:
 * the job's, which the line must present. */
int node_level_recover(int fd, const char *line, const char *secret);

/* Members still running (the agent stays until they end). */
int node_level_busy(void);

/* No member runs and the last one to end upgraded ckpt: its level is over
 * on this node (the global copies, which wait for a level, say which). */
int node_level_over(const char *ckpt);

/* The rebuild itself, callable by any process that is a member of the
 * job's set (one call per rank, all ranks at once, each on a thread of its
 * own; every call collective over the ranks of the job):
 * in:  ckpt (its layout in global), rank and size, have_own (this rank's
 *      node still has its image: local's rank-NNNNN.img of ckpt), local
 *      (this node's node-local store), global (the global tier: layout,
 *      and its copy as the last resort when the checkpoint reached global),
 *      boot (how members reach each other first; NULL: the coordinator
 *      relay of the agent).
 * out: path (the image to read: the node's own, a copy fetched from
 *      another node, or one rebuilt from parity; chunk CRCs and the image's
 *      id checked against the layout), or on failure (-ENODATA) the one
 *      line that refuses the restart, naming the ranks that cannot be
 *      rebuilt and an older checkpoint that can, the same on every rank;
 *      scratch (64 bytes): when path is a scratch file of local (a copy
 *      fetched or an image rebuilt), its name, for the caller to remove
 *      with store_scratch_remove once the rank has read it, else "".
 *      Every other scratch file of the rebuild is gone when it returns. */
struct redun_comm;
int node_level_rebuild(const char *ckpt, int rank, int size, int have_own, struct store *local,
		       struct store *global, const struct redun_comm *boot, char *path, size_t len,
		       char scratch[64]);

/* Remove the scratch files handed to ranks by rebuilds (the agent ends;
 * each UPGRADE does it too, the ranks running again by then). */
void node_level_fini(void);
/* The same when the agent ends, and the spare files of the node's cache
 * go (store_file_retire): the memory they keep is the job's no more. */
void node_level_end(void);

#endif
