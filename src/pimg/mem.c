/* mem.c - one writer and reader of a process image's memory sections
 * (pimg_mem.h), for the single-process checkpointer and the split process. */
#include "pimg/pimg_mem.h"

#include "common/err.h"
#include "image/image.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

void pimg_mem_name(uint64_t start, char name[PIMG_MEM_NAME_MAX])
{
	snprintf(name, PIMG_MEM_NAME_MAX, "mem.%012" PRIx64, start);
}

int pimg_mem_begin(struct img_writer *w, const struct pimg_rec_region *r, const char *path)
{
	char name[PIMG_MEM_NAME_MAX];
	int ret;

	pimg_mem_name(r->start, name);
	ret = img_section_begin(w, PIMG_MEM_KIND, name);
	ret = ret ? ret : img_section_attr_u64(w, "start", r->start);
	ret = ret ? ret : img_section_attr_u64(w, "end", r->end);
	if (!ret && path[0])
		ret = img_section_attr(w, "path", path);
	return ret;
}

int pimg_mem_find(struct img_reader *img, const struct pimg_rec_region *r, const char *path,
		  uint64_t bytes)
{
	char name[PIMG_MEM_NAME_MAX];
	struct img_section_info si;
	int sec;

	pimg_mem_name(r->start, name);
	sec = img_section_find(img, name);
	if (sec < 0)
		return err_set(-EBADMSG, "the image has no section %s", name);
	if (img_section_get(img, (unsigned)sec, &si) != 0 || si.size < bytes)
		return err_set(-EBADMSG, "section %s of region %s is shorter than its runs", name,
			       path[0] ? path : "(anonymous)");
	return sec;
}
