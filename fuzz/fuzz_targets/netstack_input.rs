//! Fuzzes vpn-netstack's ingress: whatever comes out of the tunnel (the input as one packet,
//! then cut into packets by 2-byte big-endian lengths, then again at an offset) must not
//! panic the stack, which has a TCP listener and a UDP socket open, and the stack stays
//! within its socket and memory caps. The TUN's read is never called: it blocks while the
//! stack has nothing to send.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_tun::Device;

fuzz_target!(|data: &[u8]| {
    let (tun, net) =
        vpn_netstack::create_net_tun(&["100.64.0.1".parse().unwrap()], &[], 1420).unwrap();
    let _listener = net.listen_tcp("100.64.0.1:80".parse().unwrap()).unwrap();
    let _udp = net.bind_udp("100.64.0.1:53".parse().unwrap()).unwrap();

    let mut whole = data.to_vec();
    let _ = tun.write(&mut [whole.as_mut_slice()], &[data.len()], 0);

    let mut packets = split(data);
    let sizes: Vec<usize> = packets.iter().map(Vec::len).collect();
    let mut bufs: Vec<&mut [u8]> = packets.iter_mut().map(|p| p.as_mut_slice()).collect();
    let _ = tun.write(&mut bufs, &sizes, 0);

    // The same packets behind a 4-byte offset, as the device writes them; a size that runs
    // past its buffer is skipped by the TUN, not read out of bounds.
    let mut shifted: Vec<Vec<u8>> = split(data)
        .into_iter()
        .map(|p| [vec![0u8; 4], p].concat())
        .collect();
    let mut sizes: Vec<usize> = shifted.iter().map(|p| p.len() - 4).collect();
    if let Some(s) = sizes.first_mut() {
        *s += usize::from(data.first().copied().unwrap_or(0) & 1);
    }
    let mut bufs: Vec<&mut [u8]> = shifted.iter_mut().map(|p| p.as_mut_slice()).collect();
    let _ = tun.write(&mut bufs, &sizes, 4);

    let stats = net.stats();
    assert!(stats.sockets <= stats.max_sockets);
    assert!(stats.memory_used <= stats.memory_budget);
    let _ = tun.close();
});

/// `[len: u16 BE][packet]...`, at most 128 packets; a short last one takes what is left.
fn split(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while data.len() >= 2 && out.len() < 128 {
        let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let take = len.min(rest.len());
        out.push(rest[..take].to_vec());
        data = &rest[take..];
    }
    out
}
