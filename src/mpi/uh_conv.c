/* uh_conv.c - the arrays of values that differ between the ABIs
 * (docs/split.md, "The function list").
 */
#include <stdlib.h>

#include "uh.h"

int *sts_ints_in(const int *v, int n, int (*tr)(int))
{
	int *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));

	if (out)
		for (int i = 0; i < n; i++)
			out[i] = tr(v[i]);
	return out;
}
