/* util.c - helpers the subcommands share: sizes, the checkpoint root, jobs. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_human_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
}

const char *cli_root(const char *dir_option)
{
	if (dir_option)
		return dir_option;
	return strcmp(cfg_str(CFG_TIER), "local") == 0 ? cfg_str(CFG_LOCAL_DIR)
						       : cfg_str(CFG_GLOBAL_DIR);
}

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cli_open_job(const char *cmd, const char *root, const char *job, struct store **out)
{
	char path[PATH_MAX], **names = NULL;
	size_t count = 0;
	int ret;

	if (!is_dir(root)) {
		cli_error(cmd, "no checkpoint directory %s", root);
		return -ENOENT;
	}
	if (!job) {
		ret = store_jobs(cfg_str(CFG_TIER), root, &names, &count);
		if (ret) {
			cli_error(cmd, "%s", err_msg());
			return ret;
		}
		if (count != 1) {
			if (count == 0)
				cli_error(cmd, "no jobs in %s", root);
			else
				cli_error(cmd, "%zu jobs in %s; name one (see `stasis ls --dir %s`)",
					  count, root, root);
			store_names_free(names, count);
			return -EINVAL;
		}
		job = names[0];
	}
	if (snprintf(path, sizeof(path), "%s/%s/index", root, job) >= (int)sizeof(path) ||
	    access(path, F_OK) != 0) {
		cli_error(cmd, "no job '%s' in %s", job, root);
		ret = -ENOENT;
	} else {
		ret = store_open(cfg_str(CFG_TIER), root, job, out);
		if (ret)
			cli_error(cmd, "%s", err_msg());
	}
	store_names_free(names, count);
	return ret;
}
