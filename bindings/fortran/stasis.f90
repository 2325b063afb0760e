! stasis.f90 - the Fortran binding of libstasis (include/stasis.h).
!
! Thin wrappers over the C API through ISO_C_BINDING; the C header stays the
! contract, docs/bindings.md says how to use this module.
!
!   use mpi
!   use stasis
!   integer, target :: step
!   real(8), allocatable, target :: grid(:,:)
!   call stasis_init(MPI_COMM_WORLD, ierr)
!   call stasis_protect(0, step, ierr)
!   call stasis_protect(1, grid, ierr)
!   call stasis_status(status, ierr)
!   if (status == STASIS_RESTARTED) call stasis_recover(ierr)
!   ...
!   call stasis_checkpoint(STASIS_LEVEL_AUTO, ierr)
!   call stasis_finalize(ierr)
!
! Every routine is a subroutine whose last argument, ierr, receives 0
! (STASIS_OK) or the negative error code; stasis_strerror(ierr) gives the
! message. ierr is optional: without it an error prints the message and
! stops the program (error stop), like MPI's default error handler.
!
! Protected memory is written by stasis_recover behind the compiler's back:
! give protected variables the TARGET attribute (or make them pointers) and
! keep them alive, at the same address, until stasis_unprotect or
! stasis_finalize. stasis_protect refuses non-contiguous arrays (array
! sections with strides) rather than protect a temporary copy.
!
! Compiled with -DSTASIS_NO_MPI (and -cpp) for libstasis_serial, which has no
! stasis_init_fortran: stasis_init then fails with -ENOSYS.
module stasis
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
  implicit none
  private

  integer, parameter, public :: STASIS_OK = 0
  ! stasis_status
  integer, parameter, public :: STASIS_FRESH = 0
  integer, parameter, public :: STASIS_RESTARTED = 1
  ! checkpoint levels
  integer, parameter, public :: STASIS_LEVEL_AUTO = 0
  integer, parameter, public :: STASIS_LEVEL_SINGLE = 1
  integer, parameter, public :: STASIS_LEVEL_PARTNER = 2
  integer, parameter, public :: STASIS_LEVEL_RS = 3
  integer, parameter, public :: STASIS_LEVEL_GLOBAL = 4
  ! element types (stasis_protect_ptr); stasis_type_create gives others
  integer, parameter, public :: STASIS_BYTE = 1
  integer, parameter, public :: STASIS_INT = 2
  integer, parameter, public :: STASIS_LONG = 3
  integer, parameter, public :: STASIS_FLOAT = 4
  integer, parameter, public :: STASIS_DOUBLE = 5

  public :: stasis_init, stasis_init_serial, stasis_type_create
  public :: stasis_protect, stasis_protect_ptr, stasis_unprotect
  public :: stasis_status, stasis_recover, stasis_recover_var
  public :: stasis_checkpoint, stasis_checkpoint_valid, stasis_checkpoint_wait
  public :: stasis_need_checkpoint, stasis_should_exit
  public :: stasis_finalize, stasis_strerror

  integer(c_int), parameter :: EINVAL = 22, ENOSYS = 38

  ! A failure found here, before any C call: stasis_strerror's message for
  ! binding_code until the next call.
  integer(c_int) :: binding_code = 0
  character(len=:), allocatable :: binding_msg

  ! stasis_init(comm [, config] [, ierr]); stasis_init_serial([config] [, ierr])
  interface stasis_init
    module procedure init_comm, init_comm_config
  end interface stasis_init
  interface stasis_init_serial
    module procedure init_serial, init_serial_config
  end interface stasis_init_serial

  ! stasis_protect(id, x [, ierr]): x a scalar or an array of any rank of
  ! integer(c_int8_t), integer(c_int), integer(c_long), real(c_float) or
  ! real(c_double) (integer, integer(8), real, real(8) with gfortran).
  interface stasis_protect
    module procedure protect_i1, protect_i4, protect_i8, protect_r4, protect_r8
  end interface stasis_protect

  interface
    function c_init_fortran(fcomm, config) bind(c, name="stasis_init_fortran")
      import :: c_int, c_ptr
      integer(c_int), value :: fcomm
      type(c_ptr), value :: config
      integer(c_int) :: c_init_fortran
    end function
    function c_init_serial(config) bind(c, name="stasis_init_serial")
      import :: c_int, c_ptr
      type(c_ptr), value :: config
      integer(c_int) :: c_init_serial
    end function
    function c_type_create(size) bind(c, name="stasis_type_create")
      import :: c_int, c_size_t
      integer(c_size_t), value :: size
      integer(c_int) :: c_type_create
    end function
    function c_protect(id, ptr, count, type) bind(c, name="stasis_protect")
      import :: c_int, c_ptr, c_size_t
      integer(c_int), value :: id, type
      type(c_ptr), value :: ptr
      integer(c_size_t), value :: count
      integer(c_int) :: c_protect
    end function
    function c_unprotect(id) bind(c, name="stasis_unprotect")
      import :: c_int
      integer(c_int), value :: id
      integer(c_int) :: c_unprotect
    end function
    function c_status() bind(c, name="stasis_status")
      import :: c_int
      integer(c_int) :: c_status
    end function
    function c_recover() bind(c, name="stasis_recover")
      import :: c_int
      integer(c_int) :: c_recover
    end function
    function c_recover_var(id) bind(c, name="stasis_recover_var")
      import :: c_int
      integer(c_int), value :: id
      integer(c_int) :: c_recover_var
    end function
    function c_checkpoint_valid(level, valid) bind(c, name="stasis_checkpoint_valid")
      import :: c_int
      integer(c_int), value :: level, valid
      integer(c_int) :: c_checkpoint_valid
    end function
    function c_checkpoint_wait() bind(c, name="stasis_checkpoint_wait")
      import :: c_int
      integer(c_int) :: c_checkpoint_wait
    end function
    function c_need_checkpoint(flag) bind(c, name="stasis_need_checkpoint")
      import :: c_int
      integer(c_int), intent(out) :: flag
      integer(c_int) :: c_need_checkpoint
    end function
    function c_should_exit(flag) bind(c, name="stasis_should_exit")
      import :: c_int
      integer(c_int), intent(out) :: flag
      integer(c_int) :: c_should_exit
    end function
    function c_finalize() bind(c, name="stasis_finalize")
      import :: c_int
      integer(c_int) :: c_finalize
    end function
    function c_strerror(code) bind(c, name="stasis_strerror")
      import :: c_int, c_ptr
      integer(c_int), value :: code
      type(c_ptr) :: c_strerror
    end function
    function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function
  end interface

contains

  ! ---- errors ----

  ! The message for code: this thread's last failure, or the generic one.
  function stasis_strerror(code) result(msg)
    integer, intent(in) :: code
    character(len=:), allocatable :: msg
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i

    if (code /= 0 .and. code == binding_code) then
      msg = binding_msg
      return
    end if
    p = c_strerror(int(code, c_int))
    if (.not. c_associated(p)) then
      msg = "unknown error"
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: msg)
    do i = 1, n
      msg(i:i) = chars(i)
    end do
  end function stasis_strerror

  ! Hand ret to the caller's ierr, or stop with its message when there is
  ! none. why: the binding's own message for a failure found before any C call.
  subroutine finish(ret, ierr, why)
    integer(c_int), intent(in) :: ret
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: why

    binding_code = 0
    if (present(why) .and. ret < 0) then
      binding_code = ret
      binding_msg = why
    end if
    if (present(ierr)) then
      ierr = int(ret)
    else if (ret < 0) then
      write (error_unit, '(a)') "stasis: " // stasis_strerror(int(ret))
      error stop 1
    end if
  end subroutine finish

  ! A NUL-terminated copy of s (kept by the caller for the call's duration).
  subroutine to_c_string(s, buf)
    character(len=*), intent(in) :: s
    character(kind=c_char), allocatable, target, intent(out) :: buf(:)
    integer :: i

    allocate(buf(len_trim(s) + 1))
    do i = 1, len_trim(s)
      buf(i) = s(i:i)
    end do
    buf(len_trim(s) + 1) = c_null_char
  end subroutine to_c_string

  ! ---- init ----

  ! comm: a Fortran MPI communicator (MPI_COMM_WORLD from `use mpi`, or
  ! comm%MPI_VAL from `use mpi_f08`). Collective.
  subroutine init_comm(comm, ierr)
    integer, intent(in) :: comm
    integer, intent(out), optional :: ierr

#ifdef STASIS_NO_MPI
    call finish(-ENOSYS, ierr, no_mpi(comm))
#else
    call finish(c_init_fortran(int(comm, c_int), c_null_ptr), ierr)
#endif
  end subroutine init_comm

  subroutine init_comm_config(comm, config, ierr)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: config
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: buf(:)

    call to_c_string(config, buf)
#ifdef STASIS_NO_MPI
    call finish(-ENOSYS, ierr, no_mpi(comm))
#else
    call finish(c_init_fortran(int(comm, c_int), c_loc(buf)), ierr)
#endif
  end subroutine init_comm_config

#ifdef STASIS_NO_MPI
  ! The module built for libstasis_serial, which has no stasis_init_fortran.
  function no_mpi(comm) result(msg)
    integer, intent(in) :: comm
    character(len=:), allocatable :: msg
    character(len=160) :: buf

    write (buf, '(a,i0,a)') "stasis_init(comm ", comm, &
      "): this stasis module is the serial build (no MPI); call stasis_init_serial"
    msg = trim(buf)
  end function no_mpi
#endif

  subroutine init_serial(ierr)
    integer, intent(out), optional :: ierr

    call finish(c_init_serial(c_null_ptr), ierr)
  end subroutine init_serial

  subroutine init_serial_config(config, ierr)
    character(len=*), intent(in) :: config
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: buf(:)

    call to_c_string(config, buf)
    call finish(c_init_serial(c_loc(buf)), ierr)
  end subroutine init_serial_config

  ! ---- protect ----

  ! A type of elements of `size` bytes (a derived type: storage_size(x)/8),
  ! for stasis_protect_ptr. type receives it (> 0).
  subroutine stasis_type_create(size, type, ierr)
    integer, intent(in) :: size
    integer, intent(out) :: type
    integer, intent(out), optional :: ierr
    integer(c_int) :: ret

    ret = c_type_create(int(size, c_size_t))
    type = int(max(ret, 0_c_int))
    call finish(min(ret, 0_c_int), ierr)
  end subroutine stasis_type_create

  ! The general form: count elements of `type` at ptr (c_loc(x) of a TARGET).
  subroutine stasis_protect_ptr(id, ptr, count, type, ierr)
    integer, intent(in) :: id, type
    type(c_ptr), intent(in) :: ptr
    integer(c_size_t), intent(in) :: count
    integer, intent(out), optional :: ierr

    call finish(c_protect(int(id, c_int), ptr, count, int(type, c_int)), ierr)
  end subroutine stasis_protect_ptr

  ! Protect what x holds, or refuse memory Stasis could not write back to:
  ! for a strided section the dummy would be a temporary copy. Zero-size x
  ! is protected as NULL with count 0 (c_loc needs an element).
  subroutine protect_checked(id, contiguous, n, ptr, type, ierr)
    integer, intent(in) :: id, type
    logical, intent(in) :: contiguous
    integer(c_size_t), intent(in) :: n
    type(c_ptr), intent(in) :: ptr
    integer, intent(out), optional :: ierr
    character(len=160) :: msg

    if (.not. contiguous) then
      write (msg, '(a,i0,a)') "stasis_protect: id ", id, &
        ": the array is not contiguous (a strided section); protect a whole array"
      call finish(-EINVAL, ierr, trim(msg))
      return
    end if
    call finish(c_protect(int(id, c_int), ptr, n, int(type, c_int)), ierr)
  end subroutine protect_checked

  subroutine protect_i1(id, x, ierr)
    integer, intent(in) :: id
    integer(c_int8_t), target :: x(..)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: ptr

    ptr = c_null_ptr
    if (size(x) > 0 .and. is_contiguous(x)) ptr = c_loc(x)
    call protect_checked(id, is_contiguous(x), int(size(x), c_size_t), ptr, STASIS_BYTE, ierr)
  end subroutine protect_i1

  subroutine protect_i4(id, x, ierr)
    integer, intent(in) :: id
    integer(c_int), target :: x(..)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: ptr

    ptr = c_null_ptr
    if (size(x) > 0 .and. is_contiguous(x)) ptr = c_loc(x)
    call protect_checked(id, is_contiguous(x), int(size(x), c_size_t), ptr, STASIS_INT, ierr)
  end subroutine protect_i4

  subroutine protect_i8(id, x, ierr)
    integer, intent(in) :: id
    integer(c_long), target :: x(..)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: ptr

    ptr = c_null_ptr
    if (size(x) > 0 .and. is_contiguous(x)) ptr = c_loc(x)
    call protect_checked(id, is_contiguous(x), int(size(x), c_size_t), ptr, STASIS_LONG, ierr)
  end subroutine protect_i8

  subroutine protect_r4(id, x, ierr)
    integer, intent(in) :: id
    real(c_float), target :: x(..)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: ptr

    ptr = c_null_ptr
    if (size(x) > 0 .and. is_contiguous(x)) ptr = c_loc(x)
    call protect_checked(id, is_contiguous(x), int(size(x), c_size_t), ptr, STASIS_FLOAT, ierr)
  end subroutine protect_r4

  subroutine protect_r8(id, x, ierr)
    integer, intent(in) :: id
    real(c_double), target :: x(..)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: ptr

    ptr = c_null_ptr
    if (size(x) > 0 .and. is_contiguous(x)) ptr = c_loc(x)
    call protect_checked(id, is_contiguous(x), int(size(x), c_size_t), ptr, STASIS_DOUBLE, ierr)
  end subroutine protect_r8

  subroutine stasis_unprotect(id, ierr)
    integer, intent(in) :: id
    integer, intent(out), optional :: ierr

    call finish(c_unprotect(int(id, c_int)), ierr)
  end subroutine stasis_unprotect

  ! ---- restart ----

  ! status receives STASIS_FRESH or STASIS_RESTARTED.
  subroutine stasis_status(status, ierr)
    integer, intent(out) :: status
    integer, intent(out), optional :: ierr
    integer(c_int) :: ret

    ret = c_status()
    status = int(max(ret, 0_c_int))
    call finish(min(ret, 0_c_int), ierr)
  end subroutine stasis_status

  ! Collective.
  subroutine stasis_recover(ierr)
    integer, intent(out), optional :: ierr

    call finish(c_recover(), ierr)
  end subroutine stasis_recover

  subroutine stasis_recover_var(id, ierr)
    integer, intent(in) :: id
    integer, intent(out), optional :: ierr

    call finish(c_recover_var(int(id, c_int)), ierr)
  end subroutine stasis_recover_var

  ! ---- checkpoint ----

  ! Collective: a checkpoint of every protected region at level (STASIS_LEVEL_*).
  subroutine stasis_checkpoint(level, ierr)
    integer, intent(in) :: level
    integer, intent(out), optional :: ierr

    call finish(c_checkpoint_valid(int(level, c_int), 1_c_int), ierr)
  end subroutine stasis_checkpoint

  ! Collective: valid = .false. on any rank makes the checkpoint FAILED.
  subroutine stasis_checkpoint_valid(level, valid, ierr)
    integer, intent(in) :: level
    logical, intent(in) :: valid
    integer, intent(out), optional :: ierr

    call finish(c_checkpoint_valid(int(level, c_int), merge(1_c_int, 0_c_int, valid)), ierr)
  end subroutine stasis_checkpoint_valid

  ! Wait until every checkpoint this rank took has the copies its level
  ! promises (they follow stasis_checkpoint in the background). Not collective.
  subroutine stasis_checkpoint_wait(ierr)
    integer, intent(out), optional :: ierr

    call finish(c_checkpoint_wait(), ierr)
  end subroutine stasis_checkpoint_wait

  ! Collective: flag = .true. when a checkpoint is due (Young/Daly).
  subroutine stasis_need_checkpoint(flag, ierr)
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierr
    integer(c_int) :: f, ret

    f = 0
    ret = c_need_checkpoint(f)
    flag = f /= 0
    call finish(ret, ierr)
  end subroutine stasis_need_checkpoint

  ! Collective: flag = .true. when the job should checkpoint and end.
  subroutine stasis_should_exit(flag, ierr)
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierr
    integer(c_int) :: f, ret

    f = 0
    ret = c_should_exit(f)
    flag = f /= 0
    call finish(ret, ierr)
  end subroutine stasis_should_exit

  subroutine stasis_finalize(ierr)
    integer, intent(out), optional :: ierr

    call finish(c_finalize(), ierr)
  end subroutine stasis_finalize

end module stasis
