! The sentinels of mpif.h in a program linked with a plain -lshim (README, "Ways in"):
! every MPI call here is one libshim defines, so a linker with --as-needed drops the
! MPI's Fortran library, and the program's common blocks (whose addresses are the
! sentinels) are found only if the program exports them. Checks MPI_IN_PLACE
! (allreduce, reduce at the root, allgather), MPI_BOTTOM (a type of absolute
! addresses, sent and received), MPI_STATUS_IGNORE (recv, sendrecv, wait) and
! MPI_STATUSES_IGNORE (waitall): results, and that the sentinels' own storage (with
! MPI_ERRCODES_IGNORE behind MPI_STATUSES_IGNORE) was not written as a status. The verdict
! is reduced without a sentinel. Compiled with -cpp; -DMPIFH: `include 'mpif.h'` instead of
! `use mpi`; -DFORTRAN_TYPES: the type constructors from Fortran (Open MPI).
! Prints "f_plain: OK (<n> ranks)".
program f_plain
  use, intrinsic :: iso_c_binding, only: c_int, c_intptr_t, c_loc
#ifdef MPIFH
  implicit none
  include 'mpif.h'
#else
  use mpi
  implicit none
#endif
#ifndef FORTRAN_TYPES
  ! MPICH's C handles are its Fortran ones; the C constructor keeps the MPI Fortran
  ! library out of the link (the MPICH build of libshim defines no Fortran type
  ! constructors; the Open MPI build does: -DFORTRAN_TYPES)
  interface
    integer(c_int) function type_create_hindexed(count, blens, disps, old, new) &
        bind(C, name='MPI_Type_create_hindexed')
      import :: c_int, c_intptr_t
      integer(c_int), value :: count, old
      integer(c_int) :: blens(*), new
      integer(c_intptr_t) :: disps(*)
    end function
    integer(c_int) function type_commit(t) bind(C, name='MPI_Type_commit')
      import :: c_int
      integer(c_int) :: t
    end function
  end interface
#endif
  integer :: ierr, me, n, nxt, prv, i, bad, tot, st, req, reqs(2), y, z
  integer :: x(3), g(64), blen(1)
  integer, target :: a(4), b(4)
  integer(kind=MPI_ADDRESS_KIND) :: disp(1)
  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, me, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, n, ierr)
  nxt = mod(me + 1, n)
  prv = mod(me + n - 1, n)
  bad = 0
  ! MPI_IN_PLACE
  x = me + 1
  call MPI_ALLREDUCE(MPI_IN_PLACE, x, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(x /= n*(n+1)/2)) call fail(1)
  x = me + 1
  if (me == 0) then
    call MPI_REDUCE(MPI_IN_PLACE, x, 3, MPI_INTEGER, MPI_MAX, 0, MPI_COMM_WORLD, ierr)
    if (any(x /= n)) call fail(2)
  else
    call MPI_REDUCE(x, x, 3, MPI_INTEGER, MPI_MAX, 0, MPI_COMM_WORLD, ierr)
  end if
  g = -1
  g(me + 1) = 10 * me
  call MPI_ALLGATHER(MPI_IN_PLACE, 0, MPI_INTEGER, g, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (g(i) /= 10 * (i - 1)) call fail(3)
  end do
  ! MPI_BOTTOM: a type holding the absolute address of the buffer (C_LOC is the address
  ! MPI_GET_ADDRESS gives, which neither build of libshim defines in Fortran)
  blen(1) = 4
  a = (/ (100 * me + i, i = 1, 4) /)
  b = -1
  disp(1) = transfer(c_loc(a), disp(1))
#ifdef FORTRAN_TYPES
  call MPI_TYPE_CREATE_HINDEXED(1, blen, disp, MPI_INTEGER, st, ierr)
  call MPI_TYPE_COMMIT(st, ierr)
#else
  ierr = type_create_hindexed(1, blen, disp, MPI_INTEGER, st)
  ierr = type_commit(st)
#endif
  call MPI_IRECV(b, 4, MPI_INTEGER, prv, 1, MPI_COMM_WORLD, req, ierr)
  call MPI_SEND(MPI_BOTTOM, 1, st, nxt, 1, MPI_COMM_WORLD, ierr)
  call MPI_WAIT(req, MPI_STATUS_IGNORE, ierr)
  call MPI_TYPE_FREE(st, ierr)
  if (any(b /= (/ (100 * prv + i, i = 1, 4) /))) call fail(4)
  disp(1) = transfer(c_loc(b), disp(1))
#ifdef FORTRAN_TYPES
  call MPI_TYPE_CREATE_HINDEXED(1, blen, disp, MPI_INTEGER, st, ierr)
  call MPI_TYPE_COMMIT(st, ierr)
#else
  ierr = type_create_hindexed(1, blen, disp, MPI_INTEGER, st)
  ierr = type_commit(st)
#endif
  b = -1
  call MPI_IRECV(MPI_BOTTOM, 1, st, prv, 2, MPI_COMM_WORLD, req, ierr)
  call MPI_SEND(a, 4, MPI_INTEGER, nxt, 2, MPI_COMM_WORLD, ierr)
  call MPI_WAIT(req, MPI_STATUS_IGNORE, ierr)
  call MPI_TYPE_FREE(st, ierr)
  if (any(b /= (/ (100 * prv + i, i = 1, 4) /))) call fail(5)
  ! MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE
  y = me
  z = -1
  call MPI_SENDRECV(y, 1, MPI_INTEGER, nxt, 77, z, 1, MPI_INTEGER, prv, 77, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (z /= prv) call fail(6)
  z = -1
  call MPI_IRECV(z, 1, MPI_INTEGER, prv, 78, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_ISEND(y, 1, MPI_INTEGER, nxt, 78, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_WAITALL(2, reqs, MPI_STATUSES_IGNORE, ierr)
  if (z /= prv) call fail(7)
  z = -1
  call MPI_ISEND(y, 1, MPI_INTEGER, nxt, 79, MPI_COMM_WORLD, req, ierr)
  call MPI_RECV(z, 1, MPI_INTEGER, prv, 79, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  call MPI_WAIT(req, MPI_STATUS_IGNORE, ierr)
  if (z /= prv) call fail(8)
  ! Nothing was written into the sentinels as a status (the tags 77-79 would show).
  if (any(MPI_STATUS_IGNORE >= 77 .and. MPI_STATUS_IGNORE <= 79)) call fail(9)
  if (any(MPI_STATUSES_IGNORE >= 77 .and. MPI_STATUSES_IGNORE <= 79)) call fail(10)
  if (MPI_ERRCODES_IGNORE(1) /= 0 .or. MPI_BOTTOM /= 0 .or. MPI_IN_PLACE /= 0) call fail(11)
  call MPI_ALLREDUCE(bad, tot, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (me == 0) then
    if (tot == 0) then
      print '(a,i0,a)', 'f_plain: OK (', n, ' ranks)'
    else
      print '(a,i0)', 'f_plain: FAILED checks: ', tot
    end if
  end if
  call MPI_FINALIZE(ierr)
  if (tot /= 0) stop 1
contains
  subroutine fail(k)
    integer, intent(in) :: k
    print '(a,i0,a,i0)', 'f_plain: rank ', me, ' failed check ', k
    bad = bad + 1
  end subroutine
end program
