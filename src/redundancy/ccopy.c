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

/* The bytes copied make a whole image, and every payload its manifest
 * names is one that passed the scan, checked */
int redun_ccopy_end(struct redun_ccopy *c)
{
	struct img_reader *img = NULL;
	int ret = img_scan_end(c->scan);

	ret = ret ? ret : img_open_fd(c->fd, c->name, &img);
	ret = ret ? ret : img_scan_match(c->scan, img);
	img_close(&img);
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
