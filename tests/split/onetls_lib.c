/* onetls_lib.c - a shared library's TLS (global-dynamic: found through
 * the DTV by __tls_get_addr) for onetls.c's signal handler. */
__thread long onetls_hits;

long onetls_hit(void)
{
	return ++onetls_hits;
}
