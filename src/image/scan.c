/* scan.c - an image checked as its bytes pass (image.h, img_scan_*): the
 * node agent copies a rank's image to the global tier while the rank still
 * writes it, so no whole file is there to open. Every checksum of the
 * format (docs/format.md) is verified on the bytes fed, in file order: the
 * header's, each chunk header's and payload's as they go by, then the
 * manifest's and the footer's, whose bytes (everything after the last
 * chunk) are kept until the end.
 */
#include "image/format.h"
#include "image/image.h"

#include "common/crc32c.h"
#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct img_scan {
	char name[256];                 /* for messages */
	uint64_t pos;                   /* bytes fed */
	uint32_t header_len;            /* 0 until the header is in */
	unsigned char head[IMG_HEADER_MAX];     /* the header, then each chunk header */
	size_t have;                    /* bytes of head gathered */
	struct img_disk_chunk chunk;    /* the chunk whose payload passes */
	uint64_t left;                  /* of its payload */
	uint64_t payload_pos;
	uint32_t crc;                   /* of its payload so far */
	unsigned char *tail;            /* manifest and footer, once the chunks ended */
	size_t tail_len, tail_cap;
	uint64_t data_end;              /* where the chunks ended (0: not yet) */
	struct img_scan_payload *p;     /* every payload checked, in file order */
	size_t n, cap;
};

int img_scan_create(const char *name, struct img_scan **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return err_set(-ENOMEM, "out of memory");
	snprintf((*out)->name, sizeof((*out)->name), "%s", name);
	return 0;
}

/* The header's length, from its first 64 bytes (checked by header_in) */
static size_t header_len(const struct img_scan *s)
{
	uint32_t len;

	memcpy(&len, s->head + offsetof(struct img_disk_header, header_len), sizeof(len));
	return le32toh(len);
}

static int header_in(struct img_scan *s)
{
	struct img_disk_header h;
	uint32_t crc;

	memcpy(&h, s->head, sizeof(h));
	fmt_header_swap(&h);
	if (s->have == IMG_HEADER_LEN) {
		if (memcmp(h.magic, IMG_MAGIC, IMG_MAGIC_LEN) != 0)
			return err_set(-EBADMSG, "%s: not a Stasis image (bad magic)", s->name);
		if (h.major != IMG_MAJOR || h.header_len < IMG_HEADER_LEN ||
		    h.header_len > IMG_HEADER_MAX || h.header_len % 8)
			return err_set(-EBADMSG, "%s: bad header (version %u, length %u)", s->name,
				       h.major, h.header_len);
		if (h.header_len > s->have)
			return 0;       /* its extension first */
	}
	crc = crc32c(0, s->head, offsetof(struct img_disk_header, crc));
	crc = crc32c(crc, s->head + IMG_HEADER_LEN, s->have - IMG_HEADER_LEN);
	if (crc != h.crc)
		return err_set(-EBADMSG, "%s: header checksum mismatch", s->name);
	s->header_len = h.header_len;
	s->have = 0;
	return 0;
}

static int payload_add(struct img_scan *s)
{
	if (s->n == s->cap) {
		void *v = realloc(s->p, (s->cap = s->cap ? s->cap * 2 : 256) * sizeof(*s->p));

		if (!v)
			return err_set(-ENOMEM, "out of memory");
		s->p = v;
	}
	s->p[s->n++] = (struct img_scan_payload){ s->payload_pos, s->chunk.stored_len,
						  s->chunk.payload_crc, s->chunk.section,
						  s->chunk.seq };
	return 0;
}

/* A chunk header gathered: checked; its payload comes next */
static int chunk_in(struct img_scan *s)
{
	uint64_t at = s->pos - IMG_CHUNK_HDR_LEN;

	memcpy(&s->chunk, s->head, sizeof(s->chunk));
	s->have = 0;
	if (crc32c(0, &s->chunk, offsetof(struct img_disk_chunk, hdr_crc)) !=
	    le32toh(s->chunk.hdr_crc))
		return err_set(-EBADMSG, "%s: chunk header at byte %llu: checksum mismatch", s->name,
			       (unsigned long long)at);
	fmt_chunk_swap(&s->chunk);
	s->payload_pos = s->pos;
	s->left = s->chunk.stored_len;
	s->crc = 0;
	return 0;
}

static int payload_end(struct img_scan *s)
{
	if (s->crc != s->chunk.payload_crc)
		return err_set(-EBADMSG, "%s: section %u, chunk %u (payload at byte %llu): CRC32C "
			       "mismatch", s->name, s->chunk.section, s->chunk.seq,
			       (unsigned long long)s->payload_pos);
	return payload_add(s);
}

static int tail_add(struct img_scan *s, const unsigned char *p, size_t len)
{
	if (!len)
		return 0;   /* the chunks ended on a piece's edge: nothing yet */
	if (s->tail_len + len > IMG_MANIFEST_MAX + IMG_FOOTER_LEN)
		return err_set(-EBADMSG, "%s: more than a manifest after the last chunk (byte %llu)",
			       s->name, (unsigned long long)s->data_end);
	if (s->tail_len + len > s->tail_cap) {
		size_t cap = s->tail_cap ? s->tail_cap : 64 << 10;
		void *v;

		while (cap < s->tail_len + len)
			cap *= 2;
		v = realloc(s->tail, cap);
		if (!v)
			return err_set(-ENOMEM, "out of memory");
		s->tail = v;
		s->tail_cap = cap;
	}
	memcpy(s->tail + s->tail_len, p, len);
	s->tail_len += len;
	return 0;
}

int img_scan_feed(struct img_scan *s, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	int ret = 0;

	while (len && !ret) {
		size_t n;

		if (s->data_end)
			return tail_add(s, p, len);
		if (s->left) {
			n = s->left < len ? (size_t)s->left : len;
			s->crc = crc32c(s->crc, p, n);
			s->left -= n;
			ret = s->left ? 0 : payload_end(s);
		} else {
			/* the header (its first 64 bytes say its length), or a chunk's */
			size_t want = s->header_len ? IMG_CHUNK_HDR_LEN :
				      s->have < IMG_HEADER_LEN ? IMG_HEADER_LEN : header_len(s);

			if (s->header_len && s->have < 4 && s->have + len >= 4) {
				uint32_t magic;

				memcpy(&magic, s->head, s->have);
				memcpy((unsigned char *)&magic + s->have, p, 4 - s->have);
				if (le32toh(magic) != IMG_CHUNK_MAGIC) {
					/* the manifest: the chunks ended */
					s->data_end = s->pos - s->have;
					ret = tail_add(s, s->head, s->have);
					continue;
				}
			}
			n = want - s->have < len ? want - s->have : len;
			memcpy(s->head + s->have, p, n);
			s->have += n;
			s->pos += n;
			p += n;
			len -= n;
			if (s->have == want)
				ret = !s->header_len ? header_in(s) : chunk_in(s);
			continue;
		}
		s->pos += n;
		p += n;
		len -= n;
	}
	return ret;
}

int img_scan_end(struct img_scan *s)
{
	struct img_disk_footer f;

	if (!s->header_len || s->have || s->left || !s->data_end || s->tail_len < IMG_FOOTER_LEN)
		return err_set(-EBADMSG, "%s: truncated or incomplete image (at byte %llu)", s->name,
			       (unsigned long long)(s->pos + s->tail_len));
	memcpy(&f, s->tail + s->tail_len - IMG_FOOTER_LEN, sizeof(f));
	if (memcmp(f.magic, IMG_FOOTER_MAGIC, IMG_MAGIC_LEN) != 0)
		return err_set(-EBADMSG, "%s: truncated or incomplete image (no valid footer)",
			       s->name);
	if (crc32c(0, &f, offsetof(struct img_disk_footer, crc)) != le32toh(f.crc))
		return err_set(-EBADMSG, "%s: footer checksum mismatch", s->name);
	fmt_footer_swap(&f);
	if (f.manifest_offset != s->data_end || f.manifest_len != s->tail_len - IMG_FOOTER_LEN)
		return err_set(-EBADMSG, "%s: footer is inconsistent: manifest at %llu, %llu bytes, "
			       "after chunks ending at %llu", s->name,
			       (unsigned long long)f.manifest_offset,
			       (unsigned long long)f.manifest_len, (unsigned long long)s->data_end);
	if (crc32c(0, s->tail, (size_t)f.manifest_len) != f.manifest_crc)
		return err_set(-EBADMSG, "%s: manifest checksum mismatch", s->name);
	return 0;
}

const struct img_scan_payload *img_scan_payloads(const struct img_scan *s, size_t *n)
{
	*n = s->n;
	return s->p;
}

int img_scan_match(const struct img_scan *s, struct img_reader *r)
{
	size_t i = 0;
	int ret = 0;

	/* the sections tile the chunk area in file order (img_open checked
	 * it), as the scan saw the payloads: one walk compares both */
	for (unsigned sec = 0; !ret && sec < img_section_count(r); sec++) {
		struct img_section_info si;

		ret = img_section_get(r, sec, &si);
		for (uint32_t k = 0; !ret && k < si.chunks; k++) {
			struct img_chunk_loc loc;

			ret = img_chunk_locate(r, sec, k, &loc);
			if (ret || !loc.stored_len)
				continue;   /* a ZERO chunk has no payload */
			if (i >= s->n || s->p[i].pos != loc.payload_pos ||
			    s->p[i].len != loc.stored_len || s->p[i].crc != loc.crc)
				ret = err_set(-EBADMSG, "%s: section %u, chunk %u (payload at byte %llu) "
					      "not among the chunks checked", s->name, sec, k,
					      (unsigned long long)loc.payload_pos);
			i++;
		}
	}
	if (!ret && i != s->n)
		ret = err_set(-EBADMSG, "%s: %zu chunks checked, its manifest names %zu", s->name,
			      s->n, i);
	return ret;
}

void img_scan_free(struct img_scan **s)
{
	if (!*s)
		return;
	free((*s)->tail);
	free((*s)->p);
	free(*s);
	*s = NULL;
}
