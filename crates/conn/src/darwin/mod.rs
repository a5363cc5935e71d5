//! The darwin (macOS, iOS) bind. The rules live in [`io`], written against the
//! `vpn_darwinbatch::Kernel` seam so that they compile everywhere and are unit-tested on Linux
//! against the simulated darwin kernel; the rest is glue: sockets, locks and parking. The glue
//! also compiles into this crate's Linux tests, where [`kernel`] is `vpn-sys`'s `PosixKernel`
//! (real sockets, single-datagram calls only), so that it runs before a Mac sees it.

mod bind;
pub(crate) mod family;
pub(crate) mod io;
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests;

pub use bind::StdNetBind;

use vpn_darwinbatch::Kernel;

/// The kernel the darwin bind's sockets talk to: libSystem on Apple targets; in the Linux
/// tests, this host's kernel for single-datagram calls (batch calls unsupported).
pub(crate) fn kernel() -> &'static dyn Kernel {
    #[cfg(target_vendor = "apple")]
    {
        vpn_darwinbatch::system()
    }
    #[cfg(not(target_vendor = "apple"))]
    {
        &vpn_sys::posix_kernel::PosixKernel
    }
}
