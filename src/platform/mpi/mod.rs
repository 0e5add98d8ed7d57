//! Layer: platform. May use: nothing.
//!
//! The safe seam over the MPI calls the shim makes for itself (rsmpi's `raw.rs` idea): each
//! function wraps one `PMPI_*` call, checks its return code and gives `Result<_, MpiError>`,
//! so the layers above keep `unsafe` only where they touch the application's buffers.
//! Functions that take such a buffer stay `unsafe fn` (the caller vouches for it, MPI-4.0
//! §3.2.2); the others are safe: handles are plain values, and MPI reports a bad one as an
//! error code (the shim's internal communicators return errors, `platform::errors`).
//!
//! In unit tests (`cfg(test)`) every function first asks the [`fake`] installed on the
//! calling thread, which answers with a scripted result and records the call, so that the
//! files above can be tested without an MPI library. Release builds call `PMPI_*` directly:
//! the fake costs nothing there.
//!
//! The functions are grouped by chapter of the standard: [`p2p`] (point-to-point, requests,
//! probes), [`comm`] (communicators, groups, attributes), [`dtype`] (datatypes), [`rma`]
//! (one-sided), [`coll`] (the few collectives the shim issues itself).

use core::ffi::c_int;

use crate::platform::abi::MPI_SUCCESS;

pub mod coll;
pub mod comm;
pub mod dtype;
pub mod p2p;
pub mod rma;

/// An MPI error code returned by a call the shim made (not yet an error class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiError(pub c_int);

impl MpiError {
    /// The code, as an MPI function returns it.
    pub fn code(self) -> c_int {
        self.0
    }
}

impl std::fmt::Display for MpiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MPI error code {}", self.0)
    }
}

/// What the seam's functions return.
pub type MpiResult<T> = Result<T, MpiError>;

/// `MPI_SUCCESS` or the error.
#[inline(always)]
pub fn check(rc: c_int) -> MpiResult<()> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError(rc))
    }
}

/// Asks the test double first (unit tests only): `seam!("name", [args as i64...])` returns
/// from the calling function with the fake's answer mapped by `$map` (the answer's words:
/// `|v: Vec<i64>| ...`) when a fake is installed on this thread.
macro_rules! fake_first {
    ($name:literal, [$($arg:expr),* $(,)?], $map:expr) => {
        #[cfg(test)]
        {
            #[allow(clippy::unnecessary_cast)]
            let args: &[i64] = &[$(($arg) as i64),*];
            if let Some(r) = $crate::platform::mpi::fake::answer($name, args) {
                #[allow(clippy::redundant_closure_call)]
                return r.map(|v| ($map)(v)).map_err($crate::platform::mpi::MpiError);
            }
        }
    };
}
pub(crate) use fake_first;

/// The test double: a per-thread script of answers and a record of calls.
#[cfg(test)]
pub mod fake {
    use core::ffi::c_int;
    use std::cell::RefCell;

    /// One call as the fake saw it: the function's name (without `MPI_`, lower case as in
    /// the seam) and its arguments as integers (handles, counts, addresses).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Call {
        pub name: &'static str,
        pub args: Vec<i64>,
    }

    /// Answers a call: `Ok(words)` (the outputs in the function's order) or `Err(code)`.
    pub type Script = Box<dyn FnMut(&Call) -> Result<Vec<i64>, c_int>>;

    thread_local! {
        static SCRIPT: RefCell<Option<Script>> = const { RefCell::new(None) };
        static CALLS: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
    }

    /// Installs `script` on this thread until the returned guard drops.
    pub fn install(script: impl FnMut(&Call) -> Result<Vec<i64>, c_int> + 'static) -> Guard {
        SCRIPT.with(|s| *s.borrow_mut() = Some(Box::new(script)));
        CALLS.with(|c| c.borrow_mut().clear());
        Guard
    }

    /// Removes the script when dropped.
    pub struct Guard;

    impl Drop for Guard {
        fn drop(&mut self) {
            SCRIPT.with(|s| *s.borrow_mut() = None);
        }
    }

    /// The calls made since `install`, in order.
    pub fn calls() -> Vec<Call> {
        CALLS.with(|c| c.borrow().clone())
    }

    /// The names of the calls made since `install`, in order.
    pub fn names() -> Vec<&'static str> {
        CALLS.with(|c| c.borrow().iter().map(|c| c.name).collect())
    }

    /// The answers that make a communicator the shim has no state for yet an
    /// intracommunicator of two ranks seen from rank 0, without the shim's attributes
    /// (`None` for every other call): the start of most scripts.
    pub fn rank0_of_two(name: &str) -> Option<Vec<i64>> {
        Some(match name {
            "comm_get_attr" => vec![0, 0],
            "comm_test_inter" => vec![0],
            "comm_rank" => vec![0],
            "comm_size" => vec![2],
            _ => return None,
        })
    }

    pub(crate) fn answer(name: &'static str, args: &[i64]) -> Option<Result<Vec<i64>, c_int>> {
        let call = Call {
            name,
            args: args.to_vec(),
        };
        let r = SCRIPT.with(|s| s.borrow_mut().as_mut().map(|f| f(&call)))?;
        CALLS.with(|c| c.borrow_mut().push(call));
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::abi::{MPI_COMM_WORLD, MPI_ERR_COMM};

    #[test]
    fn the_fake_answers_and_records() {
        let _g = fake::install(|c| match c.name {
            "comm_rank" => Ok(vec![3]),
            _ => Err(MPI_ERR_COMM),
        });
        assert_eq!(comm::rank(MPI_COMM_WORLD()), Ok(3));
        assert_eq!(comm::size(MPI_COMM_WORLD()), Err(MpiError(MPI_ERR_COMM)));
        assert_eq!(fake::names(), ["comm_rank", "comm_size"]);
        assert_eq!(fake::calls()[0].args, [MPI_COMM_WORLD() as i64]);
    }
}
