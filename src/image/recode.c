/* recode.c - a finished image copied with its chunks compressed
 * (img_recompress, image.h): the node agent's compressed copy of a staged
 * image into the global tier.
 *
 * The image is opened (header, footer and manifest checked), then walked
 * chunk by chunk in file order: each chunk's header and payload are read
 * in one pread, the payload's CRC32C is checked on the bytes read, and a
 * raw or sparse payload that zstd makes smaller becomes a zstd frame of
 * itself (flags | ZSTD, new stored_len and payload CRC, header CRC
 * recomputed). The header (and so the image id) is copied as it is; the
 * manifest is the original one with the new "compression", each section's
 * "offset" and "stored" and the totals' "stored" and "zstd_chunks"; the
 * footer is rebuilt around it. The result decodes to the same bytes.
 */
#include "image/image.h"
#include "image/format.h"
#include "common/crc32c.h"
#include "common/err.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

struct recode {
	struct img_reader *r;
	const struct img_recompress_opts *o;
	img_sink_fn sink;
	void *ctx;
	ZSTD_CCtx *cctx;
	unsigned char *in, *out;   /* header + payload as read; header + frame */
	size_t in_cap, out_cap;
	uint64_t pos;              /* bytes given to the sink */
	uint64_t zstd_chunks;
};

static int emit(struct recode *c, const void *buf, size_t len)
{
	int ret = c->sink(c->ctx, buf, len);

	if (ret)
		return ret;
	c->pos += len;
	return 0;
}

static int grow(unsigned char **p, size_t *cap, size_t len)
{
	void *v;

	if (len <= *cap)
		return 0;
	v = realloc(*p, len);
	if (!v)
		return -ENOMEM;
	*p = v;
	*cap = len;
	return 0;
}

static int pread_all(int fd, void *buf, size_t len, uint64_t pos)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(pos + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		done += (size_t)n;
	}
	return 0;
}

/* One chunk: read, check, maybe compress, emit. *stored: its new stored_len */
static int chunk(struct recode *c, unsigned s, uint32_t k, uint64_t *stored)
{
	const char *name = img_name(c->r);
	struct img_chunk_loc loc;
	struct img_disk_chunk h;
	unsigned char *payload;
	uint32_t crc;
	int ret = img_chunk_locate(c->r, s, k, &loc);

	if (ret)
		return ret;
	if (grow(&c->in, &c->in_cap, IMG_CHUNK_HDR_LEN + (size_t)loc.stored_len))
		return err_set(-ENOMEM, "%s: out of memory", name);
	ret = pread_all(img_fd(c->r), c->in, IMG_CHUNK_HDR_LEN + (size_t)loc.stored_len,
			loc.header_pos);
	if (ret)
		return err_set(ret == -ENODATA ? -EBADMSG : ret, "%s: cannot read chunk %u of section "
			       "%u at byte %llu: %s", name, k, s, (unsigned long long)loc.header_pos,
			       ret == -ENODATA ? "file shorter than its manifest says" : strerror(-ret));
	payload = c->in + IMG_CHUNK_HDR_LEN;
	if (c->o->hook && (ret = c->o->hook(c->o->hook_ctx, payload, loc.stored_len)) != 0)
		return ret;
	/* img_chunk_locate checked this header, but from another read */
	memcpy(&h, c->in, sizeof(h));
	crc = crc32c(0, &h, offsetof(struct img_disk_chunk, hdr_crc));
	fmt_chunk_swap(&h);
	if (crc != h.hdr_crc || h.stored_len != loc.stored_len || h.payload_crc != loc.crc)
		return err_set(-EBADMSG, "%s: section %u, chunk %u (header at byte %llu): changed "
			       "while it was read", name, s, k, (unsigned long long)loc.header_pos);
	if (crc32c(0, payload, loc.stored_len) != loc.crc)
		return err_set(-EBADMSG, "%s: section %u, chunk %u (payload at byte %llu): CRC32C "
			       "mismatch", name, s, k, (unsigned long long)loc.payload_pos);
	*stored = loc.stored_len;
	if (!loc.stored_len || (h.flags & (IMG_CHUNK_ZSTD | IMG_CHUNK_ZERO | IMG_CHUNK_PARENT)))
		return emit(c, c->in, IMG_CHUNK_HDR_LEN + (size_t)loc.stored_len);
	if (grow(&c->out, &c->out_cap, IMG_CHUNK_HDR_LEN + ZSTD_compressBound(loc.stored_len)))
		return err_set(-ENOMEM, "%s: out of memory", name);
	size_t z = ZSTD_compress2(c->cctx, c->out + IMG_CHUNK_HDR_LEN,
				  c->out_cap - IMG_CHUNK_HDR_LEN, payload, loc.stored_len);

	/* kept only if smaller; a compression error just means as it was */
	if (ZSTD_isError(z) || z >= loc.stored_len)
		return emit(c, c->in, IMG_CHUNK_HDR_LEN + (size_t)loc.stored_len);
	h.flags |= IMG_CHUNK_ZSTD;
	h.stored_len = (uint32_t)z;
	h.payload_crc = crc32c(0, c->out + IMG_CHUNK_HDR_LEN, z);
	fmt_chunk_swap(&h);
	h.hdr_crc = htole32(crc32c(0, &h, offsetof(struct img_disk_chunk, hdr_crc)));
	memcpy(c->out, &h, sizeof(h));
	c->zstd_chunks++;
	*stored = z;
	return emit(c, c->out, IMG_CHUNK_HDR_LEN + z);
}

static int set_u64(json_t *obj, const char *key, uint64_t v)
{
	return json_object_set_new(obj, key, json_integer((json_int_t)v)) ? -ENOMEM : 0;
}

/* The manifest with the new layout, then the footer */
static int trailer(struct recode *c, json_t *root, const uint64_t *offset, const uint64_t *stored)
{
	json_t *secs = json_object_get(root, "sections"), *totals = json_object_get(root, "totals");
	json_t *zc = totals ? json_object_get(totals, "zstd_chunks") : NULL;
	unsigned n = img_section_count(c->r);
	struct img_disk_footer f = { 0 };
	uint64_t total = 0;
	char level[32], *text;
	size_t len;
	int ret = 0;

	snprintf(level, sizeof(level), "zstd:%u", c->o->level);
	if (!json_is_array(secs) || json_array_size(secs) != n || !json_is_object(totals))
		return err_set(-EBADMSG, "%s: manifest without sections or totals", img_name(c->r));
	for (unsigned i = 0; !ret && i < n; i++) {
		ret = set_u64(json_array_get(secs, i), "offset", offset[i]);
		ret = ret ? ret : set_u64(json_array_get(secs, i), "stored", stored[i]);
		total += stored[i];
	}
	ret = ret ? ret : set_u64(totals, "stored", total);
	ret = ret ? ret : set_u64(totals, "zstd_chunks", c->zstd_chunks +
				  (json_is_integer(zc) ? (uint64_t)json_integer_value(zc) : 0));
	if (!ret && json_object_set_new(root, "compression", json_string(level)))
		ret = -ENOMEM;
	text = ret ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!text)
		return err_set(-ENOMEM, "%s: cannot build the manifest", img_name(c->r));
	len = strlen(text);
	memcpy(f.magic, IMG_FOOTER_MAGIC, IMG_MAGIC_LEN);
	f.manifest_offset = c->pos;
	f.manifest_len = len;
	f.manifest_crc = crc32c(0, text, len);
	f.section_count = n;
	fmt_footer_swap(&f);
	f.crc = htole32(crc32c(0, &f, offsetof(struct img_disk_footer, crc)));
	ret = emit(c, text, len);
	ret = ret ? ret : emit(c, &f, sizeof(f));
	free(text);
	return ret;
}

/* The image at path, or open as fd (fd >= 0; path then names it) */
static int recompress(const char *path, int fd, const struct img_recompress_opts *opts,
		      img_sink_fn sink, void *ctx, uint64_t *bytes)
{
	struct recode c = { .o = opts, .sink = sink, .ctx = ctx };
	struct img_disk_header hdr;
	uint64_t *offset = NULL, *stored = NULL;
	json_t *root = NULL;
	unsigned n = 0;
	int ret;

	if (!opts->level || opts->level > (unsigned)ZSTD_maxCLevel())
		return err_set(-EINVAL, "image recompression: zstd level %u, expected 1 to %d",
			       opts->level, ZSTD_maxCLevel());
	ret = fd >= 0 ? img_open_fd(fd, path, &c.r) : img_open(path, &c.r);
	if (ret)
		return ret;
	n = img_section_count(c.r);
	offset = calloc(n ? n : 1, sizeof(*offset));
	stored = calloc(n ? n : 1, sizeof(*stored));
	root = json_loads(img_manifest(c.r), 0, NULL);
	c.cctx = ZSTD_createCCtx();
	if (!offset || !stored || !root || !c.cctx ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c.cctx, ZSTD_c_compressionLevel, (int)opts->level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c.cctx, ZSTD_c_checksumFlag, 1)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c.cctx, ZSTD_c_contentSizeFlag, 1))) {
		ret = err_set(-ENOMEM, "%s: out of memory", path);
		goto out;
	}
	/* the header as it is (img_open checked it): magic to header_len */
	ret = pread_all(img_fd(c.r), &hdr, sizeof(hdr), 0);
	if (!ret) {
		fmt_header_swap(&hdr);
		ret = grow(&c.in, &c.in_cap, hdr.header_len);
	}
	ret = ret ? ret : pread_all(img_fd(c.r), c.in, hdr.header_len, 0);
	ret = ret ? ret : emit(&c, c.in, hdr.header_len);
	if (ret) {
		if (!*err_msg())
			err_set(ret, "%s: cannot copy the header: %s", path, strerror(-ret));
		goto out;
	}
	for (unsigned s = 0; !ret && s < n; s++) {
		struct img_section_info si;

		offset[s] = c.pos;
		ret = img_section_get(c.r, s, &si);
		for (uint32_t k = 0; !ret && k < si.chunks; k++) {
			uint64_t st = 0;

			ret = chunk(&c, s, k, &st);
			stored[s] += st;
		}
	}
	ret = ret ? ret : trailer(&c, root, offset, stored);
	if (!ret && bytes)
		*bytes = c.pos;
out:
	json_decref(root);
	ZSTD_freeCCtx(c.cctx);
	free(c.in);
	free(c.out);
	free(offset);
	free(stored);
	img_close(&c.r);
	return ret;
}

int img_recompress(const char *path, const struct img_recompress_opts *opts, img_sink_fn sink,
		   void *ctx, uint64_t *bytes)
{
	return recompress(path, -1, opts, sink, ctx, bytes);
}

int img_recompress_fd(int fd, const char *name, const struct img_recompress_opts *opts,
		      img_sink_fn sink, void *ctx, uint64_t *bytes)
{
	return recompress(name, fd, opts, sink, ctx, bytes);
}
