/* fault.c - fault points (see fault.h).
 *
 * Passing an unarmed point costs one load and a predictable branch, so points
 * stay compiled into release builds: fault injection is part of the product,
 * used by the tests and by users who want to see recovery work.
 */
#include "common/fault.h"
#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum fault_action { FAULT_OFF, FAULT_KILL, FAULT_FAIL, FAULT_STOP };

struct fault_state {
	enum fault_action action;
	unsigned long trigger;      /* fire on this pass (1-based) */
	atomic_ulong passes;
};

static const char *const names[] = {
#define FAULT_POINT(id, name, desc) name,
#include "common/fault_points.h"
#undef FAULT_POINT
};

static const char *const descriptions[] = {
#define FAULT_POINT(id, name, desc) desc,
#include "common/fault_points.h"
#undef FAULT_POINT
};

static struct fault_state points[FAULT__COUNT];
static atomic_int any_armed;

const char *fault_name(enum fault_id id)
{
	return names[id];
}

const char *fault_description(enum fault_id id)
{
	return descriptions[id];
}

static int parse_one(char *item, struct fault_state *armed)
{
	char *name = strtok(item, ":"), *tok, *end;
	int id = -1;

	for (int i = 0; name && i < FAULT__COUNT; i++)
		if (strcmp(name, names[i]) == 0)
			id = i;
	if (id < 0)
		return err_set(-EINVAL, "unknown fault point '%s' (see `stasis faults`)", name ? name : "");
	armed[id].action = FAULT_KILL;
	armed[id].trigger = 1;
	while ((tok = strtok(NULL, ":")) != NULL) {
		if (strcmp(tok, "kill") == 0) {
			armed[id].action = FAULT_KILL;
		} else if (strcmp(tok, "fail") == 0) {
			armed[id].action = FAULT_FAIL;
		} else if (strcmp(tok, "stop") == 0) {
			armed[id].action = FAULT_STOP;
		} else {
			unsigned long n = strtoul(tok, &end, 10);

			if (*tok < '0' || *tok > '9' || *end || n == 0)
				return err_set(-EINVAL, "fault point '%s': bad field '%s' "
					       "(expected a pass number >= 1, kill, fail or stop)", name, tok);
			armed[id].trigger = n;
		}
	}
	return 0;
}

int fault_configure(const char *spec)
{
	struct fault_state armed[FAULT__COUNT] = { 0 };
	char *copy, *item, *save = NULL;
	int ret = 0, count = 0;

	if (spec && *spec) {
		copy = strdup(spec);
		if (!copy)
			return -ENOMEM;
		for (item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
			ret = parse_one(item, armed);
			if (ret)
				break;
		}
		free(copy);
		if (ret)
			return ret;
	}
	for (int i = 0; i < FAULT__COUNT; i++) {
		points[i].action = armed[i].action;
		points[i].trigger = armed[i].trigger;
		atomic_store(&points[i].passes, 0);
		count += armed[i].action != FAULT_OFF;
	}
	atomic_store(&any_armed, count);
	return 0;
}

int fault_pass(enum fault_id id)
{
	struct fault_state *p = &points[id];

	if (!atomic_load_explicit(&any_armed, memory_order_relaxed) || p->action == FAULT_OFF)
		return 0;
	if (atomic_fetch_add(&p->passes, 1) + 1 != p->trigger)
		return 0;
	if (p->action == FAULT_KILL) {
		log_info("fault point %s: killing the process (pass %lu)", names[id], p->trigger);
		kill(getpid(), SIGKILL);
		_exit(137);
	}
	if (p->action == FAULT_STOP) {
		log_info("fault point %s: stopping the process (pass %lu)", names[id], p->trigger);
		for (;;)   /* a SIGCONT (an orphaned process group's) stops it again */
			kill(getpid(), SIGSTOP);
	}
	log_info("fault point %s: failing the operation (pass %lu)", names[id], p->trigger);
	return err_set(-EIO, "fault injected at %s", names[id]);
}
