/* pimg_threads.h - what the single-process checkpointer (the agent in
 * src/proc/inject, the restorer in src/proc/restorer) and the split
 * process's lower half (src/split/lh_agent.c) share about parking a
 * process's threads and bringing them back. Libc-free and
 * async-signal-safe like maps.c (raw system calls), so the freestanding
 * restorer links it too. Includes nothing but pimg_format.h (<stddef.h>,
 * <stdint.h>).
 */
#ifndef STASIS_PIMG_THREADS_H
#define STASIS_PIMG_THREADS_H

#include "pimg_format.h"

/* The thread ids of this process now (/proc/self/task), the first cap of
 * them into tids: how many there are (more than cap: the rest were left
 * out), or -errno. The first step of parking every thread for a
 * checkpoint, in the agent and the lower half alike. */
long pimg_tasks(int32_t *tids, size_t cap);

/* The record of the calling thread, parked in the handler of the
 * checkpoint's signal whose frame is uc: tid, flags (flags, and
 * PIMG_THREAD_MAIN when tid == pid), fs_base (fs: the caller reads it, the
 * lower half with rdfsbase), gs_base, sigframe, the robust list,
 * clear_child_tid and the name. The other fields are left as they are
 * (rseq, pending signals and the frame's size are each side's). Raw
 * system calls only, no stack protector: the lower half calls it on the
 * upper half's FS. */
void pimg_thread_capture(struct pimg_rec_thread *t, void *uc, uint64_t fs, uint32_t flags);

/* Send again the signals pending at the checkpoint: set (bit s - 1 for
 * signal s, 1 to 64) to thread tid of process pid, or to the process when
 * tid is 0. The threads must still block them all: each gets its own mask
 * back with its signal frame. A real-time signal queued several times
 * comes back once, without its value. */
void pimg_raise_pending(int32_t pid, int32_t tid, uint64_t set);

#endif
