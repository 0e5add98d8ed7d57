! A `use mpi` program all of whose MPI calls libshim defines, so that a linker with
! --as-needed keeps no MPI library of its own accord: the way in must keep the MPI's
! Fortran library, whose mpif.h common blocks are the sentinels' addresses (MPI_IN_PLACE,
! MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE). Prints "f_min: OK (<n> ranks)".
program f_min
  use mpi
  implicit none
  integer :: ierr, me, n, x(3), y, z, reqs(2), bad
  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, me, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, n, ierr)
  bad = 0
  x = me + 1
  call MPI_ALLREDUCE(MPI_IN_PLACE, x, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(x /= n*(n+1)/2)) bad = bad + 1
  y = me
  call MPI_SENDRECV(y, 1, MPI_INTEGER, mod(me + 1, n), 5, z, 1, MPI_INTEGER, &
                    mod(me + n - 1, n), 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (z /= mod(me + n - 1, n)) bad = bad + 1
  call MPI_IRECV(z, 1, MPI_INTEGER, mod(me + n - 1, n), 6, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_ISEND(y, 1, MPI_INTEGER, mod(me + 1, n), 6, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_WAITALL(2, reqs, MPI_STATUSES_IGNORE, ierr)
  if (z /= mod(me + n - 1, n)) bad = bad + 1
  call MPI_ALLREDUCE(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (me == 0) then
    if (bad == 0) then
      print '(a,i0,a)', 'f_min: OK (', n, ' ranks)'
    else
      print '(a,i0)', 'f_min: FAILED checks: ', bad
    end if
  end if
  call MPI_FINALIZE(ierr)
end program
