/* test_split_convert.c - a split section of format 4 or 5 (split_format.h)
 * turned into format 6's process records and split section
 * (split_convert.c): every field lands where the restart reads it, the
 * region kinds follow the old flags, and a truncated or unknown section
 * is refused. */
#include "split/split_format.h"
#include "common/err.h"
#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct old_image {
	unsigned char b[4096];
	size_t len;
};

static void add(struct old_image *o, const void *p, size_t n)
{
	if (n == 0)
		return;	/* p may be NULL (a region without runs) */
	memcpy(o->b + o->len, p, n);
	o->len += n;
}

static void add_region(struct old_image *o, uint64_t start, uint64_t end, uint32_t prot,
		       uint32_t flags, const char *path, const struct split_run *runs,
		       uint32_t nruns)
{
	struct split_region r = { start, end, 0x2000, prot, flags, (uint32_t)strlen(path) + 1,
				  nruns, 12345, 678, 90 };

	add(o, &r, sizeof(r));
	add(o, path, r.path_len);
	add(o, runs, nruns * sizeof(*runs));
}

/* A rank 1 of 4 with two threads, two handlers and a region of each kind. */
static void old_section(struct old_image *o, uint32_t version)
{
	struct split_header h = { version, 2, 4, 2, 1, 4, 0xc0ffee, 0x7fff0000, 3, 720, 2,
				  1u << 9 };
	struct split_thread t[2] = {
		{ 0x11000, 0x12000, 0x13000, 24, 100, 1, 1u << 1 },
		{ 0x21000, 0x22000, 0, 0, 101, 0, 0 },
	};
	struct split_sigaction sa[2] = { { 10, 0, 0x401000, 0x4000000, 0x402000, 1 },
					 { 2, 0, 0x403000, 0, 0, 0 } };
	struct split_run anon[2] = { { 0x600000, 1 }, { 0x602000, 1 } };
	struct split_run seg[1] = { { 0x800000, 1 } };

	o->len = 0;
	add(o, &h, sizeof(h));
	add(o, t, sizeof(t));
	add(o, sa, sizeof(sa));
	add_region(o, 0x600000, 0x604000, 3, 0, "", anon, 2);
	add_region(o, 0x700000, 0x701000, 5, SPLIT_FILE, "/lib/x.so", NULL, 0);
	add_region(o, 0x800000, 0x801000, 3, SPLIT_SHARED | SPLIT_SEGMENT | SPLIT_SEG_OWNER,
		   "/dev/shm/seg", seg, 1);
	add_region(o, 0x900000, 0x901000, 3, SPLIT_SHARED, "", NULL, 0);
}

static const unsigned char *region(const unsigned char *p, struct pimg_rec_region *r,
				   const char **path, uint64_t *nruns, const struct pimg_rec_run **runs)
{
	memcpy(r, p, sizeof(*r));
	*path = (const char *)p + sizeof(*r);
	memcpy(nruns, p + sizeof(*r) + r->path_len, sizeof(*nruns));
	static struct pimg_rec_run copy[8];	/* records in the stream are not aligned */

	CHECK(*nruns <= 8);
	memcpy(copy, p + sizeof(*r) + r->path_len + sizeof(*nruns), *nruns * sizeof(*copy));
	*runs = copy;
	return p + sizeof(*r) + r->path_len + sizeof(*nruns) + *nruns * sizeof(**runs);
}

static void check_converted(uint32_t version)
{
	struct old_image o;
	struct split_info info;
	struct pimg_rec_header h;
	struct pimg_rec_sigaction sa[PIMG_NSIG];
	struct pimg_rec_thread t[2];
	struct pimg_rec_region r;
	const struct pimg_rec_run *runs;
	const char *path;
	uint64_t nruns;
	const unsigned char *p;
	void *out;
	size_t len;

	old_section(&o, version);
	CHECK_EQ(split_convert(o.b, o.len, &out, &len, &info), 0);
	CHECK_EQ(info.version, version);
	CHECK_EQ(info.rank, 1);
	CHECK_EQ(info.size, 4);
	CHECK_EQ(info.uh_callbacks, 0xc0ffee);
	CHECK_EQ(info.tid_offset, 720);
	CHECK_EQ(info.restarts, 2);
	p = out;
	memcpy(&h, p, sizeof(h));
	CHECK_EQ(h.version, PIMG_FORMAT_VERSION);
	CHECK_EQ(h.nthreads, 2);
	CHECK_EQ(h.nregions, 4);
	CHECK_EQ(h.vdso_start, 0x7fff0000);
	CHECK_EQ(h.shared_pending, 1u << 9);
	CHECK_EQ(h.cwd_len, 2);
	p += sizeof(h) + h.cwd_len;
	memcpy(sa, p, sizeof(sa));
	p += sizeof(sa);
	CHECK_EQ(sa[9].handler, 0x401000);
	CHECK_EQ(sa[9].flags, 0x4000000);
	CHECK_EQ(sa[9].restorer, 0x402000);
	CHECK_EQ(sa[9].mask, 1);
	CHECK_EQ(sa[1].handler, 0x403000);
	CHECK_EQ(sa[0].handler, 0);
	CHECK_EQ(sa[14].handler, 0);
	memcpy(t, p, sizeof(t));
	p += sizeof(t);
	CHECK_EQ(t[0].tid, 100);
	CHECK_EQ(t[0].flags, PIMG_THREAD_MAIN);
	CHECK_EQ(t[0].fs_base, 0x11000);
	CHECK_EQ(t[0].sigframe, 0x12000);
	CHECK_EQ(t[0].robust_head, 0x13000);
	CHECK_EQ(t[0].robust_len, 24);
	CHECK_EQ(t[0].sigpending, 1u << 1);
	CHECK_EQ(t[1].tid, 101);
	CHECK_EQ(t[1].flags, 0);
	p = region(p, &r, &path, &nruns, &runs);
	CHECK(r.start == 0x600000 && r.end == 0x604000 && r.prot == 3);
	CHECK_EQ(r.kind, PIMG_ANON);
	CHECK_EQ(r.stored_pages, 2);
	CHECK_EQ(nruns, 2);
	CHECK(runs[1].addr == 0x602000 && runs[1].npages == 1);
	CHECK(strcmp(path, "") == 0);
	p = region(p, &r, &path, &nruns, &runs);
	CHECK_EQ(r.kind, PIMG_FILE_PRIVATE);
	CHECK_EQ(r.flags, 0);
	CHECK(r.file_offset == 0x2000 && r.file_size == 12345 && r.file_mtime_ns == 678 &&
	      r.file_ino == 90);
	CHECK(strcmp(path, "/lib/x.so") == 0);
	CHECK_EQ(nruns, 0);
	p = region(p, &r, &path, &nruns, &runs);
	CHECK_EQ(r.kind, PIMG_SHARED_ANON);
	CHECK_EQ(r.flags, PIMG_F_SEGMENT | PIMG_F_SEG_OWNER);
	CHECK(strcmp(path, "/dev/shm/seg") == 0);
	CHECK_EQ(nruns, 1);
	p = region(p, &r, &path, &nruns, &runs);
	CHECK_EQ(r.kind, PIMG_SHARED_ANON);
	CHECK_EQ(r.flags, 0);
	CHECK_EQ((size_t)(p - (const unsigned char *)out), len);
	free(out);
}

static void check_refused(void)
{
	struct old_image o;
	struct split_info info;
	void *out = (void *)1;
	size_t len;

	old_section(&o, 5);
	for (size_t cut = 0; cut < o.len; cut += 7) {
		CHECK_EQ(split_convert(o.b, cut, &out, &len, &info), -EBADMSG);
		CHECK(out == NULL);
	}
	CHECK_EQ(split_convert(o.b, o.len + 1, &out, &len, &info), -EBADMSG);
	CHECK(strstr(err_msg(), "1 bytes after its records") != NULL);
	old_section(&o, 6);
	CHECK_EQ(split_convert(o.b, o.len, &out, &len, &info), -EBADMSG);
	CHECK(strcmp(err_msg(), "split format version 6 is not converted") == 0);
	old_section(&o, 3);
	CHECK_EQ(split_convert(o.b, o.len, &out, &len, &info), -EBADMSG);
}

int main(void)
{
	check_converted(4);
	check_converted(5);
	check_refused();
	return check_result("test_split_convert");
}
