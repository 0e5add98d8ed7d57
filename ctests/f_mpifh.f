C     Fortran 77 style (mpif.h) test of the shim: MPI_INIT, MPI_BOTTOM with an absolute-
C     address datatype, MPI_IN_PLACE, MPI_STATUS_IGNORE, LOGICAL results (MPI_TESTALL,
C     MPI_ATTR_GET), persistent collectives, MPI_WAITANY/MPI_WAITSOME indices (1-based),
C     CHARACTER names, LOGICAL arrays (MPI_CART_CREATE/GET), MPI_NEIGHBOR_ALLTOALLW type
C     arrays, MPI_UNWEIGHTED, MPI_PACK_EXTERNAL (a CHARACTER datarep). Results are
C     checked here; interception is checked by
C     scripts/fortran-tests from the SHIM_STATS=rank report. Compiled with -cpp:
C     NO_MPI4_F77 leaves out what an MPI-3.1 mpif.h library (Open MPI 4.1) lacks.
      PROGRAM FMPIFH
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR, RANK, NPROCS, I, ERRS, NEXT, PREV, STYPE
      INTEGER A(4), B(4), REQS(2), BLENS(1), TYPES(1), IVAL
      INTEGER(KIND=MPI_ADDRESS_KIND) DISPS(1)
      LOGICAL FLAG, PERIODS(2)
      INTEGER IDX, NOUT, IDXS(2), DUPC, NLEN, DIMS(2), COORDS(2)
      INTEGER CART, DG, NSUM, GR
      INTEGER GIDX(64), GEDG(64), GIDX2(64), GEDG2(64)
      INTEGER SB(4), RB(4), SCNT(4), RCNT(4), STYPES(4), RTYPES(4)
      INTEGER(KIND=MPI_ADDRESS_KIND) SDSP(4), RDSP(4)
      CHARACTER*(MPI_MAX_OBJECT_NAME) CNAME
      INTEGER(KIND=MPI_ADDRESS_KIND) XSZ, XPOS
      INTEGER*1 XBUF(16)
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
         IF (B(I) .NE. 10 * PREV + I) CALL BAD(__LINE__, ERRS)
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
         IF (B(I) .NE. 1000 + I) CALL BAD(__LINE__, ERRS)
      END DO
      CALL MPI_TYPE_FREE(STYPE, IERR)
C     MPI_IN_PLACE, and a point-to-point receive with MPI_STATUS_IGNORE.
      IVAL = RANK
      CALL MPI_ALLREDUCE(MPI_IN_PLACE, IVAL, 1, MPI_INTEGER, MPI_MAX,
     &     MPI_COMM_WORLD, IERR)
      IF (IVAL .NE. NPROCS - 1) CALL BAD(__LINE__, ERRS)
      CALL MPI_SENDRECV(RANK, 1, MPI_INTEGER, NEXT, 4, IVAL, 1,
     &     MPI_INTEGER, PREV, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE,
     &     IERR)
      IF (IVAL .NE. PREV) CALL BAD(__LINE__, ERRS)
#ifndef NO_MPI4_F77
C     A persistent collective started twice.
      CALL MPI_ALLREDUCE_INIT(RANK, IVAL, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, MPI_INFO_NULL, REQS(1), IERR)
      DO I = 1, 2
         CALL MPI_START(REQS(1), IERR)
         CALL MPI_WAIT(REQS(1), MPI_STATUS_IGNORE, IERR)
         IF (IVAL .NE. NPROCS * (NPROCS - 1) / 2)
     &        CALL BAD(__LINE__, ERRS)
      END DO
      CALL MPI_REQUEST_FREE(REQS(1), IERR)
#endif
C     MPI_WAITANY: 1-based indices.
      CALL MPI_IBARRIER(MPI_COMM_WORLD, REQS(1), IERR)
      CALL MPI_IRECV(IVAL, 1, MPI_INTEGER, PREV, 5, MPI_COMM_WORLD,
     &     REQS(2), IERR)
      CALL MPI_SEND(RANK, 1, MPI_INTEGER, NEXT, 5, MPI_COMM_WORLD,
     &     IERR)
      NSUM = 0
      DO I = 1, 2
         CALL MPI_WAITANY(2, REQS, IDX, MPI_STATUS_IGNORE, IERR)
         IF (IDX .LT. 1 .OR. IDX .GT. 2) CALL BAD(__LINE__, ERRS)
         NSUM = NSUM + IDX
      END DO
      IF (NSUM .NE. 3 .OR. IVAL .NE. PREV) CALL BAD(__LINE__, ERRS)
C     All null now: MPI_UNDEFINED (MPICH 4.0's binding returns it plus one).
      CALL MPI_WAITANY(2, REQS, IDX, MPI_STATUS_IGNORE, IERR)
      IF (IDX .NE. MPI_UNDEFINED .AND. IDX .NE. MPI_UNDEFINED + 1)
     &     CALL BAD(__LINE__, ERRS)
C     MPI_WAITSOME on a collective request next to a null one.
      CALL MPI_IALLREDUCE(RANK, IVAL, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, REQS(2), IERR)
      REQS(1) = MPI_REQUEST_NULL
      NOUT = 0
      DO WHILE (NOUT .EQ. 0)
         CALL MPI_WAITSOME(2, REQS, NOUT, IDXS, MPI_STATUSES_IGNORE,
     &        IERR)
      END DO
      IF (NOUT .NE. 1 .OR. IDXS(1) .NE. 2) CALL BAD(__LINE__, ERRS)
      IF (IVAL .NE. NPROCS * (NPROCS - 1) / 2) CALL BAD(__LINE__, ERRS)
C     CHARACTER arguments: trailing blanks trimmed in, blank-padded out.
      CALL MPI_COMM_DUP(MPI_COMM_WORLD, DUPC, IERR)
      CALL MPI_COMM_SET_NAME(DUPC, 'shim dup   ', IERR)
      CALL MPI_COMM_GET_NAME(DUPC, CNAME, NLEN, IERR)
      IF (CNAME .NE. 'shim dup' .OR. NLEN .NE. 8)
     &     CALL BAD(__LINE__, ERRS)
      CALL MPI_COMM_FREE(DUPC, IERR)
      IF (DUPC .NE. MPI_COMM_NULL) CALL BAD(__LINE__, ERRS)
C     external32 (a CHARACTER datarep): two INTEGERs big-endian, and back.
      A(1) = 258
      A(2) = -2
      CALL MPI_PACK_EXTERNAL_SIZE('external32', 2, MPI_INTEGER, XSZ,
     &     IERR)
      IF (XSZ .NE. 8) CALL BAD(__LINE__, ERRS)
      XPOS = 0
      CALL MPI_PACK_EXTERNAL('external32', A, 2, MPI_INTEGER, XBUF,
     &     XSZ, XPOS, IERR)
      IF (XPOS .NE. 8 .OR. XBUF(1) .NE. 0 .OR. XBUF(3) .NE. 1 .OR.
     &     XBUF(4) .NE. 2 .OR. XBUF(5) .NE. -1 .OR. XBUF(8) .NE. -2)
     &     CALL BAD(__LINE__, ERRS)
      B(1) = 0
      B(2) = 0
      XPOS = 0
      CALL MPI_UNPACK_EXTERNAL('external32', XBUF, XSZ, XPOS, B, 2,
     &     MPI_INTEGER, IERR)
      IF (XPOS .NE. 8 .OR. B(1) .NE. 258 .OR. B(2) .NE. -2)
     &     CALL BAD(__LINE__, ERRS)
C     A periodic ring: LOGICAL arrays in and out, then MPI_NEIGHBOR_ALLTOALLW
C     (type arrays as long as the topology has neighbours).
C     Dimension 1 (size 1, periodic) has this rank as both neighbours, so
C     both blocks sent along it are equal (their matching order is open).
      DIMS(1) = NPROCS
      DIMS(2) = 1
      PERIODS(1) = .FALSE.
      PERIODS(2) = .TRUE.
      CALL MPI_CART_CREATE(MPI_COMM_WORLD, 2, DIMS, PERIODS, .FALSE.,
     &     CART, IERR)
      PERIODS(1) = .TRUE.
      PERIODS(2) = .FALSE.
      CALL MPI_CART_GET(CART, 2, DIMS, PERIODS, COORDS, IERR)
      IF (PERIODS(1) .OR. .NOT. PERIODS(2) .OR. COORDS(1) .NE. RANK)
     &     CALL BAD(__LINE__, ERRS)
      DO I = 1, 4
         SB(I) = 100 * MIN(I, 3) + RANK
         RB(I) = -1
         SCNT(I) = 1
         RCNT(I) = 1
         STYPES(I) = MPI_INTEGER
         RTYPES(I) = MPI_INTEGER
         SDSP(I) = 4 * (I - 1)
         RDSP(I) = 4 * (I - 1)
      END DO
      CALL MPI_NEIGHBOR_ALLTOALLW(SB, SCNT, SDSP, STYPES, RB, RCNT,
     &     RDSP, RTYPES, CART, IERR)
      IF (RANK .GT. 0 .AND. RB(1) .NE. 200 + PREV)
     &     CALL BAD(__LINE__, ERRS)
      IF (RANK .LT. NPROCS - 1 .AND. RB(2) .NE. 100 + NEXT)
     &     CALL BAD(__LINE__, ERRS)
      IF (RANK .EQ. 0 .AND. RB(1) .NE. -1) CALL BAD(__LINE__, ERRS)
      IF (RANK .EQ. NPROCS - 1 .AND. RB(2) .NE. -1)
     &     CALL BAD(__LINE__, ERRS)
      IF (RB(3) .NE. 300 + RANK .OR. RB(4) .NE. 300 + RANK)
     &     CALL BAD(__LINE__, ERRS)
      CALL MPI_COMM_FREE(CART, IERR)
C     A directed ring without weights (MPI_UNWEIGHTED).
      CALL MPI_DIST_GRAPH_CREATE_ADJACENT(MPI_COMM_WORLD, 1, PREV,
     &     MPI_UNWEIGHTED, 1, NEXT, MPI_UNWEIGHTED, MPI_INFO_NULL,
     &     .FALSE., DG, IERR)
      IVAL = -1
      CALL MPI_NEIGHBOR_ALLGATHER(RANK, 1, MPI_INTEGER, IVAL, 1,
     &     MPI_INTEGER, DG, IERR)
      IF (IVAL .NE. PREV) CALL BAD(__LINE__, ERRS)
      CALL MPI_COMM_FREE(DG, IERR)
C     A graph ring: INDEX holds cumulative degrees (no index conversion).
      IF (NPROCS .LE. 64) THEN
         DO I = 1, NPROCS
            GIDX(I) = I
            GEDG(I) = MOD(I, NPROCS)
         END DO
         CALL MPI_GRAPH_CREATE(MPI_COMM_WORLD, NPROCS, GIDX, GEDG,
     &        .FALSE., GR, IERR)
         IF (GIDX(1) .NE. 1 .OR. GIDX(NPROCS) .NE. NPROCS)
     &        CALL BAD(__LINE__, ERRS)
         CALL MPI_GRAPH_GET(GR, 64, 64, GIDX2, GEDG2, IERR)
         IF (GIDX2(NPROCS) .NE. NPROCS .OR. GEDG2(1) .NE. GEDG(1))
     &        CALL BAD(__LINE__, ERRS)
         CALL MPI_COMM_FREE(GR, IERR)
      END IF
C     A LOGICAL result and an attribute by value.
      CALL MPI_ATTR_GET(MPI_COMM_WORLD, MPI_TAG_UB, IVAL, FLAG, IERR)
      IF (.NOT. FLAG .OR. IVAL .LT. 32767) CALL BAD(__LINE__, ERRS)
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

C     Records a failed check (the line it is on).
      SUBROUTINE BAD(LINE, ERRS)
      INTEGER LINE, ERRS
      PRINT '(A,I0)', 'f_mpifh: check failed at line ', LINE
      ERRS = ERRS + 1
      END
