! Fortran (`use mpi`) test of the shim: collectives with MPI_IN_PLACE, non-blocking
! collectives completed by MPI_WAITALL (MPI_STATUSES_IGNORE), RMA on an MPI_Win_allocate
! window (served by ghost processes under SHIM_GHOSTS), derived datatypes, attributes,
! and MPI_COMM_WORLD as the application sees it. Results are checked, and, through the
! shim's C API (include/shim.h, called with bind(C)), that the calls were intercepted.
! F_EXPECT_SHIM=0 (run without the shim) expects no interception; F_ATTR_VIA_MPICH=1, see below.
program f_coll
  use mpi
  use, intrinsic :: iso_c_binding
  implicit none
  abstract interface
    integer(c_int) function is_active_t() bind(C)
      import :: c_int
    end function
    integer(c_long_long) function call_count_t(name) bind(C)
      import :: c_long_long, c_char
      character(kind=c_char), dimension(*) :: name
    end function
  end interface
  interface
    ! glibc: dlsym(RTLD_DEFAULT = NULL, name); the program is not linked with libshim
    ! when it is preloaded, so its C API is looked up at run time.
    type(c_funptr) function dlsym(handle, name) bind(C, name="dlsym")
      import :: c_ptr, c_funptr, c_char
      type(c_ptr), value :: handle
      character(kind=c_char), dimension(*) :: name
    end function
  end interface
  procedure(is_active_t), pointer :: shim_is_active => null()
  procedure(call_count_t), pointer :: shim_call_count => null()
  integer :: ierr, rank, nprocs, i, errors, expect_shim, provided
  integer :: a(8), b(8), reqs(3), vtype, win, disp_unit, status(MPI_STATUS_SIZE)
  integer :: ib(4), ic(4)
  double precision :: d(3)
  integer(kind=MPI_ADDRESS_KIND) :: winsize, tdisp, attrval
  logical :: flag, shim_here
  integer, pointer :: wbuf(:)
  type(c_ptr) :: wptr
  character(len=16) :: env

  call MPI_INIT_THREAD(MPI_THREAD_SINGLE, provided, ierr)
  call check(ierr == MPI_SUCCESS, 'MPI_INIT_THREAD')
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
  errors = 0
  expect_shim = 1
  call get_environment_variable('F_EXPECT_SHIM', env)
  if (env == '0') expect_shim = 0
  shim_here = shim_available()

  ! Allreduce in place, and Reduce in place at the root.
  do i = 1, 8
    a(i) = rank + i
  end do
  call MPI_ALLREDUCE(MPI_IN_PLACE, a, 8, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, 8
    call check(a(i) == nprocs * (nprocs - 1) / 2 + nprocs * i, 'allreduce in place')
  end do
  d = dble(rank + 1)
  if (rank == 0) then
    call MPI_REDUCE(MPI_IN_PLACE, d, 3, MPI_DOUBLE_PRECISION, MPI_MAX, 0, MPI_COMM_WORLD, ierr)
    call check(d(2) == dble(nprocs), 'reduce in place')
  else
    call MPI_REDUCE(d, d, 3, MPI_DOUBLE_PRECISION, MPI_MAX, 0, MPI_COMM_WORLD, ierr)
  end if
  ! Allgather in place.
  b = -1
  b(rank + 1) = 10 * rank
  if (nprocs <= 8) then
    call MPI_ALLGATHER(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do i = 1, nprocs
      call check(b(i) == 10 * (i - 1), 'allgather in place')
    end do
  end if

  ! Non-blocking collectives, completed together.
  ib = rank
  call MPI_IALLREDUCE(MPI_IN_PLACE, ib, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, reqs(1), ierr)
  ic = 0
  if (rank == 0) ic = 7
  call MPI_IBCAST(ic, 4, MPI_INTEGER, 0, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_IBARRIER(MPI_COMM_WORLD, reqs(3), ierr)
  call MPI_WAITALL(3, reqs, MPI_STATUSES_IGNORE, ierr)
  call check(ierr == MPI_SUCCESS, 'waitall')
  call check(all(ib == nprocs * (nprocs - 1) / 2), 'iallreduce')
  call check(all(ic == 7), 'ibcast')
  call check(all(reqs == MPI_REQUEST_NULL), 'requests freed')

  ! A derived datatype: every other integer, ring exchange with a status.
  call MPI_TYPE_VECTOR(4, 1, 2, MPI_INTEGER, vtype, ierr)
  call MPI_TYPE_COMMIT(vtype, ierr)
  a = -1
  b = 100 * rank + (/ (i, i = 1, 8) /)
  call MPI_SENDRECV(b, 1, vtype, mod(rank + 1, nprocs), 5, a, 1, vtype, &
       mod(rank + nprocs - 1, nprocs), 5, MPI_COMM_WORLD, status, ierr)
  call check(status(MPI_SOURCE) == mod(rank + nprocs - 1, nprocs), 'status source')
  call check(status(MPI_TAG) == 5, 'status tag')
  do i = 1, 8, 2
    call check(a(i) == 100 * mod(rank + nprocs - 1, nprocs) + i, 'vector data')
    call check(a(i + 1) == -1, 'vector hole')
  end do
  call MPI_TYPE_FREE(vtype, ierr)

  ! RMA on an allocated window: put my rank into the right neighbour, fence, then a
  ! passive-target get.
  winsize = 4 * 4
  disp_unit = 4
  call MPI_WIN_ALLOCATE(winsize, disp_unit, MPI_INFO_NULL, MPI_COMM_WORLD, wptr, win, ierr)
  call check(ierr == MPI_SUCCESS, 'win_allocate')
  call c_f_pointer(wptr, wbuf, (/ 4 /))
  wbuf = -1
  call MPI_WIN_FENCE(0, win, ierr)
  tdisp = 1
  call MPI_PUT(rank, 1, MPI_INTEGER, mod(rank + 1, nprocs), tdisp, 1, MPI_INTEGER, win, ierr)
  call MPI_WIN_FENCE(0, win, ierr)
  call check(wbuf(2) == mod(rank + nprocs - 1, nprocs), 'put/fence')
  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  i = -5
  call MPI_WIN_LOCK(MPI_LOCK_SHARED, mod(rank + 1, nprocs), 0, win, ierr)
  call MPI_GET(i, 1, MPI_INTEGER, mod(rank + 1, nprocs), tdisp, 1, MPI_INTEGER, win, ierr)
  call MPI_WIN_UNLOCK(mod(rank + 1, nprocs), win, ierr)
  call check(i == rank, 'lock/get')
  call MPI_WIN_GET_ATTR(win, MPI_WIN_CREATE_FLAVOR, attrval, flag, ierr)
  call check(flag .and. attrval == MPI_WIN_FLAVOR_ALLOCATE, 'window flavor')
  ! the predefined attributes by value (MPI-4.0 12.2.6), as the program allocated the window
  call MPI_WIN_GET_ATTR(win, MPI_WIN_SIZE, attrval, flag, ierr)
  call check(flag .and. attrval == winsize, 'window size')
  call MPI_WIN_GET_ATTR(win, MPI_WIN_DISP_UNIT, attrval, flag, ierr)
  call check(flag .and. attrval == disp_unit, 'window displacement unit')
  call MPI_WIN_GET_ATTR(win, MPI_WIN_BASE, attrval, flag, ierr)
  call check(flag .and. attrval == transfer(wptr, attrval), 'window base')
  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  call MPI_WIN_FREE(win, ierr)

  ! Attributes through the user world.
  call MPI_COMM_GET_ATTR(MPI_COMM_WORLD, MPI_TAG_UB, attrval, flag, ierr)
  call check(flag .and. attrval >= 32767, 'MPI_TAG_UB')

  ! Interception, through the shim's C API.
  if (shim_here) then
    if (expect_shim == 1) then
      call check(shim_is_active() == 1, 'shim active')
      call check(shim_call_count('MPI_Allreduce'//c_null_char) >= 1, 'Allreduce counted')
      call check(shim_call_count('MPI_Iallreduce'//c_null_char) == 1, 'Iallreduce counted')
      call check(shim_call_count('MPI_Waitall'//c_null_char) == 1, 'Waitall counted')
      call check(shim_call_count('MPI_Comm_rank'//c_null_char) >= 1, 'Comm_rank counted')
      call check(shim_call_count('MPI_Put'//c_null_char) == 1, 'Put counted')
      call check(shim_call_count('MPI_Win_allocate'//c_null_char) == 1, 'Win_allocate counted')
      call check(shim_call_count('MPI_Type_vector'//c_null_char) == 1, 'Type_vector counted')
      ! F_ATTR_VIA_MPICH=1: the program binds MPICH's Fortran attribute routines (libshim
      ! linked after libmpichfort, as mpifort -profile=shim does), which bypass C MPI_*.
      call get_environment_variable('F_ATTR_VIA_MPICH', env)
      if (env /= '1') then
        call check(shim_call_count('MPI_Comm_get_attr'//c_null_char) == 1, 'Comm_get_attr counted')
        call check(shim_call_count('MPI_Win_get_attr'//c_null_char) == 4, 'Win_get_attr counted')
      end if
    else
      call check(shim_is_active() == 0, 'shim inactive')
    end if
  else
    call check(expect_shim == 0, 'libshim not loaded')
  end if

  call MPI_ALLREDUCE(MPI_IN_PLACE, errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (errors == 0) then
      print '(a,i0,a)', 'f_coll: OK (', nprocs, ' ranks)'
    else
      print '(a,i0,a)', 'f_coll: FAILED (', errors, ' errors)'
    end if
  end if
  call MPI_FINALIZE(ierr)
  if (errors /= 0) stop 1

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      errors = errors + 1
      print '(a,i0,a,a)', 'rank ', rank, ': check failed: ', what
    end if
  end subroutine

  ! Whether libshim is in the process (preloaded or linked); binds its C API.
  logical function shim_available()
    type(c_funptr) :: p, q
    p = dlsym(c_null_ptr, 'shim_is_active'//c_null_char)
    q = dlsym(c_null_ptr, 'shim_call_count'//c_null_char)
    shim_available = c_associated(p) .and. c_associated(q)
    if (shim_available) then
      call c_f_procpointer(p, shim_is_active)
      call c_f_procpointer(q, shim_call_count)
    end if
  end function
end program
