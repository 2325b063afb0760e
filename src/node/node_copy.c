/* node_copy.c - the node agent's copy of a staged image into the global
 * tier (node.h). The image's header, manifest and footer are checked when
 * it is opened; then the file is copied in pieces of 4 MiB and the CRC32C
 * of every chunk's payload is computed on the bytes copied, as they pass:
 * the copy reads the image once, and what reaches the global tier is what
 * was checked. The copy is written as *.tmp and committed (fsync, rename,
 * ANNEX record) only when every byte was copied and every chunk matched.
 * With stage_compress the image goes through img_recompress instead
 * (image.h), which checks every chunk's CRC on what it read as well.
 */
#include "node/node.h"

#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COPY_BUF (4u << 20)

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

/* The piece [off, off + len) of the file passes: continue the CRC of every
 * payload it overlaps, check those that end in it. *k: the first payload
 * not yet checked; *crc: its CRC so far. */
static int check_piece(const char *path, const struct payload *p, size_t n, size_t *k,
		       uint32_t *crc, const unsigned char *buf, uint64_t off, size_t len)
{
	while (*k < n && p[*k].pos < off + len) {
		const struct payload *q = &p[*k];
		uint64_t from = q->pos > off ? q->pos : off;
		uint64_t end = q->pos + q->len < off + len ? q->pos + q->len : off + len;

		*crc = crc32c(*crc, buf + (from - off), (size_t)(end - from));
		if (end < q->pos + q->len)
			break;   /* goes on in the next piece */
		if (*crc != q->crc)
			return err_set(-EBADMSG, "%s: section %u, chunk %u (payload at byte %llu): "
				       "CRC32C mismatch", path, q->section, q->chunk,
				       (unsigned long long)q->pos);
		*crc = 0;
		(*k)++;
	}
	return 0;
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

int node_copy_image(struct store *global, const char *local_path, const char *name,
		    const char *file)
{
	int level = cfg_stage_level(cfg_str(CFG_STAGE_COMPRESS));
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	struct payload *p = NULL;
	unsigned char *buf = NULL;
	uint64_t off = 0;
	size_t n = 0, k = 0;
	uint32_t crc = 0;
	int fd = -1, ret;

	ret = level > 0 ? 0 : payloads(local_path, &p, &n);
	ret = ret ? ret : store_ckpt_annex(global, name, &ck);
	ret = ret ? ret : store_file_create(ck, file, &f);
	if (!ret && level > 0) {
		ret = copy_compressed(f, local_path, level);
		goto commit;
	}
	if (!ret && ((fd = open(local_path, O_RDONLY | O_CLOEXEC)) < 0 || !(buf = malloc(COPY_BUF))))
		ret = err_set(-errno, "cannot read %s: %s", local_path, strerror(errno));
	while (!ret) {
		ssize_t r = read(fd, buf, COPY_BUF);

		if (r < 0)
			ret = err_set(-errno, "cannot read %s: %s", local_path, strerror(errno));
		if (r <= 0)
			break;
		ret = FAULT(NODE_COPY);
		if (ret)
			ret = err_set(ret, "fault point node.copy");
		else if (FAULT(NODE_COPY_CORRUPT))
			buf[r / 2] ^= 0x20;   /* as a bad page of the RAM disk would */
		ret = ret ? ret : check_piece(local_path, p, n, &k, &crc, buf, off, (size_t)r);
		ret = ret ? ret : store_file_write(f, buf, (size_t)r);
		off += (uint64_t)r;
	}
	if (!ret && k < n)
		ret = err_set(-EBADMSG, "%s: ends inside chunk %u of section %u", local_path,
			      p[k].chunk, p[k].section);
commit:
	ret = ret ? ret : store_file_commit(f);
	if (fd >= 0)
		close(fd);
	free(buf);
	free(p);
	store_file_free(&f);   /* uncommitted: its *.tmp goes */
	store_ckpt_free(&ck);
	return ret;
}
