/* index.c - a job's append-only index (see index.h, docs/store.md).
 *
 * The index is the only place that says a checkpoint is established, so it
 * must survive a crash at any byte and concurrent appends from many ranks:
 * every record is one checksummed line, appends happen under an exclusive
 * flock and are fsynced before the lock is dropped, and a reader trusts only
 * lines that pass every check. A line torn by a crash is sealed off by the
 * next appender, so it can never join with later bytes into a valid record.
 */
#include "store/index.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HEADER_LEN (sizeof(INDEX_HEADER) - 1)
#define HEADER_NAME "STASIS-INDEX "
/* Written after a torn last line, before the next record: the torn bytes
 * plus '!' can never decode (a record line ends with the '}' of its JSON),
 * even if only the torn record's '\n' was missing. */
#define TORN_SEAL "!\n"

static const char *const op_names[] = {
	[INDEX_BEGIN] = "BEGIN",
	[INDEX_FILE] = "FILE",
	[INDEX_COMPLETE] = "COMPLETE",
	[INDEX_FAILED] = "FAILED",
	[INDEX_PRUNED] = "PRUNED",
	[INDEX_ANNEX] = "ANNEX",
	[INDEX_LEVEL] = "LEVEL",
};

const char *index_op_name(enum index_op op)
{
	return op_names[op];
}

int index_init(struct index *ix, const struct store_tier_ops *ops, const char *path)
{
	memset(ix, 0, sizeof(*ix));
	ix->ops = ops;
	if (snprintf(ix->path, sizeof(ix->path), "%s", path) >= (int)sizeof(ix->path))
		return err_set(-ENAMETOOLONG, "%s: path too long", path);
	pthread_mutex_init(&ix->lock, NULL);
	return 0;
}

void index_destroy(struct index *ix)
{
	free(ix->warned);
	ix->warned = NULL;
	ix->nwarned = 0;
	pthread_mutex_destroy(&ix->lock);
}

/* ---- encoding ---- */

static int put_str(json_t *o, const char *key, const char *value)
{
	json_t *s = json_string(value);

	if (!s)
		return -EINVAL;     /* not UTF-8 */
	return json_object_set_new(o, key, s) ? -ENOMEM : 0;
}

static int put_int(json_t *o, const char *key, int64_t value)
{
	return json_object_set_new(o, key, json_integer(value)) ? -ENOMEM : 0;
}

static int put_u64(json_t *o, const char *key, uint64_t value)
{
	return value > (uint64_t)INT64_MAX ? -EOVERFLOW : put_int(o, key, (int64_t)value);
}

static int put_op_fields(json_t *o, const struct index_record *r)
{
	char crc[9];
	int ret = 0;

	switch (r->op) {
	case INDEX_FILE:
	case INDEX_ANNEX:
		snprintf(crc, sizeof(crc), "%08" PRIx32, r->crc);
		ret = put_str(o, "name", r->name);
		ret = ret ? ret : put_u64(o, "size", r->size);
		ret = ret ? ret : put_str(o, "crc", crc);
		if (r->image && ret == 0)
			ret = json_object_set_new(o, "image", json_true()) ? -ENOMEM : 0;
		break;
	case INDEX_COMPLETE:
		ret = put_u64(o, "files", r->files);
		ret = ret ? ret : put_u64(o, "bytes", r->bytes);
		break;
	case INDEX_LEVEL:
		ret = put_str(o, "name", r->name);
		if (r->reason[0] && ret == 0)
			ret = put_str(o, "reason", r->reason);
		break;
	case INDEX_FAILED:
	case INDEX_PRUNED:
		if (r->reason[0])
			ret = put_str(o, "reason", r->reason);
		break;
	case INDEX_BEGIN:
		break;
	}
	return ret;
}

static int put_fields(json_t *o, const struct index_record *r)
{
	int ret;

	ret = put_str(o, "op", op_names[r->op]);
	ret = ret ? ret : put_str(o, "ckpt", r->ckpt);
	ret = ret ? ret : put_int(o, "time", r->time);
	return ret ? ret : put_op_fields(o, r);
}

/* "R <length> <crc> <json>\n" */
static int frame(const char *json, size_t n, char *line, size_t size, size_t *len)
{
	char prefix[32];
	size_t plen;

	plen = (size_t)snprintf(prefix, sizeof(prefix), "R %zu %08" PRIx32 " ", n, crc32c(0, json, n));
	if (plen + n + 1 > size || plen + n + 1 > INDEX_MAX_LINE)
		return -E2BIG;
	memcpy(line, prefix, plen);
	memcpy(line + plen, json, n);
	line[plen + n] = '\n';
	*len = plen + n + 1;
	return 0;
}

int index_encode(const struct index_record *r, char *line, size_t size, size_t *len)
{
	char json[INDEX_MAX_LINE];
	size_t n;
	json_t *o;
	int ret;

	if ((unsigned)r->op > INDEX_LEVEL || !r->ckpt[0])
		return -EINVAL;
	o = json_object();
	if (!o)
		return -ENOMEM;
	ret = put_fields(o, r);
	/* Compact output escapes every control character: the JSON is one line. */
	n = ret ? 0 : json_dumpb(o, json, sizeof(json), JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (ret)
		return ret;
	if (n == 0 || n > sizeof(json))
		return -E2BIG;
	return frame(json, n, line, size, len);
}

/* FILES: the files of several writers in one record (a node agent's for
 * its ranks' images), each an array [name, size, crc, image]:
 *     {"op":"FILES","ckpt":"ckpt-000002","time":T,"files":[["rank-00000.img",512,"89abcdef",true],...]}
 * Readers see one FILE record per entry, at the line's offset. */
int index_encode_files(const struct index_record *files, unsigned n, char *line, size_t size, size_t *len)
{
	char json[INDEX_MAX_LINE], crc[9];
	json_t *o, *list;
	size_t jn;
	int ret;

	if (!n || n > INDEX_FILES_MAX || !files[0].ckpt[0])
		return -EINVAL;
	o = json_object();
	list = json_array();
	ret = o && list && json_object_set_new(o, "op", json_string(INDEX_FILES_OP)) == 0 ? 0 : -ENOMEM;
	ret = ret ? ret : put_str(o, "ckpt", files[0].ckpt);
	ret = ret ? ret : put_int(o, "time", files[0].time);
	for (unsigned i = 0; i < n && !ret; i++) {
		json_t *e;

		snprintf(crc, sizeof(crc), "%08" PRIx32, files[i].crc);
		e = files[i].size > (uint64_t)INT64_MAX ? NULL :
		    json_pack("[s,I,s,b]", files[i].name, (json_int_t)files[i].size, crc, files[i].image);
		ret = e && json_array_append_new(list, e) == 0 ? 0 : -EINVAL;
	}
	ret = ret ? ret : json_object_set(o, "files", list) ? -ENOMEM : 0;
	jn = ret ? 0 : json_dumpb(o, json, sizeof(json), JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(list);
	json_decref(o);
	if (ret)
		return ret;
	if (jn == 0 || jn > sizeof(json))
		return -E2BIG;
	return frame(json, jn, line, size, len);
}

/* ---- decoding ---- */

static int bad(const char **why, const char *what)
{
	*why = what;
	return -EBADMSG;
}

static int is_hex8(const char *s)
{
	for (int i = 0; i < 8; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

static uint32_t parse_hex8(const char *s)
{
	uint32_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 4 | (uint32_t)(s[i] <= '9' ? s[i] - '0' : s[i] - 'a' + 10);
	return v;
}

/* "R <length> <crc> " and the JSON it announces, which must end the line. */
static int decode_prefix(const char *line, size_t len, const char **json, size_t *json_len,
			 uint32_t *crc, const char **why)
{
	size_t i = 2, n = 0;

	if (len < 2 || line[0] != 'R' || line[1] != ' ')
		return bad(why, "not a record line");
	/* No leading zeros and at most 5 digits: one spelling per length. */
	if (i >= len || line[i] < '1' || line[i] > '9')
		return bad(why, "bad length field");
	while (i < len && line[i] >= '0' && line[i] <= '9' && i < 7)
		n = n * 10 + (size_t)(line[i++] - '0');
	if (i >= len || line[i] != ' ')
		return bad(why, "bad length field");
	i++;
	if (len - i < 9 || !is_hex8(line + i) || line[i + 8] != ' ')
		return bad(why, "bad checksum field");
	*crc = parse_hex8(line + i);
	i += 9;
	if (len - i != n)
		return bad(why, "length does not match the record");
	*json = line + i;
	*json_len = n;
	return 0;
}

static int get_str(json_t *o, const char *key, char *out, size_t size, int required)
{
	json_t *v = json_object_get(o, key);
	const char *s;

	if (!v)
		return required ? -EBADMSG : 0;
	if (!json_is_string(v))
		return -EBADMSG;
	s = json_string_value(v);
	if ((required && !*s) || strlen(s) >= size || strlen(s) != json_string_length(v))
		return -EBADMSG;
	memcpy(out, s, strlen(s) + 1);
	return 0;
}

static int get_u64(json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EBADMSG;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int decode_op(json_t *o, struct index_record *r)
{
	char op[16];

	if (get_str(o, "op", op, sizeof(op), 1))
		return -EBADMSG;
	for (unsigned i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++) {
		if (strcmp(op, op_names[i]) == 0) {
			r->op = (enum index_op)i;
			return 0;
		}
	}
	return -EBADMSG;
}

static int decode_fields(json_t *o, struct index_record *r)
{
	char crc[16];
	uint64_t n;

	if (!json_is_object(o) || decode_op(o, r) || get_str(o, "ckpt", r->ckpt, sizeof(r->ckpt), 1) ||
	    !json_is_integer(json_object_get(o, "time")))
		return -EBADMSG;
	r->time = json_integer_value(json_object_get(o, "time"));
	switch (r->op) {
	case INDEX_FILE:
	case INDEX_ANNEX:
		if (get_str(o, "name", r->name, sizeof(r->name), 1) || get_u64(o, "size", &r->size) ||
		    get_str(o, "crc", crc, sizeof(crc), 1) || strlen(crc) != 8 || !is_hex8(crc))
			return -EBADMSG;
		r->crc = parse_hex8(crc);
		if (json_object_get(o, "image") && !json_is_true(json_object_get(o, "image")))
			return -EBADMSG;
		r->image = json_object_get(o, "image") != NULL;
		return 0;
	case INDEX_COMPLETE:
		if (get_u64(o, "files", &n) || n > UINT32_MAX || get_u64(o, "bytes", &r->bytes))
			return -EBADMSG;
		r->files = (unsigned)n;
		return 0;
	case INDEX_LEVEL:
		if (get_str(o, "name", r->name, sizeof(r->name), 1))
			return -EBADMSG;
		return get_str(o, "reason", r->reason, sizeof(r->reason), 0);
	case INDEX_FAILED:
	case INDEX_PRUNED:
		return get_str(o, "reason", r->reason, sizeof(r->reason), 0);
	case INDEX_BEGIN:
		return 0;
	}
	return -EBADMSG;
}

/* FILE and ANNEX records as index_encode spells them, read without jansson.
 * A checkpoint of 65,536 ranks has as many FILE records, all decoded by its
 * seal (and by every later reader of the index): with jansson that was
 * about a third of the coordinator's CPU for a checkpoint at 65K
 * (bench/scale, perf). index_encode writes one spelling (its key order,
 * compact); this takes only that, with strings of printable ASCII but '"'
 * and '\\' (nothing escaped) and integers of at most 18 digits, and leaves
 * every other line to jansson, so both read any line alike. */
struct cursor {
	const char *p, *end;
};

static int eat(struct cursor *c, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return 0;
	c->p += n;
	return 1;
}

/* A non-empty string shorter than size, up to and past its closing quote */
static int eat_str(struct cursor *c, char *out, size_t size)
{
	size_t n = 0;

	for (; c->p < c->end && *c->p != '"'; c->p++) {
		unsigned char ch = (unsigned char)*c->p;

		if (ch < 0x20 || ch > 0x7e || ch == '\\' || n + 1 >= size)
			return 0;
		out[n++] = (char)ch;
	}
	if (c->p == c->end || n == 0)
		return 0;
	out[n] = '\0';
	c->p++;
	return 1;
}

/* An integer as JSON spells it (no leading zero), of at most 18 digits */
static int eat_int(struct cursor *c, int64_t *out)
{
	int neg = c->p < c->end && *c->p == '-', digits = 0;
	int64_t v = 0;

	c->p += neg;
	if (c->p < c->end && *c->p == '0') {
		c->p++;
		digits = 1;
	} else {
		for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++, digits++) {
			if (digits == 18)
				return 0;
			v = v * 10 + (*c->p - '0');
		}
	}
	if (!digits || (c->p < c->end && *c->p >= '0' && *c->p <= '9'))
		return 0;
	*out = neg ? -v : v;
	return 1;
}

static int decode_file_fast(const char *json, size_t len, struct index_record *r)
{
	struct cursor c = { json, json + len };
	char crc[16];
	int64_t size;

	if (eat(&c, "{\"op\":\"FILE\",\"ckpt\":\""))
		r->op = INDEX_FILE;
	else if (eat(&c, "{\"op\":\"ANNEX\",\"ckpt\":\""))
		r->op = INDEX_ANNEX;
	else
		return 0;
	if (!eat_str(&c, r->ckpt, sizeof(r->ckpt)) || !eat(&c, ",\"time\":") || !eat_int(&c, &r->time) ||
	    !eat(&c, ",\"name\":\"") || !eat_str(&c, r->name, sizeof(r->name)) ||
	    !eat(&c, ",\"size\":") || !eat_int(&c, &size) || size < 0 ||
	    !eat(&c, ",\"crc\":\"") || !eat_str(&c, crc, sizeof(crc)) || strlen(crc) != 8 ||
	    !is_hex8(crc))
		return 0;
	r->image = eat(&c, ",\"image\":true");
	if (!eat(&c, "}") || c.p != c.end)
		return 0;
	r->size = (uint64_t)size;
	r->crc = parse_hex8(crc);
	return 1;
}

int index_decode(const char *line, size_t len, struct index_record *r, const char **why)
{
	const char *json, *dummy;
	size_t json_len;
	uint32_t crc;
	json_t *o;
	int ret;

	if (!why)
		why = &dummy;
	memset(r, 0, sizeof(*r));
	ret = decode_prefix(line, len, &json, &json_len, &crc, why);
	if (ret)
		return ret;
	if (crc32c(0, json, json_len) != crc)
		return bad(why, "checksum mismatch");
	if (decode_file_fast(json, json_len, r))
		return 0;
	memset(r, 0, sizeof(*r));
	o = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, NULL);
	if (!o)
		return bad(why, "not valid JSON");
	ret = decode_fields(o, r);
	json_decref(o);
	return ret ? bad(why, "JSON lacks a field its op needs") : 0;
}

/* The entries of a FILES record in index_encode_files' spelling */
static int decode_files_fast(const char *json, size_t len, struct index_record *out, unsigned max,
			     unsigned *n)
{
	struct cursor c = { json, json + len };
	struct index_record head = { .op = INDEX_FILE, .vouched = 1 };

	*n = 0;
	if (!eat(&c, "{\"op\":\"" INDEX_FILES_OP "\",\"ckpt\":\"") ||
	    !eat_str(&c, head.ckpt, sizeof(head.ckpt)) || !eat(&c, ",\"time\":") ||
	    !eat_int(&c, &head.time) || !eat(&c, ",\"files\":["))
		return 0;
	do {
		struct index_record *r = &out[*n];
		char crc[16];
		int64_t size;

		if (*n == max)
			return 0;
		*r = head;
		if (!eat(&c, "[\"") || !eat_str(&c, r->name, sizeof(r->name)) || !eat(&c, ",") ||
		    !eat_int(&c, &size) || size < 0 || !eat(&c, ",\"") || !eat_str(&c, crc, sizeof(crc)) ||
		    strlen(crc) != 8 || !is_hex8(crc) || !eat(&c, ","))
			return 0;
		r->image = eat(&c, "true");
		if ((!r->image && !eat(&c, "false")) || !eat(&c, "]"))
			return 0;
		r->size = (uint64_t)size;
		r->crc = parse_hex8(crc);
		++*n;
	} while (eat(&c, ","));
	return eat(&c, "]}") && c.p == c.end;
}

/* Any other spelling of it, through jansson */
static int decode_files_json(const char *json, size_t len, struct index_record *out, unsigned max,
			     unsigned *n)
{
	json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL), *list, *e;
	struct index_record head = { .op = INDEX_FILE, .vouched = 1 };
	char op[16];
	size_t i;
	int ok;

	*n = 0;
	list = json_object_get(o, "files");
	ok = o && !get_str(o, "op", op, sizeof(op), 1) && !strcmp(op, INDEX_FILES_OP) &&
	     !get_str(o, "ckpt", head.ckpt, sizeof(head.ckpt), 1) &&
	     json_is_integer(json_object_get(o, "time")) && json_is_array(list) &&
	     json_array_size(list) > 0 && json_array_size(list) <= max;
	head.time = ok ? json_integer_value(json_object_get(o, "time")) : 0;
	json_array_foreach(ok ? list : NULL, i, e) {
		struct index_record *r = &out[i];
		const char *name = json_string_value(json_array_get(e, 0));
		const char *crc = json_string_value(json_array_get(e, 2));
		json_t *size = json_array_get(e, 1), *image = json_array_get(e, 3);

		*r = head;
		ok = json_array_size(e) == 4 && name && *name && strlen(name) < sizeof(r->name) &&
		     strlen(name) == json_string_length(json_array_get(e, 0)) && json_is_integer(size) &&
		     json_integer_value(size) >= 0 && crc && strlen(crc) == 8 && is_hex8(crc) &&
		     json_is_boolean(image);
		if (!ok)
			break;
		strcpy(r->name, name);
		r->size = (uint64_t)json_integer_value(size);
		r->crc = parse_hex8(crc);
		r->image = json_is_true(image);
	}
	*n = ok ? (unsigned)json_array_size(list) : 0;
	json_decref(o);
	return ok;
}

int index_decode_files(const char *line, size_t len, struct index_record *out, unsigned max,
		       unsigned *n, const char **why)
{
	static const char start[] = "{\"op\":\"" INDEX_FILES_OP "\",";
	const char *json, *dummy;
	size_t json_len;
	uint32_t crc;
	int ret;

	if (!why)
		why = &dummy;
	ret = decode_prefix(line, len, &json, &json_len, &crc, why);
	if (ret)
		return ret;
	if (json_len < sizeof(start) - 1 || memcmp(json, start, sizeof(start) - 1))
		return -ENOMSG;
	if (crc32c(0, json, json_len) != crc)
		return bad(why, "checksum mismatch");
	if (decode_files_fast(json, json_len, out, max, n) || decode_files_json(json, json_len, out, max, n))
		return 0;
	return bad(why, "FILES record without its files");
}

/* ---- writing ---- */

static int write_all(const struct store_tier_ops *ops, int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = ops->write(fd, buf, len);

		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_exact(const struct store_tier_ops *ops, int fd, void *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = ops->pread(fd, buf, len, off);

		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;    /* shrank under us: not an append-only file */
		buf = (char *)buf + n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Give the file its header, or complete one a crash cut short. *size gets
 * the file's size once the header is there. */
static int ensure_header(struct index_hold *h, uint64_t *size)
{
	const struct store_tier_ops *ops = h->ix->ops;
	char head[HEADER_LEN];
	struct store_stat st;
	size_t have;
	int ret;

	ret = ops->fstat(h->fd, &st);
	if (ret)
		return ret;
	have = st.size < HEADER_LEN ? (size_t)st.size : HEADER_LEN;
	ret = read_exact(ops, h->fd, head, have, 0);
	if (ret)
		return ret;
	if (memcmp(head, INDEX_HEADER, have) != 0)
		return err_set(-EBADMSG, "%s: not a Stasis index (bad header line); not appending to it",
			       h->ix->path);
	*size = st.size < HEADER_LEN ? HEADER_LEN : st.size;
	if (have == HEADER_LEN)
		return 0;
	return write_all(ops, h->fd, &INDEX_HEADER[have], HEADER_LEN - have);
}

/* Close a last line that a crash left open, so the next record starts on a
 * line of its own and the torn one stays damaged for good. *size becomes
 * where the next record starts. */
static int seal_tail(struct index_hold *h, uint64_t *size)
{
	const struct store_tier_ops *ops = h->ix->ops;
	char last;
	int ret;

	if (*size == HEADER_LEN)
		return 0;
	ret = read_exact(ops, h->fd, &last, 1, *size - 1);
	if (ret || last == '\n')
		return ret;
	log_info("%s: last record is torn (a writer died mid-append); sealing it off at byte %" PRIu64,
		 h->ix->path, *size);
	ret = write_all(ops, h->fd, TORN_SEAL, sizeof(TORN_SEAL) - 1);
	*size += sizeof(TORN_SEAL) - 1;
	return ret;
}

int index_lock(struct index *ix, struct index_hold *h)
{
	int ret;

	h->ix = ix;
	h->fd = -1;
	h->appended_at = 0;
	ret = ix->ops->open_append(ix->path, &h->fd);
	if (ret)
		return err_set(ret, "%s: cannot open the index: %s", ix->path, strerror(-ret));
	ret = ix->ops->lock(h->fd, 1);
	if (ret) {
		ix->ops->close(h->fd);
		h->fd = -1;
		return err_set(ret, "%s: cannot lock the index: %s", ix->path, strerror(-ret));
	}
	return 0;
}

void index_unlock(struct index_hold *h)
{
	if (h->fd < 0)
		return;
	/* close drops the flock too; unlock first keeps the order explicit. */
	h->ix->ops->unlock(h->fd);
	h->ix->ops->close(h->fd);
	h->fd = -1;
}

int index_create(struct index *ix)
{
	struct index_hold h;
	uint64_t size;
	int ret;

	err_clear();
	ret = index_lock(ix, &h);
	if (ret)
		return ret;
	ret = ensure_header(&h, &size);
	if (ret == 0)
		ret = ix->ops->fsync(h.fd);
	index_unlock(&h);
	if (ret && !err_msg()[0])
		err_set(ret, "%s: cannot create the index: %s", ix->path, strerror(-ret));
	return ret;
}

/* The record goes out in two writes with a fault point between them, so a
 * test can leave exactly the torn record a crash would. Both writes happen
 * under the exclusive lock every appender takes, and readers take a shared
 * lock, so no one ever sees the gap. */
static int write_record(struct index_hold *h, const char *line, size_t len)
{
	const struct store_tier_ops *ops = h->ix->ops;
	size_t half = len / 2;
	int ret;

	ret = write_all(ops, h->fd, line, half);
	if (ret == 0)
		ret = FAULT(STORE_INDEX_TORN);
	if (ret == 0)
		ret = write_all(ops, h->fd, line + half, len - half);
	return ret;
}

static int append_line(struct index_hold *h, const char *line, size_t len, const char *op, const char *ckpt);

int index_append_held(struct index_hold *h, const struct index_record *r)
{
	char line[INDEX_MAX_LINE];
	size_t len;
	int ret;

	err_clear();
	ret = index_encode(r, line, sizeof(line), &len);
	if (ret)
		return err_set(ret, "%s: cannot encode a %s record for %s", h->ix->path, op_names[r->op], r->ckpt);
	return append_line(h, line, len, op_names[r->op], r->ckpt);
}

int index_append_files(struct index_hold *h, const char *line, size_t len, const char *ckpt)
{
	err_clear();
	return append_line(h, line, len, INDEX_FILES_OP, ckpt);
}

static int append_line(struct index_hold *h, const char *line, size_t len, const char *op, const char *ckpt)
{
	char cause[256];
	uint64_t size;
	int ret;

	ret = ensure_header(h, &size);
	if (ret == 0)
		ret = seal_tail(h, &size);
	if (ret == 0)
		ret = FAULT(STORE_INDEX_APPEND);
	if (ret == 0)
		ret = write_record(h, line, len);
	if (ret == 0)
		ret = FAULT(STORE_INDEX_FSYNC);
	if (ret == 0)
		ret = h->ix->ops->fsync(h->fd);
	if (ret == 0) {
		h->appended_at = size;
		return 0;
	}
	snprintf(cause, sizeof(cause), "%s", err_msg()[0] ? err_msg() : strerror(-ret));
	return err_set(ret, "%s: cannot append the %s record of %s: %s", h->ix->path, op, ckpt, cause);
}

int index_append(struct index *ix, const struct index_record *r)
{
	struct index_hold h;
	int ret;

	ret = index_lock(ix, &h);
	if (ret)
		return ret;
	ret = index_append_held(&h, r);
	index_unlock(&h);
	return ret;
}

/* ---- reading ---- */

static int read_file(const struct store_tier_ops *ops, int fd, char **buf, size_t *size)
{
	struct store_stat st;
	char *b;
	int ret;

	ret = ops->fstat(fd, &st);
	if (ret)
		return ret;
	if (st.size > SIZE_MAX / 2)
		return -EFBIG;
	b = malloc(st.size ? (size_t)st.size : 1);
	if (!b)
		return -ENOMEM;
	ret = read_exact(ops, fd, b, (size_t)st.size, 0);
	if (ret) {
		free(b);
		return ret;
	}
	*buf = b;
	*size = (size_t)st.size;
	return 0;
}

static int check_header(struct index *ix, const char *buf, size_t size)
{
	size_t have = size < HEADER_LEN ? size : HEADER_LEN;
	const char *nl;

	if (memcmp(buf, INDEX_HEADER, have) == 0)
		return 0;       /* intact, or being created (a prefix): empty */
	nl = memchr(buf, '\n', size);
	if (size > strlen(HEADER_NAME) && memcmp(buf, HEADER_NAME, strlen(HEADER_NAME)) == 0 && nl)
		return err_set(-EPROTONOSUPPORT, "%s: index format '%.*s' is not supported (this Stasis reads '%.*s')",
			       ix->path, (int)(nl - buf), buf, (int)HEADER_LEN - 1, INDEX_HEADER);
	return err_set(-EBADMSG, "%s: not a Stasis index (its first line is not '%.*s')", ix->path,
		       (int)HEADER_LEN - 1, INDEX_HEADER);
}

/* Log a skipped record once per handle: every command reads the index, and
 * one line per record is enough. */
static void log_once(struct index *ix, enum log_level level, uint64_t offset, const char *what,
		     const char *why)
{
	uint64_t *grown;
	size_t i;

	pthread_mutex_lock(&ix->lock);
	for (i = 0; i < ix->nwarned && ix->warned[i] != offset; i++)
		;
	if (i == ix->nwarned) {
		log_msg(level, "%s: %s at byte %" PRIu64 " skipped (%s)", ix->path, what, offset, why);
		grown = realloc(ix->warned, (ix->nwarned + 1) * sizeof(*grown));
		if (grown) {
			ix->warned = grown;
			ix->warned[ix->nwarned++] = offset;
		}
	}
	pthread_mutex_unlock(&ix->lock);
}

struct scan {
	struct index *ix;
	index_record_fn fn;
	void *ctx;
	struct index_scan_stats *st;
	int quiet;
};

/* A torn append is what the protocol expects a crash to leave: the line at
 * the end without its '\n', or such a line a later appender sealed. Any
 * other undecodable line is damage. Neither is ever trusted. */
static void skip_line(struct scan *sc, uint64_t offset, const char *line, size_t len, int at_end,
		      const char *why)
{
	int torn = at_end || (len && line[len - 1] == TORN_SEAL[0]);

	if (torn) {
		sc->st->torn++;
		if (!sc->quiet)
			log_once(sc->ix, LOG_INFO, offset, "torn record (an interrupted append)",
				 at_end ? "no end of line" : "sealed off by a later append");
		return;
	}
	if (sc->st->bad++ == 0)
		sc->st->first_bad = offset;
	if (!sc->quiet)
		log_once(sc->ix, LOG_WARN, offset, "damaged record", why);
}

/* The lines of buf from off on; buf[0] is the file's byte base */
static int scan_lines(struct scan *sc, const char *buf, size_t size, size_t off, uint64_t base)
{
	struct index_record *files = NULL;
	const char *why;
	unsigned nfiles;
	size_t end;
	int ret = 0;

	while (off < size) {
		const char *nl = memchr(buf + off, '\n', size - off);

		if (!nl) {
			/* Never trusted even if every byte of the record made
			 * it: its writer did not finish the append. */
			skip_line(sc, base + off, buf + off, size - off, 1, "no end of line");
			break;
		}
		end = (size_t)(nl - buf);
		sc->st->end = base + end + 1;
		if (!files && !(files = malloc(INDEX_FILES_MAX * sizeof(*files)))) {
			ret = -ENOMEM;
			break;
		}
		ret = index_decode_files(buf + off, end - off, files, INDEX_FILES_MAX, &nfiles, &why);
		if (ret == -ENOMSG) {
			/* every other record: one a line */
			ret = index_decode(buf + off, end - off, &files[0], &why);
			nfiles = 1;
		}
		if (ret != 0) {
			skip_line(sc, base + off, buf + off, end - off, 0, why);
		} else {
			sc->st->records++;
			for (unsigned i = 0; i < nfiles && sc->fn && !ret; i++)
				ret = sc->fn(sc->ctx, &files[i], base + off);
			if (ret)
				break;
		}
		ret = 0;
		off = end + 1;
	}
	free(files);
	return ret;
}

static int scan_fd(struct scan *sc, int fd)
{
	struct index *ix = sc->ix;
	char *buf;
	size_t size;
	int ret;

	memset(sc->st, 0, sizeof(*sc->st));
	ret = read_file(ix->ops, fd, &buf, &size);
	if (ret)
		return err_set(ret, "%s: cannot read the index: %s", ix->path, strerror(-ret));
	sc->st->size = size;
	sc->st->end = HEADER_LEN;
	ret = check_header(ix, buf, size);
	if (ret == 0 && size > HEADER_LEN)
		ret = scan_lines(sc, buf, size, HEADER_LEN, 0);
	free(buf);
	return ret;
}

int index_scan_from_held(struct index_hold *h, uint64_t from, index_record_fn fn, void *ctx,
			 struct index_scan_stats *st)
{
	const struct store_tier_ops *ops = h->ix->ops;
	struct scan sc = { h->ix, fn, ctx, st, 0 };
	struct store_stat fs;
	char *buf;
	size_t len;
	int ret;

	memset(st, 0, sizeof(*st));
	ret = ops->fstat(h->fd, &fs);
	if (ret)
		return err_set(ret, "%s: cannot read the index: %s", h->ix->path, strerror(-ret));
	/* from must start a line of this file: the byte before it ends one
	 * (the header's own '\n' when from is the first record's) */
	if (from < HEADER_LEN || fs.size < from || fs.size - from > SIZE_MAX / 2)
		return -ESTALE;
	len = (size_t)(fs.size - from) + 1;
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	ret = read_exact(ops, h->fd, buf, len, from - 1);
	if (ret)
		ret = err_set(ret, "%s: cannot read the index: %s", h->ix->path, strerror(-ret));
	else if (buf[0] != '\n')
		ret = -ESTALE;
	st->size = fs.size;
	st->end = from;
	if (ret == 0)
		ret = scan_lines(&sc, buf, len, 1, from - 1);
	free(buf);
	return ret;
}

int index_scan_held(struct index_hold *h, index_record_fn fn, void *ctx, struct index_scan_stats *st)
{
	struct scan sc = { h->ix, fn, ctx, st, 0 };

	return scan_fd(&sc, h->fd);
}

static int scan_locked(struct scan *sc)
{
	const struct store_tier_ops *ops = sc->ix->ops;
	int fd, ret;

	ret = ops->open_read(sc->ix->path, &fd);
	if (ret)
		return err_set(ret, "%s: cannot open the index: %s", sc->ix->path, strerror(-ret));
	/* Shared lock: an append in progress is never mistaken for a torn one. */
	ret = ops->lock(fd, 0);
	if (ret == 0) {
		ret = scan_fd(sc, fd);
		ops->unlock(fd);
	} else {
		err_set(ret, "%s: cannot lock the index: %s", sc->ix->path, strerror(-ret));
	}
	ops->close(fd);
	return ret;
}

int index_scan(struct index *ix, index_record_fn fn, void *ctx, struct index_scan_stats *st)
{
	struct scan sc = { ix, fn, ctx, st, 0 };

	return scan_locked(&sc);
}

int index_check(struct index *ix, struct index_scan_stats *st)
{
	struct scan sc = { ix, NULL, NULL, st, 1 };

	return scan_locked(&sc);
}

/* ---- checkpoint states ---- */

unsigned index_ckpt_number(const char *name)
{
	unsigned long n;
	char *end;

	if (strncmp(name, "ckpt-", 5) != 0 || name[5] < '0' || name[5] > '9')
		return 0;
	n = strtoul(name + 5, &end, 10);
	return *end || n > UINT32_MAX ? 0 : (unsigned)n;
}

static struct index_ckpt *view_get(struct index_view *v, const char *name)
{
	struct index_ckpt *c, *grown;

	/* Newest first: records nearly always concern recent checkpoints. */
	for (size_t i = v->count; i-- > 0;)
		if (strcmp(v->ckpts[i].info.name, name) == 0)
			return &v->ckpts[i];
	if (v->count == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 16;

		grown = realloc(v->ckpts, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		v->ckpts = grown;
		v->cap = cap;
	}
	c = &v->ckpts[v->count++];
	memset(c, 0, sizeof(*c));
	snprintf(c->info.name, sizeof(c->info.name), "%s", name);
	c->info.state = STORE_PARTIAL;
	c->number = index_ckpt_number(name);
	if (c->number > v->max_number)
		v->max_number = c->number;
	return c;
}

static size_t name_hash(const char *name, size_t mask)
{
	uint64_t h = 1469598103934665603ULL;   /* FNV-1a */

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 1099511628211ULL;
	return (size_t)h & mask;
}

/* The slot of name in c's table: its file's, or the free one it would take.
 * A checkpoint of 65,536 ranks has as many FILE records: a linear search
 * per record made loading the index quadratic (bench/scale). */
static uint32_t *file_slot(struct index_ckpt *c, const char *name)
{
	size_t mask = c->nslots - 1, i = name_hash(name, mask);

	while (c->slots[i] && strcmp(c->files[c->slots[i] - 1].info.name, name) != 0)
		i = (i + 1) & mask;
	return &c->slots[i];
}

/* Room in the table for one more file (at most half full) */
static int slots_grow(struct index_ckpt *c)
{
	size_t n = c->nslots ? c->nslots : 16;
	uint32_t *old = c->slots;

	if (2 * (c->nfiles + 1) <= c->nslots)
		return 0;
	while (2 * (c->nfiles + 1) > n)
		n *= 2;
	c->slots = calloc(n, sizeof(*c->slots));
	if (!c->slots) {
		c->slots = old;
		return -ENOMEM;
	}
	c->nslots = n;
	for (size_t i = 0; i < c->nfiles; i++)
		*file_slot(c, c->files[i].info.name) = (uint32_t)(i + 1);
	free(old);
	return 0;
}

static int add_file(struct index_ckpt *c, const struct index_record *r)
{
	struct index_file *f = NULL, *grown;
	uint32_t *slot;
	int fresh = 0;

	if (slots_grow(c) != 0)
		return -ENOMEM;
	slot = file_slot(c, r->name);
	if (*slot)
		f = &c->files[*slot - 1];
	if (!f) {
		if (c->nfiles == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 8;

			grown = realloc(c->files, cap * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			c->files = grown;
			c->cap = cap;
		}
		f = &c->files[c->nfiles++];
		*slot = (uint32_t)c->nfiles;
		fresh = 1;
	}
	f->annex = r->op == INDEX_ANNEX;
	f->vouched = r->vouched;
	if (fresh && !f->annex)
		c->file_records++;
	memcpy(f->info.name, r->name, sizeof(f->info.name));
	f->info.size = r->size;
	f->info.crc = r->crc;
	f->image = r->image;
	return 0;
}

/* The state rules: FILE records count only while the checkpoint is open; the
 * first COMPLETE seals it; FAILED overrides COMPLETE (damage found later) but
 * nothing revives a FAILED or PRUNED checkpoint. A COMPLETE checkpoint takes
 * ANNEX files (redundancy added later) under names it does not hold yet, so a
 * sealed file's record is never replaced; LEVEL records say how far those
 * additions got, the last one wins. */
static int view_apply(void *ctx, const struct index_record *r, uint64_t offset)
{
	struct index_view *v = ctx;
	struct index_ckpt *c = view_get(v, r->ckpt);
	enum store_state st;

	(void)offset;
	if (!c)
		return -ENOMEM;
	st = c->info.state;
	switch (r->op) {
	case INDEX_BEGIN:
		if (!c->info.begin_time)
			c->info.begin_time = r->time;
		return 0;
	case INDEX_FILE:
		return st == STORE_PARTIAL ? add_file(c, r) : 0;
	case INDEX_COMPLETE:
		if (st == STORE_PARTIAL) {
			c->info.state = STORE_COMPLETE;
			c->info.end_time = r->time;
			c->sealed_files = r->files;
			c->sealed_bytes = r->bytes;
		}
		return 0;
	case INDEX_FAILED:
		if (st == STORE_PARTIAL || st == STORE_COMPLETE) {
			c->info.state = STORE_FAILED;
			c->info.end_time = r->time;
			memcpy(c->info.reason, r->reason, sizeof(c->info.reason));
		}
		return 0;
	case INDEX_PRUNED:
		c->info.state = STORE_PRUNED;
		return 0;
	case INDEX_ANNEX:
		if (c->nslots && *file_slot(c, r->name))
			return 0;
		return st == STORE_COMPLETE ? add_file(c, r) : 0;
	case INDEX_LEVEL:
		if (st == STORE_COMPLETE) {
			snprintf(c->info.level, sizeof(c->info.level), "%.15s", r->name);
			memcpy(c->info.level_reason, r->reason, sizeof(c->info.level_reason));
		}
		return 0;
	}
	return 0;
}

static int ckpt_cmp(const void *a, const void *b)
{
	const struct index_ckpt *x = a, *y = b;

	if (x->number != y->number)
		return x->number < y->number ? -1 : 1;
	return strcmp(x->info.name, y->info.name);
}

static void view_finish(struct index_view *v)
{
	for (size_t i = 0; i < v->count; i++) {
		struct index_ckpt *c = &v->ckpts[i];

		c->info.files = (unsigned)c->nfiles;
		c->info.bytes = 0;
		for (size_t k = 0; k < c->nfiles; k++)
			c->info.bytes += c->files[k].info.size;
	}
	if (v->count > 1)
		qsort(v->ckpts, v->count, sizeof(*v->ckpts), ckpt_cmp);
}

static int view_load(struct index *ix, struct index_hold *h, struct index_view *v)
{
	int ret;

	memset(v, 0, sizeof(*v));
	ret = h ? index_scan_held(h, view_apply, v, &v->stats) : index_scan(ix, view_apply, v, &v->stats);
	if (ret == -ENOMEM)
		err_set(ret, "%s: out of memory reading the index", ix->path);
	if (ret) {
		index_view_free(v);
		return ret;
	}
	view_finish(v);
	return 0;
}

int index_view_load(struct index *ix, struct index_view *v)
{
	return view_load(ix, NULL, v);
}

int index_view_load_held(struct index_hold *h, struct index_view *v)
{
	return view_load(h->ix, h, v);
}

struct one {
	struct index_view *v;
	const char *name;
	int first;
};

static int one_apply(void *ctx, const struct index_record *r, uint64_t offset)
{
	struct one *o = ctx;
	unsigned n = index_ckpt_number(r->ckpt);

	if (n > o->v->max_number)
		o->v->max_number = n;      /* of every record read, for the next begin */
	if (o->first) {
		o->first = 0;
		if (r->op != INDEX_BEGIN || strcmp(r->ckpt, o->name) != 0)
			return -ESTALE;
	}
	return strcmp(r->ckpt, o->name) ? 0 : view_apply(o->v, r, offset);
}

int index_view_load_one_held(struct index_hold *h, const char *name, uint64_t begun_at,
			     struct index_view *v)
{
	struct one o = { v, name, 1 };
	int ret;

	memset(v, 0, sizeof(*v));
	ret = index_scan_from_held(h, begun_at, one_apply, &o, &v->stats);
	if (ret == 0 && o.first)
		ret = -ESTALE;          /* no intact record at begun_at */
	if (ret == -ENOMEM)
		err_set(ret, "%s: out of memory reading the index", h->ix->path);
	if (ret) {
		index_view_free(v);
		return ret;
	}
	view_finish(v);
	return 0;
}

void index_view_free(struct index_view *v)
{
	for (size_t i = 0; i < v->count; i++) {
		free(v->ckpts[i].files);
		free(v->ckpts[i].slots);
	}
	free(v->ckpts);
	memset(v, 0, sizeof(*v));
}

struct index_ckpt *index_view_find(const struct index_view *v, const char *name)
{
	for (size_t i = v->count; i-- > 0;)
		if (strcmp(v->ckpts[i].info.name, name) == 0)
			return &v->ckpts[i];
	return NULL;
}
