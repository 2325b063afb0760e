/* migrate.h - the coordinator's side of a migration (internal to coord/;
 * docs/coordinator.md, "Migration"): the receiver on the target node, and
 * the expected time of a migration.
 *
 * The receiver is `stasis-node --receive <job dir>` (node_migrate.h),
 * started on the target node the way the MPI launchers start their
 * daemons there: through the remote shell of the key `migrate_shell`
 * (default ssh; Open MPI's rsh launcher and MPICH's Hydra use the same).
 * Functions return 0 or a negative errno with a message in err_msg().
 */
#ifndef STASIS_COORD_MIGRATE_H
#define STASIS_COORD_MIGRATE_H

#include <stdint.h>
#include <sys/types.h>

struct migrate_receiver {
	pid_t pid;            /* the remote shell (-1: none) */
	int out;              /* its stdout */
	int port;             /* where the receiver listens on its node */
	int rpid;             /* the receiver's pid on its node (0: not known yet) */
	unsigned long long rstart;   /* and its start time there (/proc/<pid>/stat) */
	char host[64];        /* its node */
	/* started by the target node's agent instead (a move into its spares:
	 * RECEIVE <sources>), which says its port and its end (RECEIVER,
	 * RECEIVED: the coordinator's lines of that agent fill these) */
	int by_agent;
	int ended;            /* it ended, or never started */
	int status;           /* then: its exit status (-1: it did not start) */
	char why[300];        /* and what it said last */
};

/* Start the receiver on host for the job of job_dir (the node agent's
 * program in lh_dir), without waiting: the migration's checkpoint runs
 * meanwhile. It takes `sources` connections: the source node's agent (1),
 * or each moving rank streaming its image (a move into spares). */
int migrate_receiver_start(const char *host, const char *lh_dir, const char *job_dir,
			   unsigned sources, struct migrate_receiver *r);

/* Wait (30 s at most) for the port of the receiver started on host; on
 * failure the receiver is ended. */
int migrate_receiver_port(const char *host, struct migrate_receiver *r);

/* Cancel the receiver started on host (a migration that stopped before
 * its transfer): it is asked to end, waited for, killed after 5 s. */
void migrate_receiver_cancel(const char *host, struct migrate_receiver *r);

/* The shell command that kills process pid of this node with SIGKILL if
 * it is the one that started at start (/proc/<pid>/stat's 22nd field;
 * 0: unknown, pid alone) and not a later one given its pid; 0 or
 * -ENAMETOOLONG */
int migrate_kill_cmd(char *buf, size_t len, int pid, unsigned long long start);

/* Wait for the receiver's end (at most timeout_ms; then it is killed, on
 * its node too: a frozen receiver does not see its remote shell go). 0
 * when it received and checked every image. */
int migrate_receiver_end(struct migrate_receiver *r, int timeout_ms);

/* Which of hosts[n] answer through the same remote shell (`migrate_shell
 * HOST true`, all at once) within timeout_ms: alive[i] 1 or 0, or a
 * negative errno when the host could not be asked (the fork failed: its
 * state is unknown). A recovery whose relaunch failed asks it of the host
 * list's nodes. */
void migrate_hosts_alive(char (*hosts)[64], unsigned n, int *alive, int timeout_ms);

/* Move directory <from_parent>/<name> of host from to <to_parent>/<name>
 * on host to, through the remote shell (a tar stream from one to the
 * other), then remove it on from; at most timeout_ms. An application-level
 * job's migration moves libstasis's node cache so. */
int migrate_move_dir(const char *from, const char *from_parent, const char *to,
		     const char *to_parent, const char *name, int timeout_ms);

/* The expected migration time of bytes at rate bytes_per_s (0: the
 * default rate, key migrate_rate in MiB/s), in ms, and the setup's cost
 * (a checkpoint, a receiver started, a relaunch) included. */
uint64_t migrate_expected_ms(uint64_t bytes, uint64_t bytes_per_s);

/* How long the source's node agent of a move into spares may take to say
 * it removed the job's directory there (its MIGRATED), bytes the moved
 * images': 5 s and those bytes at 64 MiB/s (a loaded node's slowest
 * removal of the older copies of them the directory holds), at most
 * rank_timeout (the key bounding every other answer of a node agent); in
 * ms. Longer, the agent is taken for hung (its heartbeats may go on). */
uint64_t migrate_source_ms(uint64_t bytes);

#endif
