//! The `ReceiveFuncStarter` contract: a bind that creates receive functions after `open` has the
//! device run them; oversized batches are split into device-sized containers in order; the device
//! refuses once the bind is closing; a closed reader ends alone.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vpn_conn::memory::{MemoryBind, MemoryNetwork};
use vpn_conn::{Bind, Endpoint, ReceiveFunc, ReceiveFuncStarter};
use vpn_device::{Device, Logger};
use vpn_tests::*;
use vpn_tun::memory::MemoryTun;

/// A bind whose traffic goes through an extra socket, opened during `open` and handed to the
/// device through the starter with a batch of 64 (the device's batch is 1).
struct StarterBind {
    main: MemoryBind,
    extra: MemoryBind,
    starter: Mutex<Option<Arc<dyn ReceiveFuncStarter>>>,
    refused: Mutex<u32>,
}

impl Bind for StarterBind {
    fn open(&self, port: u16) -> io::Result<(Vec<ReceiveFunc>, u16)> {
        let (fns, port) = self.main.open(port)?;
        let (mut extra, _) = self.extra.open(0)?;
        let starter = self
            .starter
            .lock()
            .unwrap()
            .clone()
            .expect("device installs a starter before open");
        // Started synchronously during open, as wireguard-go's test bind does.
        if !starter.start(extra.remove(0), 65536, 64) {
            *self.refused.lock().unwrap() += 1;
            self.extra.close()?;
        }
        Ok((fns, port))
    }
    fn close(&self) -> io::Result<()> {
        self.extra.close()?;
        self.main.close()
    }
    fn set_mark(&self, _: u32) -> io::Result<()> {
        Ok(())
    }
    fn send(&self, bufs: &[&[u8]], ep: &Endpoint) -> io::Result<()> {
        self.extra.send(bufs, ep)
    }
    fn batch_size(&self) -> usize {
        1
    }
    fn set_receive_func_starter(&self, s: Arc<dyn ReceiveFuncStarter>) {
        *self.starter.lock().unwrap() = Some(s);
    }
}

#[test]
fn started_readers_deliver_large_batches_split_and_in_order() {
    let net = MemoryNetwork::new();
    let a = Node::new(&net, 1, 64, None);
    let bind = Arc::new(StarterBind {
        main: net.bind("198.18.0.2".parse().unwrap(), 1),
        extra: net.bind("198.18.0.3".parse().unwrap(), 64),
        starter: Mutex::new(None),
        refused: Mutex::new(0),
    });
    let (tun, tun_b) = MemoryTun::new("started", 1420, 1);
    let b = Device::new(Arc::new(tun), bind.clone(), Logger::new("started"));
    let kb = private_key();
    b.ipc_set(&format!("private_key={}\nlisten_port=0\n", kb.to_hex()))
        .unwrap();
    b.up().unwrap();
    assert_eq!(b.batch_size(), 1);
    // The memory TUN's "up" event may have opened the bind once more: count, don't assume.
    let started = b.started_readers();
    assert!(started >= 1);
    let extra_addr = bind.extra.local_addr().unwrap();
    a.dev
        .ipc_set(&format!(
            "public_key={}\nendpoint={extra_addr}\nallowed_ip=100.64.0.2/32\n",
            kb.public_key().to_hex()
        ))
        .unwrap();
    b.ipc_set(&format!(
        "public_key={}\nendpoint={}\nallowed_ip=100.64.0.1/32\n",
        a.public_hex(),
        a.addr()
    ))
    .unwrap();
    let (s, d) = ("100.64.0.1".parse().unwrap(), "100.64.0.2".parse().unwrap());
    a.tun.inject(udp_packet(s, d, 1, 2, b"first"));
    let p = tun_b
        .recv(Duration::from_secs(5))
        .expect("handshake and first packet");
    assert_eq!(udp_payload(&p), b"first");
    const N: u32 = 3000;
    for i in 0..N {
        a.tun.inject(udp_packet(s, d, 1, 2, &i.to_be_bytes()));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = 0u32;
    while next < N && Instant::now() < deadline {
        let Some(p) = tun_b.recv(Duration::from_secs(2)) else {
            break;
        };
        let pl = udp_payload(&p);
        assert_eq!(
            u32::from_be_bytes([pl[0], pl[1], pl[2], pl[3]]),
            next,
            "in order"
        );
        next += 1;
    }
    assert_eq!(next, N);
    let st = b.stats();
    // Batches of up to 64 came in; none became a container larger than the device batch of 1.
    assert!(
        st.datagrams_per_recv() > 1.5,
        "the started reader returned batches: {st:?}"
    );
    assert!(
        st.inbound_containers >= u64::from(N),
        "split per packet: {st:?}"
    );

    // A rebind starts a reader for the new socket; the old one ended on "closed" by itself.
    b.bind_update().unwrap();
    assert_eq!(b.started_readers(), started + 1);
    // Once the device closes, the starter refuses.
    let starter = bind.starter.lock().unwrap().clone().unwrap();
    b.close();
    let (mut f, _) = net.bind("198.18.0.9".parse().unwrap(), 1).open(0).unwrap();
    assert!(
        !starter.start(f.remove(0), 2048, 1),
        "a closed device refuses new readers"
    );
    assert_eq!(*bind.refused.lock().unwrap(), 0);
}
