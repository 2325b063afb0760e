/* cmd_store.c - subcommands on a job's checkpoints: ls, prune, save. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"
#include "image/image.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { OPT_DIR = 1000, OPT_KEEP, OPT_JOB };

static const struct option store_options[] = {
	{ "dir", required_argument, NULL, OPT_DIR },
	{ "keep", required_argument, NULL, OPT_KEEP },
	{ "job", required_argument, NULL, OPT_JOB },
	{ NULL, 0, NULL, 0 },
};

struct store_args {
	const char *dir;
	const char *job;
	const char *keep;
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

static int list_job(const char *root, const char *job)
{
	struct store_ckpt_info *list = NULL;
	struct store *s = NULL;
	size_t count = 0;
	unsigned bad = 0;
	char size[32], when[32];

	if (cli_open_job("ls", root, job, &s))
		return EXIT_FAIL;
	if (store_list(s, &list, &count, &bad)) {
		cli_error("ls", "%s", err_msg());
		store_close(&s);
		return EXIT_FAIL;
	}
	printf("job %s (%s)\n", job, store_job_dir(s));
	printf("  %-12s %-9s %6s %11s  %-19s  %s\n", "CHECKPOINT", "STATE", "FILES", "SIZE",
	       "TIME", "NOTE");
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
		cli_human_size(c->bytes, size, sizeof(size));
		format_time(c->end_time ? c->end_time : c->begin_time, when, sizeof(when));
		printf("  %-12s %-9s %6u %11s  %-19s  %s\n", c->name,
		       c->current ? "CURRENT" : store_state_name(c->state), c->files, size, when, note);
	}
	if (bad)
		printf("  warning: %u damaged index record(s) skipped (see `stasis verify %s`)\n",
		       bad, store_job_dir(s));
	free(list);
	store_close(&s);
	return bad ? EXIT_FAIL : EXIT_OK;
}

int cmd_ls(int argc, char **argv)
{
	struct store_args a;
	char **jobs = NULL;
	size_t count = 0;
	const char *root;
	struct stat st;
	int ret;

	ret = parse_args("ls", argc, argv, &a);
	if (ret)
		return ret;
	if (argc - a.first_operand > 1)
		return cli_usage(cli_find("ls"), 1);
	root = cli_root(a.dir);
	if (a.first_operand < argc)
		return list_job(root, argv[a.first_operand]);
	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		cli_error("ls", "no checkpoint directory %s", root);
		return EXIT_USAGE;
	}
	if (store_jobs(cfg_str(CFG_TIER), root, &jobs, &count)) {
		cli_error("ls", "%s", err_msg());
		return EXIT_FAIL;
	}
	if (count == 0)
		printf("no jobs in %s\n", root);
	for (size_t i = 0; i < count; i++) {
		int r = list_job(root, jobs[i]);

		if (r)
			ret = r;
	}
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

/* Copy one file into the open image as a "file" section. */
static int save_file(struct img_writer *w, const char *path)
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
	const char *job, *root;
	uint64_t bytes = 0;
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
	for (int i = a.first_operand; !ret && i < argc; i++)
		ret = save_file(w, argv[i]);
	if (!ret)
		ret = img_writer_finish(w, &bytes);
	if (!ret)
		ret = store_file_commit(f);
	if (!ret)
		ret = store_ckpt_commit(c, 1);
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
