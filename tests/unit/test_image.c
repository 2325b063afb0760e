/* test_image.c - the image container: round trips, random access, parents,
 * error propagation, the size of sparse images and corruption detection.
 *
 * Every image is written to a file in a private temporary directory, read
 * back with img_open and compared byte for byte with what was written.
 */
#include "check.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "image/format.h"
#include "image/image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096

static char tmpdir[3000];

/* ---- helpers ---- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(rnd() >> 24);
}

/* Pages alternately zero and random (the benchmark's pattern). */
static void fill_half_zero(unsigned char *p, size_t len)
{
	for (size_t off = 0; off < len; off += PAGE) {
		size_t n = len - off < PAGE ? len - off : PAGE;

		if ((off / PAGE) % 2)
			memset(p + off, 0, n);
		else
			fill_random(p + off, n);
	}
}

/* Words from a small vocabulary: compresses well, has no zero pages. */
static void fill_text(unsigned char *p, size_t len)
{
	static const char *words[] = { "stasis ", "checkpoint ", "restart ", "chunk ", "rank\n" };

	for (size_t i = 0; i < len;) {
		const char *w = words[rnd() % 5];

		for (size_t k = 0; w[k] && i < len; k++)
			p[i++] = (unsigned char)w[k];
	}
}

static char *path_in_tmp(const char *name)
{
	static char buf[4][4200];
	static int next;
	char *p = buf[next++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
	return p;
}

struct file_sink {
	int fd;
	const unsigned char *lo, *hi;   /* a caller's buffer: */
	unsigned inside;                /* sink calls whose bytes came straight from it */
};

static int file_sink(void *ctx, const void *buf, size_t len)
{
	struct file_sink *f = ctx;
	const char *p = buf;

	if (len && (const unsigned char *)buf >= f->lo && (const unsigned char *)buf < f->hi)
		f->inside++;
	while (len) {
		ssize_t n = write(f->fd, p, len);

		if (n < 0)
			return err_set(-errno, "test sink: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* In-memory sink that can fail its n-th call. */
struct mem_sink {
	unsigned char *data;
	size_t len, cap;
	unsigned calls;
	unsigned fail_at;       /* 0: never */
};

static int mem_sink(void *ctx, const void *buf, size_t len)
{
	struct mem_sink *m = ctx;

	if (++m->calls == m->fail_at)
		return err_set(-ENOSPC, "test sink: disk full (call %u)", m->calls);
	if (m->len + len > m->cap) {
		size_t cap = (m->len + len) * 2;
		unsigned char *d = realloc(m->data, cap);

		if (!d)
			return -ENOMEM;
		m->data = d;
		m->cap = cap;
	}
	memcpy(m->data + m->len, buf, len);
	m->len += len;
	return 0;
}

/* The same, failing without a message. */
static int silent_sink(void *ctx, const void *buf, size_t len)
{
	int ret = mem_sink(ctx, buf, len);

	err_clear();
	return ret;
}

static void opts_init(struct img_writer_opts *o, const char *compress, unsigned threads, size_t cs)
{
	memset(o, 0, sizeof(*o));
	o->compress = compress;
	o->level = 1;
	o->threads = threads;
	o->chunk_size = cs;
}

static int file_write(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, data, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

static unsigned char *file_read(const char *path, size_t *len)
{
	struct stat st;
	unsigned char *p;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) < 0)
		return NULL;
	p = malloc((size_t)st.st_size + 1);
	if (p && read(fd, p, (size_t)st.st_size) != st.st_size) {
		free(p);
		p = NULL;
	}
	close(fd);
	*len = (size_t)st.st_size;
	return p;
}

/* An image made of src[0..at), text as its manifest and src's footer,
 * fixed to match. */
static unsigned char *with_manifest_of(const unsigned char *src, size_t src_len, uint64_t at,
				       const char *text, size_t *len)
{
	size_t mlen = strlen(text);
	unsigned char *d = malloc(at + mlen + IMG_FOOTER_LEN), *f;
	uint64_t off = htole64(at), ml = htole64(mlen);
	uint32_t crc;

	memcpy(d, src, at);
	memcpy(d + at, text, mlen);
	f = d + at + mlen;
	memcpy(f, src + src_len - IMG_FOOTER_LEN, IMG_FOOTER_LEN);
	memcpy(f + 8, &off, 8);
	memcpy(f + 16, &ml, 8);
	crc = htole32(crc32c(0, text, mlen));
	memcpy(f + 24, &crc, 4);
	crc = htole32(crc32c(0, f, 44));
	memcpy(f + 44, &crc, 4);
	*len = at + mlen + IMG_FOOTER_LEN;
	return d;
}

/* Rewrite the image at path with one top-level manifest key set to value
 * (NULL: deleted). */
static int edit_manifest(const char *path, const char *key, json_t *value)
{
	size_t len, nlen;
	unsigned char *d = file_read(path, &len), *n;
	uint64_t at;
	json_t *m;
	char *text;
	int ret;

	if (!d || len < IMG_HEADER_LEN + IMG_FOOTER_LEN) {
		free(d);
		json_decref(value);
		return -EIO;
	}
	memcpy(&at, d + len - IMG_FOOTER_LEN + 8, 8);
	at = le64toh(at);
	m = json_loadb((const char *)d + at, len - IMG_FOOTER_LEN - at, 0, NULL);
	if (value)
		json_object_set_new(m, key, value);
	else
		json_object_del(m, key);
	text = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	n = with_manifest_of(d, len, at, text, &nlen);
	ret = file_write(path, n, nlen);
	free(n);
	free(text);
	json_decref(m);
	free(d);
	return ret;
}

static void hex16(char out[33], const uint8_t id[16])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* The expected content of one section, as the test writes it. */
struct sec {
	const char *name;
	unsigned char *data;
	size_t size;
};

static json_t *manifest_json(struct img_reader *r)
{
	return json_loads(img_manifest(r), 0, NULL);
}

static long long total(struct img_reader *r, const char *key)
{
	json_t *m = manifest_json(r);
	long long v = json_integer_value(json_object_get(json_object_get(m, "totals"), key));

	json_decref(m);
	return v;
}

/* Flags of chunk j of a section, straight from the file. */
static uint32_t chunk_flags(const char *path, struct img_reader *r, unsigned s, unsigned j,
			    uint32_t *stored)
{
	struct img_section_info si;
	struct img_disk_chunk h;
	uint64_t pos;
	int fd = open(path, O_RDONLY);

	img_section_get(r, s, &si);
	pos = si.file_offset;
	for (unsigned k = 0;; k++) {
		if (pread(fd, &h, sizeof(h), (off_t)pos) != (ssize_t)sizeof(h))
			break;
		if (k == j)
			break;
		pos += IMG_CHUNK_HDR_LEN + le32toh(h.stored_len);
	}
	close(fd);
	if (stored)
		*stored = le32toh(h.stored_len);
	return le32toh(h.flags);
}

/* Compare every section whole, then at random offsets and lengths. */
static void check_content(struct img_reader *r, const struct sec *secs, unsigned n, unsigned probes)
{
	CHECK_EQ(img_section_count(r), n);
	for (unsigned i = 0; i < n; i++) {
		struct img_section_info si;
		unsigned char *got = malloc(secs[i].size + 1);
		int idx = img_section_find(r, secs[i].name);

		CHECK_EQ(idx, i);
		CHECK_EQ(img_section_get(r, i, &si), 0);
		CHECK_EQ(si.size, secs[i].size);
		CHECK(strcmp(si.name, secs[i].name) == 0);
		CHECK_EQ(img_read(r, i, 0, got, secs[i].size + 1), (ssize_t)secs[i].size);
		CHECK(secs[i].size == 0 || memcmp(got, secs[i].data, secs[i].size) == 0);
		CHECK_EQ(img_read(r, i, secs[i].size, got, 1), 0);
		for (unsigned k = 0; secs[i].size && k < probes; k++) {
			uint64_t off = rnd() % secs[i].size;
			size_t len = (size_t)(rnd() % (k % 3 ? 9000 : 300000)) + 1;
			size_t want = len < secs[i].size - off ? len : secs[i].size - off;
			ssize_t got_n = img_read(r, i, off, got, len);

			CHECK_EQ(got_n, (ssize_t)want);
			if (got_n != (ssize_t)want || memcmp(got, secs[i].data + off, want) != 0) {
				fprintf(stderr, "  section %s offset %llu len %zu: %s\n", secs[i].name,
					(unsigned long long)off, len, err_msg());
				CHECK(0);
				break;
			}
		}
		free(got);
	}
}

/* Pieces of random sizes, by img_write, filled into the writer's own
 * buffer (img_write_room, img_write_done) or as stable bytes
 * (img_write_stable, sometimes the whole rest at once): the image must be
 * the same every way. */
static int write_pieces(struct img_writer *w, const unsigned char *p, size_t len)
{
	while (len) {
		size_t n = (size_t)(rnd() % 70001) | 1, room_len;
		unsigned how = rnd() % 3;
		void *room;
		int ret;

		if (n > len || (how == 2 && rnd() % 4 == 0))
			n = len;
		if (how == 2) {
			ret = img_write_stable(w, p, n);
		} else if (how == 1) {
			ret = img_write_room(w, &room, &room_len);
			if (ret)
				return ret;
			n = n < room_len ? n : room_len;
			memcpy(room, p, n);
			ret = img_write_done(w, n);
		} else {
			ret = img_write(w, p, n);
		}
		if (ret)
			return ret;
		p += n;
		len -= n;
	}
	return 0;
}

static int open_writer(const char *path, const struct img_writer_opts *o, struct file_sink *fs,
		       struct img_writer **w)
{
	memset(fs, 0, sizeof(*fs));
	fs->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fs->fd < 0)
		return -errno;
	return img_writer_create(file_sink, fs, o, w);
}

static int close_writer(struct file_sink *fs, struct img_writer **w, uint64_t *bytes)
{
	int ret = img_writer_finish(*w, bytes);

	img_writer_free(w);
	close(fs->fd);
	return ret;
}

/* Stable bytes (img_write_stable) go to the sink from the caller's buffer
 * itself, whole chunks without a zero page only, and only when threads
 * process chunks uncompressed; the image reads back the same in any case. */
static void stable_direct(const char *compress, unsigned threads, unsigned want_inside)
{
	const char *path = path_in_tmp("stable.img");
	size_t cs = 64 << 10, size = 6 * cs + 1000;
	struct sec sec = { "data", malloc(size), size };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct img_reader *r = NULL;
	struct file_sink fs;

	fprintf(stderr, "stable compress=%s threads=%u\n", compress, threads);
	fill_random(sec.data, size);
	memset(sec.data + 4 * cs + 3 * PAGE, 0, PAGE);  /* chunk 4 has a zero page */
	memset(sec.data + 5 * cs, 0, cs);               /* chunk 5 is all zero */
	opts_init(&o, compress, threads, cs);
	CHECK_EQ(open_writer(path, &o, &fs, &w), 0);
	fs.lo = sec.data;
	fs.hi = sec.data + size;
	CHECK_EQ(img_section_begin(w, "memory", "data"), 0);
	CHECK_EQ(img_write(w, sec.data, 100), 0);       /* a chunk begun: filled by copy */
	CHECK_EQ(img_write_stable(w, sec.data + 100, cs - 100), 0);
	CHECK_EQ(img_write_stable(w, sec.data + cs, size - cs), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(close_writer(&fs, &w, NULL), 0);
	CHECK_EQ(fs.inside, want_inside);               /* chunks 1, 2, 3 */
	CHECK_EQ(img_open(path, &r), 0);
	if (r) {
		CHECK_EQ(img_verify(r), 0);
		check_content(r, &sec, 1, 20);
		CHECK_EQ(chunk_flags(path, r, 0, 4, NULL), IMG_CHUNK_SPARSE);
		CHECK_EQ(chunk_flags(path, r, 0, 5, NULL), IMG_CHUNK_ZERO);
	}
	img_close(&r);
	free(sec.data);
	unlink(path);
}

/* ---- round trips ---- */

enum { S_RANDOM, S_HALF, S_ZEROS, S_HOLE, S_EMPTY, S_TEXT, S_TINY, NSEC };

/* img_recompress's hook: flips a byte of the flip-th payload (0: none) */
struct flip {
	unsigned calls, flip;
};

static int flip_hook(void *ctx, void *payload, size_t len)
{
	struct flip *f = ctx;

	if (++f->calls == f->flip && len)
		((unsigned char *)payload)[len - 1] ^= 1;
	return 0;
}

/* The image at path (written with compress) copied by img_recompress: the
 * same image id and bytes, the compressible chunks as zstd frames, the
 * others as they were; a payload damaged as it is read stops the copy */
static void recompress(const char *path, const char *compress, const struct sec *secs)
{
	const char *zpath = path_in_tmp("rt.z.img");
	struct flip f = { 0, 0 };
	struct img_recompress_opts o = { .level = 3, .hook = flip_hook, .hook_ctx = &f };
	struct img_reader *r = NULL, *z = NULL;
	struct mem_sink ms = { 0 };
	struct file_sink fs = { open(zpath, O_WRONLY | O_CREAT | O_TRUNC, 0600), NULL, NULL, 0 };
	uint8_t id[16], zid[16];
	uint64_t bytes = 0;
	struct stat st, zst;
	json_t *m;

	CHECK_EQ(img_recompress(path, &o, file_sink, &fs, &bytes), 0);
	close(fs.fd);
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(stat(zpath, &zst), 0);
	CHECK_EQ(bytes, zst.st_size);
	CHECK_EQ(img_open(path, &r), 0);
	CHECK_EQ(img_open(zpath, &z), 0);
	if (!r || !z) {
		fprintf(stderr, "  %s\n", err_msg());
		goto out;
	}
	CHECK_EQ(img_verify(z), 0);
	check_content(z, secs, NSEC, 20);
	CHECK_EQ(img_image_id(r, id), 0);
	CHECK_EQ(img_image_id(z, zid), 0);
	CHECK(memcmp(id, zid, 16) == 0);
	CHECK_EQ(chunk_flags(zpath, z, S_TEXT, 0, NULL), IMG_CHUNK_ZSTD);
	CHECK_EQ(chunk_flags(zpath, z, S_RANDOM, 0, NULL), 0);      /* does not shrink */
	CHECK_EQ(chunk_flags(zpath, z, S_ZEROS, 0, NULL), IMG_CHUNK_ZERO);
	CHECK(chunk_flags(zpath, z, S_HALF, 0, NULL) & IMG_CHUNK_SPARSE);
	m = manifest_json(z);
	CHECK(strcmp(json_string_value(json_object_get(m, "compression")), "zstd:3") == 0);
	CHECK(strcmp(json_string_value(json_object_get(json_object_get(m, "meta"), "job")), "unit") == 0);
	json_decref(m);
	if (strcmp(compress, "none") == 0) {
		CHECK(zst.st_size < st.st_size);
		CHECK(total(z, "zstd_chunks") >= 2);
	} else {   /* nothing more shrinks */
		CHECK_EQ(zst.st_size, st.st_size);
		CHECK_EQ(total(z, "zstd_chunks"), total(r, "zstd_chunks"));
	}
	/* the second stored payload damaged on its way: refused before it is
	 * written, naming the file, the section and the chunk */
	f = (struct flip){ 0, 2 };
	err_clear();
	CHECK_EQ(img_recompress(path, &o, mem_sink, &ms, NULL), -EBADMSG);
	CHECK(strstr(err_msg(), "rt.img: section ") && strstr(err_msg(), "CRC32C mismatch"));
	CHECK(ms.len < (size_t)st.st_size);
	o.level = 0;
	CHECK_EQ(img_recompress(path, &o, mem_sink, &ms, NULL), -EINVAL);
out:
	free(ms.data);
	img_close(&r);
	img_close(&z);
	unlink(zpath);
}

/* The bytes of data fed to a scan in pieces of every size from 1 byte up
 * (as a copy reads an image being written); its img_scan_end */
static int scan_pieces(const unsigned char *data, size_t len, struct img_scan **s)
{
	size_t off = 0, piece = 1;
	int ret = img_scan_create("rt.img", s);

	while (!ret && off < len) {
		size_t n = piece < len - off ? piece : len - off;

		ret = img_scan_feed(*s, data + off, n);
		off += n;
		piece = piece * 3 + 1;
		if (piece > (1u << 20))
			piece = 47;
	}
	return ret ? ret : img_scan_end(*s);
}

/* img_scan over the image at path: every payload its manifest locates
 * seen and checked; a payload, the manifest or the footer damaged, or the
 * image cut short, refused with the place named */
static void scan(const char *path)
{
	struct img_reader *r = NULL;
	struct img_scan *s = NULL;
	const struct img_scan_payload *p;
	size_t len = 0, n, k = 0, last;
	unsigned char *data = file_read(path, &len);

	CHECK(data != NULL);
	CHECK_EQ(img_open(path, &r), 0);
	if (!data || !r)
		goto out;
	CHECK_EQ(scan_pieces(data, len, &s), 0);
	p = img_scan_payloads(s, &n);
	for (unsigned i = 0; i < img_section_count(r); i++) {
		struct img_section_info si;

		CHECK_EQ(img_section_get(r, i, &si), 0);
		for (uint32_t j = 0; j < si.chunks; j++) {
			struct img_chunk_loc loc;

			CHECK_EQ(img_chunk_locate(r, i, j, &loc), 0);
			if (!loc.stored_len)
				continue;
			CHECK(k < n && p[k].pos == loc.payload_pos && p[k].len == loc.stored_len &&
			      p[k].crc == loc.crc && p[k].section == i && p[k].chunk == j);
			k++;
		}
	}
	CHECK_EQ(k, n);
	CHECK(n > 0);
	last = n ? p[n - 1].pos + p[n - 1].len - 1 : 0;
	img_scan_free(&s);
	CHECK(s == NULL);
	for (unsigned c = 0; c < 5; c++) {
		static const char *want[] = { "rt.img: section ", "manifest checksum mismatch",
					      "footer checksum mismatch", "truncated or incomplete",
					      "rt.img: chunk header at byte 64: checksum mismatch" };
		size_t at = c == 0 ? last : c == 1 ? len - 49 : c == 2 ? len - 10 : 72;

		if (c != 3)
			data[at] ^= 0x20;
		err_clear();
		CHECK_EQ(scan_pieces(data, c == 3 ? len - 1 : len, &s), -EBADMSG);
		CHECK(strstr(err_msg(), want[c]) != NULL);
		if (!strstr(err_msg(), want[c]))
			fprintf(stderr, "  scan %u: %s\n", c, err_msg());
		if (c != 3)
			data[at] ^= 0x20;
		img_scan_free(&s);
	}
	CHECK_EQ(scan_pieces(data, len, &s), 0);   /* as it was */
out:
	img_close(&r);
	img_scan_free(&s);
	free(data);
}

static void roundtrip(const char *compress, unsigned threads, size_t cs)
{
	static const char *names[NSEC] = { "random", "halfzero", "zeros", "hole", "empty", "text", "tiny" };
	const char *path = path_in_tmp("rt.img");
	struct sec secs[NSEC];
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct img_reader *r = NULL;
	struct file_sink fs;
	size_t hole_a = 1000, hole_gap = 3 * cs + 777, hole_b = 5;
	uint64_t bytes = 0;
	struct stat st;
	uint32_t stored;

	fprintf(stderr, "roundtrip compress=%s threads=%u chunk=%zu\n", compress, threads, cs);
	secs[S_RANDOM].size = 2 * cs + 12345;
	secs[S_HALF].size = 2 * cs + 3 * PAGE + 1001;      /* a partial last page */
	secs[S_ZEROS].size = 2 * cs + 100;
	secs[S_HOLE].size = hole_a + hole_gap + hole_b;
	secs[S_EMPTY].size = 0;
	secs[S_TEXT].size = cs + 4321;
	secs[S_TINY].size = 1;
	for (int i = 0; i < NSEC; i++) {
		secs[i].name = names[i];
		secs[i].data = calloc(1, secs[i].size + 1);
	}
	fill_random(secs[S_RANDOM].data, secs[S_RANDOM].size);
	fill_half_zero(secs[S_HALF].data, secs[S_HALF].size);
	fill_random(secs[S_HOLE].data, hole_a);
	fill_random(secs[S_HOLE].data + hole_a + hole_gap, hole_b);
	fill_text(secs[S_TEXT].data, secs[S_TEXT].size);
	secs[S_TINY].data[0] = 42;

	opts_init(&o, compress, threads, cs);
	CHECK_EQ(open_writer(path, &o, &fs, &w), 0);
	CHECK_EQ(img_writer_meta(w, "job", "unit"), 0);
	for (int i = 0; i < NSEC; i++) {
		CHECK_EQ(img_section_begin(w, i == S_TEXT ? "variable" : "memory", names[i]), 0);
		CHECK_EQ(img_section_attr_u64(w, "index", (uint64_t)i), 0);
		CHECK_EQ(img_section_attr(w, "note", "a \"quoted\" value"), 0);
		if (i == S_HOLE) {
			CHECK_EQ(img_write(w, secs[i].data, hole_a), 0);
			CHECK_EQ(img_write_zero(w, hole_gap), 0);
			CHECK_EQ(img_write(w, secs[i].data + hole_a + hole_gap, hole_b), 0);
		} else {
			CHECK_EQ(write_pieces(w, secs[i].data, secs[i].size), 0);
		}
		CHECK_EQ(img_section_end(w), 0);
	}
	CHECK_EQ(close_writer(&fs, &w, &bytes), 0);
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(bytes, st.st_size);

	CHECK_EQ(img_open(path, &r), 0);
	if (!r) {
		fprintf(stderr, "  %s\n", err_msg());
		goto out;
	}
	CHECK_EQ(img_verify(r), 0);
	check_content(r, secs, NSEC, 60);
	CHECK_EQ(img_verify(r), 0);     /* again, with the tables built */

	/* Recorded, not stored: zero chunks, zero pages, the hole. */
	CHECK_EQ(chunk_flags(path, r, S_ZEROS, 0, &stored), IMG_CHUNK_ZERO);
	CHECK_EQ(stored, 0);
	CHECK_EQ(chunk_flags(path, r, S_ZEROS, 2, NULL), IMG_CHUNK_ZERO);
	CHECK_EQ(chunk_flags(path, r, S_HOLE, 1, NULL), IMG_CHUNK_ZERO);
	CHECK_EQ(chunk_flags(path, r, S_HOLE, 2, NULL), IMG_CHUNK_ZERO);
	CHECK(!(chunk_flags(path, r, S_HOLE, 3, NULL) & IMG_CHUNK_ZERO));      /* the last 5 bytes */
	CHECK(chunk_flags(path, r, S_HALF, 0, &stored) & IMG_CHUNK_SPARSE);
	CHECK(stored < cs / 2 + cs / PAGE);
	CHECK(chunk_flags(path, r, S_HALF, 2, NULL) & IMG_CHUNK_SPARSE);
	CHECK_EQ(chunk_flags(path, r, S_RANDOM, 0, &stored), 0);     /* zstd cannot shrink it */
	CHECK_EQ(stored, cs);
	if (strcmp(compress, "zstd") == 0) {
		CHECK_EQ(chunk_flags(path, r, S_TEXT, 0, NULL), IMG_CHUNK_ZSTD);
		CHECK(chunk_flags(path, r, S_HALF, 0, NULL) & IMG_CHUNK_SPARSE);
		CHECK(total(r, "zstd_chunks") >= 2);
	} else {
		CHECK_EQ(chunk_flags(path, r, S_TEXT, 0, NULL), 0);
		CHECK_EQ(total(r, "zstd_chunks"), 0);
	}
	CHECK(total(r, "zero_chunks") >= 5);
	{
		struct img_section_info si;

		CHECK_EQ(img_section_get(r, S_EMPTY, &si), 0);
		CHECK_EQ(si.chunks, 0);
		CHECK_EQ(si.stored, 0);
		CHECK_EQ(img_section_get(r, S_ZEROS, &si), 0);
		CHECK_EQ(si.stored, 0);
		CHECK_EQ(si.chunks, 3);
		CHECK(strcmp(si.kind, "memory") == 0);
		CHECK_EQ(img_section_get(r, NSEC, &si), -EINVAL);
	}
	CHECK_EQ(img_section_find(r, "nope"), -ENOENT);
	CHECK_EQ(img_read(r, NSEC, 0, &stored, 1), -EINVAL);
	{
		json_t *m = manifest_json(r);
		json_t *s0 = json_array_get(json_object_get(m, "sections"), S_TEXT);

		CHECK(m != NULL);
		CHECK(strcmp(json_string_value(json_object_get(json_object_get(m, "meta"), "job")), "unit") == 0);
		CHECK_EQ(json_integer_value(json_object_get(json_object_get(s0, "attrs"), "index")), S_TEXT);
		CHECK(strcmp(json_string_value(json_object_get(json_object_get(s0, "attrs"), "note")),
			     "a \"quoted\" value") == 0);
		CHECK(strncmp(json_string_value(json_object_get(m, "compression")), compress, 4) == 0);
		json_decref(m);
	}
	if (threads == 0) {
		recompress(path, compress, secs);
		scan(path);
	}
out:
	img_close(&r);
	CHECK(r == NULL);
	for (int i = 0; i < NSEC; i++)
		free(secs[i].data);
	unlink(path);
}

/* Small chunks, three threads, thousands of jobs: shakes out ordering bugs. */
static void many_chunks(void)
{
	const char *path = path_in_tmp("many.img");
	size_t size = 3 * 1000 * PAGE + 77;
	struct sec sec = { "data", malloc(size), size };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct img_reader *r = NULL;
	struct file_sink fs;

	for (size_t off = 0; off < size; off += PAGE) {
		size_t n = size - off < PAGE ? size - off : PAGE;

		if (rnd() % 3)
			fill_random(sec.data + off, n);
		else
			memset(sec.data + off, 0, n);
	}
	opts_init(&o, "zstd", 3, PAGE);
	CHECK_EQ(open_writer(path, &o, &fs, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "data"), 0);
	for (size_t off = 0; off < size;) {
		size_t n = (size_t)(rnd() % 9000) + 1;

		n = n < size - off ? n : size - off;
		if (rnd() % 7 == 0) {
			int zero = 1;

			for (size_t k = 0; k < n; k++)
				zero &= sec.data[off + k] == 0;
			CHECK_EQ(zero ? img_write_zero(w, n) : img_write(w, sec.data + off, n), 0);
		} else {
			CHECK_EQ(img_write(w, sec.data + off, n), 0);
		}
		off += n;
	}
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(close_writer(&fs, &w, NULL), 0);
	CHECK_EQ(img_open(path, &r), 0);
	if (r) {
		CHECK_EQ(img_verify(r), 0);
		check_content(r, &sec, 1, 200);
	}
	img_close(&r);
	free(sec.data);
	unlink(path);
}

static void many_sections(unsigned threads)
{
	const char *path = path_in_tmp("sections.img");
	enum { N = 2000 };
	struct sec *secs = calloc(N, sizeof(*secs));
	char (*names)[32] = calloc(N, 32);
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct img_reader *r = NULL;
	struct file_sink fs;

	opts_init(&o, "none", threads, 64 << 10);
	CHECK_EQ(open_writer(path, &o, &fs, &w), 0);
	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], 32, "region-%04u", i);
		secs[i].name = names[i];
		secs[i].size = rnd() % 300;
		secs[i].data = malloc(secs[i].size + 1);
		fill_random(secs[i].data, secs[i].size);
		CHECK_EQ(img_section_begin(w, "memory", names[i]), 0);
		CHECK_EQ(img_write(w, secs[i].data, secs[i].size), 0);
		CHECK_EQ(img_section_end(w), 0);
	}
	CHECK_EQ(img_section_begin(w, "memory", "region-0007"), -EEXIST);
	CHECK_EQ(close_writer(&fs, &w, NULL), 0);
	CHECK_EQ(img_open(path, &r), 0);
	if (r) {
		CHECK_EQ(img_verify(r), 0);
		check_content(r, secs, N, 1);
	}
	img_close(&r);
	for (unsigned i = 0; i < N; i++)
		free(secs[i].data);
	free(secs);
	free(names);
	unlink(path);
}

/* ---- parents (incremental images) ---- */

/* Open path; expect the open, or a verify, to fail with a message holding want. */
static void expect_unreadable(const char *what, const char *path, int code, const char *want)
{
	struct img_reader *r = NULL;
	int ret;

	err_clear();
	ret = img_open(path, &r);
	if (ret == 0)
		ret = img_verify(r);
	img_close(&r);
	if (ret == 0 || (code && ret != code) || !strstr(err_msg(), want)) {
		fprintf(stderr, "%s: ret %d, message '%s', expected %d '%s'\n", what, ret, err_msg(),
			code, want);
		CHECK(0);
	}
}

/* A parent with sections "a" and "b"; its id in id. */
static int write_parent(const char *path, unsigned threads, size_t cs, const unsigned char *a,
			size_t asize, const unsigned char *b, size_t bsize, uint8_t id[16])
{
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct file_sink fs;
	int ret;

	opts_init(&o, "zstd", threads, cs);
	ret = open_writer(path, &o, &fs, &w);
	if (ret == 0)
		ret = img_section_begin(w, "memory", "a");
	if (ret == 0)
		ret = img_write(w, a, asize);
	if (ret == 0)
		ret = img_section_end(w);
	if (ret == 0)
		ret = img_section_begin(w, "memory", "b");
	if (ret == 0)
		ret = img_write(w, b, bsize);
	if (ret == 0)
		ret = img_section_end(w);
	if (ret == 0)
		ret = img_writer_id(w, id);
	if (ret == 0)
		return close_writer(&fs, &w, NULL);
	img_writer_free(&w);
	close(fs.fd);
	return ret;
}

static void parent_child(unsigned threads)
{
	const size_t cs = 64 << 10;
	char ppath[4200], cpath[4200], lpath[4200], hex[33];
	size_t asize = 3 * cs + 999, bsize = 2 * cs;
	unsigned char *a = malloc(asize), *b = malloc(bsize), *a2 = malloc(asize), *c = malloc(5000);
	struct sec want[3] = { { "a", a2, asize }, { "b", b, bsize }, { "c", c, 5000 } };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct img_reader *r = NULL;
	struct file_sink fs;
	uint8_t pid[16], id[16];
	char buf[64];

	snprintf(ppath, sizeof(ppath), "%s", path_in_tmp("parent.img"));
	snprintf(cpath, sizeof(cpath), "%s", path_in_tmp("child.img"));
	snprintf(lpath, sizeof(lpath), "%s", path_in_tmp("legacy.img"));
	fill_random(a, asize);
	fill_half_zero(b, bsize);
	fill_random(c, 5000);
	memcpy(a2, a, asize);
	fill_random(a2 + cs, cs);       /* chunk 1 changed since the parent */

	opts_init(&o, "zstd", threads, cs);
	CHECK_EQ(open_writer(ppath, &o, &fs, &w), 0);
	CHECK_EQ(img_write_parent(w, cs), -EINVAL);     /* outside a section */
	CHECK_EQ(img_section_begin(w, "memory", "a"), 0);
	CHECK_EQ(img_write_parent(w, cs), -EINVAL);     /* no parent */
	CHECK(strstr(err_msg(), "without a parent") != NULL);
	CHECK_EQ(img_write(w, a, asize), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "b"), 0);
	CHECK_EQ(img_write(w, b, bsize), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_writer_id(w, pid), 0);
	CHECK_EQ(close_writer(&fs, &w, NULL), 0);
	hex16(hex, pid);

	/* The reader sees the id the writer chose. */
	CHECK_EQ(img_open(ppath, &r), 0);
	if (r) {
		CHECK_EQ(img_image_id(r, id), 0);
		CHECK(memcmp(id, pid, 16) == 0);
	}
	img_close(&r);

	/* A parent needs its id as well as its name, and the name must fit in
	 * the manifest (found at create, not at finish). */
	o.parent = "parent.img";
	CHECK_EQ(open_writer(cpath, &o, &fs, &w), -EINVAL);
	CHECK(strstr(err_msg(), "both its name and its id") != NULL);
	CHECK(w == NULL);
	close(fs.fd);
	o.parent = NULL;
	o.parent_id = pid;
	CHECK_EQ(open_writer(cpath, &o, &fs, &w), -EINVAL);
	close(fs.fd);
	o.parent = "parent-\xff.img";
	CHECK_EQ(open_writer(cpath, &o, &fs, &w), -EINVAL);
	CHECK(strstr(err_msg(), "not valid UTF-8") != NULL);
	close(fs.fd);

	o.parent = "parent.img";
	CHECK_EQ(open_writer(cpath, &o, &fs, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "a"), 0);
	CHECK_EQ(img_write_parent(w, cs), 0);
	CHECK_EQ(img_write(w, a2 + cs, 10), 0);
	CHECK_EQ(img_write_parent(w, cs), -EINVAL);     /* not at a chunk boundary */
	CHECK(strstr(err_msg(), "chunk boundary") != NULL);
	CHECK_EQ(img_write(w, a2 + cs + 10, cs - 10), 0);
	CHECK_EQ(img_write_parent(w, asize - 2 * cs), 0);  /* the rest, ending in a partial chunk */
	CHECK_EQ(img_write(w, a2, 1), -EINVAL);         /* nothing may follow a partial one */
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "b"), 0);
	CHECK_EQ(img_write_parent(w, bsize), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "c"), 0);
	CHECK_EQ(img_write(w, c, 5000), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(close_writer(&fs, &w, NULL), 0);

	CHECK_EQ(img_open(cpath, &r), 0);
	if (r) {
		CHECK_EQ(img_verify(r), 0);
		check_content(r, want, 3, 50);
		CHECK_EQ(chunk_flags(cpath, r, 0, 0, NULL), IMG_CHUNK_PARENT);
		CHECK_EQ(chunk_flags(cpath, r, 0, 3, NULL), IMG_CHUNK_PARENT);
		CHECK_EQ(total(r, "parent_chunks"), 5);
		{
			json_t *m = manifest_json(r);

			CHECK(strcmp(json_string_value(json_object_get(m, "parent_id")), hex) == 0);
			json_decref(m);
		}
	}
	img_close(&r);

	/* Another valid image with the same sections put in the parent's place
	 * is refused by its id, with a message naming both files; the child's
	 * own sections still read. The right parent works again. */
	CHECK_EQ(rename(ppath, path_in_tmp("parent.orig")), 0);
	CHECK_EQ(write_parent(ppath, threads, cs, a2, asize, b, bsize, id), 0);
	CHECK_EQ(img_open(cpath, &r), 0);
	if (r) {
		CHECK_EQ(img_read(r, 1, 0, buf, sizeof(buf)), -ESTALE);
		CHECK(strstr(err_msg(), "child.img: section 'b' (#1) chunk 0 at offset") != NULL);
		CHECK(strstr(err_msg(), ppath) != NULL);
		CHECK(strstr(err_msg(), hex) != NULL);
		CHECK(strstr(err_msg(), "parent replaced?") != NULL);
		CHECK_EQ(img_read(r, 2, 0, buf, sizeof(buf)), (ssize_t)sizeof(buf));
		CHECK_EQ(img_verify(r), -ESTALE);
		CHECK_EQ(img_read(r, 0, 0, buf, sizeof(buf)), -ESTALE);     /* not cached either */
	}
	img_close(&r);
	CHECK_EQ(rename(path_in_tmp("parent.orig"), ppath), 0);
	CHECK_EQ(img_open(cpath, &r), 0);
	if (r) {
		CHECK_EQ(img_verify(r), 0);
		check_content(r, want, 3, 10);
	}
	img_close(&r);

	/* An image from before "parent_id" existed (1.0 readers ignore the key)
	 * still resolves its parent, unchecked. */
	{
		size_t len;
		unsigned char *d = file_read(cpath, &len);

		CHECK_EQ(file_write(lpath, d, len), 0);
		free(d);
	}
	CHECK_EQ(edit_manifest(lpath, "parent_id", NULL), 0);
	CHECK_EQ(img_open(lpath, &r), 0);
	if (r) {
		CHECK_EQ(img_verify(r), 0);
		check_content(r, want, 3, 10);
	}
	img_close(&r);
	/* A lying "parent_id" behind a valid checksum. */
	CHECK_EQ(edit_manifest(lpath, "parent_id", json_string("0123")), 0);
	expect_unreadable("short parent_id", lpath, -EBADMSG, "'parent_id' is not 32 hex digits");
	CHECK_EQ(edit_manifest(lpath, "parent_id", json_string("0123456789ABCDEF0123456789abcdef")), 0);
	expect_unreadable("upper-case parent_id", lpath, -EBADMSG, "lowercase hex");
	CHECK_EQ(edit_manifest(lpath, "parent_id", json_integer(7)), 0);
	expect_unreadable("parent_id type", lpath, -EBADMSG, "'parent_id' is not a string");
	CHECK_EQ(edit_manifest(lpath, "parent_id", json_string("00112233445566778899aabbccddeeff")), 0);
	expect_unreadable("other parent_id", lpath, -ESTALE, "parent replaced?");
	CHECK_EQ(img_open(lpath, &r), 0);
	if (r) {
		CHECK_EQ(img_image_id(r, id), 0);
		hex16(buf, id);
		CHECK_EQ(edit_manifest(lpath, "parent_id", json_string(buf)), 0);
	}
	img_close(&r);
	expect_unreadable("own id as parent_id", lpath, -EBADMSG, "'parent_id' is the image's own id");
	CHECK_EQ(edit_manifest(lpath, "parent_id", json_string(hex)), 0);
	CHECK_EQ(edit_manifest(lpath, "parent", json_null()), 0);
	expect_unreadable("parent_id without parent", lpath, -EBADMSG, "'parent_id' without a 'parent'");
	unlink(lpath);

	/* Opened by descriptor without a name: the parent cannot be found. */
	{
		int fd = open(cpath, O_RDONLY);

		CHECK_EQ(img_open_fd(fd, NULL, &r), 0);
		if (r) {
			CHECK(img_read(r, 0, 0, buf, sizeof(buf)) < 0);
			CHECK(strstr(err_msg(), "section 'a' (#0) chunk 0 at offset 64") != NULL);
			CHECK(strstr(err_msg(), "parent.img") != NULL);
			CHECK_EQ(img_read(r, 2, 0, buf, sizeof(buf)), (ssize_t)sizeof(buf));
		}
		img_close(&r);
		close(fd);
	}

	/* The parent gone: reading a parent chunk names it, verify fails. */
	CHECK_EQ(rename(ppath, path_in_tmp("parent.moved")), 0);
	CHECK_EQ(img_open(cpath, &r), 0);
	if (r) {
		CHECK(img_read(r, 1, 0, buf, sizeof(buf)) < 0);
		CHECK(strstr(err_msg(), "section 'b' (#1) chunk 0") != NULL);
		CHECK(strstr(err_msg(), "parent image") != NULL);
		CHECK(strstr(err_msg(), "No such file") != NULL);
		CHECK(img_verify(r) < 0);
	}
	img_close(&r);
	unlink(path_in_tmp("parent.moved"));
	unlink(cpath);
	free(a);
	free(a2);
	free(b);
	free(c);
}

/* ---- errors while writing ---- */

static void sink_failure(unsigned threads)
{
	unsigned char *data = malloc(8 * PAGE * 16);
	struct mem_sink m = { .fail_at = 4 };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	char where[200];
	int ret = 0;

	fill_random(data, 8 * PAGE * 16);
	opts_init(&o, "none", threads, 8 * PAGE);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "x"), 0);
	for (int i = 0; i < 16 && ret == 0; i++)
		ret = img_write(w, data + i * 8 * PAGE, 8 * PAGE);
	if (ret == 0)
		ret = img_section_end(w);
	if (ret == 0)
		ret = img_writer_finish(w, NULL);
	CHECK_EQ(ret, -ENOSPC);
	CHECK(strstr(err_msg(), "disk full (call 4)") != NULL);
	/* ... and where: call 4 is the third chunk; inline, a chunk without
	 * zero pages goes out from the caller's buffer in two calls (header,
	 * payload), so call 4 is the second chunk's header. */
	snprintf(where, sizeof(where), "(writing section 'x' chunk %u at image offset %u)",
		 threads ? 2u : 1u, IMG_HEADER_LEN + (threads ? 2 : 1) * (IMG_CHUNK_HDR_LEN + 8 * PAGE));
	CHECK(strstr(err_msg(), where) != NULL);
	/* Sticky: every later call says the same. */
	err_clear();
	CHECK_EQ(img_write(w, data, 10), -ENOSPC);
	CHECK(strstr(err_msg(), "disk full") != NULL);
	CHECK_EQ(img_writer_finish(w, NULL), -ENOSPC);
	img_writer_free(&w);
	CHECK(w == NULL);

	/* Failing the header write fails create. */
	m.calls = 0;
	m.fail_at = 1;
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), -ENOSPC);
	CHECK(strstr(err_msg(), "disk full (call 1) (writing the image header)") != NULL);
	CHECK(w == NULL);

	/* Failing the manifest or the footer fails finish. */
	for (unsigned at = 2; at <= 3; at++) {
		m.calls = 0;
		m.fail_at = at;
		m.len = 0;
		CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
		CHECK_EQ(img_writer_finish(w, NULL), -ENOSPC);
		snprintf(where, sizeof(where), "(writing the %s at image offset %zu)",
			 at == 2 ? "manifest" : "footer", at == 2 ? (size_t)IMG_HEADER_LEN : m.len);
		CHECK(strstr(err_msg(), where) != NULL);
		img_writer_free(&w);
	}

	/* A sink that fails without a message still gets one, with the place. */
	m.calls = 0;
	m.fail_at = 3;
	m.len = 0;
	CHECK_EQ(img_writer_create(silent_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "quiet"), 0);
	ret = img_write_zero(w, 3 * 8 * PAGE);
	if (ret == 0)
		ret = img_write(w, data, 8 * PAGE);
	if (ret == 0)
		ret = img_section_end(w);
	if (ret == 0)
		ret = img_writer_finish(w, NULL);
	CHECK_EQ(ret, -ENOSPC);
	snprintf(where, sizeof(where), "No space left on device (writing section 'quiet' chunk 3 at "
		 "image offset %u)", IMG_HEADER_LEN + 3 * IMG_CHUNK_HDR_LEN);
	CHECK(strstr(err_msg(), where) != NULL);
	img_writer_free(&w);
	free(m.data);
	free(data);
}

static void fault_points(unsigned threads)
{
	unsigned char *data = malloc(4 * 65536);
	struct mem_sink m = { 0 };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	int ret;

	fill_random(data, 4 * 65536);
	opts_init(&o, "zstd", threads, 65536);
	CHECK_EQ(fault_configure("image.chunk.write:2:fail"), 0);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "x"), 0);
	ret = img_write(w, data, 4 * 65536);
	if (ret == 0)
		ret = img_section_end(w);
	if (ret == 0)
		ret = img_writer_finish(w, NULL);
	CHECK_EQ(ret, -EIO);
	CHECK(strstr(err_msg(), "image.chunk.write") != NULL);
	/* Exactly one chunk reached the sink before the fault. */
	CHECK_EQ(m.len, IMG_HEADER_LEN + IMG_CHUNK_HDR_LEN + 65536);
	img_writer_free(&w);

	/* The same point in a run of zero chunks. */
	m.len = 0;
	CHECK_EQ(fault_configure("image.chunk.write:3:fail"), 0);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "x"), 0);
	ret = img_write_zero(w, 10 * 65536);    /* fails here inline, later threaded */
	if (ret == 0)
		ret = img_section_end(w);
	if (ret == 0)
		ret = img_writer_finish(w, NULL);
	CHECK_EQ(ret, -EIO);
	CHECK_EQ(m.len, IMG_HEADER_LEN + 2 * IMG_CHUNK_HDR_LEN);
	img_writer_free(&w);

	m.len = 0;
	CHECK_EQ(fault_configure("image.finish:1:fail"), 0);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "x"), 0);
	CHECK_EQ(img_write(w, data, 65536), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_writer_finish(w, NULL), -EIO);
	CHECK(strstr(err_msg(), "image.finish") != NULL);
	img_writer_free(&w);
	CHECK_EQ(fault_configure(NULL), 0);
	free(m.data);
	free(data);
}

static void api_misuse(void)
{
	struct mem_sink m = { 0 };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	char c = 1;

	opts_init(&o, "none", 0, 1000);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), -EINVAL);
	opts_init(&o, "lz4", 0, 65536);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), -EINVAL);
	CHECK(strstr(err_msg(), "lz4") != NULL);
	opts_init(&o, "none", 1000, 65536);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), -EINVAL);
	opts_init(&o, "none", 1, 65536);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_write(w, &c, 1), -EINVAL);
	CHECK_EQ(img_section_attr(w, "k", "v"), -EINVAL);
	CHECK_EQ(img_section_begin(w, "memory", ""), -EINVAL);
	CHECK_EQ(img_section_begin(w, "memory", "\xff\xfe"), -EINVAL);
	CHECK_EQ(img_section_begin(w, "memory", "s"), 0);
	CHECK_EQ(img_section_begin(w, "memory", "t"), -EINVAL);
	CHECK_EQ(img_section_attr_u64(w, "big", UINT64_MAX), -ERANGE);
	{
		/* Refused without leaking the value (LeakSanitizer watches). */
		char *key = malloc(5000);

		memset(key, 'k', 4999);
		key[4999] = '\0';
		CHECK_EQ(img_section_attr(w, key, "v"), -EINVAL);
		CHECK_EQ(img_section_attr_u64(w, key, 1), -EINVAL);
		CHECK(strstr(err_msg(), "of section 's'") != NULL);
		free(key);
	}
	CHECK_EQ(img_writer_finish(w, NULL), -EINVAL);
	CHECK(strstr(err_msg(), "still open") != NULL);
	CHECK_EQ(img_write(w, &c, 1), 0);
	{
		void *room = NULL;
		size_t room_len = 0;

		CHECK_EQ(img_write_room(w, &room, &room_len), 0);
		CHECK_EQ(room_len, 65535);
		CHECK_EQ(img_write_done(w, room_len + 1), -EINVAL);
		CHECK(strstr(err_msg(), "65536 bytes done, more than the room given") != NULL);
		CHECK_EQ(img_write_done(w, 0), 0);
	}
	CHECK_EQ(img_section_end(w), 0);
	{
		void *room = NULL;
		size_t room_len = 0;

		CHECK_EQ(img_write_room(w, &room, &room_len), -EINVAL);
		CHECK(strstr(err_msg(), "write outside a section") != NULL);
	}
	CHECK_EQ(img_section_end(w), -EINVAL);
	CHECK_EQ(img_writer_finish(w, NULL), 0);
	CHECK_EQ(img_writer_finish(w, NULL), -EINVAL);
	CHECK_EQ(img_section_begin(w, "memory", "late"), -EINVAL);
	img_writer_free(&w);
	/* Free without finish abandons cleanly, with jobs in flight. */
	opts_init(&o, "zstd", 2, 65536);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "s"), 0);
	for (int i = 0; i < 20; i++)
		CHECK_EQ(img_write_zero(w, 70000), 0);
	img_writer_free(&w);
	img_writer_free(&w);
	free(m.data);
}

/* ---- size ---- */

static void size_overhead(size_t cs, unsigned threads)
{
	size_t size = 64u << 20;
	unsigned char *data = malloc(size);
	struct mem_sink m = { 0 };
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	uint64_t bytes = 0;
	double overhead;

	fill_half_zero(data, size);
	opts_init(&o, "none", threads, cs);
	CHECK_EQ(img_writer_create(mem_sink, &m, &o, &w), 0);
	CHECK_EQ(img_section_begin(w, "memory", "heap"), 0);
	CHECK_EQ(img_write(w, data, size), 0);
	CHECK_EQ(img_section_end(w), 0);
	CHECK_EQ(img_writer_finish(w, &bytes), 0);
	img_writer_free(&w);
	CHECK_EQ(bytes, m.len);
	overhead = (double)bytes / (double)(size / 2) - 1;
	fprintf(stderr, "half-zero 64 MiB, chunk %zu: %llu bytes, overhead %.4f%%\n", cs,
		(unsigned long long)bytes, overhead * 100);
	CHECK(overhead < 0.01);
	CHECK(overhead > 0);
	free(m.data);
	free(data);
}

/* ---- corruption ---- */

static unsigned char *good;
static size_t good_len;
static uint64_t good_manifest_at;

static const char *bad_path(void)
{
	return path_in_tmp("bad.img");
}

/* Write a damaged copy; expect img_open (or, if it opens, img_verify) to
 * refuse it with a message containing want. */
static void expect_refused(const char *what, const unsigned char *data, size_t len, const char *want)
{
	struct img_reader *r = NULL;
	int ret;

	CHECK_EQ(file_write(bad_path(), data, len), 0);
	err_clear();
	ret = img_open(bad_path(), &r);
	if (ret == 0)
		ret = img_verify(r);
	img_close(&r);
	if (ret == 0 || !strstr(err_msg(), want) || !strstr(err_msg(), "bad.img")) {
		fprintf(stderr, "corruption '%s': ret %d, message '%s', expected '%s'\n", what, ret,
			err_msg(), want);
		CHECK(0);
	}
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static void fix_header_crc(unsigned char *d)
{
	put32(d + 60, crc32c(0, d, 60));
}

static void fix_chunk_crc(unsigned char *h)
{
	put32(h + 44, crc32c(0, h, 44));
}

/* An image made of prefix[0..at), text as its manifest and a footer like
 * good's, fixed to match. */
static unsigned char *with_manifest(const unsigned char *prefix, uint64_t at, const char *text,
				    size_t *len)
{
	unsigned char *d, *src = malloc(at + IMG_FOOTER_LEN);

	memcpy(src, prefix, at);
	memcpy(src + at, good + good_len - IMG_FOOTER_LEN, IMG_FOOTER_LEN);
	d = with_manifest_of(src, at + IMG_FOOTER_LEN, at, text, len);
	free(src);
	return d;
}

/* Edit the manifest JSON: set sections[sec].key (or a top-level key if sec
 * < 0) to an integer, a string or null. */
static void expect_bad_manifest(const char *what, int sec, const char *key, json_t *value,
				const char *want)
{
	json_t *m = json_loadb((const char *)good + good_manifest_at,
			       good_len - IMG_FOOTER_LEN - good_manifest_at, 0, NULL);
	json_t *obj = sec < 0 ? m : json_array_get(json_object_get(m, "sections"), (size_t)sec);
	unsigned char *d;
	char *text;
	size_t len;

	if (value)
		json_object_set_new(obj, key, value);
	else
		json_object_del(obj, key);
	text = json_dumps(m, JSON_COMPACT);
	d = with_manifest(good, good_manifest_at, text, &len);
	expect_refused(what, d, len, want);
	free(d);
	free(text);
	json_decref(m);
}

/* sections: "random" (2.5 chunks raw), "half" (1 sparse chunk), "text"
 * (1 zstd chunk), all with 64 KiB chunks. */
static int make_good(void)
{
	const char *path = path_in_tmp("good.img");
	size_t cs = 64 << 10;
	unsigned char *buf = malloc(3 * cs);
	struct img_writer_opts o;
	struct img_writer *w = NULL;
	struct file_sink fs;
	uint64_t foff;
	int ret = 0;

	opts_init(&o, "zstd", 0, cs);
	ret |= open_writer(path, &o, &fs, &w);
	fill_random(buf, 3 * cs);
	ret |= img_section_begin(w, "memory", "random");
	ret |= img_write(w, buf, 2 * cs + cs / 2);
	ret |= img_section_end(w);
	fill_half_zero(buf, cs);
	ret |= img_section_begin(w, "memory", "half");
	ret |= img_write(w, buf, cs);
	ret |= img_section_end(w);
	fill_text(buf, cs);
	ret |= img_section_begin(w, "variable", "text");
	ret |= img_write(w, buf, cs);
	ret |= img_section_end(w);
	ret |= close_writer(&fs, &w, NULL);
	free(buf);
	good = file_read(path, &good_len);
	unlink(path);
	if (ret || !good)
		return -1;
	memcpy(&foff, good + good_len - IMG_FOOTER_LEN + 8, 8);
	good_manifest_at = le64toh(foff);
	return 0;
}

static void corruption(void)
{
	size_t cs = 64 << 10, len;
	uint64_t c0 = IMG_HEADER_LEN;                          /* random, chunk 0 */
	uint64_t c1 = c0 + IMG_CHUNK_HDR_LEN + cs;             /* random, chunk 1 */
	uint64_t half = c0 + 3 * IMG_CHUNK_HDR_LEN + 2 * cs + cs / 2;
	uint64_t text, mf;
	unsigned char *d;
	char want[256];

	CHECK_EQ(make_good(), 0);
	if (!good)
		return;
	mf = good_manifest_at;
	text = half + IMG_CHUNK_HDR_LEN + get32(good + half + 28);
	d = malloc(good_len + 100);
	CHECK_EQ(get32(good + half + 4), IMG_CHUNK_SPARSE);
	CHECK_EQ(get32(good + text + 4), IMG_CHUNK_ZSTD);

	/* The intact image passes. */
	{
		struct img_reader *r = NULL;

		CHECK_EQ(file_write(bad_path(), good, good_len), 0);
		CHECK_EQ(img_open(bad_path(), &r), 0);
		CHECK_EQ(img_verify(r), 0);
		img_close(&r);
	}

#define DAMAGE(what, off, want_msg) do { \
		memcpy(d, good, good_len); d[(off)] ^= 0x20; \
		expect_refused(what, d, good_len, want_msg); \
	} while (0)

	DAMAGE("magic", 1, "not a Stasis image (bad magic)");
	DAMAGE("header length", 12, "header checksum mismatch");
	DAMAGE("image id", 30, "header checksum mismatch");
	DAMAGE("reserved header byte", 55, "header checksum mismatch");
	snprintf(want, sizeof(want), "section 'random' (#0) chunk 0 at offset %llu: chunk header checksum",
		 (unsigned long long)c0);
	DAMAGE("chunk header", c0 + 20, want);
	snprintf(want, sizeof(want), "section 'random' (#0) chunk 1 at offset %llu: chunk header checksum",
		 (unsigned long long)c1);
	DAMAGE("second chunk header", c1 + 37, want);
	DAMAGE("chunk magic", c1 + 1, "chunk 1 at offset");
	snprintf(want, sizeof(want), "section 'random' (#0) chunk 1 at offset %llu: payload checksum mismatch",
		 (unsigned long long)c1);
	DAMAGE("payload", c1 + IMG_CHUNK_HDR_LEN + 1000, want);
	snprintf(want, sizeof(want), "section 'half' (#1) chunk 0 at offset %llu: payload checksum mismatch",
		 (unsigned long long)half);
	DAMAGE("sparse payload", half + IMG_CHUNK_HDR_LEN + 5, want);
	snprintf(want, sizeof(want), "section 'text' (#2) chunk 0 at offset %llu: payload checksum mismatch",
		 (unsigned long long)text);
	DAMAGE("zstd payload", text + IMG_CHUNK_HDR_LEN + 20, want);
	DAMAGE("manifest", mf + 10, "manifest checksum mismatch");
	DAMAGE("footer", good_len - 10, "footer checksum mismatch");
	DAMAGE("footer magic", good_len - IMG_FOOTER_LEN + 2, "truncated or incomplete image (no valid footer)");

	/* Truncated, empty, with junk appended. */
	expect_refused("truncated", good, good_len - 1, "truncated or incomplete image (no valid footer)");
	expect_refused("truncated to the chunks", good, (size_t)mf, "truncated or incomplete image");
	expect_refused("truncated in the header", good, 30, "truncated or incomplete image");
	expect_refused("empty", good, 0, "truncated or incomplete image");
	memcpy(d, good, good_len);
	memset(d + good_len, 'x', 7);
	expect_refused("junk after the footer", d, good_len + 7, "no valid footer");

	/* Version rules: another major is refused, another minor is read. */
	memcpy(d, good, good_len);
	d[8] = 2;
	expect_refused("major 2", d, good_len, "unsupported image format version 2.0 (this stasis reads 1.x)");
	memcpy(d, good, good_len);
	d[10] = 7;
	fix_header_crc(d);
	{
		struct img_reader *r = NULL;

		CHECK_EQ(file_write(bad_path(), d, good_len), 0);
		CHECK_EQ(img_open(bad_path(), &r), 0);
		CHECK(r && img_verify(r) == 0);
		img_close(&r);
	}
	memcpy(d, good, good_len);
	d[16] = 1;      /* a must-understand header flag */
	fix_header_crc(d);
	expect_refused("header flag", d, good_len, "header flags");

	/* Damage behind valid checksums: the decoders must still refuse it. */
	memcpy(d, good, good_len);
	d[half + IMG_CHUNK_HDR_LEN] ^= 0x02;                   /* a bitmap bit */
	put32(d + half + 32, crc32c(0, d + half + IMG_CHUNK_HDR_LEN, get32(d + half + 28)));
	fix_chunk_crc(d + half);
	expect_refused("sparse bitmap", d, good_len, "its bitmap says");
	memcpy(d, good, good_len);
	d[text + IMG_CHUNK_HDR_LEN + 40] ^= 0x10;              /* inside the zstd frame */
	put32(d + text + 32, crc32c(0, d + text + IMG_CHUNK_HDR_LEN, get32(d + text + 28)));
	fix_chunk_crc(d + text);
	expect_refused("zstd frame", d, good_len, "section 'text' (#2) chunk 0");
	memcpy(d, good, good_len);
	put32(d + c1 + 4, IMG_CHUNK_ZERO);                     /* flags lie */
	fix_chunk_crc(d + c1);
	expect_refused("flags", d, good_len, "impossible payload length");
	memcpy(d, good, good_len);
	put32(d + c1 + 12, 2);                                 /* sequence */
	fix_chunk_crc(d + c1);
	expect_refused("sequence", d, good_len, "out of order");
	memcpy(d, good, good_len);
	put32(d + c1 + 4, 0x40);
	fix_chunk_crc(d + c1);
	expect_refused("unknown flag", d, good_len, "unknown chunk flags");

	/* Junk between two sections: the manifest and the chunks must agree. */
	{
		json_t *m = json_loadb((const char *)good + mf, good_len - IMG_FOOTER_LEN - mf, 0, NULL);
		json_t *secs = json_object_get(m, "sections");
		json_t *tot = json_object_get(m, "totals");
		unsigned char *j = malloc(good_len + 16), *d2;
		char *mtext;

		memcpy(j, good, half);
		memset(j + half, 0xee, 16);
		memcpy(j + half + 16, good + half, mf - half);
		json_object_set_new(json_array_get(secs, 0), "stored",
				    json_integer(json_integer_value(json_object_get(json_array_get(secs, 0), "stored")) + 16));
		for (int i = 1; i <= 2; i++) {
			json_t *s = json_array_get(secs, (size_t)i);

			json_object_set_new(s, "offset", json_integer(json_integer_value(json_object_get(s, "offset")) + 16));
		}
		json_object_set_new(tot, "stored", json_integer(json_integer_value(json_object_get(tot, "stored")) + 16));
		mtext = json_dumps(m, JSON_COMPACT);
		d2 = with_manifest(j, mf + 16, mtext, &len);
		expect_refused("junk between sections", d2, len, "section 'random' (#0) chunk 2");
		free(d2);
		free(j);
		free(mtext);
		json_decref(m);
	}

	/* A valid checksum over a lying manifest. */
	expect_bad_manifest("chunk_size", -1, "chunk_size", json_integer(3000), "bad manifest: 'chunk_size'");
	expect_bad_manifest("chunk count", 0, "chunks", json_integer(4), "bad manifest: sections[0]: 'chunks'");
	expect_bad_manifest("offset", 1, "offset", json_integer(64), "sections must follow each other");
	expect_bad_manifest("size type", 1, "size", json_string("big"), "'size' is not an integer");
	expect_bad_manifest("negative", 2, "stored", json_integer(-5), "out of range");
	expect_bad_manifest("name", 2, "name", json_string("random"), "two sections are named 'random'");
	expect_bad_manifest("image id", -1, "image_id", json_string("00112233445566778899aabbccddeeff"),
			    "does not match the header");
	expect_bad_manifest("version", -1, "version", json_string("2.0"), "does not match");
	expect_bad_manifest("sections", -1, "sections", json_array(), "the sections end at offset 64");
	expect_bad_manifest("format", -1, "format", json_string("other"), "'format'");
	expect_bad_manifest("totals", -1, "totals", NULL, "'totals'");
	expect_bad_manifest("parent", -1, "parent", json_integer(1), "'parent' is not a string");
	{
		const char *texts[] = { "", "[]", "{", "null", "{\"format\":\"stasis-image\"}" };

		for (unsigned i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
			unsigned char *x = with_manifest(good, mf, texts[i], &len);

			expect_refused("manifest text", x, len, i == 0 ? "footer is inconsistent" : "bad manifest");
			free(x);
		}
	}
#undef DAMAGE
	free(d);
	free(good);
	good = NULL;
	unlink(bad_path());
}

/* ---- main ---- */

static void remove_tmpdir(void)
{
	DIR *dir = opendir(tmpdir);
	struct dirent *e;

	while (dir && (e = readdir(dir)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlink(path_in_tmp(e->d_name));
	if (dir)
		closedir(dir);
	rmdir(tmpdir);
}

int main(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/test_image.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	for (int z = 0; z < 2; z++)
		for (unsigned t = 0; t <= 2; t += 2) {
			roundtrip(z ? "zstd" : "none", t, 64 << 10);
			roundtrip(z ? "zstd" : "none", t, 4 << 20);
		}
	stable_direct("none", 2, 3);
	stable_direct("none", 0, 3);    /* inline: img_write's own direct chunks */
	stable_direct("zstd", 2, 0);
	many_chunks();
	many_sections(0);
	many_sections(2);
	parent_child(0);
	parent_child(2);
	sink_failure(0);
	sink_failure(2);
	fault_points(0);
	fault_points(2);
	api_misuse();
	size_overhead(4 << 20, 2);
	size_overhead(64 << 10, 0);
	corruption();
	remove_tmpdir();
	return check_result("test_image");
}
