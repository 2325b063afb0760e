/* image_write.c - the Stasis half of bench/image-write.
 *
 * usage: stasis-bench-image-write ROOT SIZE_MIB RAW_OUT
 * Fills SIZE_MIB of memory with interleaved 4 KiB pages, one all zero, one of
 * random bytes; writes the random pages (what `dd` copies for comparison) to
 * RAW_OUT; then times writing the whole buffer as one image through the store
 * (commit protocol, fsync included) under ROOT/bench. Prints one JSON object.
 */
#include "common/config.h"
#include "common/err.h"
#include "image/image.h"
#include "store/store.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(unsigned char *buf, size_t size)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (size_t off = 0; off < size; off += PAGE) {
		if ((off / PAGE) % 2) {
			memset(buf + off, 0, PAGE);
			continue;
		}
		for (size_t i = 0; i < PAGE; i += 8) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			memcpy(buf + off + i, &x, 8);
		}
	}
}

static int write_raw(const char *path, const unsigned char *buf, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		return -1;
	for (size_t off = 0; off < size; off += 2 * PAGE)
		if (write(fd, buf + off, PAGE) != PAGE) {
			close(fd);
			return -1;
		}
	return close(fd);
}

static int write_image(const char *root, const unsigned char *buf, size_t size,
		       uint64_t *bytes, char *path, size_t path_len)
{
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	int ret;

	img_writer_opts_default(&opts);
	ret = store_open("global", root, "bench", &s);
	if (!ret)
		ret = store_ckpt_begin(s, &c);
	if (!ret)
		ret = store_file_create(c, "rank-0.img", &f);
	if (!ret)
		ret = img_writer_create(store_file_write, f, &opts, &w);
	if (!ret)
		ret = img_section_begin(w, "memory", "heap");
	if (!ret)
		ret = img_write(w, buf, size);
	if (!ret)
		ret = img_section_end(w);
	if (!ret)
		ret = img_writer_finish(w, bytes);
	if (!ret)
		ret = store_file_commit(f);
	if (!ret)
		ret = store_ckpt_commit(c, 1);
	if (!ret)
		ret = store_ckpt_path(s, store_ckpt_name(c), "rank-0.img", path, path_len);
	img_writer_free(&w);
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
	return ret;
}

int main(int argc, char **argv)
{
	unsigned char *buf;
	size_t size;
	uint64_t bytes = 0;
	char path[4096];
	double t0, t1;

	if (argc != 4) {
		fprintf(stderr, "usage: %s ROOT SIZE_MIB RAW_OUT\n", argv[0]);
		return 2;
	}
	if (cfg_load(NULL)) {
		fprintf(stderr, "%s\n", err_msg());
		return 2;
	}
	size = (size_t)strtoull(argv[2], NULL, 10) << 20;
	buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	fill(buf, size);
	if (write_raw(argv[3], buf, size)) {
		perror(argv[3]);
		return 1;
	}
	t0 = now();
	if (write_image(argv[1], buf, size, &bytes, path, sizeof(path))) {
		fprintf(stderr, "image write failed: %s\n", err_msg());
		return 1;
	}
	t1 = now();
	printf("{\"seconds\": %.4f, \"image_bytes\": %llu, \"logical_bytes\": %zu, "
	       "\"nonzero_bytes\": %zu, \"image\": \"%s\"}\n", t1 - t0,
	       (unsigned long long)bytes, size, size / 2, path);
	return 0;
}
