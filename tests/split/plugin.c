/* plugin.c - a library appstate.c loads with dlopen after MPI_Init (and
 * another copy after a restart): its running sum lives in its own data,
 * and its code must still be there after every restart. */
static long sum;
static long calls = 1;   /* .data, not .bss */

long plugin_step(long add)
{
	sum += add;
	calls++;
	return calls > 0 ? sum : -1;
}
