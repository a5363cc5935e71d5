//! Data-path ChaCha20-Poly1305 backends compared at WireGuard packet sizes, plus the cost of a
//! whole `Keypair::seal` through the `aead` seam. The results pick the backend in
//! `src/aead.rs`; they are recorded in `docs/design-notes.md` ("Data-path AEAD").
//!
//! Run: `cargo bench -p vpn-proto --bench aead -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

const SIZES: [usize; 3] = [64, 576, 1420];
const KEY: [u8; 32] = [0x5a; 32];
const COUNTER: u64 = 0x0102_0304;

fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

/// One backend: seal in place returning the tag, open in place with a separate tag.
trait Backend {
    const NAME: &'static str;
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16];
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool;
}

struct Ring(ring::aead::LessSafeKey);

impl Backend for Ring {
    const NAME: &'static str = "ring";
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
        use ring::aead::{Aad, Nonce};
        let tag = self
            .0
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce_bytes(counter)),
                Aad::empty(),
                buf,
            )
            .expect("seal");
        tag.as_ref().try_into().expect("16-byte tag")
    }
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
        use ring::aead::{Aad, Nonce, Tag};
        self.0
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce_bytes(counter)),
                Aad::empty(),
                Tag::from(*tag),
                buf,
                0..,
            )
            .is_ok()
    }
}

#[cfg(target_os = "linux")]
struct AwsLc(aws_lc_rs::aead::LessSafeKey);

#[cfg(target_os = "linux")]
impl Backend for AwsLc {
    const NAME: &'static str = "aws-lc-rs";
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
        use aws_lc_rs::aead::{Aad, Nonce};
        let tag = self
            .0
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce_bytes(counter)),
                Aad::empty(),
                buf,
            )
            .expect("seal");
        tag.as_ref().try_into().expect("16-byte tag")
    }
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
        use aws_lc_rs::aead::{Aad, Nonce};
        self.0
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce_bytes(counter)),
                Aad::empty(),
                tag,
                buf,
            )
            .is_ok()
    }
}

struct RustCrypto(chacha20poly1305::ChaCha20Poly1305);

impl Backend for RustCrypto {
    const NAME: &'static str = "rustcrypto";
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
        use chacha20poly1305::aead::AeadInPlace;
        let tag = self
            .0
            .encrypt_in_place_detached((&nonce_bytes(counter)).into(), &[], buf)
            .expect("seal");
        tag.into()
    }
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
        use chacha20poly1305::aead::AeadInPlace;
        self.0
            .decrypt_in_place_detached((&nonce_bytes(counter)).into(), &[], buf, tag.into())
            .is_ok()
    }
}

fn bench_backend<B: Backend>(c: &mut Criterion, backend: &B) {
    let mut seal = c.benchmark_group("seal");
    for size in SIZES {
        seal.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0x17u8; size];
        seal.bench_with_input(BenchmarkId::new(B::NAME, size), &size, |b, _| {
            b.iter(|| black_box(backend.seal(COUNTER, black_box(&mut buf))))
        });
    }
    seal.finish();

    let mut open = c.benchmark_group("open");
    for size in SIZES {
        open.throughput(Throughput::Bytes(size as u64));
        let mut sealed = vec![0x17u8; size];
        let tag = backend.seal(COUNTER, &mut sealed);
        open.bench_with_input(BenchmarkId::new(B::NAME, size), &size, |b, _| {
            // A fresh copy of the ciphertext per iteration (copy not timed), so every open
            // authenticates successfully, as on the real receive path.
            b.iter_batched_ref(
                || sealed.clone(),
                |buf| assert!(backend.open(COUNTER, black_box(buf), &tag)),
                BatchSize::SmallInput,
            )
        });
    }
    open.finish();
}

fn backends(c: &mut Criterion) {
    {
        use ring::aead::{LessSafeKey, UnboundKey, CHACHA20_POLY1305};
        let k = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &KEY).expect("key"));
        bench_backend(c, &Ring(k));
    }
    #[cfg(target_os = "linux")]
    {
        use aws_lc_rs::aead::{LessSafeKey, UnboundKey, CHACHA20_POLY1305};
        let k = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &KEY).expect("key"));
        bench_backend(c, &AwsLc(k));
    }
    {
        use chacha20poly1305::KeyInit;
        bench_backend(
            c,
            &RustCrypto(chacha20poly1305::ChaCha20Poly1305::new((&KEY).into())),
        );
    }
}

/// A whole transport message through the seam: padding, header, encryption, tag.
fn keypair_seal(c: &mut Criterion) {
    use vpn_proto::transport::{padded_len, Keypair};
    let kp = Keypair::new(
        &KEY,
        &[0xa5; 32],
        1,
        2,
        true,
        vpn_proto::time::Instant::ZERO,
    );
    let mut group = c.benchmark_group("keypair_seal");
    let len = 1420;
    let padded = padded_len(len, 1420);
    group.throughput(Throughput::Bytes(len as u64));
    let mut buf = vec![0x17u8; 16 + padded + 16];
    group.bench_function(
        BenchmarkId::new(vpn_proto::aead::backend_name(), len),
        |b| {
            b.iter(|| {
                let counter = kp.reserve_nonces(1);
                black_box(
                    kp.seal(counter, black_box(&mut buf), len, padded)
                        .expect("seal"),
                )
            })
        },
    );
    group.finish();
}

criterion_group!(benches, backends, keypair_seal);
criterion_main!(benches);
