/* onetls_lib.c - a shared library's TLS (global-dynamic: found through
 * the DTV by __tls_get_addr) for onetls.c's signal handler. */
__thread long onetls_hits;

long onetls_hit(void)
{
	return ++onetls_hits;
}

#ifdef ONETLS_BIG
/* built again with ONETLS_BIG=KiB as a library the program opens with
 * dlopen after MPI_Init: that much initial-exec TLS, which the upper
 * ld.so puts in the room its tunable keeps (80 KiB); 72 KiB go below the
 * 64 KiB left for the program's static TLS, where the lower half's
 * blocks are */
#define BIG (ONETLS_BIG * 1024 / 8)
static __thread unsigned long big[BIG] __attribute__((tls_model("initial-exec")));

void onetls_big_fill(unsigned long seed)
{
	for (long i = 0; i < BIG; i++)
		big[i] = seed ^ (unsigned long)i;
}

long onetls_big_bad(unsigned long seed)
{
	long bad = 0;

	for (long i = 0; i < BIG; i++)
		bad += big[i] != (seed ^ (unsigned long)i);
	return bad;
}
#endif
