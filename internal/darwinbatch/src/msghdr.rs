//! `struct msghdr_x`, the header of one datagram in a `recvmsg_x`/`sendmsg_x` batch.
//!
//! The struct is not in a public SDK header (it is in xnu's `sys/socket.h` under
//! `PRIVATE`), so its layout is pinned here by compile-time assertions: 56 bytes on both 64-bit
//! Apple targets, every field at its offset. A wrong layout fails the build of every Apple
//! target (`make check-darwin`) instead of corrupting I/O. The same assertions hold on every
//! 64-bit host, where the simulated kernel uses the struct.

use core::ffi::{c_int, c_void};
use core::ptr;

/// `struct iovec`: one buffer of a message.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IoVec {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

impl IoVec {
    pub(crate) const EMPTY: IoVec = IoVec {
        base: ptr::null_mut(),
        len: 0,
    };

    /// The buffer length the kernel was given (or, after a receive, wrote).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `struct msghdr_x` (xnu `bsd/sys/socket.h`):
///
/// ```c
/// struct msghdr_x {
///     void         *msg_name;       /* optional address */
///     socklen_t     msg_namelen;    /* size of address */
///     struct iovec *msg_iov;        /* scatter/gather array */
///     int           msg_iovlen;     /* # elements in msg_iov */
///     void         *msg_control;    /* ancillary data, see below */
///     socklen_t     msg_controllen; /* ancillary data buffer len */
///     int           msg_flags;      /* flags on received message */
///     size_t        msg_datalen;    /* byte length of buffer in msg_iov */
/// };
/// ```
///
/// Fields are crate-private: only the batch code stages headers (pointing into the buffers of
/// the call in progress), so no caller can hand the kernel a header with stale pointers.
#[repr(C)]
#[derive(Debug)]
pub struct MsgHdrX {
    pub(crate) name: *mut c_void,
    pub(crate) namelen: u32,
    pub(crate) iov: *mut IoVec,
    pub(crate) iovlen: c_int,
    pub(crate) control: *mut c_void,
    pub(crate) controllen: u32,
    pub(crate) flags: c_int,
    pub(crate) datalen: usize,
}

impl MsgHdrX {
    pub(crate) const EMPTY: MsgHdrX = MsgHdrX {
        name: ptr::null_mut(),
        namelen: 0,
        iov: ptr::null_mut(),
        iovlen: 0,
        control: ptr::null_mut(),
        controllen: 0,
        flags: 0,
        datalen: 0,
    };

    /// `msg_flags` as the kernel left them (MSG_TRUNC after a truncated datagram).
    pub fn flags(&self) -> c_int {
        self.flags
    }

    /// `msg_datalen`: after a receive, the datagram's length.
    pub fn datalen(&self) -> usize {
        self.datalen
    }

    /// `msg_namelen`.
    pub fn namelen(&self) -> u32 {
        self.namelen
    }
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<MsgHdrX>() == 56);
    assert!(offset_of!(MsgHdrX, name) == 0);
    assert!(offset_of!(MsgHdrX, namelen) == 8);
    assert!(offset_of!(MsgHdrX, iov) == 16);
    assert!(offset_of!(MsgHdrX, iovlen) == 24);
    assert!(offset_of!(MsgHdrX, control) == 32);
    assert!(offset_of!(MsgHdrX, controllen) == 40);
    assert!(offset_of!(MsgHdrX, flags) == 44);
    assert!(offset_of!(MsgHdrX, datalen) == 48);
    assert!(size_of::<IoVec>() == 16);
    assert!(offset_of!(IoVec, base) == 0);
    assert!(offset_of!(IoVec, len) == 8);
};

// On Apple targets the iovec must also match the SDK's.
#[cfg(target_vendor = "apple")]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<IoVec>() == size_of::<libc::iovec>());
    assert!(offset_of!(IoVec, base) == offset_of!(libc::iovec, iov_base));
    assert!(offset_of!(IoVec, len) == offset_of!(libc::iovec, iov_len));
    // socklen_t is what namelen/controllen are.
    assert!(size_of::<libc::socklen_t>() == size_of::<u32>());
};
