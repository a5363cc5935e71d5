//! Up/down storm, then close: no thread left behind. Its own test binary, so no other test's
//! threads come and go while it counts.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;
use vpn_conn::memory::MemoryNetwork;
use vpn_tests::*;

#[test]
fn up_down_storm_then_close_leaves_no_thread() {
    let baseline = thread_count();
    {
        let net = MemoryNetwork::new();
        let (a, b) = pair(&net, 1, None);
        for n in [&a, &b] {
            let other = if std::ptr::eq(n, &a) { &b } else { &a };
            n.dev
                .ipc_set(&format!(
                    "public_key={}\npersistent_keepalive_interval=1\n",
                    other.public_hex()
                ))
                .unwrap();
        }
        let a = Arc::new(a);
        let b = Arc::new(b);
        let mut hs = Vec::new();
        for n in [a.clone(), b.clone()] {
            hs.push(std::thread::spawn(move || {
                for _ in 0..10 {
                    for _ in 0..50 {
                        n.dev.up().unwrap();
                        n.dev.down().unwrap();
                    }
                }
                n.dev.up().unwrap();
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        assert!(a.dev.is_up() && b.dev.is_up());
        // b's port changed with every up: tell a where b is now.
        a.add_peer(&b, "");
        // Both sides initiated at once (crossing initiations): the jittered retransmit after
        // 5 s settles it, as in wireguard-go.
        let ok = ping(&a, &b, false, Duration::from_secs(20));
        assert!(
            ok,
            "a: {:?}\nb: {:?}\na cfg: {}\nb cfg: {}\nb addr {}",
            a.dev.stats(),
            b.dev.stats(),
            a.dev.ipc_get().unwrap(),
            b.dev.ipc_get().unwrap(),
            b.addr()
        );
        a.dev.close();
        b.dev.close();
        assert!(a.dev.is_closed());
        assert!(a.dev.up().is_err());
    }
    if let Some(base) = baseline {
        wait_for(Duration::from_secs(10), || thread_count().unwrap() <= base);
        // Other tests in this binary run in parallel; with the default harness each test has its
        // own thread, so compare against the count taken at the start of this test.
        assert!(
            thread_count().unwrap() <= base,
            "threads before {base}, after {:?}",
            thread_count()
        );
    }
}
