/* pimg_scan.h - the PAGEMAP_SCAN ioctl's ABI (Linux >= 6.7, the kernel's
 * include/uapi/linux/fs.h; Documentation/admin-guide/mm/pagemap.rst).
 *
 * Defined here because the build's headers (Debian 12's linux-libc-dev,
 * 6.1) predate it, and because maps.c may include nothing of libc: these
 * are the kernel's fixed ABI, not a copy of its header. Only maps.c uses it.
 */
#ifndef STASIS_PIMG_SCAN_H
#define STASIS_PIMG_SCAN_H

#include <linux/ioctl.h>
#include <stdint.h>

/* A page's categories, in pm_scan_arg's masks and page_region.categories */
#define PIMG_SCAN_FILE    (1ull << 2)   /* PAGE_IS_FILE */
#define PIMG_SCAN_PRESENT (1ull << 3)   /* PAGE_IS_PRESENT */
#define PIMG_SCAN_SWAPPED (1ull << 4)   /* PAGE_IS_SWAPPED */

/* struct page_region: pages [start, end) whose categories (those asked
 * for in return_mask) are all the same */
struct pimg_scan_range {
	uint64_t start, end, categories;
};

/* struct pm_scan_arg */
struct pimg_scan_arg {
	uint64_t size, flags, start, end;
	uint64_t walk_end;              /* out: where the walk stopped */
	uint64_t vec, vec_len, max_pages;
	uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
_Static_assert(sizeof(struct pimg_scan_arg) == 96, "pm_scan_arg is 96 bytes");
_Static_assert(sizeof(struct pimg_scan_range) == 24, "page_region is 24 bytes");

#define PIMG_PAGEMAP_SCAN _IOWR('f', 16, struct pimg_scan_arg)

#endif
