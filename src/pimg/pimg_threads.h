/* pimg_threads.h - what the single-process checkpointer (the agent in
 * src/proc/inject, the restorer in src/proc/restorer) and the split
 * process's lower half (src/split/lower/lh_agent.c) share about parking a
 * process's threads and bringing them back: one thread restore, with a
 * table of operations where the two differ. Libc-free and
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

/* The park protocol of a checkpoint, one for the agent and the lower half.
 * The checkpoint thread signals every thread of the process it does not
 * skip (pimg_park_all); each one, in the signal's handler, either parks
 * (pimg_park_gen, pimg_park_slot, its record into that slot,
 * pimg_park_parked, then pimg_park_hold until pimg_park_release) or
 * answers that it does not (pimg_park_answer: a lower-half thread). The
 * checkpoint thread waits until every thread it signaled has parked,
 * answered or ended, and every claimed slot is written; a thread that
 * appears meanwhile is signaled too. The fields marked "caller" are set
 * once; the others are the protocol's, shared with the handlers. */
struct pimg_park {
	int sig;                              /* caller: the checkpoint's signal */
	int32_t *signaled, *seen, *tasks;     /* caller: room for cap tids each */
	uint32_t cap;
	int (*skip)(int32_t tid, void *ctx);  /* caller: never signal tid (NULL: none) */
	void *ctx;
	uint32_t nsignaled, nseen;            /* this step's */
	uint32_t slots;                       /* slots claimed by parking threads */
	uint32_t parked;                      /* parked threads, their slot written */
	uint32_t answers;                     /* parked or answered: the waiter's futex */
	uint32_t release;                     /* generation: bumped to let them go */
	uint32_t wake;                        /* the parked threads' futex */
	uint32_t left;                        /* out of pimg_park_all: threads not stopped */
};

/* Signal and wait (the checkpoint thread): 0 once every thread is parked
 * or answered, -ETIMEDOUT after timeout_ms (p->left: how many were not),
 * -E2BIG with more than p->cap threads to signal, or -errno of the
 * listing. */
int pimg_park_all(struct pimg_park *p, long timeout_ms);
/* A new step: no slot, no thread signaled or seen (parked threads stay). */
void pimg_park_reset(struct pimg_park *p);
/* Let every parked thread go (the end of a checkpoint). */
void pimg_park_release(struct pimg_park *p);
/* Wake the parked threads without letting them go: their work function
 * runs (the lower half's jobs for its main thread). */
void pimg_park_wake(struct pimg_park *p);

/* In the handler: the release generation, read first (a release between
 * it and pimg_park_hold is not missed); a slot of the caller's table (it
 * may be past the table: the caller refuses the checkpoint then); counted
 * as parked once the slot is written; then held until the release, calling
 * work(arg) at each wake until it returns 0. */
uint32_t pimg_park_gen(struct pimg_park *p);
uint32_t pimg_park_slot(struct pimg_park *p);
void pimg_park_parked(struct pimg_park *p, int32_t tid);
void pimg_park_hold(struct pimg_park *p, uint32_t gen, int (*work)(void *arg), void *arg);
/* In the handler of a thread that does not park: counted as answered. */
void pimg_park_answer(struct pimg_park *p, int32_t tid);

/* The record of the calling thread, parked in the handler of the
 * checkpoint's signal whose frame is uc: tid, flags (flags, and
 * PIMG_THREAD_MAIN when tid == pid), fs_base (fs: the caller reads it, the
 * lower half with rdfsbase), gs_base, sigframe, the robust list,
 * clear_child_tid and the name. The other fields are left as they are
 * (rseq, pending signals and the frame's size are each side's). Raw
 * system calls only, no stack protector: the lower half calls it on the
 * upper half's FS. */
void pimg_thread_capture(struct pimg_rec_thread *t, void *uc, uint64_t fs, uint32_t flags);

/* The signals pending (bit s - 1 for signal s) for thread tid of this
 * process (SigPnd in /proc/self/task/TID/status; tid 0: the calling
 * thread), or with shared for the process (ShdPnd), but signal sig (the
 * checkpoint's own); 0 when the file cannot be read. */
uint64_t pimg_pending(int32_t tid, int shared, int sig);

/* Send again the signals pending at the checkpoint: set (bit s - 1 for
 * signal s, 1 to 64) to thread tid of process pid, or to the process when
 * tid is 0. The threads must still block them all: each gets its own mask
 * back with its signal frame. A real-time signal queued several times
 * comes back once, without its value. */
void pimg_raise_pending(int32_t pid, int32_t tid, uint64_t set);

/* clone3's arguments (struct clone_args of <linux/sched.h>, version 2). */
struct pimg_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal;
	uint64_t stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

/* clone3: the child calls fn(arg, arg2) on its new stack and exits when
 * fn returns; the parent gets the child's tid or -errno. */
long pimg_clone3(struct pimg_clone_args *args, uint64_t size, void (*fn)(void *, void *),
		 void *arg, void *arg2);

/* The calling thread's kernel state as thread t had it: FS and GS base,
 * robust list, clear_child_tid (set_tid_address), name and rseq area.
 * Returns the thread's tid, or -errno when rseq cannot be registered. */
long pimg_thread_setup(const struct pimg_rec_thread *t);

/* Return into t's signal frame (rt_sigreturn): registers, signal mask and
 * extended state as they were when it parked. */
void pimg_thread_return(const struct pimg_rec_thread *t) __attribute__((noreturn));

/* Where the two restores start threads differently. */
struct pimg_thread_ops {
	/* The top of the stack thread i (t) starts on, or 0 (or no stack
	 * function): right below its signal frame, on its own stack, which
	 * holds nothing there any more (the lower half). The restorer gives
	 * each a stack of its own, unmapped once every thread has left. */
	uint64_t (*stack)(const struct pimg_rec_thread *t, uint32_t i, void *ctx);
	/* In the new thread, after pimg_thread_setup (ret: its result): go
	 * into the frame (the restorer: at its start line, through code that
	 * outlives it). NULL: pimg_thread_return at once. */
	void (*leave)(const struct pimg_rec_thread *t, long ret, void *ctx);
};

/* Bring a parked process's threads back, in both restores: every thread
 * but the main one started (clone3 on its FS base, then ops->leave), the
 * calling thread made the main one (pimg_thread_setup), then the pending
 * signals of each thread and of the process sent again; every thread must
 * block every signal until its frame gives back its mask. The caller then
 * returns into main's frame. */
struct pimg_threads_restore {
	const struct pimg_rec_thread *threads;
	uint32_t n;
	int32_t pid;                /* the process now (pending signals) */
	uint64_t shared_pending;    /* the process's pending signals */
	/* 0: each thread gets its checkpointed tid (clone3 set_tid: the
	 * restorer, in a PID namespace of its own); 1: the kernel picks a new
	 * one and writes it at each thread's clear_child_tid, which must be
	 * glibc's struct pthread's tid (the lower half) */
	int new_tids;
	const struct pimg_thread_ops *ops;
	void *ctx;
	const struct pimg_rec_thread *main;   /* out: the main thread's record */
	uint32_t failed;            /* out: the thread that did not start, or
				     * the main one when its setup failed */
};
/* 0; -ENOENT when no record is the main thread's, else -errno of the clone
 * (r->failed) or of the main thread's setup. */
int pimg_threads_restore(struct pimg_threads_restore *r);

#endif
