/* lh_log.c - the lower half's one-line messages, and the table both halves
 * share (lh_info): what every part of the lower half uses and nothing else,
 * so that it depends on no other file of it (docs/split.md, "Parts of the
 * split process").
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/log.h"
#include "lh.h"

struct sts_lh_info *lh_info;

/* "stasis: lower half: " and the message, one line in one write: the ranks
 * of a job share the launcher's stderr */
static void lh_vline(const char *fmt, va_list ap)
{
	char msg[600] = "stasis: lower half: ";
	int n = vsnprintf(msg + 20, sizeof(msg) - 22, fmt, ap);

	if (n < 0)
		n = 0;
	if (n > (int)sizeof(msg) - 22)
		n = (int)sizeof(msg) - 22;
	n += 20;
	msg[n++] = '\n';
	if (write(2, msg, (size_t)n) < 0) {
		/* nothing else to do */
	}
}

void lh_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	lh_vline(fmt, ap);
	va_end(ap);
	_exit(127);
}

/* STASIS_LOG's level, read once: the lower half does not load the
 * configuration, the launcher passes the key down in the environment */
int lh_log_on(int level)
{
	static int current = -1;

	if (current < 0) {
		const char *v = getenv("STASIS_LOG");
		enum log_level l = LOG_WARN;

		if (v)
			(void)log_level_parse(v, &l);
		current = (int)l;
	}
	return level <= current;
}

void lh_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (!lh_log_on(level))
		return;
	va_start(ap, fmt);
	lh_vline(fmt, ap);
	va_end(ap);
}
