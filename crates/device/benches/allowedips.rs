//! Lookup cost of the allowed-IPs table (`vpn_device::allowedips`, built on `prefix-trie`'s
//! multibit trie) against the hand-written path-compressed binary radix trie of
//! `allowedips/binary_trie.rs` (wireguard-go's design), plus a bare `prefix_trie::PrefixMap` to show
//! what our per-peer bookkeeping adds to a lookup.
//!
//! Tables: 1 000 and 10 000 random IPv4 prefixes (/8../32) and 1 000 random IPv6 prefixes
//! (/16../128), spread over 100 peers. Two address streams per table: uniformly random addresses
//! (mostly caught by short prefixes, shallow walks) and addresses inside a random stored prefix
//! (what a data plane actually sees: traffic to and from its peers, deep walks).
//!
//! Run: `cargo bench -p vpn-device --bench allowedips -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use prefix_trie::PrefixMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vpn_device::allowedips::AllowedIps;

#[path = "allowedips/binary_trie.rs"]
mod binary_trie;

const PEERS: usize = 100;
/// Addresses per stream; a power of two so the index wraps with a mask.
const STREAM: usize = 4096;

/// Stand-in for the device's peer handle: an `Arc` compared by identity.
#[derive(Clone)]
struct PeerRef(Arc<usize>);

impl PartialEq for PeerRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PeerRef {}

impl std::hash::Hash for PeerRef {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        Arc::as_ptr(&self.0).hash(h);
    }
}

fn mask4(a: u32, cidr: u8) -> u32 {
    a & u32::MAX.checked_shl(32 - u32::from(cidr)).unwrap_or(0)
}

fn mask6(a: u128, cidr: u8) -> u128 {
    a & u128::MAX.checked_shl(128 - u32::from(cidr)).unwrap_or(0)
}

struct Fixture<K> {
    /// `(masked key, cidr, peer index)` in insertion order.
    prefixes: Vec<(K, u8, usize)>,
    random: Vec<K>,
    inside: Vec<K>,
}

fn fixture_v4(n: usize, seed: u64) -> Fixture<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let prefixes: Vec<(u32, u8, usize)> = (0..n)
        .map(|_| {
            let cidr = rng.gen_range(8..=32);
            (mask4(rng.gen(), cidr), cidr, rng.gen_range(0..PEERS))
        })
        .collect();
    let random = (0..STREAM).map(|_| rng.gen()).collect();
    let inside = (0..STREAM)
        .map(|_| {
            let (k, cidr, _) = prefixes[rng.gen_range(0..n)];
            k | (rng.gen::<u32>() & !u32::MAX.checked_shl(32 - u32::from(cidr)).unwrap_or(0))
        })
        .collect();
    Fixture {
        prefixes,
        random,
        inside,
    }
}

fn fixture_v6(n: usize, seed: u64) -> Fixture<u128> {
    let mut rng = StdRng::seed_from_u64(seed);
    let prefixes: Vec<(u128, u8, usize)> = (0..n)
        .map(|_| {
            let cidr = rng.gen_range(16..=128);
            (mask6(rng.gen(), cidr), cidr, rng.gen_range(0..PEERS))
        })
        .collect();
    let random = (0..STREAM).map(|_| rng.gen()).collect();
    let inside = (0..STREAM)
        .map(|_| {
            let (k, cidr, _) = prefixes[rng.gen_range(0..n)];
            k | (rng.gen::<u128>() & !u128::MAX.checked_shl(128 - u32::from(cidr)).unwrap_or(0))
        })
        .collect();
    Fixture {
        prefixes,
        random,
        inside,
    }
}

fn peers() -> Vec<PeerRef> {
    (0..PEERS).map(|i| PeerRef(Arc::new(i))).collect()
}

fn bench_v4(c: &mut Criterion, n: usize) {
    let fx = fixture_v4(n, n as u64);
    let peers = peers();
    let mut ours = AllowedIps::new();
    let mut radix = binary_trie::AllowedIps::new();
    let mut theirs: PrefixMap<(u32, u8), PeerRef> = PrefixMap::new();
    for &(k, cidr, p) in &fx.prefixes {
        let a = IpAddr::V4(Ipv4Addr::from(k));
        ours.insert(a, cidr, peers[p].clone()).expect("valid");
        radix.insert(a, cidr, peers[p].clone()).expect("valid");
        theirs.insert((k, cidr), peers[p].clone());
    }
    // All must agree before their speed means anything.
    for &a in fx.random.iter().chain(&fx.inside) {
        let x = ours.lookup_v4(a.to_be_bytes()).map(|p| *p.0);
        let y = theirs.get_lpm(&(a, 32)).map(|(_, p)| *p.0);
        let z = radix.lookup_v4(a.to_be_bytes()).map(|p| *p.0);
        assert_eq!(
            (x, x),
            (y, z),
            "implementations disagree on {}",
            Ipv4Addr::from(a)
        );
    }
    let mut g = c.benchmark_group(format!("allowedips_v4_{n}"));
    for (stream, addrs) in [("random", &fx.random), ("inside", &fx.inside)] {
        let bytes: Vec<[u8; 4]> = addrs.iter().map(|a| a.to_be_bytes()).collect();
        g.bench_with_input(BenchmarkId::new("ours", stream), &bytes, |b, bytes| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & (STREAM - 1);
                black_box(ours.lookup_v4(black_box(bytes[i])))
            })
        });
        g.bench_with_input(
            BenchmarkId::new("binary_radix", stream),
            &bytes,
            |b, bytes| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) & (STREAM - 1);
                    black_box(radix.lookup_v4(black_box(bytes[i])))
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("prefix_trie", stream),
            &bytes,
            |b, bytes| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) & (STREAM - 1);
                    let a = u32::from_be_bytes(black_box(bytes[i]));
                    black_box(theirs.get_lpm(&(a, 32)).map(|(_, p)| p))
                })
            },
        );
    }
    g.finish();
}

fn bench_v6(c: &mut Criterion, n: usize) {
    let fx = fixture_v6(n, 6000 + n as u64);
    let peers = peers();
    let mut ours = AllowedIps::new();
    let mut radix = binary_trie::AllowedIps::new();
    let mut theirs: PrefixMap<(u128, u8), PeerRef> = PrefixMap::new();
    for &(k, cidr, p) in &fx.prefixes {
        let a = IpAddr::V6(Ipv6Addr::from(k));
        ours.insert(a, cidr, peers[p].clone()).expect("valid");
        radix.insert(a, cidr, peers[p].clone()).expect("valid");
        theirs.insert((k, cidr), peers[p].clone());
    }
    for &a in fx.random.iter().chain(&fx.inside) {
        let x = ours.lookup_v6(a.to_be_bytes()).map(|p| *p.0);
        let y = theirs.get_lpm(&(a, 128)).map(|(_, p)| *p.0);
        let z = radix.lookup_v6(a.to_be_bytes()).map(|p| *p.0);
        assert_eq!(
            (x, x),
            (y, z),
            "implementations disagree on {}",
            Ipv6Addr::from(a)
        );
    }
    let mut g = c.benchmark_group(format!("allowedips_v6_{n}"));
    for (stream, addrs) in [("random", &fx.random), ("inside", &fx.inside)] {
        let bytes: Vec<[u8; 16]> = addrs.iter().map(|a| a.to_be_bytes()).collect();
        g.bench_with_input(BenchmarkId::new("ours", stream), &bytes, |b, bytes| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & (STREAM - 1);
                black_box(ours.lookup_v6(black_box(bytes[i])))
            })
        });
        g.bench_with_input(
            BenchmarkId::new("binary_radix", stream),
            &bytes,
            |b, bytes| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) & (STREAM - 1);
                    black_box(radix.lookup_v6(black_box(bytes[i])))
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("prefix_trie", stream),
            &bytes,
            |b, bytes| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) & (STREAM - 1);
                    let a = u128::from_be_bytes(black_box(bytes[i]));
                    black_box(theirs.get_lpm(&(a, 128)).map(|(_, p)| p))
                })
            },
        );
    }
    g.finish();
}

fn lookups(c: &mut Criterion) {
    bench_v4(c, 1_000);
    bench_v4(c, 10_000);
    bench_v6(c, 1_000);
}

criterion_group!(benches, lookups);
criterion_main!(benches);
