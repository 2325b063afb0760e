/* policy.h - what the coordinator does when something happens to its job
 * (internal to coord/; docs/coordinator.md, "Events and recovery
 * policies").
 *
 * After Open MPI's ErrMgr (seed 004): the core (coord.c) turns what it
 * observes into events and hands each one to a chain of policies; the
 * first policy that claims the event decides, and the core carries the
 * decision out (stops the job, relaunches it, ends). Policies never touch
 * a process or a socket. The chain comes from the `recover` setting:
 *   none   stop                 (a failure ends the job as the launcher says)
 *   auto   autor, stop          (a failure relaunches the job from the latest
 *                                established checkpoint, at most max_restarts
 *                                times, without the nodes that were lost)
 * Every chain begins with crmig: a migration asked for (stasis migrate) is
 * carried out; a predicted fault (stasis predict) migrates when the
 * expected migration time fits the bound, else checkpoints at once (what
 * follows is the chain's: autor recovers when the node goes).
 */
#ifndef STASIS_COORD_POLICY_H
#define STASIS_COORD_POLICY_H

#include <stddef.h>
#include <stdint.h>

enum coord_event_kind {
	EV_RANK_EXITED,       /* a rank ended normally (MPI_Finalize: BYE) */
	EV_RANK_LOST,         /* a rank's connection closed without BYE, or went with
				 its node agent's */
	EV_RANK_QUIT,         /* the program ended a rank itself without MPI_Finalize:
				 exit (status), or MPI_Abort (code) */
	EV_NODE_LOST,         /* a node agent fell silent (no heartbeat): its node is gone */
	EV_LAUNCHER_ENDED,    /* the launcher (or the single program) ended; status */
	EV_CKPT_ESTABLISHED,  /* a checkpoint became COMPLETE; detail: its name */
	EV_MIGRATE_ASKED,     /* a client asked to move a node's ranks (stasis migrate) */
	EV_FAULT_PREDICTED,   /* a client predicted a node's failure (stasis predict) */
};

struct coord_event {
	enum coord_event_kind kind;
	int rank;             /* EV_RANK_*: the rank; else -1 */
	int status;           /* EV_LAUNCHER_ENDED: exit code in the shell's convention */
	uint64_t at_ms;       /* when it was raised (CLOCK_MONOTONIC) */
	char node[64];        /* the node concerned, "" if none */
	char detail[320];     /* what happened, in words (or the checkpoint's name) */
	uint64_t bound_ms;    /* EV_FAULT_PREDICTED: the fault is expected within this */
	uint64_t expect_ms;   /* EV_FAULT_PREDICTED: the expected migration time */
};

enum policy_action {
	POLICY_NEXT,          /* not this policy's: ask the next one */
	POLICY_IGNORE,        /* nothing to do: the job goes on (a message, if the
				 policy gives one, is logged) */
	POLICY_RECOVER,       /* stop the job, relaunch it from the latest usable checkpoint */
	POLICY_END,           /* the job is over: end with the event's status */
	POLICY_GIVE_UP,       /* a failure that will not be recovered: stop the job, end
				 with its status and the policy's message */
	POLICY_MIGRATE,       /* move the event's node's ranks (coord.c, "migration") */
	POLICY_CHECKPOINT,    /* checkpoint at once, the job goes on */
};

struct policy_chain;

/* The chain for recover ("none" or "auto") with at most max_restarts
 * recoveries. -EINVAL with a message for another name. */
int policy_chain_create(const char *recover, unsigned max_restarts, struct policy_chain **out);
void policy_chain_free(struct policy_chain **p);

/* The decision on ev; msg (len bytes) gets the reason of a GIVE_UP. */
enum policy_action policy_decide(struct policy_chain *p, const struct coord_event *ev, char *msg,
				 size_t len);

/* Whether the chain acts on failures (node agents' heartbeats are then
 * watched, and a launcher that ends badly is examined first). */
int policy_recovers(const struct policy_chain *p);

/* A recovery was carried out: count it; the delay before the next
 * relaunch (0 for the first, then doubling from 1 s up to 30 s). */
void policy_recovered(struct policy_chain *p);
unsigned policy_restarts(const struct policy_chain *p);
uint64_t policy_backoff_ms(const struct policy_chain *p);

/* The job was relaunched: failures seen so far belong to the old launch;
 * until policy_running (every rank registered again) a launcher that ends
 * badly is a failure of the recovery. */
void policy_launched(struct policy_chain *p);
void policy_running(struct policy_chain *p);

const char *coord_event_name(enum coord_event_kind kind);

#endif
