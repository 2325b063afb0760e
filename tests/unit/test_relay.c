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
	coord_relay_free();
	return check_result("relay");
}
