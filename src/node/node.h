/* node.h - the node agent: one per node and MPI job (docs/coordinator.md,
 * "Node agents"; the ranks also park on its board, node_park.h).
 *
 * The first rank of a job on a node starts it (node_agent_ensure, before
 * MPI_Init: a detached process, never the rank's child); every rank of the
 * node then talks to it over a Unix socket in the node-local directory
 * (node_agent_connect), and it alone talks to the job's coordinator over
 * TCP: the coordinator's messages per checkpoint grow with the nodes, not
 * the ranks. It fans CHECKPOINT, WRITE and RESUME out to its ranks and
 * answers each phase once for all of them, tells the coordinator at once
 * when one of its ranks dies (its connection closes without BYE), and
 * copies the node's staged images to the global tier (node_copy.c).
 *
 * The agent is the program stasis-node, installed beside the lower halves
 * (STASIS_LH_DIR). Everything it needs comes from the rank's environment:
 * STASIS_COORD_ADDR, STASIS_JOB_DIR (the job's secret), STASIS_JOB_NAME,
 * STASIS_RUN_ID (one per coordinator: two runs never meet),
 * STASIS_STORE_ROOT/TIER, and with staging STASIS_STAGE_DIR/ID/COPIES.
 *
 * Functions return 0 or a negative errno with a message in err_msg().
 */
#ifndef STASIS_NODE_NODE_H
#define STASIS_NODE_NODE_H

#include <stddef.h>

struct store;

#define NODE_PROTOCOL_VERSION 4
/* what ranks speak to the agent (RANK lines): 5 since the board they park
 * on (node_park.h) came with their OK */
#define NODE_RANK_PROTOCOL_VERSION 5
#define NODE_AGENT_PROGRAM "stasis-node"

/* The Unix socket of this node's agent for the job of the environment:
 * <dir>/<job>.<run id>.<host>.sock, dir being <local_dir or $TMPDIR or
 * /tmp>/stasis-node.<uid> (mode 0700, made if missing). out: the socket's
 * path; its directory in *dir_out (may be NULL). -ENOENT without a job. */
int node_sock_path(char *out, size_t len, char *dir_out, size_t dir_len);

/* Rank side, before MPI_Init: make sure the node's agent for the job runs
 * or is being started, starting it if no agent answers and no other rank
 * of the node holds the lock file beside the socket (so that the node's
 * ranks start one between them). The agent is started from
 * STASIS_LH_DIR/stasis-node through a double fork and setsid: it is never
 * a child of a rank. Returns at once: the agent connects to the
 * coordinator while MPI initializes; node_agent_connect waits for it. */
int node_agent_ensure(void);

/* Rank side, after MPI_Init: a connection to the node's agent
 * (SOCK_CLOEXEC) in *fd, waiting at most 10 s for an agent being started
 * (when this rank started it and it failed: its log, <socket>.log, says
 * why). */
int node_agent_connect(int *fd);

/* The agent's program: serve the node's ranks of the job until they have
 * all gone or the coordinator closes. ready_fd (or -1) gets one byte once
 * the socket listens. Returns the exit status. */
int node_agent_main(int ready_fd);

/* What a copy of an image still being written waits for: the verdict of
 * its checkpoint, asked while the image grows and before the commit: 1
 * sealed (established at level local), 0 not yet, -1 failed (the copy is
 * dropped, -ECANCELED) */
struct node_copy_wait {
	int (*verdict)(void *arg);
	void *arg;
};

/* Copy a rank's staged image (local_path, in the node-local store) into
 * checkpoint name of the global store as file, checking every checksum of
 * the image (each chunk's CRC32C, header, manifest, footer) on the bytes
 * copied; committed (ANNEX record) only when all of it was copied and
 * checked and the checkpoint is sealed: a partial or damaged copy is never
 * selected. w NULL: the image is committed and its checkpoint sealed. w:
 * the copy follows the image while its rank writes it (its *.tmp, read as
 * it grows; the copy's *.tmp grows in the begun checkpoint, an early annex)
 * and commits once w says sealed. With stage_compress (zstd[:level]) the
 * copy is the image re-encoded by img_recompress once it is committed:
 * every chunk zstd shrinks stored compressed, each payload's CRC checked
 * on the bytes read. Fault points node.copy (before each piece read;
 * compressed: each chunk) and node.copy.corrupt (flips a byte of the piece
 * or payload read, which the check must find). */
int node_copy_image(struct store *global, const char *local_path, const char *name,
		    const char *file, const struct node_copy_wait *w);

#endif
