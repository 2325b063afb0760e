/* coord.h - the per-job coordinator of transparent checkpoints.
 *
 * `stasis run` and `stasis restart` become the coordinator of their job: they
 * start the program (under the agent, or through the restorer), listen on a
 * Unix socket in the job's directory (<root>/<job>/coord.sock, mode 0700)
 * for clients presenting the job's secret (<root>/<job>/coord.secret, mode
 * 0600), take checkpoints on request, on an interval and on SIGTERM or
 * SIGUSR1, and end with the program. The protocol is docs/coordinator.md.
 *
 * Functions return 0 or a negative errno with a message in err_msg().
 */
#ifndef STASIS_COORD_COORD_H
#define STASIS_COORD_COORD_H

#include <stddef.h>
#include <stdint.h>

#define COORD_PROTOCOL_VERSION 4

struct coord_opts {
	const char *root;          /* checkpoint root */
	const char *tier;          /* store tier of root */
	const char *job;           /* job name */
	uint64_t interval_ms;      /* periodic checkpoints; 0: none */
	int signal_checkpoint;     /* SIGTERM/SIGUSR1: checkpoint, then end (TERM) or run on (USR1) */
	const char *launcher;      /* restart of an MPI job: the launcher's words, instead of the
				      stored ones (e.g. "mpiexec.mpich -n 4") */
	const char *recover;       /* "none" (NULL) or "auto": policy.h */
	unsigned max_restarts;     /* recover auto: at most this many relaunches */
	uint64_t heartbeat_timeout_ms; /* recover auto: a node agent silent this long is lost
					  (0: 3000) */
	unsigned spares;           /* an MPI job: ranks launched beyond the program's, held in
				      reserve (job_launch_spares) */
};

/* Run argv under the agent until it ends. *status: the program's exit code
 * in the shell's convention (128 + signal when killed; 0 after --stop). */
int coord_run(const struct coord_opts *o, char **argv, int *status);

/* Restart checkpoint ckpt (a name in the job, or NULL: the latest
 * established one) and coordinate it like coord_run. */
int coord_restart(const struct coord_opts *o, const char *ckpt, int *status);

/* A stand-by (docs/cluster.md, "Stand-by ranks"): the launcher of the
 * job's latest checkpoint (or o->launcher's words) started with every rank
 * waiting past MPI_Init; a client's RESTORE <checkpoint> has them restore
 * it (answered "OK <checkpoint> <n> ranks <seconds> s" once every rank
 * runs), then it is coordinated like coord_restart's. */
int coord_standby(const struct coord_opts *o, int *status);

/* Client side: connect to the job's coordinator under job_dir, authenticate,
 * send one request line (without newline) and copy the reply line (without
 * "OK "/"ERR ") into reply. Returns 0 for OK, -EREMOTEIO for ERR (the
 * reply is the message), -ECONNREFUSED/-ENOENT when no coordinator runs. */
int coord_request(const char *job_dir, const char *request, int timeout_ms, char *reply, size_t len);

/* Whether a coordinator listens in job_dir (connects, says nothing). */
int coord_alive(const char *job_dir);

#endif
