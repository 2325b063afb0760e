/* manifest.h - the JSON manifest of an image: build it, parse and validate it.
 *
 * Private to src/image (the writer, the reader and the fuzz target). The
 * parser trusts nothing: everything the reader later relies on (types,
 * ranges, section offsets inside the data area, sections contiguous and in
 * order, chunk counts consistent with size and chunk size) is checked here,
 * so the reader can index and allocate from the result without re-checking.
 */
#ifndef STASIS_IMAGE_MANIFEST_H
#define STASIS_IMAGE_MANIFEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct img_manifest_section {
	char *name;
	char *kind;
	uint64_t size;          /* logical bytes */
	uint64_t stored;        /* payload bytes (chunk headers excluded) */
	uint64_t offset;        /* file offset of the first chunk header */
	uint32_t chunks;
};

struct img_manifest {
	unsigned major, minor;  /* from "version" */
	uint32_t chunk_size;
	char *parent;           /* NULL: no parent */
	int has_parent_id;      /* "parent_id" present (it is optional in 1.0) */
	uint8_t parent_id[16];
	unsigned nsec;
	struct img_manifest_section *sec;
};

/* Where the manifest sits: the chunks must exactly fill [data_start,
 * data_end); image_id (NULL: not checked) must match "image_id"; major must
 * match "version". name prefixes messages. */
struct img_manifest_frame {
	const char *name;
	uint64_t data_start;
	uint64_t data_end;
	const uint8_t *image_id;
	unsigned major;
};

/* Parse and validate len bytes of JSON. -EBADMSG with a message
 * "NAME: bad manifest: ..." on any problem. out: *out (img_manifest_free). */
int img_manifest_parse(const char *text, size_t len, const struct img_manifest_frame *frame,
		       struct img_manifest **out);
void img_manifest_free(struct img_manifest **m);

/* What the writer knows at the end; attrs and meta are borrowed. */
struct img_manifest_out_section {
	const char *name;
	const char *kind;
	json_t *attrs;
	uint64_t size, stored, offset;
	uint32_t chunks;
};

struct img_manifest_out {
	const uint8_t *image_id;
	int64_t created_ns;
	uint32_t chunk_size;
	const char *compression;        /* "none" or "zstd:<level>" */
	const char *parent;
	const uint8_t *parent_id;       /* 16 bytes when parent is set */
	json_t *meta;
	unsigned nsec;
	const struct img_manifest_out_section *sec;
	uint64_t zero_chunks, sparse_chunks, zstd_chunks, parent_chunks;
};

/* Serialise to JSON (malloc'd, NUL-terminated, *len without the NUL). */
int img_manifest_dump(const struct img_manifest_out *in, char **text, size_t *len);

#endif
