! fortran.f90 - a Fortran MPI program that checks itself (tests/split).
!
!   fortran ITERATIONS SLEEP_MS [DIR]
!
! Any number of ranks >= 2. Built with mpif.h and MPI_Init; compiled with
! -cpp -DUSE_MPI_MODULE it uses the mpi module and MPI_Init_thread. Before the loop it
! duplicates MPI_COMM_WORLD (ring), sets MPI_ERRORS_RETURN on ring, and
! splits WORLD by rank parity (half), so that created handles cross every
! checkpoint, and sets on half a handler of its own (on_error, made with
! MPI_Comm_create_errhandler, then freed: half keeps it). Every iteration rank 0
! prints "rank 0 iteration I", then every rank
!
!  a. posts MPI_Irecv of NI integers (tag 1) and ND doubles (tag 2, over the
!     eager limits) from its left neighbour on ring, MPI_Isend's its own to
!     the right, sleeps SLEEP_MS, checks that ring still has MPI_ERRORS_RETURN
!     (a send to rank N returns an error) and completes the four requests with one
!     MPI_Waitall; it checks both messages' contents (they depend on the
!     sender, the iteration and the index) and their statuses (MPI_SOURCE,
!     MPI_TAG, MPI_Get_count): 4 checks;
!  b. MPI_Allreduce (MPI_SUM) on MPI_COMM_WORLD of a REAL*8 and of NS
!     integers, on ring of NS integers with MPI_IN_PLACE, on half of one
!     integer, each checked against its closed form: 4 checks;
!  c. on ring: MPI_Sendrecv NS integers to the right and from the left
!     (contents and status), MPI_Bcast of an integer from rank 0, an
!     MPI_Irecv completed by polling MPI_Test and one completed by MPI_Wait
!     (contents and statuses) after MPI_Send's to the right, MPI_Send and
!     MPI_Recv with MPI_STATUS_IGNORE, then MPI_Barrier: 5 checks;
!  d. sends to rank N on half: on_error must have been called once, with
!     half and a code that is not MPI_SUCCESS: 1 check;
!  e. folds what it received and the sums into a running checksum;
!  f. with DIR: reads the previous iteration's number from DIR/w-R.txt (R
!     its rank), rewrites it with this one's (OPEN status='replace', then
!     CLOSE) and appends "iteration I" to DIR/a-R.txt (position='append'):
!     files written and closed, whose state after a restart is the
!     checkpoint's only if Stasis saved them (docs/split.md).
!
! Before the loop it checks MPI_Initialized, MPI_Wtime and MPI_Wtick. At
! the end each rank recomputes the checksum from the closed forms of every
! iteration (an iteration lost or run twice across a restart changes it),
! MPI_Reduce sums the checks to rank 0, which prints
! "PASS ranks=N iterations=I checks=C" with C = 14 * N * I. Any mismatch
! prints a FAIL line and calls MPI_Abort.
program fortran
#ifdef USE_MPI_MODULE
  use mpi
#endif
  use, intrinsic :: iso_c_binding, only: c_int
  implicit none
#ifndef USE_MPI_MODULE
  include 'mpif.h'
#endif
  interface
    integer(c_int) function usleep(us) bind(c, name='usleep')
      import :: c_int
      integer(c_int), value :: us
    end function usleep
  end interface
  integer, parameter :: NI = 1000, ND = 20000, NS = 3
  integer :: ierr, rank, nranks, ring, half, left, right, it, iters, sleep_ms, j, k
  integer :: reqs(4), st(MPI_STATUS_SIZE, 4), cnt, hsum, hwant, total
  integer :: isend(NI), irecv(NI), iv(NS), isum(NS), ip(NS)
  double precision :: dsend(ND), drecv(ND), x, xsum
  integer(8) :: csum, want
  integer :: checks, sr(NS), bval, t1, t2, t3, polls, eh, myeh, before
  integer :: hcalls, hcomm, hcode
  common /errh/ hcalls, hcomm, hcode
  external :: on_error
  logical :: flag
  character(len=32) :: arg
  character(len=512) :: dir

  call get_command_argument(1, arg)
  read (arg, *) iters
  call get_command_argument(2, arg)
  read (arg, *) sleep_ms
  dir = ''
  if (command_argument_count() >= 3) call get_command_argument(3, dir)

  call MPI_Initialized(flag, ierr)
  if (flag) call fail('MPI_Initialized before MPI_Init', 1)
#ifdef USE_MPI_MODULE
  call MPI_Init_thread(MPI_THREAD_SINGLE, cnt, ierr)
  if (cnt < MPI_THREAD_SINGLE .or. cnt > MPI_THREAD_MULTIPLE) call fail('MPI_Init_thread', cnt)
#else
  call MPI_Init(ierr)
#endif
  call MPI_Initialized(flag, ierr)
  if (.not. flag) call fail('MPI_Initialized after MPI_Init', 0)
  x = MPI_Wtime()
  if (x < 0d0 .or. MPI_Wtime() < x .or. MPI_Wtick() <= 0d0 .or. MPI_Wtick() > 1d-3) &
    call fail('MPI_Wtime or MPI_Wtick', 0)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_dup(MPI_COMM_WORLD, ring, ierr)
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half, ierr)
  call MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_set_errhandler', ierr)
  hcalls = 0
  call MPI_Comm_create_errhandler(on_error, myeh, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_create_errhandler', ierr)
  call MPI_Comm_set_errhandler(half, myeh, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_set_errhandler of half', ierr)
  call MPI_Errhandler_free(myeh, ierr)
  if (ierr /= MPI_SUCCESS .or. myeh /= MPI_ERRHANDLER_NULL) call fail('MPI_Errhandler_free', myeh)
  left = mod(rank - 1 + nranks, nranks)
  right = mod(rank + 1, nranks)
  checks = 0
  csum = 0

  do it = 1, iters
    if (rank == 0) then
      write (*, '(A,I0)') 'rank 0 iteration ', it
      flush (6)
    end if
    ! a. the ring
    do j = 1, NI
      isend(j) = ival(rank, it, j)
    end do
    do j = 1, ND
      dsend(j) = dval(rank, it, j)
    end do
    irecv = -1
    drecv = -1d0
    call MPI_Irecv(irecv, NI, MPI_INTEGER, left, 1, ring, reqs(1), ierr)
    call MPI_Irecv(drecv, ND, MPI_DOUBLE_PRECISION, left, 2, ring, reqs(2), ierr)
    call MPI_Isend(isend, NI, MPI_INTEGER, right, 1, ring, reqs(3), ierr)
    call MPI_Isend(dsend, ND, MPI_DOUBLE_PRECISION, right, 2, ring, reqs(4), ierr)
    ierr = usleep(int(sleep_ms * 1000, c_int))
    ! ring returns errors, after every restart too
    call MPI_Comm_get_errhandler(ring, eh, ierr)
    if (ierr /= MPI_SUCCESS .or. eh /= MPI_ERRORS_RETURN) call fail('errhandler of ring', eh)
    call MPI_Send(isend, 1, MPI_INTEGER, nranks, 9, ring, ierr)
    if (ierr == MPI_SUCCESS) call fail('a send to rank nranks succeeded', it)
    call MPI_Waitall(4, reqs, st, ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Waitall failed', ierr)
    do k = 1, 4
      if (reqs(k) /= MPI_REQUEST_NULL) call fail('request not freed', k)
    end do
    do j = 1, NI
      if (irecv(j) /= ival(left, it, j)) call fail('integer message', j)
    end do
    checks = checks + 1
    do j = 1, ND
      if (drecv(j) /= dval(left, it, j)) call fail('double message', j)
    end do
    checks = checks + 1
    call MPI_Get_count(st(:, 1), MPI_INTEGER, cnt, ierr)
    if (st(MPI_SOURCE, 1) /= left .or. st(MPI_TAG, 1) /= 1 .or. cnt /= NI) &
      call fail('status of the integer message', cnt)
    checks = checks + 1
    call MPI_Get_count(st(:, 2), MPI_DOUBLE_PRECISION, cnt, ierr)
    if (st(MPI_SOURCE, 2) /= left .or. st(MPI_TAG, 2) /= 2 .or. cnt /= ND) &
      call fail('status of the double message', cnt)
    checks = checks + 1

    ! b. reductions
    x = dble(rank + 1) + 0.5d0 * it
    call MPI_Allreduce(x, xsum, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (xsum /= dble(nranks * (nranks + 1) / 2) + 0.5d0 * it * nranks) &
      call fail('real sum', it)
    checks = checks + 1
    do k = 1, NS
      iv(k) = (rank + 1) * it + k
    end do
    call MPI_Allreduce(iv, isum, NS, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    do k = 1, NS
      if (isum(k) /= it * nranks * (nranks + 1) / 2 + nranks * k) call fail('integer sum', k)
    end do
    checks = checks + 1
    do k = 1, NS
      ip(k) = rank * k + it
    end do
    call MPI_Allreduce(MPI_IN_PLACE, ip, NS, MPI_INTEGER, MPI_SUM, ring, ierr)
    do k = 1, NS
      if (ip(k) /= k * nranks * (nranks - 1) / 2 + nranks * it) call fail('in-place sum', k)
    end do
    checks = checks + 1
    call MPI_Allreduce(rank, hsum, 1, MPI_INTEGER, MPI_SUM, half, ierr)
    hwant = 0
    do k = mod(rank, 2), nranks - 1, 2
      hwant = hwant + k
    end do
    if (hsum /= hwant) call fail('sum over half', hsum)
    checks = checks + 1

    ! c. blocking calls, Test and Wait
    sr = -1
    call MPI_Sendrecv(isend, NS, MPI_INTEGER, right, 3, sr, NS, MPI_INTEGER, left, 3, ring, &
                      st(:, 1), ierr)
    do k = 1, NS
      if (sr(k) /= ival(left, it, k)) call fail('Sendrecv message', k)
    end do
    if (st(MPI_SOURCE, 1) /= left .or. st(MPI_TAG, 1) /= 3) call fail('Sendrecv status', 0)
    checks = checks + 1
    bval = -1
    if (rank == 0) bval = 7 * it + 1
    call MPI_Bcast(bval, 1, MPI_INTEGER, 0, ring, ierr)
    if (bval /= 7 * it + 1) call fail('Bcast', bval)
    checks = checks + 1
    t1 = -1
    t2 = -1
    call MPI_Irecv(t1, 1, MPI_INTEGER, left, 4, ring, reqs(1), ierr)
    call MPI_Irecv(t2, 1, MPI_INTEGER, left, 5, ring, reqs(2), ierr)
    call MPI_Send(ival(rank, it, -4), 1, MPI_INTEGER, right, 4, ring, ierr)
    call MPI_Send(ival(rank, it, -5), 1, MPI_INTEGER, right, 5, ring, ierr)
    flag = .false.
    polls = 0
    do while (.not. flag)
      call MPI_Test(reqs(1), flag, st(:, 1), ierr)
      polls = polls + 1
      if (polls > 10000000) call fail('MPI_Test never completed', polls)
    end do
    if (reqs(1) /= MPI_REQUEST_NULL .or. t1 /= ival(left, it, -4) .or. &
        st(MPI_SOURCE, 1) /= left .or. st(MPI_TAG, 1) /= 4) call fail('Test', t1)
    checks = checks + 1
    call MPI_Wait(reqs(2), st(:, 2), ierr)
    if (reqs(2) /= MPI_REQUEST_NULL .or. t2 /= ival(left, it, -5) .or. &
        st(MPI_SOURCE, 2) /= left .or. st(MPI_TAG, 2) /= 5) call fail('Wait', t2)
    checks = checks + 1
    call MPI_Send(ival(rank, it, -6), 1, MPI_INTEGER, right, 6, ring, ierr)
    t3 = -1
    call MPI_Recv(t3, 1, MPI_INTEGER, left, 6, ring, MPI_STATUS_IGNORE, ierr)
    if (t3 /= ival(left, it, -6)) call fail('Recv', t3)
    checks = checks + 1
    call MPI_Barrier(ring, ierr)

    ! d. half's own handler, after every restart too
    before = hcalls
    hcomm = -1
    hcode = MPI_SUCCESS
    call MPI_Send(isend, 1, MPI_INTEGER, nranks, 9, half, ierr)
    if (ierr == MPI_SUCCESS .or. hcalls /= before + 1 .or. hcomm /= half .or. &
        hcode == MPI_SUCCESS) call fail('the handler of half', hcalls - before)
    checks = checks + 1

    ! e. the running checksum
    csum = fold(csum, irecv(1), irecv(NI), int(drecv(ND)), isum(NS), ip(1) + t3)

    ! f. files written and closed
    if (len_trim(dir) > 0) call files(it)
  end do

  want = 0
  do it = 1, iters
    want = fold(want, ival(left, it, 1), ival(left, it, NI), int(dval(left, it, ND)), &
                it * nranks * (nranks + 1) / 2 + nranks * NS, &
                nranks * (nranks - 1) / 2 + nranks * it + ival(left, it, -6))
  end do
  if (csum /= want) call fail('running checksum', int(mod(csum, 1000000_8)))

  call MPI_Reduce(checks, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total /= 14 * nranks * iters) call fail('checks counted', total)
    write (*, '(A,I0,A,I0,A,I0)') 'PASS ranks=', nranks, ' iterations=', iters, ' checks=', total
    flush (6)
  end if
  call MPI_Comm_free(half, ierr)
  call MPI_Comm_free(ring, ierr)
  if (ring /= MPI_COMM_NULL) call fail('freed communicator is not MPI_COMM_NULL', ring)
  call MPI_Finalize(ierr)

contains

  integer function ival(src, iter, j)
    integer, intent(in) :: src, iter, j
    ival = src * 100003 + iter * 1009 + j
  end function ival

  double precision function dval(src, iter, j)
    integer, intent(in) :: src, iter, j
    dval = dble(src) + 0.25d0 * iter + 1d-3 * j
  end function dval

  integer(8) function fold(c, a, b, d, e, f)
    integer(8), intent(in) :: c
    integer, intent(in) :: a, b, d, e, f
    fold = mod(c * 131_8 + a + 7_8 * b + 11_8 * d + 13_8 * e + 17_8 * f, 2147483647_8)
  end function fold

  subroutine files(iter)
    integer, intent(in) :: iter
    character(len=600) :: w, a
    integer :: u, prev, ios
    write (w, '(A,A,I0,A)') trim(dir), '/w-', rank, '.txt'
    write (a, '(A,A,I0,A)') trim(dir), '/a-', rank, '.txt'
    if (iter > 1) then
      prev = -1
      open (newunit=u, file=trim(w), status='old', action='read', iostat=ios)
      if (ios /= 0) call fail('cannot open w.txt', ios)
      read (u, *, iostat=ios) prev
      close (u)
      if (prev /= iter - 1) call fail('w.txt holds iteration', prev)
    end if
    open (newunit=u, file=trim(w), status='replace', action='write')
    write (u, '(I0)') iter
    close (u)
    open (newunit=u, file=trim(a), position='append', action='write')
    write (u, '(A,I0)') 'iteration ', iter
    close (u)
  end subroutine files

  subroutine fail(what, v)
    character(len=*), intent(in) :: what
    integer, intent(in) :: v
    integer :: e
    write (*, '(A,I0,A,A,A,I0)') 'FAIL rank ', rank, ': ', what, ' ', v
    flush (6)
    call MPI_Abort(MPI_COMM_WORLD, 3, e)
    stop 3
  end subroutine fail

end program fortran

! half's error handler (MPI_Comm_create_errhandler): what it was called with
subroutine on_error(comm, code)
  implicit none
  integer :: comm, code
  integer :: hcalls, hcomm, hcode
  common /errh/ hcalls, hcomm, hcode
  hcalls = hcalls + 1
  hcomm = comm
  hcode = code
end subroutine on_error
