//! Data-path ChaCha20-Poly1305 backends compared at WireGuard packet sizes, plus the cost of a
//! whole `Keypair::seal` through the `aead` seam. The results pick the backend in
//! `src/aead.rs`; they are recorded in `docs/design-notes.md` ("Data-path AEAD").
//!
//! Sizes: one packet of 64, 576 and 1420 bytes, and a 64 KiB GSO batch (46 packets of 1420
//! bytes, each sealed or opened under its own counter, as the device does for one TUN read).
//!
//! Run: `cargo bench -p vpn-proto --bench aead -- --warm-up-time 1 --measurement-time 3`
//!
//! Variants worth a second run of the same binary or build:
//! - OpenSSL with its AVX-512 and IFMA code masked off:
//!   `OPENSSL_ia32cap=":~0xD0230000" cargo bench ... -- openssl`
//!   (CPUID leaf 7 EBX: AVX512F, DQ, IFMA, CD, BW, VL).
//! - RustCrypto's `chacha20` 0.10 AVX-512 backend (a cfg, so its own target directory):
//!   `RUSTFLAGS="--cfg chacha20_avx512" CARGO_TARGET_DIR=target/aead-avx512 cargo bench ... -- rustcrypto-0.11`

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

/// (packet length, packets per iteration, label).
const SIZES: [(usize, usize, &str); 4] = [
    (64, 1, "64"),
    (576, 1, "576"),
    (1420, 1, "1420"),
    (1420, 46, "gso-46x1420"),
];
const KEY: [u8; 32] = [0x5a; 32];
const COUNTER: u64 = 0x0102_0304;

fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

/// One backend: seal in place returning the tag, open in place with a separate tag.
trait Backend {
    fn name(&self) -> &'static str;
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16];
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool;
}

struct Ring(ring::aead::LessSafeKey);

impl Backend for Ring {
    fn name(&self) -> &'static str {
        "ring"
    }
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

/// The seam itself, whatever backend it picked on this CPU.
struct Seam(vpn_proto::aead::TransportKey);

impl Backend for Seam {
    fn name(&self) -> &'static str {
        "seam"
    }
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
        self.0.seal_in_place(counter, buf)
    }
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
        self.0.open_in_place(counter, buf, tag).is_ok()
    }
}

#[cfg(target_os = "linux")]
struct AwsLc(aws_lc_rs::aead::LessSafeKey);

#[cfg(target_os = "linux")]
impl Backend for AwsLc {
    fn name(&self) -> &'static str {
        "aws-lc-rs"
    }
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

/// OpenSSL 3's EVP ChaCha20-Poly1305 (the system libcrypto), both contexts made once per key:
/// a packet costs an IV set, one in-place update, final and the tag.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod ossl {
    use openssl::cipher::Cipher;
    use openssl::cipher_ctx::CipherCtx;
    use std::cell::RefCell;

    pub struct Reused {
        enc: RefCell<CipherCtx>,
        dec: RefCell<CipherCtx>,
    }

    impl Reused {
        pub fn new(key: &[u8; 32]) -> Self {
            let mut enc = CipherCtx::new().expect("ctx");
            enc.encrypt_init(Some(Cipher::chacha20_poly1305()), Some(key), None)
                .expect("init");
            let mut dec = CipherCtx::new().expect("ctx");
            dec.decrypt_init(Some(Cipher::chacha20_poly1305()), Some(key), None)
                .expect("init");
            Reused {
                enc: RefCell::new(enc),
                dec: RefCell::new(dec),
            }
        }
    }

    fn seal_with(ctx: &mut CipherCtx, iv: &[u8; 12], buf: &mut [u8]) -> [u8; 16] {
        ctx.encrypt_init(None, None, Some(iv)).expect("iv");
        let n = ctx.cipher_update_inplace(buf, buf.len()).expect("update");
        debug_assert_eq!(n, buf.len());
        ctx.cipher_final(&mut []).expect("final");
        let mut tag = [0u8; 16];
        ctx.tag(&mut tag).expect("tag");
        tag
    }

    fn open_with(ctx: &mut CipherCtx, iv: &[u8; 12], buf: &mut [u8], tag: &[u8; 16]) -> bool {
        ctx.decrypt_init(None, None, Some(iv)).expect("iv");
        ctx.cipher_update_inplace(buf, buf.len()).expect("update");
        ctx.set_tag(tag).expect("set tag");
        ctx.cipher_final(&mut []).is_ok()
    }

    impl super::Backend for Reused {
        fn name(&self) -> &'static str {
            "openssl-ctx-per-key"
        }
        fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
            seal_with(
                &mut self.enc.borrow_mut(),
                &super::nonce_bytes(counter),
                buf,
            )
        }
        fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
            open_with(
                &mut self.dec.borrow_mut(),
                &super::nonce_bytes(counter),
                buf,
                tag,
            )
        }
    }

    /// A new `EVP_CIPHER_CTX` for every packet, keyed from scratch: what a shareable key
    /// without any per-thread state would cost.
    pub struct PerPacket(pub [u8; 32]);

    impl super::Backend for PerPacket {
        fn name(&self) -> &'static str {
            "openssl-ctx-per-packet"
        }
        fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
            let mut ctx = CipherCtx::new().expect("ctx");
            let iv = super::nonce_bytes(counter);
            ctx.encrypt_init(Some(Cipher::chacha20_poly1305()), Some(&self.0), Some(&iv))
                .expect("init");
            seal_with(&mut ctx, &iv, buf)
        }
        fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
            let mut ctx = CipherCtx::new().expect("ctx");
            let iv = super::nonce_bytes(counter);
            ctx.decrypt_init(Some(Cipher::chacha20_poly1305()), Some(&self.0), Some(&iv))
                .expect("init");
            open_with(&mut ctx, &iv, buf, tag)
        }
    }
}

struct RustCrypto010(chacha20poly1305::ChaCha20Poly1305);

impl Backend for RustCrypto010 {
    fn name(&self) -> &'static str {
        "rustcrypto-0.10"
    }
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

/// `chacha20poly1305` 0.11 on `chacha20` 0.10 (AVX-512 when built with `--cfg chacha20_avx512`)
/// and `poly1305` 0.9 (AVX2 at most).
struct RustCrypto011(chacha20poly1305_011::ChaCha20Poly1305);

impl Backend for RustCrypto011 {
    fn name(&self) -> &'static str {
        if cfg!(chacha20_avx512) {
            "rustcrypto-0.11-avx512"
        } else {
            "rustcrypto-0.11"
        }
    }
    fn seal(&self, counter: u64, buf: &mut [u8]) -> [u8; 16] {
        use chacha20poly1305_011::AeadInOut;
        let n = nonce_bytes(counter);
        let tag = self
            .0
            .encrypt_inout_detached(&n.into(), &[], buf.into())
            .expect("seal");
        tag.into()
    }
    fn open(&self, counter: u64, buf: &mut [u8], tag: &[u8; 16]) -> bool {
        use chacha20poly1305_011::AeadInOut;
        let n = nonce_bytes(counter);
        self.0
            .decrypt_inout_detached(&n.into(), &[], buf.into(), &(*tag).into())
            .is_ok()
    }
}

/// About 64 KiB of packets per timed batch of opens: each open needs a fresh copy of the
/// ciphertext (made untimed), and a batch of that size stays in L2 like a received batch.
fn open_batch(bytes: usize) -> u64 {
    (65536 / bytes).max(1) as u64
}

fn bench_backend(c: &mut Criterion, backend: &dyn Backend) {
    let mut seal = c.benchmark_group("seal");
    for (len, packets, label) in SIZES {
        seal.throughput(Throughput::Bytes((len * packets) as u64));
        let mut buf = vec![0x17u8; len * packets];
        seal.bench_with_input(BenchmarkId::new(backend.name(), label), &len, |b, _| {
            b.iter(|| {
                for (i, p) in buf.chunks_exact_mut(len).enumerate() {
                    black_box(backend.seal(COUNTER + i as u64, black_box(p)));
                }
            })
        });
    }
    seal.finish();

    let mut open = c.benchmark_group("open");
    for (len, packets, label) in SIZES {
        open.throughput(Throughput::Bytes((len * packets) as u64));
        let mut sealed = vec![0x17u8; len * packets];
        let tags: Vec<[u8; 16]> = sealed
            .chunks_exact_mut(len)
            .enumerate()
            .map(|(i, p)| backend.seal(COUNTER + i as u64, p))
            .collect();
        open.bench_with_input(BenchmarkId::new(backend.name(), label), &len, |b, _| {
            // A fresh copy of the ciphertext per iteration (copy not timed), so every open
            // authenticates successfully, as on the real receive path.
            b.iter_batched_ref(
                || sealed.clone(),
                |buf| {
                    for (i, p) in buf.chunks_exact_mut(len).enumerate() {
                        assert!(backend.open(COUNTER + i as u64, black_box(p), &tags[i]));
                    }
                },
                BatchSize::NumIterations(open_batch(len * packets)),
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
    bench_backend(c, &Seam(vpn_proto::aead::TransportKey::new(&KEY)));
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        bench_backend(c, &ossl::Reused::new(&KEY));
        bench_backend(c, &ossl::PerPacket(KEY));
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
            &RustCrypto010(chacha20poly1305::ChaCha20Poly1305::new((&KEY).into())),
        );
    }
    {
        use chacha20poly1305_011::KeyInit;
        bench_backend(
            c,
            &RustCrypto011(chacha20poly1305_011::ChaCha20Poly1305::new(&KEY.into())),
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
