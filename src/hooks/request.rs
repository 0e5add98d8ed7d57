//! Layer: hooks. May use: services, core, platform.
//!
//! Hooks (see `src/platform/abi/mpi_functions.txt`). Safety: the arguments are the application's,
//! passed unchanged; the MPI standard's rules for them are the contract.
#![allow(non_snake_case, clippy::missing_safety_doc)]
use crate::core::progress::{self};
use crate::platform::abi::*;
use crate::platform::mpi;
use core::ffi::c_int;

use crate::core::request::*;

pub unsafe fn MPI_Wait(
    request: *mut MPI_Request,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the caller's request pointer.
    let h = if request.is_null() {
        MPI_REQUEST_NULL()
    } else {
        unsafe { *request }
    };
    if let Some((done, comm)) = take_finished(h) {
        // SAFETY: the caller's request (a shim handle, so not null) and status.
        unsafe { *request = MPI_REQUEST_NULL() };
        return outcome(comm, done.status_into(status), "MPI_Wait", &done);
    }
    let (st, comm) = entry(h);
    if matches!(st, State::Native) && crate::core::retain::request_freed(h) {
        return freed_request("MPI_Wait");
    }
    match st {
        State::Native => {
            if !progress::any_active() || h == MPI_REQUEST_NULL() {
                return native();
            }
            let mut rc = MPI_SUCCESS;
            progress::wait_until(|| {
                // SAFETY: the caller's request (not null here) and status.
                match unsafe { mpi::p2p::test_status(&mut *request, status) } {
                    Ok(done) => done,
                    Err(e) => {
                        rc = e.code();
                        true
                    }
                }
            });
            rc
        }
        State::Inactive(_) => {
            set_empty_status(status);
            MPI_SUCCESS
        }
        State::Running(cell, persistent) => {
            progress::wait_until(|| cell.poke());
            // SAFETY: the caller's request.
            let err = retire(unsafe { &mut *request }, &cell, persistent, status);
            outcome(comm, err, "MPI_Wait", &cell)
        }
    }
}

pub unsafe fn MPI_Test(
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the caller's request pointer.
    let h = if request.is_null() {
        MPI_REQUEST_NULL()
    } else {
        unsafe { *request }
    };
    let (st, comm) = entry(h);
    if matches!(st, State::Native) && crate::core::retain::request_freed(h) {
        return freed_request("MPI_Test");
    }
    match st {
        State::Native => native(),
        State::Inactive(_) => {
            // SAFETY: the caller's flag.
            unsafe { *flag = 1 };
            set_empty_status(status);
            MPI_SUCCESS
        }
        State::Running(cell, persistent) => {
            progress::progress_all();
            if !cell.poke() {
                // SAFETY: the caller's flag.
                unsafe { *flag = 0 };
                return MPI_SUCCESS;
            }
            // SAFETY: the caller's flag and request.
            unsafe { *flag = 1 };
            let err = retire(unsafe { &mut *request }, &cell, persistent, status);
            outcome(comm, err, "MPI_Test", &cell)
        }
    }
}

pub unsafe fn MPI_Request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    let (st, _) = entry(request);
    if matches!(st, State::Native) && crate::core::retain::request_freed(request) {
        return freed_request("MPI_Request_get_status");
    }
    match st {
        State::Native => native(),
        State::Inactive(_) => {
            // SAFETY: the caller's flag.
            unsafe { *flag = 1 };
            set_empty_status(status);
            MPI_SUCCESS
        }
        State::Running(cell, _) => {
            progress::progress_all();
            let done = cell.poke();
            // SAFETY: the caller's flag.
            unsafe { *flag = c_int::from(done) };
            if done {
                cell.status_into(status);
            }
            MPI_SUCCESS
        }
    }
}

pub unsafe fn MPI_Request_free(request: *mut MPI_Request, native: &dyn Fn() -> c_int) -> c_int {
    // SAFETY: the caller's request pointer.
    let h = if request.is_null() {
        MPI_REQUEST_NULL()
    } else {
        unsafe { *request }
    };
    note_traffic(h);
    if crate::core::retain::request_freed(h) {
        return freed_request("MPI_Request_free");
    }
    match state(h) {
        State::Native => {
            // Only a complete request (an inactive persistent one, or one already
            // finished) is released at once and its handle quarantined. An active one
            // lives on in the library until it completes: allocating a placeholder then
            // may take over a handle MPICH 4.0.2 still uses (a freed Isend to self
            // whose message was never received is lost).
            // an invalid handle only yields a code (the real world returns errors),
            // reported again by the free below
            let done =
                h != MPI_REQUEST_NULL() && mpi::p2p::request_get_status(h, None).unwrap_or(false);
            let rc = native();
            if rc == MPI_SUCCESS && done {
                crate::core::retain::request_quarantine(h);
            }
            rc
        }
        State::Inactive(_) => {
            if let Some(p) = packed(h) {
                p.release();
            }
            remove(h);
            // SAFETY: the caller's request.
            unsafe { *request = MPI_REQUEST_NULL() };
            MPI_SUCCESS
        }
        State::Running(Pending::P2p(p), _) => {
            // the operation goes on; it is completed in the background
            crate::core::progress::detach(p);
            remove(h);
            // SAFETY: the caller's request.
            unsafe { *request = MPI_REQUEST_NULL() };
            MPI_SUCCESS
        }
        State::Running(..) => crate::platform::errors::raise(
            slot_comm(h),
            MPI_ERR_REQUEST,
            "MPI_Request_free",
            "freeing an active collective request is erroneous (MPI-4.0 §6.12, §6.13)",
        ),
    }
}

pub unsafe fn MPI_Cancel(request: *mut MPI_Request, native: &dyn Fn() -> c_int) -> c_int {
    // SAFETY: the caller's request pointer.
    let h = if request.is_null() {
        MPI_REQUEST_NULL()
    } else {
        unsafe { *request }
    };
    note_traffic(h);
    if crate::core::retain::request_freed(h) {
        return freed_request("MPI_Cancel");
    }
    if let Some(p) = packed(h) {
        return p.cancel();
    }
    match state(h) {
        State::Native => native(),
        _ => crate::platform::errors::raise(
            slot_comm(h),
            MPI_ERR_REQUEST,
            "MPI_Cancel",
            "a collective request cannot be cancelled (MPI-4.0 §6.12)",
        ),
    }
}

pub unsafe fn MPI_Start(request: *mut MPI_Request, native: &dyn Fn() -> c_int) -> c_int {
    // SAFETY: the caller's request pointer.
    let h = if request.is_null() {
        MPI_REQUEST_NULL()
    } else {
        unsafe { *request }
    };
    note_traffic(h);
    if crate::core::retain::request_freed(h) {
        return freed_request("MPI_Start");
    }
    match state(h) {
        State::Native => native(),
        _ => {
            let rc = start(h);
            if rc != MPI_SUCCESS {
                return crate::platform::errors::raise(
                    slot_comm(h),
                    rc,
                    "MPI_Start",
                    "the persistent request is already active or could not start",
                );
            }
            MPI_SUCCESS
        }
    }
}

pub unsafe fn MPI_Startall(
    count: c_int,
    reqs: *mut MPI_Request,
    native: &dyn Fn() -> c_int,
) -> c_int {
    note_traffic_all(reqs, count);
    if reqs.is_null() || count < 0 {
        // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
        return native();
    }
    if let Some(rc) = freed_entry(reqs, count) {
        return rc;
    }
    if !has_shim(reqs, count) {
        return native();
    }
    let mut nat = Native::of(reqs, count as usize);
    for i in 0..count as usize {
        // SAFETY: the caller's array of count requests.
        let h = unsafe { *reqs.add(i) };
        if is_shim_request(h) {
            let rc = start(h);
            if rc != MPI_SUCCESS {
                return crate::platform::errors::raise(
                    slot_comm(h),
                    rc,
                    "MPI_Startall",
                    "a persistent request is already active or could not start",
                );
            }
        }
    }
    if !nat.reqs.is_empty() {
        let rc = mpi::p2p::startall(&mut nat.reqs).map_or_else(|e| e.code(), |()| MPI_SUCCESS);
        nat.write_back(reqs, MPI_STATUSES_IGNORE, Some(&[]));
        return rc;
    }
    MPI_SUCCESS
}

/// Shared body of Waitall (`wait`) and Testall.
/// A completed request's error code as the call returns it: raised through the handler of
/// the request's communicator (MPI-4.0 §9.3).
fn outcome(comm: MPI_Comm, err: c_int, name: &str, p: &Pending) -> c_int {
    if err != MPI_SUCCESS {
        crate::platform::errors::raise(comm, err, name, p.what())
    } else {
        MPI_SUCCESS
    }
}

fn all(
    count: c_int,
    reqs: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
    wait: bool,
    native: &dyn Fn() -> c_int,
) -> c_int {
    note_traffic_all(reqs, count);
    if reqs.is_null() || count < 0 {
        // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
        return native();
    }
    if let Some(rc) = freed_entry(reqs, count) {
        return rc;
    }
    if !has_shim(reqs, count) && (!wait || !progress::any_active()) {
        return native();
    }
    let n = count.max(0) as usize;
    let want = statuses != MPI_STATUSES_IGNORE && !statuses.is_null();
    let mut nat = Native::of(reqs, n);
    let mut rc = MPI_SUCCESS;
    let mut complete = false;
    let mut check = || {
        progress::progress_all();
        for i in 0..n {
            // SAFETY: the caller's array.
            if let State::Running(c, _) = state(unsafe { *reqs.add(i) }) {
                if !c.poke() {
                    return false;
                }
            }
        }
        if !nat.reqs.is_empty() {
            let (native_reqs, native_statuses) = nat.parts(want);
            match mpi::p2p::testall_statuses(native_reqs, native_statuses) {
                Ok(false) => return false,
                Ok(true) => rc = MPI_SUCCESS,
                Err(e) => rc = e.code(),
            }
        }
        complete = true;
        true
    };
    if wait {
        progress::wait_until(&mut check);
    } else {
        check();
    }
    if !flag.is_null() {
        // SAFETY: the caller's flag.
        unsafe { *flag = c_int::from(complete) };
    }
    if !complete {
        return MPI_SUCCESS;
    }
    nat.write_back(reqs, statuses, None);
    let mut errors = false;
    for i in 0..n {
        // SAFETY: the caller's arrays.
        let h = unsafe { &mut *reqs.add(i) };
        let st = status_at(statuses, i);
        match state(*h) {
            State::Running(c, p) => {
                let e = retire(h, &c, p, st);
                if want {
                    // SAFETY: st points into the caller's status array.
                    unsafe { (*st).MPI_ERROR = e };
                }
                errors |= e != MPI_SUCCESS;
            }
            State::Inactive(_) => set_empty_status(st),
            State::Native => {}
        }
    }
    if errors { MPI_ERR_IN_STATUS } else { rc }
}

pub unsafe fn MPI_Waitall(
    count: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    all(count, reqs, core::ptr::null_mut(), statuses, true, native)
}

pub unsafe fn MPI_Testall(
    count: c_int,
    reqs: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    all(count, reqs, flag, statuses, false, native)
}

/// Shared body of Waitany and Testany.
fn any(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
    wait: bool,
    native: &dyn Fn() -> c_int,
) -> c_int {
    note_traffic_all(reqs, count);
    if reqs.is_null() || count < 0 {
        // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
        return native();
    }
    if let Some(rc) = freed_entry(reqs, count) {
        return rc;
    }
    if !has_shim(reqs, count) && (!wait || !progress::any_active()) {
        return native();
    }
    let n = count.max(0) as usize;
    let mut nat = Native::of(reqs, n);
    let mut result: Option<(c_int, c_int)> = None; // (index or UNDEFINED, rc)
    let mut check = || {
        progress::progress_all();
        let mut active = false;
        for i in 0..n {
            // SAFETY: the caller's array.
            let h = unsafe { &mut *reqs.add(i) };
            if let State::Running(c, p) = state(*h) {
                active = true;
                if c.poke() {
                    let comm = slot_comm(*h);
                    let e = retire(h, &c, p, status);
                    let rc = if e != MPI_SUCCESS {
                        crate::platform::errors::raise(comm, e, "MPI_Waitany", c.what())
                    } else {
                        MPI_SUCCESS
                    };
                    result = Some((i as c_int, rc));
                    return true;
                }
            }
        }
        if !nat.reqs.is_empty() {
            let (mut idx, mut f): (c_int, c_int) = (MPI_UNDEFINED, 0);
            // SAFETY: the native sub-array; the caller's status.
            let rc = unsafe { mpi::p2p::testany(&mut nat.reqs, &mut idx, &mut f, status) }
                .map_or_else(|e| e.code(), |()| MPI_SUCCESS);
            if rc != MPI_SUCCESS || (f != 0 && idx != MPI_UNDEFINED) {
                nat.write_back(reqs, MPI_STATUSES_IGNORE, Some(&[]));
                let gi = if idx == MPI_UNDEFINED {
                    MPI_UNDEFINED
                } else {
                    nat.idx[idx as usize] as c_int
                };
                result = Some((gi, rc));
                return true;
            }
            if f == 0 {
                active = true;
            }
        }
        if !active {
            // every request is null or inactive
            set_empty_status(status);
            result = Some((MPI_UNDEFINED, MPI_SUCCESS));
            return true;
        }
        false
    };
    if wait {
        progress::wait_until(&mut check);
    } else {
        check();
    }
    match result {
        Some((i, rc)) => {
            // SAFETY: the caller's out-pointers.
            unsafe {
                *index = i;
                if !flag.is_null() {
                    *flag = 1;
                }
            }
            rc
        }
        None => {
            // SAFETY: as above.
            unsafe {
                *index = MPI_UNDEFINED;
                if !flag.is_null() {
                    *flag = 0;
                }
            }
            MPI_SUCCESS
        }
    }
}

pub unsafe fn MPI_Waitany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    any(
        count,
        reqs,
        index,
        core::ptr::null_mut(),
        status,
        true,
        native,
    )
}

pub unsafe fn MPI_Testany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    any(count, reqs, index, flag, status, false, native)
}

/// Shared body of Waitsome and Testsome.
fn some(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    wait: bool,
    native: &dyn Fn() -> c_int,
) -> c_int {
    note_traffic_all(reqs, incount);
    if reqs.is_null() || incount < 0 {
        // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
        return native();
    }
    if let Some(rc) = freed_entry(reqs, incount) {
        return rc;
    }
    if !has_shim(reqs, incount) && (!wait || !progress::any_active()) {
        return native();
    }
    let n = incount.max(0) as usize;
    let want = statuses != MPI_STATUSES_IGNORE && !statuses.is_null();
    let mut nat = Native::of(reqs, n);
    let mut out: Vec<(usize, c_int)> = Vec::new();
    let mut rc = MPI_SUCCESS;
    let mut none_active = false;
    let mut check = || {
        progress::progress_all();
        let mut active = false;
        for i in 0..n {
            // SAFETY: the caller's array.
            let h = unsafe { &mut *reqs.add(i) };
            if let State::Running(c, p) = state(*h) {
                active = true;
                if c.poke() {
                    // the status goes to position out.len() of the output
                    let st = status_at(statuses, out.len());
                    let e = retire(h, &c, p, st);
                    out.push((i, e));
                }
            }
        }
        if !nat.reqs.is_empty() {
            let mut cnt: c_int = 0;
            let mut idx = vec![0 as c_int; nat.reqs.len()];
            let (native_reqs, native_statuses) = nat.parts(want);
            rc = mpi::p2p::testsome_statuses(native_reqs, &mut cnt, &mut idx, native_statuses)
                .map_or_else(|e| e.code(), |()| MPI_SUCCESS);
            if cnt != MPI_UNDEFINED {
                active = true;
                for (j, &k) in idx[..cnt.max(0) as usize].iter().enumerate() {
                    let i = nat.idx[k as usize];
                    if want {
                        // SAFETY: status array of incount entries; Testsome fills its
                        // statuses in completion order.
                        unsafe { *statuses.add(out.len()) = nat.statuses[j] };
                    }
                    // SAFETY: the caller's array.
                    unsafe { *reqs.add(i) = nat.reqs[k as usize] };
                    out.push((i, MPI_SUCCESS));
                }
            }
        }
        if !active {
            none_active = true;
            return true;
        }
        !out.is_empty()
    };
    if wait {
        progress::wait_until(&mut check);
    } else {
        check();
    }
    if none_active && out.is_empty() {
        // SAFETY: the caller's outcount.
        unsafe { *outcount = MPI_UNDEFINED };
        return MPI_SUCCESS;
    }
    let mut errors = false;
    for (k, &(i, e)) in out.iter().enumerate() {
        // SAFETY: the caller's indices array has incount entries.
        unsafe { *indices.add(k) = i as c_int };
        if e != MPI_SUCCESS {
            errors = true;
            if want {
                // SAFETY: as above.
                unsafe { (*statuses.add(k)).MPI_ERROR = e };
            }
        }
    }
    // SAFETY: the caller's outcount.
    unsafe { *outcount = out.len() as c_int };
    if errors { MPI_ERR_IN_STATUS } else { rc }
}

pub unsafe fn MPI_Waitsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    some(incount, reqs, outcount, indices, statuses, true, native)
}

pub unsafe fn MPI_Testsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    some(incount, reqs, outcount, indices, statuses, false, native)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::dtype::p2p::PackedReq;
    use crate::core::progress::pretend_active;
    use crate::platform::api::Fid;
    use crate::platform::mpi::fake;
    use std::cell::Cell;

    const A: MPI_Request = 0x1000 as MPI_Request;
    const B: MPI_Request = 0x2000 as MPI_Request;

    /// A started packed receive in the shim's table (its system MPI request `native`).
    fn shim_recv(native: MPI_Request) -> MPI_Request {
        let p = PackedReq::for_tests(native, true, false);
        insert_packed(p, MPI_COMM_SELF(), Fid::MPI_Irecv)
    }

    #[test]
    fn wait_on_a_native_request_polls_it_only_while_schedules_are_outstanding() {
        let _g = fake::install(|c| match c.name {
            "test" => Ok(vec![1, 3, 8]),
            _ => Err(MPI_ERR_OTHER),
        });
        let calls = Cell::new(0);
        let native = || {
            calls.set(calls.get() + 1);
            MPI_ERR_TRUNCATE
        };
        let (mut r, mut st) = (A, MPI_Status::default());
        // SAFETY: a request and a status.
        assert_eq!(
            unsafe { MPI_Wait(&mut r, &mut st, &native) },
            MPI_ERR_TRUNCATE
        );
        assert!(
            fake::calls().is_empty(),
            "the system MPI's wait, its code unchanged"
        );
        let _active = pretend_active();
        // SAFETY: as above.
        assert_eq!(unsafe { MPI_Wait(&mut r, &mut st, &native) }, MPI_SUCCESS);
        assert_eq!(calls.get(), 1);
        let st_at = &st as *const MPI_Status as i64;
        assert_eq!(fake::calls()[0].args, [A as i64, st_at]);
        assert_eq!((r, st.MPI_SOURCE, st.MPI_TAG), (MPI_REQUEST_NULL(), 3, 8));
        // a failing test: the code as the system MPI gave it
        let _g = fake::install(|_| Err(MPI_ERR_TRUNCATE));
        let mut r = B;
        // SAFETY: as above.
        assert_eq!(
            unsafe { MPI_Wait(&mut r, IGNORE, &native) },
            MPI_ERR_TRUNCATE
        );
    }

    const IGNORE: *mut MPI_Status = MPI_STATUS_IGNORE;

    #[test]
    fn freeing_an_active_native_request_asks_its_state_and_keeps_the_handle() {
        let _g = fake::install(|c| match c.name {
            "request_get_status" => Ok(vec![0]),
            _ => Err(MPI_ERR_OTHER),
        });
        for code in [MPI_SUCCESS, MPI_ERR_REQUEST] {
            let mut r = A;
            // SAFETY: a request.
            assert_eq!(unsafe { MPI_Request_free(&mut r, &|| code) }, code);
        }
        // still running: not quarantined (nothing else asked)
        assert_eq!(fake::names(), ["request_get_status"; 2]);
        assert_eq!(fake::calls()[0].args, [A as i64]);
        let mut null = MPI_REQUEST_NULL();
        // SAFETY: a request.
        assert_eq!(
            unsafe { MPI_Request_free(&mut null, &|| MPI_ERR_REQUEST) },
            MPI_ERR_REQUEST
        );
        assert_eq!(fake::names().len(), 2, "a null request is not asked about");
    }

    #[test]
    fn testall_completes_shim_and_native_requests_together() {
        let _l = crate::core::request::tests::serial();
        let mut done = false;
        let _g = fake::install(move |c| match c.name {
            // the packed receive's own request completes at once
            "test" => Ok(vec![1, 5, 6]),
            "test_cancelled" => Ok(vec![0]),
            // the native one on the second try
            "testall" => {
                let r = vec![done as i64];
                done = true;
                Ok(r)
            }
            _ => Err(MPI_ERR_OTHER),
        });
        let mut reqs = [A, shim_recv(0x10)];
        let mut statuses = [MPI_Status::default(); 2];
        let mut flag = -1;
        let native = || MPI_ERR_OTHER;
        let (rp, sp) = (reqs.as_mut_ptr(), statuses.as_mut_ptr());
        // SAFETY: arrays of 2.
        assert_eq!(
            unsafe { MPI_Testall(2, rp, &mut flag, sp, &native) },
            MPI_SUCCESS
        );
        assert_eq!(flag, 0, "the native request is not complete");
        assert!(
            is_shim_request(reqs[1]),
            "nothing retired before all are done"
        );
        // SAFETY: arrays of 2.
        assert_eq!(
            unsafe { MPI_Testall(2, rp, &mut flag, sp, &native) },
            MPI_SUCCESS
        );
        assert_eq!(flag, 1);
        assert_eq!(reqs, [MPI_REQUEST_NULL(); 2]);
        assert_eq!((statuses[1].MPI_SOURCE, statuses[1].MPI_TAG), (5, 6));
        assert_eq!(statuses[1].MPI_ERROR, MPI_SUCCESS);
        let testalls: Vec<_> = fake::calls()
            .into_iter()
            .filter(|c| c.name == "testall")
            .collect();
        assert_eq!(
            testalls[0].args,
            [1],
            "only the native request goes to the system MPI"
        );
    }

    #[test]
    fn testany_and_testsome_report_positions_in_the_callers_array() {
        let _l = crate::core::request::tests::serial();
        let _g = fake::install(|c| match c.name {
            "test" => Ok(vec![0]),
            // the native sub-array is [A, B]: its entry 1 completes
            "testany" => Ok(vec![1, 1]),
            "testsome" => Ok(vec![1, 1]),
            _ => Err(MPI_ERR_OTHER),
        });
        let shim = shim_recv(0x10);
        let native = || MPI_ERR_OTHER;
        let mut reqs = [A, shim, B];
        let (mut index, mut flag) = (-5, -5);
        // SAFETY: an array of 3.
        let rc =
            unsafe { MPI_Testany(3, reqs.as_mut_ptr(), &mut index, &mut flag, IGNORE, &native) };
        assert_eq!((rc, index, flag), (MPI_SUCCESS, 2, 1));
        assert_eq!(reqs, [A, shim, MPI_REQUEST_NULL()]);
        let mut reqs = [A, shim, B];
        let (mut outcount, mut indices) = (-5, [-5; 3]);
        let (rp, ip) = (reqs.as_mut_ptr(), indices.as_mut_ptr());
        // SAFETY: arrays of 3.
        let rc = unsafe { MPI_Testsome(3, rp, &mut outcount, ip, MPI_STATUSES_IGNORE, &native) };
        assert_eq!((rc, outcount, indices[0]), (MPI_SUCCESS, 1, 2));
        assert_eq!(reqs, [A, shim, MPI_REQUEST_NULL()]);
        crate::core::request::remove(shim);
    }

    #[test]
    fn startall_starts_the_shims_requests_and_hands_the_rest_to_mpi() {
        let _l = crate::core::request::tests::serial();
        let p = PackedReq::for_tests(0x30, true, true);
        let shim = insert_packed(p.clone(), MPI_COMM_SELF(), Fid::MPI_Recv_init);
        for code in [MPI_SUCCESS, MPI_ERR_REQUEST] {
            let _g = fake::install(move |c| match c.name {
                "start" => Ok(vec![]),
                "startall" => {
                    if code == MPI_SUCCESS {
                        Ok(vec![])
                    } else {
                        Err(code)
                    }
                }
                _ => Err(MPI_ERR_OTHER),
            });
            p.retire();
            let mut reqs = [A, shim, B];
            // SAFETY: an array of 3.
            let rc = unsafe { MPI_Startall(3, reqs.as_mut_ptr(), &|| MPI_ERR_OTHER) };
            assert_eq!(rc, code, "the system MPI's code, unchanged");
            assert_eq!(fake::names(), ["start", "startall"]);
            assert_eq!(fake::calls()[0].args, [0x30]);
            assert_eq!(fake::calls()[1].args, [2], "the two native requests");
            assert!(p.is_active());
        }
        crate::core::request::remove(shim);
    }
}
