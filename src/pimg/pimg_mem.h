/* pimg_mem.h - the memory sections of a process image, on the image layer
 * (docs/format.md, "Process memory in images").
 *
 * Both kinds of process image keep the stored pages of each region (the
 * runs pimg.h's rule picks, concatenated in address order) in a section of
 * their own, kind "memory", named for the region's start: "mem." and 12
 * hex digits. The coordinator writes them from the agent's stream
 * (src/proc/dump.c), the lower half from its own upper half
 * (src/split/lower/lh_image.c); both restores find them here. Ordinary C on
 * image/: never called by the agent or the restorer.
 */
#ifndef STASIS_PIMG_MEM_H
#define STASIS_PIMG_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "pimg_format.h"

struct img_reader;
struct img_writer;

#define PIMG_MEM_KIND "memory"
#define PIMG_MEM_NAME_MAX 32

/* The name of the memory section of the region starting at start. */
void pimg_mem_name(uint64_t start, char name[PIMG_MEM_NAME_MAX]);

/* Open region r's memory section in w, with attributes start, end and
 * path (path: NUL-terminated, "" for none). The caller writes
 * r->stored_pages pages of runs in address order, then img_section_end.
 * 0 or the writer's -errno. */
int pimg_mem_begin(struct img_writer *w, const struct pimg_rec_region *r, const char *path);

/* The index of region r's memory section in img, after checking that it
 * holds bytes bytes (its runs' pages) at least: the index, or -EBADMSG
 * with err_msg() ("the image has no section mem.…", "section mem.… of
 * region PATH is shorter than its runs"). */
int pimg_mem_find(struct img_reader *img, const struct pimg_rec_region *r, const char *path,
		  uint64_t bytes);

#endif
