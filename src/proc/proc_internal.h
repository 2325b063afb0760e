/* proc_internal.h - helpers shared by dump.c and restore.c (not public). */
#ifndef STASIS_PROC_INTERNAL_H
#define STASIS_PROC_INTERNAL_H

#include "proc/proc_format.h"

#include <stddef.h>
#include <stdint.h>

int proc_read_all(int fd, void *buf, size_t len);
int proc_write_all(int fd, const void *buf, size_t len);
int proc_send(int fd, uint32_t type, const void *payload, size_t len);
/* Exactly len bytes from an agent; -ETIMEDOUT after 120 s of silence. */
int proc_chan_read(int fd, void *buf, size_t len);
/* One record header; -EBADMSG on a bad magic, -EPIPE at end of stream. */
int proc_recv(int fd, struct proc_msg *m);
/* Read one dump stream (the agent was told CHECKPOINT, or DUMP) into w. */
struct img_writer;
struct proc_dump_info;
/* The files the processes of a tree wrote, as the coordinator's list
 * holds them (tree.c, written.c): the first process's image saves them
 * with its own; the others' leave them out */
struct proc_written_tree {
	const char *const *paths;
	size_t n;
	int first;
};
int proc_dump_recv(int channel, struct img_writer *w, const struct proc_written_tree *tree,
		   struct proc_dump_info *info);

/* lazy.c: lazy restore of a restored process (docs/transparent.md).
 * Whether it is asked for (STASIS_RESTORE_LAZY=1). */
int proc_lazy_wanted(void);
/* On fd (our end of the restorer's LAZY_FD, with SO_PASSCRED; closed
 * here), take the restorer's userfaultfd and serve v[0..n) from a reader
 * of the image at path image; the restorer is told to go on either way.
 * 0: served; -errno (one line printed, unless -EPIPE: the restorer is
 * gone): the stream must bring those pages. */
struct pimg_lazy_piece;
int proc_lazy_serve(int fd, int32_t pid, const char *image, const struct pimg_lazy_piece *v,
		    unsigned n);

#endif
