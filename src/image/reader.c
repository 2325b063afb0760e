/* reader.c - open, read and verify images (format: docs/format.md).
 *
 * Opening checks everything small (header, footer, manifest); chunk payloads
 * are checked when read. A section's chunk table is built lazily, in file
 * order, by walking and validating chunk headers from the section's first
 * chunk; it is kept, so random reads cost one header walk per section.
 *
 * Nothing read from the file is trusted before it is checked: every length
 * is bounded by what the manifest (itself bounded by the file size) allows,
 * so hostile input can neither make the reader allocate more than a few
 * chunks nor loop longer than the file is long.
 *
 * img_verify streams the file: each read takes a chunk's payload and the
 * next chunk's header together, and a WILLNEED hint keeps the disk busy
 * ahead of the checksum work.
 */
#include "image/image.h"
#include "image/format.h"
#include "image/manifest.h"
#include "common/crc32c.h"
#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define PARENT_DEPTH_MAX 16
#define RA_WINDOW  (32u << 20)  /* verify: ask for this much ahead of the reader */
#define RA_STEP    (8u << 20)   /* ... in steps of this size */

struct chunk_ent {
	uint64_t pos;           /* file offset of the chunk header */
	uint32_t flags;
	uint32_t raw_len;
	uint32_t stored_len;
	uint32_t crc;
};

struct rsec {
	struct chunk_ent *tab;  /* m->sec[i].chunks entries, the first ntab valid */
	uint32_t ntab;
	uint64_t next_pos;      /* header of chunk ntab */
	int parent_index;       /* in the parent image; -1: not looked up yet */
};

struct buf {
	unsigned char *p;
	size_t cap;
};

struct img_reader {
	int fd;
	int own_fd;
	char *name;             /* for messages */
	char *dir;              /* where the parent is looked up; NULL: nowhere */
	unsigned depth;         /* in a chain of parents */
	uint64_t file_size;
	uint32_t header_len;
	uint8_t id[16];
	char *mtext;
	struct img_manifest *m;
	struct rsec *secs;
	struct buf sbuf;        /* stored payloads */
	struct buf tbuf;        /* zstd output of sparse chunks, parent scratch */
	struct buf cbuf;        /* the decoded chunk of the last partial read */
	int cache_valid;
	unsigned cache_sec;
	uint32_t cache_chunk;
	ZSTD_DCtx *dctx;
	struct img_reader *parent;
	uint64_t ra_end;
};

static int open_path(const char *path, unsigned depth, struct img_reader **out);

/* ---- helpers ---- */

static void hex_id(char out[33], const uint8_t id[16])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static int buf_grow(struct buf *b, size_t len)
{
	unsigned char *p;

	if (b->cap >= len)
		return 0;
	p = malloc(len);
	if (!p)
		return -ENOMEM;
	free(b->p);
	b->p = p;
	b->cap = len;
	return 0;
}

/* 0, -ENODATA at end of file, or -errno. */
static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

__attribute__((format(printf, 3, 4)))
static int img_err(const struct img_reader *r, int code, const char *fmt, ...)
{
	char why[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return err_set(code, "%s: %s", r->name, why);
}

/* A message naming the file, the section, the chunk and its file offset. */
__attribute__((format(printf, 6, 7)))
static int chunk_err(const struct img_reader *r, unsigned s, uint32_t j, uint64_t pos, int code,
		     const char *fmt, ...)
{
	char why[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return err_set(code, "%s: section '%.100s' (#%u) chunk %u at offset %llu: %s", r->name,
		       r->m->sec[s].name, s, j, (unsigned long long)pos, why);
}

static int read_err(const struct img_reader *r, unsigned s, uint32_t j, uint64_t pos, int ret)
{
	if (ret == -ENODATA)
		return chunk_err(r, s, j, pos, -EBADMSG, "unexpected end of file");
	if (ret == -ENOMEM)
		return chunk_err(r, s, j, pos, ret, "out of memory");
	return chunk_err(r, s, j, pos, ret, "read error: %s", strerror(-ret));
}

static uint64_t sec_end(const struct img_reader *r, unsigned s)
{
	const struct img_manifest_section *ms = &r->m->sec[s];

	return ms->offset + (uint64_t)ms->chunks * IMG_CHUNK_HDR_LEN + ms->stored;
}

/* ---- open: header, footer, manifest ---- */

static int header_crc_ok(const unsigned char *raw, uint32_t len)
{
	uint32_t crc = crc32c(0, raw, offsetof(struct img_disk_header, crc)), want;

	if (len > IMG_HEADER_LEN)
		crc = crc32c(crc, raw + IMG_HEADER_LEN, len - IMG_HEADER_LEN);
	memcpy(&want, raw + offsetof(struct img_disk_header, crc), 4);
	return crc == le32toh(want);
}

static int read_header(struct img_reader *r)
{
	unsigned char raw[IMG_HEADER_MAX];
	size_t n = r->file_size < IMG_HEADER_LEN ? (size_t)r->file_size : IMG_HEADER_LEN;
	struct img_disk_header h;
	int ret = pread_full(r->fd, raw, n, 0);

	if (ret)
		return img_err(r, ret == -ENODATA ? -EBADMSG : ret, "cannot read the header: %s",
			       strerror(ret == -ENODATA ? EBADMSG : -ret));
	if (memcmp(raw, IMG_MAGIC, n < IMG_MAGIC_LEN ? n : IMG_MAGIC_LEN) != 0 || n == 0)
		return img_err(r, -EBADMSG, n ? "not a Stasis image (bad magic)" :
			       "truncated or incomplete image (empty file)");
	if (n < IMG_HEADER_LEN)
		return img_err(r, -EBADMSG, "truncated or incomplete image (no valid footer)");
	memcpy(&h, raw, sizeof(h));
	fmt_header_swap(&h);
	/* A later major version may lay the header out differently. */
	if (h.major != IMG_MAJOR)
		return img_err(r, -EPROTONOSUPPORT, "unsupported image format version %u.%u "
			       "(this stasis reads %u.x)", h.major, h.minor, IMG_MAJOR);
	if (h.header_len < IMG_HEADER_LEN || h.header_len > IMG_HEADER_MAX || h.header_len % 8 ||
	    h.header_len > r->file_size) {
		if (!header_crc_ok(raw, IMG_HEADER_LEN))
			return img_err(r, -EBADMSG, "header checksum mismatch");
		return img_err(r, -EBADMSG, "bad header length %u", h.header_len);
	}
	if (h.header_len > IMG_HEADER_LEN) {
		ret = pread_full(r->fd, raw + IMG_HEADER_LEN, h.header_len - IMG_HEADER_LEN, IMG_HEADER_LEN);
		if (ret)
			return img_err(r, ret == -ENODATA ? -EBADMSG : ret, "cannot read the header");
	}
	if (!header_crc_ok(raw, h.header_len))
		return img_err(r, -EBADMSG, "header checksum mismatch");
	if (h.flags & IMG_HDR_FLAGS_MUST)
		return img_err(r, -EPROTONOSUPPORT, "image %u.%u uses features this stasis does not "
			       "know (header flags %#x)", h.major, h.minor, h.flags & IMG_HDR_FLAGS_MUST);
	r->header_len = h.header_len;
	memcpy(r->id, h.image_id, sizeof(r->id));
	return 0;
}

static int read_footer(struct img_reader *r, struct img_disk_footer *f)
{
	uint64_t size = r->file_size;
	int ret;

	if (size < (uint64_t)r->header_len + IMG_FOOTER_LEN)
		return img_err(r, -EBADMSG, "truncated or incomplete image (no valid footer)");
	ret = pread_full(r->fd, f, sizeof(*f), size - IMG_FOOTER_LEN);
	if (ret)
		return img_err(r, ret == -ENODATA ? -EBADMSG : ret, "cannot read the footer: %s",
			       strerror(ret == -ENODATA ? EBADMSG : -ret));
	if (memcmp(f->magic, IMG_FOOTER_MAGIC, IMG_MAGIC_LEN) != 0)
		return img_err(r, -EBADMSG, "truncated or incomplete image (no valid footer)");
	if (crc32c(0, f, offsetof(struct img_disk_footer, crc)) != le32toh(f->crc))
		return img_err(r, -EBADMSG, "footer checksum mismatch");
	fmt_footer_swap(f);
	if (f->manifest_offset < r->header_len || f->manifest_offset > size ||
	    f->manifest_len == 0 || f->manifest_len > IMG_MANIFEST_MAX ||
	    f->manifest_offset + f->manifest_len != size - IMG_FOOTER_LEN)
		return img_err(r, -EBADMSG, "footer is inconsistent: manifest at %llu, %llu bytes, "
			       "in a file of %llu bytes", (unsigned long long)f->manifest_offset,
			       (unsigned long long)f->manifest_len, (unsigned long long)size);
	return 0;
}

static int read_manifest(struct img_reader *r, const struct img_disk_footer *f)
{
	struct img_manifest_frame frame = {
		.name = r->name, .data_start = r->header_len, .data_end = f->manifest_offset,
		.image_id = r->id, .major = IMG_MAJOR,
	};
	size_t len = (size_t)f->manifest_len;
	int ret;

	r->mtext = malloc(len + 1);
	if (!r->mtext)
		return img_err(r, -ENOMEM, "out of memory for a manifest of %zu bytes", len);
	ret = pread_full(r->fd, r->mtext, len, f->manifest_offset);
	if (ret)
		return img_err(r, ret == -ENODATA ? -EBADMSG : ret, "cannot read the manifest: %s",
			       strerror(ret == -ENODATA ? EBADMSG : -ret));
	r->mtext[len] = '\0';
	if (crc32c(0, r->mtext, len) != f->manifest_crc)
		return img_err(r, -EBADMSG, "manifest checksum mismatch");
	ret = img_manifest_parse(r->mtext, len, &frame, &r->m);
	if (ret)
		return ret;
	if (r->m->nsec != f->section_count)
		return img_err(r, -EBADMSG, "footer counts %u sections, the manifest %u",
			       f->section_count, r->m->nsec);
	r->secs = calloc(r->m->nsec ? r->m->nsec : 1, sizeof(*r->secs));
	if (!r->secs)
		return img_err(r, -ENOMEM, "out of memory");
	for (unsigned i = 0; i < r->m->nsec; i++) {
		r->secs[i].next_pos = r->m->sec[i].offset;
		r->secs[i].parent_index = -1;
	}
	return 0;
}

static int reader_load(struct img_reader *r)
{
	struct img_disk_footer f;
	struct stat st;
	int ret;

	if (fstat(r->fd, &st) < 0)
		return img_err(r, -errno, "%s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return img_err(r, -EINVAL, "not a regular file");
	r->file_size = (uint64_t)st.st_size;
	ret = read_header(r);
	if (ret == 0)
		ret = read_footer(r, &f);
	if (ret == 0)
		ret = read_manifest(r, &f);
	return ret;
}

static int open_fd(int fd, int own, const char *name, const char *lookup, unsigned depth,
		   struct img_reader **out)
{
	struct img_reader *r = calloc(1, sizeof(*r));
	char fdname[32];
	int ret;

	*out = NULL;
	if (!r) {
		if (own)
			close(fd);
		return err_set(-ENOMEM, "out of memory");
	}
	r->fd = fd;
	r->own_fd = own;
	r->depth = depth;
	snprintf(fdname, sizeof(fdname), "<fd %d>", fd);
	r->name = strdup(name ? name : fdname);
	if (lookup) {
		const char *slash = strrchr(lookup, '/');

		r->dir = slash ? strndup(lookup, (size_t)(slash - lookup + 1)) : strdup("");
	}
	if (!r->name || (lookup && !r->dir)) {
		ret = err_set(-ENOMEM, "out of memory");
		goto fail;
	}
	ret = reader_load(r);
	if (ret)
		goto fail;
	*out = r;
	return 0;
fail:
	img_close(&r);
	return ret;
}

static int open_path(const char *path, unsigned depth, struct img_reader **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	*out = NULL;
	if (fd < 0)
		return err_set(-errno, "%s: %s", path, strerror(errno));
	return open_fd(fd, 1, path, path, depth, out);
}

int img_open(const char *path, struct img_reader **out)
{
	return open_path(path, 0, out);
}

int img_has_magic(const void *head, size_t len)
{
	static_assert(IMG_MAGIC_BYTES == IMG_MAGIC_LEN, "public and private magic lengths");
	return len >= IMG_MAGIC_LEN && memcmp(head, IMG_MAGIC, IMG_MAGIC_LEN) == 0;
}

int img_open_fd(int fd, const char *name, struct img_reader **out)
{
	return open_fd(fd, 0, name, name, 0, out);
}

void img_close(struct img_reader **rp)
{
	struct img_reader *r = *rp;

	if (!r)
		return;
	img_close(&r->parent);
	for (unsigned i = 0; r->m && r->secs && i < r->m->nsec; i++)
		free(r->secs[i].tab);
	free(r->secs);
	img_manifest_free(&r->m);
	free(r->mtext);
	free(r->sbuf.p);
	free(r->tbuf.p);
	free(r->cbuf.p);
	ZSTD_freeDCtx(r->dctx);
	if (r->own_fd)
		close(r->fd);
	free(r->name);
	free(r->dir);
	free(r);
	*rp = NULL;
}

int img_image_id(const struct img_reader *r, uint8_t id[16])
{
	memcpy(id, r->id, sizeof(r->id));
	return 0;
}

const char *img_manifest(const struct img_reader *r)
{
	return r->mtext;
}

unsigned img_section_count(const struct img_reader *r)
{
	return r->m->nsec;
}

int img_section_get(const struct img_reader *r, unsigned index, struct img_section_info *out)
{
	const struct img_manifest_section *s;

	if (index >= r->m->nsec)
		return img_err(r, -EINVAL, "no section #%u (the image has %u)", index, r->m->nsec);
	s = &r->m->sec[index];
	*out = (struct img_section_info){
		.name = s->name, .kind = s->kind, .size = s->size, .stored = s->stored,
		.file_offset = s->offset, .chunks = s->chunks,
	};
	return 0;
}

int img_section_find(const struct img_reader *r, const char *name)
{
	for (unsigned i = 0; i < r->m->nsec; i++)
		if (strcmp(r->m->sec[i].name, name) == 0)
			return (int)i;
	return -ENOENT;
}

/* ---- the chunk table ---- */

static int check_stored_len(uint32_t flags, uint32_t raw, uint32_t stored)
{
	uint32_t bm = fmt_bitmap_len(raw);

	switch (flags) {
	case 0:
		return stored == raw;
	case IMG_CHUNK_ZERO:
	case IMG_CHUNK_PARENT:
		return stored == 0;
	case IMG_CHUNK_SPARSE:
		return stored >= bm && stored - bm < raw;
	case IMG_CHUNK_ZSTD:
		return stored > 0 && stored <= ZSTD_compressBound(raw);
	case IMG_CHUNK_ZSTD | IMG_CHUNK_SPARSE:
		return stored > 0 && stored <= ZSTD_compressBound((size_t)raw + bm);
	default:
		return -1;
	}
}

/* Validate the header of the next chunk (number ntab) of section s, given
 * its 48 bytes, and append it to the table. */
static int chunk_accept(struct img_reader *r, unsigned s, const void *raw48)
{
	const struct img_manifest_section *ms = &r->m->sec[s];
	struct rsec *rs = &r->secs[s];
	uint32_t j = rs->ntab, cs = r->m->chunk_size;
	uint64_t pos = rs->next_pos, off = (uint64_t)j * cs, end = sec_end(r, s);
	uint32_t want_raw = ms->size - off < cs ? (uint32_t)(ms->size - off) : cs;
	struct img_disk_chunk h;
	int ok;

	memcpy(&h, raw48, sizeof(h));
	if (le32toh(h.magic) != IMG_CHUNK_MAGIC)
		return chunk_err(r, s, j, pos, -EBADMSG, "bad chunk magic (not a chunk header)");
	if (crc32c(0, &h, offsetof(struct img_disk_chunk, hdr_crc)) != le32toh(h.hdr_crc))
		return chunk_err(r, s, j, pos, -EBADMSG, "chunk header checksum mismatch");
	fmt_chunk_swap(&h);
	if (h.section != s || h.seq != j)
		return chunk_err(r, s, j, pos, -EBADMSG, "found chunk %u of section #%u instead "
				 "(chunks missing or out of order)", h.seq, h.section);
	if (h.offset != off || h.raw_len != want_raw)
		return chunk_err(r, s, j, pos, -EBADMSG, "covers %u bytes at %llu, expected %u at %llu",
				 h.raw_len, (unsigned long long)h.offset, want_raw,
				 (unsigned long long)off);
	ok = check_stored_len(h.flags, h.raw_len, h.stored_len);
	if (ok < 0)
		return chunk_err(r, s, j, pos, -EBADMSG, "unknown chunk flags %#x", h.flags);
	if (!ok || (h.stored_len == 0 && h.payload_crc != 0))
		return chunk_err(r, s, j, pos, -EBADMSG, "impossible payload length %u for flags %#x "
				 "and %u bytes", h.stored_len, h.flags, h.raw_len);
	if ((h.flags & IMG_CHUNK_PARENT) && !r->m->parent)
		return chunk_err(r, s, j, pos, -EBADMSG, "refers to a parent, but the image has none");
	if (pos + IMG_CHUNK_HDR_LEN + h.stored_len > end)
		return chunk_err(r, s, j, pos, -EBADMSG, "runs past the end of the section at %llu",
				 (unsigned long long)end);
	if (j + 1 == ms->chunks && pos + IMG_CHUNK_HDR_LEN + h.stored_len != end)
		return chunk_err(r, s, j, pos, -EBADMSG, "last chunk ends at %llu, but the section "
				 "ends at %llu (junk or missing data)",
				 (unsigned long long)(pos + IMG_CHUNK_HDR_LEN + h.stored_len),
				 (unsigned long long)end);
	rs->tab[j] = (struct chunk_ent){
		.pos = pos, .flags = h.flags, .raw_len = h.raw_len,
		.stored_len = h.stored_len, .crc = h.payload_crc,
	};
	rs->ntab++;
	rs->next_pos = pos + IMG_CHUNK_HDR_LEN + h.stored_len;
	return 0;
}

static int table_alloc(struct img_reader *r, unsigned s)
{
	struct rsec *rs = &r->secs[s];

	if (rs->tab)
		return 0;
	/* Bounded by the file: each entry stands for a 48-byte header in it. */
	rs->tab = malloc((size_t)r->m->sec[s].chunks * sizeof(*rs->tab));
	if (!rs->tab)
		return chunk_err(r, s, 0, r->m->sec[s].offset, -ENOMEM, "out of memory for the chunk table");
	return 0;
}

/* Make sure chunk j of section s is in the table. */
static int table_extend(struct img_reader *r, unsigned s, uint32_t j)
{
	struct rsec *rs = &r->secs[s];
	unsigned char raw[IMG_CHUNK_HDR_LEN];
	int ret = table_alloc(r, s);

	while (ret == 0 && rs->ntab <= j) {
		if (rs->next_pos + IMG_CHUNK_HDR_LEN > sec_end(r, s))
			return chunk_err(r, s, rs->ntab, rs->next_pos, -EBADMSG,
					 "chunk header runs past the end of the section");
		ret = pread_full(r->fd, raw, sizeof(raw), rs->next_pos);
		if (ret)
			return read_err(r, s, rs->ntab, rs->next_pos, ret);
		ret = chunk_accept(r, s, raw);
	}
	return ret;
}

/* ---- payloads ---- */

static int dctx_get(struct img_reader *r)
{
	if (!r->dctx)
		r->dctx = ZSTD_createDCtx();
	return r->dctx ? 0 : -ENOMEM;
}

/* Decompress one zstd frame p[0..len) into out (grown as needed unless
 * fixed is set, in which case *out must hold max bytes). The frame must
 * carry its content size and a content checksum (which zstd checks), and
 * hold between min and max bytes; nothing may follow it. */
static int zstd_decode(struct img_reader *r, unsigned s, uint32_t j, const unsigned char *p,
		       uint32_t len, unsigned char *dst, struct buf *grow, uint64_t min, uint64_t max,
		       size_t *out_len)
{
	static const unsigned char magic[4] = { 0x28, 0xb5, 0x2f, 0xfd };
	uint64_t pos = r->secs[s].tab[j].pos;
	unsigned long long csize;
	size_t n;

	if (len < 6 || memcmp(p, magic, 4) != 0)
		return chunk_err(r, s, j, pos, -EBADMSG, "payload is not a zstd frame");
	if (!(p[4] & 0x04))
		return chunk_err(r, s, j, pos, -EBADMSG, "zstd frame without a content checksum");
	csize = ZSTD_getFrameContentSize(p, len);
	if (csize == ZSTD_CONTENTSIZE_UNKNOWN || csize == ZSTD_CONTENTSIZE_ERROR)
		return chunk_err(r, s, j, pos, -EBADMSG, "zstd frame without a valid content size");
	if (csize < min || csize > max)
		return chunk_err(r, s, j, pos, -EBADMSG, "zstd frame holds %llu bytes, expected %llu..%llu",
				 csize, (unsigned long long)min, (unsigned long long)max);
	if (ZSTD_findFrameCompressedSize(p, len) != len)
		return chunk_err(r, s, j, pos, -EBADMSG, "zstd frame is damaged or followed by junk");
	if (dctx_get(r))
		return chunk_err(r, s, j, pos, -ENOMEM, "out of memory");
	if (!dst) {
		if (buf_grow(grow, (size_t)csize ? (size_t)csize : 1))
			return chunk_err(r, s, j, pos, -ENOMEM, "out of memory");
		dst = grow->p;
	}
	n = ZSTD_decompressDCtx(r->dctx, dst, (size_t)csize, p, len);
	if (ZSTD_isError(n))
		return chunk_err(r, s, j, pos, -EBADMSG, "zstd: %s", ZSTD_getErrorName(n));
	if (n != csize)
		return chunk_err(r, s, j, pos, -EBADMSG, "zstd frame decompressed to %zu bytes, "
				 "expected %llu", n, csize);
	*out_len = n;
	return 0;
}

/* Check a sparse form (bitmap + non-zero pages) and, if dst, expand it. */
static int sparse_expand(struct img_reader *r, unsigned s, uint32_t j, const unsigned char *p,
			 size_t len, unsigned char *dst)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];
	uint32_t raw = e->raw_len, npages = fmt_pages(raw), bm = fmt_bitmap_len(raw);
	uint64_t want = bm;
	const unsigned char *src;

	if (len < bm)
		return chunk_err(r, s, j, e->pos, -EBADMSG, "sparse bitmap is truncated");
	if (npages % 8 && (p[bm - 1] >> (npages % 8)))
		return chunk_err(r, s, j, e->pos, -EBADMSG, "sparse bitmap marks pages past the chunk");
	for (uint32_t i = 0; i < npages; i++)
		if (p[i / 8] & (1u << (i % 8)))
			want += i + 1 < npages ? IMG_PAGE : raw - i * IMG_PAGE;
	if (want != len)
		return chunk_err(r, s, j, e->pos, -EBADMSG, "sparse payload has %zu bytes, its bitmap "
				 "says %llu", len, (unsigned long long)want);
	if (!dst)
		return 0;
	src = p + bm;
	for (uint32_t i = 0; i < npages; i++) {
		uint32_t off = i * IMG_PAGE, plen = i + 1 < npages ? IMG_PAGE : raw - off;

		if (p[i / 8] & (1u << (i % 8))) {
			memcpy(dst + off, src, plen);
			src += plen;
		} else {
			memset(dst + off, 0, plen);
		}
	}
	return 0;
}

/* Check the stored payload p of chunk j (already in memory) and, if dst,
 * decode it into dst (raw_len bytes). */
static int payload_decode(struct img_reader *r, unsigned s, uint32_t j, const unsigned char *p,
			  unsigned char *dst)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];
	uint32_t raw = e->raw_len, bm = fmt_bitmap_len(raw);
	const unsigned char *form = p;
	size_t flen = e->stored_len;
	int ret;

	if (crc32c(0, p, e->stored_len) != e->crc)
		return chunk_err(r, s, j, e->pos, -EBADMSG, "payload checksum mismatch");
	if (e->flags & IMG_CHUNK_ZSTD) {
		int sparse = e->flags & IMG_CHUNK_SPARSE;

		ret = zstd_decode(r, s, j, p, e->stored_len, sparse ? NULL : dst, &r->tbuf,
				  sparse ? bm : raw, sparse ? (uint64_t)bm + raw : raw, &flen);
		if (ret)
			return ret;
		if (!sparse)
			return 0;
		form = r->tbuf.p;
	}
	if (e->flags & IMG_CHUNK_SPARSE)
		return sparse_expand(r, s, j, form, flen, dst);
	if (dst && dst != p)
		memcpy(dst, p, raw);
	return 0;
}

/* ---- parents ---- */

static int parent_open(struct img_reader *r, unsigned s, uint32_t j)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];
	const char *rel = r->m->parent;
	char path[PATH_MAX + 1], msg[512];
	int ret;

	if (r->parent)
		return 0;
	if (!r->dir)
		return chunk_err(r, s, j, e->pos, -ENOENT, "refers to parent image '%.200s', but this "
				 "image was opened without a name to find it by", rel);
	if (r->depth + 1 >= PARENT_DEPTH_MAX)
		return chunk_err(r, s, j, e->pos, -ELOOP, "chain of parent images deeper than %d",
				 PARENT_DEPTH_MAX);
	if ((size_t)snprintf(path, sizeof(path), "%s%s", rel[0] == '/' ? "" : r->dir, rel) >= sizeof(path))
		return chunk_err(r, s, j, e->pos, -ENAMETOOLONG, "parent image path too long");
	ret = open_path(path, r->depth + 1, &r->parent);
	if (ret) {
		snprintf(msg, sizeof(msg), "%s", err_msg());
		return chunk_err(r, s, j, e->pos, ret, "parent image: %s", msg);
	}
	/* The path says where the parent should be, the id which image it must
	 * be: another image put there (an older or newer checkpoint, a restore
	 * from elsewhere) would pass every checksum and give wrong bytes. */
	if (r->m->has_parent_id && memcmp(r->parent->id, r->m->parent_id, 16) != 0) {
		char want[33], got[33];

		hex_id(want, r->m->parent_id);
		hex_id(got, r->parent->id);
		img_close(&r->parent);
		return chunk_err(r, s, j, e->pos, -ESTALE, "parent image %.200s is image %s, but this "
				 "image was written against image %s (parent replaced?)", path, got, want);
	}
	return 0;
}

/* Read [off, off+len) of section s from the parent image into dst. */
static int parent_read(struct img_reader *r, unsigned s, uint32_t j, uint64_t off,
		       unsigned char *dst, size_t len)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];
	struct rsec *rs = &r->secs[s];
	char msg[512];
	ssize_t n;
	int ret = parent_open(r, s, j);

	if (ret)
		return ret;
	if (rs->parent_index < 0) {
		rs->parent_index = img_section_find(r->parent, r->m->sec[s].name);
		if (rs->parent_index < 0)
			return chunk_err(r, s, j, e->pos, -EBADMSG, "parent image %s has no section "
					 "of that name", r->parent->name);
	}
	n = img_read(r->parent, (unsigned)rs->parent_index, off, dst, len);
	if (n < 0) {
		snprintf(msg, sizeof(msg), "%s", err_msg());
		return chunk_err(r, s, j, e->pos, (int)n, "parent image: %s", msg);
	}
	if ((size_t)n != len)
		return chunk_err(r, s, j, e->pos, -EBADMSG, "the section in parent image %s is only "
				 "%llu bytes long", r->parent->name,
				 (unsigned long long)r->parent->m->sec[rs->parent_index].size);
	return 0;
}

/* ---- reading ---- */

/* Decode all of chunk j into dst (raw_len bytes). */
static int chunk_read(struct img_reader *r, unsigned s, uint32_t j, unsigned char *dst)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];
	uint64_t ppos = e->pos + IMG_CHUNK_HDR_LEN;
	int ret;

	if (e->flags & IMG_CHUNK_ZERO) {
		memset(dst, 0, e->raw_len);
		return 0;
	}
	if (e->flags & IMG_CHUNK_PARENT)
		return parent_read(r, s, j, (uint64_t)j * r->m->chunk_size, dst, e->raw_len);
	if (e->flags == 0) {
		/* Straight into the caller's buffer: no copy. */
		ret = pread_full(r->fd, dst, e->stored_len, ppos);
		return ret ? read_err(r, s, j, e->pos, ret) : payload_decode(r, s, j, dst, dst);
	}
	if (buf_grow(&r->sbuf, e->stored_len))
		return read_err(r, s, j, e->pos, -ENOMEM);
	ret = pread_full(r->fd, r->sbuf.p, e->stored_len, ppos);
	if (ret)
		return read_err(r, s, j, e->pos, ret);
	return payload_decode(r, s, j, r->sbuf.p, dst);
}

/* Bytes [within, within+len) of chunk j into dst. */
static int chunk_read_part(struct img_reader *r, unsigned s, uint32_t j, uint32_t within,
			   unsigned char *dst, size_t len)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];
	int ret;

	if (e->flags & IMG_CHUNK_ZERO) {
		memset(dst, 0, len);
		return 0;
	}
	if (e->flags & IMG_CHUNK_PARENT)
		return parent_read(r, s, j, (uint64_t)j * r->m->chunk_size + within, dst, len);
	if (within == 0 && len == e->raw_len)
		return chunk_read(r, s, j, dst);
	if (!r->cache_valid || r->cache_sec != s || r->cache_chunk != j) {
		if (buf_grow(&r->cbuf, e->raw_len))
			return read_err(r, s, j, e->pos, -ENOMEM);
		r->cache_valid = 0;
		ret = chunk_read(r, s, j, r->cbuf.p);
		if (ret)
			return ret;
		r->cache_valid = 1;
		r->cache_sec = s;
		r->cache_chunk = j;
	}
	memcpy(dst, r->cbuf.p + within, len);
	return 0;
}

ssize_t img_read(struct img_reader *r, unsigned section, uint64_t offset, void *buf, size_t len)
{
	const struct img_manifest_section *ms;
	uint64_t cs, done = 0;
	int ret;

	if (section >= r->m->nsec)
		return img_err(r, -EINVAL, "no section #%u (the image has %u)", section, r->m->nsec);
	ms = &r->m->sec[section];
	cs = r->m->chunk_size;
	if (offset >= ms->size)
		return 0;
	if (len > ms->size - offset)
		len = (size_t)(ms->size - offset);
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	while (done < len) {
		uint64_t at = offset + done;
		uint32_t j = (uint32_t)(at / cs), within = (uint32_t)(at % cs);
		size_t take;

		ret = table_extend(r, section, j);
		if (ret)
			return ret;
		take = r->secs[section].tab[j].raw_len - within;
		if (take > len - done)
			take = (size_t)(len - done);
		ret = chunk_read_part(r, section, j, within, (unsigned char *)buf + done, take);
		if (ret)
			return ret;
		done += take;
	}
	return (ssize_t)len;
}

int img_section_load(struct img_reader *r, const char *name, size_t max, void **buf, size_t *len)
{
	struct img_section_info si;
	int idx = img_section_find(r, name);
	ssize_t got;
	void *p;

	*buf = NULL;
	*len = 0;
	if (idx < 0 || img_section_get(r, (unsigned)idx, &si))
		return err_set(-ENOENT, "the image has no section %s", name);
	if (si.size > max)
		return err_set(-EFBIG, "section %s is too large (%llu bytes)", name,
			       (unsigned long long)si.size);
	p = malloc(si.size ? si.size : 1);
	if (!p)
		return err_set(-ENOMEM, "out of memory");
	got = si.size ? img_read(r, (unsigned)idx, 0, p, si.size) : 0;
	if (got < 0 || (uint64_t)got != si.size) {
		free(p);
		return got < 0 ? (int)got : err_set(-EBADMSG, "section %s is short", name);
	}
	*buf = p;
	*len = si.size;
	return 0;
}

int img_chunk_locate(struct img_reader *r, unsigned section, uint32_t chunk, struct img_chunk_loc *out)
{
	const struct chunk_ent *e;
	int ret;

	if (section >= r->m->nsec)
		return img_err(r, -EINVAL, "no section #%u (the image has %u)", section, r->m->nsec);
	if (chunk >= r->m->sec[section].chunks)
		return img_err(r, -EINVAL, "section '%.100s' (#%u) has no chunk %u", r->m->sec[section].name,
			       section, chunk);
	ret = table_extend(r, section, chunk);
	if (ret)
		return ret;
	e = &r->secs[section].tab[chunk];
	*out = (struct img_chunk_loc){
		.offset = (uint64_t)chunk * r->m->chunk_size, .header_pos = e->pos,
		.payload_pos = e->pos + IMG_CHUNK_HDR_LEN, .raw_len = e->raw_len,
		.stored_len = e->stored_len, .crc = e->crc,
		.form = e->flags == 0 ? IMG_FORM_RAW : e->flags == IMG_CHUNK_ZERO ? IMG_FORM_ZERO :
			IMG_FORM_ENCODED,
	};
	return 0;
}

int img_fd(const struct img_reader *r)
{
	return r->fd;
}

const char *img_name(const struct img_reader *r)
{
	return r->name;
}

/* ---- verification ---- */

/* Keep the kernel reading ahead of us while we checksum. */
static void prefetch(struct img_reader *r, uint64_t pos)
{
	uint64_t target = pos + RA_WINDOW;

	if (target > r->file_size)
		target = r->file_size;
	if (r->ra_end < pos)
		r->ra_end = pos;
	if (target < r->ra_end + RA_STEP && target != r->file_size)
		return;
	if (target > r->ra_end)
		posix_fadvise(r->fd, (off_t)r->ra_end, (off_t)(target - r->ra_end), POSIX_FADV_WILLNEED);
	r->ra_end = target;
}

static int verify_parent(struct img_reader *r, unsigned s, uint32_t j)
{
	const struct chunk_ent *e = &r->secs[s].tab[j];

	if (buf_grow(&r->tbuf, e->raw_len))
		return read_err(r, s, j, e->pos, -ENOMEM);
	return parent_read(r, s, j, (uint64_t)j * r->m->chunk_size, r->tbuf.p, e->raw_len);
}

static int verify_section(struct img_reader *r, unsigned s)
{
	uint32_t chunks = r->m->sec[s].chunks;
	struct rsec *rs = &r->secs[s];
	int ret;

	if (chunks == 0)
		return 0;
	ret = table_extend(r, s, 0);
	for (uint32_t j = 0; ret == 0 && j < chunks; j++) {
		const struct chunk_ent *e = &rs->tab[j];
		/* Read the next chunk's header along with this payload. */
		size_t extra = j + 1 < chunks && rs->ntab == j + 1 ? IMG_CHUNK_HDR_LEN : 0;
		size_t want = e->stored_len + extra;

		if (extra && e->pos + IMG_CHUNK_HDR_LEN + want > sec_end(r, s))
			return chunk_err(r, s, j + 1, rs->next_pos, -EBADMSG,
					 "chunk header runs past the end of the section");
		prefetch(r, e->pos + IMG_CHUNK_HDR_LEN + want);
		if (want) {
			if (buf_grow(&r->sbuf, want))
				return read_err(r, s, j, e->pos, -ENOMEM);
			ret = pread_full(r->fd, r->sbuf.p, want, e->pos + IMG_CHUNK_HDR_LEN);
			if (ret)
				return read_err(r, s, j, e->pos, ret);
		}
		if (e->flags & IMG_CHUNK_PARENT)
			ret = verify_parent(r, s, j);
		else if (!(e->flags & IMG_CHUNK_ZERO))
			ret = payload_decode(r, s, j, r->sbuf.p, NULL);
		if (ret == 0 && extra)
			ret = chunk_accept(r, s, r->sbuf.p + e->stored_len);
	}
	return ret;
}

int img_verify(struct img_reader *r)
{
	int ret = 0;

	posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	r->ra_end = 0;
	for (unsigned s = 0; ret == 0 && s < r->m->nsec; s++)
		ret = verify_section(r, s);
	return ret;
}
