/* node_copy.c - the node agent's copy of a staged image into the global
 * tier (node.h). The copy may start while the rank still writes the image
 * (the agent asks at WRITE): it reads the image's *.tmp as it grows, in
 * pieces of up to 4 MiB, and scans every piece as it passes
 * (img_scan_feed): each chunk's CRC32C, and the header's, the manifest's
 * and the footer's, are checked on the bytes copied, so what reaches the
 * global tier is what was checked, and the image is read once. Once the
 * image is committed and copied to its last byte, every chunk its manifest
 * names must be one that passed. The copy is written as *.tmp and
 * committed (fsync, rename, ANNEX record) only when every byte was copied
 * and checked and the checkpoint is sealed. With stage_compress the image
 * goes through img_recompress instead (image.h), once it is committed,
 * which checks every chunk's CRC on what it read as well.
 */
#include "node/node.h"

#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_BUF (4u << 20)
#define FOLLOW_NAP_US 2000           /* its writer's next bytes, or the verdict */

struct payload {
	uint64_t pos;
	uint32_t len, crc;
	unsigned section, chunk;
};

static int by_pos(const void *a, const void *b)
{
	const struct payload *x = a, *y = b;

	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Every stored payload of the image, in file order */
static int payloads(const char *path, struct payload **out, size_t *n_out)
{
	struct img_reader *img = NULL;
	struct payload *p = NULL;
	size_t n = 0, cap = 0;
	int ret = img_open(path, &img);

	for (unsigned s = 0; !ret && s < img_section_count(img); s++) {
		struct img_section_info si;

		ret = img_section_get(img, s, &si);
		for (uint32_t k = 0; !ret && k < si.chunks; k++) {
			struct img_chunk_loc loc;

			ret = img_chunk_locate(img, s, k, &loc);
			if (ret || !loc.stored_len)
				continue;
			if (n == cap) {
				void *v = realloc(p, (cap = cap ? cap * 2 : 256) * sizeof(*p));

				if (!v) {
					ret = err_set(-ENOMEM, "out of memory");
					break;
				}
				p = v;
			}
			p[n++] = (struct payload){ loc.payload_pos, loc.stored_len, loc.crc, s, k };
		}
	}
	img_close(&img);
	if (ret) {
		free(p);
		return ret;
	}
	qsort(p, n, sizeof(*p), by_pos);
	*out = p;
	*n_out = n;
	return 0;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The node agent's fault points, on each payload a compressed copy reads */
static int copy_faults(void *ctx, void *payload, size_t len)
{
	int ret = FAULT(NODE_COPY);

	(void)ctx;
	if (ret)
		return err_set(ret, "fault point node.copy");
	if (len && FAULT(NODE_COPY_CORRUPT))
		((unsigned char *)payload)[len / 2] ^= 0x20;
	return 0;
}

/* stage_compress: the image re-encoded on its way (img_recompress checks
 * every chunk's CRC on what it read) */
static int copy_compressed(struct store_file *f, const char *local_path, int level)
{
	struct img_recompress_opts o = { .level = (unsigned)level, .hook = copy_faults };

	return img_recompress(local_path, &o, store_file_write, f, NULL);
}

/* Whether the image being written at path, open as fd, is committed: 1
 * once its *.tmp is gone and path is that file (its size is then final),
 * 0 while it is written, -1 when it went without a commit (its writer
 * failed) */
static int committed(const char *path, const char *tmp, int fd)
{
	struct stat a, b;

	if (stat(tmp, &a) == 0 || errno != ENOENT)
		return 0;
	if (stat(path, &a) != 0 || fstat(fd, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		return -1;
	return 1;
}

/* The checkpoint's verdict, waited for by a copy that follows its image
 * (w NULL: the image is committed and the checkpoint sealed) */
static int verdict(const struct node_copy_wait *w)
{
	return w ? w->verdict(w->arg) : 1;
}

static int cancelled(const char *path)
{
	return err_set(-ECANCELED, "%s: its checkpoint failed", path);
}

/* The image at path, or its *.tmp while it is written (w) */
static int open_image(const char *path, const char *tmp, const struct node_copy_wait *w, int *fd)
{
	for (;;) {
		int v = verdict(w);   /* before the opens: sealed, the file is there */

		*fd = w ? open(tmp, O_RDONLY | O_CLOEXEC) : -1;
		if (*fd < 0)
			*fd = open(path, O_RDONLY | O_CLOEXEC);
		if (*fd >= 0)
			return 0;
		if (errno != ENOENT || v > 0)
			return err_set(-errno, "cannot read %s: %s", path, strerror(errno));
		if (v < 0)
			return cancelled(path);
		usleep(FOLLOW_NAP_US);
	}
}

/* Every payload the manifest of the image at path names is one that
 * passed the scan, checked */
static int all_checked(const char *path, const struct img_scan *scan)
{
	struct payload *p = NULL;
	size_t n = 0, k;
	const struct img_scan_payload *q = img_scan_payloads(scan, &k);
	int ret = payloads(path, &p, &n);

	for (size_t i = 0; !ret && i < n; i++)
		if (i >= k || q[i].pos != p[i].pos || q[i].len != p[i].len || q[i].crc != p[i].crc)
			ret = err_set(-EBADMSG, "%s: section %u, chunk %u (payload at byte %llu) "
				      "not among the chunks copied", path, p[i].section, p[i].chunk,
				      (unsigned long long)p[i].pos);
	if (!ret && n != k)
		ret = err_set(-EBADMSG, "%s: %zu chunks copied, its manifest names %zu", path, k, n);
	free(p);
	return ret;
}

/* The bytes of the image open as fd, into f, as they are written: each
 * piece read is scanned (every checksum checked on the bytes copied) and
 * written; the end is the file committed and copied to its last byte */
static int copy_plain(struct store_file *f, const char *path, const char *tmp, int fd,
		      const struct node_copy_wait *w, uint64_t *copied)
{
	unsigned char *buf = malloc(COPY_BUF);
	struct img_scan *scan = NULL;
	uint64_t off = 0;
	int ret = buf ? img_scan_create(path, &scan) : err_set(-ENOMEM, "out of memory");

	while (!ret) {
		int done = w ? committed(path, tmp, fd) : 1;   /* before the size: then final */
		struct stat st;
		uint64_t have;
		ssize_t r;

		if (fstat(fd, &st) != 0) {
			ret = err_set(-errno, "cannot read %s: %s", path, strerror(errno));
			break;
		}
		have = (uint64_t)st.st_size > off ? (uint64_t)st.st_size - off : 0;
		/* while it is written: whole pieces only, so that the pieces (and
		 * the fault points' counts) are those of a copy after the seal */
		if (have && (done || have >= COPY_BUF)) {
			size_t want = have < COPY_BUF ? (size_t)have : COPY_BUF, room_len;
			void *room;
			/* read straight into the global file's stage where it has
			 * one: one copy of the bytes less */
			int staged = store_file_room(f, &room, &room_len) == 0 && room_len >= want;
			unsigned char *to = staged ? room : buf;

			r = pread(fd, to, want, (off_t)off);
			if (r <= 0) {
				ret = err_set(r < 0 ? -errno : -EIO, "cannot read %s: %s", path,
					      r < 0 ? strerror(errno) : "short read");
				break;
			}
			ret = FAULT(NODE_COPY);
			if (ret)
				ret = err_set(ret, "fault point node.copy");
			else if (FAULT(NODE_COPY_CORRUPT))
				to[r / 2] ^= 0x20;   /* as a bad page of the RAM disk would */
			ret = ret ? ret : img_scan_feed(scan, to, (size_t)r);
			ret = ret ? ret : staged ? store_file_done(f, (size_t)r) :
					  store_file_write(f, to, (size_t)r);
			off += (uint64_t)r;
			continue;
		}
		if (done > 0 && !have)
			break;
		if (done < 0)
			ret = verdict(w) < 0 ? cancelled(path) :
			      err_set(-EIO, "%s: removed while it was written", path);
		else if (verdict(w) < 0)
			ret = cancelled(path);
		else
			usleep(FOLLOW_NAP_US);
	}
	ret = ret ? ret : img_scan_end(scan);
	ret = ret ? ret : all_checked(path, scan);
	img_scan_free(&scan);
	free(buf);
	*copied = off;
	return ret;
}

int node_copy_image(struct store *global, const char *local_path, const char *name,
		    const char *file, const struct node_copy_wait *w)
{
	int level = cfg_stage_level(cfg_str(CFG_STAGE_COMPRESS));
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	char tmp[PATH_MAX + 8];
	uint64_t copied = 0, t0 = mono_ms(), t_open, t_copy, t_seal;
	int fd = -1, v = 1, ret;

	snprintf(tmp, sizeof(tmp), "%s.tmp", local_path);
	/* compressed, the image is read whole: once it is committed */
	while (level > 0 && (v = verdict(w)) == 0)
		usleep(FOLLOW_NAP_US);
	ret = level > 0 && v < 0 ? cancelled(local_path) : 0;
	ret = ret || level > 0 ? ret : open_image(local_path, tmp, w, &fd);
	t_open = mono_ms();
	/* followed, the copy's *.tmp grows in the begun checkpoint; it
	 * commits only once the checkpoint is sealed */
	ret = ret ? ret : w ? store_ckpt_annex_early(global, name, &ck) :
			    store_ckpt_annex(global, name, &ck);
	ret = ret ? ret : store_file_create(ck, file, &f);
	if (!ret && level > 0)
		ret = copy_compressed(f, local_path, level);
	else if (!ret)
		ret = copy_plain(f, local_path, tmp, fd, w, &copied);
	t_copy = mono_ms();
	while (!ret && (v = verdict(w)) == 0)
		usleep(FOLLOW_NAP_US);
	ret = ret ? ret : v < 0 ? cancelled(local_path) : 0;
	if (!ret && (ret = FAULT(NODE_COPY_COMMIT)))
		ret = err_set(ret, "fault point node.copy.commit");
	t_seal = mono_ms();
	ret = ret ? ret : store_file_commit(f);
	if (!ret)
		log_info("%s: in the global tier after %llu ms (%llu MiB; opened after %llu ms, "
			 "copied %llu ms, then the seal awaited %llu ms, the commit %llu ms)",
			 local_path, (unsigned long long)(mono_ms() - t0),
			 (unsigned long long)(copied >> 20), (unsigned long long)(t_open - t0),
			 (unsigned long long)(t_copy - t_open), (unsigned long long)(t_seal - t_copy),
			 (unsigned long long)(mono_ms() - t_seal));
	if (fd >= 0)
		close(fd);
	store_file_free(&f);   /* uncommitted: its *.tmp goes */
	store_ckpt_free(&ck);
	return ret;
}
