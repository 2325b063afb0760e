/* node_park.h - a node's ranks told CHECKPOINT at once, and counted
 * parked in memory (docs/coordinator.md, "Stopping a node's ranks at once",
 * board version 2).
 *
 * With one CHECKPOINT line to each rank and one PARKED line back, the stop
 * phase of a checkpoint was the kernel passing two lines a rank (a send, a
 * wake-up, an epoll event and a read on each side: 131,072 of them at
 * 65,536 ranks, docs/scale.md). Instead the node agent and its registered
 * ranks share a board, a memfd of struct node_park, and two eventfds:
 *
 *   the ranks' bell   every rank waits on it (epoll, edge-triggered: each
 *                     write is one event in every rank's set; nobody reads
 *                     it); the agent writes it once a checkpoint, after
 *                     posting the checkpoint's name and a new generation
 *   the agent's bell  the rank whose answer is the last one expected
 *                     writes it; the agent reads it
 *
 * The agent hands the three descriptors to a rank with its OK (SCM_RIGHTS),
 * `OK <slot> <gen>`: the rank's slot on the board and the generation it
 * starts from (a later one is a checkpoint for it). A rank parked writes
 * its slot (its time, then the generation), a rank that cannot park none;
 * both count themselves answered, and the one that cannot park then says
 * FAILED on its socket, as before (the count first: no count of one
 * checkpoint lands in the next). Everything else (registration, FAILED reasons,
 * WRITE, DONE and the images' records, the verdict, REQUEST, BYE, QUIT)
 * stays on the rank's socket, and a rank the agent has no slot for is
 * told `OK` alone and speaks lines only.
 *
 * The rank side (node_park_map, node_park_posted, node_park_answer) is
 * linked into the lower halves and the scale harness's ranks alike.
 * Functions return 0 or a negative errno with a message in err_msg().
 */
#ifndef STASIS_NODE_NODE_PARK_H
#define STASIS_NODE_NODE_PARK_H

#include <stddef.h>
#include <stdint.h>

#define NODE_PARK_MAGIC 0x4b524150u   /* "PARK" */
#define NODE_PARK_VERSION 2
#define NODE_PARK_SLOTS 1024           /* ranks of a node on the board; more speak lines */
#define NODE_PARK_FDS 3                /* with OK: the board, the ranks' bell, the agent's */

struct node_park_slot {
	uint32_t gen;      /* the generation the rank parked for (written last) */
	uint32_t unused;
	uint64_t us;       /* how long its threads took to stop */
};

struct node_park {
	uint32_t magic, version;
	uint32_t slots;    /* NODE_PARK_SLOTS */
	uint32_t gen;      /* bumped by the agent for each checkpoint posted */
	uint32_t expected; /* ranks on the board told by this generation */
	uint32_t answered; /* of them, those that parked or said FAILED */
	uint32_t over;     /* the last generation whose verdict the agent passed on:
			    * a rank that finds it posted only then is too late */
	char ckpt[64];     /* the checkpoint's name */
	struct node_park_slot slot[NODE_PARK_SLOTS];
};

/* Rank side: map the board received with OK (memfd may be closed after) */
int node_park_map(int memfd, struct node_park **out);
void node_park_unmap(struct node_park **p);

/* Rank side: 1 and the checkpoint's name in name when the agent posted a
 * generation after *seen (then *seen is that one) whose verdict it has not
 * passed on yet, else 0 (a rank stopped past a whole checkpoint skips it:
 * that checkpoint's verdict is already on its socket, read first) */
int node_park_posted(const struct node_park *p, uint32_t *seen, char *name, size_t len);

/* Rank side: answer generation gen from slot (parked: us, the time its
 * threads took; !parked: it says FAILED on its socket next); the last
 * answer expected rings the agent's bell */
void node_park_answer(struct node_park *p, unsigned slot, uint32_t gen, int parked, uint64_t us,
		      int agent_bell);

#endif
