/* cmd_image.c - subcommands that read images: inspect, verify, extract. */
#include "cli/cli.h"
#include "common/err.h"
#include "image/image.h"
#include "proc/proc.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int open_image(const char *cmd, const char *path, struct img_reader **r)
{
	struct stat st;

	if (stat(path, &st) != 0) {
		cli_error(cmd, "%s: %s", path, strerror(errno));
		return EXIT_USAGE;
	}
	if (!S_ISREG(st.st_mode)) {
		cli_error(cmd, "%s: not a file", path);
		return EXIT_USAGE;
	}
	if (img_open(path, r)) {
		cli_error(cmd, "%s", err_msg());
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* Logical and stored bytes of all sections, as human-readable sizes. */
static void image_totals(const struct img_reader *r, char *logical, char *stored, size_t len)
{
	uint64_t size = 0, bytes = 0;

	for (unsigned i = 0; i < img_section_count(r); i++) {
		struct img_section_info s;

		if (img_section_get(r, i, &s) == 0) {
			size += s.size;
			bytes += s.stored;
		}
	}
	cli_human_size(size, logical, len);
	cli_human_size(bytes, stored, len);
}

static void print_scalar(const char *label, json_t *v)
{
	if (json_is_string(v))
		printf("%-12s %s\n", label, json_string_value(v));
	else if (json_is_integer(v))
		printf("%-12s %lld\n", label, (long long)json_integer_value(v));
	else if (json_is_null(v) || !v)
		printf("%-12s -\n", label);
}

static void print_object(const char *label, json_t *obj)
{
	const char *key;
	json_t *v;
	int first = 1;

	if (!json_is_object(obj) || json_object_size(obj) == 0)
		return;
	json_object_foreach(obj, key, v) {
		char *text = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

		printf("%-12s %s=%s\n", first ? label : "", key, text ? text : json_string_value(v));
		free(text);
		first = 0;
	}
}

static void print_manifest_text(const char *path, struct img_reader *r)
{
	json_t *m = json_loads(img_manifest(r), 0, NULL);
	unsigned n = img_section_count(r);
	char a[32], b[32];
	json_t *sections = m ? json_object_get(m, "sections") : NULL;

	printf("%-12s %s\n", "image", path);
	if (m) {
		const char *key;
		json_t *v;

		json_object_foreach(m, key, v) {
			if (strcmp(key, "sections") == 0 || json_is_object(v) || json_is_array(v))
				continue;
			print_scalar(key, v);
		}
		print_object("meta", json_object_get(m, "meta"));
	}
	image_totals(r, a, b, sizeof(a));
	printf("%-12s %u, %s logical, %s stored\n\n", "sections", n, a, b);
	printf("%4s  %-9s %-24s %12s %12s %7s  %s\n", "#", "KIND", "NAME", "SIZE", "STORED",
	       "CHUNKS", "ATTRIBUTES");
	for (unsigned i = 0; i < n; i++) {
		struct img_section_info s;
		json_t *attrs = json_object_get(json_array_get(sections, i), "attrs");
		char *attr_text = json_is_object(attrs) && json_object_size(attrs)
				  ? json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

		if (img_section_get(r, i, &s))
			continue;
		cli_human_size(s.size, a, sizeof(a));
		cli_human_size(s.stored, b, sizeof(b));
		printf("%4u  %-9s %-24s %12s %12s %7u  %s\n", i, s.kind, s.name, a, b, s.chunks,
		       attr_text ? attr_text : "");
		free(attr_text);
	}
	json_decref(m);
}

/* The process records of an image as JSON (proc_image_decode). */
static int inspect_decode(const char *path)
{
	struct img_reader *r = NULL;
	char *json = NULL;
	int ret = open_image("inspect", path, &r);

	if (ret)
		return ret;
	if (proc_image_decode(r, &json)) {
		cli_error("inspect", "%s: %s", path, err_msg());
		img_close(&r);
		return EXIT_FAIL;
	}
	printf("%s\n", json);
	free(json);
	img_close(&r);
	return EXIT_OK;
}

/* A section's bytes from the JSON of --decode, to stdout. */
static int inspect_encode(const char *section, const char *path)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
	char *text = NULL;
	size_t cap = 0, n = 0, len = 0;
	void *buf = NULL;
	int ret = EXIT_OK;

	if (!f) {
		cli_error("inspect", "%s: %s", path, strerror(errno));
		return EXIT_USAGE;
	}
	for (size_t got = 1; got;) {
		if (n + 4096 > cap) {
			char *p = realloc(text, cap = cap ? 2 * cap : 65536);

			if (!p) {
				free(text);
				if (f != stdin)
					fclose(f);
				return EXIT_FAIL;
			}
			text = p;
		}
		got = fread(text + n, 1, cap - n - 1, f);
		n += got;
	}
	text[n] = 0;
	if (f != stdin)
		fclose(f);
	if (proc_image_encode(text, section, &buf, &len)) {
		cli_error("inspect", "%s: %s", path, err_msg());
		ret = EXIT_FAIL;
	} else if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
		cli_error("inspect", "stdout: %s", strerror(errno));
		ret = EXIT_FAIL;
	}
	free(buf);
	free(text);
	return ret;
}

int cmd_inspect(int argc, char **argv)
{
	const struct cli_command *self = cli_find("inspect");
	struct img_reader *r = NULL;
	const char *path = NULL;
	int as_json = 0, decode = 0, ret;

	if (argc == 4 && strcmp(argv[1], "--encode") == 0)
		return inspect_encode(argv[2], argv[3]);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			as_json = 1;
		else if (strcmp(argv[i], "--decode") == 0)
			decode = 1;
		else if (argv[i][0] == '-' || path)
			return cli_usage(self, 1);
		else
			path = argv[i];
	}
	if (!path || (as_json && decode))
		return cli_usage(self, 1);
	if (decode)
		return inspect_decode(path);
	ret = open_image("inspect", path, &r);
	if (ret)
		return ret;
	if (as_json) {
		json_t *m = json_loads(img_manifest(r), 0, NULL);
		char *text = m ? json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;

		printf("%s\n", text ? text : img_manifest(r));
		free(text);
		json_decref(m);
	} else {
		print_manifest_text(path, r);
	}
	img_close(&r);
	return EXIT_OK;
}

static int verify_image(const char *path)
{
	struct img_reader *r = NULL;
	struct cli_progress *progress;
	char a[32], b[32];
	int ret = open_image("verify", path, &r);

	if (ret)
		return ret;
	progress = cli_progress_bytes("verify", path, 0, NULL);
	ret = img_verify(r);
	cli_progress_stop(&progress);
	if (ret) {
		cli_error("verify", "%s", err_msg());
		img_close(&r);
		return EXIT_FAIL;
	}
	image_totals(r, a, b, sizeof(a));
	printf("%s: OK (%u sections, %s logical, %s stored)\n", path, img_section_count(r), a, b);
	img_close(&r);
	return EXIT_OK;
}

static int verify_ckpt(struct store *s, const char *name)
{
	struct cli_progress *progress = cli_progress_bytes("verify", name, 0, NULL);
	int ret = store_verify(s, name);

	cli_progress_stop(&progress);
	if (ret) {
		cli_error("verify", "%s", err_msg());
		return EXIT_FAIL;
	}
	printf("%s: OK\n", name);
	return EXIT_OK;
}

static int verify_job(struct store *s, const char *job)
{
	struct store_ckpt_info *list = NULL;
	size_t count = 0;
	unsigned bad = 0, complete = 0;
	int ret = EXIT_OK;

	if (store_index_check(s)) {
		cli_error("verify", "%s", err_msg());
		return EXIT_FAIL;
	}
	if (store_list(s, &list, &count, &bad)) {
		cli_error("verify", "%s", err_msg());
		return EXIT_FAIL;
	}
	for (size_t i = 0; i < count && ret == EXIT_OK; i++) {
		switch (list[i].state) {
		case STORE_COMPLETE:
			complete++;
			ret = verify_ckpt(s, list[i].name);
			break;
		case STORE_PARTIAL:
			printf("%s: PARTIAL (never committed; not used for restart)\n", list[i].name);
			break;
		case STORE_FAILED:
			printf("%s: FAILED (%s; not used for restart)\n", list[i].name, list[i].reason);
			break;
		case STORE_PRUNED:
			break;
		}
	}
	if (ret == EXIT_OK)
		printf("job %s: %u complete checkpoint(s) verified\n", job, complete);
	free(list);
	return ret;
}

static int is_job_dir(const char *dir)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/index", dir) >= (int)sizeof(path))
		return 0;
	return access(path, F_OK) == 0;
}

/* Split an absolute path into its directory and its last component. */
static void path_split(const char *path, char dir[PATH_MAX], char name[PATH_MAX])
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;

	snprintf(dir, PATH_MAX, "%.*s", (int)(n ? n : 1), n ? path : "/");
	snprintf(name, PATH_MAX, "%s", slash ? slash + 1 : path);
}

/* A directory holding ckpt-* directories: a job that lost its index. */
static int has_checkpoints(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	while (d && !found && (e = readdir(d)) != NULL)
		found = strncmp(e->d_name, "ckpt-", 5) == 0;
	if (d)
		closedir(d);
	return found;
}

int cmd_verify(int argc, char **argv)
{
	char real[PATH_MAX], parent[PATH_MAX], grand[PATH_MAX], base[PATH_MAX], job[PATH_MAX];
	struct store *s = NULL;
	struct stat st;
	int ret;

	if (argc != 2 || argv[1][0] == '-')
		return cli_usage(cli_find("verify"), 1);
	if (stat(argv[1], &st) != 0 || !realpath(argv[1], real)) {
		cli_error("verify", "%s: %s", argv[1], strerror(errno));
		return EXIT_USAGE;
	}
	if (S_ISREG(st.st_mode))
		return verify_image(argv[1]);
	path_split(real, parent, base);
	if (is_job_dir(real)) {
		if (store_open(NULL, parent, base, &s)) {
			cli_error("verify", "%s", err_msg());
			return EXIT_FAIL;
		}
		ret = verify_job(s, base);
	} else if (is_job_dir(parent)) {
		path_split(parent, grand, job);
		if (store_open(NULL, grand, job, &s)) {
			cli_error("verify", "%s", err_msg());
			return EXIT_FAIL;
		}
		ret = verify_ckpt(s, base);
	} else if (has_checkpoints(real)) {
		cli_error("verify", "%s: no index: a job directory whose index was lost; "
			  "its checkpoints cannot be trusted", argv[1]);
		return EXIT_FAIL;
	} else {
		cli_error("verify", "%s: not an image, a checkpoint or a job directory", argv[1]);
		return EXIT_USAGE;
	}
	store_close(&s);
	return ret;
}

int cmd_extract(int argc, char **argv)
{
	struct img_reader *r = NULL;
	struct img_section_info info;
	struct cli_progress *progress = NULL;
	static char buf[1 << 20];
	uint64_t off = 0;
	int idx, fd, ret = EXIT_OK;

	if (argc != 4)
		return cli_usage(cli_find("extract"), 1);
	ret = open_image("extract", argv[1], &r);
	if (ret)
		return ret;
	idx = img_section_find(r, argv[2]);
	if (idx < 0 || img_section_get(r, (unsigned)idx, &info)) {
		cli_error("extract", "%s: no section '%s'", argv[1], argv[2]);
		img_close(&r);
		return EXIT_USAGE;
	}
	fd = strcmp(argv[3], "-") == 0 ? STDOUT_FILENO
				      : open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		cli_error("extract", "%s: %s", argv[3], strerror(errno));
		img_close(&r);
		return EXIT_FAIL;
	}
	/* not while writing to stdout: the bytes may be going to the terminal */
	if (fd != STDOUT_FILENO)
		progress = cli_progress_bytes("extract", argv[2], info.size, &off);
	while (off < info.size && ret == EXIT_OK) {
		size_t want = info.size - off < sizeof(buf) ? (size_t)(info.size - off) : sizeof(buf);
		ssize_t n = img_read(r, (unsigned)idx, off, buf, want);

		if (n <= 0) {
			cli_progress_stop(&progress);
			cli_error("extract", "%s", n < 0 ? err_msg() : "unexpected end of section");
			ret = EXIT_FAIL;
		} else if (write(fd, buf, (size_t)n) != n) {
			int e = errno;

			cli_progress_stop(&progress);
			cli_error("extract", "%s: %s", argv[3], strerror(e));
			ret = EXIT_FAIL;
		}
		__atomic_store_n(&off, off + (n > 0 ? (uint64_t)n : 0), __ATOMIC_RELAXED);
	}
	cli_progress_stop(&progress);
	if (fd != STDOUT_FILENO && close(fd) != 0 && ret == EXIT_OK) {
		cli_error("extract", "%s: %s", argv[3], strerror(errno));
		ret = EXIT_FAIL;
	}
	img_close(&r);
	return ret;
}
