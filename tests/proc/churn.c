/* churn.c - threads are created and joined all the time (a thread pool that
 * never settles): checkpoints catch threads being born and dying, and after
 * every restart the churn goes on. */
#include "zdtm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define WORKERS 4

static atomic_ulong done;
static atomic_int stop_churn;

static void *child(void *arg)
{
	volatile uint64_t x = (uintptr_t)arg;

	for (int i = 0; i < 1000; i++)
		x = x * 6364136223846793005ull + 1;
	atomic_fetch_add(&done, 1);
	return NULL;
}

static void *spawner(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_churn)) {
		pthread_t t;

		if (pthread_create(&t, NULL, child, NULL) == 0)
			pthread_join(t, NULL);
	}
	return NULL;
}

int main(void)
{
	pthread_t s[WORKERS];
	unsigned long before;

	for (int i = 0; i < WORKERS; i++)
		pthread_create(&s[i], NULL, spawner, NULL);
	while (atomic_load(&done) < 100)
		;
	zdtm_ready();
	before = atomic_load(&done);
	struct timespec ts = { 0, 200 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	if (atomic_load(&done) <= before)
		zdtm_fail("no thread was created and joined after the restart");
	atomic_store(&stop_churn, 1);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(s[i], NULL);
	return zdtm_end();
}
