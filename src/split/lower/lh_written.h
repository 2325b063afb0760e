/* lh_written.h - the files the program wrote and closed (lh_written.c,
 * docs/split.md "Files written after the checkpoint"): the upper half
 * lists them (sts_written, uh_files.c); at a checkpoint the rank image's
 * "written" section holds each one's contents (up to file_save_max bytes)
 * or its size and mtime; a restart writes the contents back before the
 * upper half resumes.
 *
 * Functions returning int return 0 or a negative errno with a one-line
 * message in err_msg().
 */
#ifndef STS_LH_WRITTEN_H
#define STS_LH_WRITTEN_H

#include <stddef.h>

struct img_writer;
struct img_reader;

/* At a checkpoint, the upper half parked: section "written" of w. */
int lh_written_dump(struct img_writer *w);
/* At a restart: the section's bytes (*out malloc'd; NULL and 0 for an
 * image without one) */
int lh_written_read(struct img_reader *img, void **out, size_t *len);
/* ... put back: saved contents written where they differ (the file made
 * with its mode if missing); one warning line per larger file changed
 * since the checkpoint */
int lh_written_back(const void *sec, size_t len);

#endif
