//! Layer: platform. May use: nothing.
//!
//! The InfiniBand verbs the shim's verbs backend uses (`core::transport::verbs`), loaded at
//! run time: `libshim.so` never links `libibverbs`, so it still loads on machines without
//! rdma-core. The control verbs are looked up with `dlsym` in the library named by
//! `SHIM_VERBS_LIB` (the system's `libibverbs.so.1`, or the emulated HCA the tests load);
//! the data-path verbs (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`,
//! `ibv_poll_cq`) are `static inline` in `<infiniband/verbs.h>`: calls through the
//! context's legacy operation table, which every provider fills, so they are written out
//! here the same way.
//!
//! The structures are the verbs ABI (stable since `IBVERBS_1.1`), declared by hand for the
//! fields the backend touches; `tests::layouts_match_the_system_header` compares every size
//! and offset with the C header where rdma-core's headers are installed (CI installs them).
#![allow(non_camel_case_types, clippy::missing_safety_doc)]

use core::ffi::{CStr, c_char, c_int, c_void};
use std::ffi::CString;

pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_ERR: u32 = 6;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
pub const IBV_ACCESS_REMOTE_READ: c_int = 4;

pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_SEND: u32 = 2;
pub const IBV_SEND_SIGNALED: u32 = 2;
pub const IBV_SEND_INLINE: u32 = 8;

pub const IBV_WC_SUCCESS: u32 = 0;
pub const IBV_WC_RECV: u32 = 128;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
pub const IBV_WC_WITH_IMM: u32 = 2;

pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

/// `struct ibv_context_ops`: 32 entries, of which the data path uses five.
#[repr(C)]
pub struct ibv_context_ops {
    _compat0: [*mut c_void; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    _compat1: [*mut c_void; 7],
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    _compat2: [*mut c_void; 4],
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    _compat3: [*mut c_void; 5],
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut c_void,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    _mutex: [u64; 5],
    pub abi_compat: *mut c_void,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_cq`: only its leading context pointer is read.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
}

/// `struct ibv_srq`: only its leading context pointer is read.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    /// `imm_data` (network order, passed through untouched).
    pub imm_data: u32,
    /// `wr.rdma.remote_addr`.
    pub remote_addr: u64,
    /// `wr.rdma.rkey`.
    pub rkey: u32,
    pub _wr_rest: [u32; 5],
    pub _qp_type: u32,
    pub _bind_mw: [u64; 6],
}

impl Default for ibv_send_wr {
    fn default() -> Self {
        // SAFETY: every field is an integer or a raw pointer: all zeros is valid.
        unsafe { core::mem::zeroed() }
    }
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: [u64; 2],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_port_attr`, with room for fields later rdma-core versions append (the
/// exported `ibv_query_port` fills the compat prefix).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    _rest: [u64; 8],
}

impl Default for ibv_port_attr {
    fn default() -> Self {
        // SAFETY: integers only.
        unsafe { core::mem::zeroed() }
    }
}

/// The control verbs, resolved once from the loaded library.
pub struct Verbs {
    _handle: usize,
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void,
    pub free_device_list: unsafe extern "C" fn(*mut *mut c_void),
    pub get_device_name: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut c_void) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut [u64; 2]) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut c_void,
        c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub create_srq: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    pub destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub wc_status_str: unsafe extern "C" fn(u32) -> *const c_char,
}

// SAFETY: function pointers into a library that stays loaded (never dlclose'd).
unsafe impl Send for Verbs {}
unsafe impl Sync for Verbs {}

impl Verbs {
    /// Loads `path` (`RTLD_LOCAL`: its symbols never resolve anyone else's, so an MPI
    /// library's own `libibverbs` is untouched) and resolves the control verbs.
    pub fn load(path: &str) -> Result<Verbs, String> {
        let c = CString::new(path).map_err(|_| format!("{path}: a NUL in the path"))?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is never closed.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror's message, read before any other dl call.
            let e = unsafe { libc::dlerror() };
            let why = if e.is_null() {
                "not found".to_string()
            } else {
                // SAFETY: a NUL-terminated message from the loader.
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(format!("cannot load {path}: {why}"));
        }
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: a symbol of the verbs ABI, cast to its C prototype (above).
                let p = unsafe { libc::dlsym(h, concat!($name, "\0").as_ptr().cast()) };
                if p.is_null() {
                    return Err(format!("{path} has no {}", $name));
                }
                // SAFETY: as above: the verbs ABI's prototype for this name.
                unsafe { core::mem::transmute::<*mut c_void, _>(p) }
            }};
        }
        Ok(Verbs {
            _handle: h as usize,
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_srq: sym!("ibv_create_srq"),
            destroy_srq: sym!("ibv_destroy_srq"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            wc_status_str: sym!("ibv_wc_status_str"),
        })
    }

    /// The name of a work completion status (`ibv_wc_status_str`).
    pub fn status_name(&self, status: u32) -> String {
        // SAFETY: the library returns a static string for every value.
        let p = unsafe { (self.wc_status_str)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// `ibv_post_send` (the header's inline: the provider's table).
///
/// # Safety
/// `qp` a live queue pair; `wr` a valid chain whose buffers are registered.
pub unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr) -> c_int {
    let mut bad = core::ptr::null_mut();
    // SAFETY: the caller's live queue pair and its context's table.
    unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, wr, &mut bad),
            None => libc::ENOSYS,
        }
    }
}

/// `ibv_post_srq_recv`.
///
/// # Safety
/// `srq` live; `wr` a valid chain over registered memory.
pub unsafe fn post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr) -> c_int {
    let mut bad = core::ptr::null_mut();
    // SAFETY: as for post_send.
    unsafe {
        match (*(*srq).context).ops.post_srq_recv {
            Some(f) => f(srq, wr, &mut bad),
            None => libc::ENOSYS,
        }
    }
}

/// `ibv_poll_cq`: completions written to `wc`, or a negative value on error.
///
/// # Safety
/// `cq` live.
pub unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> c_int {
    // SAFETY: as for post_send; `wc` holds wc.len() entries.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, wc.len() as c_int, wc.as_mut_ptr()),
            None => -1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// Every size and offset declared here against `<infiniband/verbs.h>`, compiled with
    /// the system's C compiler (skipped, saying so, where rdma-core's headers are absent).
    #[test]
    fn layouts_match_the_system_header() {
        let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
        if !header.exists() {
            eprintln!("skipped: {} not installed", header.display());
            return;
        }
        let checks: Vec<(&str, usize)> = vec![
            (
                "sizeof(struct ibv_context_ops)",
                size_of::<ibv_context_ops>(),
            ),
            (
                "offsetof(struct ibv_context_ops, poll_cq)",
                offset_of!(ibv_context_ops, poll_cq),
            ),
            (
                "offsetof(struct ibv_context_ops, post_srq_recv)",
                offset_of!(ibv_context_ops, post_srq_recv),
            ),
            (
                "offsetof(struct ibv_context_ops, post_send)",
                offset_of!(ibv_context_ops, post_send),
            ),
            (
                "offsetof(struct ibv_context_ops, post_recv)",
                offset_of!(ibv_context_ops, post_recv),
            ),
            ("sizeof(struct ibv_context)", size_of::<ibv_context>()),
            (
                "offsetof(struct ibv_context, ops)",
                offset_of!(ibv_context, ops),
            ),
            (
                "offsetof(struct ibv_context, abi_compat)",
                offset_of!(ibv_context, abi_compat),
            ),
            ("sizeof(struct ibv_mr)", size_of::<ibv_mr>()),
            ("offsetof(struct ibv_mr, lkey)", offset_of!(ibv_mr, lkey)),
            ("offsetof(struct ibv_mr, rkey)", offset_of!(ibv_mr, rkey)),
            (
                "offsetof(struct ibv_qp, qp_num)",
                offset_of!(ibv_qp, qp_num),
            ),
            ("offsetof(struct ibv_qp, state)", offset_of!(ibv_qp, state)),
            ("sizeof(struct ibv_sge)", size_of::<ibv_sge>()),
            ("sizeof(struct ibv_send_wr)", size_of::<ibv_send_wr>()),
            (
                "offsetof(struct ibv_send_wr, opcode)",
                offset_of!(ibv_send_wr, opcode),
            ),
            (
                "offsetof(struct ibv_send_wr, send_flags)",
                offset_of!(ibv_send_wr, send_flags),
            ),
            (
                "offsetof(struct ibv_send_wr, imm_data)",
                offset_of!(ibv_send_wr, imm_data),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.rdma.remote_addr)",
                offset_of!(ibv_send_wr, remote_addr),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.rdma.rkey)",
                offset_of!(ibv_send_wr, rkey),
            ),
            ("sizeof(struct ibv_recv_wr)", size_of::<ibv_recv_wr>()),
            ("sizeof(struct ibv_wc)", size_of::<ibv_wc>()),
            (
                "offsetof(struct ibv_wc, byte_len)",
                offset_of!(ibv_wc, byte_len),
            ),
            (
                "offsetof(struct ibv_wc, imm_data)",
                offset_of!(ibv_wc, imm_data),
            ),
            (
                "offsetof(struct ibv_wc, qp_num)",
                offset_of!(ibv_wc, qp_num),
            ),
            (
                "offsetof(struct ibv_wc, wc_flags)",
                offset_of!(ibv_wc, wc_flags),
            ),
            (
                "sizeof(struct ibv_qp_init_attr)",
                size_of::<ibv_qp_init_attr>(),
            ),
            (
                "offsetof(struct ibv_qp_init_attr, cap)",
                offset_of!(ibv_qp_init_attr, cap),
            ),
            (
                "offsetof(struct ibv_qp_init_attr, qp_type)",
                offset_of!(ibv_qp_init_attr, qp_type),
            ),
            ("sizeof(struct ibv_ah_attr)", size_of::<ibv_ah_attr>()),
            (
                "offsetof(struct ibv_ah_attr, is_global)",
                offset_of!(ibv_ah_attr, is_global),
            ),
            (
                "offsetof(struct ibv_ah_attr, port_num)",
                offset_of!(ibv_ah_attr, port_num),
            ),
            ("sizeof(struct ibv_qp_attr)", size_of::<ibv_qp_attr>()),
            (
                "offsetof(struct ibv_qp_attr, dest_qp_num)",
                offset_of!(ibv_qp_attr, dest_qp_num),
            ),
            (
                "offsetof(struct ibv_qp_attr, ah_attr)",
                offset_of!(ibv_qp_attr, ah_attr),
            ),
            (
                "offsetof(struct ibv_qp_attr, pkey_index)",
                offset_of!(ibv_qp_attr, pkey_index),
            ),
            (
                "offsetof(struct ibv_qp_attr, min_rnr_timer)",
                offset_of!(ibv_qp_attr, min_rnr_timer),
            ),
            (
                "offsetof(struct ibv_qp_attr, rnr_retry)",
                offset_of!(ibv_qp_attr, rnr_retry),
            ),
            (
                "offsetof(struct ibv_qp_attr, rate_limit)",
                offset_of!(ibv_qp_attr, rate_limit),
            ),
            (
                "sizeof(struct ibv_srq_init_attr)",
                size_of::<ibv_srq_init_attr>(),
            ),
            (
                "offsetof(struct ibv_port_attr, lid)",
                offset_of!(ibv_port_attr, lid),
            ),
            (
                "offsetof(struct ibv_port_attr, link_layer)",
                offset_of!(ibv_port_attr, link_layer),
            ),
        ];
        let dir = std::env::temp_dir().join(format!("shim-verbs-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut src = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void){\n",
        );
        for (expr, _) in &checks {
            src.push_str(&format!("printf(\"%zu\\n\", (size_t){expr});\n"));
        }
        src.push_str("return 0;}\n");
        std::fs::write(dir.join("l.c"), src).unwrap();
        let ok = std::process::Command::new("cc")
            .arg(dir.join("l.c"))
            .arg("-o")
            .arg(dir.join("l"))
            .status()
            .expect("cc")
            .success();
        assert!(ok, "the layout probe did not compile");
        let out = std::process::Command::new(dir.join("l")).output().unwrap();
        let got: Vec<usize> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        // the compat prefix of ibv_port_attr only needs to fit in ours
        let mut bad = Vec::new();
        for ((expr, ours), c) in checks.iter().zip(&got) {
            if ours != c {
                bad.push(format!("{expr}: C {c}, Rust {ours}"));
            }
        }
        assert!(bad.is_empty(), "{bad:#?}");
        assert_eq!(got.len(), checks.len());
    }
}
