/* image.h - the Stasis image container: write and read checkpoint images.
 *
 * An image is one file: a header (magic, version), a stream of chunks, a JSON
 * manifest and a footer; docs/format.md is the byte-level description. Data is
 * organised in named sections (a memory region, a protected variable, a file,
 * a thread's state, ...), each written as chunks of `chunk_size` logical bytes.
 * Every chunk carries its length, flags and a CRC32C. All-zero chunks and
 * all-zero 4 KiB pages are recorded, not stored; chunks may be compressed with
 * zstd on worker threads; a chunk may refer to the same chunk of a parent image
 * instead of carrying data (incremental checkpoints).
 *
 * Writer: producers push bytes; the writer never holds more than a few chunks
 * in memory and hands finished bytes, in file order, to a sink (a store file,
 * a socket, ...). Reader: random access to any byte range of any section, and
 * verification of every checksum.
 *
 * All functions return 0 (or a byte count) on success and a negative errno on
 * failure, with a one-line message for the user in err_msg() (common/err.h)
 * naming the file, the section and the offset where that applies.
 */
#ifndef STASIS_IMAGE_IMAGE_H
#define STASIS_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct img_writer;
struct img_reader;

/* Receives the image's bytes in order. Must consume all len bytes or return a
 * negative errno. Called from one thread at a time, not always the caller's. */
typedef int (*img_sink_fn)(void *ctx, const void *buf, size_t len);
/* The same, told the CRC-32C of the bytes (crc32c(0, buf, len)). */
typedef int (*img_sink_crc_fn)(void *ctx, const void *buf, size_t len, uint32_t crc);

struct img_writer_opts {
	const char *compress;   /* "none" or "zstd" */
	unsigned level;         /* zstd level */
	unsigned threads;       /* worker threads; 0: everything on the caller's thread */
	size_t chunk_size;      /* logical bytes per chunk, multiple of 4096 */
	const char *parent;     /* parent image, relative to this image's directory, or NULL */
	const uint8_t *parent_id; /* with parent: the parent's 16-byte image id (required) */
};

/* Incremental images. The writer never opens the parent: it streams to a
 * sink and does not know where its own file will live. The caller names the
 * parent (parent, stored as given) and vouches for which image that is
 * (parent_id, copied: from img_image_id() on the parent it compared against,
 * or img_writer_id() of the writer that wrote it). Both are recorded in the
 * manifest; a reader that resolves a PARENT chunk refuses a parent whose id
 * differs, so an image put in the parent's place is never used silently.
 * parent without parent_id, or parent_id without parent, is -EINVAL. */

/* Fill opts from the configuration registry (compress, compress_level,
 * threads, chunk_size; no parent). */
void img_writer_opts_default(struct img_writer_opts *opts);

/* in: sink, ctx, opts (copied). out: *out, freed with img_writer_free(). */
int img_writer_create(img_sink_fn sink, void *ctx, const struct img_writer_opts *opts,
		      struct img_writer **out);

/* Chunks with data go to sink_crc instead of the sink, with their CRC
 * (combined from the payload CRC their header holds): a sink that
 * checksums what it gets, as a store file does, need not read them again.
 * Call it before the first section. */
void img_writer_sink_crc(struct img_writer *w, img_sink_crc_fn sink_crc);

/* The random 16-byte id of the image being written (in its header and
 * manifest): what a child of this image passes as opts.parent_id. */
int img_writer_id(const struct img_writer *w, uint8_t id[16]);

/* A string entry of the manifest's "meta" object (job, rank, producer, ...). */
int img_writer_meta(struct img_writer *w, const char *key, const char *value);

/* Sections are written one after the other: begin, write..., end.
 * kind: "memory", "variable", "file", "thread", "fdtable", ... (free text). */
int img_section_begin(struct img_writer *w, const char *kind, const char *name);
/* Attributes of the open section, stored in its manifest entry. */
int img_section_attr(struct img_writer *w, const char *key, const char *value);
int img_section_attr_u64(struct img_writer *w, const char *key, uint64_t value);
/* Append bytes to the open section. buf is copied; it may be reused at once. */
int img_write(struct img_writer *w, const void *buf, size_t len);
/* The same, for bytes that stay as they are and mapped until
 * img_writer_finish or img_writer_free returns (a stopped program's
 * memory): whole chunks are written from buf itself, not copied. */
int img_write_stable(struct img_writer *w, const void *buf, size_t len);
/* Append bytes without a copy: img_write_room gives the free part of the
 * chunk being filled (*buf, *len >= 1 bytes; it stays valid until the next
 * call on w), the caller fills some of it (a read(2) straight into it) and
 * img_write_done appends the n <= *len bytes filled, as img_write would. */
int img_write_room(struct img_writer *w, void **buf, size_t *len);
int img_write_done(struct img_writer *w, size_t n);
/* Append len zero bytes without touching memory (a known hole). */
int img_write_zero(struct img_writer *w, size_t len);
/* Append len bytes equal to the same range of the same section in the parent
 * image. The open section must be at a chunk boundary, and len a multiple of
 * the chunk size or the rest of the section. -EINVAL otherwise or with no parent. */
int img_write_parent(struct img_writer *w, size_t len);
int img_section_end(struct img_writer *w);

/* Flush every chunk, write the manifest and the footer. *bytes (may be NULL)
 * receives the image size. The sink has then seen the whole image. */
int img_writer_finish(struct img_writer *w, uint64_t *bytes);

/* Free the writer; an unfinished image is abandoned (the sink's owner deletes
 * what it received). Sets *w to NULL. */
void img_writer_free(struct img_writer **w);

struct img_section_info {
	const char *name;
	const char *kind;
	uint64_t size;          /* logical bytes */
	uint64_t stored;        /* payload bytes in the file */
	uint64_t file_offset;   /* of its first chunk */
	uint32_t chunks;
};

/* Bytes an image starts with, and whether head (the first len bytes of a
 * file) starts with them: for code that must tell images from other files
 * (the store) without opening them. */
#define IMG_MAGIC_BYTES 8
int img_has_magic(const void *head, size_t len);

/* Open an image: checks magic, version, header, footer and manifest (but not
 * chunk payloads). A file that is not an image, has another format version,
 * is truncated or has a damaged manifest is refused with a message. */
int img_open(const char *path, struct img_reader **out);
/* The same on an open descriptor (not closed by img_close); name is used in
 * messages and to find a parent image (NULL: no parent lookup). */
int img_open_fd(int fd, const char *name, struct img_reader **out);

/* The image's 16-byte id, from its header (checked against the manifest). */
int img_image_id(const struct img_reader *r, uint8_t id[16]);

/* The manifest as stored (NUL-terminated JSON). */
const char *img_manifest(const struct img_reader *r);
unsigned img_section_count(const struct img_reader *r);
int img_section_get(const struct img_reader *r, unsigned index, struct img_section_info *out);
/* Index of the section with this name, or -ENOENT. */
int img_section_find(const struct img_reader *r, const char *name);

/* Read len bytes at offset of a section into buf, checking each chunk's CRC.
 * Returns the number of bytes read (short only at the end of the section).
 * A PARENT chunk opens the parent image on first use; a parent whose id is
 * not the one the manifest recorded is refused with -ESTALE and a message
 * naming both files. (Images written before ids were recorded carry no
 * "parent_id"; their parent is used unchecked.) */
ssize_t img_read(struct img_reader *r, unsigned section, uint64_t offset, void *buf, size_t len);
/* The whole section called name, at most max bytes, into *buf (malloc'd,
 * *len bytes). 0, -ENOENT (no such section), -EFBIG (larger than max), or
 * the error of img_read; with err_msg() naming the section. */
int img_section_load(struct img_reader *r, const char *name, size_t max, void **buf, size_t *len);

/* Where one chunk of a section lies in the file, for a consumer that reads
 * payloads itself instead of through img_read (the process restorer reads
 * raw chunks straight into place). The chunk's header is checked; its
 * payload is not: the consumer must check crc over the stored_len bytes at
 * payload_pos before it uses them. */
enum img_chunk_form {
	IMG_FORM_RAW = 1,       /* the raw_len bytes as they are (stored_len == raw_len) */
	IMG_FORM_ZERO,          /* all zero, nothing stored */
	IMG_FORM_ENCODED,       /* sparse, zstd or parent: only img_read decodes it */
};
struct img_chunk_loc {
	uint64_t offset;        /* logical offset of its first byte in the section */
	uint64_t header_pos;    /* file offset of its header (what error messages name) */
	uint64_t payload_pos;   /* file offset of its stored payload */
	uint32_t raw_len;       /* logical bytes */
	uint32_t stored_len;    /* payload bytes */
	uint32_t crc;           /* CRC32C of the payload */
	uint32_t form;          /* enum img_chunk_form */
};
/* in: chunk, an index below the section's chunk count. out: *out. */
int img_chunk_locate(struct img_reader *r, unsigned section, uint32_t chunk, struct img_chunk_loc *out);
/* The descriptor the reader reads (owned by the reader; pread only, so it
 * may be shared) and the name its messages give the file. */
int img_fd(const struct img_reader *r);
const char *img_name(const struct img_reader *r);

/* Read and check every chunk, decompressing and expanding as a restore would.
 * On the first bad one: -EBADMSG and a message naming the file, the section,
 * the chunk and its file offset. */
int img_verify(struct img_reader *r);

void img_close(struct img_reader **r);

/* An image checked as its bytes pass, in file order: for a copy of an
 * image still being written (the node agent's copy to the global tier).
 * Each checksum of the format is verified on the bytes fed: the header's,
 * each chunk header's and payload's as they pass, the manifest's and the
 * footer's at img_scan_end, which also says whether the bytes fed make a
 * whole image. Errors: -EBADMSG and a message naming name and the place
 * ("NAME: section S, chunk K (payload at byte B): CRC32C mismatch").
 * img_scan_payloads: every stored payload seen, in file order (owned by
 * the scan). */
struct img_scan;
struct img_scan_payload {
	uint64_t pos;           /* file offset of the payload */
	uint32_t len, crc;      /* stored_len, its CRC32C */
	unsigned section, chunk;
};
int img_scan_create(const char *name, struct img_scan **out);
int img_scan_feed(struct img_scan *s, const void *buf, size_t len);
int img_scan_end(struct img_scan *s);
const struct img_scan_payload *img_scan_payloads(const struct img_scan *s, size_t *n);
/* After img_scan_end, with r the same image opened (its header and
 * manifest): every chunk the manifest names is one the scan checked (its
 * header where the sections put it and agreeing with them, its payload at
 * the place, of the length and CRC32C the scan saw), and the scan saw no
 * other. The checksums alone do not say so: a manifest with a valid CRC
 * may still describe other chunks than the image holds. -EBADMSG (or the
 * reader's error) with a message naming the image and the chunk. */
int img_scan_match(const struct img_scan *s, struct img_reader *r);
void img_scan_free(struct img_scan **s);

/* A copy of the finished image at path, to sink, with its chunks
 * compressed (the node agent's compressed copy to the global tier): the
 * same image (header and id, meta, sections, attributes) where every raw
 * or sparse chunk that zstd at level makes smaller is stored as a zstd
 * frame of it; ZERO, PARENT and zstd chunks, and those zstd does not
 * shrink, stay as they are. Every chunk's payload CRC32C is checked on the
 * bytes read before anything of the chunk reaches the sink (-EBADMSG and
 * "PATH: section S, chunk K (payload at byte B): CRC32C mismatch"). hook
 * (may be NULL) sees each payload as read, before its check, and may fail
 * the copy with a negative errno (fault injection). *bytes (may be NULL):
 * the size of the copy. */
struct img_recompress_opts {
	unsigned level;         /* zstd level, 1 to ZSTD_maxCLevel() */
	int (*hook)(void *hook_ctx, void *payload, size_t len);
	void *hook_ctx;
};
int img_recompress(const char *path, const struct img_recompress_opts *opts, img_sink_fn sink,
		   void *ctx, uint64_t *bytes);
/* The same on an open descriptor (not closed; name is used in messages):
 * a caller that holds the file read locked reads that file, whatever its
 * name meanwhile names. */
int img_recompress_fd(int fd, const char *name, const struct img_recompress_opts *opts,
		      img_sink_fn sink, void *ctx, uint64_t *bytes);

#endif
