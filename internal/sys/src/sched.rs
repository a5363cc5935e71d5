//! The calling thread's scheduling policy: `SCHED_BATCH` while the data plane moves bulk
//! traffic, `SCHED_OTHER` otherwise (`vpn_device::sched` decides when).
//!
//! A `SCHED_BATCH` thread keeps its nice value and its share of the CPU; it only does not
//! preempt the running thread when it wakes up (sched(7)). An unprivileged thread may switch
//! between the two. Threads inherit the policy of the thread that starts them.

use std::io;

/// Sets the calling thread's policy to `SCHED_BATCH` (`batch`) or back to `SCHED_OTHER`.
pub fn set_batch(batch: bool) -> io::Result<()> {
    let policy = if batch {
        libc::SCHED_BATCH
    } else {
        crate::abi::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid, initialized sched_param that outlives the call; pid 0 is the
    // calling thread, and the kernel only reads the struct.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's policy, as `sched_getscheduler` reports it.
pub fn policy() -> io::Result<libc::c_int> {
    // SAFETY: no pointers; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getscheduler(0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_switches_to_batch_and_back() {
        std::thread::spawn(|| {
            assert_eq!(policy().unwrap(), crate::abi::SCHED_OTHER);
            set_batch(true).unwrap();
            assert_eq!(policy().unwrap(), libc::SCHED_BATCH);
            // A thread it starts inherits the policy (so its user must set it explicitly).
            let child = std::thread::spawn(|| policy().unwrap()).join().unwrap();
            assert_eq!(child, libc::SCHED_BATCH, "inherited by a new thread");
            set_batch(false).unwrap();
            assert_eq!(policy().unwrap(), crate::abi::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
