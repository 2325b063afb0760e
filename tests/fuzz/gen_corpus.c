/* gen_corpus.c - write the seed corpus of fuzz_image.
 *
 * usage: gen_corpus DIR
 * Writes a few tiny images (8 KiB chunks) covering every chunk kind (raw, ZERO, SPARSE,
 * ZSTD, SPARSE|ZSTD, PARENT), an empty section and an image without
 * sections, plus the manifest of each alone (the parser's seeds), and a
 * small process image (its records: src/proc/decode.c) and two split
 * images, of split format 6 and 5 (split_format.h). The
 * committed corpus in tests/fuzz/corpus/ was made with it; rerun it after a
 * format change.
 */
#include "common/err.h"
#include "image/format.h"
#include "image/image.h"
#include "proc/proc_format.h"
#include "split/split_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mem {
	unsigned char *data;
	size_t len;
};

static int mem_sink(void *ctx, const void *buf, size_t len)
{
	struct mem *m = ctx;
	unsigned char *d = realloc(m->data, m->len + len);

	if (!d)
		return -1;
	memcpy(d + m->len, buf, len);
	m->data = d;
	m->len += len;
	return 0;
}

static int save(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len) {
		perror(path);
		if (f)
			fclose(f);
		return -1;
	}
	return fclose(f);
}

/* Save an image and its manifest alone. */
static int save_both(const char *dir, const char *name, const struct mem *m)
{
	char mname[256];
	uint64_t mo, ml;

	memcpy(&mo, m->data + m->len - IMG_FOOTER_LEN + 8, 8);
	memcpy(&ml, m->data + m->len - IMG_FOOTER_LEN + 16, 8);
	snprintf(mname, sizeof(mname), "manifest-%s.json", name);
	if (save(dir, name, m->data, m->len))
		return -1;
	return save(dir, mname, m->data + le64toh(mo), (size_t)le64toh(ml));
}

/* The id of the last image built: the parent of the next one that has one. */
static uint8_t last_id[16];

static int build(const char *dir, const char *name, const char *compress, const char *parent,
		 int variant)
{
	uint8_t parent_id[16];
	struct img_writer_opts o = { .compress = compress, .level = 3, .threads = 0,
				     .chunk_size = 8192, .parent = parent,
				     .parent_id = parent ? parent_id : NULL };
	unsigned char page[3 * 4096 + 100];
	struct img_writer *w = NULL;
	struct mem m = { 0 };
	int ret;

	memcpy(parent_id, last_id, sizeof(parent_id));
	memset(page, 0, sizeof(page));
	for (size_t i = 4096; i < sizeof(page); i++)
		page[i] = (unsigned char)(i % 7 == 0 ? i * 13 : 'a' + i % 3);
	ret = img_writer_create(mem_sink, &m, &o, &w);
	if (ret == 0)
		ret = img_writer_meta(w, "producer", "gen_corpus");
	if (ret == 0 && variant >= 0) {
		ret = img_section_begin(w, "memory", "heap");
		if (ret == 0)
			ret = img_section_attr_u64(w, "address", 0x7f0000000000ull);
		if (ret == 0 && parent)
			ret = img_write_parent(w, 8192);
		if (ret == 0)
			ret = img_write(w, page + (parent ? 8192 : 0), sizeof(page) - (parent ? 8192 : 0));
		if (ret == 0)
			ret = img_section_end(w);
		if (ret == 0)
			ret = img_section_begin(w, "variable", "empty");
		if (ret == 0)
			ret = img_section_end(w);
		if (ret == 0 && variant > 0) {
			ret = img_section_begin(w, "file", "hole");
			if (ret == 0)
				ret = img_write(w, "x", 1);
			if (ret == 0)
				ret = img_write_zero(w, 3 * 8192);
			if (ret == 0)
				ret = img_write(w, "yz", 2);
			if (ret == 0)
				ret = img_section_end(w);
		}
	}
	if (ret == 0)
		ret = img_writer_id(w, last_id);
	if (ret == 0)
		ret = img_writer_finish(w, NULL);
	img_writer_free(&w);
	if (ret == 0)
		ret = save_both(dir, name, &m);
	else
		fprintf(stderr, "%s: %s\n", name, err_msg());
	free(m.data);
	return ret;
}

static int section(struct img_writer *w, const char *kind, const char *name, const void *a,
		   size_t alen, const void *b, size_t blen)
{
	int ret = img_section_begin(w, kind, name);

	if (!ret)
		ret = img_write(w, a, alen);
	if (!ret && blen)
		ret = img_write(w, b, blen);
	return ret ? ret : img_section_end(w);
}

#define ADD(buf, at, p, len) (memcpy((buf) + (at), (p), (len)), (at) += (len))

/* A process section (pimg_format.h) of one thread and one region of one
 * run into buf; its length. */
static size_t process_records(unsigned char *buf, const struct pimg_rec_header *h,
			      const char *names, const struct pimg_rec_sigaction *sa,
			      const struct pimg_rec_thread *t, const struct pimg_rec_region *reg,
			      const char *path, const struct pimg_rec_run *run)
{
	uint64_t nruns = 1;
	size_t n = 0;

	ADD(buf, n, h, sizeof(*h));
	ADD(buf, n, names, h->cwd_len);
	ADD(buf, n, sa, sizeof(*sa) * PIMG_NSIG);
	ADD(buf, n, t, sizeof(*t));
	ADD(buf, n, reg, sizeof(*reg));
	ADD(buf, n, path, reg->path_len);
	ADD(buf, n, &nruns, sizeof(nruns));
	ADD(buf, n, run, sizeof(*run));
	return n;
}

/* A process image as the checkpointer writes one, the records only: one
 * thread, one region, a socket and a file descriptor. */
static int process_image(const char *dir)
{
	struct img_writer_opts o = { .compress = "none", .threads = 0, .chunk_size = 8192 };
	struct proc_thread t = { .tid = 7, .flags = PROC_THREAD_MAIN, .fs_base = 0x7f0000001000ull,
				 .comm = "seed", .uc_size = 16 };
	struct proc_region reg = { .start = 0x400000, .end = 0x401000, .prot = 3,
				   .kind = PROC_REGION_ANON, .flags = PROC_RF_HEAP, .path_len = 7,
				   .stored_pages = 1 };
	struct proc_pages run = { 0x400000, 1 };
	struct proc_socket sock = { .family = 1, .type = 1, .state = PROC_SOCK_CONNECTED,
				    .queued = 3 };
	struct proc_fd fds[2] = {
		{ .fd = 3, .kind = PROC_FD_SOCKET, .path_len = 12, .data_len = sizeof(sock) + 3 },
		{ .fd = 4, .kind = PROC_FD_FILE, .flags = 2, .offset = 5, .path_len = 7 },
	};
	struct proc_sigaction sa[PROC_NSIG] = { [1] = { .handler = 1 } };
	struct proc_header h = { .version = PROC_FORMAT_VERSION, .pid = 7, .nthreads = 1,
				 .nregions = 1, .cwd_len = 9, .umask = 022, .nice = -2 };
	unsigned char process[4096], uc[16] = { 1, 2, 3 }, fdtab[256];
	uint64_t nfds = 2;
	struct img_writer *w = NULL;
	struct mem m = { 0 };
	size_t n = 0;
	int ret;

	n = process_records(process, &h, "/\0/bin/x\0", sa, &t, &reg, "[heap]\0", &run);
	{
		size_t k = 0;

		ADD(fdtab, k, &nfds, sizeof(nfds));
		ADD(fdtab, k, &fds[0], sizeof(fds[0]));
		ADD(fdtab, k, "socket:[42]\0", 12);
		ADD(fdtab, k, &fds[1], sizeof(fds[1]));
		ADD(fdtab, k, "/tmp/x\0", 7);
		ret = img_writer_create(mem_sink, &m, &o, &w);
		if (!ret)
			ret = img_writer_meta(w, "producer", "stasis proc");
		if (!ret)
			ret = section(w, "thread", "thread.7", &t, sizeof(t), uc, sizeof(uc));
		if (!ret)
			ret = section(w, "file", "fd.3", &sock, sizeof(sock), "abc", 3);
		if (!ret)
			ret = section(w, "fdtable", "fds", fdtab, k, NULL, 0);
	}
	if (!ret)
		ret = section(w, "process", "process", process, n, NULL, 0);
	if (!ret)
		ret = img_writer_finish(w, NULL);
	img_writer_free(&w);
	if (!ret)
		ret = save_both(dir, "process.img", &m);
	else
		fprintf(stderr, "process.img: %s\n", err_msg());
	free(m.data);
	return ret;
}

/* A rank's image of the split process, its records only: format 6 (the
 * process records and a split_info) or 5 (converted when read). */
static int split_image(const char *dir, uint32_t version)
{
	struct img_writer_opts o = { .compress = "none", .threads = 0, .chunk_size = 8192 };
	struct pimg_rec_header h = { .version = PIMG_FORMAT_VERSION, .pid = 9, .nthreads = 1,
				     .nregions = 1, .cwd_len = 4, .vdso_start = 0x7fff0000 };
	struct pimg_rec_sigaction sa[PIMG_NSIG] = { [9] = { .handler = 0x401000 } };
	struct pimg_rec_thread t = { .tid = 9, .flags = PIMG_THREAD_MAIN, .fs_base = 0x500000 };
	struct pimg_rec_region reg = { .start = 0x600000, .end = 0x601000, .prot = 3,
				       .kind = PIMG_ANON, .path_len = 1, .stored_pages = 1 };
	struct pimg_rec_run run = { 0x600000, 1 };
	struct split_info info = { .version = 6, .rank = 1, .size = 2, .tid_offset = 720,
				   .uh_callbacks = 0x10000000, .restarts = 1 };
	struct split_header sh = { .version = 5, .nthreads = 1, .nregions = 1, .nsigs = 1,
				   .rank = 1, .size = 2, .vdso = 0x7fff0000, .stored_pages = 1 };
	struct split_thread st = { .fs = 0x500000, .tid = 9, .main = 1 };
	struct split_sigaction ssa = { .signo = 10, .handler = 0x401000 };
	struct split_region sreg = { .start = 0x600000, .end = 0x601000, .prot = 3,
				     .path_len = 1, .nruns = 1 };
	unsigned char rec[4096], page[4096] = { 7 };
	uint64_t nfds = 0;
	struct img_writer *w = NULL;
	struct mem m = { 0 };
	const char *name = version == 6 ? "split6.img" : "split5.img";
	size_t n = 0;
	int ret;

	ret = img_writer_create(mem_sink, &m, &o, &w);
	if (!ret)
		ret = img_writer_meta(w, "producer", "stasis split");
	if (!ret && version == 6) {
		n = process_records(rec, &h, "/w\0\0", sa, &t, &reg, "", &run);
		ret = section(w, "process", "process", rec, n, NULL, 0);
		if (!ret)
			ret = section(w, "split", "split", &info, sizeof(info), NULL, 0);
	} else if (!ret) {
		ADD(rec, n, &sh, sizeof(sh));
		ADD(rec, n, &st, sizeof(st));
		ADD(rec, n, &ssa, sizeof(ssa));
		ADD(rec, n, &sreg, sizeof(sreg));
		ADD(rec, n, "", 1);
		ADD(rec, n, &run, sizeof(run));
		ret = section(w, "split", "split", rec, n, NULL, 0);
	}
	if (!ret)
		ret = section(w, "memory", "pages", page, sizeof(page), NULL, 0);
	if (!ret)
		ret = section(w, "fdtable", "fds", &nfds, sizeof(nfds), NULL, 0);
	if (!ret)
		ret = img_writer_finish(w, NULL);
	img_writer_free(&w);
	if (!ret)
		ret = save_both(dir, name, &m);
	else
		fprintf(stderr, "%s: %s\n", name, err_msg());
	free(m.data);
	return ret;
}

int main(int argc, char **argv)
{
	int ret = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	ret |= build(argv[1], "hole.img", "none", NULL, 1);
	ret |= build(argv[1], "zstd.img", "zstd", NULL, 1);
	ret |= build(argv[1], "raw.img", "none", NULL, 0);
	ret |= build(argv[1], "child.img", "zstd", "raw.img", 0);      /* of raw.img */
	ret |= build(argv[1], "nosections.img", "none", NULL, -1);
	ret |= process_image(argv[1]);
	ret |= split_image(argv[1], 6);
	ret |= split_image(argv[1], 5);
	return ret ? 1 : 0;
}
