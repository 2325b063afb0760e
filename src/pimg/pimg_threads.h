/* pimg_threads.h - what the single-process restorer (src/proc/restorer) and
 * the split process's lower half (src/split/lh_agent.c) share about bringing
 * a process's threads back. Libc-free and async-signal-safe like maps.c
 * (raw system calls), so the freestanding restorer links it too. Includes
 * nothing but <stddef.h> and <stdint.h>.
 */
#ifndef STASIS_PIMG_THREADS_H
#define STASIS_PIMG_THREADS_H

#include <stddef.h>
#include <stdint.h>

/* The thread ids of this process now (/proc/self/task), the first cap of
 * them into tids: how many there are (more than cap: the rest were left
 * out), or -errno. The first step of parking every thread for a
 * checkpoint, in the agent and the lower half alike. */
long pimg_tasks(int32_t *tids, size_t cap);

/* Send again the signals pending at the checkpoint: set (bit s - 1 for
 * signal s, 1 to 64) to thread tid of process pid, or to the process when
 * tid is 0. The threads must still block them all: each gets its own mask
 * back with its signal frame. A real-time signal queued several times
 * comes back once, without its value. */
void pimg_raise_pending(int32_t pid, int32_t tid, uint64_t set);

#endif
