/* test_relay.c - the coordinator's relay of the node agents' allgathers
 * (src/coord/relay.h): contributions from two agents, every rank's bytes to
 * both once the last came, in rank order; malformed lines refused. */
#include "check.h"
#include "coord/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* What the agent at fd received so far (never blocks) */
static const char *received(int fd)
{
	static char buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	buf[n > 0 ? n : 0] = 0;
	return buf;
}

int main(void)
{
	int a[2], b[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
	/* agent A speaks for ranks 2 and 0, agent B for rank 1 */
	CHECK_EQ(coord_relay_gather(a[0], "ckpt-000001.up.0 2 3 0c0d"), 0);
	CHECK_EQ(coord_relay_gather(a[0], "ckpt-000001.up.0 0 3 0a0b"), 0);
	CHECK(received(a[1])[0] == 0);          /* not yet: rank 1 is missing */
	/* a rank twice, another size for the tag, a rank out of range */
	CHECK_EQ(coord_relay_gather(b[0], "ckpt-000001.up.0 2 3 ffff"), -EINVAL);
	CHECK_EQ(coord_relay_gather(b[0], "ckpt-000001.up.0 1 4 ffff"), -EINVAL);
	CHECK_EQ(coord_relay_gather(b[0], "ckpt-000001.up.0 3 3 ffff"), -EINVAL);
	CHECK_EQ(coord_relay_gather(b[0], "ckpt-000001.up.0 1"), -EINVAL);
	/* another tag meanwhile does not mix in */
	CHECK_EQ(coord_relay_gather(b[0], "ckpt-000001.up.1 0 2 -"), 0);
	CHECK_EQ(coord_relay_gather(b[0], "ckpt-000001.up.0 1 3 -"), 0);
	{
		const char *want = "GATHERED ckpt-000001.up.0 0 0a0b\n"
				   "GATHERED ckpt-000001.up.0 1 -\n"
				   "GATHERED ckpt-000001.up.0 2 0c0d\n";

		CHECK(strcmp(received(a[1]), want) == 0);
		CHECK(strcmp(received(b[1]), want) == 0);
	}
	CHECK_EQ(coord_relay_gather(a[0], "ckpt-000001.up.1 1 2 01"), 0);
	CHECK(strcmp(received(a[1]), "GATHERED ckpt-000001.up.1 0 -\n"
				     "GATHERED ckpt-000001.up.1 1 01\n") == 0);
	CHECK(strcmp(received(b[1]), "GATHERED ckpt-000001.up.1 0 -\n"
				     "GATHERED ckpt-000001.up.1 1 01\n") == 0);
	/* a finished tag starts afresh */
	CHECK_EQ(coord_relay_gather(a[0], "ckpt-000001.up.0 0 1 aa"), 0);
	CHECK(strcmp(received(a[1]), "GATHERED ckpt-000001.up.0 0 aa\n") == 0);
	/* many ranks, the agents' contributions interleaved: each agent gets
	 * every line once, in rank order (one block a gather) */
	{
		enum { N = 500 };
		static char want[N * 40], got[N * 40 + 1];
		size_t wl = 0;

		for (int r = 0; r < N; r++) {
			char line[64];

			snprintf(line, sizeof(line), "big.0 %d %d %04x", r, N, r);
			CHECK_EQ(coord_relay_gather(r % 3 ? a[0] : b[0], line), 0);
			wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "GATHERED big.0 %d %04x\n",
					       r, r);
		}
		for (int k = 0; k < 2; k++) {
			int fd = k ? b[1] : a[1];
			ssize_t n, have = 0;

			while ((n = recv(fd, got + have, sizeof(got) - 1 - (size_t)have,
					 MSG_DONTWAIT)) > 0)
				have += n;
			got[have] = 0;
			CHECK_EQ((size_t)have, wl);
			CHECK(strcmp(got, want) == 0);
		}
	}
	coord_relay_free();
	return check_result("relay");
}
