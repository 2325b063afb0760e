/* lh_tlspad.c - split_onetls: room for the upper half's static TLS at the
 * top of the lower half's, so that both halves' static TLS fit below one
 * thread pointer (docs/split.md, "One thread pointer"). Linked last: its
 * .tbss ends the executable's TLS segment, the part nearest the thread
 * pointer. 64 KiB more in every lower thread: only stasis-lh-<mpi> has
 * it; stasis-lh-<mpi>-nopad (LH_TLS_PAD 0), which a lower half started
 * with the key off executes instead (lh_main.c), has none. */
#include <stddef.h>

#ifndef LH_TLS_PAD
#define LH_TLS_PAD (64 * 1024)
#endif

#if LH_TLS_PAD
__thread char lh_tls_pad[LH_TLS_PAD] __attribute__((aligned(64)));

void *lh_tls_pad_at(size_t *len)
{
	*len = sizeof(lh_tls_pad);
	return lh_tls_pad;
}
#else
void *lh_tls_pad_at(size_t *len)
{
	*len = 0;
	return NULL;
}
#endif
