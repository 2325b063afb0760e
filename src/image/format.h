/* format.h - the on-disk layout of a Stasis image (docs/format.md).
 *
 * Private to src/image. Every integer is little-endian on disk; the structs
 * below mirror the bytes exactly (natural alignment, no padding, checked by
 * the static asserts) and are converted with the fmt_*_to_disk/from_disk
 * helpers, which are no-ops on little-endian hosts.
 *
 *   [header 64 B][chunk][chunk]...[manifest JSON][footer 48 B]
 *   chunk = [chunk header 48 B][stored_len payload bytes]
 */
#ifndef STASIS_IMAGE_FORMAT_H
#define STASIS_IMAGE_FORMAT_H

#include <assert.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>

#define IMG_MAGIC            "\x89STASIS\n"   /* 8 bytes, no NUL */
#define IMG_FOOTER_MAGIC     "\x89STAEND\n"
#define IMG_MAGIC_LEN        8

#define IMG_MAJOR            1
#define IMG_MINOR            0

#define IMG_HEADER_LEN       64u
#define IMG_HEADER_MAX       4096u             /* longest header a 1.x reader accepts */
#define IMG_CHUNK_HDR_LEN    48u
#define IMG_FOOTER_LEN       48u

/* "STCK" read as bytes. */
#define IMG_CHUNK_MAGIC      0x4b435453u

#define IMG_PAGE             4096u
#define IMG_CHUNK_MIN        4096u
#define IMG_CHUNK_MAX        (64u << 20)
/* Bitmap of the largest chunk: one bit per page. */
#define IMG_BITMAP_MAX       (IMG_CHUNK_MAX / IMG_PAGE / 8)
#define IMG_MANIFEST_MAX     (64u << 20)
#define IMG_SECTIONS_MAX     (1u << 20)
#define IMG_NAME_MAX         4096u             /* section name, kind, meta, attrs */

/* Header flags: the low 16 bits are features a reader must understand (an
 * unknown one is refused); the high 16 bits may be ignored. None in 1.0. */
#define IMG_HDR_FLAGS_MUST   0x0000ffffu

/* Chunk flags. ZERO and PARENT stand alone; SPARSE and ZSTD combine. */
#define IMG_CHUNK_ZERO       0x1u   /* all bytes zero, no payload */
#define IMG_CHUNK_SPARSE     0x2u   /* page bitmap + the non-zero pages */
#define IMG_CHUNK_ZSTD       0x4u   /* one zstd frame of the raw or sparse form */
#define IMG_CHUNK_PARENT     0x8u   /* same range of the parent image, no payload */
#define IMG_CHUNK_KNOWN      0xfu

struct img_disk_header {
	uint8_t  magic[8];          /*  0 */
	uint16_t major;             /*  8 */
	uint16_t minor;             /* 10 */
	uint32_t header_len;        /* 12: offset of the first chunk */
	uint32_t flags;             /* 16 */
	uint32_t reserved0;         /* 20 */
	uint8_t  image_id[16];      /* 24: random */
	uint64_t created_ns;        /* 40: CLOCK_REALTIME, ns since the epoch */
	uint8_t  reserved1[12];     /* 48 */
	uint32_t crc;               /* 60: CRC32C of bytes 0..59 and 64..header_len-1 */
};

struct img_disk_chunk {
	uint32_t magic;             /*  0: IMG_CHUNK_MAGIC */
	uint32_t flags;             /*  4 */
	uint32_t section;           /*  8: section index */
	uint32_t seq;               /* 12: chunk number within the section */
	uint64_t offset;            /* 16: logical offset within the section */
	uint32_t raw_len;           /* 24: logical bytes */
	uint32_t stored_len;        /* 28: payload bytes that follow */
	uint32_t payload_crc;       /* 32: CRC32C of the stored payload */
	uint32_t reserved[2];       /* 36 */
	uint32_t hdr_crc;           /* 44: CRC32C of bytes 0..43 */
};

struct img_disk_footer {
	uint8_t  magic[8];          /*  0: IMG_FOOTER_MAGIC */
	uint64_t manifest_offset;   /*  8 */
	uint64_t manifest_len;      /* 16 */
	uint32_t manifest_crc;      /* 24: CRC32C of the manifest bytes */
	uint32_t section_count;     /* 28 */
	uint8_t  reserved[12];      /* 32 */
	uint32_t crc;               /* 44: CRC32C of bytes 0..43 */
};

static_assert(sizeof(struct img_disk_header) == IMG_HEADER_LEN, "header size");
static_assert(offsetof(struct img_disk_header, image_id) == 24, "header layout");
static_assert(offsetof(struct img_disk_header, created_ns) == 40, "header layout");
static_assert(offsetof(struct img_disk_header, crc) == 60, "header layout");
static_assert(sizeof(struct img_disk_chunk) == IMG_CHUNK_HDR_LEN, "chunk header size");
static_assert(offsetof(struct img_disk_chunk, offset) == 16, "chunk header layout");
static_assert(offsetof(struct img_disk_chunk, payload_crc) == 32, "chunk header layout");
static_assert(offsetof(struct img_disk_chunk, hdr_crc) == 44, "chunk header layout");
static_assert(sizeof(struct img_disk_footer) == IMG_FOOTER_LEN, "footer size");
static_assert(offsetof(struct img_disk_footer, manifest_crc) == 24, "footer layout");
static_assert(offsetof(struct img_disk_footer, crc) == 44, "footer layout");
static_assert(IMG_CHUNK_HDR_LEN + IMG_BITMAP_MAX <= IMG_PAGE, "writer prefix room");

/* Byte-swap in place between host order and disk order (an involution). */
static inline void fmt_header_swap(struct img_disk_header *h)
{
	h->major = htole16(h->major);
	h->minor = htole16(h->minor);
	h->header_len = htole32(h->header_len);
	h->flags = htole32(h->flags);
	h->created_ns = htole64(h->created_ns);
	h->crc = htole32(h->crc);
}

static inline void fmt_chunk_swap(struct img_disk_chunk *c)
{
	c->magic = htole32(c->magic);
	c->flags = htole32(c->flags);
	c->section = htole32(c->section);
	c->seq = htole32(c->seq);
	c->offset = htole64(c->offset);
	c->raw_len = htole32(c->raw_len);
	c->stored_len = htole32(c->stored_len);
	c->payload_crc = htole32(c->payload_crc);
	c->hdr_crc = htole32(c->hdr_crc);
}

static inline void fmt_footer_swap(struct img_disk_footer *f)
{
	f->manifest_offset = htole64(f->manifest_offset);
	f->manifest_len = htole64(f->manifest_len);
	f->manifest_crc = htole32(f->manifest_crc);
	f->section_count = htole32(f->section_count);
	f->crc = htole32(f->crc);
}

/* Pages in a chunk of raw_len bytes (the final partial page counts) and the
 * bytes of its sparse bitmap (bit i = byte i/8, bit i%8, LSB first). */
static inline uint32_t fmt_pages(uint32_t raw_len)
{
	return (raw_len + IMG_PAGE - 1) / IMG_PAGE;
}

static inline uint32_t fmt_bitmap_len(uint32_t raw_len)
{
	return (fmt_pages(raw_len) + 7) / 8;
}

#endif
