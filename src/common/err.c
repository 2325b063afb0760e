/* err.c - per-thread last error message (see err.h). */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_msg[512];

int err_set(int code, const char *fmt, ...)
{
	va_list ap;

	char msg[sizeof(last_msg)];

	/* through a copy: callers may pass err_msg() itself as an argument
	 * ("doing X: %s", err_msg()) */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(last_msg, msg, sizeof(msg));
	return code;
}

const char *err_msg(void)
{
	return last_msg;
}

void err_clear(void)
{
	last_msg[0] = '\0';
}
