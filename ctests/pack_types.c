/* Datatype engine (issue 8): MPI_Pack/MPI_Unpack (the shim's packer) against
 * PMPI_Pack/PMPI_Unpack (the system MPI) byte for byte, over randomly generated nested
 * datatypes (contiguous, vector, hvector, indexed, hindexed, indexed_block,
 * hindexed_block, struct, subarray, darray, resized, dup; each constructor half the time
 * in its large-count _c form) and several counts; the _c forms; partial positions. Then
 * point-to-point messages with derived datatypes: shim to
 * shim, to a receiver using a different datatype with the same signature, short messages,
 * truncation, and MPI_Get_count / MPI_Get_elements. MPI_Pack_external/MPI_Unpack_external
 * ("external32") against the system MPI over random types of one base each.
 *
 * Every rank tests its own random types (seed from PACK_SEED and the rank). Thread
 * counts and the threshold come from the environment (scripts/pack-tests runs it with
 * SHIM_PACK_THREADS=1..3 and a tiny SHIM_PACK_MIN_BYTES so that every size splits). */
#include "common.h"

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

static MPI_Datatype bases[] = {MPI_CHAR, MPI_SHORT, MPI_INT, MPI_DOUBLE, MPI_DOUBLE_INT, MPI_SHORT_INT, MPI_FLOAT};
#define NBASES ((int)(sizeof bases / sizeof bases[0]))
/* When set, every generated type is built from this one base (the external32 checks). */
static MPI_Datatype only_base = MPI_DATATYPE_NULL;

/* Types that the generator creates and must free. */
static MPI_Datatype made[4096];
static int nmade;
static MPI_Datatype keep(MPI_Datatype t) {
    if (nmade < 4096) made[nmade++] = t;
    return t;
}

static MPI_Aint extent_of(MPI_Datatype t) {
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t, &lb, &ext);
    return ext;
}
static MPI_Aint true_end(MPI_Datatype t) {
    MPI_Aint tlb, text;
    MPI_Type_get_true_extent(t, &tlb, &text);
    return tlb + text;
}

/* Each constructor, half the time in its large-count form (MPI-4.0 §5.1: the `_c`
 * constructors keep their arguments in the large-count array of MPI_Type_get_contents, so
 * the shim's decoder must read both layouts). */
#if MPI_VERSION >= 4
/* not for the external32 checks: their helpers walk types with the classic calls */
#define BIG() (only_base == MPI_DATATYPE_NULL && rnd() % 2)
#define CV(dst, src, n) MPI_Count dst[8]; for (int k_ = 0; k_ < (n); k_++) dst[k_] = (src)[k_]
#else
#define BIG() 0
#endif
static void T_contiguous(int n, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { MPI_Type_contiguous_c(n, o, t); return; }
#endif
    MPI_Type_contiguous(n, o, t);
}
static void T_vector(int n, int bl, int st, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { MPI_Type_vector_c(n, bl, st, o, t); return; }
#endif
    MPI_Type_vector(n, bl, st, o, t);
}
static void T_hvector(int n, int bl, MPI_Aint st, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { MPI_Type_create_hvector_c(n, bl, st, o, t); return; }
#endif
    MPI_Type_create_hvector(n, bl, st, o, t);
}
static void T_indexed(int n, int *bl, int *d, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(b, bl, n); CV(e, d, n); MPI_Type_indexed_c(n, b, e, o, t); return; }
#endif
    MPI_Type_indexed(n, bl, d, o, t);
}
static void T_hindexed(int n, int *bl, MPI_Aint *d, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(b, bl, n); CV(e, d, n); MPI_Type_create_hindexed_c(n, b, e, o, t); return; }
#endif
    MPI_Type_create_hindexed(n, bl, d, o, t);
}
static void T_indexed_block(int n, int bl, int *d, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(e, d, n); MPI_Type_create_indexed_block_c(n, bl, e, o, t); return; }
#endif
    MPI_Type_create_indexed_block(n, bl, d, o, t);
}
static void T_hindexed_block(int n, int bl, MPI_Aint *d, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(e, d, n); MPI_Type_create_hindexed_block_c(n, bl, e, o, t); return; }
#endif
    MPI_Type_create_hindexed_block(n, bl, d, o, t);
}
static void T_struct(int n, int *bl, MPI_Aint *d, MPI_Datatype *ts, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(b, bl, n); CV(e, d, n); MPI_Type_create_struct_c(n, b, e, ts, t); return; }
#endif
    MPI_Type_create_struct(n, bl, d, ts, t);
}
static void T_subarray(int nd, int *sz, int *sub, int *st, int order, MPI_Datatype o, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(a, sz, nd); CV(b, sub, nd); CV(c, st, nd); MPI_Type_create_subarray_c(nd, a, b, c, order, o, t); return; }
#endif
    MPI_Type_create_subarray(nd, sz, sub, st, order, o, t);
}
static void T_darray(int np, int r, int nd, int *gs, int *di, int *da, int *ps, int order, MPI_Datatype o,
                     MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { CV(g, gs, nd); MPI_Type_create_darray_c(np, r, nd, g, di, da, ps, order, o, t); return; }
#endif
    MPI_Type_create_darray(np, r, nd, gs, di, da, ps, order, o, t);
}
static void T_resized(MPI_Datatype o, MPI_Aint lb, MPI_Aint ext, MPI_Datatype *t) {
#if MPI_VERSION >= 4
    if (BIG()) { MPI_Type_create_resized_c(o, lb, ext, t); return; }
#endif
    MPI_Type_create_resized(o, lb, ext, t);
}

/* A random type whose type map does not overlap itself (so it can be unpacked into),
 * with non-negative displacements; the bytes it spans are kept moderate. */
static MPI_Datatype gen(int depth) {
    if (depth == 0 || rnd() % 4 == 0) return only_base != MPI_DATATYPE_NULL ? only_base : bases[rnd() % NBASES];
    MPI_Datatype old = gen(depth - 1), t = MPI_DATATYPE_NULL;
    MPI_Aint ext = extent_of(old);
    MPI_Aint end = true_end(old);
    if (ext < end) ext = end; /* keep copies apart */
    if (ext != extent_of(old)) {
        T_resized(old, 0, ext, &t);
        old = keep(t);
    }
    switch (rnd() % 12) {
    case 0:
        T_contiguous(rnd_in(1, 5), old, &t);
        break;
    case 1: {
        int bl = rnd_in(1, 4);
        T_vector(rnd_in(1, 6), bl, bl + rnd_in(0, 3), old, &t);
        break;
    }
    case 2: {
        int bl = rnd_in(1, 3);
        T_hvector(rnd_in(1, 6), bl, bl * ext + rnd_in(0, 9), old, &t);
        break;
    }
    case 3:
    case 4: {
        int n = rnd_in(1, 5), bls[5], d[5];
        MPI_Aint hd[5];
        int at = rnd_in(0, 2);
        for (int i = 0; i < n; i++) {
            bls[i] = rnd_in(0, 3);
            d[i] = at;
            hd[i] = (MPI_Aint)at * ext + (i > 0 && ext >= 4 ? rnd_in(0, 3) : 0);
            at += bls[i] + rnd_in(0, 2) + 1;
        }
        if (rnd() % 2)
            T_indexed(n, bls, d, old, &t);
        else
            T_hindexed(n, bls, hd, old, &t);
        break;
    }
    case 5: {
        int n = rnd_in(1, 5), bl = rnd_in(1, 3), d[5];
        MPI_Aint hd[5];
        int at = 0;
        for (int i = 0; i < n; i++) {
            d[i] = at;
            hd[i] = (MPI_Aint)at * ext;
            at += bl + rnd_in(0, 2);
        }
        if (rnd() % 2)
            T_indexed_block(n, bl, d, old, &t);
        else
            T_hindexed_block(n, bl, hd, old, &t);
        break;
    }
    case 6: {
        int n = rnd_in(1, 3), bls[3];
        MPI_Aint d[3], at = rnd_in(0, 4);
        MPI_Datatype ts[3];
        for (int i = 0; i < n; i++) {
            ts[i] = i == 0 ? old : gen(depth - 1);
            bls[i] = rnd_in(1, 3);
            d[i] = at;
            MPI_Aint e = extent_of(ts[i]), te = true_end(ts[i]);
            at += (MPI_Aint)(bls[i] - 1) * e + (te > e ? te : e) + rnd_in(0, 5);
        }
        T_struct(n, bls, d, ts, &t);
        break;
    }
    case 7: {
        int nd = rnd_in(1, 3), sizes[3], subs[3], starts[3];
        for (int i = 0; i < nd; i++) {
            sizes[i] = rnd_in(1, 6);
            subs[i] = rnd_in(1, sizes[i]);
            starts[i] = rnd_in(0, sizes[i] - subs[i]);
        }
        T_subarray(nd, sizes, subs, starts, rnd() % 2 ? MPI_ORDER_C : MPI_ORDER_FORTRAN, old, &t);
        break;
    }
    case 8: {
        int nd = rnd_in(1, 3), gs[3], dist[3], darg[3], ps[3], np = 1;
        for (int i = 0; i < nd; i++) {
            gs[i] = rnd_in(1, 9);
            ps[i] = rnd_in(1, 3);
            np *= ps[i];
            int k = rnd() % 3;
            dist[i] = k == 0 ? MPI_DISTRIBUTE_BLOCK : k == 1 ? MPI_DISTRIBUTE_CYCLIC : MPI_DISTRIBUTE_NONE;
            if (dist[i] == MPI_DISTRIBUTE_NONE) ps[i] = 1, np = np; /* NONE needs 1 process */
            darg[i] = MPI_DISTRIBUTE_DFLT_DARG;
            if (dist[i] == MPI_DISTRIBUTE_CYCLIC && rnd() % 2) darg[i] = rnd_in(1, 3);
            if (dist[i] == MPI_DISTRIBUTE_BLOCK && rnd() % 2) darg[i] = (gs[i] + ps[i] - 1) / ps[i] + rnd_in(0, 2);
        }
        np = 1;
        for (int i = 0; i < nd; i++) np *= ps[i];
        T_darray(np, rnd_in(0, np - 1), nd, gs, dist, darg, ps,
                               rnd() % 2 ? MPI_ORDER_C : MPI_ORDER_FORTRAN, old, &t);
        break;
    }
    case 9:
        T_resized(old, 0, ext + rnd_in(0, 16), &t);
        break;
    case 10:
        MPI_Type_dup(old, &t);
        break;
    default: {
        /* a "vector of vectors" like a 3-D halo face */
        MPI_Datatype inner;
        T_vector(rnd_in(1, 4), 1, rnd_in(1, 3), old, &inner);
        keep(inner);
        T_hvector(rnd_in(1, 4), 1, true_end(inner) + rnd_in(0, 8), inner, &t);
        break;
    }
    }
    return keep(t);
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed + i * 131 + (i >> 7));
}

static void check_type(MPI_Datatype t, int count, int iter) {
    MPI_Aint tlb, text, lb, ext;
    MPI_Type_get_true_extent(t, &tlb, &text);
    MPI_Type_get_extent(t, &lb, &ext);
    CHECK(tlb >= 0, "generated type has negative true lb");
    size_t span = count ? (size_t)(tlb + text + (count - 1) * (ext > 0 ? ext : 0)) : 0;
    span += 64;
    int psz;
    MPI_OK(MPI_Pack_size(count, t, MPI_COMM_WORLD, &psz));
    int pre = rnd_in(0, 7); /* pack at a non-zero position */
    size_t outsz = (size_t)psz + pre;
    unsigned char *src = malloc(span), *a = calloc(outsz, 1), *b = calloc(outsz, 1);
    fill(src, span, iter);
    int pa = pre, pb = pre;
    MPI_OK(MPI_Pack(src, count, t, a, (int)outsz, &pa, MPI_COMM_WORLD));
    MPI_OK(PMPI_Pack(src, count, t, b, (int)outsz, &pb, MPI_COMM_WORLD));
    CHECK(pa == pb, "type %d count %d: position %d, system %d", iter, count, pa, pb);
    CHECK(memcmp(a, b, (size_t)pa) == 0, "type %d count %d: packed bytes differ", iter, count);
    /* _c form */
    MPI_Count pc = pre;
    memset(a, 0, outsz);
    MPI_OK(MPI_Pack_c(src, count, t, a, (MPI_Count)outsz, &pc, MPI_COMM_WORLD));
    CHECK(pc == pb && memcmp(a, b, (size_t)pb) == 0, "type %d count %d: MPI_Pack_c differs", iter, count);
    /* unpack random packed bytes into a patterned buffer, both ways */
    unsigned char *ua = malloc(span), *ub = malloc(span);
    fill(ua, span, 7 * iter + 1);
    memcpy(ub, ua, span);
    fill(a, outsz, 3 * iter + 5);
    int qa = pre, qb = pre;
    MPI_OK(MPI_Unpack(a, (int)outsz, &qa, ua, count, t, MPI_COMM_WORLD));
    MPI_OK(PMPI_Unpack(a, (int)outsz, &qb, ub, count, t, MPI_COMM_WORLD));
    CHECK(qa == qb, "type %d count %d: unpack position %d, system %d", iter, count, qa, qb);
    CHECK(memcmp(ua, ub, span) == 0, "type %d count %d: unpacked buffers differ", iter, count);
    MPI_Count qc = pre;
    fill(ua, span, 7 * iter + 1);
    MPI_OK(MPI_Unpack_c(a, (MPI_Count)outsz, &qc, ua, count, t, MPI_COMM_WORLD));
    CHECK(qc == qb && memcmp(ua, ub, span) == 0, "type %d count %d: MPI_Unpack_c differs", iter, count);
    free(src), free(a), free(b), free(ua), free(ub);
}

/* MPI_Pack_external/MPI_Unpack_external ("external32", big-endian) and their _c forms
 * against the system MPI's, byte for byte, at a non-zero position. */
/* The combiners of a type, outermost first (for EXT_DEBUG). */
static void describe(MPI_Datatype t, int depth) {
    int ni, na, nd, comb;
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    fprintf(stderr, "%*scombiner %d (ints %d addrs %d types %d)\n", 2 * depth, "", comb, ni, na, nd);
    if (comb == MPI_COMBINER_NAMED) {
        char name[MPI_MAX_OBJECT_NAME];
        int len;
        MPI_Type_get_name(t, name, &len);
        fprintf(stderr, "%*s %s\n", 2 * depth, "", name);
        return;
    }
    int *is = malloc(sizeof(int) * (ni + 1));
    MPI_Aint *as = malloc(sizeof(MPI_Aint) * (na + 1));
    MPI_Datatype *ds = malloc(sizeof(MPI_Datatype) * (nd + 1));
    MPI_Type_get_contents(t, ni, na, nd, is, as, ds);
    for (int i = 0; i < ni && i < 8; i++) fprintf(stderr, "%*s int %d\n", 2 * depth, "", is[i]);
    for (int i = 0; i < nd; i++) describe(ds[i], depth + 1);
    free(is), free(as), free(ds);
}

/* Whether Debian's MPICH 4.0.2 cannot pack a type in external32: it stops with SIGILL on
 * a darray or a struct of several blocks anywhere inside. */
static int beyond_mpich(MPI_Datatype t) {
    int ni, na, nd, comb, r = 0;
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    if (comb == MPI_COMBINER_DARRAY || (comb == MPI_COMBINER_STRUCT && nd > 1)) return 1;
    if (comb == MPI_COMBINER_NAMED) return 0;
    int *is = malloc(sizeof(int) * (ni + 1));
    MPI_Aint *as = malloc(sizeof(MPI_Aint) * (na + 1));
    MPI_Datatype *ds = malloc(sizeof(MPI_Datatype) * (nd + 1));
    MPI_Type_get_contents(t, ni, na, nd, is, as, ds);
    for (int i = 0; i < nd && !r; i++) r = beyond_mpich(ds[i]);
    free(is), free(as), free(ds);
    return r;
}

/* The system's external32 bytes, or for types beyond it (unit > 0) its native packing
 * with every unit-byte element reversed, which is what external32 is for these bases. */
static void system_external(MPI_Datatype t, int count, const void *src, unsigned char *out, MPI_Aint outsz,
                            MPI_Aint *pos, int unit) {
    if (!unit) {
        MPI_OK(PMPI_Pack_external("external32", src, count, t, out, outsz, pos));
        return;
    }
    int p = 0, sz;
    MPI_OK(PMPI_Pack_size(count, t, MPI_COMM_WORLD, &sz));
    unsigned char *tmp = malloc((size_t)sz + 1);
    MPI_OK(PMPI_Pack(src, count, t, tmp, sz, &p, MPI_COMM_WORLD));
    for (int i = 0; i < p; i++) out[*pos + i] = tmp[(i / unit) * unit + (unit - 1 - i % unit)];
    *pos += p;
    free(tmp);
}

static void check_external(MPI_Datatype t, int count, int iter, int unit) {
    if (getenv("EXT_DEBUG")) fprintf(stderr, "external type %d count %d\n", iter, count), describe(t, 0);
    MPI_Aint tlb, text, lb, ext, psz;
    MPI_Type_get_true_extent(t, &tlb, &text);
    MPI_Type_get_extent(t, &lb, &ext);
    size_t span = count ? (size_t)(tlb + text + (count - 1) * (ext > 0 ? ext : 0)) : 0;
    span += 64;
    if (unit) {
        int n;
        MPI_OK(PMPI_Pack_size(count, t, MPI_COMM_WORLD, &n));
        psz = n;
    } else {
        MPI_OK(MPI_Pack_external_size("external32", count, t, &psz));
    }
    MPI_Aint pre = rnd_in(0, 7);
    size_t outsz = (size_t)psz + (size_t)pre;
    unsigned char *src = malloc(span), *a = calloc(outsz, 1), *b = calloc(outsz, 1);
    fill(src, span, iter);
    MPI_Aint pa = pre, pb = pre;
    MPI_OK(MPI_Pack_external("external32", src, count, t, a, (MPI_Aint)outsz, &pa));
    system_external(t, count, src, b, (MPI_Aint)outsz, &pb, unit);
    CHECK(pa == pb, "external type %d count %d: position %ld, system %ld", iter, count, (long)pa, (long)pb);
    if (getenv("EXT_DEBUG") && memcmp(a, b, (size_t)pb) != 0) {
        for (MPI_Aint i = 0; i < pb; i++)
            if (a[i] != b[i]) fprintf(stderr, "byte %ld: shim %02x system %02x\n", (long)i, a[i], b[i]);
    }
    CHECK(memcmp(a, b, (size_t)pb) == 0, "external type %d count %d: packed bytes differ", iter, count);
    MPI_Count pc = pre;
    memset(a, 0, outsz);
    MPI_OK(MPI_Pack_external_c("external32", src, count, t, a, (MPI_Count)outsz, &pc));
    CHECK(pc == pb && memcmp(a, b, (size_t)pb) == 0, "external type %d count %d: _c differs", iter, count);
    unsigned char *ua = malloc(span), *ub = malloc(span);
    fill(ua, span, 7 * iter + 1);
    memcpy(ub, ua, span);
    fill(a, outsz, 3 * iter + 5);
    MPI_Aint qa = pre, qb = pre;
    MPI_OK(MPI_Unpack_external("external32", a, (MPI_Aint)outsz, &qa, ua, count, t));
    if (!unit) {
        MPI_OK(PMPI_Unpack_external("external32", a, (MPI_Aint)outsz, &qb, ub, count, t));
    } else {
        unsigned char *sw = malloc(outsz);
        for (size_t i = 0; i < outsz; i++)
            sw[i] = i < (size_t)pre ? a[i] : a[pre + ((i - pre) / unit) * unit + (unit - 1 - (i - pre) % unit)];
        int q = (int)pre;
        MPI_OK(PMPI_Unpack(sw, (int)outsz, &q, ub, count, t, MPI_COMM_WORLD));
        qb = q;
        free(sw);
    }
    CHECK(qa == qb, "external type %d count %d: unpack position %ld, system %ld", iter, count, (long)qa, (long)qb);
    CHECK(memcmp(ua, ub, span) == 0, "external type %d count %d: unpacked buffers differ", iter, count);
    MPI_Count qc = pre;
    fill(ua, span, 7 * iter + 1);
    MPI_OK(MPI_Unpack_external_c("external32", a, (MPI_Count)outsz, &qc, ua, count, t));
    CHECK(qc == qb && memcmp(ua, ub, span) == 0, "external type %d count %d: _c unpack differs", iter, count);
    free(src), free(a), free(b), free(ua), free(ub);
}

/* external32 over random types of one base each: the bases the shim converts (by byte
 * swapping) and MPI_LONG, which it leaves to the system MPI (MPICH and Open MPI narrow it
 * to 4 bytes); predefined and large counts included. Not MPI_WCHAR or pair types (Debian's
 * MPICH 4.0.2 fails assertions packing them) nor long double (Open MPI 4.1's external32
 * bytes of it vary from call to call). */
/* Intel MPI 2021.19's MPI_Pack_external leaves the doubles of derived types (a subarray of
 * a resized indexed type of MPI_DOUBLE, say) in native little-endian order, where
 * external32 is big-endian (MPI-4.1 §4.3.3; MPICH 4.0.2 and 5.0.2 swap them; README, system
 * MPI problems): there the shim's bytes are checked against the system's MPI_Pack with
 * each element reversed instead, as for the types beyond MPICH's external32. */
static int system_external32_wrong;

static void check_externals(int ntypes) {
    const MPI_Datatype ebases[] = {MPI_DOUBLE, MPI_INT, MPI_SHORT, MPI_FLOAT, MPI_LONG_LONG, MPI_UNSIGNED,
                                   MPI_INT64_T, MPI_UINT16_T, MPI_CHAR, MPI_C_BOOL, MPI_AINT, MPI_C_FLOAT_COMPLEX,
                                   MPI_C_DOUBLE_COMPLEX, MPI_LONG};
    /* the byte-swap unit of each base in external32 (0: the shim leaves it to the MPI) */
    const int units[] = {8, 4, 2, 4, 8, 4, 8, 2, 1, 1, 8, 4, 8, 0};
    const int nb = (int)(sizeof ebases / sizeof ebases[0]);
    /* count 1..3 only with the system MPI: Debian's MPICH 4.0.2 stops with SIGILL on a
     * zero count of some derived types in external32 (the shim answers those itself) */
    const int counts[] = {1, 2, 3};
    for (int k = 0; k < nb; k++) {
        only_base = ebases[k];
        check_external(ebases[k], 1, 1000 + k, 0);
        check_external(ebases[k], 70000, 2000 + k, 0); /* several 64 KiB chunks, threads */
        for (int it = 0; it < ntypes; it++) {
            nmade = 0;
            MPI_Datatype t = gen(rnd_in(1, 3));
            if (nmade == 0) continue;
            MPI_OK(MPI_Type_commit(&t));
            int tsz;
            MPI_Type_size(t, &tsz);
            if (tsz > 0 && tsz <= (1 << 18) && extent_of(t) <= (1 << 20)) {
                /* types beyond MPICH's external32: only the shim, against swapped MPI_Pack */
                int beyond = beyond_mpich(t);
                int swapped = beyond || system_external32_wrong;
                /* on Intel MPI, a darray's bytes also differ from its reversed MPI_Pack
                 * (not diagnosed: left out there, checked on both MPICHs) */
                if (beyond && system_external32_wrong) swapped = 0, beyond = -1;
                if (beyond >= 0 && (!swapped || (expect_shim() && units[k])))
                    for (int c = 0; c < 3; c++) check_external(t, counts[c], 100 * k + it, swapped ? units[k] : 0);
            }
            if (expect_shim()) {
                MPI_Aint sz = -1, pos = 5;
                MPI_OK(MPI_Pack_external_size("external32", 0, t, &sz));
                MPI_OK(MPI_Pack_external("external32", NULL, 0, t, NULL, 5, &pos));
                CHECK(sz == 0 && pos == 5, "external32 of zero elements: size %ld, position %ld", (long)sz, (long)pos);
            }
            for (int i = nmade - 1; i >= 0; i--) MPI_Type_free(&made[i]);
        }
    }
    only_base = MPI_DATATYPE_NULL;
    /* (no mixed struct: Debian's MPICH 4.0.2 stops with SIGILL on one of int and double) */
    /* the shim's packer does a homogeneous one (it counts the bytes) */
    uint64_t (*packed)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "shim_packed_bytes");
    if (expect_shim() && packed) {
        MPI_Datatype v;
        MPI_OK(MPI_Type_vector(100, 2, 3, MPI_DOUBLE, &v));
        MPI_OK(MPI_Type_commit(&v));
        uint64_t before = packed();
        check_external(v, 2, 3001, system_external32_wrong ? 8 : 0);
        CHECK(packed() > before, "MPI_Pack_external of a vector of doubles did not run on the shim's packer");
        MPI_Type_free(&v);
    }
}

/* Point-to-point: a vector of doubles (n blocks of 3, stride 5) sent with the shim's
 * packer, received as the same type, as plain doubles, and as an indexed type with the
 * same signature; short messages and MPI_Get_count / MPI_Get_elements. */
static void check_p2p(void) {
    const int n = 12000; /* 3 * 12000 doubles = 288 KB: above the default threshold */
    MPI_Datatype vec, idx;
    MPI_Type_vector(n, 3, 5, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    int *bl = malloc(sizeof(int) * n), *dp = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) bl[i] = 3, dp[i] = 4 * i; /* a different layout, same signature */
    MPI_Type_indexed(n, bl, dp, MPI_DOUBLE, &idx);
    MPI_Type_commit(&idx);
    double *src = malloc(sizeof(double) * 5 * n), *dst = malloc(sizeof(double) * 11 * n);
    for (int i = 0; i < 5 * n; i++) src[i] = g_rank * 1e6 + i;
    int partner = g_rank ^ 1;
    if (partner >= g_size) partner = g_rank; /* odd rank count: the last talks to itself */
    for (int mode = 0; mode < 4; mode++) {
        MPI_Status st;
        for (int i = 0; i < 5 * n; i++) dst[i] = -1;
        int rcount = 1;
        MPI_Datatype rt = vec;
        if (mode == 1) rt = MPI_DOUBLE, rcount = 3 * n;
        if (mode == 2) rt = idx;
        if (mode == 3) rcount = 2; /* receiver posts room for 2 elements, gets 1 */
        MPI_OK(MPI_Sendrecv(src, 1, vec, partner, 40 + mode, dst, rcount, rt, partner, 40 + mode, MPI_COMM_WORLD, &st));
        double base = partner * 1e6;
        for (int k = 0; k < 3 * n; k++) {
            int s = (k / 3) * 5 + k % 3; /* k-th double of the sender's type map */
            int d = rt == MPI_DOUBLE ? k : rt == idx ? (k / 3) * 4 + k % 3 : s;
            CHECK(dst[d] == base + s, "p2p mode %d: element %d is %g, want %g", mode, k, dst[d], base + s);
        }
        if (rt != MPI_DOUBLE) {
            /* the holes stay untouched */
            int hole = rt == idx ? 3 : 3;
            CHECK(dst[hole] == -1, "p2p mode %d: hole written", mode);
        }
        int cnt;
        MPI_OK(MPI_Get_count(&st, rt, &cnt));
        CHECK(cnt == (rt == MPI_DOUBLE ? 3 * n : 1), "p2p mode %d: MPI_Get_count %d", mode, cnt);
        MPI_OK(MPI_Get_elements(&st, rt, &cnt));
        CHECK(cnt == 3 * n, "p2p mode %d: MPI_Get_elements %d", mode, cnt);
        CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 40 + mode, "p2p mode %d: status source %d tag %d", mode,
              st.MPI_SOURCE, st.MPI_TAG);
    }
    /* plain Send/Recv (even ranks send first) and the _c forms */
    MPI_Comm c; /* collective: every rank duplicates */
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (partner != g_rank) {
        MPI_Status st;
        for (int i = 0; i < 5 * n; i++) dst[i] = -1;
        if (g_rank % 2 == 0) {
            MPI_OK(MPI_Send(src, 1, vec, partner, 50, MPI_COMM_WORLD));
            MPI_OK(MPI_Recv_c(dst, 1, idx, partner, 51, MPI_COMM_WORLD, &st));
        } else {
            MPI_OK(MPI_Recv(dst, 1, idx, partner, 50, MPI_COMM_WORLD, &st));
            MPI_OK(MPI_Send_c(src, 1, vec, partner, 51, MPI_COMM_WORLD));
        }
        for (int k = 0; k < 3 * n; k++) {
            int s = (k / 3) * 5 + k % 3, d = (k / 3) * 4 + k % 3;
            CHECK(dst[d] == partner * 1e6 + s, "send/recv: element %d", k);
        }
        /* truncation is reported as the system MPI reports it */
        double *big = malloc(sizeof(double) * 10 * n);
        MPI_Datatype v2;
        MPI_Type_vector(2 * n, 3, 5, MPI_DOUBLE, &v2);
        MPI_Type_commit(&v2);
        for (int i = 0; i < 10 * n; i++) big[i] = i;
        int rc, cls;
        if (g_rank % 2 == 0) {
            MPI_OK(MPI_Send(big, 1, v2, partner, 52, c));
        } else {
            rc = MPI_Recv(dst, 1, vec, partner, 52, c, &st);
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "truncated receive returned class %d", cls);
        }
        MPI_Type_free(&v2);
        free(big);
    }
    MPI_Comm_free(&c);
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    free(bl), free(dp), free(src), free(dst);
}

/* The pair the point-to-point checks use: a vector of n blocks of 3 doubles with stride
 * 5, and an indexed type with the same signature (blocks of 3, stride 4). */
static void vec_and_indexed(int n, MPI_Datatype *vec, MPI_Datatype *idx) {
    MPI_Type_vector(n, 3, 5, MPI_DOUBLE, vec);
    MPI_Type_commit(vec);
    int *bl = malloc(sizeof(int) * n), *dp = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) bl[i] = 3, dp[i] = 4 * i;
    MPI_Type_indexed(n, bl, dp, MPI_DOUBLE, idx);
    MPI_Type_commit(idx);
    free(bl), free(dp);
}

/* Non-blocking and persistent point-to-point with derived types (the shim packs them
 * into its own requests): mixed with native requests in Waitall/Waitany/Testsome,
 * persistent requests restarted with new contents, a freed active send, a cancelled
 * receive, MPI_Request_get_status, and the _c and synchronous forms. */
static void check_nonblocking(void) {
    const int n = 12000;
    MPI_Datatype vec, idx;
    vec_and_indexed(n, &vec, &idx);
    double *src = malloc(sizeof(double) * 5 * n), *dst = malloc(sizeof(double) * 4 * n);
    double *flat = malloc(sizeof(double) * 3 * n);
    int partner = g_rank ^ 1;
    if (partner >= g_size) partner = g_rank;
    double pbase = partner * 1e6;
#define CHECK_IDX(off, what)                                                                      \
    for (int k = 0; k < 3 * n; k++) {                                                             \
        int s_ = (k / 3) * 5 + k % 3, d_ = (k / 3) * 4 + k % 3;                                   \
        CHECK(dst[d_] == pbase + (off) + s_, "%s: element %d is %g, want %g", what, k, dst[d_], \
              pbase + (off) + s_);                                                                \
    }                                                                                             \
    for (int k = 0; k < n; k++) CHECK(dst[4 * k + 3] == -1, "%s: hole %d written", what, k);
    for (int i = 0; i < 5 * n; i++) src[i] = g_rank * 1e6 + i;
    /* Isend/Irecv plus a native pair, completed by Waitall with statuses */
    {
        MPI_Request r[4];
        MPI_Status st[4];
        int a = g_rank, b = -1;
        for (int i = 0; i < 4 * n; i++) dst[i] = -1;
        MPI_OK(MPI_Irecv(dst, 1, idx, partner, 60, MPI_COMM_WORLD, &r[0]));
        MPI_OK(MPI_Irecv(&b, 1, MPI_INT, partner, 61, MPI_COMM_WORLD, &r[1]));
        MPI_OK(MPI_Isend(src, 1, vec, partner, 60, MPI_COMM_WORLD, &r[2]));
        MPI_OK(MPI_Isend(&a, 1, MPI_INT, partner, 61, MPI_COMM_WORLD, &r[3]));
        MPI_OK(MPI_Waitall(4, r, st));
        for (int i = 0; i < 4; i++) CHECK(r[i] == MPI_REQUEST_NULL, "Waitall left request %d", i);
        CHECK(b == partner, "native message in a mixed Waitall");
        CHECK_IDX(0, "Isend/Irecv");
        int cnt;
        MPI_OK(MPI_Get_count(&st[0], idx, &cnt));
        CHECK(cnt == 1, "Irecv: MPI_Get_count %d", cnt);
        MPI_OK(MPI_Get_elements(&st[0], idx, &cnt));
        CHECK(cnt == 3 * n, "Irecv: MPI_Get_elements %d", cnt);
        CHECK(st[0].MPI_SOURCE == partner && st[0].MPI_TAG == 60, "Irecv status source %d tag %d",
              st[0].MPI_SOURCE, st[0].MPI_TAG);
    }
    /* Issend_c received into plain doubles with MPI_ANY_SOURCE/ANY_TAG, Waitany + Testsome */
    {
        MPI_Request r[2];
        MPI_Status st;
        for (int i = 0; i < 3 * n; i++) flat[i] = -1;
        MPI_OK(MPI_Irecv_c(flat, 3 * n, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r[0]));
        MPI_OK(MPI_Issend_c(src, 1, vec, partner, 62, MPI_COMM_WORLD, &r[1]));
        int done = 0, idx_done[2], out;
        MPI_Status sts[2];
        while (done < 2) {
            if (done == 0) {
                int i;
                MPI_OK(MPI_Waitany(2, r, &i, &st));
                CHECK(i == 0 || i == 1, "Waitany index %d", i);
                if (i == 0) CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 62, "Waitany status");
                done++;
            } else {
                MPI_OK(MPI_Testsome(2, r, &out, idx_done, sts));
                if (out != MPI_UNDEFINED) done += out;
            }
        }
        for (int k = 0; k < 3 * n; k++) {
            int s_ = (k / 3) * 5 + k % 3;
            CHECK(flat[k] == pbase + s_, "Issend_c into doubles: element %d", k);
        }
    }
    /* persistent: three rounds with new contents; the receive side checks each */
    {
        MPI_Request r[2];
        MPI_OK(MPI_Recv_init(dst, 1, idx, partner, 63, MPI_COMM_WORLD, &r[0]));
        MPI_OK(MPI_Send_init_c(src, 1, vec, partner, 63, MPI_COMM_WORLD, &r[1]));
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < 5 * n; i++) src[i] = g_rank * 1e6 + i + round * 0.5;
            for (int i = 0; i < 4 * n; i++) dst[i] = -1;
            MPI_OK(MPI_Startall(2, r));
            /* the send buffer may change once started: the packed copy was taken */
            if (round == 1) {
                MPI_Status st;
                MPI_OK(MPI_Wait(&r[1], &st));
                int flag = 0;
                while (!flag) MPI_OK(MPI_Request_get_status(r[0], &flag, &st));
                CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 63, "Request_get_status status");
                MPI_OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
            } else {
                MPI_Status sts2[2];
                MPI_OK(MPI_Waitall(2, r, sts2));
            }
            CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL, "persistent requests freed by Wait");
            CHECK_IDX(round * 0.5, "persistent round");
            /* waiting on an inactive persistent request returns at once */
            MPI_Status est;
            MPI_OK(MPI_Wait(&r[0], &est));
            CHECK(est.MPI_TAG == MPI_ANY_TAG && est.MPI_SOURCE == MPI_ANY_SOURCE, "inactive request's status");
        }
        MPI_OK(MPI_Request_free(&r[0]));
        MPI_OK(MPI_Request_free(&r[1]));
    }
    /* a freed active send still arrives; a cancelled receive leaves the buffer alone */
    {
        MPI_Request r;
        for (int i = 0; i < 5 * n; i++) src[i] = g_rank * 1e6 + i;
        MPI_OK(MPI_Isend(src, 1, vec, partner, 64, MPI_COMM_WORLD, &r));
        MPI_OK(MPI_Request_free(&r));
        CHECK(r == MPI_REQUEST_NULL, "Request_free left the handle");
        for (int i = 0; i < 4 * n; i++) dst[i] = -1;
        MPI_OK(MPI_Recv(dst, 1, idx, partner, 64, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_IDX(0, "freed Isend");
        MPI_Status st;
        for (int i = 0; i < 4 * n; i++) dst[i] = -1;
        MPI_OK(MPI_Irecv(dst, 1, idx, partner, 65, MPI_COMM_WORLD, &r));
        MPI_OK(MPI_Cancel(&r));
        MPI_OK(MPI_Wait(&r, &st));
        int c;
        MPI_OK(MPI_Test_cancelled(&st, &c));
        CHECK(c, "receive not cancelled");
        CHECK(dst[0] == -1, "cancelled receive wrote the buffer");
    }
    /* the partner's Send_init/Recv_init must not have started before this: sync */
    MPI_Barrier(MPI_COMM_WORLD);
#undef CHECK_IDX
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    free(src), free(dst), free(flat);
}

/* The other point-to-point forms with a derived datatype (issue 8): Sendrecv_replace
 * (also with a collective outstanding, so the shim polls it), Isendrecv(_replace) (the
 * shim's: a receive and a send), buffered sends (Bsend, Ibsend, Bsend_init) into a buffer
 * sized by MPI_Pack_size, and matched receives (Mprobe/Mrecv, Improbe/Imrecv, and the
 * MPI_PROC_NULL message). Sent as a vector of doubles, received as an indexed type. */
static void check_other_p2p(void) {
    const int n = 12000;
    MPI_Datatype vec, idx;
    vec_and_indexed(n, &vec, &idx);
    double *src = malloc(sizeof(double) * 5 * n), *dst = malloc(sizeof(double) * 4 * n);
    int partner = g_rank ^ 1;
    if (partner >= g_size) partner = g_rank;
    double pbase = partner * 1e6;
    for (int i = 0; i < 5 * n; i++) src[i] = g_rank * 1e6 + i;
#define CHECK_DST(what)                                                                           \
    for (int k = 0; k < 3 * n; k++) {                                                             \
        int s_ = (k / 3) * 5 + k % 3, d_ = (k / 3) * 4 + k % 3;                                   \
        CHECK(dst[d_] == pbase + s_, "%s: element %d is %g, want %g", what, k, dst[d_], pbase + s_); \
    }                                                                                             \
    for (int k = 0; k < n; k++) CHECK(dst[4 * k + 3] == -1, "%s: hole %d written", what, k);
#define CLEAR_DST for (int i = 0; i < 4 * n; i++) dst[i] = -1
    /* a replaced buffer holds the partner's elements in the vector's blocks and its own
     * values in the holes */
#define CHECK_REPLACED(buf, what)                                                                 \
    for (int i = 0; i < 5 * n; i++) {                                                             \
        double want = (i % 5 < 3 ? pbase : g_rank * 1e6) + i;                                     \
        CHECK(buf[i] == want, "%s: element %d is %g, want %g", what, i, buf[i], want);            \
    }
    double *rep = malloc(sizeof(double) * 5 * n);
    for (int round = 0; round < 2; round++) {
        /* round 1: with a collective outstanding, the shim polls instead of blocking */
        MPI_Request coll = MPI_REQUEST_NULL;
        if (round == 1) MPI_OK(MPI_Ibarrier(MPI_COMM_WORLD, &coll));
        for (int i = 0; i < 5 * n; i++) rep[i] = g_rank * 1e6 + i;
        MPI_Status st;
        MPI_OK(MPI_Sendrecv_replace(rep, 1, vec, partner, 80, partner, 80, MPI_COMM_WORLD, &st));
        CHECK_REPLACED(rep, "Sendrecv_replace");
        CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 80, "Sendrecv_replace status: source %d tag %d round %d", st.MPI_SOURCE, st.MPI_TAG, round);
        int cnt;
        MPI_OK(MPI_Get_count(&st, vec, &cnt));
        CHECK(cnt == 1, "Sendrecv_replace: MPI_Get_count %d", cnt);
        /* a native (contiguous) Sendrecv and Sendrecv_replace, polled in round 1 */
        int a = g_rank, b = -1;
        MPI_OK(MPI_Sendrecv(&a, 1, MPI_INT, partner, 81, &b, 1, MPI_INT, partner, 81, MPI_COMM_WORLD, &st));
        CHECK(b == partner && st.MPI_TAG == 81, "Sendrecv of an int: %d", b);
        MPI_OK(MPI_Sendrecv_replace(&a, 1, MPI_INT, partner, 82, partner, 82, MPI_COMM_WORLD, &st));
        CHECK(a == partner, "Sendrecv_replace of an int: %d", a);
        /* to and from MPI_PROC_NULL: nothing arrives, the buffer stays */
        MPI_OK(MPI_Sendrecv_replace(rep, 1, vec, MPI_PROC_NULL, 83, MPI_PROC_NULL, 83, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "Sendrecv_replace from MPI_PROC_NULL: source %d", st.MPI_SOURCE);
        CHECK_REPLACED(rep, "Sendrecv_replace with MPI_PROC_NULL");
        if (round == 1) MPI_OK(MPI_Wait(&coll, MPI_STATUS_IGNORE));
    }
    /* Isendrecv and Isendrecv_replace (MPI-4.0), only through the shim (which makes them a
     * receive and a send): Debian's MPICH 4.0.2 completes its own MPI_Isendrecv on these
     * types with a wrong status (count 0, a stale tag) and corrupts the caller's stack (a
     * later local variable changed), and its MPI_Isendrecv_replace crashes (SIGSEGV in
     * MPIR_Err_create_code); Open MPI 4.1 has neither */
    if (expect_shim()) {
        MPI_Request r;
        MPI_Status st;
        CLEAR_DST;
        MPI_OK(MPI_Isendrecv(src, 1, vec, partner, 84, dst, 1, idx, partner, 84, MPI_COMM_WORLD, &r));
        MPI_OK(MPI_Wait(&r, &st));
        CHECK_DST("Isendrecv");
        int cnt;
        MPI_OK(MPI_Get_elements(&st, idx, &cnt));
        CHECK(cnt == 3 * n && st.MPI_SOURCE == partner && st.MPI_TAG == 84,
              "Isendrecv status: %d elements, source %d, tag %d", cnt, st.MPI_SOURCE, st.MPI_TAG);
        for (int i = 0; i < 5 * n; i++) rep[i] = g_rank * 1e6 + i;
        MPI_OK(MPI_Isendrecv_replace(rep, 1, vec, partner, 85, partner, 85, MPI_COMM_WORLD, &r));
        int flag = 0;
        while (!flag) MPI_OK(MPI_Test(&r, &flag, &st));
        CHECK_REPLACED(rep, "Isendrecv_replace");
        CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 85, "Isendrecv_replace status");
    }
    /* buffered sends: Bsend, Ibsend, and a persistent Bsend_init started twice */
    {
        int psz;
        MPI_OK(MPI_Pack_size(1, vec, MPI_COMM_WORLD, &psz));
        int bsz = 3 * (psz + MPI_BSEND_OVERHEAD);
        char *att = malloc(bsz);
        MPI_OK(MPI_Buffer_attach(att, bsz));
        MPI_Request r;
        MPI_OK(MPI_Bsend(src, 1, vec, partner, 86, MPI_COMM_WORLD));
        MPI_OK(MPI_Ibsend(src, 1, vec, partner, 87, MPI_COMM_WORLD, &r));
        CLEAR_DST;
        MPI_OK(MPI_Recv(dst, 1, idx, partner, 86, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_DST("Bsend");
        MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CLEAR_DST;
        MPI_OK(MPI_Recv(dst, 1, idx, partner, 87, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_DST("Ibsend");
        /* Open MPI 4.1.4's own persistent buffered send delivers wrong data (elements of
         * the wrong block, or zeros on a restart; contiguous types too, without the shim),
         * so it is tested on MPICH only */
#ifndef OPEN_MPI
        MPI_OK(MPI_Bsend_init(src, 1, vec, partner, 88, MPI_COMM_WORLD, &r));
        for (int round = 0; round < 2; round++) {
            MPI_OK(MPI_Start(&r));
            MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            CLEAR_DST;
            MPI_OK(MPI_Recv(dst, 1, idx, partner, 88, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_DST("Bsend_init");
        }
        MPI_OK(MPI_Request_free(&r));
#endif
        void *back;
        int back_sz;
        MPI_OK(MPI_Buffer_detach(&back, &back_sz));
        CHECK(back == att && back_sz == bsz, "Buffer_detach");
        free(att);
    }
    /* matched receives */
    {
        MPI_Request s, r;
        MPI_Message m;
        MPI_Status st;
        MPI_OK(MPI_Isend(src, 1, vec, partner, 89, MPI_COMM_WORLD, &s));
        MPI_OK(MPI_Mprobe(partner, 89, MPI_COMM_WORLD, &m, &st));
        int cnt;
        MPI_OK(MPI_Get_count(&st, idx, &cnt));
        CHECK(cnt == 1, "Mprobe: MPI_Get_count %d", cnt);
        CLEAR_DST;
        MPI_OK(MPI_Mrecv(dst, 1, idx, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL, "Mrecv left the message handle");
        CHECK_DST("Mrecv");
        MPI_OK(MPI_Get_elements(&st, idx, &cnt));
        CHECK(cnt == 3 * n && st.MPI_SOURCE == partner && st.MPI_TAG == 89, "Mrecv status: %d elements", cnt);
        MPI_OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Isend(src, 1, vec, partner, 90, MPI_COMM_WORLD, &s));
        int flag = 0;
        while (!flag) MPI_OK(MPI_Improbe(partner, 90, MPI_COMM_WORLD, &flag, &m, &st));
        CLEAR_DST;
        MPI_OK(MPI_Imrecv(dst, 1, idx, &m, &r));
        CHECK(m == MPI_MESSAGE_NULL, "Imrecv left the message handle");
        MPI_OK(MPI_Wait(&r, &st));
        CHECK_DST("Imrecv");
        CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 90, "Imrecv status");
        MPI_OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Mprobe(MPI_PROC_NULL, 91, MPI_COMM_WORLD, &m, &st));
        CHECK(m == MPI_MESSAGE_NO_PROC, "Mprobe of MPI_PROC_NULL");
        CLEAR_DST;
        MPI_OK(MPI_Mrecv(dst, 1, idx, &m, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && dst[0] == -1, "Mrecv of MPI_MESSAGE_NO_PROC");
    }
    MPI_Barrier(MPI_COMM_WORLD);
#undef CHECK_DST
#undef CLEAR_DST
#undef CHECK_REPLACED
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    free(src), free(dst), free(rep);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    const char *s = getenv("PACK_SEED");
    int ntypes = getenv("PACK_TYPES") ? atoi(getenv("PACK_TYPES")) : 60;
    rng_state = (s ? strtoull(s, NULL, 10) : 12345) * 1000003ULL + (uint64_t)g_rank * 7919ULL;
    const int counts[] = {0, 1, 2, 7};
    for (int it = 0; it < ntypes; it++) {
        nmade = 0;
        MPI_Datatype t = gen(rnd_in(1, 4));
        int predefined = nmade == 0;
        if (predefined) continue;
        MPI_OK(MPI_Type_commit(&t));
        int tsz;
        MPI_Type_size(t, &tsz);
        /* size 0: Debian MPICH 4.0.2 PMPI_Unpack divides by zero (SIGFPE) on some */
        if (tsz == 0 || tsz > (1 << 20) || extent_of(t) > (1 << 22)) { /* keep the test quick */
            for (int i = nmade - 1; i >= 0; i--) MPI_Type_free(&made[i]);
            continue;
        }
        for (int c = 0; c < 4; c++) check_type(t, counts[c], it);
        /* a second pass hits the cached layout */
        check_type(t, 3, it);
        for (int i = nmade - 1; i >= 0; i--) MPI_Type_free(&made[i]);
    }
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int vlen;
    MPI_Get_library_version(version, &vlen);
    system_external32_wrong = strncmp(version, "Intel(R) MPI", 12) == 0;
    check_externals(ntypes / 6 + 1);
    check_p2p();
    check_nonblocking();
    check_other_p2p();
    const char *names[] = {"MPI_Pack", "MPI_Unpack", "MPI_Pack_c", "MPI_Unpack_c", "MPI_Sendrecv",
                           "MPI_Isend", "MPI_Irecv", "MPI_Send_init_c", "MPI_Recv_init", "MPI_Sendrecv_replace",
                           "MPI_Bsend", "MPI_Ibsend", "MPI_Mrecv", "MPI_Imrecv",
                           "MPI_Pack_external", "MPI_Unpack_external_c"};
    check_intercepted(names, 16);
    uint64_t (*packed)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "shim_packed_bytes");
    if (expect_shim()) {
        CHECK(packed && packed() > 0, "the shim's packer never ran");
    }
    test_pass("pack_types: shim packer equals the system MPI's, point-to-point with derived types");
    MPI_Finalize();
    return 0;
}
