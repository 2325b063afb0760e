/* static.c - a statically linked program (LD_PRELOAD has no effect on it):
 * exec'd by a program under Stasis, it has no agent, and a checkpoint
 * request says so at once. Prints READY, waits for ./stop, prints PASS. */
#include "zdtm.h"

int main(void)
{
	zdtm_ready();
	return zdtm_end();
}
