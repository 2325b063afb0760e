/* lh_main.c - the lower half: start MPI, then the application above it.
 *
 *   stasis-lh-openmpi [--] PROGRAM ARGS...     (one per rank, under mpirun)
 *
 * Stages (docs/split.md):
 *   1. aslr    turn address randomization off and execute ourselves again,
 *              so that the lower half lands at the same addresses every time
 *   2. brk     a guard at the program break, before MPI starts, on every
 *              launch and restart: the kernel's brk belongs to no half,
 *              both mallocs use mmap
 *   3. mpi     the real MPI_Init_thread, here, before any application code
 *   4. table   the sts_lh_info table at STS_LH_INFO_ADDR: FS base, rank,
 *              library, the generated and hand-written calls
 *   (a restart goes its own way from here: restart() below)
 *   5. interp  the application's ELF interpreter (its ld.so) mapped at
 *              STS_UH_INTERP, as the kernel would map a program
 *   6. stack   a new stack for the upper half: argv (ld.so, --preload
 *              libstasis-files.so, PROGRAM, ARGS), the environment with
 *              Stasis's MPI library first on LD_LIBRARY_PATH, an
 *              auxiliary vector describing ld.so
 *   7. fill    PROT_NONE reservations over every free gap above that stack,
 *              so that ld.so's mappings land below it (lh_mem.c)
 *   8. jump    to ld.so's entry point on that stack: ld.so loads PROGRAM
 *              with its own libc and Stasis's libmpi, and runs it
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/err.h"
#include "lh.h"
#include "lh_ckpt.h"
#include "lh_fds.h"
#include "lh_written.h"
#include "lh_stage.h"
#include "node/node.h"
#include "lh_ledger.h"
#include "lh_spare.h"
#include "lh_standby.h"

#define PAGE 4096ul

static void stage(const char *name)
{
	struct timespec ts;

	if (!lh_log_on(LOG_DEBUG))
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	lh_log(LOG_DEBUG, "stage %s (%lld.%03ld)", name, (long long)ts.tv_sec,
	       ts.tv_nsec / 1000000);
}

/* The kernel keeps one program break per process, and two libcs share this
 * one: each would grow it from where it last saw it, over the other's
 * chunks, and what the upper half got there would lie outside its range,
 * unsaved. So neither may have it: a PROT_NONE guard right at the break,
 * placed before MPI or the program allocates anything, on a fresh launch
 * and at every restart alike, makes every brk() that grows fail (glibc's
 * malloc then takes its memory with mmap, which keeps the upper half's in
 * its range). lh_brk_check says at a checkpoint that it held. */
static uint64_t brk_at;

static void brk_guard(void)
{
	brk_at = (uint64_t)syscall(SYS_brk, 0);
	if (brk_at & (PAGE - 1) ||
	    mmap((void *)brk_at, LH_BRK_GUARD, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0) != (void *)brk_at)
		lh_die("cannot place the guard at the program break %#lx: %s", (unsigned long)brk_at,
		    strerror(errno));
}

int lh_brk_check(void)
{
	uint64_t now = (uint64_t)syscall(SYS_brk, 0);

	if (now != brk_at)
		return err_set(-ENOTSUP, "rank %d: the program break moved from %#lx to %#lx: heap "
			       "memory outside the upper half's range would not be saved",
			       lh_info->world_rank, (unsigned long)brk_at,
			       (unsigned long)now);
	return 0;
}

static int thread_level(void)
{
	const char *v = getenv("STASIS_MPI_THREAD_LEVEL");

	if (!v || !*v || !strcmp(v, "single"))
		return MPI_THREAD_SINGLE;
	if (!strcmp(v, "serialized"))
		return MPI_THREAD_SERIALIZED;
	if (!strcmp(v, "funneled"))
		return MPI_THREAD_FUNNELED;
	if (!strcmp(v, "multiple"))
		return MPI_THREAD_MULTIPLE;
	lh_die("STASIS_MPI_THREAD_LEVEL=%s: expected single, funneled, serialized or multiple", v);
}

/* PROGRAM as execvp would find it */
static void find_program(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");

	if (strchr(name, '/')) {
		snprintf(out, len, "%s", name);
		if (access(out, X_OK) != 0)
			lh_die("cannot execute %s: %s", name, strerror(errno));
		return;
	}
	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		const char *e = strchr(p, ':');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		snprintf(out, len, "%.*s/%s", (int)n, n ? p : ".", name);
		if (access(out, X_OK) == 0)
			return;
		p += n + (e ? 1 : 0);
	}
	lh_die("cannot execute %s: not found in PATH", name);
}

static void read_at(int fd, void *buf, size_t len, off_t off, const char *what)
{
	ssize_t n = pread(fd, buf, len, off);

	if (n != (ssize_t)len)
		lh_die("%s: cannot read its ELF headers", what);
}

/* The PT_INTERP of the program. */
static void program_interp(const char *prog, char *out, size_t len)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	int fd = open(prog, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		lh_die("cannot open %s: %s", prog, strerror(errno));
	read_at(fd, &eh, sizeof(eh), 0, prog);
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_machine != EM_X86_64)
		lh_die("%s is not an x86-64 ELF program", prog);
	for (int i = 0; i < eh.e_phnum; i++) {
		read_at(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize), prog);
		if (ph.p_type == PT_INTERP) {
			if (ph.p_filesz == 0 || ph.p_filesz >= len)
				lh_die("%s: bad PT_INTERP", prog);
			read_at(fd, out, ph.p_filesz, (off_t)ph.p_offset, prog);
			out[ph.p_filesz] = 0;
			close(fd);
			return;
		}
	}
	lh_die("%s is statically linked: the split process needs a dynamically linked MPI program",
	    prog);
}

struct loaded {
	uint64_t entry, phdr;
	unsigned phnum;
};

static int prot_of(uint32_t f)
{
	return (f & PF_R ? PROT_READ : 0) | (f & PF_W ? PROT_WRITE : 0) | (f & PF_X ? PROT_EXEC : 0);
}

/* Map an ET_DYN interpreter at base, segment by segment, as the kernel does. */
static struct loaded load_interp(const char *path, uint64_t base)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph[32];
	uint64_t lo = UINT64_MAX, hi = 0;
	struct loaded l;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		lh_die("cannot open the program's interpreter %s: %s", path, strerror(errno));
	read_at(fd, &eh, sizeof(eh), 0, path);
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_type != ET_DYN || eh.e_phnum > 32 ||
	    eh.e_phentsize != sizeof(Elf64_Phdr))
		lh_die("%s is not a loadable ELF interpreter", path);
	read_at(fd, ph, eh.e_phnum * sizeof(ph[0]), (off_t)eh.e_phoff, path);
	for (int i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (ph[i].p_vaddr < lo)
			lo = ph[i].p_vaddr & ~(PAGE - 1);
		if (ph[i].p_vaddr + ph[i].p_memsz > hi)
			hi = ph[i].p_vaddr + ph[i].p_memsz;
	}
	if (lo != 0 || hi == 0)
		lh_die("%s: unexpected segment layout", path);
	hi = (hi + PAGE - 1) & ~(PAGE - 1);
	if (mmap((void *)base, hi, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
		 0) != (void *)base)
		lh_die("cannot reserve %#lx..%#lx for the upper half's ld.so: %s", (unsigned long)base,
		    (unsigned long)(base + hi), strerror(errno));
	for (int i = 0; i < eh.e_phnum; i++) {
		const Elf64_Phdr *p = &ph[i];
		uint64_t start = base + (p->p_vaddr & ~(PAGE - 1));
		uint64_t skip = p->p_vaddr & (PAGE - 1);
		uint64_t file_end = base + p->p_vaddr + p->p_filesz;
		uint64_t mem_end = base + p->p_vaddr + p->p_memsz;
		uint64_t page_end = (file_end + PAGE - 1) & ~(PAGE - 1);
		int prot = prot_of(p->p_flags);

		if (p->p_type != PT_LOAD)
			continue;
		if (p->p_filesz &&
		    mmap((void *)start, p->p_filesz + skip, prot, MAP_PRIVATE | MAP_FIXED, fd,
			 (off_t)(p->p_offset - skip)) == MAP_FAILED)
			lh_die("cannot map %s: %s", path, strerror(errno));
		if (p->p_memsz > p->p_filesz) {
			if (page_end > file_end && (prot & PROT_WRITE))
				memset((void *)file_end, 0, page_end - file_end);
			if (mem_end > page_end &&
			    mmap((void *)page_end, mem_end - page_end, prot,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
				lh_die("cannot map the bss of %s: %s", path, strerror(errno));
		}
	}
	close(fd);
	l.entry = base + eh.e_entry;
	l.phdr = base + eh.e_phoff;   /* the first segment maps the file from offset 0 */
	l.phnum = eh.e_phnum;
	return l;
}

/* stack builder: strings from the top down, then the vectors below them */
struct stack {
	char *lo, *top, *str;
};

static uint64_t push_str(struct stack *s, const char *v)
{
	size_t n = strlen(v) + 1;

	s->str -= n;
	if (s->str < s->lo + (1 << 20))
		lh_die("the program's arguments and environment do not fit its stack");
	memcpy(s->str, v, n);
	return (uint64_t)(uintptr_t)s->str;
}

static char *uh_libdir(void)
{
	static char dir[PATH_MAX];
	const char *env = getenv("STASIS_UH_LIBDIR");
	ssize_t n;
	char *slash;

	if (env && *env)
		return (char *)env;
	n = readlink("/proc/self/exe", dir, sizeof(dir) - 8);
	if (n <= 0)
		lh_die("cannot read /proc/self/exe");
	dir[n] = 0;
	slash = strrchr(dir, '/');
	strcpy(slash + 1, "uh");
	return dir;
}

/* room in every upper thread's static TLS block for the lower half's
 * (lh_tlspad.c's 64 KiB and the lower blocks below it) */
#define ONETLS_TUNABLE "glibc.rtld.optional_static_tls=81920"

static uint64_t build_stack(const char *interp, const struct loaded *l, const char *prog,
			    int argc, char **argv, char **envp)
{
	struct rlimit rl;
	size_t size = 8u << 20;
	struct stack s;
	uint64_t *v, *sp, rnd_at, plat_at, execfn_at;
	uint64_t *argp, *envpp;
	int envc = 0, n = 0, nwords;
	unsigned char rnd[16];
	char *ldpath, tunables[4096];
	const char *old;
	static const unsigned long copy[] = { AT_SYSINFO_EHDR, AT_MINSIGSTKSZ, AT_HWCAP, AT_PAGESZ,
					      AT_CLKTCK, AT_FLAGS, AT_UID, AT_EUID, AT_GID,
					      AT_EGID, AT_SECURE, AT_HWCAP2 };
	uint64_t aux[2 * 32];

	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > size)
		size = rl.rlim_cur < (256u << 20) ? rl.rlim_cur : (256u << 20);
	s.lo = mmap((void *)(STS_UH_STACK_TOP - size), size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0);
	if (s.lo != (char *)(STS_UH_STACK_TOP - size))
		lh_die("cannot map the upper half's stack: %s", strerror(errno));
	if (mmap(s.lo - PAGE, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0) == MAP_FAILED)
		lh_die("cannot map the upper half's stack guard: %s", strerror(errno));
	s.top = s.str = s.lo + size;

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		lh_die("getrandom: %s", strerror(errno));
	s.str -= 16;
	memcpy(s.str, rnd, 16);
	rnd_at = (uint64_t)(uintptr_t)s.str;
	plat_at = push_str(&s, "x86_64");
	execfn_at = push_str(&s, prog);

	/* the environment: Stasis's MPI library first on the library path */
	old = getenv("LD_LIBRARY_PATH");
	ldpath = malloc(strlen(uh_libdir()) + (old ? strlen(old) : 0) + 32);
	if (!ldpath)
		lh_die("out of memory");
	sprintf(ldpath, "LD_LIBRARY_PATH=%s%s%s", uh_libdir(), old && *old ? ":" : "",
		old ? old : "");
	for (char **e = envp; *e; e++)
		envc++;
	uint64_t *envv = calloc((size_t)envc + 3, sizeof(uint64_t));
	uint64_t *argvv = calloc((size_t)argc + 4, sizeof(uint64_t));
	char preload[PATH_MAX + 32];
	int ne = 0, na = 0;

	if (!envv || !argvv)
		lh_die("out of memory");
	envv[ne++] = push_str(&s, ldpath);
	/* split_onetls: every upper thread's static TLS block large enough
	 * for the lower half's below the padding (lh_tlspad.c) */
	if (lh_info->onetls) {
		const char *t = getenv("GLIBC_TUNABLES");

		snprintf(tunables, sizeof(tunables), "GLIBC_TUNABLES=%s%s%s", t ? t : "",
			 t && *t ? ":" : "", ONETLS_TUNABLE);
		envv[ne++] = push_str(&s, tunables);
	}
	for (char **e = envp; *e; e++)
		if (strncmp(*e, "LD_LIBRARY_PATH=", 16) != 0 &&
		    (!lh_info->onetls || strncmp(*e, "GLIBC_TUNABLES=", 15) != 0))
			envv[ne++] = push_str(&s, *e);
	/* ld.so's option ahead of PROGRAM: the list of written files first in
	 * the lookup order, before libc whatever the program links
	 * (src/split/upper/uh_files.c); not LD_PRELOAD, which its children would get */
	snprintf(preload, sizeof(preload), "%s/libstasis-files.so", uh_libdir());
	argvv[na++] = push_str(&s, interp);
	argvv[na++] = push_str(&s, "--preload");
	argvv[na++] = push_str(&s, preload);
	argvv[na++] = push_str(&s, prog);
	for (int i = 1; i < argc; i++)
		argvv[na++] = push_str(&s, argv[i]);

	for (size_t i = 0; i < sizeof(copy) / sizeof(copy[0]); i++) {
		errno = 0;
		unsigned long val = getauxval(copy[i]);

		if (errno == 0) {
			aux[n++] = copy[i];
			aux[n++] = val;
		}
	}
	aux[n++] = AT_PHDR, aux[n++] = l->phdr;
	aux[n++] = AT_PHENT, aux[n++] = sizeof(Elf64_Phdr);
	aux[n++] = AT_PHNUM, aux[n++] = l->phnum;
	aux[n++] = AT_BASE, aux[n++] = 0;   /* ld.so runs as the program */
	aux[n++] = AT_ENTRY, aux[n++] = l->entry;
	aux[n++] = AT_RANDOM, aux[n++] = rnd_at;
	aux[n++] = AT_PLATFORM, aux[n++] = plat_at;
	aux[n++] = AT_EXECFN, aux[n++] = execfn_at;
	aux[n++] = AT_NULL, aux[n++] = 0;

	nwords = 1 + (na + 1) + (ne + 1) + n;
	sp = (uint64_t *)(((uintptr_t)s.str - (size_t)nwords * 8) & ~(uintptr_t)15);
	v = sp;
	*v++ = (uint64_t)na;
	argp = v;
	for (int i = 0; i < na; i++)
		*v++ = argvv[i];
	*v++ = 0;
	envpp = v;
	for (int i = 0; i < ne; i++)
		*v++ = envv[i];
	*v++ = 0;
	memcpy(v, aux, (size_t)n * 8);
	(void)argp;
	(void)envpp;
	free(envv);
	free(argvv);
	free(ldpath);
	return (uint64_t)(uintptr_t)sp;
}

/* Restart: the upper half from this rank's image, then into it where its
 * main thread stopped (lh_image.c, lh_agent.c).
 *
 * The rank's image is read back while MPI initializes, on a
 * thread of its own: the two take about as long (4 ranks × 256 MiB here:
 * 0.55 s to read cold, 0.3 s to launch and initialize) and need different
 * things, and the upper half's range is Stasis's alone whether MPI is up or
 * not. The rank and size are the launcher's word for them (Open MPI,
 * MPICH's Hydra, PMIx); checked against MPI's once it is up. Without them,
 * or with STASIS_RESTORE_EARLY=0, the image is read after MPI_Init. */
struct early {
	pthread_t th;
	int started, rank, size, ret;
	char path[PATH_MAX], msg[512];
	struct lh_restored r;
};

static void *early_run(void *arg)
{
	struct early *e = arg;

	e->ret = lh_restore(e->path, e->rank, e->size, &e->r);
	snprintf(e->msg, sizeof(e->msg), "%s", e->ret ? err_msg() : "");
	return NULL;
}

static int launcher_int(const char *const names[3])
{
	for (unsigned i = 0; i < 3; i++) {
		const char *v = getenv(names[i]);

		if (v && *v)
			return atoi(v);
	}
	return -1;
}

static void early_start(struct early *e, const char *dir)
{
	static const char *const rank[3] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK" };
	static const char *const size[3] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE" };

	const char *want = getenv("STASIS_RESTORE_EARLY");

	if (want && !strcmp(want, "0"))
		return;   /* the launcher's variables are not to be trusted */
	e->rank = launcher_int(rank);
	e->size = launcher_int(size);
	if (e->rank < 0 || e->size <= 0 || lh_spare_env(&e->rank, &e->size))
		return;   /* a spare restores nothing */
	/* a lost node's rank gets its image from the others after MPI_Init */
	if (lh_stage_leveled(dir) && !lh_stage_has_local(dir, e->rank))
		return;
	if (lh_stage_image(dir, e->rank, e->path, sizeof(e->path)) != 0)
		return;   /* said after MPI_Init, with the rank MPI gives */
	e->started = pthread_create(&e->th, NULL, early_run, e) == 0;
}

/* Wait for every rank without spinning: the rebuild's collectives would
 * busy-poll (MPICH does) on the CPUs that ranks still reading their
 * images need (4 ranks on 2 CPUs: a restart measured 0.3 s slower) */
static void idle_barrier(void)
{
	MPI_Request req;

	if (MPI_Ibarrier(lh_world, &req) == MPI_SUCCESS)
		lh_wait_idle(&req);
}

/* A checkpoint at level partner or rs whose image some rank's node lost:
 * every rank asks its node agent, which rebuild the lost ones from what
 * the surviving nodes hold (node_level.h). 1 when this rank's image is
 * now at e->path; a refusal ends every rank, rank 0 saying why. */
static int rebuilt(const char *dir, struct early *e)
{
	int rank = lh_info->world_rank, size = lh_info->world_size, own, mine, any = 0;

	if (!lh_stage_leveled(dir))
		return 0;
	own = e->started || lh_stage_has_local(dir, rank);
	mine = !own;
	if (MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, lh_world) != MPI_SUCCESS || !any)
		return 0;
	stage("rebuild images");
	if (lh_stage_rebuild(dir, rank, size, own, e->path, sizeof(e->path)) != 0) {
		if (rank == 0) {
			char line[700];
			int n = snprintf(line, sizeof(line), "stasis: restart: %s\n", err_msg());

			if (write(2, line, (size_t)(n < (int)sizeof(line) ? n : (int)sizeof(line) - 1)) < 0) {
				/* nothing else to do */
			}
		}
		_exit(1);
	}
	return !own;
}

static void __attribute__((noreturn)) enter_restored(const struct lh_restored *r, int barrier);

/* The restart's error, said once with the rank: some messages name it
 * already (lh_stage_image's said "rank 1: rank 1: no copy ...") */
static void __attribute__((noreturn)) die_restart(void)
{
	char own[32];
	int n = snprintf(own, sizeof(own), "rank %d: ", lh_info->world_rank);

	if (!strncmp(err_msg(), own, (size_t)n))
		lh_die("%s", err_msg());
	lh_die("%s%s", own, err_msg());
}

static void __attribute__((noreturn)) restart(const char *dir, struct early *e)
{
	const struct lh_restored *r = &e->r;
	int fetched;

	stage("restore");
	fetched = rebuilt(dir, e);
	if (fetched) {
		if (lh_restore(e->path, lh_info->world_rank, lh_info->world_size, &e->r) != 0)
			die_restart();
	} else if (e->started) {
		pthread_join(e->th, NULL);
		if (e->ret)
			lh_die("rank %d: %s", lh_info->world_rank, e->msg);
		if (e->rank != lh_info->world_rank || e->size != lh_info->world_size)
			lh_die("rank %d of %d: the launcher said rank %d of %d, and read that rank's image",
			    lh_info->world_rank, lh_info->world_size, e->rank, e->size);
	} else {
		lh_log(LOG_DEBUG, "rank %d reads its image after MPI_Init", lh_info->world_rank);
		if (lh_stage_image(dir, lh_info->world_rank, e->path, sizeof(e->path)) != 0 ||
		    lh_restore(e->path, lh_info->world_rank, lh_info->world_size, &e->r) != 0)
			die_restart();
	}
	enter_restored(r, 1);
}

/* A spare told to become a rank (lh_spare.h): its image of ckpt, which a
 * migration brought to this node, restored as a restart does; the ranks
 * that stay make the same communicators meanwhile (lh_state_relink) */
static void __attribute__((noreturn)) adopt(const char *ckpt)
{
	static struct lh_restored r;
	char path[PATH_MAX];

	stage("adopt");
	if (lh_stage_image(ckpt, lh_info->world_rank, path, sizeof(path)) != 0 ||
	    lh_restore(path, lh_info->world_rank, lh_info->world_size, &r) != 0)
		die_restart();
	/* no restart can use the cut: nothing of it stays on the node */
	lh_stage_drop_cut(ckpt, lh_info->world_rank, path);
	enter_restored(&r, 0);
}

/* The restored upper half's objects made on this MPI, the rank registered,
 * then into the program; barrier: every rank restored first (a restart) */
static void __attribute__((noreturn)) enter_restored(const struct lh_restored *r, int barrier)
{
	if (r->vdso != getauxval(AT_SYSINFO_EHDR))
		lh_die("rank %d: the kernel's vdso is at %#lx, it was at %#lx at the checkpoint: "
		    "restart on a machine with the same kernel", lh_info->world_rank,
		    getauxval(AT_SYSINFO_EHDR), (unsigned long)r->vdso);
	lh_info->uh = (const struct sts_uh_callbacks *)(uintptr_t)r->uh_callbacks;
	/* the files the program wrote back as they were, on every rank before
	 * any rank runs on: one that ran on early would write a shared file
	 * that a slower rank then sets back */
	if (lh_written_back(r->written, r->written_len) != 0)
		die_restart();
	free(r->written);   /* the files' contents: back in place */
	if (barrier)
		idle_barrier();
	/* the ledger came back with the upper half: this MPI's handles for
	 * every object the program holds, its pending receives posted again */
	stage("rebuild");
	if (lh_ledger_attach(lh_info->world_rank, lh_info->world_size) != 0)
		die_restart();
	lh_lg->restarts = r->restarts + 1;
	lh_handles_init(1);
	if (lh_state_rebuild() != 0)
		die_restart();
	stage("register");
	lh_agent_start(r->restarts + 1);
	stage("enter");
	if (lh_fds_place(r->fds, r->nfds) != 0)
		die_restart();
	lh_fds_entering(r->fds, r->nfds);
	lh_yield_idle(0);   /* a spare's adoption set it (lh_spare.c) */
	lh_lazy_go();
	fflush(NULL);
	lh_enter_upper(r);
}

/* split_onetls's padding is linked into stasis-lh-<mpi> only
 * (lh_tlspad.c), which the key needs below MPI_THREAD_SERIALIZED: at
 * multiple the padding cost each rank 4.2 MiB more (its 63 dormant
 * threads' TLS). The other executable when this one does not match, to
 * be executed instead (with the address randomization's own new start,
 * so at no cost where that is taken); NULL when it matches or the other
 * is not there. */
void *lh_tls_pad_at(size_t *len);

static const char *lh_variant(char *path, size_t len)
{
	char self[PATH_MAX];
	ssize_t r = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t padlen;
	int want, n;

	if (r <= 0)
		return NULL;
	self[r] = '\0';
	lh_tls_pad_at(&padlen);
	want = cfg_load(NULL) == 0 && strcmp(cfg_str(CFG_SPLIT_ONETLS), "on") == 0 &&
	       thread_level() < MPI_THREAD_SERIALIZED;
	if (want == (padlen != 0))
		return NULL;
	if (padlen)
		n = snprintf(path, len, "%s-nopad", self);
	else if (r > 6 && !strcmp(self + r - 6, "-nopad"))
		n = snprintf(path, len, "%.*s", (int)(r - 6), self);
	else
		return NULL;
	if (n <= 0 || (size_t)n >= len || access(path, X_OK) != 0)
		return NULL;
	return path;
}

int main(int argc, char **argv, char **envp)
{
	int pers = personality(0xffffffff), provided = 0, level, len = 0;
	char prog[PATH_MAX], interp[PATH_MAX], lib[MPI_MAX_LIBRARY_VERSION_STRING];
	char other[PATH_MAX];
	const char *variant;
	struct loaded l;
	uint64_t sp;
	const char *restore;
	sigset_t all, mask;
	static struct early early;
	void *page;

	/* first: lh_variant's configuration is the first malloc, and a main
	 * arena begun on the break would give pages of it back below the
	 * guard later (a checkpoint then refuses: "the program break moved") */
	stage("brk");
	brk_guard();
	stage("aslr");
	variant = lh_variant(other, sizeof(other));
	if (variant || (pers != -1 && !(pers & ADDR_NO_RANDOMIZE))) {
		if (pers != -1 && !(pers & ADDR_NO_RANDOMIZE) &&
		    personality((unsigned long)pers | ADDR_NO_RANDOMIZE) == -1)
			lh_die("cannot turn address randomization off: %s", strerror(errno));
		execv(variant ? variant : "/proc/self/exe", argv);
		lh_die("cannot execute itself again: %s", strerror(errno));
	}
	if (argc > 1 && !strcmp(argv[1], "--"))
		argv++, argc--;
	if (argc < 2 || argv[1][0] == '-')
		lh_die("usage: %s [--] PROGRAM ARGS...", argv[0]);
	argv++, argc--;   /* argv[0] is now PROGRAM */
	find_program(argv[0], prog, sizeof(prog));
	program_interp(prog, interp, sizeof(interp));

	lh_fds_start();

	stage("mpi");
	/* the node's agent for the job, started by the node's first rank now,
	 * before MPI_Init: a fork after it can upset MPI's transports */
	if (getenv("STASIS_COORD_ADDR") && getenv("STASIS_RUN_ID") && node_agent_ensure() != 0)
		lh_log(LOG_WARN, "%s; the rank runs without checkpoints", err_msg());
	level = thread_level();
	restore = getenv("STASIS_RESTORE_DIR");
	/* the threads started from here to the end of MPI_Init (MPI's own,
	 * the image's readers) block every signal but the checkpoint's (sent
	 * to each thread, which answers it is the lower half's): a signal sent
	 * to the process runs the program's handler, and on one of them it
	 * would run on the lower half's TLS. The main thread's mask comes back
	 * after. Threads MPI starts later from these inherit their mask. */
	sigfillset(&all);
	sigdelset(&all, LH_CKPT_SIGNAL);
	sigprocmask(SIG_BLOCK, &all, &mask);
	if (restore && *restore)
		early_start(&early, restore);
#ifdef OPEN_MPI
	/* Open MPI 4.1's osc/rdma over vader dies of SIGSEGV in its emulated
	 * atomics (MPI_Compare_and_swap, and MPI_Win_lock_all natively), and
	 * osc/ucx's MPI_Fetch_and_op waited for good for a target that was
	 * itself reading its words (lh_win.c): osc/pt2pt, unless the user
	 * chose */
	int osc_set = !getenv("OMPI_MCA_osc") && setenv("OMPI_MCA_osc", "^rdma,ucx", 1) == 0;
#endif
	if (MPI_Init_thread(NULL, NULL, level, &provided) != MPI_SUCCESS)
		lh_die("MPI_Init_thread failed");
#ifdef OPEN_MPI
	if (osc_set)
		unsetenv("OMPI_MCA_osc");
#endif
	if (lh_sig_wrap())
		lh_log(LOG_DEBUG, "MPI's signal handlers run on the lower half's TLS");
	sigprocmask(SIG_SETMASK, &mask, NULL);
	/* errors come back to the upper half, which raises them on the
	 * program's handlers (src/split/upper/uh_err.c); every communicator made
	 * later inherits this, files return errors by default */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
	lh_spare_start();   /* a spare stays there until the job ends or it becomes a rank */

	stage("table");
	page = mmap((void *)STS_LH_INFO_ADDR, (sizeof(*lh_info) + PAGE - 1) & ~(PAGE - 1),
		    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (page != (void *)STS_LH_INFO_ADDR)
		lh_die("cannot map the table at %#llx: %s", STS_LH_INFO_ADDR, strerror(errno));
	lh_info = page;
	lh_info->magic = STS_LH_MAGIC;
	lh_info->version = STS_LH_VERSION;
	lh_info->fsgsbase = (getauxval(AT_HWCAP2) & 2) ? 1 : 0;
	lh_info->lh_fs = sts_rdfs(0);
	lh_info->thread_provided = provided;
	MPI_Comm_rank(lh_world, &lh_info->world_rank);
	MPI_Comm_size(lh_world, &lh_info->world_size);
	MPI_Get_library_version(lib, &len);
	lib[strcspn(lib, "\n")] = 0;
	snprintf(lh_info->library, sizeof(lh_info->library), "%.255s", lib);
	sts_gen_ops_fill(&lh_info->gen);
	lh_hand_ops_fill(&lh_info->hand);
	lh_engine_set(&(const struct lh_engine_ops){
		.request = lh_agent_request, .quit = lh_agent_quit, .bye = lh_agent_bye });
	lh_info->mem_unfill = lh_mem_unfill;
	if (lh_poll_init())
		lh_log(LOG_DEBUG, "requests tested by their completion word");
	if (lh_tls_start() != 0)
		lh_die("cannot start the threads whose TLS the program's threads borrow in MPI");
	lh_onetls_setup();

	if (lh_spare_adopted())
		adopt(lh_spare_adopted());
	if (!restore || !*restore)
		restore = lh_standby_wait();   /* a stand-by: the checkpoint it is told */
	if (restore && *restore)
		restart(restore, &early);
	if (lh_ledger_create(lh_info->world_rank, lh_info->world_size) != 0)
		lh_die("%s", err_msg());
	lh_handles_init(0);
	lh_agent_start(0);

	stage("interp");
	l = load_interp(interp, STS_UH_INTERP);

	stage("stack");
	lh_spare_environ(envp);
	sp = build_stack(interp, &l, prog, argc, argv, envp);

	stage("fill");
	lh_mem_fill();

	stage("jump");
	lh_fds_entering(NULL, 0);
	fflush(NULL);
	/* fixed registers: with "r" the compiler may choose rdx or rbp, which
	 * are cleared here (it did at -O0, and the jump went to 0) */
	__asm__ volatile("mov %%rdi, %%rsp\n\t"
			 "xor %%edx, %%edx\n\t"
			 "xor %%ebp, %%ebp\n\t"
			 "jmp *%%rsi\n\t"
			 : : "D"(sp), "S"(l.entry) : "memory");
	__builtin_unreachable();
}
