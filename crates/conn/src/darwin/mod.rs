//! The darwin (macOS, iOS) bind. The rules live in [`io`], written against the
//! `vpn_darwinbatch::Kernel` seam so that they compile everywhere and are unit-tested on Linux
//! against the simulated darwin kernel; the rest (Apple targets only) is glue: sockets, locks
//! and parking.

#[cfg(target_vendor = "apple")]
mod bind;
#[cfg(target_vendor = "apple")]
pub(crate) mod family;
pub(crate) mod io;

#[cfg(target_vendor = "apple")]
pub use bind::StdNetBind;
