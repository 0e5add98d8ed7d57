C     Fortran 77 style (mpif.h) test of the shim: MPI_INIT, MPI_BOTTOM with an absolute-
C     address datatype, MPI_IN_PLACE, MPI_STATUS_IGNORE, LOGICAL results (MPI_TESTALL,
C     MPI_ATTR_GET), persistent collectives. Results are checked here; interception is
C     checked by scripts/fortran-tests from the SHIM_STATS=rank report.
      PROGRAM FMPIFH
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR, RANK, NPROCS, I, ERRS, NEXT, PREV, STYPE
      INTEGER A(4), B(4), REQS(2), BLENS(1), TYPES(1), IVAL
      INTEGER(KIND=MPI_ADDRESS_KIND) DISPS(1)
      LOGICAL FLAG
      ERRS = 0
      CALL MPI_INIT(IERR)
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NPROCS, IERR)
      NEXT = MOD(RANK + 1, NPROCS)
      PREV = MOD(RANK + NPROCS - 1, NPROCS)
C     MPI_BOTTOM: a struct type holding the absolute address of A.
      DO I = 1, 4
         A(I) = 10 * RANK + I
         B(I) = -1
      END DO
      CALL MPI_GET_ADDRESS(A, DISPS(1), IERR)
      BLENS(1) = 4
      TYPES(1) = MPI_INTEGER
      CALL MPI_TYPE_CREATE_STRUCT(1, BLENS, DISPS, TYPES, STYPE, IERR)
      CALL MPI_TYPE_COMMIT(STYPE, IERR)
      CALL MPI_IRECV(B, 4, MPI_INTEGER, PREV, 3, MPI_COMM_WORLD,
     &     REQS(1), IERR)
      CALL MPI_ISEND(MPI_BOTTOM, 1, STYPE, NEXT, 3, MPI_COMM_WORLD,
     &     REQS(2), IERR)
      FLAG = .FALSE.
      DO WHILE (.NOT. FLAG)
         CALL MPI_TESTALL(2, REQS, FLAG, MPI_STATUSES_IGNORE, IERR)
      END DO
      DO I = 1, 4
         IF (B(I) .NE. 10 * PREV + I) ERRS = ERRS + 1
      END DO
      CALL MPI_TYPE_FREE(STYPE, IERR)
C     MPI_BOTTOM as the broadcast buffer.
      CALL MPI_GET_ADDRESS(B, DISPS(1), IERR)
      CALL MPI_TYPE_CREATE_STRUCT(1, BLENS, DISPS, TYPES, STYPE, IERR)
      CALL MPI_TYPE_COMMIT(STYPE, IERR)
      IF (RANK .EQ. 0) THEN
         DO I = 1, 4
            B(I) = 1000 + I
         END DO
      END IF
      CALL MPI_BCAST(MPI_BOTTOM, 1, STYPE, 0, MPI_COMM_WORLD, IERR)
      DO I = 1, 4
         IF (B(I) .NE. 1000 + I) ERRS = ERRS + 1
      END DO
      CALL MPI_TYPE_FREE(STYPE, IERR)
C     MPI_IN_PLACE, and a point-to-point receive with MPI_STATUS_IGNORE.
      IVAL = RANK
      CALL MPI_ALLREDUCE(MPI_IN_PLACE, IVAL, 1, MPI_INTEGER, MPI_MAX,
     &     MPI_COMM_WORLD, IERR)
      IF (IVAL .NE. NPROCS - 1) ERRS = ERRS + 1
      CALL MPI_SENDRECV(RANK, 1, MPI_INTEGER, NEXT, 4, IVAL, 1,
     &     MPI_INTEGER, PREV, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE,
     &     IERR)
      IF (IVAL .NE. PREV) ERRS = ERRS + 1
C     A persistent collective started twice.
      CALL MPI_ALLREDUCE_INIT(RANK, IVAL, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, MPI_INFO_NULL, REQS(1), IERR)
      DO I = 1, 2
         CALL MPI_START(REQS(1), IERR)
         CALL MPI_WAIT(REQS(1), MPI_STATUS_IGNORE, IERR)
         IF (IVAL .NE. NPROCS * (NPROCS - 1) / 2) ERRS = ERRS + 1
      END DO
      CALL MPI_REQUEST_FREE(REQS(1), IERR)
C     A LOGICAL result and an attribute by value.
      CALL MPI_ATTR_GET(MPI_COMM_WORLD, MPI_TAG_UB, IVAL, FLAG, IERR)
      IF (.NOT. FLAG .OR. IVAL .LT. 32767) ERRS = ERRS + 1
      CALL MPI_ALLREDUCE(MPI_IN_PLACE, ERRS, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, IERR)
      IF (RANK .EQ. 0) THEN
         IF (ERRS .EQ. 0) THEN
            PRINT '(A,I0,A)', 'f_mpifh: OK (', NPROCS, ' ranks)'
         ELSE
            PRINT '(A,I0,A)', 'f_mpifh: FAILED (', ERRS, ' errors)'
         END IF
      END IF
      CALL MPI_FINALIZE(IERR)
      IF (ERRS .NE. 0) STOP 1
      END
