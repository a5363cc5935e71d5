//! Kernel constants that the `libc` crate defines for Linux but not for Android: the same kernel
//! ABI, so on Android they are defined here with the value of the kernel header named in each
//! comment; on Linux they are libc's.

#[cfg(target_os = "linux")]
pub(crate) use libc::{
    RTMGRP_IPV4_IFADDR, RTMGRP_IPV4_ROUTE, RTMGRP_IPV6_IFADDR, RTMGRP_IPV6_ROUTE, RTMGRP_LINK,
    SCHED_OTHER,
};

#[cfg(target_os = "android")]
pub(crate) use android::*;

#[cfg(target_os = "android")]
mod android {
    use libc::c_int;

    /// `RTMGRP_LINK` (linux/rtnetlink.h): 1.
    pub(crate) const RTMGRP_LINK: c_int = 0x1;
    /// `RTMGRP_IPV4_IFADDR` (linux/rtnetlink.h): 0x10.
    pub(crate) const RTMGRP_IPV4_IFADDR: c_int = 0x10;
    /// `RTMGRP_IPV4_ROUTE` (linux/rtnetlink.h): 0x40.
    pub(crate) const RTMGRP_IPV4_ROUTE: c_int = 0x40;
    /// `RTMGRP_IPV6_IFADDR` (linux/rtnetlink.h): 0x100.
    pub(crate) const RTMGRP_IPV6_IFADDR: c_int = 0x100;
    /// `RTMGRP_IPV6_ROUTE` (linux/rtnetlink.h): 0x400.
    pub(crate) const RTMGRP_IPV6_ROUTE: c_int = 0x400;
    /// `SCHED_OTHER`: `SCHED_NORMAL` (linux/sched.h), 0; bionic's sched.h names it so.
    pub(crate) const SCHED_OTHER: c_int = libc::SCHED_NORMAL;
}
