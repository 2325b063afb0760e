! unsupported.f90 - calls a Fortran MPI function the split process does
! not support (MPI_Win_set_name): under Stasis it must name the function and
! end the job; natively rank 0 prints "created". (tests/split)
program unsupported
  implicit none
  include 'mpif.h'
  integer :: ierr, rank, win
  integer(kind=MPI_ADDRESS_KIND) :: sz
  integer(kind=8) :: buf(1)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  sz = 8
  call MPI_Win_create(buf, sz, 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  call MPI_Win_set_name(win, 'w', ierr)
  if (rank == 0) print '(A)', 'created'
  call MPI_Win_free(win, ierr)
  call MPI_Finalize(ierr)
end program unsupported
