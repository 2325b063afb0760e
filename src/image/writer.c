/* writer.c - stream sections into an image (format: docs/format.md).
 *
 * The caller's thread only copies bytes into the chunk being filled. A full
 * chunk becomes a job in a small ring of slots; worker threads find its zero
 * pages (compacting the others in place), compress it and checksum it; one
 * emitter thread hands finished chunks to the sink strictly in job order, so
 * the sink's I/O for chunk N overlaps the work on chunk N+1 and the copy of
 * chunk N+2. The ring holds threads + 3 slots: one filling, one per worker,
 * one being written, one of slack. Runs of ZERO and PARENT chunks are a
 * single job without a buffer, so a terabyte hole costs no memory.
 *
 * With threads == 0 the same steps run inline on the caller's thread.
 *
 * Errors of the sink (and of the fault point before each chunk) are sticky:
 * the emitter records the first one with its message, later jobs are dropped,
 * and every later call returns it.
 */
#include "image/image.h"
#include "image/format.h"
#include "image/manifest.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

/* Room before a slot's data for the chunk header and the sparse bitmap, so
 * header + payload leave in one sink call. A page keeps the data aligned. */
#define SLOT_PREFIX IMG_PAGE
#define THREADS_MAX 64
#define RUN_BATCH   64          /* chunk headers per sink call in a run */

enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_QUEUED, SLOT_BUSY, SLOT_DONE };
enum slot_kind { SLOT_DATA, SLOT_RUN };

struct wsec {
	char *name;
	char *kind;
	json_t *attrs;
	uint32_t index;
	uint64_t size;          /* caller: bytes appended */
	uint32_t chunks;        /* caller: chunks submitted */
	int tail_closed;        /* caller: a partial parent chunk ended the section */
	uint64_t stored;        /* emitter: payload bytes handed to the sink */
};

struct slot {
	enum slot_state state;
	enum slot_kind kind;
	uint64_t job;           /* job number, set when the slot is taken */
	struct wsec *sec;
	uint32_t seq;           /* (first) chunk's number within the section */
	uint32_t len;           /* DATA: bytes filled; RUN: raw_len of all but the last */
	uint32_t count;         /* RUN: chunks */
	uint32_t last_len;      /* RUN: raw_len of the last chunk */
	uint32_t flags;         /* RUN: ZERO or PARENT; DATA: set by chunk_process */
	unsigned char *mem;     /* DATA: SLOT_PREFIX + chunk_size bytes */
	const unsigned char *src; /* DATA: the caller's stable bytes (img_write_stable), or NULL */
	int direct;             /* DATA result: header in mem, payload straight from src */
	unsigned char *out;     /* DATA result: chunk header + payload */
	size_t out_len;
	uint32_t payload_crc;   /* DATA result: the header's payload CRC */
};

struct worker {
	struct img_writer *w;
	pthread_t tid;
	int started;
	ZSTD_CCtx *cctx;
	unsigned char *zbuf;
	size_t zcap;
};

struct img_writer {
	img_sink_fn sink;
	img_sink_crc_fn sink_crc; /* or NULL */
	void *ctx;
	uint32_t chunk_size;
	unsigned threads;
	int level;              /* zstd level, 0: no compression */
	char compression[32];
	char *parent;
	uint8_t parent_id[16];
	uint8_t id[16];
	int64_t created_ns;
	json_t *meta;
	json_t *names;          /* set of section names */

	struct wsec **secs;
	unsigned nsec, seccap;
	struct wsec *cur;       /* the open section */
	struct slot *fill;      /* the slot being filled */

	struct slot *slots;
	unsigned nslots;
	struct worker *workers; /* threads of them, or one used inline */
	unsigned nworkers;
	pthread_t emitter;
	int emitter_started;
	pthread_mutex_t lock;
	pthread_cond_t cv_work, cv_emit, cv_free;
	uint64_t next_job, next_proc, next_emit;
	int stop;

	int err;                /* sticky; errmsg is written before err is published */
	char errmsg[512];
	int finished;

	/* Owned by whoever emits (the emitter thread, or the caller inline). */
	uint64_t pos;
	uint64_t zero_chunks, sparse_chunks, zstd_chunks, parent_chunks;
};

void img_writer_opts_default(struct img_writer_opts *opts)
{
	opts->compress = cfg_str(CFG_COMPRESS);
	opts->level = (unsigned)cfg_u64(CFG_COMPRESS_LEVEL);
	opts->threads = (unsigned)cfg_u64(CFG_THREADS);
	opts->chunk_size = (size_t)cfg_u64(CFG_CHUNK_SIZE);
	opts->parent = NULL;
	opts->parent_id = NULL;
}

/* ---- errors ---- */

/* Record the first failure with the message the failing thread saw. Called
 * under w->lock when threaded. */
static void record_err(struct img_writer *w, int code)
{
	const char *msg = err_msg();

	if (__atomic_load_n(&w->err, __ATOMIC_RELAXED))
		return;
	if (msg[0])
		snprintf(w->errmsg, sizeof(w->errmsg), "%s", msg);
	else
		snprintf(w->errmsg, sizeof(w->errmsg), "writing image: %s", strerror(-code));
	__atomic_store_n(&w->err, code, __ATOMIC_RELEASE);
}

static int failed(struct img_writer *w)
{
	return __atomic_load_n(&w->err, __ATOMIC_ACQUIRE);
}

/* Return the sticky error with its message in the caller's thread. */
static int sticky(struct img_writer *w)
{
	int code = failed(w);

	return err_set(code, "%s", w->errmsg);
}

/* ---- chunk processing (worker threads or inline) ---- */

static int page_is_zero(const unsigned char *p, size_t len)
{
	unsigned char acc = 0;
	size_t i = 0;

	for (; i + 64 <= len; i += 64) {
		uint64_t v[8];

		memcpy(v, p + i, 64);
		if (v[0] | v[1] | v[2] | v[3] | v[4] | v[5] | v[6] | v[7])
			return 0;
	}
	for (; i < len; i++)
		acc |= p[i];
	return acc == 0;
}

static void put_chunk_header(unsigned char *dst, const struct img_disk_chunk *src)
{
	struct img_disk_chunk h = *src;

	h.magic = IMG_CHUNK_MAGIC;
	h.reserved[0] = h.reserved[1] = 0;
	fmt_chunk_swap(&h);
	h.hdr_crc = htole32(crc32c(0, &h, offsetof(struct img_disk_chunk, hdr_crc)));
	memcpy(dst, &h, sizeof(h));
}

/* Keep only the non-zero pages (marked in bitmap), in order, at data. */
static uint32_t compact_pages(unsigned char *data, uint32_t raw, const uint8_t *bitmap)
{
	uint32_t out = 0;

	for (uint32_t i = 0, off = 0; off < raw; i++, off += IMG_PAGE) {
		uint32_t plen = raw - off < IMG_PAGE ? raw - off : IMG_PAGE;

		if (!(bitmap[i / 8] & (1u << (i % 8))))
			continue;
		if (out != off)
			memmove(data + out, data + off, plen);
		out += plen;
	}
	return out;
}

/* A chunk of the caller's stable bytes (img_write_stable) without a zero
 * page is stored as it is: its header goes into the slot and its payload
 * to the sink straight from the caller's memory. Any other is copied into
 * the slot here, on the worker, and processed as a filled one. */
static int chunk_direct(struct slot *s)
{
	for (uint32_t off = 0; off < s->len; off += IMG_PAGE)
		if (page_is_zero(s->src + off, s->len - off < IMG_PAGE ? s->len - off : IMG_PAGE)) {
			memcpy(s->mem + SLOT_PREFIX, s->src, s->len);
			return 0;
		}
	return 1;
}

/* Turn a filled DATA slot into chunk header + payload (s->out). */
static void chunk_process(struct img_writer *w, struct worker *k, struct slot *s)
{
	unsigned char *data = s->mem + SLOT_PREFIX, *payload = data;
	uint32_t raw = s->len, bmlen = fmt_bitmap_len(raw), nonzero = 0, stored = raw;
	uint8_t bitmap[IMG_BITMAP_MAX];
	struct img_disk_chunk h = { 0 };

	s->direct = s->src && chunk_direct(s);
	if (s->direct) {
		h.section = s->sec->index;
		h.seq = s->seq;
		h.offset = (uint64_t)s->seq * w->chunk_size;
		h.raw_len = h.stored_len = raw;
		h.payload_crc = crc32c(0, s->src, raw);
		s->payload_crc = h.payload_crc;
		s->out = s->mem;
		put_chunk_header(s->out, &h);
		s->out_len = IMG_CHUNK_HDR_LEN + raw;
		s->flags = 0;
		return;
	}
	memset(bitmap, 0, bmlen);
	for (uint32_t i = 0, off = 0; off < raw; i++, off += IMG_PAGE) {
		uint32_t plen = raw - off < IMG_PAGE ? raw - off : IMG_PAGE;

		if (!page_is_zero(data + off, plen)) {
			bitmap[i / 8] |= (uint8_t)(1u << (i % 8));
			nonzero += plen;
		}
	}
	if (nonzero == 0) {
		h.flags = IMG_CHUNK_ZERO;
		stored = 0;
	} else if (bmlen + nonzero < raw) {
		compact_pages(data, raw, bitmap);
		payload = data - bmlen;
		memcpy(payload, bitmap, bmlen);
		stored = bmlen + nonzero;
		h.flags = IMG_CHUNK_SPARSE;
	}
	if (w->level && stored) {
		size_t c = ZSTD_compress2(k->cctx, k->zbuf, k->zcap, payload, stored);

		/* Keep it only if smaller; a compression error just means raw. */
		if (!ZSTD_isError(c) && c < stored) {
			memcpy(payload, k->zbuf, c);
			stored = (uint32_t)c;
			h.flags |= IMG_CHUNK_ZSTD;
		}
	}
	h.section = s->sec->index;
	h.seq = s->seq;
	h.offset = (uint64_t)s->seq * w->chunk_size;
	h.raw_len = raw;
	h.stored_len = stored;
	h.payload_crc = crc32c(0, payload, stored);
	s->payload_crc = h.payload_crc;
	s->out = payload - IMG_CHUNK_HDR_LEN;
	put_chunk_header(s->out, &h);
	s->out_len = IMG_CHUNK_HDR_LEN + stored;
	s->flags = h.flags;
}

/* ---- output (the emitter thread, or inline) ---- */

static int sink_write(struct img_writer *w, const void *buf, size_t len)
{
	int ret;

	err_clear();
	ret = w->sink(w->ctx, buf, len);
	if (ret > 0)
		ret = 0;        /* a sink returning a byte count consumed it all */
	if (ret == 0)
		w->pos += len;
	return ret;
}

/* A chunk: its header (hdr_len bytes) then a payload whose CRC the header
 * holds. A sink that takes CRCs gets the chunk's from it: no second pass
 * over the payload. */
static int sink_write_chunk(struct img_writer *w, const unsigned char *buf, size_t len,
			    size_t hdr_len, uint32_t payload_crc)
{
	int ret;

	if (!w->sink_crc)
		return sink_write(w, buf, len);
	err_clear();
	ret = w->sink_crc(w->ctx, buf, len, crc32c_combine(crc32c(0, buf, hdr_len), payload_crc,
							   len - hdr_len));
	if (ret > 0)
		ret = 0;
	if (ret == 0)
		w->pos += len;
	return ret;
}

/* Say where in the image a sink (or fault point) failed, after its own
 * message, which names the file. */
__attribute__((format(printf, 2, 3)))
static int sink_fail(int ret, const char *fmt, ...)
{
	char why[400], where[160];
	va_list ap;

	snprintf(why, sizeof(why), "%s", err_msg()[0] ? err_msg() : strerror(-ret));
	va_start(ap, fmt);
	vsnprintf(where, sizeof(where), fmt, ap);
	va_end(ap);
	return err_set(ret, "%s (%s)", why, where);
}

static int chunk_fail(struct img_writer *w, const struct wsec *sec, uint32_t seq, int ret)
{
	return sink_fail(ret, "writing section '%.100s' chunk %u at image offset %llu", sec->name,
			 seq, (unsigned long long)w->pos);
}

static void count_chunk(struct img_writer *w, uint32_t flags, uint64_t n)
{
	if (flags & IMG_CHUNK_ZERO)
		w->zero_chunks += n;
	if (flags & IMG_CHUNK_SPARSE)
		w->sparse_chunks += n;
	if (flags & IMG_CHUNK_ZSTD)
		w->zstd_chunks += n;
	if (flags & IMG_CHUNK_PARENT)
		w->parent_chunks += n;
}

static int emit_data(struct img_writer *w, struct slot *s)
{
	int ret = FAULT(IMAGE_CHUNK_WRITE);

	if (ret == 0 && s->direct) {
		ret = sink_write(w, s->out, IMG_CHUNK_HDR_LEN);
		ret = ret ? ret : sink_write_chunk(w, s->src, s->len, 0, s->payload_crc);
	} else if (ret == 0) {
		ret = sink_write_chunk(w, s->out, s->out_len, IMG_CHUNK_HDR_LEN, s->payload_crc);
	}
	if (ret)
		return chunk_fail(w, s->sec, s->seq, ret);
	s->sec->stored += s->out_len - IMG_CHUNK_HDR_LEN;
	count_chunk(w, s->flags, 1);
	return 0;
}

/* Headers of a run of ZERO or PARENT chunks, RUN_BATCH per sink call. A fault
 * at chunk i still hands over the chunks before it, as it would one by one. */
static int emit_run(struct img_writer *w, struct slot *s)
{
	unsigned char buf[RUN_BATCH * IMG_CHUNK_HDR_LEN];
	struct img_disk_chunk h = { .flags = s->flags, .section = s->sec->index };
	uint32_t n = 0, done = 0;
	int ret = 0;

	for (uint32_t i = 0; i < s->count; i++) {
		ret = FAULT(IMAGE_CHUNK_WRITE);
		if (ret)
			break;
		h.seq = s->seq + i;
		h.offset = (uint64_t)h.seq * w->chunk_size;
		h.raw_len = i + 1 == s->count ? s->last_len : s->len;
		put_chunk_header(buf + n * IMG_CHUNK_HDR_LEN, &h);
		if (++n == RUN_BATCH || i + 1 == s->count) {
			ret = sink_write(w, buf, n * IMG_CHUNK_HDR_LEN);
			if (ret)
				return chunk_fail(w, s->sec, s->seq + done, ret);
			done += n;
			n = 0;
		}
	}
	if (ret && n) {
		char msg[400];
		int ret2;

		snprintf(msg, sizeof(msg), "%s", err_msg());
		ret2 = sink_write(w, buf, n * IMG_CHUNK_HDR_LEN);
		if (ret2)
			return chunk_fail(w, s->sec, s->seq + done, ret2);
		err_set(ret, "%s", msg);
		done += n;
	}
	count_chunk(w, s->flags, done);
	return ret ? chunk_fail(w, s->sec, s->seq + done, ret) : 0;
}

static int emit(struct img_writer *w, struct slot *s)
{
	return s->kind == SLOT_DATA ? emit_data(w, s) : emit_run(w, s);
}

/* ---- threads ---- */

static void *worker_main(void *arg)
{
	struct worker *k = arg;
	struct img_writer *w = k->w;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct slot *s;
		uint64_t job;

		while (!w->stop && w->next_proc >= w->next_job)
			pthread_cond_wait(&w->cv_work, &w->lock);
		if (w->stop)
			break;
		job = w->next_proc++;
		s = &w->slots[job % w->nslots];
		/* A RUN needs no work and may even be written out already. */
		if (s->job != job || s->state != SLOT_QUEUED)
			continue;
		s->state = SLOT_BUSY;
		pthread_mutex_unlock(&w->lock);
		if (!failed(w))
			chunk_process(w, k, s);
		pthread_mutex_lock(&w->lock);
		s->state = SLOT_DONE;
		pthread_cond_signal(&w->cv_emit);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void *emitter_main(void *arg)
{
	struct img_writer *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct slot *s = &w->slots[w->next_emit % w->nslots];
		int ret = 0;

		while (!w->stop && !(w->next_emit < w->next_job && s->job == w->next_emit &&
				     s->state == SLOT_DONE))
			pthread_cond_wait(&w->cv_emit, &w->lock);
		if (w->stop)
			break;
		pthread_mutex_unlock(&w->lock);
		if (!failed(w))
			ret = emit(w, s);
		pthread_mutex_lock(&w->lock);
		if (ret)
			record_err(w, ret);
		s->state = SLOT_FREE;
		w->next_emit++;
		pthread_cond_broadcast(&w->cv_free);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void stop_threads(struct img_writer *w)
{
	if (!w->threads)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_broadcast(&w->cv_work);
	pthread_cond_broadcast(&w->cv_emit);
	pthread_cond_broadcast(&w->cv_free);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->nworkers; i++) {
		if (w->workers[i].started)
			pthread_join(w->workers[i].tid, NULL);
		w->workers[i].started = 0;
	}
	if (w->emitter_started)
		pthread_join(w->emitter, NULL);
	w->emitter_started = 0;
}

static int start_threads(struct img_writer *w)
{
	int ret;

	for (unsigned i = 0; i < w->nworkers; i++) {
		ret = -pthread_create(&w->workers[i].tid, NULL, worker_main, &w->workers[i]);
		if (ret)
			goto fail;
		w->workers[i].started = 1;
	}
	ret = -pthread_create(&w->emitter, NULL, emitter_main, w);
	if (ret)
		goto fail;
	w->emitter_started = 1;
	return 0;
fail:
	stop_threads(w);
	return err_set(ret, "image writer: cannot start threads: %s", strerror(-ret));
}

/* ---- the job ring, caller side ---- */

/* Take the slot of the next job, waiting for the emitter to free it. */
static int slot_take(struct img_writer *w, enum slot_kind kind, struct slot **out)
{
	struct slot *s = &w->slots[w->next_job % w->nslots];

	if (w->threads) {
		pthread_mutex_lock(&w->lock);
		while (s->state != SLOT_FREE && !failed(w))
			pthread_cond_wait(&w->cv_free, &w->lock);
		if (!failed(w)) {
			s->state = SLOT_FILLING;
			s->job = w->next_job;
		}
		pthread_mutex_unlock(&w->lock);
	} else {
		s->state = SLOT_FILLING;
		s->job = w->next_job;
	}
	if (failed(w))
		return sticky(w);
	if (kind == SLOT_DATA && !s->mem) {
		s->mem = aligned_alloc(IMG_PAGE, SLOT_PREFIX + w->chunk_size);
		if (!s->mem) {
			s->state = SLOT_FREE;
			return err_set(-ENOMEM, "image writer: out of memory for a chunk buffer");
		}
	}
	s->kind = kind;
	s->sec = w->cur;
	s->seq = w->cur->chunks;
	s->src = NULL;
	s->direct = 0;
	*out = s;
	return 0;
}

static int slot_submit(struct img_writer *w, struct slot *s)
{
	int ret = 0;

	if (!w->threads) {
		if (s->kind == SLOT_DATA)
			chunk_process(w, &w->workers[0], s);
		ret = emit(w, s);
		s->state = SLOT_FREE;
		w->next_job++;
		if (ret) {
			record_err(w, ret);
			return sticky(w);
		}
		return 0;
	}
	pthread_mutex_lock(&w->lock);
	s->state = s->kind == SLOT_DATA ? SLOT_QUEUED : SLOT_DONE;
	w->next_job++;
	if (s->kind == SLOT_DATA)
		pthread_cond_signal(&w->cv_work);
	else
		pthread_cond_signal(&w->cv_emit);
	pthread_mutex_unlock(&w->lock);
	return failed(w) ? sticky(w) : 0;
}

static int submit_fill(struct img_writer *w)
{
	struct slot *s = w->fill;

	w->fill = NULL;
	w->cur->chunks++;
	return slot_submit(w, s);
}

static int submit_run(struct img_writer *w, uint32_t flags, uint32_t count, uint32_t last_len)
{
	struct slot *s;
	int ret = slot_take(w, SLOT_RUN, &s);

	if (ret)
		return ret;
	s->flags = flags;
	s->count = count;
	s->len = w->chunk_size;
	s->last_len = last_len;
	w->cur->chunks += count;
	return slot_submit(w, s);
}

/* Wait until every submitted job is written out. */
static void drain(struct img_writer *w)
{
	if (!w->threads)
		return;
	pthread_mutex_lock(&w->lock);
	while (w->next_emit < w->next_job)
		pthread_cond_wait(&w->cv_free, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/* ---- public API ---- */

static int parse_opts(struct img_writer *w, const struct img_writer_opts *o)
{
	const char *c = o->compress ? o->compress : "none";

	if (o->chunk_size < IMG_CHUNK_MIN || o->chunk_size > IMG_CHUNK_MAX || o->chunk_size % IMG_PAGE)
		return err_set(-EINVAL, "image writer: chunk size %zu is not a multiple of 4K in [4K, 64M]",
			       o->chunk_size);
	if (o->threads > THREADS_MAX)
		return err_set(-EINVAL, "image writer: %u threads, at most %d", o->threads, THREADS_MAX);
	if (strcmp(c, "zstd") == 0) {
		if (o->level > (unsigned)ZSTD_maxCLevel())
			return err_set(-EINVAL, "image writer: zstd level %u, at most %d", o->level,
				       ZSTD_maxCLevel());
		w->level = o->level ? (int)o->level : ZSTD_CLEVEL_DEFAULT;
		snprintf(w->compression, sizeof(w->compression), "zstd:%d", w->level);
	} else if (strcmp(c, "none") == 0) {
		snprintf(w->compression, sizeof(w->compression), "none");
	} else {
		return err_set(-EINVAL, "image writer: unknown compression '%s' (expected none or zstd)", c);
	}
	if (!o->parent != !o->parent_id)
		return err_set(-EINVAL, "image writer: a parent image needs both its name and its id "
			       "(parent %s, parent_id %s)", o->parent ? "set" : "unset",
			       o->parent_id ? "set" : "unset");
	if (o->parent) {
		json_t *utf8 = json_string(o->parent);

		/* Checked now, not when the manifest is built after all the data. */
		json_decref(utf8);
		if (!o->parent[0] || strlen(o->parent) > IMG_NAME_MAX || !utf8)
			return err_set(-EINVAL, "image writer: bad parent image name '%.64s' "
				       "(empty, too long or not valid UTF-8)", o->parent);
		w->parent = strdup(o->parent);
		if (!w->parent)
			return -ENOMEM;
		memcpy(w->parent_id, o->parent_id, sizeof(w->parent_id));
	}
	w->chunk_size = (uint32_t)o->chunk_size;
	w->threads = o->threads;
	return 0;
}

static int worker_init(struct img_writer *w, struct worker *k)
{
	k->w = w;
	if (!w->level)
		return 0;
	k->cctx = ZSTD_createCCtx();
	k->zcap = ZSTD_compressBound(w->chunk_size + IMG_BITMAP_MAX);
	k->zbuf = malloc(k->zcap);
	if (!k->cctx || !k->zbuf)
		return -ENOMEM;
	if (ZSTD_isError(ZSTD_CCtx_setParameter(k->cctx, ZSTD_c_compressionLevel, w->level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(k->cctx, ZSTD_c_checksumFlag, 1)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(k->cctx, ZSTD_c_contentSizeFlag, 1)))
		return err_set(-EINVAL, "image writer: zstd refused level %d", w->level);
	return 0;
}

static void make_id(struct img_writer *w)
{
	struct timespec ts;
	uint64_t a, b;

	clock_gettime(CLOCK_REALTIME, &ts);
	w->created_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	if (getrandom(w->id, sizeof(w->id), 0) == (ssize_t)sizeof(w->id))
		return;
	/* No entropy source: unique enough to tell images apart, which is all
	 * the id is for. */
	a = (uint64_t)w->created_ns;
	b = (uint64_t)getpid() << 32 ^ (uintptr_t)w;
	memcpy(w->id, &a, 8);
	memcpy(w->id + 8, &b, 8);
}

static int write_header(struct img_writer *w)
{
	struct img_disk_header h = {
		.major = IMG_MAJOR,
		.minor = IMG_MINOR,
		.header_len = IMG_HEADER_LEN,
		.created_ns = (uint64_t)w->created_ns,
	};
	int ret;

	memcpy(h.magic, IMG_MAGIC, IMG_MAGIC_LEN);
	memcpy(h.image_id, w->id, sizeof(h.image_id));
	fmt_header_swap(&h);
	h.crc = htole32(crc32c(0, &h, offsetof(struct img_disk_header, crc)));
	ret = sink_write(w, &h, sizeof(h));
	return ret ? sink_fail(ret, "writing the image header") : 0;
}

static int writer_init(struct img_writer *w, const struct img_writer_opts *opts)
{
	int ret = parse_opts(w, opts);

	if (ret)
		return ret;
	make_id(w);
	w->meta = json_object();
	w->names = json_object();
	w->nworkers = w->threads ? w->threads : 1;
	w->nslots = w->threads ? w->threads + 3 : 1;
	w->workers = calloc(w->nworkers, sizeof(*w->workers));
	w->slots = calloc(w->nslots, sizeof(*w->slots));
	if (!w->meta || !w->names || !w->workers || !w->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < w->nworkers; i++) {
		ret = worker_init(w, &w->workers[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int img_writer_create(img_sink_fn sink, void *ctx, const struct img_writer_opts *opts,
		      struct img_writer **out)
{
	struct img_writer *w = calloc(1, sizeof(*w));
	int ret;

	*out = NULL;
	if (!w)
		return err_set(-ENOMEM, "image writer: out of memory");
	w->sink = sink;
	w->ctx = ctx;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cv_work, NULL);
	pthread_cond_init(&w->cv_emit, NULL);
	pthread_cond_init(&w->cv_free, NULL);
	ret = writer_init(w, opts);
	if (ret == 0)
		ret = write_header(w);
	if (ret == 0 && w->threads)
		ret = start_threads(w);
	if (ret) {
		if (ret == -ENOMEM)
			err_set(ret, "image writer: out of memory");
		img_writer_free(&w);
		return ret;
	}
	*out = w;
	return 0;
}

void img_writer_sink_crc(struct img_writer *w, img_sink_crc_fn sink_crc)
{
	w->sink_crc = sink_crc;
}

int img_writer_id(const struct img_writer *w, uint8_t id[16])
{
	memcpy(id, w->id, sizeof(w->id));
	return 0;
}

/* Common checks of every call that adds to the open section. */
static int check_open(struct img_writer *w, const char *what)
{
	if (failed(w))
		return sticky(w);
	if (w->finished)
		return err_set(-EINVAL, "image writer: %s after finish", what);
	if (!w->cur)
		return err_set(-EINVAL, "image writer: %s outside a section", what);
	return 0;
}

static int check_append(struct img_writer *w, const char *what, size_t len)
{
	struct wsec *s = w->cur;
	int ret = check_open(w, what);

	if (ret)
		return ret;
	if (s->tail_closed && len)
		return err_set(-EINVAL, "image writer: section '%s' ended with a partial parent chunk; "
			       "nothing may follow it", s->name);
	/* Sizes stay below 2^63 (the manifest's integers) and chunk counts below 2^32. */
	if (len > (uint64_t)INT64_MAX - s->size ||
	    (s->size + len) / w->chunk_size >= UINT32_MAX)
		return err_set(-EFBIG, "image writer: section '%s' too large", s->name);
	return 0;
}

int img_writer_meta(struct img_writer *w, const char *key, const char *value)
{
	json_t *v;

	if (w->finished)
		return err_set(-EINVAL, "image writer: meta after finish");
	if (strlen(key) > IMG_NAME_MAX || strlen(value) > IMG_NAME_MAX)
		return err_set(-EINVAL, "image writer: meta '%.64s' too long", key);
	v = json_string(value);
	if (!v || json_object_set_new(w->meta, key, v))
		return err_set(-EINVAL, "image writer: meta '%.64s' is not valid UTF-8", key);
	return 0;
}

static int section_add(struct img_writer *w, const char *kind, const char *name)
{
	struct wsec *s;

	if (w->nsec == w->seccap) {
		unsigned cap = w->seccap ? 2 * w->seccap : 16;
		struct wsec **v = realloc(w->secs, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->secs = v;
		w->seccap = cap;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->name = strdup(name);
	s->kind = strdup(kind);
	s->attrs = json_object();
	s->index = w->nsec;
	w->secs[w->nsec++] = s;     /* owned from here, even if incomplete */
	if (!s->name || !s->kind || !s->attrs)
		return -ENOMEM;
	w->cur = s;
	return 0;
}

int img_section_begin(struct img_writer *w, const char *kind, const char *name)
{
	json_t *k, *n;

	if (failed(w))
		return sticky(w);
	if (w->finished || w->cur)
		return err_set(-EINVAL, "image writer: section '%.64s' begun %s", name,
			       w->finished ? "after finish" : "while another is open");
	if (!name[0] || strlen(name) > IMG_NAME_MAX || strlen(kind) > IMG_NAME_MAX)
		return err_set(-EINVAL, "image writer: section name empty or too long");
	if (w->nsec >= IMG_SECTIONS_MAX)
		return err_set(-E2BIG, "image writer: more than %u sections", IMG_SECTIONS_MAX);
	k = json_string(kind);
	n = json_string(name);
	json_decref(k);
	json_decref(n);
	if (!k || !n)
		return err_set(-EINVAL, "image writer: section name or kind is not valid UTF-8");
	if (json_object_get(w->names, name))
		return err_set(-EEXIST, "image writer: a section named '%.200s' already exists", name);
	if (json_object_set_new(w->names, name, json_true()) || section_add(w, kind, name))
		return err_set(-ENOMEM, "image writer: out of memory");
	return 0;
}

static int set_attr(struct img_writer *w, const char *key, json_t *v)
{
	int ret = check_open(w, "attribute");

	if (ret) {
		json_decref(v);
		return ret;
	}
	/* json_object_set_new takes v even when it fails; nothing else does. */
	if (v && strlen(key) > IMG_NAME_MAX) {
		json_decref(v);
		v = NULL;
	}
	if (!v || json_object_set_new(w->cur->attrs, key, v))
		return err_set(-EINVAL, "image writer: bad attribute '%.64s' of section '%s' "
			       "(too long or not valid UTF-8)", key, w->cur->name);
	return 0;
}

int img_section_attr(struct img_writer *w, const char *key, const char *value)
{
	return set_attr(w, key, strlen(value) > IMG_NAME_MAX ? NULL : json_string(value));
}

int img_section_attr_u64(struct img_writer *w, const char *key, uint64_t value)
{
	if (value > (uint64_t)INT64_MAX)
		return err_set(-ERANGE, "image writer: attribute '%.64s' = %llu is above 2^63",
			       key, (unsigned long long)value);
	return set_attr(w, key, json_integer((json_int_t)value));
}

static int has_zero_page(const unsigned char *p, size_t len)
{
	for (size_t off = 0; off < len; off += IMG_PAGE)
		if (page_is_zero(p + off, len - off < IMG_PAGE ? len - off : IMG_PAGE))
			return 1;
	return 0;
}

/* A whole chunk without a zero page, written inline and uncompressed: it is
 * stored as it is, so it goes to the sink straight from the caller's buffer
 * (header, then payload), the same bytes chunk_process would produce from a
 * copy. Live application data is mostly like this. */
static int emit_direct(struct img_writer *w, const unsigned char *p)
{
	struct img_disk_chunk h = { 0 };
	unsigned char hdr[IMG_CHUNK_HDR_LEN];
	int ret;

	h.section = w->cur->index;
	h.seq = w->cur->chunks;
	h.offset = (uint64_t)h.seq * w->chunk_size;
	h.raw_len = h.stored_len = w->chunk_size;
	h.payload_crc = crc32c(0, p, w->chunk_size);
	put_chunk_header(hdr, &h);
	ret = FAULT(IMAGE_CHUNK_WRITE);
	ret = ret ? ret : sink_write(w, hdr, sizeof(hdr));
	ret = ret ? ret : sink_write_chunk(w, p, w->chunk_size, 0, h.payload_crc);
	if (ret) {
		ret = chunk_fail(w, w->cur, h.seq, ret);
		record_err(w, ret);
		return sticky(w);
	}
	w->cur->stored += w->chunk_size;
	w->cur->chunks++;
	w->cur->size += w->chunk_size;
	count_chunk(w, 0, 1);
	return 0;
}

/* A chunk to fill, unless one is being filled. */
static int fill_start(struct img_writer *w)
{
	int ret;

	if (w->fill)
		return 0;
	ret = slot_take(w, SLOT_DATA, &w->fill);
	if (ret == 0)
		w->fill->len = 0;
	return ret;
}

int img_write(struct img_writer *w, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	int ret = check_append(w, "write", len);

	while (ret == 0 && len) {
		size_t n;

		if (!w->fill && !w->threads && !w->level && len >= w->chunk_size &&
		    !has_zero_page(p, w->chunk_size)) {
			ret = emit_direct(w, p);
			p += w->chunk_size;
			len -= w->chunk_size;
			continue;
		}

		ret = fill_start(w);
		if (ret)
			break;
		n = w->chunk_size - w->fill->len;
		if (n > len)
			n = len;
		memcpy(w->fill->mem + SLOT_PREFIX + w->fill->len, p, n);
		w->fill->len += (uint32_t)n;
		w->cur->size += n;
		p += n;
		len -= n;
		if (w->fill->len == w->chunk_size)
			ret = submit_fill(w);
	}
	return ret;
}

/* Whole chunks go into the ring as references to the caller's bytes: the
 * worker finds their zero pages and CRC there and the emitter writes them
 * from there, so the caller's thread copies nothing. Only with threads
 * and without compression (inline, img_write sends such chunks straight
 * already; a compressed chunk needs its buffer anyway). */
int img_write_stable(struct img_writer *w, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	int ret = check_append(w, "write", len);

	if (ret || !w->threads || w->level)
		return ret ? ret : img_write(w, buf, len);
	if (w->fill) {          /* the chunk begun: filled by copy up to its end */
		size_t n = w->chunk_size - w->fill->len;

		n = n < len ? n : len;
		ret = img_write(w, p, n);
		p += n;
		len -= n;
	}
	while (ret == 0 && len >= w->chunk_size) {
		struct slot *s;

		ret = slot_take(w, SLOT_DATA, &s);
		if (ret)
			break;
		s->src = p;
		s->len = w->chunk_size;
		w->cur->size += w->chunk_size;
		w->cur->chunks++;
		ret = slot_submit(w, s);
		p += w->chunk_size;
		len -= w->chunk_size;
	}
	return ret == 0 && len ? img_write(w, p, len) : ret;
}

int img_write_room(struct img_writer *w, void **buf, size_t *len)
{
	int ret = check_append(w, "write", 1);

	ret = ret ? ret : fill_start(w);
	if (ret)
		return ret;
	*buf = w->fill->mem + SLOT_PREFIX + w->fill->len;
	*len = w->chunk_size - w->fill->len;
	return 0;
}

int img_write_done(struct img_writer *w, size_t n)
{
	int ret = check_append(w, "write", n);

	if (ret || !n)
		return ret;
	if (!w->fill || n > w->chunk_size - w->fill->len)
		return err_set(-EINVAL, "image writer: %zu bytes done, more than the room given", n);
	w->fill->len += (uint32_t)n;
	w->cur->size += n;
	return w->fill->len == w->chunk_size ? submit_fill(w) : 0;
}

/* Zero bytes into the chunk being filled (starting one if needed). */
static int fill_zero(struct img_writer *w, size_t len)
{
	int ret = fill_start(w);

	if (ret)
		return ret;
	memset(w->fill->mem + SLOT_PREFIX + w->fill->len, 0, len);
	w->fill->len += (uint32_t)len;
	w->cur->size += len;
	return w->fill->len == w->chunk_size ? submit_fill(w) : 0;
}

int img_write_zero(struct img_writer *w, size_t len)
{
	uint64_t full;
	int ret = check_append(w, "write", len);

	if (ret || !len)
		return ret;
	if (w->fill) {
		size_t n = w->chunk_size - w->fill->len;

		n = n < len ? n : len;
		ret = fill_zero(w, n);
		len -= n;
		if (ret || !len)
			return ret;
	}
	full = len / w->chunk_size;
	if (full) {
		ret = submit_run(w, IMG_CHUNK_ZERO, (uint32_t)full, w->chunk_size);
		if (ret)
			return ret;
		w->cur->size += full * w->chunk_size;
		len -= full * w->chunk_size;
	}
	return len ? fill_zero(w, len) : 0;
}

int img_write_parent(struct img_writer *w, size_t len)
{
	struct wsec *s = w->cur;
	uint64_t full, rem;
	int ret = check_append(w, "parent reference", len);

	if (ret || !len)
		return ret;
	if (!w->parent)
		return err_set(-EINVAL, "image writer: section '%s': parent reference in an image "
			       "without a parent", s->name);
	if (w->fill && w->fill->len)
		return err_set(-EINVAL, "image writer: section '%s': parent reference at offset %llu, "
			       "not at a chunk boundary", s->name, (unsigned long long)s->size);
	full = len / w->chunk_size;
	rem = len % w->chunk_size;
	ret = submit_run(w, IMG_CHUNK_PARENT, (uint32_t)(full + (rem != 0)),
			 rem ? (uint32_t)rem : w->chunk_size);
	if (ret)
		return ret;
	s->size += len;
	s->tail_closed = rem != 0;
	return 0;
}

int img_section_end(struct img_writer *w)
{
	int ret = check_open(w, "section end");

	if (ret)
		return ret;
	if (w->fill && w->fill->len)
		ret = submit_fill(w);
	w->cur = NULL;
	return ret;
}

static int write_trailer(struct img_writer *w, uint64_t *bytes)
{
	struct img_manifest_out_section *osec = calloc(w->nsec ? w->nsec : 1, sizeof(*osec));
	struct img_manifest_out mo = {
		.image_id = w->id, .created_ns = w->created_ns, .chunk_size = w->chunk_size,
		.compression = w->compression, .parent = w->parent, .parent_id = w->parent_id,
		.meta = w->meta,
		.nsec = w->nsec, .sec = osec,
		.zero_chunks = w->zero_chunks, .sparse_chunks = w->sparse_chunks,
		.zstd_chunks = w->zstd_chunks, .parent_chunks = w->parent_chunks,
	};
	struct img_disk_footer f = { 0 };
	uint64_t pos = IMG_HEADER_LEN;
	char *text = NULL;
	size_t len;
	int ret;

	if (!osec)
		return err_set(-ENOMEM, "image writer: out of memory");
	for (unsigned i = 0; i < w->nsec; i++) {
		struct wsec *s = w->secs[i];

		osec[i] = (struct img_manifest_out_section){
			.name = s->name, .kind = s->kind, .attrs = s->attrs, .size = s->size,
			.stored = s->stored, .offset = pos, .chunks = s->chunks,
		};
		pos += (uint64_t)s->chunks * IMG_CHUNK_HDR_LEN + s->stored;
	}
	if (pos != w->pos) {
		ret = err_set(-EIO, "image writer: internal error: %llu bytes written, %llu accounted",
			      (unsigned long long)w->pos, (unsigned long long)pos);
		goto out;
	}
	ret = img_manifest_dump(&mo, &text, &len);
	if (ret) {
		err_set(ret, "image writer: cannot build the manifest");
		goto out;
	}
	if (len > IMG_MANIFEST_MAX) {
		ret = err_set(-EFBIG, "image writer: manifest of %zu bytes is above the limit of %u",
			      len, IMG_MANIFEST_MAX);
		goto out;
	}
	memcpy(f.magic, IMG_FOOTER_MAGIC, IMG_MAGIC_LEN);
	f.manifest_offset = pos;
	f.manifest_len = len;
	f.manifest_crc = crc32c(0, text, len);
	f.section_count = w->nsec;
	fmt_footer_swap(&f);
	f.crc = htole32(crc32c(0, &f, offsetof(struct img_disk_footer, crc)));
	ret = sink_write(w, text, len);
	if (ret)
		sink_fail(ret, "writing the manifest at image offset %llu", (unsigned long long)w->pos);
	if (ret == 0) {
		ret = sink_write(w, &f, sizeof(f));
		if (ret)
			sink_fail(ret, "writing the footer at image offset %llu", (unsigned long long)w->pos);
	}
	if (ret == 0 && bytes)
		*bytes = w->pos;
out:
	free(text);
	free(osec);
	return ret;
}

int img_writer_finish(struct img_writer *w, uint64_t *bytes)
{
	int ret;

	if (failed(w))
		return sticky(w);
	if (w->finished)
		return err_set(-EINVAL, "image writer: finished twice");
	if (w->cur)
		return err_set(-EINVAL, "image writer: finish with section '%s' still open", w->cur->name);
	drain(w);
	stop_threads(w);
	if (failed(w))
		return sticky(w);
	ret = FAULT(IMAGE_FINISH);
	if (ret) {
		record_err(w, ret);
		return sticky(w);
	}
	/* The threads are gone: any failure from here on must stay sticky. */
	ret = write_trailer(w, bytes);
	if (ret) {
		record_err(w, ret);
		return sticky(w);
	}
	w->finished = 1;
	log_debug("image writer: %llu bytes, %u sections", (unsigned long long)w->pos, w->nsec);
	return 0;
}

void img_writer_free(struct img_writer **wp)
{
	struct img_writer *w = *wp;

	if (!w)
		return;
	stop_threads(w);
	for (unsigned i = 0; w->workers && i < w->nworkers; i++) {
		ZSTD_freeCCtx(w->workers[i].cctx);
		free(w->workers[i].zbuf);
	}
	for (unsigned i = 0; w->slots && i < w->nslots; i++)
		free(w->slots[i].mem);
	for (unsigned i = 0; i < w->nsec; i++) {
		free(w->secs[i]->name);
		free(w->secs[i]->kind);
		json_decref(w->secs[i]->attrs);
		free(w->secs[i]);
	}
	free(w->secs);
	free(w->workers);
	free(w->slots);
	json_decref(w->meta);
	json_decref(w->names);
	free(w->parent);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cv_work);
	pthread_cond_destroy(&w->cv_emit);
	pthread_cond_destroy(&w->cv_free);
	free(w);
	*wp = NULL;
}
