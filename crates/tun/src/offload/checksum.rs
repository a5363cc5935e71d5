//! The Internet checksum (RFC 1071) with wide accumulation.
//!
//! Sums are kept unfolded in a `u64`: a ones'-complement sum may be taken over any word width
//! and in any byte order and folded at the end, so the data is summed 32 bits at a time into
//! 64-bit lanes with no carries to chase, and the parts are joined with an end-around carry.
//! Unfolded sums seed later computations (the pseudo-header sum seeds the transport checksum).

/// Adds `b` to `a` with the carry wrapped around (ones'-complement addition on 64 bits).
#[inline]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, c) = a.overflowing_add(b);
    s + u64::from(c)
}

/// The ones'-complement sum of `data` (as big-endian 16-bit words, an odd last byte padded with
/// zero) plus `initial`, not folded to 16 bits.
pub fn checksum_no_fold(data: &[u8], initial: u64) -> u64 {
    sum_parts(data, initial, PART)
}

/// Bytes summed at once: the word sums below cannot overflow on 1 GiB (under 2^60).
const PART: usize = 1 << 30;

/// `checksum_no_fold` over parts of `part` bytes (even, so word boundaries stay put). A part's
/// sum may be any value congruent to its 16-bit word sum modulo 0xffff that is zero only for
/// all-zero data, so that the fold tells a zero sum (0x0000) from a negative zero (0xffff).
fn sum_parts(data: &[u8], initial: u64, part: usize) -> u64 {
    data.chunks(part)
        .fold(initial, |acc, p| add_carry(acc, sum_words(p)))
}

/// An unfolded ones'-complement sum of `data` as big-endian 16-bit words. tun-rs has it with
/// AVX2 on x86_64 (38 GB/s on 1388 bytes here, against 24 GB/s for [`sum_words_portable`]
/// and 16 GB/s for the carry chain it replaced); GRO that verifies checksums sums every byte
/// it merges.
/// (tun-rs does not promise this function in its semver API, `#[doc(hidden)]`; the tests below
/// compare it with the textbook sum, so a change of behaviour on an upgrade shows.)
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(target_env = "ohos")))]
fn sum_words(data: &[u8]) -> u64 {
    tun_rs::checksum_no_fold(data, 0)
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(target_env = "ohos"))))]
fn sum_words(data: &[u8]) -> u64 {
    sum_words_portable(data)
}

/// [`sum_words`] in portable code: 32-bit little-endian words summed into four 64-bit lanes,
/// which needs no carry handling and vectorizes, folded and byte-swapped at the end (a
/// ones'-complement sum is byte-order independent, RFC 1071 section 2(B)).
#[cfg_attr(
    all(target_os = "linux", target_arch = "x86_64", not(target_env = "ohos")),
    allow(dead_code)
)]
fn sum_words_portable(data: &[u8]) -> u64 {
    let mut lanes = [0u64; 4];
    let mut add = |c: &[u8]| {
        for (lane, w) in lanes.iter_mut().zip(c.chunks_exact(4)) {
            *lane += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        }
    };
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        add(c);
    }
    // Chunks start at even offsets, so zero padding on the right keeps 16-bit alignment.
    let rest = chunks.remainder();
    let mut tail = [0u8; 16];
    tail[..rest.len()].copy_from_slice(rest);
    add(&tail);
    let sum = lanes.iter().fold(0, |acc, &lane| add_carry(acc, lane));
    u64::from(fold(sum).swap_bytes())
}

/// Folds an unfolded sum to 16 bits (not inverted).
pub fn fold(sum: u64) -> u16 {
    let mut s = (sum & 0xffff_ffff) + (sum >> 32);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The folded (not inverted) ones'-complement sum of `data` plus `initial`.
pub fn checksum(data: &[u8], initial: u64) -> u16 {
    fold(checksum_no_fold(data, initial))
}

/// The unfolded sum of the TCP/UDP pseudo-header: both addresses (4 or 16 bytes each), the
/// protocol number and the transport length.
pub fn pseudo_header_no_fold(proto: u8, src: &[u8], dst: &[u8], transport_len: u16) -> u64 {
    let seed = u64::from(proto) + u64::from(transport_len);
    checksum_no_fold(dst, checksum_no_fold(src, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook algorithm, 16 bits at a time, as an independent oracle.
    fn naive(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let hi = u32::from(pair[0]) << 8;
            let lo = pair.get(1).map_or(0, |b| u32::from(*b));
            sum += hi | lo;
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn matches_rfc1071_example() {
        // RFC 1071 section 3: 0001 f203 f4f5 f6f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&data, 0), 0xddf2);
    }

    #[test]
    fn matches_naive_sum_for_all_lengths_and_seeds() {
        let mut x: u32 = 0x1234_5678;
        let mut data = Vec::new();
        for len in 0..300usize {
            data.clear();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                data.push(x as u8);
            }
            assert_eq!(checksum(&data, 0), naive(&data), "len {len}");
            assert_eq!(
                fold(sum_words_portable(&data)),
                naive(&data),
                "portable, len {len}"
            );
            // A seed adds like one more word.
            let seed = u64::from(x & 0xffff);
            let mut with_seed = naive(&data) as u32 + (x & 0xffff);
            with_seed = (with_seed & 0xffff) + (with_seed >> 16);
            assert_eq!(checksum(&data, seed), with_seed as u16, "len {len} seeded");
        }
    }

    #[test]
    fn parts_join_with_the_carry_wrapped() {
        let mut x: u32 = 0x9e37_79b9;
        let data: Vec<u8> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for len in [0, 1, 7, 8, 999, 1000] {
            for part in [2, 6, 64] {
                for seed in [0, 0xffff, u64::MAX - 1, u64::MAX] {
                    assert_eq!(
                        fold(sum_parts(&data[..len], seed, part)),
                        fold(sum_parts(&data[..len], seed, PART)),
                        "len {len}, parts of {part}, seed {seed:#x}"
                    );
                }
            }
        }
        assert_eq!(fold(sum_parts(&[0xff; 10], 0, 4)), naive(&[0xff; 10]));
    }

    #[test]
    fn all_ones_input_does_not_lose_carries() {
        let data = [0xffu8; 65_535];
        // u64::MAX is a ones'-complement zero: adding it must not change a non-zero sum.
        assert_eq!(checksum(&data, u64::MAX), naive(&data));
        assert_eq!(checksum(&data, 0), naive(&data));
        assert_eq!(fold(sum_words_portable(&data)), naive(&data));
    }

    #[test]
    fn pseudo_header_matches_explicit_layout() {
        let src = [100, 64, 0, 1];
        let dst = [100, 64, 0, 2];
        let mut explicit = Vec::new();
        explicit.extend_from_slice(&src);
        explicit.extend_from_slice(&dst);
        explicit.extend_from_slice(&[0, 6, 0x05, 0xdc]);
        assert_eq!(
            fold(pseudo_header_no_fold(6, &src, &dst, 1500)),
            naive(&explicit)
        );
    }
}
