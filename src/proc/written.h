/* written.h - the files a program wrote and closed, as they were at a
 * checkpoint (docs/split.md "Files written after the checkpoint",
 * docs/transparent.md "Files written and closed"): the image's "written"
 * section (struct split_written, split_format.h), written and put back by
 * the same code for the split process's lower half (src/split/lower/lh_written.c)
 * and a single process's coordinator (dump.c, restore.c). The list of
 * files is the program's own, kept by the same wrappers in both
 * (src/split/upper/uh_files.c).
 *
 * Functions returning int return 0 or a negative errno with a one-line
 * message in err_msg(); who names the process in messages ("rank 1",
 * "process 4242").
 */
#ifndef STS_PROC_WRITTEN_H
#define STS_PROC_WRITTEN_H

#include <stddef.h>
#include <stdint.h>

struct img_writer;
struct img_reader;

/* Has the process the file dev/ino open for writing now? (then its
 * descriptor's record is what saves it; one open only for reading does
 * not, and the file is saved here) */
typedef int (*proc_written_open_fn)(uint64_t dev, uint64_t ino, void *arg);

/* Section "written" of w: each of the n absolute paths that names a
 * regular file now, outside the checkpoint directories and not open in
 * the process: its contents, mode and size up to written_save_max bytes,
 * its size and mtime only above. */
int proc_written_dump(struct img_writer *w, const char *const *paths, size_t n, const char *who,
		      proc_written_open_fn open_now, void *arg);
/* At a restart: the section's bytes (*out malloc'd; NULL and 0 for an
 * image without one) */
int proc_written_read(struct img_reader *img, void **out, size_t *len);
/* ... put back: saved contents written where they differ (the file, and
 * its directories, made again if missing); one warning line per larger
 * file changed since the checkpoint */
int proc_written_back(const void *sec, size_t len, const char *who);

/* ---- the list of a process tree (sts_written.h's log; docs/transparent.md,
 * "Files written and closed") ---- */

/* The log, open for appending (close-on-exec): the file path made empty
 * (the job's directory: a restart finds the files the program made after
 * the checkpoint in it), or a memfd if it cannot be; -errno */
int proc_written_log_create(const char *path);
/* At a restart: the bytes of the log the run before left at path (*out
 * malloc'd; NULL and 0 if there is none) */
int proc_written_log_old(const char *path, char **out, size_t *len);
/* ... once the new log fd holds the checkpoint's lists: the files an
 * open of the tree made since the checkpoint (the old log's CREATED
 * records, where they were renamed since) are removed, if the file at
 * that path is still that one (device and inode) and the checkpoint
 * lists no file at that path: a file the tree did not make is never
 * removed. One line each (info). */
int proc_written_log_forget_created(const char *old, size_t len, int fd);
/* ... before: a regular file a process had open at path at the checkpoint
 * (dev, ino) and renamed since (the old log's records, renames of its
 * directories too) is made again at path as a copy, if it is still that
 * file and nothing is at path: the descriptor opens it again and cuts it
 * back (fopen "w", write, rename over the real one, with a checkpoint in
 * between). Where it went is left as it is: put back after if the
 * checkpoint saved a file there, else never touched. */
int proc_written_log_moved_back(const char *old, size_t len, const char *path, uint64_t dev,
				uint64_t ino);
/* With every process of the tree parked: the log replayed into the tree's
 * list (the gone files left out), and the log made that list again, so it
 * does not grow from checkpoint to checkpoint. *paths (malloc'd, one block
 * with the strings) and *n; a full list or log is said in one line. */
int proc_written_log_list(int fd, char ***paths, size_t *n);
/* Add path (absolute; a regular file now) to the log, as an open for
 * writing would: at a restart, the files of the checkpoint's lists */
void proc_written_log_add(int fd, const char *path);
/* ... every path of a "written" section (proc_written_read's) */
void proc_written_log_add_section(int fd, const void *sec, size_t len);

#endif
