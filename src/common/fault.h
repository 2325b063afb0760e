/* fault.h - fault points: make the n-th pass through a named point fail.
 *
 * The points are declared once, in fault_points.h. A spec
 *     <name>[:<n>][:kill|:fail|:stop][,<name>...]
 * (from the configuration key `fault`, i.e. STASIS_FAULT) arms points: the
 * n-th pass (default 1st) through <name> either kills the process with SIGKILL
 * (default: the crash a power cut or OOM kill would cause), makes the
 * operation fail with -EIO, which the caller handles like a real I/O error,
 * or stops the process with SIGSTOP for good (a hung process: it holds
 * its connections and answers nothing until it is killed).
 */
#ifndef STASIS_COMMON_FAULT_H
#define STASIS_COMMON_FAULT_H

enum fault_id {
#define FAULT_POINT(id, name, desc) FAULT_##id,
#include "common/fault_points.h"
#undef FAULT_POINT
	FAULT__COUNT
};

/* Arm the points named in spec (NULL or "" disarms all). -EINVAL with a
 * message (err.h) on an unknown name or a malformed spec. */
int fault_configure(const char *spec);

/* Pass through a point: 0 normally, -EIO when it is armed with `fail` and this
 * is its n-th pass; does not return when armed with `kill` or `stop`. */
int fault_pass(enum fault_id id);

#define FAULT(id) fault_pass(FAULT_##id)

const char *fault_name(enum fault_id id);
const char *fault_description(enum fault_id id);

#endif
