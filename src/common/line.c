/* line.c - the text lines of Stasis's protocols (line.h). */
#include "common/line.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int line_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
	int n = vsnprintf(buf, len - 1, fmt, ap);

	if (n < 0)
		return -EINVAL;
	if ((size_t)n > len - 2)
		n = (int)len - 2;
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	buf[n++] = '\n';
	return n;
}

int line_secret_equal(const char *a, const char *b)
{
	unsigned diff = strlen(a) != strlen(b);

	for (size_t i = 0; a[i] && b[i]; i++)
		diff |= (unsigned)(a[i] ^ b[i]);
	return diff == 0;
}
