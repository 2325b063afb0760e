/* manifest.c - build, parse and validate the JSON manifest of an image.
 *
 * The manifest is the only variable-length structure a reader trusts before
 * touching chunk data, so the parser treats it as hostile: it accepts only
 * what the writer could have produced (give or take keys a later 1.x writer
 * may add, which are ignored) and derives every limit from the file it sits
 * in, so a lying manifest cannot make the reader allocate or loop beyond the
 * size of the file.
 */
#include "image/manifest.h"
#include "image/format.h"
#include "common/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FORMAT_NAME "stasis-image"

struct parse {
	const struct img_manifest_frame *frame;
	struct img_manifest *m;
	char where[64];         /* "sections[3]" or "" */
};

__attribute__((format(printf, 2, 3)))
static int bad(const struct parse *p, const char *fmt, ...)
{
	char why[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return err_set(-EBADMSG, "%s: bad manifest: %s%s%s", p->frame->name,
		       p->where, p->where[0] ? ": " : "", why);
}

static int oom(const struct parse *p)
{
	return err_set(-ENOMEM, "%s: out of memory for the manifest", p->frame->name);
}

static int get_u64(const struct parse *p, json_t *obj, const char *key, uint64_t max, uint64_t *out)
{
	json_t *v = json_object_get(obj, key);
	json_int_t n;

	if (!v)
		return bad(p, "missing '%s'", key);
	if (!json_is_integer(v))
		return bad(p, "'%s' is not an integer", key);
	n = json_integer_value(v);
	if (n < 0 || (uint64_t)n > max)
		return bad(p, "'%s' is %lld, out of range [0, %llu]", key, (long long)n,
			   (unsigned long long)max);
	*out = (uint64_t)n;
	return 0;
}

/* A string of at most IMG_NAME_MAX bytes without NUL; empty allowed unless
 * nonempty is set. */
static int get_str(const struct parse *p, json_t *obj, const char *key, int nonempty,
		   const char **out)
{
	json_t *v = json_object_get(obj, key);
	size_t len;

	if (!v)
		return bad(p, "missing '%s'", key);
	if (!json_is_string(v))
		return bad(p, "'%s' is not a string", key);
	len = json_string_length(v);
	if (len > IMG_NAME_MAX || strlen(json_string_value(v)) != len)
		return bad(p, "'%s' is too long or contains NUL", key);
	if (nonempty && len == 0)
		return bad(p, "'%s' is empty", key);
	*out = json_string_value(v);
	return 0;
}

static int parse_version(struct parse *p, json_t *root)
{
	unsigned long major, minor;
	const char *s;
	char *end;
	int ret;

	ret = get_str(p, root, "version", 1, &s);
	if (ret)
		return ret;
	if (s[0] < '0' || s[0] > '9')
		goto malformed;
	major = strtoul(s, &end, 10);
	if (*end != '.' || end[1] < '0' || end[1] > '9')
		goto malformed;
	minor = strtoul(end + 1, &end, 10);
	if (*end || major > 0xffff || minor > 0xffff)
		goto malformed;
	if (major != p->frame->major)
		return bad(p, "version %lu.%lu does not match the header's major version %u",
			   major, minor, p->frame->major);
	p->m->major = (unsigned)major;
	p->m->minor = (unsigned)minor;
	return 0;
malformed:
	return bad(p, "'version' is not of the form MAJOR.MINOR");
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* An image id: 32 lowercase hex digits. */
static int get_id(const struct parse *p, json_t *root, const char *key, uint8_t id[16])
{
	const char *s;
	int ret;

	ret = get_str(p, root, key, 1, &s);
	if (ret)
		return ret;
	if (strlen(s) != 32)
		return bad(p, "'%s' is not 32 hex digits", key);
	for (int i = 0; i < 16; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return bad(p, "'%s' is not 32 lowercase hex digits", key);
		id[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static int parse_image_id(const struct parse *p, json_t *root, uint8_t id[16])
{
	int ret = get_id(p, root, "image_id", id);

	if (ret)
		return ret;
	if (p->frame->image_id && memcmp(id, p->frame->image_id, 16) != 0)
		return bad(p, "'image_id' %s does not match the header (manifest of another image?)",
			   json_string_value(json_object_get(root, "image_id")));
	return 0;
}

/* "parent" and the optional "parent_id" (absent in images written before it
 * existed; null or absent without a parent). */
static int parse_parent(const struct parse *p, json_t *root, const uint8_t id[16])
{
	json_t *v = json_object_get(root, "parent");
	const char *s;
	int ret;

	if (!v)
		return bad(p, "missing 'parent'");
	if (!json_is_null(v)) {
		ret = get_str(p, root, "parent", 1, &s);
		if (ret)
			return ret;
		p->m->parent = strdup(s);
		if (!p->m->parent)
			return oom(p);
	}
	v = json_object_get(root, "parent_id");
	if (!v || json_is_null(v))
		return 0;
	if (!p->m->parent)
		return bad(p, "'parent_id' without a 'parent'");
	ret = get_id(p, root, "parent_id", p->m->parent_id);
	if (ret)
		return ret;
	if (memcmp(p->m->parent_id, id, 16) == 0)
		return bad(p, "'parent_id' is the image's own id");
	p->m->has_parent_id = 1;
	return 0;
}

static int parse_top(struct parse *p, json_t *root)
{
	uint8_t id[16];
	const char *s;
	json_t *v;
	uint64_t cs = 0;
	int ret;

	if (!json_is_object(root))
		return bad(p, "not a JSON object");
	ret = get_str(p, root, "format", 1, &s);
	if (ret)
		return ret;
	if (strcmp(s, FORMAT_NAME) != 0)
		return bad(p, "'format' is '%s', expected '%s'", s, FORMAT_NAME);
	ret = parse_version(p, root);
	if (ret == 0)
		ret = parse_image_id(p, root, id);
	if (ret == 0)
		ret = get_str(p, root, "created", 0, &s);
	if (ret == 0)
		ret = get_str(p, root, "compression", 0, &s);
	if (ret == 0)
		ret = get_u64(p, root, "chunk_size", IMG_CHUNK_MAX, &cs);
	if (ret)
		return ret;
	if (cs < IMG_CHUNK_MIN || cs % IMG_PAGE)
		return bad(p, "'chunk_size' %llu is not a multiple of 4096 in [4096, 64M]",
			   (unsigned long long)cs);
	p->m->chunk_size = (uint32_t)cs;
	ret = parse_parent(p, root, id);
	if (ret)
		return ret;

	v = json_object_get(root, "meta");
	if (!json_is_object(v))
		return bad(p, "'meta' is missing or not an object");
	for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it))
		if (!json_is_string(json_object_iter_value(it)))
			return bad(p, "meta '%s' is not a string", json_object_iter_key(it));
	return 0;
}

static int parse_attrs(const struct parse *p, json_t *sec)
{
	json_t *attrs = json_object_get(sec, "attrs");

	if (!attrs)
		return 0;
	if (!json_is_object(attrs))
		return bad(p, "'attrs' is not an object");
	for (void *it = json_object_iter(attrs); it; it = json_object_iter_next(attrs, it)) {
		json_t *v = json_object_iter_value(it);

		if (!json_is_string(v) && !json_is_integer(v))
			return bad(p, "attribute '%s' is neither a string nor an integer",
				   json_object_iter_key(it));
	}
	return 0;
}

/* One entry of "sections"; *pos is where it must start and becomes where the
 * next one must start. */
static int parse_section(struct parse *p, json_t *js, unsigned i, uint64_t *pos)
{
	struct img_manifest_section *s = &p->m->sec[i];
	uint64_t cs = p->m->chunk_size, end = p->frame->data_end;
	uint64_t index = 0, size = 0, stored = 0, offset = 0, chunks = 0, want;
	const char *name, *kind;
	int ret;

	snprintf(p->where, sizeof(p->where), "sections[%u]", i);
	if (!json_is_object(js))
		return bad(p, "not an object");
	ret = get_u64(p, js, "index", UINT32_MAX, &index);
	if (ret == 0 && index != i)
		return bad(p, "'index' is %llu, expected %u", (unsigned long long)index, i);
	if (ret == 0)
		ret = get_str(p, js, "name", 1, &name);
	if (ret == 0)
		ret = get_str(p, js, "kind", 0, &kind);
	if (ret == 0)
		ret = get_u64(p, js, "size", (uint64_t)INT64_MAX, &size);
	if (ret == 0)
		ret = get_u64(p, js, "stored", end, &stored);
	if (ret == 0)
		ret = get_u64(p, js, "offset", end, &offset);
	if (ret == 0)
		ret = get_u64(p, js, "chunks", UINT32_MAX, &chunks);
	if (ret == 0)
		ret = parse_attrs(p, js);
	if (ret)
		return ret;

	want = size / cs + (size % cs != 0);
	if (chunks != want)
		return bad(p, "'chunks' is %llu, but size %llu needs %llu chunks of %llu",
			   (unsigned long long)chunks, (unsigned long long)size,
			   (unsigned long long)want, (unsigned long long)cs);
	if (offset != *pos)
		return bad(p, "'offset' is %llu, expected %llu (sections must follow each other)",
			   (unsigned long long)offset, (unsigned long long)*pos);
	if (chunks == 0 && stored != 0)
		return bad(p, "'stored' is %llu for a section without chunks", (unsigned long long)stored);
	/* offset <= end was checked; chunks < 2^32, so no term can overflow. */
	if (chunks * IMG_CHUNK_HDR_LEN > end - offset ||
	    stored > end - offset - chunks * IMG_CHUNK_HDR_LEN)
		return bad(p, "chunks run past the start of the manifest at offset %llu",
			   (unsigned long long)end);
	*pos = offset + chunks * IMG_CHUNK_HDR_LEN + stored;

	s->size = size;
	s->stored = stored;
	s->offset = offset;
	s->chunks = (uint32_t)chunks;
	s->name = strdup(name);
	s->kind = strdup(kind);
	return s->name && s->kind ? 0 : oom(p);
}

static int cmp_section_name(const void *a, const void *b)
{
	const struct img_manifest_section *const *x = a, *const *y = b;

	return strcmp((*x)->name, (*y)->name);
}

/* Names identify sections for img_section_find and for parent references. */
static int check_unique_names(struct parse *p)
{
	struct img_manifest *m = p->m;
	const struct img_manifest_section **v;
	int ret = 0;

	if (m->nsec < 2)
		return 0;
	v = malloc(m->nsec * sizeof(*v));
	if (!v)
		return oom(p);
	for (unsigned i = 0; i < m->nsec; i++)
		v[i] = &m->sec[i];
	qsort(v, m->nsec, sizeof(*v), cmp_section_name);
	for (unsigned i = 1; i < m->nsec; i++) {
		if (strcmp(v[i - 1]->name, v[i]->name) == 0) {
			p->where[0] = '\0';
			ret = bad(p, "two sections are named '%s'", v[i]->name);
			break;
		}
	}
	free(v);
	return ret;
}

static int check_totals(struct parse *p, json_t *root)
{
	uint64_t size = 0, stored = 0, chunks = 0, t = 0;
	json_t *tot = json_object_get(root, "totals");
	int ret;

	p->where[0] = '\0';
	if (!json_is_object(tot))
		return bad(p, "'totals' is missing or not an object");
	snprintf(p->where, sizeof(p->where), "totals");
	for (unsigned i = 0; i < p->m->nsec; i++) {
		size += p->m->sec[i].size;   /* each < 2^63, at most 2^20 of them: may wrap */
		stored += p->m->sec[i].stored;
		chunks += p->m->sec[i].chunks;
	}
	ret = get_u64(p, tot, "sections", IMG_SECTIONS_MAX, &t);
	if (ret == 0 && t != p->m->nsec)
		return bad(p, "'sections' is %llu, but there are %u", (unsigned long long)t, p->m->nsec);
	if (ret == 0)
		ret = get_u64(p, tot, "size", UINT64_MAX, &t);
	if (ret == 0 && t != size)
		return bad(p, "'size' does not match the sum of the sections");
	if (ret == 0)
		ret = get_u64(p, tot, "stored", UINT64_MAX, &t);
	if (ret == 0 && t != stored)
		return bad(p, "'stored' does not match the sum of the sections");
	if (ret == 0)
		ret = get_u64(p, tot, "chunks", UINT64_MAX, &t);
	if (ret == 0 && t != chunks)
		return bad(p, "'chunks' does not match the sum of the sections");
	return ret;
}

static int parse_sections(struct parse *p, json_t *root)
{
	json_t *arr = json_object_get(root, "sections");
	uint64_t pos = p->frame->data_start;
	size_t n;
	int ret;

	if (!json_is_array(arr))
		return bad(p, "'sections' is missing or not an array");
	n = json_array_size(arr);
	if (n > IMG_SECTIONS_MAX)
		return bad(p, "%zu sections, more than the limit of %u", n, IMG_SECTIONS_MAX);
	p->m->sec = calloc(n ? n : 1, sizeof(*p->m->sec));
	if (!p->m->sec)
		return oom(p);
	for (size_t i = 0; i < n; i++) {
		ret = parse_section(p, json_array_get(arr, i), (unsigned)i, &pos);
		p->m->nsec = (unsigned)i + 1;   /* so free() sees what was filled */
		if (ret)
			return ret;
	}
	p->where[0] = '\0';
	if (pos != p->frame->data_end)
		return bad(p, "the sections end at offset %llu, but the manifest starts at %llu",
			   (unsigned long long)pos, (unsigned long long)p->frame->data_end);
	ret = check_unique_names(p);
	return ret ? ret : check_totals(p, root);
}

int img_manifest_parse(const char *text, size_t len, const struct img_manifest_frame *frame,
		       struct img_manifest **out)
{
	struct parse p = { .frame = frame };
	json_error_t jerr;
	json_t *root;
	int ret;

	*out = NULL;
	if (len > IMG_MANIFEST_MAX)
		return bad(&p, "%zu bytes, more than the limit of %u", len, IMG_MANIFEST_MAX);
	p.m = calloc(1, sizeof(*p.m));
	if (!p.m)
		return oom(&p);
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		ret = bad(&p, "JSON error at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
		goto out_free;
	}
	ret = parse_top(&p, root);
	if (ret == 0)
		ret = parse_sections(&p, root);
	json_decref(root);
	if (ret)
		goto out_free;
	*out = p.m;
	return 0;
out_free:
	img_manifest_free(&p.m);
	return ret;
}

void img_manifest_free(struct img_manifest **mp)
{
	struct img_manifest *m = *mp;

	if (!m)
		return;
	for (unsigned i = 0; i < m->nsec; i++) {
		free(m->sec[i].name);
		free(m->sec[i].kind);
	}
	free(m->sec);
	free(m->parent);
	free(m);
	*mp = NULL;
}

/* ---- writing ---- */

static json_t *dump_section(const struct img_manifest_out_section *s, unsigned i)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (json_object_set_new(o, "index", json_integer(i)) ||
	    json_object_set_new(o, "name", json_string(s->name)) ||
	    json_object_set_new(o, "kind", json_string(s->kind)) ||
	    json_object_set_new(o, "size", json_integer((json_int_t)s->size)) ||
	    json_object_set_new(o, "stored", json_integer((json_int_t)s->stored)) ||
	    json_object_set_new(o, "offset", json_integer((json_int_t)s->offset)) ||
	    json_object_set_new(o, "chunks", json_integer(s->chunks)) ||
	    json_object_set(o, "attrs", s->attrs)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *dump_totals(const struct img_manifest_out *in)
{
	uint64_t size = 0, stored = 0, chunks = 0;
	json_t *o = json_object();

	for (unsigned i = 0; i < in->nsec; i++) {
		size += in->sec[i].size;
		stored += in->sec[i].stored;
		chunks += in->sec[i].chunks;
	}
	if (!o)
		return NULL;
	if (json_object_set_new(o, "sections", json_integer(in->nsec)) ||
	    json_object_set_new(o, "size", json_integer((json_int_t)size)) ||
	    json_object_set_new(o, "stored", json_integer((json_int_t)stored)) ||
	    json_object_set_new(o, "chunks", json_integer((json_int_t)chunks)) ||
	    json_object_set_new(o, "zero_chunks", json_integer((json_int_t)in->zero_chunks)) ||
	    json_object_set_new(o, "sparse_chunks", json_integer((json_int_t)in->sparse_chunks)) ||
	    json_object_set_new(o, "zstd_chunks", json_integer((json_int_t)in->zstd_chunks)) ||
	    json_object_set_new(o, "parent_chunks", json_integer((json_int_t)in->parent_chunks))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static void hex_id(char out[33], const uint8_t id[16])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static json_t *dump_root(const struct img_manifest_out *in)
{
	char id[33], pid[33], created[32];
	time_t secs = (time_t)(in->created_ns / 1000000000);
	json_t *root = json_object(), *secs_arr = json_array();
	struct tm tm;

	hex_id(id, in->image_id);
	if (in->parent)
		hex_id(pid, in->parent_id);
	gmtime_r(&secs, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (!root || !secs_arr)
		goto fail;
	for (unsigned i = 0; i < in->nsec; i++)
		if (json_array_append_new(secs_arr, dump_section(&in->sec[i], i)))
			goto fail;
	if (json_object_set_new(root, "format", json_string(FORMAT_NAME)) ||
	    json_object_set_new(root, "version", json_sprintf("%d.%d", IMG_MAJOR, IMG_MINOR)) ||
	    json_object_set_new(root, "created", json_string(created)) ||
	    json_object_set_new(root, "image_id", json_string(id)) ||
	    json_object_set_new(root, "chunk_size", json_integer(in->chunk_size)) ||
	    json_object_set_new(root, "compression", json_string(in->compression)) ||
	    json_object_set_new(root, "parent", in->parent ? json_string(in->parent) : json_null()) ||
	    json_object_set_new(root, "parent_id", in->parent ? json_string(pid) : json_null()) ||
	    json_object_set(root, "meta", in->meta) ||
	    json_object_set(root, "sections", secs_arr) ||
	    json_object_set_new(root, "totals", dump_totals(in)))
		goto fail;
	json_decref(secs_arr);
	return root;
fail:
	json_decref(secs_arr);
	json_decref(root);
	return NULL;
}

int img_manifest_dump(const struct img_manifest_out *in, char **text, size_t *len)
{
	json_t *root = dump_root(in);
	char *s;

	if (!root)
		return -ENOMEM;
	s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!s)
		return -ENOMEM;
	*text = s;
	*len = strlen(s);
	return 0;
}
