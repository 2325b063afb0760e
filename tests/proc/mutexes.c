/* mutexes.c - mutexes held across checkpoint/restart keep their owners:
 * a normal mutex held by main with a thread blocked on it, an
 * error-checking one (EDEADLK for its owner, EPERM for another thread), and
 * a robust one whose owner thread exits after the restart without unlocking
 * it (the kernel walks the restored robust list: EOWNERDEAD). */
#include "zdtm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t errchk, robust;
static atomic_int waiter_got, robust_held, go_exit, other_result = -1;

static void *waiter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&normal);         /* blocks across the checkpoint */
	atomic_store(&waiter_got, 1);
	pthread_mutex_unlock(&normal);
	return NULL;
}

static void *robust_owner(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&robust);
	atomic_store(&robust_held, 1);
	while (!atomic_load(&go_exit))
		usleep(1000);
	return NULL;                         /* exits holding it */
}

static void *other(void *arg)
{
	(void)arg;
	atomic_store(&other_result, pthread_mutex_unlock(&errchk));
	return NULL;
}

int main(void)
{
	pthread_mutexattr_t a;
	pthread_t w, r, o;
	int ret;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&errchk, &a);
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&robust, &a);

	pthread_mutex_lock(&normal);
	pthread_mutex_lock(&errchk);
	pthread_create(&w, NULL, waiter, NULL);
	pthread_create(&r, NULL, robust_owner, NULL);
	while (!atomic_load(&robust_held))
		usleep(1000);
	usleep(20000);                       /* let the waiter block in the kernel */
	zdtm_ready();

	if (atomic_load(&waiter_got))
		zdtm_fail("the waiter got the mutex main holds");
	pthread_mutex_unlock(&normal);
	pthread_join(w, NULL);
	if (!atomic_load(&waiter_got))
		zdtm_fail("the blocked waiter never got the mutex");

	if ((ret = pthread_mutex_lock(&errchk)) != EDEADLK)
		zdtm_fail("error-checking mutex: relock by its owner gave %d, not EDEADLK", ret);
	pthread_create(&o, NULL, other, NULL);
	pthread_join(o, NULL);
	if (atomic_load(&other_result) != EPERM)
		zdtm_fail("error-checking mutex: unlock by another thread gave %d, not EPERM",
			  atomic_load(&other_result));
	if ((ret = pthread_mutex_unlock(&errchk)) != 0)
		zdtm_fail("error-checking mutex: unlock by its owner gave %d", ret);

	atomic_store(&go_exit, 1);
	pthread_join(r, NULL);
	ret = pthread_mutex_lock(&robust);
	if (ret != EOWNERDEAD)
		zdtm_fail("robust mutex: lock after its owner died gave %d, not EOWNERDEAD", ret);
	else
		pthread_mutex_consistent(&robust);
	pthread_mutex_unlock(&robust);
	return zdtm_end();
}
