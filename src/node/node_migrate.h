/* node_migrate.h - a migration's transfer, node to node (docs/coordinator.md,
 * "Migration"). Functions return 0 or a negative errno with a message in
 * err_msg().
 */
#ifndef STASIS_NODE_NODE_MIGRATE_H
#define STASIS_NODE_NODE_MIGRATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Source side, in the node agent: MIGRATE <host:port> <ckpt> <rank>...
 * from the coordinator (args: its arguments). Each rank's staged image of
 * ckpt (<stage_dir>/<local_job>/<ckpt>/rank-NNNNN.img) goes to the
 * receiver at host:port, which confirms each one checked; then the job's
 * node-local directory <stage_dir>/<local_job> is removed (its path in
 * removed). *bytes: the image bytes sent. alive (or NULL) is called every
 * 200 ms or so while it sends: the agent's heartbeat, which its loop
 * cannot say meanwhile. Fault point node.migrate (before each 4 MiB
 * piece). No rank (their images were streamed): the directory only. */
int node_migrate_send(const char *args, const char *stage_dir, const char *local_job,
		      const char *secret, void (*alive)(void), uint64_t *bytes, char *removed,
		      size_t rlen);

/* Target side: `stasis-node --receive <job dir> [<sources>]`, started on
 * the target node by the coordinator: listens on a free TCP port, says
 * PORT <n> on stdout, takes `sources` sources (1 by default) at once, a
 * thread each, each presenting the job's secret (job_dir/coord.secret),
 * and writes their images where the restart reads them; ends once its
 * stdout (the pipe to its remote shell) closes. Returns the exit status
 * (0: every image received and checked). */
int node_migrate_receive(const char *job_dir, int sources);

/* The receiver a node agent starts for a move into its node's spares
 * (RECEIVE <sources> from the coordinator: the agent is there already, no
 * remote shell starts it): this program with --receive, its stdout and
 * stderr a pipe to the agent, which watches the pipe (out) and the
 * process (pidfd; -1 before Linux 5.3) in its epoll set. */
struct node_receiver {
	pid_t pid;              /* 0: none */
	int out, pidfd;         /* -1: none */
	uint64_t kill_at;       /* cancelled: killed then (CLOCK_MONOTONIC ms), if still there */
	size_t len;
	char buf[256];          /* its output's unfinished line */
	char why[400];          /* its last line but PORT's */
};
/* Start it for the job of job_dir, taking sources streams at once. */
int node_receiver_start(struct node_receiver *r, const char *job_dir, unsigned sources);
/* Its output can be read: 1 with its PORT line's words ("<port> <pid>
 * <start>") in port, 0 for anything else, -1 once the pipe closed. */
int node_receiver_output(struct node_receiver *r, char *port, size_t len);
/* Ask it to end (the pipe closed: it ends, cancelled), and kill it after
 * ms if it has not (a stopped one never sees its pipe close). */
void node_receiver_cancel(struct node_receiver *r, int ms);
/* Whether it ended: 1 once reaped, with its exit status (128 + signal)
 * in *status, r->pid and r->kill_at 0; kills it first once kill_at
 * passed. */
int node_receiver_reap(struct node_receiver *r, int *status);

/* A moving rank's side (a move into spares): its image goes to the
 * receiver at addr while it is written, never to its own node. open
 * connects and says MIGRATE <secret>, IMAGE - <path>; write is an image
 * sink (image.h's img_sink_fn) with ctx the stream; close ends the image
 * and waits for the receiver's OK after its check, as long as checking
 * the bytes sent may take (node_migrate_answer_ms; failed: the image is
 * abandoned, the receiver refuses what it got). */
struct node_migrate_stream {
	int fd;              /* -1: none */
	uint64_t bytes;      /* sent so far */
};
int node_migrate_stream_open(const char *addr, const char *secret, const char *path,
			     struct node_migrate_stream *s);
int node_migrate_stream_write(void *ctx, const void *buf, size_t len);
int node_migrate_stream_close(struct node_migrate_stream *s, int failed);
/* An abandoned image: the connection shut down both ways, so that a
 * write still under way on the writer's thread returns at once; the
 * descriptor stays open (its number taken by nothing else) until close. */
void node_migrate_stream_cut(struct node_migrate_stream *s);

/* How long a source waits for the receiver's answer to an image of bytes
 * once it sent the last of them: the receiver's check of it at a slow
 * disk's pace and a margin; longer, the receiver is taken for frozen */
int node_migrate_answer_ms(uint64_t bytes);

#endif
