/* test_pimg_mem.c - the memory sections of a process image (src/pimg/
 * pimg_mem.h): written for two regions, found again by their records with
 * the stored bytes read back, and the one-line errors for a region whose
 * section is missing or shorter than its runs; and which regions both
 * restores serve lazily (pimg_lazy_region). */
#include "pimg/pimg_lazy.h"
#include "pimg/pimg_mem.h"
#include "check.h"

#include "common/err.h"
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096u

/* the same rule for the single process and the split process: a private
 * anonymous read-write region, not the main stack, with 1 MiB stored */
static void test_lazy_rule(void)
{
	struct pimg_rec_region r = { .kind = PIMG_ANON, .prot = PROT_READ | PROT_WRITE };

	CHECK_EQ(pimg_lazy_region(&r, PIMG_LAZY_MIN), 1);
	CHECK_EQ(pimg_lazy_region(&r, PIMG_LAZY_MIN - PAGE), 0);
	r.flags = PIMG_F_HEAP | PIMG_F_DELETED;
	CHECK_EQ(pimg_lazy_region(&r, PIMG_LAZY_MIN), 1);
	r.flags = PIMG_F_STACK;
	CHECK_EQ(pimg_lazy_region(&r, PIMG_LAZY_MIN), 0);
	r.flags = 0;
	r.prot = PROT_READ;
	CHECK_EQ(pimg_lazy_region(&r, PIMG_LAZY_MIN), 0);
	r.prot = PROT_READ | PROT_WRITE | PROT_EXEC;
	CHECK_EQ(pimg_lazy_region(&r, PIMG_LAZY_MIN), 0);
	r.prot = PROT_READ | PROT_WRITE;
	for (uint32_t k = PIMG_FILE_PRIVATE; k <= PIMG_SHARED_ANON; k++) {
		r.kind = k;
		CHECK_EQ(pimg_lazy_region(&r, 64 * PIMG_LAZY_MIN), 0);
	}
}

static int file_sink(void *ctx, const void *buf, size_t len)
{
	return write(*(int *)ctx, buf, len) == (ssize_t)len ? 0 : -EIO;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	struct pimg_rec_region a = { .start = 0x7f0000001000ull, .end = 0x7f0000005000ull,
				     .stored_pages = 2 };
	struct pimg_rec_region b = { .start = 0x400000ull, .end = 0x402000ull, .stored_pages = 0 };
	struct pimg_rec_region gone = { .start = 0x500000ull, .end = 0x501000ull };
	static unsigned char pages[2 * PAGE], back[2 * PAGE];
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct img_reader *r = NULL;
	struct img_section_info si;
	char path[4096], name[PIMG_MEM_NAME_MAX];
	int fd, sec;

	test_lazy_rule();
	pimg_mem_name(a.start, name);
	CHECK(strcmp(name, "mem.7f0000001000") == 0);
	pimg_mem_name(b.start, name);
	CHECK(strcmp(name, "mem.000000400000") == 0);

	for (size_t i = 0; i < sizeof(pages); i++)
		pages[i] = (unsigned char)(i * 7 + 1);
	snprintf(path, sizeof(path), "%s/test_pimg_mem.%d.img", tmp, (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	img_writer_opts_default(&o);
	CHECK_EQ(img_writer_create(file_sink, &fd, &o, &w), 0);
	CHECK_EQ(pimg_mem_begin(w, &a, "/lib/x.so"), 0);
	CHECK_EQ(img_write(w, pages, sizeof(pages)), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(pimg_mem_begin(w, &b, ""), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_writer_finish(w, NULL), 0);
	img_writer_free(&w);
	close(fd);

	CHECK_EQ(img_open(path, &r), 0);
	sec = pimg_mem_find(r, &a, "/lib/x.so", sizeof(pages));
	CHECK(sec >= 0);
	CHECK_EQ(img_section_get(r, (unsigned)sec, &si), 0);
	CHECK(strcmp(si.kind, PIMG_MEM_KIND) == 0 && strcmp(si.name, "mem.7f0000001000") == 0);
	CHECK_EQ(img_read(r, (unsigned)sec, 0, back, sizeof(back)), (long long)sizeof(back));
	CHECK(memcmp(back, pages, sizeof(pages)) == 0);
	/* a region with no stored pages has its (empty) section too */
	sec = pimg_mem_find(r, &b, "", 0);
	CHECK(sec >= 0 && sec != pimg_mem_find(r, &a, "/lib/x.so", 0));
	/* runs the section cannot hold */
	CHECK_EQ(pimg_mem_find(r, &a, "/lib/x.so", sizeof(pages) + PAGE), -EBADMSG);
	CHECK(strcmp(err_msg(), "section mem.7f0000001000 of region /lib/x.so is shorter than "
		     "its runs") == 0);
	CHECK_EQ(pimg_mem_find(r, &b, "", PAGE), -EBADMSG);
	CHECK(strcmp(err_msg(), "section mem.000000400000 of region (anonymous) is shorter than "
		     "its runs") == 0);
	CHECK_EQ(pimg_mem_find(r, &gone, "", 0), -EBADMSG);
	CHECK(strcmp(err_msg(), "the image has no section mem.000000500000") == 0);
	img_close(&r);
	unlink(path);
	return check_result("test_pimg_mem");
}
