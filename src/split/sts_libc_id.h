/* sts_libc_id.h - which libc.so.6 a half runs on, by its GNU build-id.
 *
 * split_onetls (docs/split.md, "One thread pointer") needs both halves'
 * libcs to be one build: each reads the other's thread block as its own
 * struct pthread. The lower half puts its libc's id in its table, the
 * upper half compares its own (a program with a libc of its own keeps
 * two thread pointers).
 */
#ifndef STS_LIBC_ID_H
#define STS_LIBC_ID_H

#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#define STS_LIBC_ID_MAX 32

struct sts_libc_id {
	uint32_t len;                     /* 0: none found */
	uint8_t id[STS_LIBC_ID_MAX];
};

static int sts_libc_id_note(const uint8_t *p, const uint8_t *end, struct sts_libc_id *out)
{
	while (p + sizeof(ElfW(Nhdr)) <= end) {
		const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(const void *)p;
		const uint8_t *name = p + sizeof(*nh);
		const uint8_t *desc = name + ((nh->n_namesz + 3) & ~3u);

		if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
		    memcmp(name, "GNU", 4) == 0 && desc + nh->n_descsz <= end) {
			out->len = nh->n_descsz < STS_LIBC_ID_MAX ? nh->n_descsz : STS_LIBC_ID_MAX;
			memcpy(out->id, desc, out->len);
			return 1;
		}
		p = desc + ((nh->n_descsz + 3) & ~3u);
	}
	return 0;
}

static int sts_libc_id_of(struct dl_phdr_info *info, size_t sz, void *arg)
{
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)sz;
	if (!slash || strcmp(slash + 1, "libc.so.6") != 0)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);

		if (ph->p_type == PT_NOTE && sts_libc_id_note(p, p + ph->p_memsz, arg))
			return 1;
	}
	return 1;
}

/* this half's libc's id (len 0 if it has none) */
static inline void sts_libc_id(struct sts_libc_id *out)
{
	out->len = 0;
	dl_iterate_phdr(sts_libc_id_of, out);
}

#endif
