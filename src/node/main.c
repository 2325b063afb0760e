/* main.c - stasis-node, the node agent's program (node.h). Started by the
 * first rank of a job on a node (node_agent_ensure), never by hand. */
#include "node/node.h"
#include "node/node_migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	const char *ready = getenv("STASIS_NODE_READY_FD");

	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--receive"))   /* a migration's target */
		return node_migrate_receive(argv[2], argc == 4 ? atoi(argv[3]) : 1);
	if (argc > 1) {
		fprintf(stderr, "stasis-node: the node agent of an MPI job's ranks takes no "
				"arguments; its ranks start it (docs/coordinator.md)\n");
		return 2;
	}
	unsetenv("STASIS_NODE_READY_FD");
	return node_agent_main(ready ? atoi(ready) : -1);
}
