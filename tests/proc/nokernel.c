/* nokernel NR ERRNO [ARG0] -- PROGRAM ARGS...
 *
 * Runs PROGRAM as on a kernel that lacks one system call: a seccomp filter
 * makes system call NR fail with ERRNO (when ARG0 is given, only when its
 * first argument equals ARG0, e.g. one prctl option). The filter is
 * inherited by every descendant, so `nokernel 435 38 -- stasis restart`
 * restarts on a "kernel without clone3". Used by test_commands.py to check
 * that restart refuses such a kernel in one line. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int i = 1, has_arg = 0;
	unsigned long nr, err, arg = 0;

	if (argc < 5) {
		fprintf(stderr, "usage: nokernel NR ERRNO [ARG0] -- PROGRAM ARGS...\n");
		return 2;
	}
	nr = strtoul(argv[i++], NULL, 0);
	err = strtoul(argv[i++], NULL, 0);
	if (strcmp(argv[i], "--") != 0) {
		arg = strtoul(argv[i++], NULL, 0);
		has_arg = 1;
	}
	if (i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc) {
		fprintf(stderr, "nokernel: expected -- PROGRAM\n");
		return 2;
	}
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 4),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)arg, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, has_arg ? SECCOMP_RET_ALLOW : SECCOMP_RET_ERRNO | (err & 0xfff)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & 0xfff)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		perror("nokernel: seccomp");
		return 2;
	}
	execvp(argv[i + 1], argv + i + 1);
	perror("nokernel: exec");
	return 127;
}
