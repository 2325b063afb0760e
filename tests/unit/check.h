/* check.h - the few assertions the C unit tests need.
 *
 * A failed CHECK prints file:line and the expression, and counts a failure;
 * main() returns check_result(), so ctest sees a non-zero exit.
 */
#ifndef STASIS_TESTS_CHECK_H
#define STASIS_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>

static int check_failures;

#define CHECK(expr) do { \
	if (!(expr)) { \
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr); \
		check_failures++; \
	} \
} while (0)

#define CHECK_EQ(a, b) do { \
	long long check_a_ = (long long)(a), check_b_ = (long long)(b); \
	if (check_a_ != check_b_) { \
		fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", \
			__FILE__, __LINE__, #a, check_a_, #b, check_b_); \
		check_failures++; \
	} \
} while (0)

static inline int check_result(const char *name)
{
	if (check_failures)
		fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
	else
		printf("%s: PASS\n", name);
	return check_failures ? 1 : 0;
}

#endif
