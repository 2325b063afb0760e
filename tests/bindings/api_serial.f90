! api_serial.f90 - every routine of the serial Fortran module once, and the
! errors the binding itself raises; tests/bindings/test_fortran.py runs it
! twice in one job and checks its lines. A derived type goes through
! stasis_type_create + stasis_protect_ptr.
program api_serial
  use, intrinsic :: iso_c_binding
  use stasis
  implicit none

  type, bind(c) :: pair
    real(c_double) :: re, im
  end type pair

  real(8), target :: a(10, 10)
  integer, target :: step
  type(pair), target :: pairs(3)
  integer :: ierr, status, ptype
  logical :: flag

  call stasis_init(0, ierr)
  print '(a,i0,a)', "init comm: ", ierr, " " // stasis_strerror(ierr)
  call stasis_init_serial("/dev/null", ierr)
  print '(a,i0)', "init serial: ", ierr
  call stasis_init_serial(ierr)
  print '(a,i0,a)', "init again: ", ierr, " " // stasis_strerror(ierr)

  step = 0
  a = 1.0d0
  pairs = pair(0.0d0, 0.0d0)
  call stasis_protect(0, step, ierr)
  call stasis_protect(1, a, ierr)
  call stasis_type_create(int(storage_size(pairs(1)) / 8), ptype, ierr)
  call stasis_protect_ptr(2, c_loc(pairs), size(pairs, kind=c_size_t), ptype, ierr)
  print '(a,i0)', "protect: ", ierr
  call stasis_protect(3, a(1:10:2, :), ierr)
  print '(a,i0,a)', "strided: ", ierr, " " // stasis_strerror(ierr)
  call stasis_protect(1, real(a, 4), ierr)
  print '(a,i0,a)', "element size: ", ierr, " " // stasis_strerror(ierr)
  call stasis_protect(1, a, ierr)

  call stasis_status(status, ierr)
  if (status == STASIS_RESTARTED) then
    call stasis_recover(ierr)
    print '(a,i0,a,i0,a,f0.1,a,f0.1)', "recovered: ", ierr, " step=", step, " a=", a(3, 4), &
      " pair=", pairs(2)%im
  else
    print '(a)', "fresh"
  end if
  step = step + 1
  a = a * 2.0d0
  pairs(2)%im = pairs(2)%im + 0.5d0
  call stasis_need_checkpoint(flag, ierr)
  call stasis_should_exit(flag, ierr)
  call stasis_checkpoint_valid(STASIS_LEVEL_SINGLE, .false., ierr)
  print '(a,l1)', "invalid checkpoint refused: ", ierr < 0
  call stasis_checkpoint(STASIS_LEVEL_SINGLE, ierr)
  print '(a,i0)', "checkpoint: ", ierr
  call stasis_recover_var(0, ierr)
  call stasis_unprotect(2, ierr)
  call stasis_finalize(ierr)
  print '(a,i0)', "finalize: ", ierr
  call stasis_recover()   ! no ierr: prints the message and stops
  print '(a)', "not reached"
end program api_serial
