/* index.h - a job's append-only index of checkpoint records (private to store/).
 *
 * <root>/<job>/index is a header line "STASIS-INDEX 1" followed by one line
 * per record:
 *     R <length> <crc32c> <json>\n
 * <length> is the decimal byte count of <json>, <crc32c> the CRC-32C of those
 * bytes as 8 lower-case hex digits, <json> a one-line JSON object with "op",
 * "ckpt", "time" and the fields of its op (docs/store.md has the details).
 * Writers append under an exclusive flock, one record per call, and fsync
 * before unlocking; readers take a shared flock so they never see a record
 * being written. A line that fails any check (a record torn by a crash, a
 * flipped byte) is skipped and counted, never trusted.
 */
#ifndef STASIS_STORE_INDEX_H
#define STASIS_STORE_INDEX_H

#include "store/store.h"
#include "store/tier.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define INDEX_HEADER "STASIS-INDEX 1\n"
#define INDEX_MAX_LINE 4096     /* a record never needs more; longer lines are damage */

enum index_op {
	INDEX_BEGIN,            /* a checkpoint was begun: its directory exists */
	INDEX_FILE,             /* one file of it is durable under its final name */
	INDEX_COMPLETE,         /* every file it promised is there: established */
	INDEX_FAILED,           /* given up: a writer failed or damage was found */
	INDEX_PRUNED,           /* removed (its directory may still be there) */
	INDEX_ANNEX,            /* a file added to a COMPLETE checkpoint (fields of FILE) */
	INDEX_LEVEL,            /* a COMPLETE checkpoint reached a level (name), or
				   gave up on one (reason) */
};

struct index_record {
	enum index_op op;
	char ckpt[64];
	int64_t time;           /* seconds since the epoch */
	char name[256];         /* FILE, ANNEX: file name; LEVEL: the level */
	uint64_t size;          /* FILE, ANNEX: bytes */
	uint32_t crc;           /* FILE, ANNEX: CRC-32C of the content */
	int image;              /* FILE, ANNEX: the content began with the image magic */
	unsigned files;         /* COMPLETE: FILE records it sealed */
	uint64_t bytes;         /* COMPLETE: their total size */
	char reason[160];       /* FAILED: why; PRUNED, LEVEL: optional */
	int vouched;            /* FILE read from a FILES record, whose writer found
				   the file in place with its size as it appended it */
};

/* One job's index file and the damaged records already reported (each is
 * logged once per handle, not on every read). */
struct index {
	const struct store_tier_ops *ops;
	char path[PATH_MAX];
	pthread_mutex_t lock;
	uint64_t *warned;
	size_t nwarned;
};

/* An exclusive hold on the index, for a read-decide-append sequence
 * (choosing the next checkpoint number, sealing). */
struct index_hold {
	struct index *ix;
	int fd;
	uint64_t appended_at;   /* the byte offset of the last record appended */
};

int index_init(struct index *ix, const struct store_tier_ops *ops, const char *path);
void index_destroy(struct index *ix);

/* Create the index with its header if it does not exist; refuse a file that
 * is not an index. */
int index_create(struct index *ix);

int index_lock(struct index *ix, struct index_hold *h);
void index_unlock(struct index_hold *h);
/* Append one record: under a hold, or taking the lock for this one record.
 * Fault points store.index.append, store.index.torn, store.index.fsync. */
int index_append_held(struct index_hold *h, const struct index_record *r);
int index_append(struct index *ix, const struct index_record *r);
/* Append a FILES line (index_encode_files) under a hold */
int index_append_files(struct index_hold *h, const char *line, size_t len, const char *ckpt);

/* Encode a record as its line (with '\n'). -E2BIG if it would exceed
 * INDEX_MAX_LINE. */
int index_encode(const struct index_record *r, char *line, size_t size, size_t *len);
/* Decode one line (without its '\n'); -EBADMSG if it is damaged, with *why
 * (may be NULL) saying which check failed. */
int index_decode(const char *line, size_t len, struct index_record *r, const char **why);

/* FILES records: the FILE records of several files in one line (a node
 * agent's for its ranks' images: one append a node, not one a rank), each
 * file [name, size, crc, image] in the list "files". Readers (index_scan)
 * see one INDEX_FILE record per file, all at the line's offset. */
#define INDEX_FILES_OP "FILES"
#define INDEX_FILES_MAX 160     /* more never fit in INDEX_MAX_LINE */
/* The line of files[0..n) (their ckpt and time: files[0]'s); -E2BIG if it
 * would exceed INDEX_MAX_LINE (the caller splits the list). */
int index_encode_files(const struct index_record *files, unsigned n, char *line, size_t size, size_t *len);
/* Decode a FILES line into out[0..*n) (INDEX_FILE records); -ENOMSG if the
 * line is not one (its JSON does not begin {"op":"FILES",: index_decode
 * reads it), -EBADMSG if it is damaged. */
int index_decode_files(const char *line, size_t len, struct index_record *out, unsigned max,
		       unsigned *n, const char **why);

/* Every intact record, in file order, with its byte offset. A callback
 * returning non-zero stops the scan with that value. */
typedef int (*index_record_fn)(void *ctx, const struct index_record *r, uint64_t offset);
struct index_scan_stats {
	unsigned records;       /* intact */
	unsigned torn;          /* appends a crash cut short (the last line, or a
				   line a later appender sealed off), skipped */
	unsigned bad;           /* damaged in any other way, skipped */
	uint64_t first_bad;     /* byte offset of the first damaged one */
	uint64_t size;          /* bytes read */
	uint64_t end;           /* the byte after the last whole line */
};
/* Torn records are logged at info level, damaged ones as warnings, each once
 * per handle. index_check does the same scan without logging: its caller
 * reports the damage. */
int index_scan(struct index *ix, index_record_fn fn, void *ctx, struct index_scan_stats *st);
int index_scan_held(struct index_hold *h, index_record_fn fn, void *ctx, struct index_scan_stats *st);
/* The records from byte from on (where a record starts: an appended_at),
 * not the whole file: -ESTALE when no line starts there (the caller scans
 * the whole index). */
int index_scan_from_held(struct index_hold *h, uint64_t from, index_record_fn fn, void *ctx,
			 struct index_scan_stats *st);
int index_check(struct index *ix, struct index_scan_stats *st);

struct index_file {
	struct store_file_info info;
	int image;                      /* verify it with the image reader */
	int annex;                      /* from an ANNEX record, not sealed by COMPLETE */
	int vouched;                    /* from a FILES record: in place when recorded */
};

/* The checkpoints as the records describe them (docs/store.md, "states"). */
struct index_ckpt {
	struct store_ckpt_info info;    /* state, times, reason; files/bytes committed */
	unsigned number;                /* N of ckpt-N, 0 if the name has another form */
	unsigned sealed_files;          /* what the COMPLETE record says */
	unsigned file_records;          /* files from FILE records (not ANNEX) */
	uint64_t sealed_bytes;
	struct index_file *files;       /* FILE records before sealing, last one per name
					   wins; then ANNEX records of names not yet there */
	size_t nfiles, cap;
	uint32_t *slots;                /* files by name: 1 + index, 0 free (open addressing) */
	size_t nslots;
};

struct index_view {
	struct index_ckpt *ckpts;       /* oldest first */
	size_t count, cap;
	unsigned max_number;            /* highest N of ckpt-N ever named */
	struct index_scan_stats stats;
};

int index_view_load(struct index *ix, struct index_view *v);
int index_view_load_held(struct index_hold *h, struct index_view *v);
/* A view of checkpoint name alone, from its BEGIN record at byte begun_at
 * (nothing of a checkpoint comes before it): what a seal needs, read
 * without every record of every checkpoint the index ever held
 * (bench/scale). Its max_number is the highest N of every record read, its
 * stats.end where they end. -ESTALE when the record there is not name's
 * BEGIN. */
int index_view_load_one_held(struct index_hold *h, const char *name, uint64_t begun_at,
			     struct index_view *v);
void index_view_free(struct index_view *v);
struct index_ckpt *index_view_find(const struct index_view *v, const char *name);

const char *index_op_name(enum index_op op);
/* N of a name ckpt-N, 0 for a name of another form. */
unsigned index_ckpt_number(const char *name);

#endif
