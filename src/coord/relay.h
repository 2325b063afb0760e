/* relay.h - the coordinator's relay of the node agents' allgathers
 * (docs/coordinator.md, "Levels"): how the agents of a job, which know
 * nothing of each other, bootstrap the TCP link of the redundancy engine
 * (src/redundancy) that then carries their partner copies and parity.
 *
 * An agent sends one line per rank it speaks for:
 *     GATHER <tag> <rank> <size> <hex bytes or ->
 * and once every rank 0..size-1 of a tag has contributed, the coordinator
 * sends every agent that took part, for each rank in order:
 *     GATHERED <tag> <rank> <hex bytes or ->
 * The relay knows nothing of what the bytes mean. A tag whose contributions
 * stop coming (an agent died) is dropped after a while: its agents give up
 * on their own timeout.
 */
#ifndef STASIS_COORD_RELAY_H
#define STASIS_COORD_RELAY_H

/* A GATHER line's arguments (after "GATHER ") from the agent on fd. Returns
 * 0, or -EINVAL for a malformed line (the caller logs it). */
int coord_relay_gather(int fd, const char *args);

/* Drop every gather (the coordinator ends). */
void coord_relay_free(void);

#endif
