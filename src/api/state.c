/* state.c - libstasis state, errors and time: what every file of src/api
 * uses, and which uses none of them.
 *
 * One process-wide state (struct api_state): an application has one job and
 * one set of protected regions. Calls are expected from one thread at a time,
 * as with MPI_THREAD_FUNNELED; the library's own threads never touch it.
 */
#include "api/api.h"
#include "common/err.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

struct api_state api;

static _Thread_local int last_code;
static _Thread_local char last_text[512];

int api_fail(int code)
{
	last_code = code;
	snprintf(last_text, sizeof(last_text), "%s", err_msg()[0] ? err_msg() : strerror(-code));
	return code;
}

const char *stasis_strerror(int code)
{
	static _Thread_local char generic[128];

	if (code == 0)
		return "success";
	if (code == last_code && last_text[0])
		return last_text;
	snprintf(generic, sizeof(generic), "%s", code < 0 ? strerror(-code) : "not an error code");
	return generic;
}

double api_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

