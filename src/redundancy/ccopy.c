/* ccopy.c - checked copies (redundancy.h, redun_ccopy_*): an image copied
 * into a store file while every checksum of the format is verified on the
 * bytes copied (img_scan), so that what reaches the copy is what was
 * checked and the image is read once. The image may still be growing: its
 * owner says how far it may be read. The global tier's copies are made
 * with it: level global and the flush (level_global.c), and the node
 * agents' staged images (src/node/node_copy.c).
 */
#include "redundancy/redundancy.h"
#include "common/err.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct redun_ccopy {
	int fd;                         /* the image, the caller's */
	char name[256];                 /* for messages */
	struct store_file *f;           /* the copy, the caller's */
	struct img_scan *scan;
	unsigned char *buf;             /* pieces the copy's stage cannot take */
	size_t buf_len;
	uint64_t off;                   /* bytes copied */
};

int redun_ccopy_create(int fd, const char *name, struct store_file *f, struct redun_ccopy **out)
{
	struct redun_ccopy *c = calloc(1, sizeof(*c));
	int ret = c ? img_scan_create(name, &c->scan) : err_set(-ENOMEM, "out of memory");

	*out = NULL;
	if (ret) {
		free(c);
		return ret;
	}
	c->fd = fd;
	c->f = f;
	snprintf(c->name, sizeof(c->name), "%s", name);
	*out = c;
	return 0;
}

/* Where a piece of len bytes is read: straight into the copy's stage
 * where it has room for all of it (one copy of the bytes less), else the
 * copy's own buffer */
static unsigned char *piece_room(struct redun_ccopy *c, size_t len, int *staged)
{
	size_t room_len;
	void *room;

	*staged = store_file_room(c->f, &room, &room_len) == 0 && room_len >= len;
	if (*staged)
		return room;
	if (c->buf_len < len) {
		free(c->buf);
		c->buf = malloc(len);
		c->buf_len = c->buf ? len : 0;
	}
	return c->buf;
}

int redun_ccopy_to(struct redun_ccopy *c, uint64_t upto, size_t piece, int final,
		   redun_ccopy_hook hook, void *arg)
{
	int ret = 0;

	while (!ret && c->off < upto) {
		size_t want = upto - c->off < piece ? (size_t)(upto - c->off) : piece;
		int staged;
		unsigned char *to = piece_room(c, want, &staged);
		ssize_t r;

		if (!to)
			return err_set(-ENOMEM, "out of memory");
		r = pread(c->fd, to, want, (off_t)c->off);
		if (r != (ssize_t)want)
			return err_set(r < 0 ? -errno : -EIO, "cannot read %s: %s", c->name,
				       r < 0 ? strerror(errno) : "short read");
		ret = hook ? hook(arg, to, want, final && c->off + want == upto) : 0;
		ret = ret ? ret : img_scan_feed(c->scan, to, want);
		ret = ret ? ret : staged ? store_file_done(c->f, want) : store_file_write(c->f, to, want);
		c->off += want;
	}
	return ret;
}

uint64_t redun_ccopy_copied(const struct redun_ccopy *c)
{
	return c->off;
}

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

/* Every stored payload the manifest of the image names, in file order */
static int payloads(const struct redun_ccopy *c, struct payload **out, size_t *n_out)
{
	struct img_reader *img = NULL;
	struct payload *p = NULL;
	size_t n = 0, cap = 0;
	int ret = img_open_fd(c->fd, c->name, &img);

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

/* The bytes copied make a whole image, and every payload its manifest
 * names is one that passed the scan, checked */
int redun_ccopy_end(struct redun_ccopy *c)
{
	struct payload *p = NULL;
	size_t n = 0, k;
	const struct img_scan_payload *q;
	int ret = img_scan_end(c->scan);

	ret = ret ? ret : payloads(c, &p, &n);
	q = img_scan_payloads(c->scan, &k);
	for (size_t i = 0; !ret && i < n; i++)
		if (i >= k || q[i].pos != p[i].pos || q[i].len != p[i].len || q[i].crc != p[i].crc)
			ret = err_set(-EBADMSG, "%s: section %u, chunk %u (payload at byte %llu) "
				      "not among the chunks copied", c->name, p[i].section, p[i].chunk,
				      (unsigned long long)p[i].pos);
	if (!ret && n != k)
		ret = err_set(-EBADMSG, "%s: %zu chunks copied, its manifest names %zu", c->name, k, n);
	free(p);
	return ret;
}

void redun_ccopy_free(struct redun_ccopy **c)
{
	if (!c || !*c)
		return;
	img_scan_free(&(*c)->scan);
	free((*c)->buf);
	free(*c);
	*c = NULL;
}
