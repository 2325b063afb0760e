/* lh_tlspad.c - split_onetls: room for the upper half's static TLS at the
 * top of the lower half's, so that both halves' static TLS fit below one
 * thread pointer (docs/split.md, "One thread pointer"). Linked last: its
 * .tbss ends the executable's TLS segment, the part nearest the thread
 * pointer. Always there (link time): 64 KiB more in every lower thread. */
#include <stddef.h>

#define LH_TLS_PAD (64 * 1024)

__thread char lh_tls_pad[LH_TLS_PAD] __attribute__((aligned(64)));

void *lh_tls_pad_at(size_t *len)
{
	*len = sizeof(lh_tls_pad);
	return lh_tls_pad;
}
