/* engine.c - the levels in sequence: an upgrade (a level's copies, the
 * flush to the global tier, agreements after each, the level record) and a
 * recovery (the level's way to a lost member's file, then the global tier).
 *
 * Every step that can fail on one member is followed by an agreement, so
 * all members take the same branch and report the same error; a member that
 * failed still takes part in every exchange after it.
 */
#include "redundancy/level.h"
#include "common/err.h"
#include "common/log.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct redun_level *const levels[] = {
	&redun_level_single, &redun_level_partner, &redun_level_rs, &redun_level_global,
};

const struct redun_level *redun_level_find(const char *name)
{
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (name && strcmp(levels[i]->name, name) == 0)
			return levels[i];
	err_set(-EINVAL, "unknown redundancy level '%s' (known: single, partner, rs, global)",
		name ? name : "");
	return NULL;
}

const char *redun_level_name(const struct redun_level *level)
{
	return level->name;
}

int redun_stream_begin(const struct redun_level *level, const struct redun_set *set,
		       const struct redun_comm *c, int (*abort)(void *arg), void *arg,
		       struct redun_stream **out)
{
	*out = NULL;
	return level && level->stream ? level->stream(set, c, abort, arg, out) : 0;
}

void redun_stream_free(struct redun_stream **s)
{
	if (s && *s)
		(*s)->free(*s);
	if (s)
		*s = NULL;
}

static void add_reason(char *reason, size_t len, const char *what, int bad, const char *msg)
{
	size_t used = strlen(reason);

	snprintf(reason + used, len - used, "%s%s: rank %d: %s", used ? "; " : "", what, bad, msg);
}

static int stage(const struct redun_request *req, enum redun_stage st)
{
	return req->stage ? req->stage(req->arg, st) : 0;
}

static int warned_alone;       /* a member without another node: said once */

int redun_upgrade(const struct redun_set *set, const struct redun_comm *c,
		  const struct redun_request *req)
{
	char msg[REDUN_MSG_LEN] = "", reached[32] = "single", reason[2 * REDUN_MSG_LEN] = "";
	const struct redun_level *level = req->level;
	struct store_ckpt *lc = NULL;
	int ret = 0, bad, begin, me = redun_rank(c), n = set->nranks;

	if (level == &redun_level_single && !req->flush)
		return 0;
	begin = stage(req, REDUN_STAGE_BEGIN);

	/* a member that fails still takes part in every agreement below: the
	 * progress threads must stay in step */
	if (level != &redun_level_single && level != &redun_level_global) {
		int degraded = 0;

		ret = begin ? begin : store_ckpt_annex(set->local, set->ckpt, &lc);
		bad = redun_agree(c, ret == 0, msg);
		if (bad == n) {
			ret = level->apply(set, c, lc, &degraded);
			if (degraded && !__atomic_exchange_n(&warned_alone, 1, __ATOMIC_RELAXED))
				log_warn("rank %d has no %s %s (one node): its data is only in the node's "
					 "cache", me, level->name, level == &redun_level_rs ? "group" :
					 "partner");
			bad = redun_agree(c, ret == 0, msg);
		}
		if (bad < n)
			add_reason(reason, sizeof(reason), level->name, bad, msg);
		else
			snprintf(reached, sizeof(reached), "%s", level->name);
		store_ckpt_free(&lc);
	}
	if (level == &redun_level_global || req->flush) {
		int degraded = 0;

		ret = begin ? begin : redun_level_global.apply(set, c, NULL, &degraded);
		bad = redun_agree(c, ret == 0, msg);
		if (bad < n)
			add_reason(reason, sizeof(reason), "global", bad, msg);
		else if (strcmp(reached, "single") == 0)
			snprintf(reached, sizeof(reached), "global");
		else
			strcat(reached, "+global");
	}
	/* recorded in the job's index: `stasis ls` shows it, and a restart
	 * knows what to expect (restart still checks every copy it uses) */
	if (me == 0) {
		ret = stage(req, REDUN_STAGE_RECORD);
		ret = ret ? ret : store_ckpt_level(set->global ? set->global : set->local, set->ckpt,
						   reached, reason[0] ? reason : NULL);
		if (ret)
			log_warn("checkpoint %s: cannot record its level: %s", set->ckpt, err_msg());
		if (reason[0])
			log_warn("checkpoint %s stays established at level %s: %s", set->ckpt, reached,
				 reason);
	}
	log_debug("rank %d: checkpoint %s: level %s reached", me, set->ckpt, reached);
	if (reason[0])
		return err_set(-EIO, "checkpoint %s stays established at level %s: %s", set->ckpt,
			       reached, reason);
	return 0;
}

int redun_recover(const struct redun_level *level, const struct redun_set *set,
		  const struct redun_comm *c, int have_own, int flushed, redun_accept_fn accept,
		  void *arg, struct redun_found *found)
{
	char why[REDUN_MSG_LEN], more[REDUN_MSG_LEN], file[32];
	int ret;

	memset(found, 0, sizeof(*found));
	ret = level->recover(set, c, !have_own, accept, arg, found);
	/* the most expensive place last */
	if (ret && set->global && (level == &redun_level_global || flushed)) {
		snprintf(why, sizeof(why), "%s", err_msg());
		redun_found_drop(found);
		redun_name(file, REDUN_FILE, redun_rank(c));
		if (!store_io_exists(set->global, set->ckpt, file)) {
			ret = err_set(-ENOENT, "%s: no copy of rank %d's data in the global directory",
				      set->ckpt, redun_rank(c));
		} else {
			ret = accept(arg, set->global, set->ckpt, file);
			if (ret == 0) {
				found->s = set->global;
				snprintf(found->ckpt, sizeof(found->ckpt), "%s", set->ckpt);
				snprintf(found->name, sizeof(found->name), "%s", file);
			}
		}
		snprintf(more, sizeof(more), "%s", err_msg());
		if (ret)
			err_set(ret, "%s; %s", why, more);
		else
			log_info("rank %d: %s; took the global tier's copy", redun_rank(c), why);
	}
	return ret;
}

/* The parity bytes member `rank` holds at rs, for files of about size. */
static uint64_t rs_parity_bytes(const struct redun_set *set, int rank, uint64_t size)
{
	int *group = calloc((size_t)set->nranks, sizeof(int));
	int ngroups = 0, alone = 0, n = 0, m, k;

	if (!group || redun_layout_groups(set->nranks, set->node, set->group_size, group, &ngroups,
					  &alone)) {
		free(group);
		return 0;
	}
	for (int r = 0; r < set->nranks; r++)
		n += group[r] == group[rank];
	free(group);
	if (n < 2)
		return 0;       /* alone: no parity */
	m = (int)set->rs_parity < n ? (int)set->rs_parity : n - 1;
	k = n - m;
	return (uint64_t)m * ((size + (uint64_t)k - 1) / (uint64_t)k) + (1u << 20);
}

int redun_reserve(const struct redun_set *set, const struct redun_level *level, int rank,
		  uint64_t size)
{
	char file[32];
	int ret = 0;

	if (level == &redun_level_partner) {
		int *partner = calloc((size_t)set->nranks, sizeof(int)), alone = 0;

		ret = partner ? redun_layout_partners(set->nranks, set->node, partner, &alone)
			      : err_set(-ENOMEM, "out of memory");
		for (int s = 0; !ret && s < set->nranks; s++)
			if (partner[s] == rank) {
				redun_name(file, REDUN_PARTNER_FILE, s);
				ret = store_spare_reserve(set->local, file, size);
			}
		free(partner);
	} else if (level == &redun_level_rs) {
		uint64_t bytes = rs_parity_bytes(set, rank, size);

		redun_name(file, REDUN_RS_FILE, rank);
		ret = bytes ? store_spare_reserve(set->local, file, bytes) : 0;
	}
	return ret;
}
