/* fuzz_image.c - libFuzzer target for the image reader and the manifest parser.
 *
 * An input that starts with the image magic is an image: it goes through
 * img_open_fd, img_verify and img_read of every section twice, once as it is
 * and once with every checksum recomputed where the structure allows, so the
 * mutations reach the decoders (zstd, sparse, chunk table, parent references)
 * instead of stopping at the first CRC. Any other input is a manifest, fed to
 * the parser and validator directly.
 *
 * An image that decodes as a process image (src/proc/decode.c) must encode
 * back, section by section, to the bytes it holds.
 *
 * The property: no crash, no leak, no hang, no sanitizer report. Refusals are
 * expected and fine.
 */
#include "common/crc32c.h"
#include "common/err.h"
#include "image/format.h"
#include "image/image.h"
#include "image/manifest.h"
#include "proc/proc.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define READ_MAX (1u << 20)

static unsigned char readbuf[READ_MAX];

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

/* Recompute the header, chunk, manifest and footer checksums in place. */
static void fix_checksums(uint8_t *d, size_t size)
{
	uint32_t hl;
	uint64_t pos;

	if (size < IMG_HEADER_LEN)
		return;
	hl = get32(d + 12);
	if (hl < IMG_HEADER_LEN || hl > IMG_HEADER_MAX || hl % 8 || hl > size)
		hl = IMG_HEADER_LEN;
	put32(d + 60, crc32c(crc32c(0, d, 60), d + IMG_HEADER_LEN, hl - IMG_HEADER_LEN));
	for (pos = hl; pos + IMG_CHUNK_HDR_LEN <= size; ) {
		uint8_t *h = d + pos;
		uint32_t stored = get32(h + 28);

		if (get32(h) != IMG_CHUNK_MAGIC)
			break;
		if (stored <= size - pos - IMG_CHUNK_HDR_LEN)
			put32(h + 32, crc32c(0, h + IMG_CHUNK_HDR_LEN, stored));
		put32(h + 44, crc32c(0, h, 44));
		pos += IMG_CHUNK_HDR_LEN + (uint64_t)stored;
	}
	if (size >= (size_t)hl + IMG_FOOTER_LEN) {
		uint8_t *f = d + size - IMG_FOOTER_LEN;
		uint64_t mo = get64(f + 8), ml = get64(f + 16);

		if (mo <= size && ml <= size && mo + ml == size - IMG_FOOTER_LEN)
			put32(f + 24, crc32c(0, d + mo, (size_t)ml));
		put32(f + 44, crc32c(0, f, 44));
	}
}

static void read_sections(struct img_reader *r, const uint8_t *seed, size_t seed_len)
{
	uint64_t h = seed_len;

	for (size_t i = 0; i < seed_len && i < 16; i++)
		h = h * 31 + seed[i];
	for (unsigned s = 0; s < img_section_count(r); s++) {
		struct img_section_info si;
		uint64_t off;

		if (img_section_get(r, s, &si))
			abort();        /* in range: must succeed */
		if (img_section_find(r, si.name) != (int)s)
			abort();        /* names are unique */
		img_read(r, s, 0, readbuf, si.size < READ_MAX ? (size_t)si.size : READ_MAX);
		if (si.size) {
			off = h % si.size;
			img_read(r, s, off, readbuf, (size_t)(h % 70000) + 1);
			img_read(r, s, si.size - 1, readbuf, 10);
		}
	}
}

/* The sections proc_image_decode decodes (a split section converted from
 * format 4 or 5 is not written back). */
static int decoded(const struct img_section_info *si, const char *json)
{
	if (!strcmp(si->name, "split"))
		return !strstr(json, "\"converted_from\"");
	return !strcmp(si->name, "process") || !strcmp(si->name, "fds") ||
	       !strcmp(si->kind, "thread") ||
	       (!strcmp(si->kind, "file") && !strncmp(si->name, "fd.", 3));
}

/* A process image decodes to JSON that encodes back to every section's
 * bytes: decoding loses nothing. */
static void decode_round_trip(struct img_reader *r)
{
	char *json = NULL;

	if (proc_image_decode(r, &json))
		return;
	for (unsigned s = 0; s < img_section_count(r); s++) {
		struct img_section_info si;
		void *buf = NULL;
		size_t len = 0;

		if (img_section_get(r, s, &si))
			abort();
		if (!decoded(&si, json) || si.size > READ_MAX)
			continue;
		if (img_read(r, s, 0, readbuf, (size_t)si.size) != (ssize_t)si.size)
			abort();        /* it was read to be decoded */
		if (proc_image_encode(json, si.name, &buf, &len) || len != si.size ||
		    memcmp(buf, readbuf, len))
			abort();
		free(buf);
	}
	free(json);
}

static void fuzz_image(int fd, const uint8_t *data, size_t size)
{
	struct img_reader *r = NULL;

	if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	if (img_open_fd(fd, NULL, &r))
		return;
	if (!img_manifest(r))
		abort();
	img_verify(r);
	read_sections(r, data, size);
	img_verify(r);          /* again, with the chunk tables built */
	decode_round_trip(r);
	img_close(&r);
}

/* Where the chunks would end by the manifest's own account, so a manifest
 * cut out of a real image can pass the final extent check. */
static uint64_t guess_end(const uint8_t *data, size_t size)
{
	json_t *root = json_loadb((const char *)data, size, 0, NULL);
	json_t *secs = json_object_get(root, "sections");
	json_t *last = json_array_get(secs, json_array_size(secs) - 1);
	json_int_t off = json_integer_value(json_object_get(last, "offset"));
	json_int_t chunks = json_integer_value(json_object_get(last, "chunks"));
	json_int_t stored = json_integer_value(json_object_get(last, "stored"));
	uint64_t end = IMG_HEADER_LEN;

	if (last && off >= 0 && chunks >= 0 && stored >= 0 && off < (1ll << 50) &&
	    chunks < (1ll << 32) && stored < (1ll << 50))
		end = (uint64_t)off + (uint64_t)chunks * IMG_CHUNK_HDR_LEN + (uint64_t)stored;
	json_decref(root);
	return end;
}

static void fuzz_manifest(const uint8_t *data, size_t size)
{
	struct img_manifest_frame frame = {
		.name = "fuzz", .data_start = IMG_HEADER_LEN, .major = IMG_MAJOR,
	};
	struct img_manifest *m = NULL;

	frame.data_end = guess_end(data, size);
	if (img_manifest_parse((const char *)data, size, &frame, &m) == 0) {
		for (unsigned i = 0; i < m->nsec; i++)
			if (!m->sec[i].name || m->sec[i].offset + m->sec[i].stored > frame.data_end)
				abort();
		img_manifest_free(&m);
	}
	if (m)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	uint8_t *copy;

	if (size < IMG_MAGIC_LEN || memcmp(data, IMG_MAGIC, IMG_MAGIC_LEN) != 0) {
		fuzz_manifest(data, size);
		return 0;
	}
	if (fd < 0)
		fd = memfd_create("fuzz_image", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	fuzz_image(fd, data, size);
	copy = malloc(size);
	if (!copy)
		abort();
	memcpy(copy, data, size);
	fix_checksums(copy, size);
	fuzz_image(fd, copy, size);
	free(copy);
	return 0;
}
