//! Lifecycle under stress: configuration changes during traffic, up/down storms, and close
//! leaving no thread behind.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_conn::memory::MemoryNetwork;
use vpn_tests::*;

#[test]
fn traffic_continues_while_configuration_changes() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 8, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let a = Arc::new(a);
    let b = Arc::new(b);
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicU64::new(0));
    let traffic = {
        let (a, b, stop, delivered) = (a.clone(), b.clone(), stop.clone(), delivered.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                a.send_udp(&b, false, b"load");
                b.send_udp(&a, true, b"load6");
                if b.recv(Duration::from_millis(50)).is_some() {
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
                let _ = a.recv(Duration::from_millis(1));
            }
        })
    };
    let start = Instant::now();
    let mut i = 0u32;
    while start.elapsed() < Duration::from_secs(3) {
        i += 1;
        let extra = private_key().public_key().to_hex();
        a.dev
            .ipc_set(&format!(
                "public_key={}\npersistent_keepalive_interval={}\n",
                b.public_hex(),
                i % 5
            ))
            .unwrap();
        a.dev
            .ipc_set(&format!(
                "public_key={extra}\nallowed_ip=10.{}.0.0/16\n",
                i % 200
            ))
            .unwrap();
        a.dev
            .ipc_set(&format!("public_key={extra}\nremove=true\n"))
            .unwrap();
        if i % 10 == 0 {
            b.dev.bind_update().unwrap();
            b.dev.send_keepalives_to_peers_with_current_keypair();
        }
        if i % 25 == 0 {
            a.dev.ipc_set(&format!("fwmark={}\n", i)).unwrap();
        }
        if i % 40 == 0 {
            // Swap a's private key away and back: every session is invalidated and redone.
            let other = private_key();
            a.dev
                .ipc_set(&format!("private_key={}\n", other.to_hex()))
                .unwrap();
            a.dev
                .ipc_set(&format!("private_key={}\n", a.key.to_hex()))
                .unwrap();
        }
        let _ = a.dev.ipc_get().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    assert!(
        delivered.load(Ordering::Relaxed) > 10,
        "traffic flowed during changes"
    );
    // b's port changed with every rebind; a learns it from b's next packet. The last private
    // key swap may have left a without a sending key and its initiation refused by b's
    // 20 ms flood limit (the swaps come faster than that): a sends the next one after
    // REKEY_TIMEOUT plus jitter, so each ping waits longer than that.
    let after_rekey_timeout = Duration::from_secs(10);
    assert!(ping(&b, &a, false, after_rekey_timeout));
    assert!(ping(&a, &b, false, after_rekey_timeout));
}

/// A TUN that breaks the contract: its event channel never disconnects, even after close.
struct StubbornTun {
    _events_tx: crossbeam_channel::Sender<vpn_tun::Event>,
    events_rx: crossbeam_channel::Receiver<vpn_tun::Event>,
    closed: AtomicBool,
}

impl vpn_tun::Device for StubbornTun {
    fn read(&self, _: &mut [&mut [u8]], _: &mut [usize], _: usize) -> std::io::Result<usize> {
        while !self.closed.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(std::io::Error::other("closed"))
    }
    fn write(&self, bufs: &mut [&mut [u8]], _: &[usize], _: usize) -> std::io::Result<usize> {
        Ok(bufs.len())
    }
    fn mtu(&self) -> std::io::Result<u32> {
        Ok(1420)
    }
    fn name(&self) -> std::io::Result<String> {
        Ok("stubborn".into())
    }
    fn events(&self) -> crossbeam_channel::Receiver<vpn_tun::Event> {
        self.events_rx.clone()
    }
    fn close(&self) -> std::io::Result<()> {
        self.closed.store(true, Ordering::Relaxed);
        Ok(())
    }
    fn batch_size(&self) -> usize {
        1
    }
}

#[test]
fn close_returns_even_if_the_tun_never_disconnects_its_events() {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let tun = Arc::new(StubbornTun {
        _events_tx: tx,
        events_rx: rx,
        closed: AtomicBool::new(false),
    });
    let net = MemoryNetwork::new();
    let dev = vpn_device::Device::new(
        tun,
        Arc::new(net.bind("198.18.0.1".parse().unwrap(), 1)),
        vpn_device::Logger::new("stubborn"),
    );
    dev.up().unwrap();
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        dev.close();
        let _ = done_tx.send(());
    });
    assert!(
        done_rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "close hung"
    );
}
