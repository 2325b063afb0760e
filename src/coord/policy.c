/* policy.c - the recovery policies and their chain (policy.h).
 *
 * Each policy is a table of one operation, like ErrMgr's components: it
 * looks at an event and claims it (a decision) or passes it on. The
 * chain's state (recoveries made, failures of the running launch) is
 * shared by its policies. Seed 004's components and what they are here:
 * docs/coordinator.md, "Events and recovery policies".
 */
#include "coord/policy.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLICIES_MAX 4
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS 30000

struct policy_ops {
	const char *name;
	enum policy_action (*decide)(struct policy_chain *p, const struct coord_event *ev,
				     char *msg, size_t len);
};

struct policy_chain {
	const struct policy_ops *ops[POLICIES_MAX];
	unsigned n;
	unsigned max_restarts, restarts;
	int failed;           /* a rank or node of the running launch was lost */
	int starting;         /* relaunched, not every rank registered yet */
	int quit;             /* the program ended a rank of the running launch itself */
	char first[320];      /* the first failure of the running launch */
};

/* autor: a lost rank or node, or a launcher that ended badly after one,
 * relaunches the job; after max_restarts recoveries it gives up. A rank
 * the program ended itself (exit without MPI_Finalize, MPI_Abort) is not
 * recovered: a relaunch would come to the same end. Nor are the losses
 * that follow it in that launch (the launcher ends the other ranks). */
static enum policy_action autor_decide(struct policy_chain *p, const struct coord_event *ev,
				       char *msg, size_t len)
{
	const char *what;

	switch (ev->kind) {
	case EV_RANK_QUIT:
		if (!p->quit && !p->failed)
			snprintf(msg, len, "%s: the program's own end, not recovered", ev->detail);
		p->quit = 1;
		return POLICY_NEXT;
	case EV_RANK_LOST:
	case EV_NODE_LOST:
		if (p->quit)
			return POLICY_NEXT;
		if (!p->failed)
			snprintf(p->first, sizeof(p->first), "%s", ev->detail);
		p->failed = 1;
		what = ev->detail;
		break;
	case EV_LAUNCHER_ENDED:
		/* a launcher that ends well, or badly with nothing lost (the
		 * program's own failure), ends the job; a relaunch that ends
		 * before every rank is back failed (a node lost meanwhile, which
		 * the launcher could not reach) */
		if (ev->status == 0 || p->quit || (!p->failed && !p->starting))
			return POLICY_NEXT;
		if (!p->failed)
			snprintf(p->first, sizeof(p->first), "the relaunched launcher ended with status "
				 "%d before every rank was back", ev->status);
		what = p->first;
		break;
	default:
		return POLICY_NEXT;
	}
	if (p->restarts < p->max_restarts)
		return POLICY_RECOVER;
	snprintf(msg, len, "%s; not recovered: --max-restarts %u reached", what, p->max_restarts);
	return POLICY_GIVE_UP;
}

/* stop: today's behaviour, the last of every chain. The launcher's end is
 * the job's; a lost rank is logged and left to the launcher. */
static enum policy_action stop_decide(struct policy_chain *p, const struct coord_event *ev,
				      char *msg, size_t len)
{
	(void)p;
	(void)msg;
	(void)len;
	return ev->kind == EV_LAUNCHER_ENDED ? POLICY_END : POLICY_IGNORE;
}

/* crmig: a migration asked for is made; a predicted fault migrates when
 * the expected migration time fits before it, else checkpoints at once (a
 * failure that then comes is the next policies') */
static enum policy_action crmig_decide(struct policy_chain *p, const struct coord_event *ev,
				       char *msg, size_t len)
{
	(void)p;
	if (ev->kind == EV_MIGRATE_ASKED)
		return POLICY_MIGRATE;
	if (ev->kind != EV_FAULT_PREDICTED)
		return POLICY_NEXT;
	if (ev->expect_ms <= ev->bound_ms)
		return POLICY_MIGRATE;
	snprintf(msg, len, "migrating %s's ranks would take about %.1f s, more than the %.1f s "
		 "predicted: checkpoint now", ev->node, (double)ev->expect_ms / 1000.0,
		 (double)ev->bound_ms / 1000.0);
	return POLICY_CHECKPOINT;
}

static const struct policy_ops crmig_ops = { "crmig", crmig_decide };
static const struct policy_ops autor_ops = { "autor", autor_decide };
static const struct policy_ops stop_ops = { "stop", stop_decide };

int policy_chain_create(const char *recover, unsigned max_restarts, struct policy_chain **out)
{
	struct policy_chain *p;

	if (strcmp(recover, "none") && strcmp(recover, "auto"))
		return err_set(-EINVAL, "recover '%s' is not none or auto", recover);
	p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(-ENOMEM, "out of memory");
	p->ops[p->n++] = &crmig_ops;
	if (!strcmp(recover, "auto"))
		p->ops[p->n++] = &autor_ops;
	p->ops[p->n++] = &stop_ops;
	p->max_restarts = max_restarts;
	*out = p;
	return 0;
}

void policy_chain_free(struct policy_chain **p)
{
	free(*p);
	*p = NULL;
}

enum policy_action policy_decide(struct policy_chain *p, const struct coord_event *ev, char *msg,
				 size_t len)
{
	msg[0] = 0;
	for (unsigned i = 0; i < p->n; i++) {
		enum policy_action a = p->ops[i]->decide(p, ev, msg, len);

		if (a != POLICY_NEXT)
			return a;
	}
	return POLICY_IGNORE;
}

int policy_recovers(const struct policy_chain *p)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->ops[i] == &autor_ops)
			return 1;
	return 0;
}

void policy_recovered(struct policy_chain *p)
{
	p->restarts++;
}

unsigned policy_restarts(const struct policy_chain *p)
{
	return p->restarts;
}

uint64_t policy_backoff_ms(const struct policy_chain *p)
{
	uint64_t ms = BACKOFF_FIRST_MS;

	if (p->restarts == 0)
		return 0;
	for (unsigned i = 1; i < p->restarts && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

void policy_launched(struct policy_chain *p)
{
	p->failed = 0;
	p->quit = 0;
	p->first[0] = 0;
	p->starting = 1;
}

void policy_running(struct policy_chain *p)
{
	p->starting = 0;
}

const char *coord_event_name(enum coord_event_kind kind)
{
	static const char *const names[] = {
		[EV_RANK_EXITED] = "rank exited", [EV_RANK_LOST] = "rank lost",
		[EV_RANK_QUIT] = "rank quit",
		[EV_NODE_LOST] = "node lost", [EV_LAUNCHER_ENDED] = "launcher ended",
		[EV_CKPT_ESTABLISHED] = "checkpoint established",
		[EV_MIGRATE_ASKED] = "migration asked", [EV_FAULT_PREDICTED] = "fault predicted",
	};

	return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}
