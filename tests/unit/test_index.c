/* test_index.c - the job index: record format, torn and damaged records,
 * concurrent appenders, state derivation, its fault points. */
#include "check.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "store/index.h"
#include "store/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[PATH_MAX / 2];
static const struct store_tier_ops *ops;

static void make_dir(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/test_index.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(2);
	}
}

static void remove_dir(void)
{
	ops->remove_tree(dir);
}

static void index_at(struct index *ix, const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	CHECK_EQ(index_init(ix, ops, path), 0);
}

static struct index_record rec(enum index_op op, const char *ckpt)
{
	struct index_record r;

	memset(&r, 0, sizeof(r));
	r.op = op;
	r.time = 1700000000;
	snprintf(r.ckpt, sizeof(r.ckpt), "%s", ckpt);
	return r;
}

static struct index_record file_rec(const char *ckpt, const char *name, uint64_t size, uint32_t crc)
{
	struct index_record r = rec(INDEX_FILE, ckpt);

	snprintf(r.name, sizeof(r.name), "%s", name);
	r.size = size;
	r.crc = crc;
	return r;
}

static struct index_record complete_rec(const char *ckpt, unsigned files, uint64_t bytes)
{
	struct index_record r = rec(INDEX_COMPLETE, ckpt);

	r.files = files;
	r.bytes = bytes;
	return r;
}

static struct index_record failed_rec(const char *ckpt, const char *reason)
{
	struct index_record r = rec(INDEX_FAILED, ckpt);

	snprintf(r.reason, sizeof(r.reason), "%s", reason);
	return r;
}

static int same_record(const struct index_record *a, const struct index_record *b)
{
	return a->op == b->op && strcmp(a->ckpt, b->ckpt) == 0 && a->time == b->time &&
	       strcmp(a->name, b->name) == 0 && a->size == b->size && a->crc == b->crc &&
	       a->image == b->image &&
	       a->files == b->files && a->bytes == b->bytes && strcmp(a->reason, b->reason) == 0;
}

struct collected {
	struct index_record r[1024];
	uint64_t off[1024];
	unsigned n;
};

static int collect(void *ctx, const struct index_record *r, uint64_t offset)
{
	struct collected *c = ctx;

	if (c->n < 1024) {
		c->r[c->n] = *r;
		c->off[c->n] = offset;
	}
	c->n++;
	return 0;
}

static size_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

static char *slurp(const char *path, size_t *len)
{
	size_t n = file_size(path);
	char *buf = malloc(n + 1);
	int fd = open(path, O_RDONLY);

	if (!buf || fd < 0 || read(fd, buf, n) != (ssize_t)n) {
		perror(path);
		exit(2);
	}
	close(fd);
	*len = n;
	return buf;
}

static void spit(const char *path, const char *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, buf, len) != (ssize_t)len) {
		perror(path);
		exit(2);
	}
	close(fd);
}

/* ---- format ---- */

static void test_encode_decode(void)
{
	struct index_record in[] = {
		rec(INDEX_BEGIN, "ckpt-000001"),
		file_rec("ckpt-000001", "rank-0.img", 123456789012ULL, 0xe3069283),
		file_rec("ckpt-000001", "we\"ird \\name", 0, 0),
		file_rec("ckpt-000001", "rank-1.img", 4096, 0xffffffff),   /* made an image below */
		complete_rec("ckpt-000001", 2, 123456789012ULL),
		failed_rec("ckpt-000002", "rank 3: write failed: No space left on device"),
		rec(INDEX_PRUNED, "ckpt-000001"),
	};
	char line[INDEX_MAX_LINE];
	struct index_record out;
	size_t len;

	in[3].image = 1;
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		CHECK_EQ(index_encode(&in[i], line, sizeof(line), &len), 0);
		CHECK(len > 2 && line[len - 1] == '\n');
		CHECK(memchr(line, '\n', len - 1) == NULL);
		CHECK_EQ(index_decode(line, len - 1, &out, NULL), 0);
		CHECK(same_record(&in[i], &out));
	}
	/* The exact line of a known record: the format is a contract. */
	CHECK_EQ(index_encode(&in[0], line, sizeof(line), &len), 0);
	line[len] = '\0';
	CHECK(strncmp(line, "R 53 ", 5) == 0);
	CHECK(strstr(line, " {\"op\":\"BEGIN\",\"ckpt\":\"ckpt-000001\",\"time\":1700000000}\n") != NULL);
	CHECK_EQ(strlen("{\"op\":\"BEGIN\",\"ckpt\":\"ckpt-000001\",\"time\":1700000000}"), 53);
}

static void check_rejected(const char *line, const char *what)
{
	struct index_record out;
	const char *why = NULL;

	if (index_decode(line, strlen(line), &out, &why) != -EBADMSG)
		fprintf(stderr, "accepted %s: %s\n", what, line);
	CHECK(why != NULL);
	CHECK_EQ(index_decode(line, strlen(line), &out, &why), -EBADMSG);
}

/* A record line with a correct length and CRC around arbitrary JSON. */
static void framed(const char *json, char *line, size_t size)
{
	snprintf(line, size, "R %zu %08x %s", strlen(json), crc32c(0, json, strlen(json)), json);
}

static void test_decode_rejects(void)
{
	struct index_record r = file_rec("ckpt-000001", "a", 5, 7);
	char line[INDEX_MAX_LINE], bad[2 * INDEX_MAX_LINE];
	size_t len;

	CHECK_EQ(index_encode(&r, line, sizeof(line), &len), 0);
	line[--len] = '\0';
	check_rejected("", "empty line");
	check_rejected("X 2 00000000 {}", "bad prefix");
	snprintf(bad, sizeof(bad), "%s ", line);
	check_rejected(bad, "trailing byte");
	snprintf(bad, sizeof(bad), "R 0%s", line + 2);
	check_rejected(bad, "leading zero in length");
	memcpy(bad, line, len + 1);
	bad[len - 1] = 'x';
	check_rejected(bad, "payload changed");
	memcpy(bad, line, len + 1);
	bad[len - 5]++;
	check_rejected(bad, "payload changed");
	memcpy(bad, line, len + 1);
	bad[strchr(line + 2, ' ') - line + 1] ^= 1;
	check_rejected(bad, "checksum changed");
	framed("{\"op\":\"FILE\",\"ckpt\":\"c\",\"time\":1,\"name\":\"a\",\"size\":1}", bad, sizeof(bad));
	check_rejected(bad, "FILE without crc");
	framed("{\"op\":\"FILE\",\"ckpt\":\"c\",\"time\":1,\"name\":\"a\",\"size\":-1,\"crc\":\"00000000\"}", bad, sizeof(bad));
	check_rejected(bad, "negative size");
	framed("{\"op\":\"BEGIN\",\"ckpt\":\"c\",\"time\":1,\"time\":2}", bad, sizeof(bad));
	check_rejected(bad, "duplicate key");
	framed("{\"op\":\"RESUME\",\"ckpt\":\"c\",\"time\":1}", bad, sizeof(bad));
	check_rejected(bad, "unknown op");
	framed("{\"op\":\"BEGIN\",\"ckpt\":\"\",\"time\":1}", bad, sizeof(bad));
	check_rejected(bad, "empty ckpt");
	framed("[1,2]", bad, sizeof(bad));
	check_rejected(bad, "not an object");
	framed("{\"op\":\"BEGIN\",\"ckpt\":\"c\",\"time\":1", bad, sizeof(bad));
	check_rejected(bad, "broken JSON");
	framed("{\"op\":\"COMPLETE\",\"ckpt\":\"c\",\"time\":1,\"files\":\"2\",\"bytes\":3}", bad, sizeof(bad));
	check_rejected(bad, "files as a string");
	/* And the framing helper itself produces lines that do decode. */
	framed("{\"op\":\"BEGIN\",\"ckpt\":\"c\",\"time\":1}", bad, sizeof(bad));
	CHECK_EQ(index_decode(bad, strlen(bad), &r, NULL), 0);
}

/* FILES records (index_encode_files): the encoder's spelling and
 * jansson's read alike, as FILE records; a damaged one is refused, other
 * lines are left to index_decode. */
static void test_files_records(void)
{
	struct index_record in[3], out[INDEX_FILES_MAX];
	char line[INDEX_MAX_LINE];
	const char *why = NULL;
	unsigned n = 0;
	size_t len;

	in[0] = file_rec("ckpt-000003", "rank-00000.img", 512, 0x89abcdef);
	in[0].image = 1;
	in[1] = file_rec("ckpt-000003", "rank-00001.img", 0, 0);
	in[2] = file_rec("ckpt-000003", "r\xc3\xa9sum\xc3\xa9", 77, 1);  /* UTF-8: jansson */
	for (int i = 0; i < 3; i++)
		in[i].time = 1700000000;
	CHECK_EQ(index_encode_files(in, 3, line, sizeof(line), &len), 0);
	CHECK_EQ(index_decode_files(line, len - 1, out, INDEX_FILES_MAX, &n, &why), 0);
	CHECK_EQ(n, 3);
	for (unsigned i = 0; i < n && i < 3; i++)
		CHECK(out[i].op == INDEX_FILE && !strcmp(out[i].ckpt, "ckpt-000003") &&
		      out[i].time == 1700000000 && !strcmp(out[i].name, in[i].name) &&
		      out[i].size == in[i].size && out[i].crc == in[i].crc && out[i].image == in[i].image);
	/* more than fit the list */
	CHECK_EQ(index_decode_files(line, len - 1, out, 2, &n, &why), -EBADMSG);
	/* another spelling after the op */
	framed("{\"op\":\"FILES\",\"time\":5,\"ckpt\":\"c\",\"files\":[ [\"a\", 1, \"0000000a\", false] ]}",
	       line, sizeof(line));
	CHECK_EQ(index_decode_files(line, strlen(line), out, INDEX_FILES_MAX, &n, &why), 0);
	CHECK(n == 1 && !strcmp(out[0].name, "a") && out[0].size == 1 && out[0].crc == 10 &&
	      !out[0].image && out[0].time == 5);
	framed("{\"op\":\"FILES\",\"ckpt\":\"c\",\"time\":5,\"files\":[[\"a\",1,\"0000000a\"]]}",
	       line, sizeof(line));
	CHECK_EQ(index_decode_files(line, strlen(line), out, INDEX_FILES_MAX, &n, &why), -EBADMSG);
	framed("{\"op\":\"FILES\",\"ckpt\":\"c\",\"time\":5,\"files\":[]}", line, sizeof(line));
	CHECK_EQ(index_decode_files(line, strlen(line), out, INDEX_FILES_MAX, &n, &why), -EBADMSG);
	framed("{\"op\":\"BEGIN\",\"ckpt\":\"c\",\"time\":1}", line, sizeof(line));
	CHECK_EQ(index_decode_files(line, strlen(line), out, INDEX_FILES_MAX, &n, &why), -ENOMSG);
}

/* FILE and ANNEX lines as index_encode writes them skip jansson
 * (decode_file_fast): every other spelling of the same record must decode
 * to the same fields, and what jansson refuses stays refused. */
static void test_file_fast_path(void)
{
	static const char *const same[] = {
		/* the encoder's own spelling: the fast path */
		"{\"op\":\"FILE\",\"ckpt\":\"ckpt-000007\",\"time\":-3,\"name\":\"rank-00042.img\","
		"\"size\":123456789012345,\"crc\":\"0a1b2c3d\",\"image\":true}",
		/* jansson's: blanks, another key order, an escaped character */
		"{\"op\": \"FILE\",\"ckpt\":\"ckpt-000007\",\"time\":-3,\"name\":\"rank-00042.img\","
		"\"size\":123456789012345,\"crc\":\"0a1b2c3d\",\"image\":true}",
		"{\"ckpt\":\"ckpt-000007\",\"op\":\"FILE\",\"time\":-3,\"name\":\"rank-00042.img\","
		"\"size\":123456789012345,\"crc\":\"0a1b2c3d\",\"image\":true}",
		"{\"op\":\"FILE\",\"ckpt\":\"ckpt-000007\",\"time\":-3,\"name\":\"rank-00042\\u002eimg\","
		"\"size\":123456789012345,\"crc\":\"0a1b2c3d\",\"image\":true} ",
	};
	struct index_record want = file_rec("ckpt-000007", "rank-00042.img", 123456789012345ULL,
					    0x0a1b2c3d), got;
	struct index_record in[] = {
		file_rec("c", "a", 0, 0),
		file_rec("ckpt-000001", "r\xc3\xa9sum\xc3\xa9.img", 1, 2),   /* UTF-8: jansson */
		file_rec("ckpt-000001", "tab\there", 1, 2),                 /* escaped: jansson */
		file_rec("ckpt-000001", "a/b c~", UINT64_C(999999999999999999), 0xffffffff),
		file_rec("ckpt-000001", "big", (uint64_t)INT64_MAX, 1),    /* 19 digits: jansson */
	};
#define FILE_JSON(time, name, size, crc, more) \
	"{\"op\":\"FILE\",\"ckpt\":\"c\",\"time\":" time ",\"name\":\"" name "\",\"size\":" size \
	",\"crc\":\"" crc "\"" more "}"
	static const struct {
		const char *json, *what;
	} refused[] = {
		{ FILE_JSON("1", "a", "01", "00000000", ""), "a leading zero" },
		{ FILE_JSON("1.5", "a", "1", "00000000", ""), "a time that is not an integer" },
		{ FILE_JSON("1", "a", "1", "0000000A", ""), "an upper-case crc" },
		{ FILE_JSON("1", "a", "1", "00000000", ",\"image\":false"), "image false" },
		{ FILE_JSON("1", "", "1", "00000000", ""), "an empty name" },
		{ FILE_JSON("1", "a", "1", "00000000", "}"), "a byte after the object" },
	};
#undef FILE_JSON
	char line[INDEX_MAX_LINE], name[300];
	size_t len;

	want.time = -3;
	want.image = 1;
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		framed(same[i], line, sizeof(line));
		CHECK_EQ(index_decode(line, strlen(line), &got, NULL), 0);
		CHECK(same_record(&want, &got));
	}
	in[0].op = INDEX_ANNEX;
	in[3].time = 0;
	memset(name, 'n', 255);
	name[255] = '\0';
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		CHECK_EQ(index_encode(&in[i], line, sizeof(line), &len), 0);
		CHECK_EQ(index_decode(line, len - 1, &got, NULL), 0);
		CHECK(same_record(&in[i], &got));
	}
	/* the longest name and checkpoint name there is room for */
	memcpy(in[0].name, name, sizeof(in[0].name));
	memset(in[0].ckpt, 'c', 63);
	in[0].ckpt[63] = '\0';
	CHECK_EQ(index_encode(&in[0], line, sizeof(line), &len), 0);
	CHECK_EQ(index_decode(line, len - 1, &got, NULL), 0);
	CHECK(same_record(&in[0], &got));

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		framed(refused[i].json, line, sizeof(line));
		check_rejected(line, refused[i].what);
	}
	snprintf(name, sizeof(name), "{\"op\":\"FILE\",\"ckpt\":\"%064d\",\"time\":1,\"name\":\"a\","
		 "\"size\":1,\"crc\":\"00000000\"}", 0);
	framed(name, line, sizeof(line));
	check_rejected(line, "a checkpoint name of 64 bytes");
}

static void test_round_trip(void)
{
	struct index_record in[] = {
		rec(INDEX_BEGIN, "ckpt-000001"),
		file_rec("ckpt-000001", "rank-0.img", 100, 0x11111111),
		file_rec("ckpt-000001", "rank-1.img", 200, 0x22222222),
		complete_rec("ckpt-000001", 2, 300),
		rec(INDEX_BEGIN, "ckpt-000002"),
		failed_rec("ckpt-000002", "rank 1 died"),
	};
	struct index_scan_stats st;
	struct collected *got = calloc(1, sizeof(*got));
	struct index ix;
	size_t len;
	char *buf;

	index_at(&ix, "roundtrip");
	CHECK_EQ(index_create(&ix), 0);
	CHECK_EQ(index_create(&ix), 0);   /* idempotent */
	buf = slurp(ix.path, &len);
	CHECK_EQ(len, strlen(INDEX_HEADER));
	CHECK(memcmp(buf, INDEX_HEADER, len) == 0);
	free(buf);
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
		CHECK_EQ(index_append(&ix, &in[i]), 0);
	CHECK_EQ(index_scan(&ix, collect, got, &st), 0);
	CHECK_EQ(got->n, 6);
	CHECK_EQ(st.records, 6);
	CHECK_EQ(st.bad, 0);
	CHECK_EQ(st.size, file_size(ix.path));
	CHECK_EQ(got->off[0], strlen(INDEX_HEADER));
	for (unsigned i = 0; i < got->n && i < 6; i++)
		CHECK(same_record(&in[i], &got->r[i]));
	index_destroy(&ix);
	free(got);
}

/* ---- headers ---- */

static void test_headers(void)
{
	struct index_scan_stats st;
	struct index ix;
	struct index_record r = rec(INDEX_BEGIN, "ckpt-000001");

	index_at(&ix, "headers");
	spit(ix.path, "", 0);
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), 0);      /* being created */
	CHECK_EQ(st.records, 0);
	spit(ix.path, "STASIS-IN", 9);
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), 0);      /* header torn by a crash */
	CHECK_EQ(index_append(&ix, &r), 0);                  /* completes it */
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), 0);
	CHECK_EQ(st.records, 1);
	CHECK_EQ(st.bad, 0);

	spit(ix.path, "hello world\n", 12);
	err_clear();
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), -EBADMSG);
	CHECK(strstr(err_msg(), ix.path) && strstr(err_msg(), "not a Stasis index"));
	CHECK_EQ(index_append(&ix, &r), -EBADMSG);          /* never appends to a stranger */
	CHECK_EQ(file_size(ix.path), 12);

	spit(ix.path, "STASIS-INDEX 2\n", 15);
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), -EPROTONOSUPPORT);
	CHECK(strstr(err_msg(), "STASIS-INDEX 2") != NULL);
	index_destroy(&ix);
}

/* ---- crashes and damage ---- */

static void derive(struct index *ix, struct index_view *v)
{
	CHECK_EQ(index_view_load(ix, v), 0);
}

static enum store_state state_of(const struct index_view *v, const char *name)
{
	struct index_ckpt *c = index_view_find(v, name);

	return c ? c->info.state : (enum store_state)-1;
}

/* Cut the last record at every byte: the state before it must survive, the
 * torn record must never count, not even once a later append closes its line. */
static void test_torn_last_record(void)
{
	struct index_record prev[] = {
		rec(INDEX_BEGIN, "ckpt-000001"),
		file_rec("ckpt-000001", "rank-0.img", 10, 1),
		complete_rec("ckpt-000001", 1, 10),
		rec(INDEX_BEGIN, "ckpt-000002"),
		file_rec("ckpt-000002", "rank-0.img", 20, 2),
	};
	struct index_record last = complete_rec("ckpt-000002", 1, 20);
	struct index_record later = rec(INDEX_BEGIN, "ckpt-000003");
	struct index ix;
	char *full;
	size_t full_len, start;

	index_at(&ix, "torn");
	CHECK_EQ(index_create(&ix), 0);
	for (size_t i = 0; i < sizeof(prev) / sizeof(prev[0]); i++)
		CHECK_EQ(index_append(&ix, &prev[i]), 0);
	start = file_size(ix.path);
	CHECK_EQ(index_append(&ix, &last), 0);
	full = slurp(ix.path, &full_len);

	int failures = check_failures;

	for (size_t cut = start; cut < full_len; cut++) {
		struct index_view v;
		struct collected *got = calloc(1, sizeof(*got));
		struct index_scan_stats st;
		unsigned torn = cut > start;

		spit(ix.path, full, cut);
		derive(&ix, &v);
		CHECK_EQ(v.stats.records, 5);
		CHECK_EQ(v.stats.torn, torn);
		CHECK_EQ(v.stats.bad, 0);
		CHECK_EQ(state_of(&v, "ckpt-000001"), STORE_COMPLETE);
		CHECK_EQ(state_of(&v, "ckpt-000002"), STORE_PARTIAL);
		CHECK_EQ(index_view_find(&v, "ckpt-000002")->nfiles, 1);
		index_view_free(&v);

		CHECK_EQ(index_append(&ix, &later), 0);
		CHECK_EQ(index_scan(&ix, collect, got, &st), 0);
		CHECK_EQ(st.records, 6);
		CHECK_EQ(st.torn, torn);        /* sealed off: still torn, not damage */
		CHECK_EQ(st.bad, 0);
		CHECK(got->n == 6 && same_record(&got->r[5], &later));
		derive(&ix, &v);
		CHECK_EQ(state_of(&v, "ckpt-000002"), STORE_PARTIAL);
		CHECK_EQ(state_of(&v, "ckpt-000003"), STORE_PARTIAL);
		index_view_free(&v);
		free(got);
		if (check_failures != failures) {
			fprintf(stderr, "  (cut at byte %zu of %zu)\n", cut, full_len);
			break;
		}
	}
	free(full);
	index_destroy(&ix);
}

/* Flip each byte of a middle record in turn: that record is skipped and
 * counted, every other one read. */
static void test_flipped_middle_record(void)
{
	struct index ix;
	struct collected *got = calloc(1, sizeof(*got));
	struct index_scan_stats st;
	size_t len, start = 0, end;
	char *orig, *copy;

	index_at(&ix, "flip");
	CHECK_EQ(index_create(&ix), 0);
	for (unsigned i = 1; i <= 3; i++) {
		struct index_record r = rec(INDEX_BEGIN, "ckpt-000000");

		snprintf(r.ckpt, sizeof(r.ckpt), "ckpt-%06u", i);
		CHECK_EQ(index_append(&ix, &r), 0);
		if (i == 1)
			start = file_size(ix.path);
	}
	orig = slurp(ix.path, &len);
	end = (size_t)((char *)memchr(orig + start, '\n', len - start) - orig);
	copy = malloc(len);
	int failures = check_failures;

	for (size_t at = start; at < end; at++) {
		memcpy(copy, orig, len);
		copy[at] ^= 0x20;
		spit(ix.path, copy, len);
		got->n = 0;
		CHECK_EQ(index_scan(&ix, collect, got, &st), 0);
		CHECK_EQ(st.bad, 1);
		CHECK_EQ(st.torn, 0);
		CHECK_EQ(st.first_bad, start);
		CHECK_EQ(got->n, 2);
		CHECK(got->n == 2 && strcmp(got->r[0].ckpt, "ckpt-000001") == 0 &&
		      strcmp(got->r[1].ckpt, "ckpt-000003") == 0);
		if (check_failures != failures) {
			fprintf(stderr, "  (flipped byte %zu)\n", at);
			break;
		}
	}
	/* A damaged end of line joins the record to the next one: both are
	 * lost, the ones around them are still read. */
	memcpy(copy, orig, len);
	copy[end] = 'x';
	spit(ix.path, copy, len);
	got->n = 0;
	CHECK_EQ(index_scan(&ix, collect, got, &st), 0);
	CHECK_EQ(st.bad, 1);
	CHECK_EQ(got->n, 1);
	free(copy);
	free(orig);
	free(got);
	index_destroy(&ix);
}

/* Torn (what a crash leaves, sealed or not) is told apart from damage, and
 * each skipped record is logged once per handle, at the right level. */
static void test_torn_or_damaged(void)
{
	struct index_record a = rec(INDEX_BEGIN, "ckpt-000001");
	struct index_record b = rec(INDEX_BEGIN, "ckpt-000002");
	char path[PATH_MAX], line[PATH_MAX + 256];
	struct index_scan_stats st;
	struct index ix;
	int saved, fd, failures = check_failures;
	size_t len, size;
	char *log;

	index_at(&ix, "kinds");
	CHECK_EQ(index_create(&ix), 0);
	CHECK_EQ(index_append(&ix, &a), 0);
	/* A torn append, then a damaged line, then an intact record. */
	len = file_size(ix.path);
	fd = open(ix.path, O_WRONLY | O_APPEND);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "R 53 1234", 9), 9);
	close(fd);
	CHECK_EQ(index_append(&ix, &a), 0);                 /* seals the torn line */
	fd = open(ix.path, O_WRONLY | O_APPEND);
	CHECK_EQ(write(fd, "R 2 00000000 {}\n", 16), 16);
	close(fd);
	CHECK_EQ(index_append(&ix, &b), 0);

	snprintf(path, sizeof(path), "%s/kinds.log", dir);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, STDERR_FILENO);
	close(fd);
	log_set_level(LOG_INFO);
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), 0);
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), 0);      /* logged once, not twice */
	log_set_level(LOG_WARN);
	CHECK_EQ(index_check(&ix, &st), 0);                 /* silent */
	log_set_level(LOG_ERROR);
	dup2(saved, STDERR_FILENO);
	close(saved);

	CHECK_EQ(st.records, 3);
	CHECK_EQ(st.torn, 1);
	CHECK_EQ(st.bad, 1);
	log = slurp(path, &size);
	log = realloc(log, size + 1);
	log[size] = '\0';
	snprintf(line, sizeof(line), "info: %s: torn record (an interrupted append) at byte %zu skipped "
		 "(sealed off by a later append)", ix.path, len);
	CHECK(strstr(log, line) != NULL);
	CHECK(!strstr(log, line) || strstr(strstr(log, line) + 1, line) == NULL);
	CHECK(strstr(log, "warn: ") && strstr(log, ": damaged record at byte ") && strstr(log, "(checksum mismatch)"));
	CHECK(!strstr(log, "damaged record at") ||
	      strstr(strstr(log, "damaged record at") + 1, "damaged record at") == NULL);
	if (check_failures != failures)
		fprintf(stderr, "log was:\n%s", log);
	free(log);
	index_destroy(&ix);
}

/* ---- concurrency ---- */

#define PROCS 8
#define PER_PROC 50

static void appender(const char *path, int p)
{
	struct index ix;
	int failed = 0;

	index_init(&ix, ops, path);
	for (int i = 0; i < PER_PROC; i++) {
		struct index_record r = file_rec("ckpt-000001", "x", (uint64_t)p * 1000 + (uint64_t)i, (uint32_t)p);

		snprintf(r.name, sizeof(r.name), "p%d-r%d", p, i);
		failed |= index_append(&ix, &r) != 0;
	}
	index_destroy(&ix);
	_exit(failed);
}

static void test_concurrent_appends(void)
{
	struct collected *got = calloc(1, sizeof(*got));
	int next[PROCS] = { 0 }, status;
	struct index_scan_stats st;
	struct index ix;
	pid_t pids[PROCS];

	index_at(&ix, "concurrent");
	CHECK_EQ(index_create(&ix), 0);
	for (int p = 0; p < PROCS; p++) {
		pids[p] = fork();
		if (pids[p] == 0)
			appender(ix.path, p);
	}
	for (int p = 0; p < PROCS; p++) {
		CHECK_EQ(waitpid(pids[p], &status, 0), pids[p]);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_EQ(index_scan(&ix, collect, got, &st), 0);
	CHECK_EQ(st.bad, 0);
	CHECK_EQ(got->n, PROCS * PER_PROC);
	/* Every record once, each process's in its own order. */
	for (unsigned k = 0; k < got->n && k < 1024; k++) {
		int p = (int)got->r[k].crc;
		char want[32];

		CHECK(p >= 0 && p < PROCS);
		if (p < 0 || p >= PROCS)
			break;
		snprintf(want, sizeof(want), "p%d-r%d", p, next[p]);
		CHECK(strcmp(got->r[k].name, want) == 0);
		CHECK_EQ(got->r[k].size, (uint64_t)p * 1000 + (uint64_t)next[p]);
		next[p]++;
	}
	for (int p = 0; p < PROCS; p++)
		CHECK_EQ(next[p], PER_PROC);
	free(got);
	index_destroy(&ix);
}

/* ---- states ---- */

static void append_all(struct index *ix, const struct index_record *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(index_append(ix, &r[i]), 0);
}

static void test_states(void)
{
	struct index_record r[] = {
		rec(INDEX_BEGIN, "ckpt-000001"),                         /* PARTIAL */
		rec(INDEX_BEGIN, "ckpt-000002"),
		file_rec("ckpt-000002", "a", 5, 1),
		file_rec("ckpt-000002", "b", 7, 2),
		file_rec("ckpt-000002", "a", 6, 3),                      /* replaces a */
		complete_rec("ckpt-000002", 2, 13),                      /* COMPLETE */
		file_rec("ckpt-000002", "late", 9, 4),                   /* after the seal: ignored */
		rec(INDEX_BEGIN, "ckpt-000003"),
		failed_rec("ckpt-000003", "rank 2 failed"),
		complete_rec("ckpt-000003", 0, 0),                       /* no resurrection */
		rec(INDEX_BEGIN, "ckpt-000004"),
		complete_rec("ckpt-000004", 0, 0),
		failed_rec("ckpt-000004", "found damaged"),              /* FAILED wins over COMPLETE */
		rec(INDEX_BEGIN, "ckpt-000005"),
		complete_rec("ckpt-000005", 0, 0),
		rec(INDEX_PRUNED, "ckpt-000005"),
		complete_rec("ckpt-000005", 0, 0),                       /* PRUNED is final */
		failed_rec("ckpt-000005", "x"),
		file_rec("ckpt-000012", "orphan", 1, 1),                 /* BEGIN lost: still known */
		rec(INDEX_BEGIN, "ckpt-000010"),
	};
	struct index_view v;
	struct index_ckpt *c;
	struct index ix;

	index_at(&ix, "states");
	CHECK_EQ(index_create(&ix), 0);
	append_all(&ix, r, sizeof(r) / sizeof(r[0]));
	derive(&ix, &v);
	CHECK_EQ(v.count, 7);
	CHECK_EQ(v.max_number, 12);
	CHECK_EQ(state_of(&v, "ckpt-000001"), STORE_PARTIAL);
	CHECK_EQ(state_of(&v, "ckpt-000002"), STORE_COMPLETE);
	CHECK_EQ(state_of(&v, "ckpt-000003"), STORE_FAILED);
	CHECK_EQ(state_of(&v, "ckpt-000004"), STORE_FAILED);
	CHECK_EQ(state_of(&v, "ckpt-000005"), STORE_PRUNED);
	CHECK_EQ(state_of(&v, "ckpt-000012"), STORE_PARTIAL);
	c = index_view_find(&v, "ckpt-000002");
	CHECK(c && c->nfiles == 2 && c->info.files == 2 && c->info.bytes == 13 && c->sealed_files == 2);
	CHECK(c && strcmp(c->files[0].info.name, "a") == 0 && c->files[0].info.size == 6 &&
	      c->files[0].info.crc == 3 && !c->files[0].image);
	CHECK(c && c->info.begin_time == 1700000000 && c->info.end_time == 1700000000);
	c = index_view_find(&v, "ckpt-000003");
	CHECK(c && strcmp(c->info.reason, "rank 2 failed") == 0);
	c = index_view_find(&v, "ckpt-000004");
	CHECK(c && strcmp(c->info.reason, "found damaged") == 0);
	/* Oldest first by number, not by first appearance. */
	CHECK(strcmp(v.ckpts[5].info.name, "ckpt-000010") == 0);
	CHECK(strcmp(v.ckpts[6].info.name, "ckpt-000012") == 0);
	index_view_free(&v);
	index_destroy(&ix);
}

/* A checkpoint of thousands of ranks: one FILE record each, in no order,
 * some written twice (the last one wins), ANNEX records for names it has
 * (ignored) and for new ones (added); found by name in the table that
 * replaced the linear search (bench/scale). */
static void test_many_files(void)
{
	enum { N = 5000 };
	struct index_view v;
	struct index_ckpt *c;
	struct index ix;
	struct index_record r;
	char name[32];
	uint64_t bytes = 0;

	index_at(&ix, "many");
	CHECK_EQ(index_create(&ix), 0);
	r = rec(INDEX_BEGIN, "ckpt-000001");
	CHECK_EQ(index_append(&ix, &r), 0);
	for (unsigned i = 0; i < N; i++) {
		unsigned k = (i * 7919u) % N;   /* a permutation of 0..N-1 (7919 is prime) */

		snprintf(name, sizeof(name), "rank-%05u.img", k);
		r = file_rec("ckpt-000001", name, k + 1, k);
		CHECK_EQ(index_append(&ix, &r), 0);
		if (k % 7 == 0) {
			r = file_rec("ckpt-000001", name, 2 * (k + 1), k + 1);
			CHECK_EQ(index_append(&ix, &r), 0);
		}
	}
	r = complete_rec("ckpt-000001", N, 0);
	CHECK_EQ(index_append(&ix, &r), 0);
	for (unsigned k = 0; k < 10; k++) {
		r = file_rec("ckpt-000001", "", 1, 1);
		r.op = INDEX_ANNEX;
		snprintf(r.name, sizeof(r.name), k < 5 ? "rank-%05u.img" : "partner-%05u.img", k);
		CHECK_EQ(index_append(&ix, &r), 0);
	}
	derive(&ix, &v);
	c = index_view_find(&v, "ckpt-000001");
	CHECK(c && c->nfiles == N + 5 && c->file_records == N);
	for (unsigned k = 0; c && k < N; k++) {
		const struct index_file *f = NULL;

		snprintf(name, sizeof(name), "rank-%05u.img", k);
		for (size_t i = 0; i < c->nfiles && !f; i++)
			if (strcmp(c->files[i].info.name, name) == 0)
				f = &c->files[i];
		CHECK(f && !f->annex && f->info.size == (k % 7 ? k + 1 : 2 * (k + 1)));
		bytes += k % 7 ? k + 1 : 2 * (k + 1);
	}
	CHECK(c && c->info.bytes == bytes + 5);
	CHECK(c && c->files[N].annex && strcmp(c->files[N].info.name, "partner-00005.img") == 0);
	index_view_free(&v);
	index_destroy(&ix);
}

/* A seal reads its checkpoint's records from its BEGIN on (bench/scale):
 * the same files and state as the whole index says, other checkpoints'
 * records left out; an offset where its BEGIN is not is refused, and so
 * is one inside a line. The BEGIN appended after a torn record starts
 * past the seal of that record. */
static void test_view_from_begin(void)
{
	struct index_record before[] = {
		rec(INDEX_BEGIN, "ckpt-000001"),
		file_rec("ckpt-000001", "rank-0.img", 10, 1),
		complete_rec("ckpt-000001", 1, 10),
	};
	struct index_record b2 = rec(INDEX_BEGIN, "ckpt-000002"), b3 = rec(INDEX_BEGIN, "ckpt-000003");
	struct index_record torn = file_rec("ckpt-000001", "rank-1.img", 10, 1);
	struct index_record after[] = {
		file_rec("ckpt-000002", "rank-0.img", 20, 2),
		file_rec("ckpt-000003", "rank-0.img", 30, 3),
		file_rec("ckpt-000002", "rank-1.img", 21, 4),
		file_rec("ckpt-000002", "rank-0.img", 22, 5),      /* the last one wins */
	};
	struct index_view v, whole;
	struct index_hold h;
	struct index ix;
	uint64_t at2, at3;
	size_t len;
	char *buf;

	index_at(&ix, "from");
	CHECK_EQ(index_create(&ix), 0);
	for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++)
		CHECK_EQ(index_append(&ix, &before[i]), 0);
	/* a record torn by a crash: the next append seals it off first */
	CHECK_EQ(index_append(&ix, &torn), 0);
	buf = slurp(ix.path, &len);
	spit(ix.path, buf, len - 7);
	free(buf);
	CHECK_EQ(index_lock(&ix, &h), 0);
	CHECK_EQ(index_append_held(&h, &b2), 0);
	at2 = h.appended_at;
	CHECK_EQ(index_append_held(&h, &b3), 0);
	at3 = h.appended_at;
	for (size_t i = 0; i < sizeof(after) / sizeof(after[0]); i++)
		CHECK_EQ(index_append_held(&h, &after[i]), 0);

	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000002", at2, &v), 0);
	CHECK_EQ(v.count, 1);
	CHECK_EQ(v.stats.torn, 0);
	CHECK_EQ(index_view_load_held(&h, &whole), 0);
	CHECK_EQ(whole.stats.torn, 1);
	{
		struct index_ckpt *a = index_view_find(&v, "ckpt-000002");
		struct index_ckpt *b = index_view_find(&whole, "ckpt-000002");

		CHECK(a && b && a->info.state == STORE_PARTIAL && a->nfiles == 2 &&
		      b->nfiles == 2 && a->info.bytes == 43 && b->info.bytes == 43);
	}
	index_view_free(&whole);
	index_view_free(&v);
	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000002", at3, &v), -ESTALE);
	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000002", at2 + 1, &v), -ESTALE);
	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000002", 1u << 30, &v), -ESTALE);
	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000003", at3, &v), 0);
	CHECK(v.count == 1 && v.ckpts[0].nfiles == 1 && v.ckpts[0].info.bytes == 30);
	index_view_free(&v);
	index_unlock(&h);
	index_destroy(&ix);

	/* a job's first checkpoint begins right after the header: its seal
	 * reads from there too (it read the whole index, and so did the next
	 * begin: 65,536 files at 65K ranks, bench/scale/phases.py) */
	index_at(&ix, "from_first");
	CHECK_EQ(index_create(&ix), 0);
	CHECK_EQ(index_lock(&ix, &h), 0);
	CHECK_EQ(index_append_held(&h, &before[0]), 0);
	at2 = h.appended_at;
	CHECK_EQ(index_append_held(&h, &before[1]), 0);
	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000001", at2, &v), 0);
	CHECK(v.count == 1 && v.ckpts[0].nfiles == 1);
	index_view_free(&v);
	CHECK_EQ(index_view_load_one_held(&h, "ckpt-000001", at2 - 1, &v), -ESTALE);
	index_unlock(&h);
	index_destroy(&ix);
}

/* ---- fault points ---- */

static void test_fault_fail(void)
{
	struct index_record a = rec(INDEX_BEGIN, "ckpt-000001");
	struct index_record b = complete_rec("ckpt-000001", 0, 0);
	struct index_scan_stats st;
	struct index_view v;
	struct index ix;
	size_t before;

	index_at(&ix, "faults");
	CHECK_EQ(index_create(&ix), 0);
	CHECK_EQ(index_append(&ix, &a), 0);
	before = file_size(ix.path);

	CHECK_EQ(fault_configure("store.index.append:1:fail"), 0);
	err_clear();
	CHECK_EQ(index_append(&ix, &b), -EIO);
	CHECK(strstr(err_msg(), "store.index.append") && strstr(err_msg(), ix.path));
	CHECK_EQ(file_size(ix.path), before);               /* nothing written */

	CHECK_EQ(fault_configure("store.index.torn:1:fail"), 0);
	CHECK_EQ(index_append(&ix, &b), -EIO);
	CHECK(file_size(ix.path) > before);                 /* half a record */
	derive(&ix, &v);
	CHECK_EQ(v.stats.torn, 1);
	CHECK_EQ(v.stats.bad, 0);
	CHECK_EQ(state_of(&v, "ckpt-000001"), STORE_PARTIAL);
	index_view_free(&v);

	CHECK_EQ(fault_configure("store.index.fsync:1:fail"), 0);
	CHECK_EQ(index_append(&ix, &b), -EIO);
	CHECK_EQ(fault_configure(NULL), 0);
	/* Written, not known durable: the caller was told it failed and must
	 * seal the checkpoint FAILED, which then wins. */
	derive(&ix, &v);
	CHECK_EQ(state_of(&v, "ckpt-000001"), STORE_COMPLETE);
	index_view_free(&v);
	CHECK_EQ(index_scan(&ix, NULL, NULL, &st), 0);
	CHECK_EQ(st.records, 2);
	index_destroy(&ix);
}

/* A process killed at each point leaves an index that reads back to the
 * state before the record, and takes the next append. */
static void test_fault_kill(void)
{
	static const char *const specs[] = { "store.index.append:2:kill", "store.index.torn:2:kill",
					     "store.index.fsync:2:kill" };
	static const int expect_complete[] = { 0, 0, 1 };

	for (int k = 0; k < 3; k++) {
		struct index_record a = rec(INDEX_BEGIN, "ckpt-000001");
		struct index_record b = complete_rec("ckpt-000001", 0, 0);
		struct index_record c = rec(INDEX_BEGIN, "ckpt-000002");
		struct index_view v;
		struct index ix;
		int status;
		pid_t pid;

		index_at(&ix, "kill");
		CHECK_EQ(index_create(&ix), 0);
		pid = fork();
		if (pid == 0) {
			if (fault_configure(specs[k]) != 0)
				_exit(3);
			index_append(&ix, &a);
			index_append(&ix, &b);
			_exit(4);
		}
		CHECK_EQ(waitpid(pid, &status, 0), pid);
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		derive(&ix, &v);
		CHECK_EQ(state_of(&v, "ckpt-000001"), expect_complete[k] ? STORE_COMPLETE : STORE_PARTIAL);
		CHECK_EQ(v.stats.torn, k == 1);
		CHECK_EQ(v.stats.bad, 0);
		index_view_free(&v);
		CHECK_EQ(index_append(&ix, &c), 0);
		derive(&ix, &v);
		CHECK_EQ(state_of(&v, "ckpt-000002"), STORE_PARTIAL);
		CHECK_EQ(state_of(&v, "ckpt-000001"), expect_complete[k] ? STORE_COMPLETE : STORE_PARTIAL);
		index_view_free(&v);
		index_destroy(&ix);
	}
}

int main(void)
{
	log_set_level(LOG_ERROR);
	ops = store_tier_find("global");
	CHECK(ops != NULL);
	if (!ops)
		return check_result("test_index");
	make_dir();
	test_encode_decode();
	test_decode_rejects();
	test_file_fast_path();
	test_files_records();
	test_round_trip();
	test_headers();
	test_torn_last_record();
	test_flipped_middle_record();
	test_torn_or_damaged();
	test_concurrent_appends();
	test_states();
	test_many_files();
	test_view_from_begin();
	test_fault_fail();
	test_fault_kill();
	if (!check_failures)
		remove_dir();
	else
		fprintf(stderr, "test files kept in %s\n", dir);
	return check_result("test_index");
}
