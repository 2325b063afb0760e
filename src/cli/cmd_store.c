/* cmd_store.c - subcommands on a job's checkpoints: ls, prune, save. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { OPT_DIR = 1000, OPT_KEEP, OPT_JOB, OPT_JSON };

static const struct option store_options[] = {
	{ "dir", required_argument, NULL, OPT_DIR },
	{ "keep", required_argument, NULL, OPT_KEEP },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "json", no_argument, NULL, OPT_JSON },
	{ NULL, 0, NULL, 0 },
};

struct store_args {
	const char *dir;
	const char *job;
	const char *keep;
	int json;
	int first_operand;
};

/* Parse --dir/--job/--keep; 0 on success, EXIT_USAGE after printing usage. */
static int parse_args(const char *cmd, int argc, char **argv, struct store_args *a)
{
	int c;

	memset(a, 0, sizeof(*a));
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", store_options, NULL)) != -1) {
		switch (c) {
		case OPT_DIR: a->dir = optarg; break;
		case OPT_KEEP: a->keep = optarg; break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_JSON:
			if (strcmp(cmd, "ls") == 0) {   /* only ls has --json */
				a->json = 1;
				break;
			}
			__attribute__((fallthrough));
		default:
			cli_error(cmd, "unknown option '%s'", argv[optind - 1]);
			return cli_usage(cli_find(cmd), 1);
		}
	}
	a->first_operand = optind;
	return EXIT_OK;
}

static void format_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (t <= 0 || !localtime_r(&tt, &tm))
		snprintf(buf, len, "-");
	else
		strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* "2026-11-22T10:03:54Z", or "" for no time */
static void iso_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	buf[0] = 0;
	if (t > 0 && gmtime_r(&tt, &tm))
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *str_or_null(const char *s)
{
	return s && s[0] ? json_string(s) : json_null();
}

static json_t *time_or_null(int64_t t)
{
	return t > 0 ? json_integer(t) : json_null();
}

/* One checkpoint for `ls --json` (keys: docs/cli.md). */
static json_t *ckpt_json(const struct store_ckpt_info *c)
{
	int64_t t = c->end_time ? c->end_time : c->begin_time;
	char size[32], when[32];
	json_t *o = json_object();

	cli_human_size(c->bytes, size, sizeof(size));
	iso_time(t, when, sizeof(when));
	json_object_set_new(o, "name", json_string(c->name));
	json_object_set_new(o, "state", json_string(c->current ? "CURRENT" : store_state_name(c->state)));
	json_object_set_new(o, "current", json_boolean(c->current));
	json_object_set_new(o, "files", json_integer(c->files));
	json_object_set_new(o, "bytes", json_integer((json_int_t)c->bytes));
	json_object_set_new(o, "size", json_string(size));
	json_object_set_new(o, "time", str_or_null(when));
	json_object_set_new(o, "epoch", time_or_null(t));
	json_object_set_new(o, "begin_epoch", time_or_null(c->begin_time));
	json_object_set_new(o, "end_epoch", time_or_null(c->end_time));
	json_object_set_new(o, "level", str_or_null(c->state == STORE_COMPLETE ? c->level : NULL));
	json_object_set_new(o, "level_reason",
			    str_or_null(c->state == STORE_COMPLETE ? c->level_reason : NULL));
	json_object_set_new(o, "reason", str_or_null(c->state == STORE_FAILED ? c->reason : NULL));
	return o;
}

/* List one job: as text on stdout, or (jobs != NULL) as one more object of
 * the jobs array of `ls --json`. */
static int list_job(const char *root, const char *job, json_t *jobs)
{
	struct store_ckpt_info *list = NULL;
	struct store *s = NULL;
	size_t count = 0;
	unsigned bad = 0;
	char size[32], when[32];
	json_t *ckpts = NULL;

	if (cli_open_job("ls", root, job, &s))
		return EXIT_FAIL;
	if (store_list(s, &list, &count, &bad)) {
		cli_error("ls", "%s", err_msg());
		store_close(&s);
		return EXIT_FAIL;
	}
	if (jobs) {
		json_t *o = json_object();

		ckpts = json_array();
		json_object_set_new(o, "name", json_string(job));
		json_object_set_new(o, "dir", json_string(store_job_dir(s)));
		json_object_set_new(o, "damaged_records", json_integer(bad));
		json_object_set_new(o, "checkpoints", ckpts);
		json_array_append_new(jobs, o);
	} else {
		printf("job %s (%s)\n", job, store_job_dir(s));
		printf("  %-12s %-9s %6s %11s  %-19s  %s\n", "CHECKPOINT", "STATE", "FILES", "SIZE",
		       "TIME", "NOTE");
	}
	for (size_t i = 0; i < count; i++) {
		const struct store_ckpt_info *c = &list[i];
		const char *note = c->state == STORE_PARTIAL ? "never committed; not used for restart"
				 : c->state == STORE_FAILED ? c->reason : "";
		char lv[200];

		if (c->state == STORE_COMPLETE && c->level[0]) {
			snprintf(lv, sizeof(lv), "level %s%s%s", c->level, c->level_reason[0] ? ": " : "",
				 c->level_reason);
			note = lv;
		}

		if (c->state == STORE_PRUNED)
			continue;
		if (ckpts) {
			json_array_append_new(ckpts, ckpt_json(c));
			continue;
		}
		cli_human_size(c->bytes, size, sizeof(size));
		format_time(c->end_time ? c->end_time : c->begin_time, when, sizeof(when));
		printf("  %-12s %-9s %6u %11s  %-19s  %s\n", c->name,
		       c->current ? "CURRENT" : store_state_name(c->state), c->files, size, when, note);
	}
	/* (the store logged each damaged record on stderr already) */
	if (bad && !jobs)
		printf("  warning: %u damaged index record(s) skipped (see `stasis verify %s`)\n",
		       bad, store_job_dir(s));
	free(list);
	store_close(&s);
	return bad ? EXIT_FAIL : EXIT_OK;
}

/* Print a JSON document on stdout, indented, keys in the order set. */
static void print_json(json_t *doc)
{
	char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	if (text)
		printf("%s\n", text);
	free(text);
}

int cmd_ls(int argc, char **argv)
{
	struct store_args a;
	char **jobs = NULL;
	size_t count = 0;
	const char *root;
	struct stat st;
	json_t *doc = NULL, *arr = NULL;
	int ret;

	ret = parse_args("ls", argc, argv, &a);
	if (ret)
		return ret;
	if (argc - a.first_operand > 1)
		return cli_usage(cli_find("ls"), 1);
	root = cli_root(a.dir);
	if (a.json) {
		doc = json_object();
		arr = json_array();
		json_object_set_new(doc, "root", json_string(root));
		json_object_set_new(doc, "jobs", arr);
	}
	if (a.first_operand < argc) {
		ret = list_job(root, argv[a.first_operand], arr);
		if (doc && json_array_size(arr))
			print_json(doc);
		json_decref(doc);
		return ret;
	}
	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		cli_error("ls", "no checkpoint directory %s", root);
		json_decref(doc);
		return EXIT_USAGE;
	}
	if (store_jobs(cfg_str(CFG_TIER), root, &jobs, &count)) {
		cli_error("ls", "%s", err_msg());
		json_decref(doc);
		return EXIT_FAIL;
	}
	if (count == 0 && !doc)
		printf("no jobs in %s\n", root);
	for (size_t i = 0; i < count; i++) {
		int r = list_job(root, jobs[i], arr);

		if (r)
			ret = r;
	}
	if (doc)
		print_json(doc);
	json_decref(doc);
	store_names_free(jobs, count);
	return ret;
}

int cmd_prune(int argc, char **argv)
{
	struct store_args a;
	struct store *s = NULL;
	unsigned keep, removed = 0;
	char *end;
	int ret;

	ret = parse_args("prune", argc, argv, &a);
	if (ret)
		return ret;
	if (argc - a.first_operand > 1)
		return cli_usage(cli_find("prune"), 1);
	if (a.keep) {
		unsigned long k = strtoul(a.keep, &end, 10);

		if (a.keep[0] < '0' || a.keep[0] > '9' || *end || k > 1000000) {
			cli_error("prune", "--keep: expected a number, got '%s'", a.keep);
			return EXIT_USAGE;
		}
		keep = (unsigned)k;
	} else {
		keep = (unsigned)cfg_u64(CFG_KEEP);
	}
	if (keep == 0) {
		cli_error("prune", "--keep N needs N >= 1 (or set the configuration key keep)");
		return EXIT_USAGE;
	}
	if (cli_open_job("prune", cli_root(a.dir),
			 a.first_operand < argc ? argv[a.first_operand] : NULL, &s))
		return EXIT_USAGE;
	if (store_prune(s, keep, &removed)) {
		cli_error("prune", "%s", err_msg());
		ret = EXIT_FAIL;
	} else {
		printf("removed %u checkpoint(s), kept the newest %u complete\n", removed, keep);
	}
	store_close(&s);
	return ret;
}

/* Copy one file into the open image as a "file" section, adding the bytes
 * read to *done (read by the progress line). */
static int save_file(struct img_writer *w, const char *path, uint64_t *done)
{
	static char buf[1 << 20];
	struct stat st;
	ssize_t n;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		ret = err_set(fd < 0 ? -errno : -EINVAL, "%s: %s", path,
			      fd < 0 ? strerror(errno) : "not a regular file");
		goto out;
	}
	ret = img_section_begin(w, "file", path);
	if (!ret)
		ret = img_section_attr(w, "path", path);
	if (!ret)
		ret = img_section_attr_u64(w, "mode", st.st_mode & 07777);
	while (!ret && (n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0)
			ret = err_set(-errno, "%s: %s", path, strerror(errno));
		else
			ret = img_write(w, buf, (size_t)n);
		__atomic_store_n(done, *done + (uint64_t)(n > 0 ? n : 0), __ATOMIC_RELAXED);
	}
	if (!ret)
		ret = img_section_end(w);
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

int cmd_save(int argc, char **argv)
{
	struct store_args a;
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	struct cli_progress *progress = NULL;
	const char *job, *root;
	uint64_t bytes = 0, total = 0, done = 0;
	char size[32];
	int ret;

	ret = parse_args("save", argc, argv, &a);
	if (ret)
		return ret;
	if (a.first_operand >= argc)
		return cli_usage(cli_find("save"), 1);
	job = a.job ? a.job : *cfg_str(CFG_JOB) ? cfg_str(CFG_JOB) : "files";
	root = cli_root(a.dir);
	img_writer_opts_default(&opts);
	ret = store_open(cfg_str(CFG_TIER), root, job, &s);
	if (!ret)
		ret = store_ckpt_begin(s, &c);
	if (!ret)
		ret = store_file_create(c, "files.img", &f);
	if (!ret)
		ret = img_writer_create(store_file_write, f, &opts, &w);
	if (!ret)
		ret = img_writer_meta(w, "producer", "stasis save");
	if (!ret)
		ret = img_writer_meta(w, "job", job);
	if (!ret) {
		for (int i = a.first_operand; i < argc; i++) {
			struct stat st;

			if (stat(argv[i], &st) == 0 && S_ISREG(st.st_mode))
				total += (uint64_t)st.st_size;
		}
		progress = cli_progress_bytes("save", store_ckpt_name(c), total, &done);
	}
	for (int i = a.first_operand; !ret && i < argc; i++)
		ret = save_file(w, argv[i], &done);
	if (!ret)
		ret = img_writer_finish(w, &bytes);
	if (!ret)
		ret = store_file_commit(f);
	if (!ret)
		ret = store_ckpt_commit(c, 1);
	cli_progress_stop(&progress);
	if (ret) {
		cli_error("save", "%s", err_msg());
		if (c)
			store_ckpt_abort(c, err_msg());
	} else {
		cli_human_size(bytes, size, sizeof(size));
		printf("saved %d file(s) as %s/%s (%s image) in %s\n", argc - a.first_operand, job,
		       store_ckpt_name(c), size, root);
	}
	img_writer_free(&w);
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
	return ret ? EXIT_FAIL : EXIT_OK;
}
