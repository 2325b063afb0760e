/* log.c - leveled logging to stderr (see log.h).
 *
 * One write(2) per line so lines from several processes (ranks) writing to the
 * same terminal or file do not interleave mid-line.
 */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static enum log_level current_level = LOG_WARN;
static const char *const level_names[] = { "error", "warn", "info", "debug" };

void log_set_level(enum log_level level)
{
	current_level = level;
}

enum log_level log_get_level(void)
{
	return current_level;
}

int log_level_parse(const char *name, enum log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

static atomic_uint warnings;

unsigned log_warnings(void)
{
	return atomic_load_explicit(&warnings, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char line[1024];
	int n, saved_errno = errno;
	va_list ap;

	if (level > current_level)
		return;
	if (level <= LOG_WARN)
		atomic_fetch_add_explicit(&warnings, 1, memory_order_relaxed);
	n = snprintf(line, sizeof(line), "stasis[%d]: %s: ", (int)getpid(), level_names[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
	errno = saved_errno;
}
