/* fsfloor.h - the split process's unavoidable cost, measured natively.
 * Every call of a split process's program writes the FS base twice: the
 * lower half's TLS in, the program's back out (docs/split.md, "Calls
 * between the halves"). Built with -DFS_FLOOR, pingpong.c, rmaput.c and
 * percall.c wrap each MPI call of their measured loops in the same two
 * writes (of the thread's own FS base, so nothing else changes), and run
 * natively: their latency (CPU time, for percall.c) over the plain native
 * one is the floor of the split process's overhead (bench/mpi/run.py,
 * *_fs_floor). */
#ifndef BENCH_MPI_FSFLOOR_H
#define BENCH_MPI_FSFLOOR_H

#ifdef FS_FLOOR
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline void fs_write(void)
{
	static int fsgsbase = -1;
	uint64_t fs;

	if (fsgsbase < 0)   /* as the lower half decides (AT_HWCAP2 bit 1) */
		fsgsbase = (getauxval(AT_HWCAP2) & 2) != 0;
	__asm__ volatile("mov %%fs:0, %0" : "=r"(fs));
	if (fsgsbase)
		__asm__ volatile("wrfsbase %0" : : "r"(fs) : "memory");
	else
		syscall(SYS_arch_prctl, 0x1002 /* ARCH_SET_FS */, fs);
}

#define FS_CROSS(call) ({ fs_write(); int ret_ = (call); fs_write(); ret_; })
#define MPI_Send(...) FS_CROSS(PMPI_Send(__VA_ARGS__))
#define MPI_Recv(...) FS_CROSS(PMPI_Recv(__VA_ARGS__))
#define MPI_Isend(...) FS_CROSS(PMPI_Isend(__VA_ARGS__))
#define MPI_Irecv(...) FS_CROSS(PMPI_Irecv(__VA_ARGS__))
#define MPI_Wait(...) FS_CROSS(PMPI_Wait(__VA_ARGS__))
#define MPI_Comm_rank(...) FS_CROSS(PMPI_Comm_rank(__VA_ARGS__))
#define MPI_Put(...) FS_CROSS(PMPI_Put(__VA_ARGS__))
#define MPI_Win_flush(...) FS_CROSS(PMPI_Win_flush(__VA_ARGS__))
#endif

#endif
