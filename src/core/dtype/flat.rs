//! Layer: core. May use: platform.
//!
//! Flattened datatypes: any MPI datatype (classic or large-count constructors) decoded once through
//! `MPI_Type_get_envelope`/`MPI_Type_get_contents` (MPI-4.0 §5.1.13) into a small tree of
//! byte runs and loops, so a vector of a billion blocks is one loop node, not a billion runs.
//!
//! The tree of one element: `Run` (contiguous bytes at an offset), `Loop` (`count` copies of
//! a body, the k-th displaced by `k * stride`) and `Seq` (parts one after another in the
//! packed stream). Offsets are type-map displacements, i.e. relative to the buffer address
//! the application passes. Every node knows how many packed bytes it produces, so a packer
//! can start anywhere in the packed stream (parallel packing splits by bytes).
//!
//! Cache: the flattened form of a derived type is kept in an attribute of that type (a
//! keyval with a delete callback), so MPI itself drops it when the type is really
//! destroyed (`MPI_Type_free` and the last reference gone), whichever path frees it.
//! Predefined types are contiguous fast paths and never decoded.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::platform::abi::*;
use crate::platform::mpi::dtype as mpi_dtype;

/// One element's layout (see the module comment).
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Run {
        off: i64,
        len: i64,
    },
    Loop {
        off: i64,
        count: i64,
        stride: i64,
        body: Arc<Node>,
        /// Packed bytes of one iteration (`body.size()`).
        bsize: i64,
    },
    Seq {
        parts: Vec<Node>,
        /// `ends[i]`: packed bytes of parts 0..=i.
        ends: Vec<i64>,
    },
    /// A sequence of plain runs (indexed and struct types), stored compactly: run `i`
    /// starts at `offs[i]` and packs `ends[i] - ends[i - 1]` bytes. Walking 16 bytes per
    /// run instead of a full node is what keeps many small blocks fast.
    Runs {
        offs: Vec<i64>,
        ends: Vec<i64>,
    },
}

impl Node {
    /// Packed bytes this node produces.
    pub fn size(&self) -> i64 {
        match self {
            Node::Run { len, .. } => *len,
            Node::Loop { count, bsize, .. } => count * bsize,
            Node::Seq { ends, .. } | Node::Runs { ends, .. } => ends.last().copied().unwrap_or(0),
        }
    }

    /// The same layout displaced by `d` bytes.
    pub fn shifted(&self, d: i64) -> Node {
        if d == 0 {
            return self.clone();
        }
        match self {
            Node::Run { off, len } => Node::Run {
                off: off + d,
                len: *len,
            },
            Node::Loop {
                off,
                count,
                stride,
                body,
                bsize,
            } => Node::Loop {
                off: off + d,
                count: *count,
                stride: *stride,
                body: body.clone(),
                bsize: *bsize,
            },
            Node::Seq { parts, ends } => Node::Seq {
                parts: parts.iter().map(|p| p.shifted(d)).collect(),
                ends: ends.clone(),
            },
            Node::Runs { offs, ends } => Node::Runs {
                offs: offs.iter().map(|o| o + d).collect(),
                ends: ends.clone(),
            },
        }
    }

    /// Contiguous runs of packed bytes in one copy of this node (runs that touch across
    /// a loop's iterations were already merged by [`repeat`]; saturating).
    pub fn runs_count(&self) -> i64 {
        match self {
            Node::Run { .. } => 1,
            Node::Loop { count, body, .. } => count.saturating_mul(body.runs_count()),
            Node::Seq { parts, .. } => parts
                .iter()
                .fold(0i64, |a, p| a.saturating_add(p.runs_count())),
            Node::Runs { offs, .. } => offs.len() as i64,
        }
    }

    /// Number of nodes (for tests and the size guard).
    pub fn nodes(&self) -> usize {
        match self {
            Node::Run { .. } => 1,
            Node::Loop { body, .. } => 1 + body.nodes(),
            Node::Seq { parts, .. } => 1 + parts.iter().map(Node::nodes).sum::<usize>(),
            Node::Runs { offs, .. } => 1 + offs.len(),
        }
    }

    /// The runs of a `Runs` node as (offset, length) pairs.
    pub fn runs(offs: &[i64], ends: &[i64]) -> impl Iterator<Item = (i64, i64)> {
        let starts = core::iter::once(0).chain(ends.iter().copied());
        offs.iter()
            .zip(ends.iter().zip(starts))
            .map(|(&o, (&e, s))| (o, e - s))
    }
}

/// `count` copies of `body`, `stride` bytes apart, simplified: a single copy is the body
/// itself, and copies of a run that touch each other are one longer run.
pub fn repeat(off: i64, count: i64, stride: i64, body: Node) -> Node {
    if count <= 0 || body.size() == 0 {
        return empty();
    }
    if count == 1 {
        return body.shifted(off);
    }
    if let Node::Run { off: o, len } = body {
        if len == stride {
            return Node::Run {
                off: off + o,
                len: len * count,
            };
        }
    }
    let bsize = body.size();
    Node::Loop {
        off,
        count,
        stride,
        body: Arc::new(body),
        bsize,
    }
}

/// Parts in packed order, simplified: empty parts dropped, touching runs merged, nested
/// sequences inlined, a single part returned as itself.
pub fn seq(parts: Vec<Node>) -> Node {
    let mut out: Vec<Node> = Vec::with_capacity(parts.len());
    let push = |p: Node, out: &mut Vec<Node>| {
        if p.size() == 0 {
            return;
        }
        if let (Some(Node::Run { off, len }), Node::Run { off: o2, len: l2 }) = (out.last_mut(), &p)
        {
            if *off + *len == *o2 {
                *len += l2;
                return;
            }
        }
        out.push(p);
    };
    for p in parts {
        match p {
            Node::Seq { parts: inner, .. } => {
                for q in inner {
                    push(q, &mut out);
                }
            }
            Node::Runs { offs, ends } => {
                for (off, len) in Node::runs(&offs, &ends) {
                    push(Node::Run { off, len }, &mut out);
                }
            }
            p => push(p, &mut out),
        }
    }
    match out.len() {
        0 => empty(),
        1 => out.pop().unwrap(),
        _ => {
            let mut acc = 0;
            let ends = out
                .iter()
                .map(|p| {
                    acc += p.size();
                    acc
                })
                .collect();
            if out.iter().all(|p| matches!(p, Node::Run { .. })) {
                let offs = out
                    .iter()
                    .map(|p| match p {
                        Node::Run { off, .. } => *off,
                        _ => unreachable!("checked above"),
                    })
                    .collect();
                return Node::Runs { offs, ends };
            }
            Node::Seq { parts: out, ends }
        }
    }
}

pub fn empty() -> Node {
    Node::Seq {
        parts: Vec::new(),
        ends: Vec::new(),
    }
}

/// A flattened datatype: one element's layout plus the extent that separates elements.
#[derive(Debug)]
pub struct Flat {
    pub node: Arc<Node>,
    /// Packed bytes per element (the type size).
    pub size: i64,
    pub extent: i64,
    /// The whole element is one run starting at its lower bound with nothing between
    /// elements: packing is a single copy.
    pub contiguous: Option<i64>,
    /// Not decoded (see `Opaque`): cached too, so a rejected type is not decoded again.
    pub opaque: bool,
    /// Contiguous runs per element (at least 1 for a non-empty type).
    pub runs: i64,
    /// The predefined type all basic elements are (`element`), found on first use.
    element: OnceLock<Option<Dt>>,
}

impl Flat {
    pub(crate) fn new(node: Node, extent: i64) -> Flat {
        let size = node.size();
        let contiguous = match &node {
            Node::Run { off, len } if *len == extent => Some(*off),
            _ => None,
        };
        let runs = node.runs_count().max(1);
        Flat {
            node: Arc::new(node),
            size,
            extent,
            contiguous,
            opaque: false,
            runs,
            element: OnceLock::new(),
        }
    }

    /// The predefined type every basic element of `dt` (the type this layout is of) is
    /// (see [`element_type`]), walked once per cached layout rather than on every call.
    pub fn element(&self, dt: MPI_Datatype) -> Option<Dt> {
        *self
            .element
            .get_or_init(|| element_type(dt).ok().flatten().and_then(Dt::of))
    }

    /// Packed bytes per contiguous run, on average.
    pub fn mean_run(&self) -> i64 {
        self.size / self.runs
    }

    /// The layout of `count` elements.
    pub fn of_count(&self, count: i64) -> Node {
        // shares the element's tree (no copy: indexed types can have many parts)
        Node::Loop {
            off: 0,
            count,
            stride: self.extent,
            body: self.node.clone(),
            bsize: self.size,
        }
    }
}

/// Why a type was not flattened: the caller then uses the system MPI's own packing.
#[derive(Debug, PartialEq, Eq)]
pub enum Opaque {
    /// Constructed with large counts (`_c` constructors) or an unknown combiner.
    Unsupported(c_int),
    /// The tree would be too large to be worth it (e.g. a huge hindexed type).
    TooLarge,
    /// The MPI library rejected the handle.
    Invalid(c_int),
    /// Rejected before (the verdict is cached with the type).
    Cached,
}

/// Trees larger than this are left to the system MPI (decoding cost, memory).
const MAX_NODES: usize = 1 << 18;

/// The layout of `dt`, decoded or from its attribute.
pub fn get(dt: MPI_Datatype) -> Result<Arc<Flat>, Opaque> {
    if let Some(s) = builtin_size(dt) {
        return Ok(Arc::new(Flat::new(
            Node::Run {
                off: 0,
                len: s as i64,
            },
            s as i64,
        )));
    }
    if is_predefined_datatype(dt) {
        let (node, _) = named(dt)?;
        let (_, ext) = extent(dt)?;
        return Ok(Arc::new(Flat::new(node, ext)));
    }
    if crate::core::retain::is_freed_type(dt) {
        // decoding a freed handle would crash in the system MPI
        return Err(Opaque::Invalid(MPI_ERR_TYPE));
    }
    if let Some(f) = cached(dt) {
        return if f.opaque { Err(Opaque::Cached) } else { Ok(f) };
    }
    let (_, ext) = extent(dt)?;
    let decoded = decode(dt, 0).and_then(|n| {
        if n.nodes() > MAX_NODES {
            Err(Opaque::TooLarge)
        } else {
            Ok(n)
        }
    });
    match decoded {
        Ok(node) => {
            let f = Arc::new(Flat::new(node, ext));
            store(dt, &f);
            Ok(f)
        }
        Err(Opaque::Invalid(rc)) => Err(Opaque::Invalid(rc)),
        Err(e) => {
            let mut f = Flat::new(empty(), ext);
            f.opaque = true;
            store(dt, &Arc::new(f));
            Err(e)
        }
    }
}

fn extent(dt: MPI_Datatype) -> Result<(i64, i64), Opaque> {
    mpi_dtype::get_extent_x(dt).map_err(|e| Opaque::Invalid(e.code()))
}

fn size(dt: MPI_Datatype) -> Result<i64, Opaque> {
    mpi_dtype::size_x(dt).map_err(|e| Opaque::Invalid(e.code()))
}

/// Named types: dense ones are one run; the pair types of MINLOC/MAXLOC are a value and
/// an int at the int's alignment (`struct { T v; int i; }`); others are not decoded.
fn named(dt: MPI_Datatype) -> Result<(Node, i64), Opaque> {
    let s = size(dt)?;
    let (lb, ext) = extent(dt)?;
    if lb == 0 && s == ext {
        return Ok((Node::Run { off: 0, len: s }, ext));
    }
    if is_pair_type(dt) {
        let v = s - 4;
        let at = (v + 3) / 4 * 4;
        return Ok((
            seq(vec![
                Node::Run { off: 0, len: v },
                Node::Run { off: at, len: 4 },
            ]),
            ext,
        ));
    }
    Err(Opaque::Unsupported(MPI_COMBINER_NAMED))
}

/// A derived datatype's constructor arguments in the layout of the classic (`int`/`MPI_Aint`)
/// constructors, whichever constructor built it; frees the datatypes
/// `MPI_Type_get_contents` handed out (MPI-4.0 §5.1.13: they are new references the caller
/// must free).
struct Contents {
    ints: Vec<i64>,
    addrs: Vec<i64>,
    types: Vec<MPI_Datatype>,
}

/// The combiner of `dt` and, unless it is `MPI_COMBINER_NAMED`, its contents. A type built
/// by a large-count (`_c`) constructor keeps its counts, displacements and strides in the
/// large-count array (MPI-4.0 §5.1.13, Table 5.1); they are moved to where the classic
/// constructor keeps them, so one decoder reads both.
fn contents(dt: MPI_Datatype) -> Result<(c_int, Contents), c_int> {
    let (ni, na, nl, nd, comb) = mpi_dtype::get_envelope_c(dt).map_err(|e| e.code())?;
    let mut c = Contents {
        ints: Vec::new(),
        addrs: Vec::new(),
        types: Vec::new(),
    };
    if comb == MPI_COMBINER_NAMED {
        return Ok((comb, c));
    }
    let mut ints: Vec<c_int> = vec![0; ni.max(0) as usize];
    let mut addrs: Vec<MPI_Aint> = vec![0; na.max(0) as usize];
    let mut large: Vec<MPI_Count> = vec![0; nl.max(0) as usize];
    c.types = vec![MPI_DATATYPE_NULL(); nd.max(0) as usize];
    // Arrays of exactly the sizes the envelope gave. The classic call when there are no
    // large counts: an MPI-3 library (Open MPI 4) has no `_c` form.
    let got = if nl == 0 {
        mpi_dtype::get_contents(dt, &mut ints, &mut addrs, &mut c.types)
    } else {
        mpi_dtype::get_contents_c(dt, &mut ints, &mut addrs, &mut large, &mut c.types)
    };
    if let Err(e) = got {
        c.types.clear();
        return Err(e.code());
    }
    let mut i: Vec<i64> = ints.iter().map(|&v| v as i64).collect();
    let mut a: Vec<i64> = addrs.iter().map(|&v| v as i64).collect();
    if nl > 0 {
        let l = &large;
        let n = |k: usize| l.get(k).copied().unwrap_or(0).max(0) as usize;
        match comb {
            // count, blocklength(s), displacements: the classic h-forms keep the
            // displacements (and the hvector stride) as addresses
            MPI_COMBINER_HVECTOR => {
                i = l[..2.min(l.len())].to_vec();
                a = l[2.min(l.len())..].to_vec();
            }
            MPI_COMBINER_HINDEXED | MPI_COMBINER_STRUCT => {
                let k = (1 + n(0)).min(l.len());
                i = l[..k].to_vec();
                a = l[k..].to_vec();
            }
            MPI_COMBINER_HINDEXED_BLOCK => {
                let k = 2.min(l.len());
                i = l[..k].to_vec();
                a = l[k..].to_vec();
            }
            MPI_COMBINER_RESIZED => a = l.clone(),
            // ints: ndims, order; large: sizes, subsizes, starts
            MPI_COMBINER_SUBARRAY if i.len() == 2 => {
                let order = i[1];
                i = [&[i[0]][..], &l[..], &[order][..]].concat();
            }
            // ints: size, rank, ndims, distribs, dargs, psizes, order; large: gsizes
            MPI_COMBINER_DARRAY if i.len() >= 3 => {
                i = [&i[..3], &l[..], &i[3..]].concat();
            }
            // contiguous, vector, indexed, indexed_block: all counts, in order
            _ => i = [&i[..], &l[..]].concat(),
        }
    }
    c.ints = i;
    c.addrs = a;
    Ok((comb, c))
}

impl Drop for Contents {
    fn drop(&mut self) {
        for t in &self.types {
            if !is_predefined_datatype(*t) {
                let mut t = *t;
                // a reference get_contents created for us
                let _ = mpi_dtype::free(&mut t);
            }
        }
    }
}

/// The predefined datatype every basic component of `dt` is made of (MPI-4.0 §12.3.4: the
/// datatypes of an accumulate-type operation), `Ok(None)` if they differ, `Err(class)` for
/// an invalid datatype.
pub fn element_type(dt: MPI_Datatype) -> Result<Option<MPI_Datatype>, c_int> {
    element_type_at(dt, 0)
}

fn element_type_at(dt: MPI_Datatype, depth: usize) -> Result<Option<MPI_Datatype>, c_int> {
    if is_predefined_datatype(dt) {
        return Ok(Some(dt));
    }
    if depth > 64 || dt == MPI_DATATYPE_NULL() {
        return Err(MPI_ERR_TYPE);
    }
    let (comb, c) = contents(dt).map_err(|_| MPI_ERR_TYPE)?;
    if comb == MPI_COMBINER_NAMED {
        return Ok(Some(dt));
    }
    let mut found: Option<MPI_Datatype> = None;
    for &t in &c.types {
        match element_type_at(t, depth + 1)? {
            None => return Ok(None),
            Some(e) if found.is_some_and(|f| f != e) => return Ok(None),
            Some(e) => found = Some(e),
        }
    }
    Ok(found)
}

fn decode(dt: MPI_Datatype, depth: usize) -> Result<Node, Opaque> {
    if depth > 64 {
        return Err(Opaque::TooLarge);
    }
    if is_predefined_datatype(dt) {
        return Ok(named(dt)?.0);
    }
    let (comb, c) = contents(dt).map_err(Opaque::Invalid)?;
    if comb == MPI_COMBINER_NAMED {
        return Ok(named(dt)?.0);
    }
    let i = |k: usize| c.ints[k];
    let sub = |k: usize| -> Result<(Node, i64), Opaque> {
        let t = c.types[k];
        Ok((decode(t, depth + 1)?, extent(t)?.1))
    };
    let node = match comb {
        MPI_COMBINER_DUP | MPI_COMBINER_RESIZED => {
            // A resized type's type map is its old type's; only lb/extent change, and the
            // caller takes those from the library.
            sub(0)?.0
        }
        MPI_COMBINER_CONTIGUOUS => {
            let (b, e) = sub(0)?;
            repeat(0, i(0), e, b)
        }
        MPI_COMBINER_VECTOR | MPI_COMBINER_HVECTOR => {
            let (b, e) = sub(0)?;
            let stride = if comb == MPI_COMBINER_VECTOR {
                i(2) * e
            } else {
                c.addrs[0]
            };
            repeat(0, i(0), stride, repeat(0, i(1), e, b))
        }
        MPI_COMBINER_INDEXED | MPI_COMBINER_HINDEXED => {
            let (b, e) = sub(0)?;
            let n = i(0) as usize;
            let parts = (0..n)
                .map(|k| {
                    let d = if comb == MPI_COMBINER_INDEXED {
                        i(1 + n + k) * e
                    } else {
                        c.addrs[k]
                    };
                    repeat(d, i(1 + k), e, b.clone())
                })
                .collect();
            seq(parts)
        }
        MPI_COMBINER_INDEXED_BLOCK | MPI_COMBINER_HINDEXED_BLOCK => {
            let (b, e) = sub(0)?;
            let n = i(0) as usize;
            let block = repeat(0, i(1), e, b);
            let parts = (0..n)
                .map(|k| {
                    let d = if comb == MPI_COMBINER_INDEXED_BLOCK {
                        i(2 + k) * e
                    } else {
                        c.addrs[k]
                    };
                    block.shifted(d)
                })
                .collect();
            seq(parts)
        }
        MPI_COMBINER_STRUCT => {
            let n = i(0) as usize;
            let mut parts = Vec::with_capacity(n);
            for k in 0..n {
                let (b, e) = sub(k)?;
                parts.push(repeat(c.addrs[k], i(1 + k), e, b));
            }
            seq(parts)
        }
        MPI_COMBINER_SUBARRAY => {
            let nd = i(0) as usize;
            let dims: Vec<(i64, i64, i64)> = (0..nd)
                .map(|k| (i(1 + k), i(1 + nd + k), i(1 + 2 * nd + k)))
                .collect();
            let order = i(1 + 3 * nd) as c_int;
            let (b, e) = sub(0)?;
            let blocks: Vec<Vec<(i64, i64)>> = dims
                .iter()
                .map(|&(_, sub, start)| vec![(start, sub)])
                .collect();
            let sizes: Vec<i64> = dims.iter().map(|d| d.0).collect();
            grid(&sizes, &blocks, order, b, e)
        }
        MPI_COMBINER_DARRAY => {
            // ints: size, rank, ndims, gsizes[n], distribs[n], dargs[n], psizes[n], order
            let (size, rank, nd) = (i(0), i(1), i(2) as usize);
            let gs: Vec<i64> = (0..nd).map(|k| i(3 + k)).collect();
            let dist: Vec<c_int> = (0..nd).map(|k| c.ints[3 + nd + k] as c_int).collect();
            let darg: Vec<i64> = (0..nd).map(|k| i(3 + 2 * nd + k)).collect();
            let ps: Vec<i64> = (0..nd).map(|k| i(3 + 3 * nd + k)).collect();
            let order = c.ints[3 + 4 * nd] as c_int;
            if ps.iter().product::<i64>() != size {
                return Err(Opaque::Unsupported(comb));
            }
            // Process coordinates: the process grid is row-major whatever the array order
            // (MPI-4.0 §5.1.4, "Distributed Array Datatype Constructor").
            let mut coords = vec![0i64; nd];
            let mut r = rank;
            for k in (0..nd).rev() {
                coords[k] = r % ps[k];
                r /= ps[k];
            }
            let mut blocks = Vec::with_capacity(nd);
            for k in 0..nd {
                blocks.push(darray_blocks(gs[k], dist[k], darg[k], ps[k], coords[k])?);
            }
            let (b, e) = sub(0)?;
            grid(&gs, &blocks, order, b, e)
        }
        _ => return Err(Opaque::Unsupported(comb)),
    };
    Ok(node)
}

/// The index ranges (start, length) one process owns along one dimension of a darray.
fn darray_blocks(
    g: i64,
    dist: c_int,
    darg: i64,
    p: i64,
    coord: i64,
) -> Result<Vec<(i64, i64)>, Opaque> {
    const DFLT: i64 = MPI_DISTRIBUTE_DFLT_DARG as i64;
    Ok(match dist {
        MPI_DISTRIBUTE_NONE => vec![(0, g)],
        MPI_DISTRIBUTE_BLOCK => {
            let b = if darg == DFLT { (g + p - 1) / p } else { darg };
            let start = coord * b;
            let len = b.min(g - start).max(0);
            vec![(start.min(g), len)]
        }
        MPI_DISTRIBUTE_CYCLIC => {
            let b = if darg == DFLT { 1 } else { darg };
            let mut v = Vec::new();
            let mut start = coord * b;
            while start < g {
                v.push((start, b.min(g - start)));
                start += p * b;
            }
            v
        }
        _ => return Err(Opaque::Unsupported(MPI_COMBINER_DARRAY)),
    })
}

/// The elements of an n-dimensional array (dimension sizes `sizes`, in elements of
/// extent `e` and layout `elem`) selected by per-dimension index ranges, in array order.
fn grid(sizes: &[i64], blocks: &[Vec<(i64, i64)>], order: c_int, elem: Node, e: i64) -> Node {
    let nd = sizes.len();
    // dimension visiting order from slowest to fastest varying
    let dims: Vec<usize> = if order == MPI_ORDER_FORTRAN {
        (0..nd).rev().collect()
    } else {
        (0..nd).collect()
    };
    // stride in bytes of each dimension
    let mut stride = vec![0i64; nd];
    let mut acc = e;
    for &k in dims.iter().rev() {
        stride[k] = acc;
        acc *= sizes[k];
    }
    let mut node = elem;
    for &k in dims.iter().rev() {
        let parts = blocks[k]
            .iter()
            .map(|&(start, len)| repeat(start * stride[k], len, stride[k], node.clone()))
            .collect();
        node = seq(parts);
    }
    node
}

static KEYVAL: AtomicI32 = AtomicI32::new(MPI_KEYVAL_INVALID);

/// Drops the cached layout when MPI destroys the type.
unsafe extern "C" fn delete_flat(
    _dt: MPI_Datatype,
    _keyval: c_int,
    value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    crate::platform::guard::guard("datatype attribute delete callback", || {
        if !value.is_null() {
            // SAFETY: the attribute holds one strong count of an Arc<Flat>.
            drop(unsafe { Arc::from_raw(value as *const Flat) });
        }
    });
    MPI_SUCCESS
}

fn keyval() -> c_int {
    let k = KEYVAL.load(Ordering::Acquire);
    if k != MPI_KEYVAL_INVALID {
        return k;
    }
    let del: unsafe extern "C" fn(MPI_Datatype, c_int, *mut c_void, *mut c_void) -> c_int =
        delete_flat;
    // SAFETY: a copy function that copies nothing (MPI_TYPE_NULL_COPY_FN: a duplicate decodes its own) and
    // our delete callback, which takes the values `store` sets.
    let mut kv = unsafe {
        mpi_dtype::create_keyval(
            crate::platform::abi::null_copy_attr as *mut c_void,
            del as *mut c_void,
            core::ptr::null_mut(),
        )
    }
    .unwrap_or(MPI_KEYVAL_INVALID);
    match KEYVAL.compare_exchange(MPI_KEYVAL_INVALID, kv, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => kv,
        Err(other) => {
            // another thread won the race: keep its key
            // our key, unused
            let _ = mpi_dtype::free_keyval(&mut kv);
            other
        }
    }
}

fn cached(dt: MPI_Datatype) -> Option<Arc<Flat>> {
    let k = KEYVAL.load(Ordering::Acquire);
    if k == MPI_KEYVAL_INVALID {
        return None;
    }
    let v = mpi_dtype::get_attr(dt, k).ok().flatten()?;
    if v.is_null() {
        return None;
    }
    let p = v as *const Flat;
    // SAFETY: the attribute holds a strong count; take another for the caller.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

fn store(dt: MPI_Datatype, f: &Arc<Flat>) {
    let k = keyval();
    if k == MPI_KEYVAL_INVALID {
        return;
    }
    let raw = Arc::into_raw(f.clone()) as *mut c_void;
    // SAFETY: the attribute takes over one strong count; the delete callback returns it.
    if unsafe { mpi_dtype::set_attr(dt, k, raw) }.is_err() {
        // SAFETY: not stored: give the count back.
        drop(unsafe { Arc::from_raw(raw as *const Flat) });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn runs_merge_and_loops_fold() {
        let r = |off, len| Node::Run { off, len };
        assert_eq!(repeat(0, 4, 8, r(0, 8)), r(0, 32));
        assert_eq!(seq(vec![r(0, 4), r(4, 4), r(16, 4)]).size(), 12);
        assert_eq!(seq(vec![r(0, 4), r(4, 4)]), r(0, 8));
        let v = repeat(0, 3, 16, r(0, 8));
        assert_eq!(v.size(), 24);
        assert_eq!(repeat(0, 1, 99, v.clone()), v);
        assert_eq!(repeat(0, 0, 99, v).size(), 0);
    }

    #[test]
    fn subarray_grid_c_and_fortran() {
        // 4x5 array of 1-byte elements, rows 1..3, cols 2..4
        let blocks = vec![vec![(1, 2)], vec![(2, 2)]];
        let n = grid(
            &[4, 5],
            &blocks,
            MPI_ORDER_C,
            Node::Run { off: 0, len: 1 },
            1,
        );
        let mut offs = Vec::new();
        collect(&n, 0, &mut offs);
        assert_eq!(offs, vec![(7, 2), (12, 2)]);
        let n = grid(
            &[4, 5],
            &blocks,
            MPI_ORDER_FORTRAN,
            Node::Run { off: 0, len: 1 },
            1,
        );
        let mut offs = Vec::new();
        collect(&n, 0, &mut offs);
        // column-major: element (i, j) at i + 4 j
        assert_eq!(offs, vec![(9, 2), (13, 2)]);
    }

    #[test]
    fn darray_cyclic_blocks() {
        assert_eq!(
            darray_blocks(10, MPI_DISTRIBUTE_CYCLIC, 2, 2, 1).unwrap(),
            vec![(2, 2), (6, 2)]
        );
        assert_eq!(
            darray_blocks(
                10,
                MPI_DISTRIBUTE_BLOCK,
                MPI_DISTRIBUTE_DFLT_DARG as i64,
                3,
                2
            )
            .unwrap(),
            vec![(8, 2)]
        );
    }

    use crate::platform::mpi::fake::{self, Call};

    /// Derived datatype handles the fake describes (MPICH's derived kind).
    const D: i64 = 0x8c00_4001u32 as i32 as i64;
    const D2: i64 = 0x8c00_4002u32 as i32 as i64;
    const CODE: c_int = 0x0004_2a03;

    /// A fake describing datatypes: `describe` answers the envelope and contents calls;
    /// predefined types have their size as extent (derived ones 8 bytes in 16); the cache's key cannot be created (so
    /// the layouts are not kept in attributes, and the key stays unset for other tests).
    fn types(
        mut describe: impl FnMut(&Call) -> Option<Result<Vec<i64>, c_int>> + 'static,
    ) -> fake::Guard {
        fake::install(move |c| {
            if let Some(r) = describe(c) {
                return r;
            }
            match c.name {
                "type_get_extent_x" => {
                    let dt = c.args[0] as MPI_Datatype;
                    Ok(vec![0, builtin_size(dt).map_or(16, |s| s as i64)])
                }
                "type_size_x" => Ok(vec![
                    builtin_size(c.args[0] as MPI_Datatype).map_or(8, |s| s as i64),
                ]),
                "type_create_keyval" => Err(CODE),
                _ => Ok(vec![]),
            }
        })
    }

    fn runs(f: &Flat) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        collect(&f.node, 0, &mut out);
        out
    }

    fn args_of(name: &str) -> Vec<Vec<i64>> {
        fake::calls()
            .into_iter()
            .filter(|c| c.name == name)
            .map(|c| c.args)
            .collect()
    }

    #[test]
    fn a_vector_is_decoded_from_its_envelope_and_contents() {
        let _g = types(|c| match (c.name, c.args[0]) {
            ("type_get_envelope_c", D) => Some(Ok(vec![3, 0, 0, 1, MPI_COMBINER_VECTOR as i64])),
            // count 2, block length 1, stride 3 ints
            ("type_get_contents", D) => Some(Ok(vec![2, 1, 3, MPI_INT() as i64])),
            _ => None,
        });
        let f = get(D as MPI_Datatype).unwrap();
        assert_eq!(runs(&f), [(0, 4), (12, 4)]);
        assert_eq!(f.size, 8);
        // no large counts: the classic call (MPI-3 libraries have no _c form), with
        // arrays of the sizes the envelope gave
        assert_eq!(args_of("type_get_contents"), [vec![D, 3, 0, 1]]);
        assert!(args_of("type_get_contents_c").is_empty());
        // the predefined type the contents handed out is not freed
        assert!(args_of("type_free").is_empty());
    }

    #[test]
    fn a_large_count_hvector_keeps_its_stride_as_an_address() {
        let _g = types(|c| match (c.name, c.args[0]) {
            ("type_get_envelope_c", D) => Some(Ok(vec![0, 0, 3, 1, MPI_COMBINER_HVECTOR as i64])),
            // large counts: count 2, block length 1, stride 24 bytes
            ("type_get_contents_c", D) => Some(Ok(vec![2, 1, 24, MPI_INT() as i64])),
            _ => None,
        });
        let f = get(D as MPI_Datatype).unwrap();
        assert_eq!(runs(&f), [(0, 4), (24, 4)]);
        assert_eq!(args_of("type_get_contents_c"), [vec![D, 0, 0, 3, 1]]);
    }

    #[test]
    fn the_derived_types_contents_hand_out_are_freed() {
        // D: 3 of D2; D2: 2 doubles
        let _g = types(|c| match (c.name, c.args[0]) {
            ("type_get_envelope_c", D | D2) => {
                Some(Ok(vec![1, 0, 0, 1, MPI_COMBINER_CONTIGUOUS as i64]))
            }
            ("type_get_contents", D) => Some(Ok(vec![3, D2])),
            ("type_get_contents", D2) => Some(Ok(vec![2, MPI_DOUBLE() as i64])),
            _ => None,
        });
        assert_eq!(element_type(D as MPI_Datatype), Ok(Some(MPI_DOUBLE())));
        // MPI-4.0 §5.1.13: the derived type D2 is a new reference; MPI_DOUBLE is not
        assert_eq!(args_of("type_free"), [vec![D2]]);
    }

    #[test]
    fn errors_of_the_library_come_back_and_free_nothing() {
        // (failing call) -> what `get` reports
        for failing in [
            "type_get_extent_x",
            "type_get_envelope_c",
            "type_get_contents",
        ] {
            let _g = types(move |c| match c.name {
                n if n == failing => Some(Err(CODE)),
                "type_get_envelope_c" => Some(Ok(vec![3, 0, 0, 1, MPI_COMBINER_VECTOR as i64])),
                _ => None,
            });
            assert_eq!(
                get(D as MPI_Datatype).err(),
                Some(Opaque::Invalid(CODE)),
                "{failing}"
            );
            // a failed get_contents wrote no handles: none is freed (not even the null
            // handles the array held)
            assert!(args_of("type_free").is_empty(), "{failing}");
            // an invalid type is not cached as opaque either
            assert!(args_of("type_set_attr").is_empty());
        }
        let _g = types(|c| (c.name == "type_get_envelope_c").then_some(Err(CODE)));
        assert_eq!(element_type(D as MPI_Datatype), Err(MPI_ERR_TYPE));
    }

    /// The (offset, length) runs of a tree in packed order, by plain recursion (the
    /// reference the packer's tests compare against).
    pub(crate) fn collect(n: &Node, base: i64, out: &mut Vec<(i64, i64)>) {
        match n {
            Node::Run { off, len } => out.push((base + off, *len)),
            Node::Loop {
                off,
                count,
                stride,
                body,
                ..
            } => {
                for k in 0..*count {
                    collect(body, base + off + k * stride, out)
                }
            }
            Node::Seq { parts, .. } => parts.iter().for_each(|p| collect(p, base, out)),
            Node::Runs { offs, ends } => {
                out.extend(Node::runs(offs, ends).map(|(o, l)| (base + o, l)))
            }
        }
    }
}
