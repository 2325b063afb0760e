/* test_config.c - configuration registry: defaults, file, environment, set,
 * validation and the messages a user sees; fault point specs. */
#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];

static const char *write_file(const char *name, const char *text)
{
	static char path[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_defaults(void)
{
	CHECK_EQ(cfg_load("/dev/null"), 0);
	CHECK(strcmp(cfg_str(CFG_LOG), "warn") == 0);
	CHECK(strcmp(cfg_origin(CFG_LOG), "default") == 0);
	CHECK_EQ(cfg_u64(CFG_CHUNK_SIZE), 4 << 20);
	CHECK_EQ(cfg_u64(CFG_THREADS), 2);
	CHECK(strcmp(cfg_str(CFG_COMPRESS), "none") == 0);
	/* ${UID} expanded in the local tier's default */
	{
		char want[64];

		snprintf(want, sizeof(want), "/dev/shm/stasis-%u", (unsigned)getuid());
		CHECK(strcmp(cfg_str(CFG_LOCAL_DIR), want) == 0);
	}
}

static void test_file_and_env(void)
{
	const char *path = write_file("a.conf",
		"# comment\n\n  compress = zstd  \nchunk_size=1M\nthreads = 0\n");
	char origin[4300];

	setenv("STASIS_THREADS", "3", 1);
	CHECK_EQ(cfg_load(path), 0);
	CHECK(strcmp(cfg_str(CFG_COMPRESS), "zstd") == 0);
	snprintf(origin, sizeof(origin), "file %s:3", path);
	CHECK(strcmp(cfg_origin(CFG_COMPRESS), origin) == 0);
	CHECK_EQ(cfg_u64(CFG_CHUNK_SIZE), 1 << 20);
	CHECK_EQ(cfg_u64(CFG_THREADS), 3);       /* environment beats the file */
	CHECK(strcmp(cfg_origin(CFG_THREADS), "env STASIS_THREADS") == 0);
	CHECK_EQ(cfg_set("threads", "1"), 0);    /* and set() beats the environment */
	CHECK_EQ(cfg_u64(CFG_THREADS), 1);
	CHECK(strcmp(cfg_origin(CFG_THREADS), "set") == 0);
	unsetenv("STASIS_THREADS");

	/* STASIS_CONFIG names the file when no path is given */
	setenv("STASIS_CONFIG", path, 1);
	CHECK_EQ(cfg_load(NULL), 0);
	CHECK(strcmp(cfg_str(CFG_COMPRESS), "zstd") == 0);
	unsetenv("STASIS_CONFIG");
}

static void test_errors(void)
{
	const char *path;

	path = write_file("b.conf", "compress = zstd\nbogus = 1\n");
	CHECK_EQ(cfg_load(path), -EINVAL);
	CHECK(strstr(err_msg(), "b.conf:2: unknown configuration key 'bogus'") != NULL);

	path = write_file("c.conf", "compress = lz5\n");
	CHECK_EQ(cfg_load(path), -EINVAL);
	CHECK(strstr(err_msg(), "bad value 'lz5' for 'compress' (expected none|zstd)") != NULL);

	path = write_file("d.conf", "just words\n");
	CHECK_EQ(cfg_load(path), -EINVAL);
	CHECK(strstr(err_msg(), "d.conf:1: expected 'key = value'") != NULL);

	CHECK(cfg_load("/nonexistent/stasis.conf") < 0);
	CHECK(strstr(err_msg(), "config file /nonexistent/stasis.conf") != NULL);

	setenv("STASIS_CHUNK_SIZE", "5000", 1);
	CHECK_EQ(cfg_load("/dev/null"), -EINVAL);
	CHECK(strstr(err_msg(), "env STASIS_CHUNK_SIZE") != NULL);
	setenv("STASIS_CHUNK_SIZE", "1G", 1);
	CHECK_EQ(cfg_load("/dev/null"), -EINVAL);
	CHECK(strstr(err_msg(), "out of range") != NULL);
	setenv("STASIS_CHUNK_SIZE", "12K", 1);
	CHECK_EQ(cfg_load("/dev/null"), -EINVAL);     /* below the 64K minimum */
	setenv("STASIS_CHUNK_SIZE", "68K", 1);
	CHECK_EQ(cfg_load("/dev/null"), 0);
	unsetenv("STASIS_CHUNK_SIZE");

	setenv("STASIS_THREADS", "-1", 1);
	CHECK_EQ(cfg_load("/dev/null"), -EINVAL);
	CHECK(strstr(err_msg(), "bad value '-1' for 'threads' (expected a number)") != NULL);
	unsetenv("STASIS_THREADS");

	CHECK_EQ(cfg_set("nope", "1"), -ENOENT);
	CHECK(strstr(err_msg(), "unknown configuration key 'nope'") != NULL);

	/* stage_compress: off, zstd or zstd:LEVEL */
	CHECK_EQ(cfg_set("stage_compress", "zstd:19"), 0);
	CHECK_EQ(cfg_stage_level(cfg_str(CFG_STAGE_COMPRESS)), 19);
	CHECK_EQ(cfg_stage_level("zstd"), 1);
	CHECK_EQ(cfg_stage_level("off"), 0);
	CHECK_EQ(cfg_set("stage_compress", "zstd:0"), -EINVAL);
	CHECK(strstr(err_msg(), "bad value 'zstd:0' for 'stage_compress' (expected off, zstd or "
		     "zstd:LEVEL with LEVEL 1-19)") != NULL);
	CHECK_EQ(cfg_set("stage_compress", "zstd:20"), -EINVAL);
	CHECK_EQ(cfg_set("stage_compress", "zstd:3x"), -EINVAL);
	CHECK_EQ(cfg_set("stage_compress", "lz4"), -EINVAL);
	CHECK_EQ(cfg_set("stage_compress", "off"), 0);
}

static void test_sizes(void)
{
	uint64_t n;

	CHECK_EQ(cfg_parse_size("4096", &n), 0);
	CHECK_EQ(n, 4096);
	CHECK_EQ(cfg_parse_size("4M", &n), 0);
	CHECK_EQ(n, 4 << 20);
	CHECK_EQ(cfg_parse_size("2GiB", &n), 0);
	CHECK_EQ(n, 2ULL << 30);
	CHECK_EQ(cfg_parse_size("64k", &n), 0);
	CHECK_EQ(n, 65536);
	CHECK_EQ(cfg_parse_size("4X", &n), -EINVAL);
	CHECK_EQ(cfg_parse_size("", &n), -EINVAL);
	CHECK_EQ(cfg_parse_size("99999999999999999999", &n), -EINVAL);
	CHECK_EQ(cfg_parse_size("99999999999G", &n), -EINVAL);
}

static void test_faults(void)
{
	CHECK_EQ(fault_configure("store.file.rename:3:fail"), 0);
	CHECK_EQ(FAULT(STORE_FILE_RENAME), 0);
	CHECK_EQ(FAULT(STORE_FILE_RENAME), 0);
	CHECK_EQ(FAULT(STORE_FILE_FSYNC), 0);
	CHECK_EQ(FAULT(STORE_FILE_RENAME), -EIO);
	CHECK(strcmp(err_msg(), "fault injected at store.file.rename") == 0);
	CHECK_EQ(FAULT(STORE_FILE_RENAME), 0);   /* only the n-th pass fires */

	CHECK_EQ(fault_configure("image.finish:fail,store.index.append:2:fail"), 0);
	CHECK_EQ(FAULT(IMAGE_FINISH), -EIO);
	CHECK_EQ(FAULT(STORE_INDEX_APPEND), 0);
	CHECK_EQ(FAULT(STORE_INDEX_APPEND), -EIO);

	CHECK_EQ(fault_configure("no.such.point"), -EINVAL);
	CHECK(strstr(err_msg(), "unknown fault point 'no.such.point'") != NULL);
	CHECK_EQ(fault_configure("image.finish:0"), -EINVAL);
	CHECK_EQ(fault_configure("image.finish:often"), -EINVAL);
	CHECK(strstr(err_msg(), "bad field 'often'") != NULL);

	/* the environment arms points through the registry */
	setenv("STASIS_FAULT", "bogus", 1);
	CHECK_EQ(cfg_load("/dev/null"), -EINVAL);
	CHECK(strstr(err_msg(), "env STASIS_FAULT: unknown fault point 'bogus'") != NULL);
	unsetenv("STASIS_FAULT");

	/* kill really kills: in a child */
	{
		pid_t pid = fork();
		int status = 0;

		if (pid == 0) {
			fault_configure("store.dir.fsync");
			FAULT(STORE_DIR_FSYNC);
			_exit(0);
		}
		waitpid(pid, &status, 0);
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	}
	CHECK_EQ(fault_configure(NULL), 0);
	CHECK_EQ(FAULT(IMAGE_FINISH), 0);
}

/* err_set may be handed err_msg() itself: the new message wraps the old
 * one (a bug once garbled "stays established" into "tays established"). */
static void test_err_wraps_itself(void)
{
	err_set(-EIO, "checkpoint %s stays established at level %s", "ckpt-000003", "single");
	err_set(-EIO, "stasis_checkpoint_wait: %s", err_msg());
	CHECK(strcmp(err_msg(), "stasis_checkpoint_wait: checkpoint ckpt-000003 stays established "
			       "at level single") == 0);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	test_err_wraps_itself();

	snprintf(dir, sizeof(dir), "%s/test-config-XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	unsetenv("STASIS_CONFIG");
	test_defaults();
	test_file_and_env();
	test_errors();
	test_sizes();
	test_faults();
	return check_result("config");
}
