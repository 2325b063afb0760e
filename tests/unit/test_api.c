/* test_api.c - libstasis without MPI: protect, checkpoint, recover across
 * real process lifetimes (each "run" is a forked child), misuse, invalid
 * checkpoints, corruption and fallback, fault points. */
#include "check.h"
#include "common/fault.h"
#include "stasis.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];

struct state {
	int step;
	double grid[1000];
	struct { char tag[5]; short n; } rec[3];
};

static void fill(struct state *s, int step)
{
	memset(s, 0, sizeof(*s));       /* padding too: the test compares bytes */
	s->step = step;
	for (int i = 0; i < 1000; i++)
		s->grid[i] = step * 1000.0 + i * 0.5;
	for (int i = 0; i < 3; i++) {
		snprintf(s->rec[i].tag, sizeof(s->rec[i].tag), "r%d", step % 100);
		s->rec[i].n = (short)(step + i);
	}
}

static int protect_all(struct state *s)
{
	stasis_type rec = stasis_type_create(sizeof(s->rec[0]));
	int ret = rec > 0 ? 0 : rec;

	ret = ret ? ret : stasis_protect(0, &s->step, 1, STASIS_INT);
	ret = ret ? ret : stasis_protect(1, s->grid, 1000, STASIS_DOUBLE);
	ret = ret ? ret : stasis_protect(2, s->rec, 3, rec);
	return ret;
}

/* Run fn in a child process (a fresh library state, like a new run of the
 * program); returns its exit status, or 128+signal. */
static int run(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0)
		_exit(fn(arg));
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int write_steps(void *arg)
{
	int *steps = arg;
	struct state s;

	if (stasis_init_serial(NULL) || protect_all(&s))
		return 10;
	for (int i = 0; steps[i]; i++) {
		fill(&s, steps[i]);
		if (stasis_checkpoint(steps[i] % 2 ? STASIS_LEVEL_SINGLE : STASIS_LEVEL_GLOBAL)) {
			fprintf(stderr, "checkpoint: %s\n", stasis_strerror(-1));
			return 11;
		}
	}
	return stasis_finalize() ? 12 : 0;
}

/* Exit status: the recovered step, 0 if fresh, 200+ on error. */
static int recover_step(void *arg)
{
	struct state s, want;
	int ret;

	(void)arg;
	memset(&s, 0, sizeof(s));
	if (stasis_init_serial(NULL) || protect_all(&s))
		return 201;
	if (stasis_status() == STASIS_FRESH)
		return 0;
	ret = stasis_recover();
	if (ret) {
		fprintf(stderr, "recover: %s\n", stasis_strerror(ret));
		return 202;
	}
	fill(&want, s.step);
	if (memcmp(&s, &want, sizeof(s)) != 0)
		return 203;          /* wrong data: never acceptable */
	stasis_finalize();
	return s.step;
}

static int misuse(void *arg)
{
	int x = 0, flag = 0, ret;

	CHECK(stasis_protect(0, &x, 1, STASIS_INT) < 0);
	CHECK(strstr(stasis_strerror(stasis_protect(0, &x, 1, STASIS_INT)), "stasis_init") != NULL);
	CHECK_EQ(stasis_init_serial(NULL), 0);
	CHECK_EQ(stasis_init_serial(NULL), -EALREADY);
	CHECK_EQ(stasis_status(), STASIS_FRESH);
	ret = stasis_protect(0, NULL, 4, STASIS_INT);
	CHECK_EQ(ret, -EINVAL);
	CHECK(strstr(stasis_strerror(ret), "NULL pointer") != NULL);
	CHECK(stasis_protect(-1, &x, 1, STASIS_INT) < 0);
	CHECK(stasis_protect(0, &x, 1, 999) < 0);
	CHECK_EQ(stasis_protect(0, &x, 1, STASIS_INT), 0);
	ret = stasis_protect(0, &x, 1, STASIS_DOUBLE);
	CHECK_EQ(ret, -EINVAL);
	CHECK(strstr(stasis_strerror(ret), "id 0 was protected with 4-byte elements") != NULL);
	ret = stasis_recover_var(7);
	CHECK_EQ(ret, -ENOENT);
	CHECK(strstr(stasis_strerror(ret), "id 7 is not protected") != NULL);
	ret = stasis_recover();
	CHECK_EQ(ret, -ENOENT);
	CHECK(strstr(stasis_strerror(ret), "no established checkpoint") != NULL);
	CHECK(stasis_checkpoint(17) < 0);
	CHECK(stasis_type_create(0) < 0);
	CHECK(stasis_protect_distributed(5, &x, 2, STASIS_INT, 1, 0) < 0);
	CHECK_EQ(stasis_need_checkpoint(&flag), 0);
	CHECK_EQ(flag, 1);              /* no cost measured yet */
	CHECK_EQ(stasis_checkpoint(STASIS_LEVEL_SINGLE), 0);
	CHECK_EQ(stasis_need_checkpoint(&flag), 0);
	CHECK_EQ(flag, 0);              /* a cheap checkpoint, a day's MTBF */
	/* one process is one node: partner degrades to single, never aborts */
	CHECK_EQ(stasis_checkpoint(STASIS_LEVEL_PARTNER), 0);
	CHECK_EQ(stasis_checkpoint(STASIS_LEVEL_RS), 0);
	CHECK_EQ(stasis_should_exit(&flag), 0);
	CHECK_EQ(flag, 0);
	{
		char routed[4096];

		ret = stasis_route_file("a", routed, sizeof(routed));
		CHECK(ret < 0 && strstr(stasis_strerror(ret), "call stasis_start_output") != NULL);
		CHECK(stasis_complete_output(1) < 0);
		CHECK(stasis_start_output("") < 0);
	}
	CHECK_EQ(stasis_unprotect(0), 0);
	CHECK_EQ(stasis_unprotect(0), -ENOENT);
	CHECK_EQ(stasis_finalize(), 0);
	ret = stasis_protect(0, &x, 1, STASIS_INT);
	CHECK(ret < 0 && strstr(stasis_strerror(ret), "after stasis_finalize") != NULL);
	(void)arg;
	return check_failures;
}

/* In a child, so this process keeps a library that was never initialized. */
static void test_misuse(void)
{
	CHECK_EQ(run(misuse, NULL), 0);
}

static void setup_job(const char *name)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/%s-local", dir, name);
	setenv("STASIS_LOCAL_DIR", path, 1);
	snprintf(path, sizeof(path), "%s/%s-global", dir, name);
	setenv("STASIS_GLOBAL_DIR", path, 1);
	setenv("STASIS_JOB", name, 1);
	setenv("STASIS_NODE", "n0", 1);
}

static void flip_byte(const char *path, long offset)
{
	FILE *f = fopen(path, "r+b");
	int c;

	CHECK(f != NULL);
	if (!f)
		return;
	fseek(f, offset, SEEK_SET);
	c = fgetc(f);
	fseek(f, offset, SEEK_SET);
	fputc(c ^ 0xff, f);
	fclose(f);
}

static void test_restart_levels(void)
{
	int steps[] = { 3, 4, 5, 0 };   /* single, global, single */
	char path[4300];

	setup_job("levels");
	CHECK_EQ(run(recover_step, NULL), 0);          /* fresh */
	CHECK_EQ(run(write_steps, steps), 0);
	CHECK_EQ(run(recover_step, NULL), 5);
	/* the newest (single, step 5) damaged: fall back to step 4 (global),
	 * from the node's cache, where every checkpoint is written first */
	snprintf(path, sizeof(path), "%s/levels-local/n0/levels/ckpt-000003/rank-00000.img", dir);
	flip_byte(path, 200);
	CHECK_EQ(run(recover_step, NULL), 4);
	/* its cached copy gone: the global tier's */
	snprintf(path, sizeof(path), "%s/levels-local/n0/levels/ckpt-000002/rank-00000.img", dir);
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(run(recover_step, NULL), 4);
	/* and that one deleted too: step 3 left the cache (cache_keep 2), so
	 * nothing is left: refuse, never invent data */
	snprintf(path, sizeof(path), "%s/levels-global/levels/ckpt-000002/rank-00000.img", dir);
	CHECK_EQ(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/levels-local/n0/levels/ckpt-000001/rank-00000.img", dir);
	CHECK_EQ(access(path, F_OK), -1);
	CHECK_EQ(run(recover_step, NULL), 202);
}

static int invalid_then_valid(void *arg)
{
	struct state s;
	int ret;

	(void)arg;
	if (stasis_init_serial(NULL) || protect_all(&s))
		return 10;
	fill(&s, 7);
	if (stasis_checkpoint(STASIS_LEVEL_SINGLE))
		return 11;
	fill(&s, 9);
	ret = stasis_checkpoint_valid(STASIS_LEVEL_SINGLE, 0);
	if (ret != -ECANCELED || !strstr(stasis_strerror(ret), "declared its data invalid"))
		return 12;
	return 0;
}

static void test_invalid(void)
{
	setup_job("invalid");
	CHECK_EQ(run(invalid_then_valid, NULL), 0);
	CHECK_EQ(run(recover_step, NULL), 7);
}

static int faulty(void *arg)
{
	struct state s;

	if (stasis_init_serial(NULL) || protect_all(&s))
		return 10;
	fill(&s, 11);
	if (stasis_checkpoint(STASIS_LEVEL_GLOBAL))
		return 11;
	/* its copy to the global tier runs in the background: done before
	 * the fault is armed, so the passes counted are the next checkpoint's */
	if (stasis_checkpoint_wait())
		return 14;
	fault_configure(arg);
	fill(&s, 13);
	return stasis_checkpoint(STASIS_LEVEL_GLOBAL) == 0 ? 12 : 0;
}

static void test_faults(void)
{
	static const char *const specs[] = {
		"api.ckpt.write:1:fail", "api.ckpt.commit:1:fail", "store.file.rename:2:fail",
		"api.ckpt.write:1:kill", "api.ckpt.commit:1:kill", "store.index.torn:3:kill",
		"store.ckpt.commit:1:kill",
	};

	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		char job[32];
		int st;

		snprintf(job, sizeof(job), "fault%zu", i);
		setup_job(job);
		st = run(faulty, (void *)specs[i]);
		CHECK(st == 0 || st == 128 + 9);
		if (!(st == 0 || st == 128 + 9))
			fprintf(stderr, "%s: status %d\n", specs[i], st);
		/* the previous checkpoint is the one restart finds */
		CHECK_EQ(run(recover_step, NULL), 11);
	}
}

/* A fault in the background copy of a GLOBAL checkpoint to the global
 * tier: the checkpoint is established already (in the node's cache), so the
 * restart finds it, whether the process was killed or the copy failed. */
static int faulty_upgrade(void *arg)
{
	struct state s;
	int ret;

	if (stasis_init_serial(NULL) || protect_all(&s))
		return 10;
	fill(&s, 11);
	if (stasis_checkpoint(STASIS_LEVEL_GLOBAL) || stasis_checkpoint_wait())
		return 11;
	fault_configure(arg);
	fill(&s, 13);
	if (stasis_checkpoint(STASIS_LEVEL_GLOBAL))
		return 12;
	ret = stasis_checkpoint_wait();
	if (ret != -EIO || !strstr(stasis_strerror(ret), "stays established at level single"))
		return 13;
	return 0;
}

static void test_upgrade_faults(void)
{
	static const char *const specs[] = {
		"api.upgrade.begin:1:fail", "api.upgrade.begin:1:kill", "api.upgrade.level:1:kill",
	};

	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		char job[32];
		int st;

		snprintf(job, sizeof(job), "upfault%zu", i);
		setup_job(job);
		st = run(faulty_upgrade, (void *)specs[i]);
		CHECK(st == 0 || st == 128 + 9);
		if (!(st == 0 || st == 128 + 9))
			fprintf(stderr, "%s: status %d\n", specs[i], st);
		CHECK_EQ(run(recover_step, NULL), 13);
	}
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int read_text(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	return 0;
}

/* arg: the output set's label and content; "bad" writes an invalid set,
 * "missing" routes a file it never writes. */
static int write_output(void *arg)
{
	const char *label = arg;
	char a[4096], b[4096];
	int ret;

	if (stasis_init_serial(NULL))
		return 10;
	if (stasis_start_output(label) || stasis_route_file("out/grid.dat", a, sizeof(a)) ||
	    stasis_route_file("log.txt", b, sizeof(b)))
		return 11;
	if (stasis_route_file("log.txt", b, sizeof(b)) != -EEXIST)
		return 12;
	if (write_text(a, label) || write_text(b, "log of "))
		return 13;
	if (strcmp(label, "missing") == 0) {
		char c[4096];

		stasis_route_file("never.txt", c, sizeof(c));
		ret = stasis_complete_output(1);
		return ret == -EIO && strstr(stasis_strerror(ret), "never.txt was not written") ? 0 : 14;
	}
	ret = stasis_complete_output(strcmp(label, "bad") != 0);
	if (strcmp(label, "bad") == 0)
		return ret == -ECANCELED ? 0 : 15;
	return ret ? 16 : stasis_finalize();
}

/* Exit status: 0 when the newest usable set is arg with intact files. */
static int read_output(void *arg)
{
	char label[64], path[4096], text[256];
	int ret;

	if (stasis_init_serial(NULL))
		return 20;
	ret = stasis_start_restart(label, sizeof(label));
	if (ret)
		return 21;
	if (strcmp(label, arg) != 0)
		return 22;
	ret = stasis_route_file("out/grid.dat", path, sizeof(path));
	if (ret == -EBADMSG)
		return 23;
	if (ret || read_text(path, text, sizeof(text)) || strcmp(text, arg) != 0)
		return 24;
	if (stasis_route_file("nope", path, sizeof(path)) != -ENOENT)
		return 25;
	return stasis_complete_restart(1) ? 26 : 0;
}

static int reject_then_older(void *arg)
{
	char label[64];

	(void)arg;
	if (stasis_init_serial(NULL))
		return 29;
	{
		int r = stasis_start_restart(label, sizeof(label));

		if (r) {
			fprintf(stderr, "start_restart: %s\n", stasis_strerror(r));
			return 30;
		}
	}
	if (stasis_complete_restart(0) != -ECANCELED)
		return 31;
	if (stasis_start_restart(label, sizeof(label)) || strcmp(label, "set-1") != 0)
		return 32;
	return stasis_complete_restart(1) ? 33 : 0;
}

static int status_of(void *arg)
{
	(void)arg;
	if (stasis_init_serial(NULL))
		return 50;
	return stasis_status() == STASIS_FRESH ? 0 : 51;
}

/* ckpt 1 good, ckpt 2 fails after the node seal, ckpt 3 good: the failed one
 * must not push ckpt 1 out of the cache (cache_keep 2). */
static int fail_after_seal(void *arg)
{
	struct state s;

	(void)arg;
	if (stasis_init_serial(NULL) || protect_all(&s))
		return 60;
	fill(&s, 21);
	if (stasis_checkpoint(STASIS_LEVEL_SINGLE))
		return 61;
	fault_configure("api.ckpt.commit:1:fail");
	fill(&s, 22);
	if (stasis_checkpoint(STASIS_LEVEL_SINGLE) != -EIO)
		return 62;
	fault_configure(NULL);
	fill(&s, 23);
	return stasis_checkpoint(STASIS_LEVEL_SINGLE) ? 63 : 0;
}

/* recover_step with warnings logged to <dir>/infocrc.log */
static int recover_step_logged(void *arg)
{
	char log[4300];
	FILE *f;

	(void)arg;
	snprintf(log, sizeof(log), "%s/infocrc.log", dir);
	f = freopen(log, "w", stderr);
	if (!f)
		return 240;
	setenv("STASIS_LOG", "warn", 1);
	return recover_step(NULL);
}

/* checkpoint.json edited into other valid JSON (same size): believed, the
 * level would send restart to the wrong tier; it must be refused as damaged. */
static void test_checkpoint_json_is_checked(void)
{
	int steps[] = { 31, 33, 0 };    /* both single level */
	char path[4300], text[4096];
	FILE *f;
	char *at;
	size_t n;

	setup_job("infocrc");
	CHECK_EQ(run(write_steps, steps), 0);
	snprintf(path, sizeof(path), "%s/infocrc-global/infocrc/ckpt-000002/checkpoint.json", dir);
	f = fopen(path, "r+");
	CHECK(f != NULL);
	if (!f)
		return;
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	at = strstr(text, "\"single\"");
	CHECK(at != NULL);
	if (at) {
		memcpy(at, "\"global\"", 8);
		fseek(f, 0, SEEK_SET);
		fwrite(text, 1, n, f);
	}
	fclose(f);
	CHECK_EQ(run(recover_step_logged, path), 31);
	snprintf(path, sizeof(path), "%s/infocrc.log", dir);
	f = fopen(path, "r");
	n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[n] = '\0';
	if (f)
		fclose(f);
	CHECK(strstr(text, "ckpt-000002/checkpoint.json: damaged (its CRC differs from the index)") != NULL);
}

static void test_failed_checkpoints_leave_the_cache(void)
{
	char path[4300];

	setup_job("sealfail");
	CHECK_EQ(run(fail_after_seal, NULL), 0);
	snprintf(path, sizeof(path), "%s/sealfail-local/n0/sealfail/ckpt-000003/rank-00000.img", dir);
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(run(recover_step, NULL), 21);
}

static void test_routed_files(void)
{
	char path[4300];
	int steps[] = { 41, 0 };

	setup_job("files");
	CHECK_EQ(run(write_output, "set-1"), 0);
	CHECK_EQ(run(status_of, NULL), 0);      /* output sets are not protected memory */
	CHECK_EQ(run(write_steps, steps), 0);           /* protected memory in between */
	CHECK_EQ(run(write_output, "set-2"), 0);
	CHECK_EQ(run(write_output, "bad"), 0);          /* invalid: never used */
	CHECK_EQ(run(write_output, "missing"), 0);
	CHECK_EQ(run(read_output, "set-2"), 0);
	CHECK_EQ(run(recover_step, NULL), 41);          /* recover skips output sets */
	CHECK_EQ(run(reject_then_older, NULL), 0);
	/* a damaged stored file is refused, not handed out */
	snprintf(path, sizeof(path), "%s/files-local/n0/files/ckpt-000003/f0-out%%grid.dat", dir);
	flip_byte(path, 1);
	CHECK_EQ(run(read_output, "set-2"), 23);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/test-api-XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	setenv("STASIS_CONFIG", "/dev/null", 1);
	setenv("STASIS_LOG", getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", 1);
	setup_job("misuse");
	test_misuse();
	test_restart_levels();
	test_invalid();
	test_faults();
	test_upgrade_faults();
	test_routed_files();
	test_failed_checkpoints_leave_the_cache();
	test_checkpoint_json_is_checked();
	return check_result("api");
}
