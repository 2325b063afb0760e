/* lh_fds.h - the upper half's descriptors (lh_fds.c, docs/split.md "The
 * upper half's descriptors"): the lower half knows its own, everything
 * else is the program's, saved in the rank image ("fds" section, records
 * of src/proc/fds.h) and opened again at its number at a restart.
 *
 * Functions returning int return 0 or a negative errno with a one-line
 * message in err_msg().
 */
#ifndef STS_LH_FDS_H
#define STS_LH_FDS_H

#include <stddef.h>

#include "proc/fds.h"

struct img_writer;
struct img_reader;

/* The lower half's descriptors are moved here and above as they are made
 * (below 1024, where select() still works) */
#define LH_FD_BASE 768

/* At start, before MPI: the descriptors the launcher left move up (PMI_FD
 * and HYDI_CONTROL_FD follow them) and are the lower half's. */
void lh_fds_start(void);
/* fd (made by a system call of the lower half's own) is the lower half's:
 * lh_fd_take moves it to LH_FD_BASE or above first and returns where it
 * is, lh_fd_mine leaves it where it is */
int lh_fd_take(int fd);
void lh_fd_mine(int fd);
/* Entering the upper half: every open descriptor but upper[0..n) is the
 * lower half's. */
void lh_fds_entering(const struct proc_fd_entry *upper, size_t n);

/* At a checkpoint: the program's descriptors as section "fds" of w; one
 * that cannot be saved fails it, naming its number and kind. */
int lh_fds_dump(struct img_writer *w, unsigned *count);
/* At a restart: the table of an image (*out: proc_fds_free) */
int lh_fds_read(struct img_reader *img, struct proc_fd_entry **out, size_t *n);
/* ... opened again at their numbers, which must be free */
int lh_fds_place(const struct proc_fd_entry *v, size_t n);

#endif
