! fortran_calls.f90 - the Fortran calls Stasis generates from their C
! prototypes (gen_fortran.py), checked by the program itself (tests/split).
!
!   fortran_calls ITERATIONS SLEEP_MS FILE [strict]
!
! Any number of ranks >= 2, built with mpif.h (or, with -cpp
! -DUSE_MPI_MODULE, the mpi module). Before the loop each rank makes a
! periodic 1-D Cartesian communicator of all ranks (cart, MPI_Cart_create)
! and names it, makes a vector type (4 integers, stride 3), a contiguous
! type (2 doubles) and a struct type (integers at bytes 0 and 8:
! MPI_Type_create_struct takes an array of types), and opens FILE on
! MPI_COMM_WORLD (MPI_File_open, a name with trailing blanks); it checks the
! vector's extent, the struct's size, the name read back (MPI_Comm_get_name,
! blank-padded), MPI_Get_processor_name and MPI_Error_string: 5 checks.
! Every iteration rank 0 prints "rank 0 iteration I", then every rank checks
!  a. MPI_Cart_shift and MPI_Cart_coords on cart (2);
!  b. MPI_Allgather; MPI_Gather to rank 0 then MPI_Scatter of each value
!     plus one; MPI_Alltoall (3);
!  c. two MPI_Irecv and two MPI_Isend with each neighbour completed by
!     MPI_Waitany, whose indices are 1-based and each seen once, then one
!     more MPI_Waitany on null requests: MPI_UNDEFINED, or with MPICH 4.0's
!     own binding, which adds one to it, MPI_UNDEFINED + 1 unless "strict"
!     is given (2);
!  d. MPI_Irecv and MPI_Isend completed by polling MPI_Testsome: indices 1
!     and 2 (1);
!  e. MPI_Sendrecv_replace of one vector (1);
!  f. two messages to the right, found by MPI_Probe and by polling
!     MPI_Iprobe, MPI_Get_count, then received (2);
!  g. MPI_File_write_at of its record for this iteration, MPI_Barrier,
!     MPI_File_read_at of the left neighbour's, MPI_File_get_size (2);
!  h. MPI_Bcast of one struct from rank 0 (the gaps untouched) (1);
!  i. one contiguous pair of doubles to the right (MPI_Sendrecv);
!     MPI_Scan; MPI_Reduce_scatter_block (3);
!  j. MPI_Comm_compare (congruent), MPI_Topo_test (MPI_CART) (2);
!  k. MPI_Comm_group, MPI_Group_incl of itself, MPI_Group_size and
!     MPI_Group_rank, MPI_Group_free (1);
!  l. MPI_Comm_get_name (1);
!  m. persistent requests made before the loop (MPI_Send_init to the
!     right, MPI_Recv_init from the left) started with MPI_Startall and
!     completed with MPI_Waitall: the message, and both handles still
!     there (1);
!  n. a subarray made before the loop (MPI_Type_create_subarray: the 2x2
!     block at (1, 1) of a 4x3 integer array, MPI_ORDER_FORTRAN) to the
!     right (MPI_Sendrecv): every element, the ones outside untouched (1);
! then sleeps SLEEP_MS: 23 checks. At the end each rank reads every record
! back (1 check), MPI_File_close, the types and requests freed; rank 0
! sums the checks (MPI_Reduce) and prints "PASS ranks=N iterations=I
! checks=C" with C = N * (6 + 23 * I). A wrong value prints a FAIL line and
! aborts.
program fortran_calls
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
  integer, parameter :: REC = 16, MAXR = 64
  integer :: ierr, rank, n, it, iters, sleep_ms, j, k, checks, total
  integer :: cart, vtype, ctype, stype, g, g1, src, dst, coords(1), dims(1)
  integer :: sizes(2), types(2), sz, v, all(MAXR), sbuf(MAXR), rbuf(MAXR), got
  integer :: reqs(4), idx, st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 4), seen(4)
  integer :: outcount, indices(2), done, polls, cnt, vbuf(12), msg(8), ibuf(4), res
  integer :: fh, recbuf(REC), left, right, nlen, namelen, sv(3)
  integer :: preq(2), psts(MPI_STATUS_SIZE, 2)
  integer :: satype, sasizes(2), sasub(2), sastart(2), sa(4, 3), sb(4, 3)
  ! what MPI reads and writes between MPI_Startall and MPI_Waitall, through
  ! addresses the compiler does not see passed there
  integer, asynchronous :: psend(4), precv(4)
  integer(kind=MPI_ADDRESS_KIND) :: lb, extent, displs(2)
  integer(kind=MPI_OFFSET_KIND) :: off, fsize
  logical :: periods(1), flag, strict
  double precision :: dpair(2), dsum(2)
  character(len=256) :: path, name
  character(len=MPI_MAX_PROCESSOR_NAME) :: pname
  character(len=MPI_MAX_ERROR_STRING) :: estr
  character(len=32) :: arg

  call get_command_argument(1, arg)
  read (arg, *) iters
  call get_command_argument(2, arg)
  read (arg, *) sleep_ms
  call get_command_argument(3, path)
  call get_command_argument(4, arg)
  strict = arg == 'strict'

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  if (n > MAXR) call fail('too many ranks', n)
  left = mod(rank - 1 + n, n)
  right = mod(rank + 1, n)
  checks = 0

  dims(1) = n
  periods(1) = .true.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cart, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Cart_create', ierr)
  call MPI_Comm_set_name(cart, 'cart ring   ', ierr)
  call MPI_Type_vector(4, 1, 3, MPI_INTEGER, vtype, ierr)
  call MPI_Type_commit(vtype, ierr)
  call MPI_Type_get_extent(vtype, lb, extent, ierr)
  if (ierr /= MPI_SUCCESS .or. lb /= 0 .or. extent /= 40) call fail('vector extent', int(extent))
  checks = checks + 1
  call MPI_Type_contiguous(2, MPI_DOUBLE_PRECISION, ctype, ierr)
  call MPI_Type_commit(ctype, ierr)
  sizes = 1
  displs(1) = 0
  displs(2) = 8
  types = MPI_INTEGER
  call MPI_Type_create_struct(2, sizes, displs, types, stype, ierr)
  call MPI_Type_commit(stype, ierr)
  call MPI_Type_size(stype, sz, ierr)
  if (ierr /= MPI_SUCCESS .or. sz /= 8) call fail('struct size', sz)
  checks = checks + 1
  name = 'x'
  call MPI_Comm_get_name(cart, name, namelen, ierr)
  if (ierr /= MPI_SUCCESS .or. namelen /= 9 .or. name /= 'cart ring') call fail('name', namelen)
  checks = checks + 1
  pname = 'x'
  call MPI_Get_processor_name(pname, nlen, ierr)
  if (ierr /= MPI_SUCCESS .or. nlen < 1 .or. len_trim(pname) /= nlen) &
    call fail('MPI_Get_processor_name', nlen)
  checks = checks + 1
  call MPI_Error_string(MPI_ERR_RANK, estr, nlen, ierr)
  if (ierr /= MPI_SUCCESS .or. nlen < 1 .or. len_trim(estr) /= nlen) &
    call fail('MPI_Error_string', nlen)
  checks = checks + 1
  call MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE + MPI_MODE_RDWR, MPI_INFO_NULL, fh, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_File_open', ierr)
  call MPI_Send_init(psend, 4, MPI_INTEGER, right, 12, cart, preq(1), ierr)
  sasizes = (/ 4, 3 /)
  sasub = (/ 2, 2 /)
  sastart = (/ 1, 1 /)
  call MPI_Type_create_subarray(2, sasizes, sasub, sastart, MPI_ORDER_FORTRAN, MPI_INTEGER, &
                                satype, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Type_create_subarray', ierr)
  call MPI_Type_commit(satype, ierr)
  call MPI_Recv_init(precv, 4, MPI_INTEGER, left, 12, cart, preq(2), ierr)

  do it = 1, iters
    if (rank == 0) then
      write (*, '(A,I0)') 'rank 0 iteration ', it
      flush (6)
    end if
    ! a. the Cartesian communicator
    call MPI_Cart_shift(cart, 0, 1, src, dst, ierr)
    if (src /= left .or. dst /= right) call fail('MPI_Cart_shift', src)
    checks = checks + 1
    call MPI_Cart_coords(cart, rank, 1, coords, ierr)
    if (coords(1) /= rank) call fail('MPI_Cart_coords', coords(1))
    checks = checks + 1

    ! b. gathers and scatters
    v = 1000 * it + rank
    all = -1
    call MPI_Allgather(v, 1, MPI_INTEGER, all, 1, MPI_INTEGER, cart, ierr)
    do j = 1, n
      if (all(j) /= 1000 * it + j - 1) call fail('MPI_Allgather', j)
    end do
    checks = checks + 1
    all = -1
    call MPI_Gather(7 * it + 3 * rank, 1, MPI_INTEGER, all, 1, MPI_INTEGER, 0, cart, ierr)
    if (rank == 0) then
      do j = 1, n
        all(j) = all(j) + 1
      end do
    end if
    got = -1
    call MPI_Scatter(all, 1, MPI_INTEGER, got, 1, MPI_INTEGER, 0, cart, ierr)
    if (got /= 7 * it + 3 * rank + 1) call fail('MPI_Gather and MPI_Scatter', got)
    checks = checks + 1
    do j = 1, n
      sbuf(j) = 100 * rank + j - 1 + it
    end do
    rbuf = -1
    call MPI_Alltoall(sbuf, 1, MPI_INTEGER, rbuf, 1, MPI_INTEGER, cart, ierr)
    do j = 1, n
      if (rbuf(j) /= 100 * (j - 1) + rank + it) call fail('MPI_Alltoall', j)
    end do
    checks = checks + 1

    ! c. MPI_Waitany's indices are 1-based
    msg = -1
    call MPI_Irecv(msg(1), 1, MPI_INTEGER, left, 5, cart, reqs(1), ierr)
    call MPI_Irecv(msg(2), 1, MPI_INTEGER, right, 6, cart, reqs(2), ierr)
    sv(1) = val(rank, it, 5)
    sv(2) = val(rank, it, 6)
    call MPI_Isend(sv(1), 1, MPI_INTEGER, right, 5, cart, reqs(3), ierr)
    call MPI_Isend(sv(2), 1, MPI_INTEGER, left, 6, cart, reqs(4), ierr)
    seen = 0
    do k = 1, 4
      call MPI_Waitany(4, reqs, idx, st, ierr)
      if (ierr /= MPI_SUCCESS .or. idx < 1 .or. idx > 4) call fail('MPI_Waitany index', idx)
      if (reqs(idx) /= MPI_REQUEST_NULL) call fail('MPI_Waitany request', idx)
      seen(idx) = seen(idx) + 1
    end do
    if (any(seen /= 1) .or. msg(1) /= val(left, it, 5) .or. msg(2) /= val(right, it, 6)) &
      call fail('MPI_Waitany', msg(1))
    checks = checks + 1
    call MPI_Waitany(4, reqs, idx, st, ierr)
    if (ierr /= MPI_SUCCESS .or. (idx /= MPI_UNDEFINED .and. &
        (strict .or. idx /= MPI_UNDEFINED + 1))) call fail('MPI_Waitany of none', idx)
    checks = checks + 1

    ! d. MPI_Testsome
    call MPI_Irecv(msg(3), 1, MPI_INTEGER, left, 7, cart, reqs(1), ierr)
    sv(3) = val(rank, it, 7)
    call MPI_Isend(sv(3), 1, MPI_INTEGER, right, 7, cart, reqs(2), ierr)
    seen = 0
    done = 0
    polls = 0
    do while (done < 2)
      call MPI_Testsome(2, reqs, outcount, indices, sts, ierr)
      if (ierr /= MPI_SUCCESS .or. outcount < 0 .or. outcount > 2) &
        call fail('MPI_Testsome', outcount)
      do k = 1, outcount
        if (indices(k) < 1 .or. indices(k) > 2) call fail('MPI_Testsome index', indices(k))
        seen(indices(k)) = seen(indices(k)) + 1
      end do
      done = done + outcount
      polls = polls + 1
      if (polls > 10000000) call fail('MPI_Testsome never completed', polls)
    end do
    if (seen(1) /= 1 .or. seen(2) /= 1 .or. msg(3) /= val(left, it, 7)) &
      call fail('MPI_Testsome', msg(3))
    checks = checks + 1

    ! e. a vector replaced in place
    do j = 1, 12
      vbuf(j) = val(rank, it, 100 + j)
    end do
    call MPI_Sendrecv_replace(vbuf, 1, vtype, right, 8, left, 8, cart, st, ierr)
    do j = 1, 12
      if (mod(j - 1, 3) == 0) then
        if (vbuf(j) /= val(left, it, 100 + j)) call fail('vector element', j)
      else
        if (vbuf(j) /= val(rank, it, 100 + j)) call fail('vector gap', j)
      end if
    end do
    if (st(MPI_SOURCE) /= left .or. st(MPI_TAG) /= 8) call fail('MPI_Sendrecv_replace status', 0)
    checks = checks + 1

    ! f. MPI_Probe and MPI_Iprobe
    cnt = 3 + mod(it, 5)
    do j = 1, 8
      msg(j) = val(rank, it, 200 + j)
    end do
    call MPI_Send(msg, cnt, MPI_INTEGER, right, 9, cart, ierr)
    call MPI_Send(msg, 2, MPI_INTEGER, right, 10, cart, ierr)
    call MPI_Probe(left, 9, cart, st, ierr)
    call MPI_Get_count(st, MPI_INTEGER, k, ierr)
    if (st(MPI_SOURCE) /= left .or. st(MPI_TAG) /= 9 .or. k /= cnt) call fail('MPI_Probe', k)
    msg = -1
    call MPI_Recv(msg, cnt, MPI_INTEGER, left, 9, cart, MPI_STATUS_IGNORE, ierr)
    if (msg(cnt) /= val(left, it, 200 + cnt)) call fail('probed message', msg(cnt))
    checks = checks + 1
    flag = .false.
    polls = 0
    do while (.not. flag)
      call MPI_Iprobe(left, 10, cart, flag, st, ierr)
      polls = polls + 1
      if (polls > 10000000) call fail('MPI_Iprobe never found it', polls)
    end do
    call MPI_Get_count(st, MPI_INTEGER, k, ierr)
    if (st(MPI_TAG) /= 10 .or. k /= 2) call fail('MPI_Iprobe', k)
    call MPI_Recv(msg, 2, MPI_INTEGER, left, 10, cart, MPI_STATUS_IGNORE, ierr)
    if (msg(2) /= val(left, it, 202)) call fail('Iprobed message', msg(2))
    checks = checks + 1

    ! g. MPI-IO at offsets
    do j = 1, REC
      recbuf(j) = val(rank, it, 300 + j)
    end do
    off = int((it - 1) * n + rank, MPI_OFFSET_KIND) * REC * 4
    call MPI_File_write_at(fh, off, recbuf, REC, MPI_INTEGER, st, ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_File_write_at', ierr)
    call MPI_Barrier(cart, ierr)
    recbuf = -1
    off = int((it - 1) * n + left, MPI_OFFSET_KIND) * REC * 4
    call MPI_File_read_at(fh, off, recbuf, REC, MPI_INTEGER, st, ierr)
    call MPI_Get_count(st, MPI_INTEGER, k, ierr)
    if (ierr /= MPI_SUCCESS .or. k /= REC .or. recbuf(REC) /= val(left, it, 300 + REC)) &
      call fail('MPI_File_read_at', recbuf(REC))
    checks = checks + 1
    call MPI_File_get_size(fh, fsize, ierr)
    if (fsize < int(it * n, MPI_OFFSET_KIND) * REC * 4) call fail('MPI_File_get_size', int(fsize))
    checks = checks + 1

    ! h. a struct with gaps
    ibuf = -5
    if (rank == 0) then
      ibuf(1) = it
      ibuf(3) = 2 * it
    end if
    call MPI_Bcast(ibuf, 1, stype, 0, cart, ierr)
    if (ibuf(1) /= it .or. ibuf(3) /= 2 * it .or. ibuf(2) /= -5 .or. ibuf(4) /= -5) &
      call fail('struct Bcast', ibuf(1))
    checks = checks + 1

    ! i. reductions
    dpair(1) = dble(rank)
    dpair(2) = 0.5d0 * it
    dsum = -1d0
    call MPI_Sendrecv(dpair, 1, ctype, right, 11, dsum, 2, MPI_DOUBLE_PRECISION, left, 11, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    if (dsum(1) /= dble(left) .or. dsum(2) /= 0.5d0 * it) call fail('contiguous pair', int(dsum(1)))
    checks = checks + 1
    call MPI_Scan(rank + 1, res, 1, MPI_INTEGER, MPI_SUM, cart, ierr)
    if (res /= (rank + 1) * (rank + 2) / 2) call fail('MPI_Scan', res)
    checks = checks + 1
    do j = 1, n
      sbuf(j) = j + rank + it
    end do
    res = -1
    call MPI_Reduce_scatter_block(sbuf, res, 1, MPI_INTEGER, MPI_SUM, cart, ierr)
    if (res /= n * (rank + 1 + it) + n * (n - 1) / 2) call fail('MPI_Reduce_scatter_block', res)
    checks = checks + 1

    ! j. what cart is
    call MPI_Comm_compare(cart, MPI_COMM_WORLD, res, ierr)
    if (res /= MPI_CONGRUENT) call fail('MPI_Comm_compare', res)
    checks = checks + 1
    call MPI_Topo_test(cart, res, ierr)
    if (res /= MPI_CART) call fail('MPI_Topo_test', res)
    checks = checks + 1

    ! k. groups made and freed
    call MPI_Comm_group(MPI_COMM_WORLD, g, ierr)
    coords(1) = rank
    call MPI_Group_incl(g, 1, coords, g1, ierr)
    call MPI_Group_size(g1, sz, ierr)
    call MPI_Group_rank(g1, res, ierr)
    if (sz /= 1 .or. res /= 0) call fail('MPI_Group_incl', sz)
    call MPI_Group_free(g1, ierr)
    call MPI_Group_free(g, ierr)
    if (g /= MPI_GROUP_NULL .or. g1 /= MPI_GROUP_NULL) call fail('MPI_Group_free', g)
    checks = checks + 1

    ! l. the name, after every restart too
    name = 'x'
    call MPI_Comm_get_name(cart, name, namelen, ierr)
    if (namelen /= 9 .or. name /= 'cart ring') call fail('name of cart', namelen)
    checks = checks + 1

    ! m. persistent requests
    do j = 1, 4
      psend(j) = val(rank, it, 400 + j)
    end do
    precv = -1
    call MPI_Startall(2, preq, ierr)
    call MPI_Waitall(2, preq, psts, ierr)
    if (ierr /= MPI_SUCCESS .or. precv(4) /= val(left, it, 404) .or. &
        psts(MPI_SOURCE, 2) /= left .or. preq(1) == MPI_REQUEST_NULL .or. &
        preq(2) == MPI_REQUEST_NULL) call fail('persistent requests', precv(4))
    checks = checks + 1

    ! n. a subarray
    do k = 1, 3
      do j = 1, 4
        sa(j, k) = val(rank, it, 500 + 10 * k + j)
      end do
    end do
    sb = -7
    call MPI_Sendrecv(sa, 1, satype, right, 13, sb, 1, satype, left, 13, cart, &
                      MPI_STATUS_IGNORE, ierr)
    do k = 1, 3
      do j = 1, 4
        if (j >= 2 .and. j <= 3 .and. k >= 2) then
          if (sb(j, k) /= val(left, it, 500 + 10 * k + j)) call fail('subarray element', 10 * k + j)
        else if (sb(j, k) /= -7) then
          call fail('subarray outside', 10 * k + j)
        end if
      end do
    end do
    checks = checks + 1

    ierr = usleep(int(sleep_ms * 1000, c_int))
  end do

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  do it = 1, iters
    do k = 0, n - 1
      off = int((it - 1) * n + k, MPI_OFFSET_KIND) * REC * 4
      call MPI_File_read_at(fh, off, recbuf, REC, MPI_INTEGER, MPI_STATUS_IGNORE, ierr)
      do j = 1, REC
        if (recbuf(j) /= val(k, it, 300 + j)) call fail('record read back', j)
      end do
    end do
  end do
  checks = checks + 1
  call MPI_File_close(fh, ierr)
  if (ierr /= MPI_SUCCESS .or. fh /= MPI_FILE_NULL) call fail('MPI_File_close', ierr)
  call MPI_Request_free(preq(1), ierr)
  call MPI_Request_free(preq(2), ierr)
  if (preq(1) /= MPI_REQUEST_NULL) call fail('MPI_Request_free', preq(1))
  call MPI_Type_free(vtype, ierr)
  call MPI_Type_free(ctype, ierr)
  call MPI_Type_free(stype, ierr)
  call MPI_Type_free(satype, ierr)
  if (stype /= MPI_DATATYPE_NULL) call fail('MPI_Type_free', stype)

  call MPI_Reduce(checks, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total /= n * (6 + 23 * iters)) call fail('checks counted', total)
    write (*, '(A,I0,A,I0,A,I0)') 'PASS ranks=', n, ' iterations=', iters, ' checks=', total
    flush (6)
  end if
  call MPI_Comm_free(cart, ierr)
  call MPI_Finalize(ierr)

contains

  integer function val(src, iter, j)
    integer, intent(in) :: src, iter, j
    val = src * 100003 + iter * 1009 + j
  end function val

  subroutine fail(what, x)
    character(len=*), intent(in) :: what
    integer, intent(in) :: x
    integer :: e
    write (*, '(A,I0,A,A,A,I0)') 'FAIL rank ', rank, ': ', what, ' ', x
    flush (6)
    call MPI_Abort(MPI_COMM_WORLD, 3, e)
    stop 3
  end subroutine fail

end program fortran_calls
