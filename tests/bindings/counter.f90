! counter.f90 - a small MPI program on the Fortran binding, for
! tests/bindings/test_fortran.py: an iteration counter and arrays of every
! supported kind and of ranks 0 to 2, updated each step from an allreduce
! (so the ranks depend on each other), checkpointed every few steps.
!
!   counter_f ITERATIONS EVERY LEVEL KILL_RANK KILL_ITERATION OUTPUT
!
! LEVEL is a STASIS_LEVEL_* number. A fresh run (nothing to recover) with
! KILL_RANK >= 0 has that rank SIGKILL itself after step KILL_ITERATION;
! a restarted run never kills, so the same command line finishes the job.
! Each rank writes its final state, raw, to OUTPUT.<rank>.
program counter
  use, intrinsic :: iso_c_binding
  use mpi
  use stasis
  implicit none

  interface
    integer(c_int) function c_raise(sig) bind(c, name="raise")
      import :: c_int
      integer(c_int), value :: sig
    end function
  end interface

  integer, parameter :: NX = 16, NY = 8, NF = 32
  integer, target :: step
  real(8), allocatable, target :: grid(:,:)
  real(4), target :: field(NF)
  integer(8), target :: counts(4)
  integer :: iterations, every, level, kill_rank, kill_iteration
  integer :: rank, nranks, ierr, status, i, unit
  real(8) :: local, total
  character(len=256) :: output, arg
  character(len=16) :: suffix

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  if (command_argument_count() /= 6) then
    if (rank == 0) write (*, '(a)') &
      "usage: counter_f ITERATIONS EVERY LEVEL KILL_RANK KILL_ITERATION OUTPUT"
    call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  end if
  iterations = int_arg(1)
  every = int_arg(2)
  level = int_arg(3)
  kill_rank = int_arg(4)
  kill_iteration = int_arg(5)
  call get_command_argument(6, output)

  step = 0
  allocate(grid(NX, NY))
  do i = 1, NX
    grid(i, :) = real(i + rank, 8) / 7.0d0
  end do
  field = real(rank + 1, 4)
  counts = 0

  call stasis_init(MPI_COMM_WORLD, ierr)
  call check(ierr, "stasis_init")
  call stasis_protect(0, step, ierr)
  call check(ierr, "stasis_protect step")
  call stasis_protect(1, grid, ierr)
  call check(ierr, "stasis_protect grid")
  call stasis_protect(2, field, ierr)
  call check(ierr, "stasis_protect field")
  call stasis_protect(3, counts, ierr)
  call check(ierr, "stasis_protect counts")

  call stasis_status(status, ierr)
  call check(ierr, "stasis_status")
  if (status == STASIS_RESTARTED) then
    call stasis_recover(ierr)
    call check(ierr, "stasis_recover")
    if (rank == 0) write (*, '(a,i0)') "counter: restarted at step ", step
  end if

  do while (step < iterations)
    step = step + 1
    local = sum(grid) + real(sum(field), 8)
    call MPI_Allreduce(local, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    grid = 0.5d0 * grid + 1.0d-3 * total + real(step, 8) * 1.0d-2
    grid(1 + mod(step, NX), :) = sqrt(grid(1 + mod(step, NX), :) + real(rank, 8))
    field = field * 0.75 + real(mod(step * (rank + 3), 11), 4)
    counts(1 + mod(step, 4)) = counts(1 + mod(step, 4)) + int(step, 8) * (rank + 1)
    if (mod(step, every) == 0) then
      call stasis_checkpoint(level, ierr)
      call check(ierr, "stasis_checkpoint")
    end if
    if (status == STASIS_FRESH .and. rank == kill_rank .and. step == kill_iteration) then
      call stasis_checkpoint_wait(ierr)     ! its copies are made: the kill strikes after
      call check(ierr, "stasis_checkpoint_wait")
      flush (6)
      i = int(c_raise(9_c_int))
    end if
  end do

  write (suffix, '(a,i0)') ".", rank
  open (newunit=unit, file=trim(output) // trim(suffix), access="stream", form="unformatted", &
        status="replace")
  write (unit) step, grid, field, counts
  close (unit)
  call stasis_finalize(ierr)
  call check(ierr, "stasis_finalize")
  write (arg, '(es24.16)') sum(grid)
  if (rank == 0) write (*, '(a,i0,a)') "counter: done step=", step, " sum=" // trim(adjustl(arg))
  call MPI_Finalize(ierr)

contains

  integer function int_arg(n)
    integer, intent(in) :: n
    integer :: io

    call get_command_argument(n, arg)
    read (arg, *, iostat=io) int_arg
    if (io /= 0) then
      write (*, '(a,i0,a)') "counter_f: argument ", n, " is not a number: " // trim(arg)
      call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
    end if
  end function int_arg

  subroutine check(code, what)
    integer, intent(in) :: code
    character(len=*), intent(in) :: what
    integer :: e

    if (code == STASIS_OK) return
    write (*, '(a,i0,a,i0,a)') "counter_f: rank ", rank, ": " // what // " failed (", code, &
      "): " // stasis_strerror(code)
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine check

end program counter
