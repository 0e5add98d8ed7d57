//! Layer: core. May use: platform.
//!
//! Datatype helpers shared by the hooks and the schedule engine: size, extents, density,
//! scratch sizing by true extent (MPI-4.0 §5.1.8), and typed copies between buffers of
//! matching type signatures.

use core::ffi::{c_int, c_void};
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use crate::platform::abi::*;
use crate::platform::mpi::{comm as mpi_comm, dtype as mpi_dtype};

/// What the engine needs to know about a datatype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// Bytes of data in one element (the type signature's size).
    pub size: i64,
    pub lb: i64,
    pub extent: i64,
    pub true_lb: i64,
    pub true_extent: i64,
    /// The type map is one run of `size` bytes at `lb`, in order, and elements follow each
    /// other without a gap (see [`info`]).
    pub contiguous: bool,
}

impl TypeInfo {
    /// `count` elements occupy `count * size` contiguous bytes starting at `lb`, in type
    /// map order, so a typed copy is a `memcpy`.
    pub fn dense(&self) -> bool {
        self.contiguous
    }

    /// Bytes a buffer of `count` elements spans (MPI-4.0 §5.1.8: allocate
    /// `true_extent + (count - 1) * extent`).
    pub fn span(&self, count: i64) -> i64 {
        if count <= 0 {
            0
        } else {
            self.true_extent + (count - 1) * self.extent
        }
    }
}

/// Info about predefined types never changes; derived types' handles can be freed and
/// reused, so they are asked every time.
///
/// Contiguity is decided from the flattened type map, never from size and extent alone: a
/// type whose size equals its extent may still reorder its elements (a transpose built as
/// an hvector of a column vector, an indexed type listing its blocks backwards), and a
/// `memcpy` of it would deliver them in the wrong order (MPI-4.0 §5.1.2: the type map's
/// order is the order of the data in a message).
static PREDEFINED: LazyLock<RwLock<HashMap<MPI_Datatype, TypeInfo>>> =
    LazyLock::new(Default::default);

/// Size, extent and true extent of `dt`, or the MPI error code for an invalid handle.
pub fn info(dt: MPI_Datatype) -> Result<TypeInfo, c_int> {
    if let Some(s) = builtin_size(dt) {
        let s = s as i64;
        return Ok(TypeInfo {
            size: s,
            lb: 0,
            extent: s,
            true_lb: 0,
            true_extent: s,
            contiguous: true,
        });
    }
    let predefined = is_predefined_datatype(dt);
    if !predefined && crate::core::retain::is_freed_type(dt) {
        return Err(MPI_ERR_TYPE);
    }
    if predefined {
        if let Some(i) = PREDEFINED
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&dt)
        {
            return Ok(*i);
        }
    }
    // an invalid handle yields an error code
    let size = mpi_dtype::size_x(dt).map_err(|e| e.code())?;
    let (lb, ext) = mpi_dtype::get_extent_x(dt).map_err(|e| e.code())?;
    let (tlb, text) = mpi_dtype::get_true_extent_x(dt).map_err(|e| e.code())?;
    let same_span = size == ext && text == ext && tlb == lb;
    // named types (the pair types) never reorder: the span decides; a derived type is
    // contiguous only if its flattened map is one run at the lower bound, or empty (a
    // zero-byte copy is trivially in order)
    let contiguous = same_span
        && (predefined
            || size == 0
            || flat::get(dt).is_ok_and(|f| f.contiguous == Some(lb) && f.size == size));
    let i = TypeInfo {
        size,
        lb,
        extent: ext,
        true_lb: tlb,
        true_extent: text,
        contiguous,
    };
    if predefined {
        PREDEFINED
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dt, i);
    }
    Ok(i)
}

/// Whether `buf` is an invalid NULL buffer for `count` elements of `dt`: NULL is
/// `MPI_BOTTOM`, valid only for a type whose data lies at absolute addresses (MPICH's rule,
/// `MPIR_ERRTEST_USERBUFFER`: a nonzero true lower bound).
pub fn null_buffer(buf: *const c_void, count: i64, dt: MPI_Datatype) -> bool {
    buf.is_null()
        && count > 0
        && (is_predefined_datatype(dt) || info(dt).is_ok_and(|i| i.true_lb == 0 && i.size > 0))
}

/// Size in bytes of one element of `dt`, or `None` if the MPI library rejects the handle.
pub fn size_of(dt: MPI_Datatype) -> Option<usize> {
    info(dt).ok().map(|i| i.size.max(0) as usize)
}

/// Whether a datatype is usable for communication: a valid handle, committed if derived.
/// Returns the error class to raise otherwise.
pub fn check_usable(dt: MPI_Datatype) -> Result<TypeInfo, c_int> {
    if dt == MPI_DATATYPE_NULL() {
        return Err(MPI_ERR_TYPE);
    }
    let i = info(dt).map_err(|_| MPI_ERR_TYPE)?;
    if !is_predefined_datatype(dt) && !is_committed(dt) {
        return Err(MPI_ERR_TYPE);
    }
    Ok(i)
}

/// Whether a derived datatype has been committed: MPICH keeps no public flag, but packing
/// an uncommitted type is an error, so ask `PMPI_Pack_size` (which checks commitment).
/// Asked on the real world, whose handler only records: `MPI_COMM_SELF` may carry the
/// program's fatal handler, and the error belongs on the program's communicator.
fn is_committed(dt: MPI_Datatype) -> bool {
    mpi_dtype::pack_size(1, dt, MPI_COMM_WORLD()).is_ok()
}

/// Copies `scount` elements of `sdt` at `src` into `dcount` elements of `ddt` at `dst`;
/// the type signatures must match (MPI-4.0 §3.3.1) and the regions must not overlap.
///
/// # Safety
/// Both buffers must be valid for their counts and datatypes.
pub unsafe fn copy(
    src: *const c_void,
    scount: i64,
    sdt: MPI_Datatype,
    dst: *mut c_void,
    dcount: i64,
    ddt: MPI_Datatype,
) -> c_int {
    if scount <= 0 {
        return MPI_SUCCESS;
    }
    let (si, di) = match (info(sdt), info(ddt)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let bytes = scount * si.size;
    if bytes == 0 {
        // nothing to move (an empty type map); the buffers may be MPI_BOTTOM, which the
        // system MPI's pack would reject
        return MPI_SUCCESS;
    }
    // more data than the destination holds: what fits is copied and the copy reports a
    // truncation, as a receive does (MPI-4.0 §3.2.2)
    let done = if bytes > dcount.max(0) * di.size {
        MPI_ERR_TRUNCATE
    } else {
        MPI_SUCCESS
    };
    if dcount <= 0 {
        return done;
    }
    if si.dense() && di.dense() && bytes == dcount * di.size {
        // SAFETY: dense layouts: `bytes` contiguous bytes start at lb in both buffers.
        unsafe {
            let s = (src as *const u8).wrapping_offset(si.lb as isize);
            let d = (dst as *mut u8).wrapping_offset(di.lb as isize);
            core::ptr::copy(s, d, bytes as usize);
        }
        return MPI_SUCCESS;
    }
    // Flattened layouts: straight from one layout into the other when either side is
    // dense, else through a packed buffer.
    if let (Ok(sf), Ok(df)) = (flat::get(sdt), flat::get(ddt)) {
        let (s, d) = (src as *mut u8, dst as *mut u8);
        let n = bytes.min(dcount * df.size);
        // SAFETY: the caller's buffers for their counts and datatypes.
        unsafe {
            if si.dense() {
                pack::run_bytes(
                    &df,
                    dcount,
                    d,
                    s.wrapping_offset(si.lb as isize),
                    n,
                    pack::Dir::Unpack,
                );
            } else if di.dense() {
                pack::run_bytes(
                    &sf,
                    scount,
                    s,
                    d.wrapping_offset(di.lb as isize),
                    n,
                    pack::Dir::Pack,
                );
            } else {
                let mut tmp = vec![0u8; n as usize];
                pack::run_bytes(&sf, scount, s, tmp.as_mut_ptr(), n, pack::Dir::Pack);
                pack::run_bytes(&df, dcount, d, tmp.as_mut_ptr(), n, pack::Dir::Unpack);
            }
        }
        return done;
    }
    // Types the engine does not decode: the system MPI packs and unpacks (on the real
    // world, whose handler only records; see `is_committed`).
    let packed_size = match mpi_dtype::pack_size_c(scount, sdt, MPI_COMM_WORLD()) {
        Ok(n) => n,
        Err(e) => return e.code(),
    };
    let mut tmp = vec![0u8; packed_size.max(1) as usize];
    let mut pos: MPI_Count = 0;
    // SAFETY: buffers per the caller's contract; `tmp` holds the packed size (its first
    // `packed_size` bytes are the output buffer, as the packing was asked to fill).
    let packed = unsafe {
        mpi_dtype::pack_c(
            src,
            scount,
            sdt,
            &mut tmp[..packed_size.max(0) as usize],
            &mut pos,
            MPI_COMM_WORLD(),
        )
    };
    if let Err(e) = packed {
        return e.code();
    }
    let mut upos: MPI_Count = 0;
    // SAFETY: as above; the input is the `pos` bytes packed.
    let unpacked = unsafe {
        mpi_dtype::unpack_c(
            &tmp[..pos.clamp(0, tmp.len() as MPI_Count) as usize],
            &mut upos,
            dst,
            dcount,
            ddt,
            MPI_COMM_WORLD(),
        )
    };
    match unpacked {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e.code(),
    }
}

/// One block of a composite message: `count` elements of `dt` at byte offset `off` from
/// the message's base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub off: isize,
    pub count: i64,
    pub dt: MPI_Datatype,
}

/// Builds and commits one struct datatype per composite message of a schedule (blocks at
/// byte displacements from the message's base).
pub fn struct_types(composites: &[Vec<Part>]) -> Result<Vec<MPI_Datatype>, c_int> {
    let mut out = Vec::with_capacity(composites.len());
    for parts in composites {
        let lens: Vec<MPI_Count> = parts.iter().map(|p| p.count).collect();
        let displs: Vec<MPI_Count> = parts.iter().map(|p| p.off as MPI_Count).collect();
        let types: Vec<MPI_Datatype> = parts.iter().map(|p| p.dt).collect();
        // three arrays of parts.len() entries
        let made = mpi_dtype::create_struct_c(&lens, &displs, &types).and_then(|mut t| {
            if let Err(e) = mpi_dtype::commit(&mut t) {
                // ours, never used
                let _ = mpi_dtype::free(&mut t);
                return Err(e);
            }
            Ok(t)
        });
        let t = match made {
            Ok(t) => {
                // the library may give the shim a slot the program freed: the value is
                // valid again (`retain`'s records of freed handles)
                crate::core::retain::type_handed_out(t, true);
                t
            }
            Err(e) => {
                free_types(&out);
                return Err(e.code());
            }
        };
        out.push(t);
    }
    Ok(out)
}

/// Frees datatypes the shim created, unless MPI is already finalized (then the library
/// has released them). Last created first: a library that keeps its free handles on a
/// stack (MPICH) then has them in the order it had before they were created, and the
/// program's next types get the handles they would get without the shim.
pub fn free_types(types: &[MPI_Datatype]) {
    // MPI_Finalized may be called at any time
    if mpi_comm::finalized().unwrap_or(false) {
        return;
    }
    for &t in types.iter().rev() {
        let mut t = t;
        // a datatype this module created and nobody else frees
        let _ = mpi_dtype::free(&mut t);
    }
}

pub mod bufpool;
pub mod flat;
pub mod p2p;
pub mod pack;
pub mod pool;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mpi::fake::{self, Call};

    /// Derived datatype handles (MPICH's derived kind) the fake describes.
    const D: i64 = 0x8c00_5001u32 as i32 as i64;
    const T1: i64 = 0x8c00_5011u32 as i32 as i64;
    const T2: i64 = 0x8c00_5012u32 as i32 as i64;
    const CODE: c_int = 0x0004_2a03;

    /// A derived type of 8 bytes in an extent of 16 (true extent 12): never contiguous,
    /// so no layout is decoded. `custom` answers first.
    fn derived(
        mut custom: impl FnMut(&Call) -> Option<Result<Vec<i64>, c_int>> + 'static,
    ) -> fake::Guard {
        fake::install(move |c| {
            if let Some(r) = custom(c) {
                return r;
            }
            Ok(match c.name {
                "type_size_x" => vec![8],
                "type_get_extent_x" => vec![0, 16],
                "type_get_true_extent_x" => vec![0, 12],
                "finalized" => vec![0],
                // the layout is not decoded: the system MPI packs
                "type_get_envelope_c" => return Err(CODE),
                "type_create_keyval" => return Err(CODE),
                _ => vec![],
            })
        })
    }

    fn args_of(name: &str) -> Vec<Vec<i64>> {
        fake::calls()
            .into_iter()
            .filter(|c| c.name == name)
            .map(|c| c.args)
            .collect()
    }

    #[test]
    fn info_of_a_derived_type_asks_the_library_and_gives_back_its_codes() {
        let _g = derived(|_| None);
        let i = info(D as MPI_Datatype).unwrap();
        assert_eq!(
            (i.size, i.lb, i.extent, i.true_lb, i.true_extent),
            (8, 0, 16, 0, 12)
        );
        assert!(!i.dense());
        // MPI-4.0 §5.1.8: a buffer of 3 spans the true extent and two extents
        assert_eq!(i.span(3), 44);
        assert_eq!(
            fake::names(),
            ["type_size_x", "type_get_extent_x", "type_get_true_extent_x"]
        );
        // the first failing query's code comes back, and the queries stop there
        let calls = ["type_size_x", "type_get_extent_x", "type_get_true_extent_x"];
        for (k, failing) in calls.into_iter().enumerate() {
            let _g = derived(move |c| (c.name == failing).then_some(Err(CODE)));
            assert_eq!(info(D as MPI_Datatype), Err(CODE));
            assert_eq!(fake::names(), calls[..=k]);
        }
        // predefined types need no query
        let _g = derived(|_| None);
        assert_eq!(info(MPI_INT()).unwrap().size, 4);
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn a_derived_type_is_usable_once_the_library_packs_it() {
        // (pack size answer) -> usable
        for (answer, usable) in [(Ok(vec![8]), true), (Err(CODE), false)] {
            let _g = derived(move |c| (c.name == "pack_size").then(|| answer.clone()));
            let r = check_usable(D as MPI_Datatype);
            assert_eq!(r.is_ok(), usable);
            if !usable {
                assert_eq!(r, Err(MPI_ERR_TYPE));
            }
            // asked on the real world, for one element
            assert_eq!(args_of("pack_size"), [vec![1, D, MPI_COMM_WORLD() as i64]]);
        }
        let _g = derived(|_| None);
        assert_eq!(check_usable(MPI_DATATYPE_NULL()), Err(MPI_ERR_TYPE));
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn struct_types_are_committed_and_freed_again_when_one_fails() {
        let parts = |dt: MPI_Datatype| {
            vec![
                Part {
                    off: 0,
                    count: 2,
                    dt,
                },
                Part {
                    off: 64,
                    count: 1,
                    dt,
                },
            ]
        };
        let composites = vec![parts(MPI_INT()), parts(MPI_DOUBLE()), parts(MPI_INT())];
        // the third creation fails
        let mut made = vec![T1, T2].into_iter();
        let _g = derived(move |c| {
            (c.name == "type_create_struct_c").then(|| made.next().map(|t| vec![t]).ok_or(CODE))
        });
        assert_eq!(
            struct_types(&composites[..2]),
            Ok(vec![T1 as MPI_Datatype, T2 as MPI_Datatype])
        );
        assert_eq!(
            args_of("type_create_struct_c"),
            [vec![2, 2, 2], vec![2, 2, 2]]
        );
        assert_eq!(args_of("type_commit"), [vec![T1], vec![T2]]);
        assert!(args_of("type_free").is_empty());
        drop(_g);
        let mut made = vec![T1, T2].into_iter();
        let _g = derived(move |c| {
            (c.name == "type_create_struct_c").then(|| made.next().map(|t| vec![t]).ok_or(CODE))
        });
        assert_eq!(struct_types(&composites), Err(CODE));
        // the types made before the failure are freed, the last made first
        assert_eq!(args_of("type_free"), [vec![T2], vec![T1]]);
        // a failed commit frees the types made before it too
        drop(_g);
        // the second commit fails
        let mut commits = 0;
        let _g = derived(move |c| match c.name {
            "type_create_struct_c" => Some(Ok(vec![T1])),
            "type_commit" => {
                commits += 1;
                Some(if commits == 2 { Err(CODE) } else { Ok(vec![]) })
            }
            _ => None,
        });
        assert_eq!(struct_types(&composites[..2]), Err(CODE));
        // the type whose commit failed, then the one made before it
        assert_eq!(args_of("type_free"), [vec![T1], vec![T1]]);
    }

    #[test]
    fn types_are_not_freed_after_finalize() {
        for (finalized, frees) in [(false, 2), (true, 0)] {
            let _g = derived(move |c| (c.name == "finalized").then(|| Ok(vec![finalized as i64])));
            free_types(&[T1 as MPI_Datatype, T2 as MPI_Datatype]);
            assert_eq!(args_of("type_free").len(), frees);
        }
    }

    #[test]
    fn types_the_engine_does_not_decode_are_copied_by_pack_and_unpack() {
        let src = [0u8; 64];
        let mut dst = [0u8; 64];
        let (s, d) = (src.as_ptr() as i64, dst.as_mut_ptr() as i64);
        // (failing call) -> the copy's result: that call's code, or success
        for failing in ["", "pack_size_c", "pack_c", "unpack_c"] {
            let _g = derived(move |c| match c.name {
                n if n == failing => Some(Err(CODE)),
                "pack_size_c" => Some(Ok(vec![24])),
                // the library packed 16 of the 24 bytes it asked for
                "pack_c" => Some(Ok(vec![16])),
                "unpack_c" => Some(Ok(vec![16])),
                _ => None,
            });
            // SAFETY: the fake touches no buffer.
            let rc = unsafe {
                copy(
                    src.as_ptr().cast(),
                    2,
                    D as MPI_Datatype,
                    dst.as_mut_ptr().cast(),
                    3,
                    D as MPI_Datatype,
                )
            };
            assert_eq!(
                rc,
                if failing.is_empty() {
                    MPI_SUCCESS
                } else {
                    CODE
                },
                "{failing}"
            );
            let world = MPI_COMM_WORLD() as i64;
            assert_eq!(args_of("pack_size_c"), [vec![2, D, world]]);
            let packs = args_of("pack_c");
            let unpacks = args_of("unpack_c");
            match failing {
                "pack_size_c" => assert!(packs.is_empty()),
                "pack_c" => assert!(unpacks.is_empty()),
                _ => {
                    // packed into a buffer of the packed size, from position 0; unpacked
                    // from exactly the bytes packed
                    assert_eq!(packs, [vec![s, 2, D, 24, 0, world]]);
                    assert_eq!(unpacks, [vec![16, 0, d, 3, D, world]]);
                }
            }
        }
    }
}
