/* events.c - eventfd (with a count and in semaphore mode), a periodic
 * timerfd and an epoll set watching them and a pipe keep working across
 * checkpoint/restart, at their descriptor numbers. */
#include "zdtm.h"

#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

int main(void)
{
	int ev = eventfd(0, EFD_NONBLOCK), sem = eventfd(0, EFD_SEMAPHORE);
	int tfd = timerfd_create(CLOCK_MONOTONIC, 0), ep = epoll_create1(0), p[2];
	struct itimerspec its = { { 0, 20 * 1000 * 1000 }, { 0, 20 * 1000 * 1000 } };
	struct epoll_event e;
	uint64_t v = 5, got;

	if (ev < 0 || sem < 0 || tfd < 0 || ep < 0 || pipe(p) != 0) {
		zdtm_fail("setup");
		return zdtm_end();
	}
	if (write(ev, &v, 8) != 8 || (v = 3, write(sem, &v, 8) != 8) || timerfd_settime(tfd, 0, &its, NULL))
		zdtm_fail("setup values");
	e = (struct epoll_event){ EPOLLIN, { .u64 = 0x1111 } };
	epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e);
	e = (struct epoll_event){ EPOLLIN | EPOLLET, { .u64 = 0x2222 } };
	epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e);
	zdtm_ready();

	if (read(ev, &got, 8) != 8 || got != 5)
		zdtm_fail("eventfd count %llu, not 5", (unsigned long long)got);
	if (read(ev, &got, 8) != -1)
		zdtm_fail("eventfd lost O_NONBLOCK or its count");
	if (read(sem, &got, 8) != 8 || got != 1)
		zdtm_fail("eventfd is no longer a semaphore");
	if (read(tfd, &got, 8) != 8 || got < 1)
		zdtm_fail("timerfd does not fire");
	if (write(ev, &(uint64_t){ 1 }, 8) != 8 || write(p[1], "x", 1) != 1)
		zdtm_fail("cannot write");
	struct epoll_event out[4];
	int n = epoll_wait(ep, out, 4, 1000), seen = 0;
	for (int i = 0; i < n; i++)
		seen |= out[i].data.u64 == 0x1111 ? 1 : out[i].data.u64 == 0x2222 ? 2 : 4;
	if (seen != 3)
		zdtm_fail("epoll reported %d events (mask %d), not the eventfd and the pipe", n, seen);
	return zdtm_end();
}
