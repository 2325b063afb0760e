/* decode.c - the records of a process image as JSON, and back
 * (`stasis inspect --decode`, `--encode`; docs/transparent.md, "Image
 * sections for processes"; docs/format.md, "Process records").
 *
 * Both image kinds hold the process records of pimg_format.h: a process
 * image (proc/) and a split image (split/, one rank's upper half), which
 * adds a split section (split_format.h); one of split format 4 or 5 is
 * shown converted (split_convert.c), as a restart reads it.
 *
 * Every record that an image holds is described once, as
 * a table of its fields (name, offset, size, how it prints). Decoding and
 * encoding walk the same tables, so the two cannot disagree, and encoding
 * a decoded section gives back its bytes: tests/cli/test_decode.py checks
 * that round trip on real images, as CRIU's crit-recode does. A table that
 * does not cover its record byte for byte is refused before anything is
 * decoded.
 */
#include "proc/proc.h"
#include "proc/proc_format.h"
#include "split/split_format.h"
#include "common/err.h"
#include "image/image.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum field_kind {
	F_UINT,     /* unsigned integer of the field's size (several: an array) */
	F_INT,      /* signed integer */
	F_ADDR,     /* unsigned, printed "0x..." (addresses, masks) */
	F_TEXT,     /* char array, NUL-padded */
	F_REGION_KIND,   /* enum proc_region_kind, by name where it has one */
	F_FD_KIND,       /* enum proc_fd_kind */
	F_BYTES,    /* a byte array, as one hex string */
};

struct field {
	const char *name;
	size_t off, size;           /* size of one element */
	unsigned count;             /* elements: 1, or an array's length */
	enum field_kind kind;
};

#define ONE(T, f, k) { #f, offsetof(T, f), sizeof(((T *)0)->f), 1, k }
/* The bytes the compiler leaves between field a and field b, shown as
 * they are (a round trip keeps whatever the writer left there) */
#define GAP(T, a, b) { "gap_before_" #b, offsetof(T, a) + sizeof(((T *)0)->a), 1, \
		       offsetof(T, b) - offsetof(T, a) - sizeof(((T *)0)->a), F_BYTES }
#define ARR(T, f, elem, k) { #f, offsetof(T, f), sizeof(elem), \
			     sizeof(((T *)0)->f) / sizeof(elem), k }

static const struct field header_fields[] = {
	ONE(struct pimg_rec_header, version, F_UINT), ONE(struct pimg_rec_header, pid, F_INT),
	ONE(struct pimg_rec_header, nthreads, F_UINT), ONE(struct pimg_rec_header, nregions, F_UINT),
	ONE(struct pimg_rec_header, start_code, F_ADDR), ONE(struct pimg_rec_header, end_code, F_ADDR),
	ONE(struct pimg_rec_header, start_data, F_ADDR), ONE(struct pimg_rec_header, end_data, F_ADDR),
	ONE(struct pimg_rec_header, start_brk, F_ADDR), ONE(struct pimg_rec_header, brk, F_ADDR),
	ONE(struct pimg_rec_header, start_stack, F_ADDR), ONE(struct pimg_rec_header, arg_start, F_ADDR),
	ONE(struct pimg_rec_header, arg_end, F_ADDR), ONE(struct pimg_rec_header, env_start, F_ADDR),
	ONE(struct pimg_rec_header, env_end, F_ADDR), ONE(struct pimg_rec_header, vvar_start, F_ADDR),
	ONE(struct pimg_rec_header, vvar_end, F_ADDR), ONE(struct pimg_rec_header, vclock_start, F_ADDR),
	ONE(struct pimg_rec_header, vclock_end, F_ADDR), ONE(struct pimg_rec_header, vdso_start, F_ADDR),
	ONE(struct pimg_rec_header, vdso_end, F_ADDR), ONE(struct pimg_rec_header, state_addr, F_ADDR),
	ONE(struct pimg_rec_header, umask, F_UINT), ONE(struct pimg_rec_header, cwd_len, F_UINT),
	ARR(struct pimg_rec_header, itimer, uint64_t, F_UINT),
	ONE(struct pimg_rec_header, shared_pending, F_ADDR),
	ARR(struct pimg_rec_header, rlimit, uint64_t, F_UINT),
	ONE(struct pimg_rec_header, personality, F_ADDR), ONE(struct pimg_rec_header, nrlimits, F_UINT),
	ARR(struct pimg_rec_header, auxv, uint64_t, F_ADDR), ONE(struct pimg_rec_header, auxv_len, F_UINT),
	ONE(struct pimg_rec_header, nice, F_INT),
};

static const struct field sigaction_fields[] = {
	ONE(struct pimg_rec_sigaction, handler, F_ADDR), ONE(struct pimg_rec_sigaction, flags, F_ADDR),
	ONE(struct pimg_rec_sigaction, restorer, F_ADDR), ONE(struct pimg_rec_sigaction, mask, F_ADDR),
};

static const struct field thread_fields[] = {
	ONE(struct pimg_rec_thread, tid, F_INT), ONE(struct pimg_rec_thread, flags, F_UINT),
	ONE(struct pimg_rec_thread, fs_base, F_ADDR), ONE(struct pimg_rec_thread, gs_base, F_ADDR),
	ONE(struct pimg_rec_thread, sigframe, F_ADDR), ONE(struct pimg_rec_thread, rseq_addr, F_ADDR),
	ONE(struct pimg_rec_thread, rseq_len, F_UINT), ONE(struct pimg_rec_thread, rseq_sig, F_ADDR),
	ONE(struct pimg_rec_thread, robust_head, F_ADDR), ONE(struct pimg_rec_thread, robust_len, F_UINT),
	ONE(struct pimg_rec_thread, clear_child_tid, F_ADDR), ONE(struct pimg_rec_thread, comm, F_TEXT),
	ONE(struct pimg_rec_thread, sigpending, F_ADDR), ONE(struct pimg_rec_thread, uc_size, F_UINT),
};

static const struct field region_fields[] = {
	ONE(struct pimg_rec_region, start, F_ADDR), ONE(struct pimg_rec_region, end, F_ADDR),
	ONE(struct pimg_rec_region, file_offset, F_UINT), ONE(struct pimg_rec_region, prot, F_UINT),
	ONE(struct pimg_rec_region, kind, F_REGION_KIND), ONE(struct pimg_rec_region, flags, F_UINT),
	ONE(struct pimg_rec_region, path_len, F_UINT), ONE(struct pimg_rec_region, stored_pages, F_UINT),
	ONE(struct pimg_rec_region, file_size, F_UINT), ONE(struct pimg_rec_region, file_mtime_ns, F_UINT),
	ONE(struct pimg_rec_region, file_ino, F_UINT), ONE(struct pimg_rec_region, file_dev, F_UINT),
};

static const struct field pages_fields[] = {
	ONE(struct pimg_rec_run, addr, F_ADDR), ONE(struct pimg_rec_run, npages, F_UINT),
};

static const struct field split_fields[] = {
	ONE(struct split_info, version, F_UINT), ONE(struct split_info, rank, F_INT),
	ONE(struct split_info, size, F_INT), ONE(struct split_info, tid_offset, F_UINT),
	ONE(struct split_info, uh_callbacks, F_ADDR), ONE(struct split_info, restarts, F_UINT),
	ONE(struct split_info, pad, F_UINT),
};

static const struct field fd_fields[] = {
	ONE(struct proc_fd, fd, F_INT), ONE(struct proc_fd, kind, F_FD_KIND),
	ONE(struct proc_fd, flags, F_ADDR), ONE(struct proc_fd, cloexec, F_UINT),
	ONE(struct proc_fd, offset, F_UINT), ONE(struct proc_fd, size, F_UINT),
	ONE(struct proc_fd, ino, F_UINT), ONE(struct proc_fd, dev, F_UINT),
	ONE(struct proc_fd, mode, F_UINT), ONE(struct proc_fd, pipe_size, F_UINT),
	ONE(struct proc_fd, path_len, F_UINT), ONE(struct proc_fd, origin, F_INT),
	ONE(struct proc_fd, data_len, F_UINT),
};

static const struct field socket_fields[] = {
	ONE(struct proc_socket, family, F_UINT), ONE(struct proc_socket, type, F_UINT),
	ONE(struct proc_socket, protocol, F_UINT), ONE(struct proc_socket, state, F_UINT),
	ONE(struct proc_socket, peer_ino, F_UINT), ONE(struct proc_socket, outside, F_UINT),
	ONE(struct proc_socket, reuseaddr, F_UINT), ONE(struct proc_socket, local_len, F_UINT),
	ONE(struct proc_socket, peer_len, F_UINT), ARR(struct proc_socket, local, uint8_t, F_BYTES),
	ARR(struct proc_socket, peer, uint8_t, F_BYTES), ONE(struct proc_socket, backlog, F_UINT),
	ONE(struct proc_socket, pad, F_UINT), ONE(struct proc_socket, queued, F_UINT),
};

static const struct field pty_fields[] = {
	ONE(struct proc_pty, master, F_UINT), ONE(struct proc_pty, index, F_UINT),
	ONE(struct proc_pty, locked, F_UINT), ONE(struct proc_pty, winsize_rows, F_UINT),
	ONE(struct proc_pty, winsize_cols, F_UINT), ONE(struct proc_pty, winsize_x, F_UINT),
	ONE(struct proc_pty, winsize_y, F_UINT), ARR(struct proc_pty, termios, uint8_t, F_BYTES),
	GAP(struct proc_pty, termios, queued), ONE(struct proc_pty, queued, F_UINT),
};

struct record {
	const char *name;
	const struct field *fields;
	size_t nfields, size;
};

#define RECORD(T, tab) { #T, tab, sizeof(tab) / sizeof(tab[0]), sizeof(T) }
static const struct record header_rec = RECORD(struct pimg_rec_header, header_fields);
static const struct record sigaction_rec = RECORD(struct pimg_rec_sigaction, sigaction_fields);
static const struct record thread_rec = RECORD(struct pimg_rec_thread, thread_fields);
static const struct record region_rec = RECORD(struct pimg_rec_region, region_fields);
static const struct record pages_rec = RECORD(struct pimg_rec_run, pages_fields);
static const struct record split_rec = RECORD(struct split_info, split_fields);
static const struct record fd_rec = RECORD(struct proc_fd, fd_fields);
static const struct record socket_rec = RECORD(struct proc_socket, socket_fields);
static const struct record pty_rec = RECORD(struct proc_pty, pty_fields);

static const char *const region_kinds[] = {
	[PROC_REGION_ANON] = "anon", [PROC_REGION_FILE_PRIVATE] = "file_private",
	[PROC_REGION_FILE_SHARED] = "file_shared", [PROC_REGION_SHARED_ANON] = "shared_anon",
};

static const char *const fd_kinds[] = {
	[PROC_FD_FILE] = "file", [PROC_FD_UNLINKED] = "unlinked", [PROC_FD_DIR] = "dir",
	[PROC_FD_CHAR] = "char", [PROC_FD_PIPE_READ] = "pipe_read",
	[PROC_FD_PIPE_WRITE] = "pipe_write", [PROC_FD_STDIO] = "stdio",
	[PROC_FD_EVENTFD] = "eventfd", [PROC_FD_TIMERFD] = "timerfd", [PROC_FD_EPOLL] = "epoll",
	[PROC_FD_EXTERNAL] = "external", [PROC_FD_SIGNALFD] = "signalfd",
	[PROC_FD_INOTIFY] = "inotify", [PROC_FD_SOCKET] = "socket", [PROC_FD_PTY] = "pty",
	[PROC_FD_FILE_SAVED] = "file+contents",
};

/* Do the fields cover the record, in order, without gaps or overlaps? */
static int record_check(const struct record *r)
{
	size_t at = 0;

	for (size_t i = 0; i < r->nfields; i++) {
		if (r->fields[i].off != at)
			return err_set(-EINVAL, "decode: the table of %s does not cover byte %zu",
				       r->name, at);
		at += r->fields[i].size * r->fields[i].count;
	}
	if (at != r->size)
		return err_set(-EINVAL, "decode: the table of %s covers %zu of its %zu bytes",
			       r->name, at, r->size);
	return 0;
}

static uint64_t get_uint(const unsigned char *p, size_t size)
{
	uint64_t v = 0;

	memcpy(&v, p, size);   /* little-endian, as the records are */
	return v;
}

static int64_t get_int(const unsigned char *p, size_t size)
{
	uint64_t v = get_uint(p, size);
	unsigned shift = (unsigned)(64 - 8 * size);

	return (int64_t)(v << shift) >> shift;
}

static json_t *name_or_number(const char *const *names, size_t n, uint64_t v)
{
	return v < n && names[v] ? json_string(names[v]) : json_integer((json_int_t)v);
}

/* An unsigned value: a JSON integer when it fits one, else "0x..." */
static json_t *uint_json(uint64_t v, int hex)
{
	char text[24];

	if (!hex && v <= INT64_MAX)
		return json_integer((json_int_t)v);
	snprintf(text, sizeof(text), "0x%llx", (unsigned long long)v);
	return json_string(text);
}

static json_t *element_json(const struct field *f, const unsigned char *p)
{
	switch (f->kind) {
	case F_INT:
		return json_integer(get_int(p, f->size));
	case F_ADDR:
		return uint_json(get_uint(p, f->size), 1);
	case F_REGION_KIND:
		return name_or_number(region_kinds, sizeof(region_kinds) / sizeof(*region_kinds),
				      get_uint(p, f->size));
	case F_FD_KIND:
		return name_or_number(fd_kinds, sizeof(fd_kinds) / sizeof(*fd_kinds),
				      get_uint(p, f->size));
	default:
		return uint_json(get_uint(p, f->size), 0);
	}
}

static json_t *hex_json(const unsigned char *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	char *s = malloc(2 * n + 1);
	json_t *v;

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		s[2 * i] = digits[p[i] >> 4];
		s[2 * i + 1] = digits[p[i] & 15];
	}
	s[2 * n] = 0;
	v = json_string(s);
	free(s);
	return v;
}

/* Text of at most size bytes (a path, a name): a string when it is UTF-8
 * and only NULs follow it, else {"hex": all size bytes} (a file name may
 * be any bytes), so that nothing is lost either way. */
static json_t *text_json(const char *p, size_t size)
{
	size_t n = strnlen(p, size), k = n;
	json_t *v = NULL, *o;

	while (k < size && !p[k])
		k++;
	if (k == size)
		v = json_stringn(p, n);
	if (v)
		return v;
	o = json_object();
	json_object_set_new(o, "hex", hex_json((const unsigned char *)p, size));
	return o;
}

static json_t *record_json(const struct record *r, const void *rec)
{
	const unsigned char *base = rec;
	json_t *o = json_object();

	for (size_t i = 0; o && i < r->nfields; i++) {
		const struct field *f = &r->fields[i];
		json_t *v;

		if (f->kind == F_TEXT) {
			v = text_json((const char *)base + f->off, f->size);
		} else if (f->kind == F_BYTES) {
			v = hex_json(base + f->off, f->count);
		} else if (f->count == 1) {
			v = element_json(f, base + f->off);
		} else {
			v = json_array();
			for (unsigned k = 0; v && k < f->count; k++)
				json_array_append_new(v, element_json(f, base + f->off + k * f->size));
		}
		json_object_set_new(o, f->name, v);
	}
	return o;
}

/* ---- decoding ---- */

struct cursor {
	const unsigned char *p;
	size_t left;
	const char *section;
};

static int take(struct cursor *c, void *out, size_t n)
{
	if (c->left < n)
		return err_set(-EBADMSG, "decode: section %s ends inside a record", c->section);
	memcpy(out, c->p, n);
	c->p += n;
	c->left -= n;
	return 0;
}

/* A path of len bytes (with its NUL and any padding). */
static json_t *take_text(struct cursor *c, size_t len)
{
	json_t *v;

	if (c->left < len) {
		err_set(-EBADMSG, "decode: section %s ends inside a path", c->section);
		return NULL;
	}
	v = text_json((const char *)c->p, len);
	c->p += len;
	c->left -= len;
	return v;
}

static int read_section(struct img_reader *img, const char *name, unsigned char **out,
			size_t *len)
{
	void *p;
	int ret = img_section_load(img, name, 256u << 20, &p, len);

	*out = p;
	return ret ? err_set(ret, "decode: %s", err_msg()) : 0;
}

static int decode_process(struct cursor *c, json_t *o)
{
	struct pimg_rec_header h;
	json_t *a;
	int ret = take(c, &h, sizeof(h));

	if (ret)
		return ret;
	if (h.version < PIMG_FORMAT_OLDEST)
		return err_set(-ENOTSUP, "decode: process records of version %u (before %d) are not "
			       "decoded", h.version, PIMG_FORMAT_OLDEST);
	json_object_set_new(o, "header", record_json(&header_rec, &h));
	if (c->left < h.cwd_len)
		return err_set(-EBADMSG, "decode: section process ends inside the cwd");
	{
		size_t first = strnlen((const char *)c->p, h.cwd_len);

		if (first == h.cwd_len)
			return err_set(-EBADMSG, "decode: section process has no NUL-terminated cwd");

		json_object_set_new(o, "cwd", text_json((const char *)c->p, first));
		json_object_set_new(o, "exe", text_json((const char *)c->p + first + 1,
							h.cwd_len - first - 1));
		c->p += h.cwd_len;
		c->left -= h.cwd_len;
	}
	a = json_array();
	json_object_set_new(o, "sigactions", a);
	for (unsigned i = 0; !ret && i < PROC_NSIG; i++) {
		struct pimg_rec_sigaction sa;

		ret = take(c, &sa, sizeof(sa));
		if (!ret)
			json_array_append_new(a, record_json(&sigaction_rec, &sa));
	}
	a = json_array();
	json_object_set_new(o, "threads", a);
	for (uint32_t i = 0; !ret && i < h.nthreads; i++) {
		struct pimg_rec_thread t;

		ret = take(c, &t, sizeof(t));
		if (!ret)
			json_array_append_new(a, record_json(&thread_rec, &t));
	}
	a = json_array();
	json_object_set_new(o, "regions", a);
	for (uint32_t i = 0; !ret && i < h.nregions; i++) {
		struct pimg_rec_region r;
		uint64_t nruns = 0;
		json_t *ro, *runs, *path;

		ret = take(c, &r, sizeof(r));
		if (ret)
			break;
		ro = record_json(&region_rec, &r);
		json_array_append_new(a, ro);
		path = take_text(c, r.path_len);
		if (!path)
			return -EBADMSG;
		json_object_set_new(ro, "path", path);
		ret = take(c, &nruns, sizeof(nruns));
		if (!ret && nruns > c->left / sizeof(struct pimg_rec_run))
			ret = err_set(-EBADMSG, "decode: section process has a bad run count");
		runs = json_array();
		json_object_set_new(ro, "runs", runs);
		for (uint64_t k = 0; !ret && k < nruns; k++) {
			struct pimg_rec_run pg;

			ret = take(c, &pg, sizeof(pg));
			if (!ret)
				json_array_append_new(runs, record_json(&pages_rec, &pg));
		}
	}
	if (!ret && c->left)
		ret = err_set(-EBADMSG, "decode: section process has %zu bytes after its records",
			      c->left);
	return ret;
}

static int decode_fds(struct cursor *c, json_t *a)
{
	uint64_t n = 0;
	int ret = take(c, &n, sizeof(n));

	if (!ret && n > c->left / sizeof(struct proc_fd))
		ret = err_set(-EBADMSG, "decode: section fds has a bad count");
	for (uint64_t i = 0; !ret && i < n; i++) {
		struct proc_fd f;
		json_t *fo, *path;

		ret = take(c, &f, sizeof(f));
		if (ret)
			break;
		fo = record_json(&fd_rec, &f);
		json_array_append_new(a, fo);
		path = take_text(c, f.path_len);
		if (!path)
			return -EBADMSG;
		json_object_set_new(fo, "path", path);
	}
	if (!ret && c->left)
		ret = err_set(-EBADMSG, "decode: section fds has %zu bytes after its records", c->left);
	return ret;
}

/* A descriptor's section fd.<n>: a socket's or a pty's record first (its
 * kind in the fds section), then the bytes (a pipe's or a queue's
 * contents, an unlinked file, fdinfo text) as hex. */
static int decode_file(struct cursor *c, uint32_t kind, json_t *o)
{
	const struct record *r = kind == PROC_FD_SOCKET ? &socket_rec
				 : kind == PROC_FD_PTY  ? &pty_rec : NULL;

	if (r && c->left >= r->size) {
		json_object_set_new(o, kind == PROC_FD_SOCKET ? "socket" : "pty",
				    record_json(r, c->p));
		c->p += r->size;
		c->left -= r->size;
	}
	json_object_set_new(o, "data", hex_json(c->p, c->left));
	c->left = 0;
	return 0;
}

/* The kind of descriptor n in the decoded fds, or 0. */
static uint32_t fd_kind(json_t *fds, const char *section)
{
	int n = atoi(section + 3);
	json_t *f;
	size_t i;

	json_array_foreach(fds, i, f) {
		uint64_t kind = 0;

		json_t *k = json_object_get(f, "kind");

		if (json_integer_value(json_object_get(f, "fd")) != n)
			continue;
		for (size_t j = 0; json_is_string(k) && j < sizeof(fd_kinds) / sizeof(*fd_kinds); j++)
			if (fd_kinds[j] && strcmp(fd_kinds[j], json_string_value(k)) == 0)
				kind = j;
		return (uint32_t)(json_is_integer(k) ? (uint64_t)json_integer_value(k) : kind);
	}
	return 0;
}

/* A thread section: its record, then the ucontext and xsave area as hex. */
static int decode_thread(struct cursor *c, json_t *o)
{
	struct pimg_rec_thread t;
	int ret = take(c, &t, sizeof(t));

	if (ret)
		return ret;
	json_object_set_new(o, "record", record_json(&thread_rec, &t));
	json_object_set_new(o, "context", hex_json(c->p, c->left));
	c->left = 0;
	return 0;
}

static int tables_check(void)
{
	const struct record *all[] = { &header_rec, &sigaction_rec, &thread_rec, &region_rec,
				       &pages_rec, &split_rec, &fd_rec, &socket_rec, &pty_rec };
	int ret = 0;

	for (size_t i = 0; !ret && i < sizeof(all) / sizeof(*all); i++)
		ret = record_check(all[i]);
	return ret;
}

/* A split image's split section, and its process records: *buf, either
 * its process section or, for split format 4 or 5, the converted split
 * section (the JSON says "converted_from"). */
static int split_records(struct img_reader *img, json_t *root, unsigned char **buf, size_t *len)
{
	struct split_info info;
	unsigned char *sec;
	size_t n;
	uint32_t version = 0;
	int ret = read_section(img, "split", &sec, &n);

	if (ret)
		return ret;
	if (n >= sizeof(version))
		memcpy(&version, sec, sizeof(version));
	if (version >= SPLIT_FORMAT_OLDEST && version < 6 && img_section_find(img, "process") >= 0) {
		/* what would be decoded is not the process section it has */
		ret = err_set(-EBADMSG, "decode: split format %u has no process section, this "
			      "image has one", version);
	} else if (version >= SPLIT_FORMAT_OLDEST && version < 6) {
		void *p;

		ret = split_convert(sec, n, &p, len, &info);
		*buf = p;
		if (ret)
			ret = err_set(ret, "decode: %s", err_msg());
		json_object_set_new(root, "converted_from", json_integer(version));
	} else if (version >= 6 && version <= SPLIT_FORMAT_VERSION && n == sizeof(info)) {
		memcpy(&info, sec, sizeof(info));
		ret = read_section(img, "process", buf, len);
	} else {
		ret = err_set(-ENOTSUP, "decode: split format version %u (%zu bytes), this Stasis "
			      "reads %d to %d", version, n, SPLIT_FORMAT_OLDEST, SPLIT_FORMAT_VERSION);
	}
	if (!ret)
		json_object_set_new(root, "split", record_json(&split_rec, &info));
	free(sec);
	return ret;
}

int proc_image_decode(struct img_reader *img, char **json)
{
	json_t *root = json_object(), *threads = json_object(), *files = json_object(), *o;
	unsigned char *buf = NULL;
	size_t len;
	int ret = tables_check();

	*json = NULL;
	if (!root || !threads || !files) {
		json_decref(root);
		json_decref(threads);
		json_decref(files);
		return -ENOMEM;
	}
	json_object_set_new(root, "format", json_integer(PROC_FORMAT_VERSION));
	if (!ret && img_section_find(img, "split") >= 0)
		ret = split_records(img, root, &buf, &len);
	else if (!ret)
		ret = read_section(img, "process", &buf, &len);
	if (!ret) {
		struct cursor c = { buf, len, "process" };

		o = json_object();
		json_object_set_new(root, "process", o);
		ret = decode_process(&c, o);
		free(buf);
		buf = NULL;
	}
	if (!ret && img_section_find(img, "fds") >= 0) {
		ret = read_section(img, "fds", &buf, &len);
		if (!ret) {
			struct cursor c = { buf, len, "fds" };

			o = json_array();
			json_object_set_new(root, "fds", o);
			ret = decode_fds(&c, o);
		}
		free(buf);
		buf = NULL;
	}
	json_object_set_new(root, "threads", threads);
	json_object_set_new(root, "files", files);
	for (unsigned i = 0; !ret && i < img_section_count(img); i++) {
		struct img_section_info si;
		int file;

		if (img_section_get(img, i, &si))
			continue;
		file = strcmp(si.kind, "file") == 0 && strncmp(si.name, "fd.", 3) == 0;
		if (strcmp(si.kind, "thread") && !file)
			continue;
		ret = read_section(img, si.name, &buf, &len);
		if (!ret) {
			struct cursor c = { buf, len, si.name };

			o = json_object();
			json_object_set_new(file ? files : threads, si.name, o);
			ret = file ? decode_file(&c, fd_kind(json_object_get(root, "fds"), si.name), o)
				   : decode_thread(&c, o);
		}
		free(buf);
		buf = NULL;
	}
	if (!ret) {
		*json = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
		if (!*json)
			ret = -ENOMEM;
	}
	json_decref(root);
	return ret;
}

/* ---- encoding ---- */

struct out {
	unsigned char *p;
	size_t len, cap;
};

static int put(struct out *o, const void *p, size_t n)
{
	if (o->len + n > o->cap) {
		size_t cap = o->cap ? o->cap : 4096;
		unsigned char *q;

		while (cap < o->len + n)
			cap *= 2;
		q = realloc(o->p, cap);
		if (!q)
			return -ENOMEM;
		o->p = q;
		o->cap = cap;
	}
	memcpy(o->p + o->len, p, n);
	o->len += n;
	return 0;
}

/* The bytes of a hex string into out (at most max); how many, or -1. */
static long unhex(const char *hex, unsigned char *out, size_t max)
{
	size_t n = hex ? strlen(hex) : 1;

	if (n % 2 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		char pair[3] = { hex[i], hex[i + 1], 0 }, *end;

		out[i / 2] = (unsigned char)strtoul(pair, &end, 16);
		if (*end || !pair[0] || pair[0] == '-' || pair[0] == '+' || pair[0] == ' ')
			return -1;
	}
	return (long)(n / 2);
}

/* The bytes of text_json's value v, NUL-padded to size, into out: 0, or
 * -1 when v is neither form or does not fit. */
static int text_bytes(json_t *v, unsigned char *out, size_t size)
{
	const char *s = json_string_value(v);

	memset(out, 0, size);
	if (s && strlen(s) == json_string_length(v) && strlen(s) <= size) {
		memcpy(out, s, strlen(s));
		return 0;
	}
	return json_is_object(v) && unhex(json_string_value(json_object_get(v, "hex")), out, size) >= 0
	       ? 0 : -1;
}

/* How many bytes text_json's value v holds before its padding. */
static size_t text_len(json_t *v)
{
	const char *s = json_string_value(v);
	const char *hex = json_string_value(json_object_get(v, "hex"));

	return s ? strlen(s) : hex ? strlen(hex) / 2 : 0;
}

static int value_of(const struct field *f, json_t *v, uint64_t *out)
{
	const char *const *names = f->kind == F_REGION_KIND ? region_kinds : fd_kinds;
	size_t n = f->kind == F_REGION_KIND ? sizeof(region_kinds) / sizeof(*region_kinds)
					    : sizeof(fd_kinds) / sizeof(*fd_kinds);

	if (json_is_integer(v)) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char *end;

		if (f->kind == F_REGION_KIND || f->kind == F_FD_KIND)
			for (size_t i = 0; i < n; i++)
				if (names[i] && strcmp(names[i], s) == 0) {
					*out = i;
					return 0;
				}
		if (strncmp(s, "0x", 2) == 0) {
			errno = 0;
			*out = strtoull(s + 2, &end, 16);
			if (!errno && end != s + 2 && !*end)
				return 0;
		}
	}
	return err_set(-EINVAL, "encode: field %s has a bad value", f->name);
}

static int record_from_json(const struct record *r, json_t *o, void *rec)
{
	unsigned char *base = rec;

	memset(rec, 0, r->size);
	if (!json_is_object(o))
		return err_set(-EINVAL, "encode: a %s is not an object", r->name);
	for (size_t i = 0; i < r->nfields; i++) {
		const struct field *f = &r->fields[i];
		json_t *v = json_object_get(o, f->name);

		if (!v)
			return err_set(-EINVAL, "encode: a %s has no field %s", r->name, f->name);
		if (f->kind == F_TEXT) {
			if (text_bytes(v, base + f->off, f->size))
				return err_set(-EINVAL, "encode: field %s has a bad value", f->name);
			continue;
		}
		if (f->kind == F_BYTES) {
			if (unhex(json_string_value(v), base + f->off, f->count) != (long)f->count)
				return err_set(-EINVAL, "encode: field %s is not %u bytes in hex",
					       f->name, f->count);
			continue;
		}
		if (f->count > 1 && (!json_is_array(v) || json_array_size(v) != f->count))
			return err_set(-EINVAL, "encode: field %s is not an array of %u", f->name,
				       f->count);
		for (unsigned k = 0; k < f->count; k++) {
			uint64_t x;
			int ret = value_of(f, f->count > 1 ? json_array_get(v, k) : v, &x);

			if (ret)
				return ret;
			memcpy(base + f->off + k * f->size, &x, f->size);
		}
	}
	return 0;
}

static int encode_record(struct out *o, const struct record *r, json_t *v)
{
	unsigned char rec[1024];
	int ret = r->size <= sizeof(rec) ? record_from_json(r, v, rec) : -EOVERFLOW;

	return ret ? ret : put(o, rec, r->size);
}

/* Text (a string, or {"hex"}) padded with NULs to len bytes. */
static int put_text(struct out *o, json_t *v, size_t len, const char *what)
{
	unsigned char *b = malloc(len ? len : 1);
	int ret;

	if (!b)
		return -ENOMEM;
	ret = text_bytes(v, b, len) ? err_set(-EINVAL, "encode: %s does not fit in %zu bytes",
					      what, len)
				    : put(o, b, len);
	free(b);
	return ret;
}

static int encode_process(struct out *o, json_t *p)
{
	json_t *h = json_object_get(p, "header"), *a, *v;
	struct pimg_rec_header hdr;
	size_t i;
	int ret = record_from_json(&header_rec, h, &hdr);

	if (!ret)
		ret = put(o, &hdr, sizeof(hdr));
	if (!ret) {
		json_t *cwd = json_object_get(p, "cwd");
		size_t n = text_len(cwd) + 1;

		if (n > hdr.cwd_len)
			return err_set(-EINVAL, "encode: the cwd is longer than cwd_len");
		ret = put_text(o, cwd, n, "the cwd");
		if (!ret)
			ret = put_text(o, json_object_get(p, "exe"), hdr.cwd_len - n, "the executable");
	}
	a = json_object_get(p, "sigactions");
	if (!ret && json_array_size(a) != PROC_NSIG)
		ret = err_set(-EINVAL, "encode: sigactions is not an array of %d", PROC_NSIG);
	json_array_foreach(a, i, v)
		if (!ret)
			ret = encode_record(o, &sigaction_rec, v);
	a = json_object_get(p, "threads");
	if (!ret && json_array_size(a) != hdr.nthreads)
		ret = err_set(-EINVAL, "encode: threads does not hold nthreads records");
	json_array_foreach(a, i, v)
		if (!ret)
			ret = encode_record(o, &thread_rec, v);
	a = json_object_get(p, "regions");
	if (!ret && json_array_size(a) != hdr.nregions)
		ret = err_set(-EINVAL, "encode: regions does not hold nregions records");
	json_array_foreach(a, i, v) {
		struct pimg_rec_region r;
		json_t *runs = json_object_get(v, "runs"), *run;
		uint64_t nruns = json_array_size(runs);
		size_t k;

		if (!ret)
			ret = record_from_json(&region_rec, v, &r);
		if (!ret)
			ret = put(o, &r, sizeof(r));
		if (!ret)
			ret = put_text(o, json_object_get(v, "path"), r.path_len, "a region's path");
		if (!ret)
			ret = put(o, &nruns, sizeof(nruns));
		json_array_foreach(runs, k, run)
			if (!ret)
				ret = encode_record(o, &pages_rec, run);
	}
	return ret;
}

static int encode_fds(struct out *o, json_t *a)
{
	uint64_t n = json_array_size(a);
	json_t *v;
	size_t i;
	int ret = json_is_array(a) ? put(o, &n, sizeof(n))
				   : err_set(-EINVAL, "encode: fds is not an array");

	json_array_foreach(a, i, v) {
		struct proc_fd f;

		if (!ret)
			ret = record_from_json(&fd_rec, v, &f);
		if (!ret)
			ret = put(o, &f, sizeof(f));
		if (!ret)
			ret = put_text(o, json_object_get(v, "path"), f.path_len, "a descriptor's path");
	}
	return ret;
}

/* Bytes from a hex string, appended. */
static int put_hex(struct out *o, const char *hex, const char *what)
{
	size_t n = hex ? strlen(hex) / 2 : 0;
	unsigned char *b = malloc(n ? n : 1);
	int ret;

	if (!b)
		return -ENOMEM;
	ret = unhex(hex, b, n) == (long)n ? put(o, b, n)
					  : err_set(-EINVAL, "encode: %s is not hex", what);
	free(b);
	return ret;
}

static int encode_thread(struct out *o, json_t *t)
{
	int ret = encode_record(o, &thread_rec, json_object_get(t, "record"));

	return ret ? ret : put_hex(o, json_string_value(json_object_get(t, "context")),
				   "the thread's context");
}

static int encode_file(struct out *o, json_t *f)
{
	json_t *sock = json_object_get(f, "socket"), *pty = json_object_get(f, "pty");
	int ret = sock ? encode_record(o, &socket_rec, sock)
		  : pty ? encode_record(o, &pty_rec, pty) : 0;

	return ret ? ret : put_hex(o, json_string_value(json_object_get(f, "data")),
				   "the descriptor's data");
}

int proc_image_encode(const char *json, const char *section, void **buf, size_t *len)
{
	json_error_t jerr;
	json_t *root = json_loads(json, 0, &jerr), *v;
	struct out o = { NULL, 0, 0 };
	int ret = tables_check();

	*buf = NULL;
	*len = 0;
	if (!root)
		return err_set(-EINVAL, "encode: not JSON: %s (line %d)", jerr.text, jerr.line);
	if (!ret && strcmp(section, "process") == 0)
		ret = encode_process(&o, json_object_get(root, "process"));
	else if (!ret && strcmp(section, "fds") == 0)
		ret = encode_fds(&o, json_object_get(root, "fds"));
	else if (!ret && strcmp(section, "split") == 0 && json_object_get(root, "converted_from"))
		ret = err_set(-ENOTSUP, "encode: this image's split section was converted from "
			      "format %lld, which is not written", (long long)json_integer_value(
			      json_object_get(root, "converted_from")));
	else if (!ret && strcmp(section, "split") == 0)
		ret = encode_record(&o, &split_rec, json_object_get(root, "split"));
	else if (!ret && (v = json_object_get(json_object_get(root, "threads"), section)))
		ret = encode_thread(&o, v);
	else if (!ret && (v = json_object_get(json_object_get(root, "files"), section)))
		ret = encode_file(&o, v);
	else if (!ret)
		ret = err_set(-ENOENT, "encode: the decoded image has no section %s", section);
	json_decref(root);
	if (ret) {
		free(o.p);
		return ret;
	}
	*buf = o.p;
	*len = o.len;
	return 0;
}
