//! Seeded fault injection for the [`MemoryNetwork`](super::MemoryNetwork): loss, duplication,
//! corruption, reordering and delay, each at a rate of its own, so scenario tests can run
//! tunnels over a network that misbehaves the way real ones do, and a failing run reproduces
//! from its seed.
//!
//! The injector decides a *fate* for every datagram it is given: lost or not, one byte
//! corrupted or not, duplicated or not, held back behind later datagrams (reordered) or delayed
//! for a while. Decisions come from a small deterministic generator with one stream per
//! *link* (source address → destination address), seeded from the configuration's seed and
//! the two IP addresses: what happens to the `n`-th datagram on a link depends only on the seed
//! and `n`, never on how threads sending on other links interleave. Every datagram draws the
//! same number of values whatever the rates, so turning one fault up does not reshuffle the
//! others.
//!
//! The deciding part ([`Link`]) is pure (a datagram in, what to deliver now or later out); the
//! network does the delivering and the delay line's clock is real time.
//!
//! ```
//! use vpn_conn::memory::{faults::FaultConfig, MemoryNetwork};
//! let faults = FaultConfig::builder(7)
//!     .loss(0.1)
//!     .duplication(0.02)
//!     .reordering(0.01, 1..=64)
//!     .build()
//!     .expect("valid rates");
//! let net = MemoryNetwork::new();
//! net.set_faults(Some(faults));
//! ```

use parking_lot::{Condvar, Mutex};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{MemoryNetwork, NetInner};

/// Decides which datagrams the faults apply to: `(from, to, bytes)`. The others pass untouched
/// and do not count on their link.
pub type Matcher = Arc<dyn Fn(SocketAddr, SocketAddr, &[u8]) -> bool + Send + Sync>;

/// What the injector does to the datagrams it matches. Built with [`FaultConfig::builder`];
/// immutable once built, so a configuration that was checked stays valid.
#[derive(Clone)]
pub struct FaultConfig {
    seed: u64,
    loss: f64,
    duplication: f64,
    corruption: f64,
    reordering: Option<Reordering>,
    delay: Option<Delay>,
    matcher: Option<Matcher>,
}

/// Hold a datagram back until `depth` later datagrams of its link went by.
#[derive(Clone, Debug, PartialEq)]
struct Reordering {
    rate: f64,
    depth: RangeInclusive<u64>,
}

/// Deliver a datagram after a real-time pause.
#[derive(Clone, Debug, PartialEq)]
struct Delay {
    rate: f64,
    by: RangeInclusive<Duration>,
}

impl fmt::Debug for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultConfig")
            .field("seed", &self.seed)
            .field("loss", &self.loss)
            .field("duplication", &self.duplication)
            .field("corruption", &self.corruption)
            .field("reordering", &self.reordering)
            .field("delay", &self.delay)
            .field("matcher", &self.matcher.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl FaultConfig {
    /// Starts a configuration with no faults, whose decisions derive from `seed`.
    pub fn builder(seed: u64) -> FaultConfigBuilder {
        FaultConfigBuilder {
            config: FaultConfig {
                seed,
                loss: 0.0,
                duplication: 0.0,
                corruption: 0.0,
                reordering: None,
                delay: None,
                matcher: None,
            },
        }
    }

    /// The seed the decisions derive from (print it with a failure to reproduce the run).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn matches(&self, from: SocketAddr, to: SocketAddr, data: &[u8]) -> bool {
        self.matcher.as_ref().is_none_or(|m| m(from, to, data))
    }
}

/// Builds a [`FaultConfig`]; every rate is a probability per datagram in `0.0..=1.0`.
#[must_use]
pub struct FaultConfigBuilder {
    config: FaultConfig,
}

impl FaultConfigBuilder {
    /// Loses each datagram with probability `rate`.
    pub fn loss(mut self, rate: f64) -> Self {
        self.config.loss = rate;
        self
    }

    /// Delivers each datagram twice (back to back) with probability `rate`.
    pub fn duplication(mut self, rate: f64) -> Self {
        self.config.duplication = rate;
        self
    }

    /// Flips bits of one byte of each datagram with probability `rate` (a duplicate is a copy
    /// of the corrupted datagram: the damage happened before the network copied it).
    pub fn corruption(mut self, rate: f64) -> Self {
        self.config.corruption = rate;
        self
    }

    /// Holds each datagram back with probability `rate` until `depth` (drawn from the range)
    /// later datagrams of its link went by, then delivers it. A held datagram whose link goes
    /// quiet waits for [`MemoryNetwork::flush_faults`](super::MemoryNetwork::flush_faults).
    pub fn reordering(mut self, rate: f64, depth: RangeInclusive<u64>) -> Self {
        self.config.reordering = Some(Reordering { rate, depth });
        self
    }

    /// Delivers each datagram with probability `rate` after a real-time pause drawn from `by`
    /// (datagrams sent meanwhile overtake it).
    pub fn delay(mut self, rate: f64, by: RangeInclusive<Duration>) -> Self {
        self.config.delay = Some(Delay { rate, by });
        self
    }

    /// Applies the faults only to datagrams for which `matcher(from, to, bytes)` holds.
    pub fn matching(
        mut self,
        matcher: impl Fn(SocketAddr, SocketAddr, &[u8]) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config.matcher = Some(Arc::new(matcher));
        self
    }

    /// Checks the rates and ranges.
    pub fn build(self) -> Result<FaultConfig, FaultConfigError> {
        let c = &self.config;
        check_rate("loss", c.loss)?;
        check_rate("duplication", c.duplication)?;
        check_rate("corruption", c.corruption)?;
        if let Some(r) = &c.reordering {
            check_rate("reordering", r.rate)?;
            if r.depth.is_empty() {
                return Err(FaultConfigError::EmptyRange("reordering"));
            }
            if *r.depth.start() == 0 {
                return Err(FaultConfigError::ZeroDepth);
            }
        }
        if let Some(d) = &c.delay {
            check_rate("delay", d.rate)?;
            if d.by.is_empty() {
                return Err(FaultConfigError::EmptyRange("delay"));
            }
        }
        Ok(self.config)
    }
}

fn check_rate(fault: &'static str, rate: f64) -> Result<(), FaultConfigError> {
    if (0.0..=1.0).contains(&rate) {
        Ok(())
    } else {
        Err(FaultConfigError::RateOutOfRange { fault, rate })
    }
}

/// Why a [`FaultConfigBuilder`] refused to build.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultConfigError {
    /// A rate outside `0.0..=1.0` (or NaN).
    RateOutOfRange {
        /// Which fault.
        fault: &'static str,
        /// The rate given.
        rate: f64,
    },
    /// A range with nothing in it (start after end).
    EmptyRange(&'static str),
    /// A reordering depth of 0 would not reorder anything.
    ZeroDepth,
}

impl fmt::Display for FaultConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultConfigError::RateOutOfRange { fault, rate } => {
                write!(f, "{fault} rate {rate} is not a probability in 0..=1")
            }
            FaultConfigError::EmptyRange(fault) => write!(f, "{fault} range is empty"),
            FaultConfigError::ZeroDepth => f.write_str("reordering depth must start at 1"),
        }
    }
}

impl std::error::Error for FaultConfigError {}

/// What the injector did so far (a snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Datagrams the configuration matched.
    pub matched: u64,
    /// Matched datagrams lost.
    pub lost: u64,
    /// Matched datagrams delivered twice.
    pub duplicated: u64,
    /// Matched datagrams with a corrupted byte.
    pub corrupted: u64,
    /// Matched datagrams held back behind later ones.
    pub reordered: u64,
    /// Matched datagrams delayed.
    pub delayed: u64,
    /// Every copy of a held-back or delayed datagram handed to its receiver, in that order.
    pub late: Vec<Late>,
}

/// A held-back or delayed datagram, as it was handed to its receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Late {
    /// Its link's source.
    pub from: SocketAddr,
    /// Its link's destination.
    pub to: SocketAddr,
    /// Its number among the matched datagrams of its link (from 0, in sending order).
    pub seq: u64,
    /// How far behind the newest datagram delivered on its link before it: a receiver that
    /// numbers datagrams in sending order (a nonce counter) saw it this far behind the highest.
    pub behind: u64,
}

impl FaultStats {
    /// Late copies delivered more than `n` behind the newest datagram of their link.
    pub fn late_beyond(&self, n: u64) -> u64 {
        self.late.iter().filter(|l| l.behind > n).count() as u64
    }
}

/// One draw of the generator per fault, whatever the configuration.
#[derive(Debug, Default, PartialEq, Eq)]
struct Fate {
    lost: bool,
    /// (offset as a fraction of the length, nonzero XOR mask)
    corrupt: Option<(u64, u8)>,
    duplicate: bool,
    hold: Option<u64>,
    delay: Option<Duration>,
}

/// SplitMix64: tiny, fast, and good enough to spread test faults evenly.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `rate`; always consumes one value.
    fn chance(&mut self, rate: f64) -> bool {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        unit < rate
    }

    /// A value of `range` (not empty); always consumes one value.
    fn pick(&mut self, range: &RangeInclusive<u64>) -> u64 {
        let span = range.end() - range.start();
        let r = self.next();
        range.start() + if span == u64::MAX { r } else { r % (span + 1) }
    }

    fn fate(&mut self, c: &FaultConfig) -> Fate {
        let lost = self.chance(c.loss);
        let corrupt = self.chance(c.corruption);
        let (at, mask) = (self.next(), (self.next() % 255) as u8 + 1);
        let duplicate = self.chance(c.duplication);
        let hold = c
            .reordering
            .as_ref()
            .map_or((false, 0), |r| (self.chance(r.rate), self.pick(&r.depth)));
        let delay = c.delay.as_ref().map_or((false, 0), |d| {
            let nanos = |t: &Duration| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let by = nanos(d.by.start())..=nanos(d.by.end());
            (self.chance(d.rate), self.pick(&by))
        });
        Fate {
            lost,
            corrupt: corrupt.then_some((at, mask)),
            duplicate,
            hold: hold.0.then_some(hold.1),
            delay: delay.0.then_some(Duration::from_nanos(delay.1)),
        }
    }
}

/// The generator's seed for one link: the configuration's seed mixed with both IP addresses,
/// so links draw independent streams. Ports stay out: the network hands them out in the order
/// binds open, which threads decide, and a seed must replay the same faults.
fn link_seed(seed: u64, from: SocketAddr, to: SocketAddr) -> u64 {
    // FNV-1a over the addresses (std's hasher is randomly keyed per process).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for a in [from, to] {
        match a.ip() {
            IpAddr::V4(ip) => eat(&ip.octets()),
            IpAddr::V6(ip) => eat(&ip.octets()),
        }
    }
    let mut mix = Rng(seed ^ h);
    mix.next()
}

/// A datagram the link wants delivered: now, or after a pause.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Step {
    /// Its number on the link (copies share it).
    pub(crate) seq: u64,
    pub(crate) data: Vec<u8>,
    /// Held back or delayed: its displacement is recorded on delivery.
    pub(crate) late: bool,
    /// Deliver after this pause instead of now.
    pub(crate) after: Option<Duration>,
}

struct Held {
    release_at: u64,
    seq: u64,
    data: Vec<u8>,
    copies: usize,
}

/// The faults of one link: which datagram comes next, what is held back, what was delivered.
pub(crate) struct Link {
    rng: Rng,
    /// Matched datagrams offered so far (the next one's number).
    next: u64,
    /// The highest number delivered so far.
    newest: Option<u64>,
    held: Vec<Held>,
}

impl Link {
    fn new(seed: u64) -> Link {
        Link {
            rng: Rng(seed),
            next: 0,
            newest: None,
            held: Vec::new(),
        }
    }

    /// Decides the fate of the next datagram; returns what to deliver, in order: its copies
    /// (unless lost, held or delayed), then the held datagrams it was the last to wait for.
    fn offer(&mut self, config: &FaultConfig, mut data: Vec<u8>, counts: &Counters) -> Vec<Step> {
        let seq = self.next;
        self.next += 1;
        counts.matched.fetch_add(1, Ordering::Relaxed);
        let fate = self.rng.fate(config);
        let mut out = Vec::new();
        if fate.lost {
            counts.lost.fetch_add(1, Ordering::Relaxed);
        } else {
            if let Some((at, mask)) = fate.corrupt.filter(|_| !data.is_empty()) {
                let i = (at % data.len() as u64) as usize;
                data[i] ^= mask;
                counts.corrupted.fetch_add(1, Ordering::Relaxed);
            }
            let copies = 1 + usize::from(fate.duplicate);
            if fate.duplicate {
                counts.duplicated.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(depth) = fate.hold {
                counts.reordered.fetch_add(1, Ordering::Relaxed);
                self.held.push(Held {
                    release_at: seq + depth,
                    seq,
                    data,
                    copies,
                });
            } else {
                if fate.delay.is_some() {
                    counts.delayed.fetch_add(1, Ordering::Relaxed);
                }
                push_copies(&mut out, seq, data, copies, fate.delay);
            }
        }
        self.release(|h| h.release_at <= seq, &mut out);
        out
    }

    /// Moves the held datagrams `due` selects to `out`, in the order they became due.
    fn release(&mut self, due: impl Fn(&Held) -> bool, out: &mut Vec<Step>) {
        if self.held.is_empty() {
            return;
        }
        let (mut now, keep): (Vec<Held>, Vec<Held>) = self.held.drain(..).partition(&due);
        self.held = keep;
        now.sort_by_key(|h| (h.release_at, h.seq));
        for h in now {
            let at = out.len();
            push_copies(out, h.seq, h.data, h.copies, None);
            for s in &mut out[at..] {
                s.late = true;
            }
        }
    }

    /// Every held datagram, to be delivered now.
    fn release_all(&mut self) -> Vec<Step> {
        let mut out = Vec::new();
        self.release(|_| true, &mut out);
        out
    }

    /// How many numbers datagram `seq` is behind the newest delivered one.
    fn behind(&self, seq: u64) -> u64 {
        self.newest.map_or(0, |n| n.saturating_sub(seq))
    }

    /// Records that datagram `seq` was delivered.
    fn delivered(&mut self, seq: u64) {
        self.newest = Some(self.newest.map_or(seq, |n| n.max(seq)));
    }
}

fn push_copies(
    out: &mut Vec<Step>,
    seq: u64,
    data: Vec<u8>,
    copies: usize,
    after: Option<Duration>,
) {
    let late = after.is_some();
    if copies > 1 {
        out.push(Step {
            seq,
            data: data.clone(),
            late,
            after,
        });
    }
    out.push(Step {
        seq,
        data,
        late,
        after,
    });
}

#[derive(Default)]
struct Counters {
    matched: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    corrupted: AtomicU64,
    reordered: AtomicU64,
    delayed: AtomicU64,
    late: Mutex<Vec<Late>>,
}

type LinkRef = Arc<Mutex<Link>>;

/// The injector a network runs with: the configuration, one [`Link`] per address pair, the
/// delay line.
pub(crate) struct Faults {
    config: FaultConfig,
    links: Mutex<HashMap<(SocketAddr, SocketAddr), LinkRef>>,
    counts: Arc<Counters>,
    delay_line: Mutex<Option<Arc<DelayLine>>>,
}

impl Faults {
    pub(crate) fn new(config: FaultConfig) -> Faults {
        Faults {
            config,
            links: Mutex::new(HashMap::new()),
            counts: Arc::default(),
            delay_line: Mutex::new(None),
        }
    }

    pub(crate) fn matches(&self, from: SocketAddr, to: SocketAddr, data: &[u8]) -> bool {
        self.config.matches(from, to, data)
    }

    fn link(&self, from: SocketAddr, to: SocketAddr) -> LinkRef {
        let seed = self.config.seed;
        self.links
            .lock()
            .entry((from, to))
            .or_insert_with(|| Arc::new(Mutex::new(Link::new(link_seed(seed, from, to)))))
            .clone()
    }

    /// Sends a matched datagram through its link's faults. Returns false if it was lost (or no
    /// bind took it), true if delivered or still in flight.
    ///
    /// The link stays locked while its datagrams are handed to the receiver, so they arrive in
    /// the order the link decided.
    pub(crate) fn offer(
        &self,
        net: &MemoryNetwork,
        from: SocketAddr,
        to: SocketAddr,
        data: Vec<u8>,
    ) -> bool {
        let link = self.link(from, to);
        let mut l = link.lock();
        let steps = l.offer(&self.config, data, &self.counts);
        let seq = l.next - 1;
        let mut taken = false;
        let mut in_flight = l.held.iter().any(|h| h.seq == seq);
        for s in steps {
            let own = s.seq == seq;
            if let Some(after) = s.after {
                let item = Delayed {
                    due: Instant::now() + after,
                    order: 0,
                    from,
                    to,
                    step: s,
                    link: link.clone(),
                    counts: self.counts.clone(),
                };
                self.delay_line(net).push(item);
                in_flight |= own;
            } else {
                taken |= deliver_step(net, &mut l, &self.counts, from, to, s) && own;
            }
        }
        taken || in_flight
    }

    /// Delivers everything held back or delayed, now.
    pub(crate) fn flush(&self, net: &MemoryNetwork) {
        let line = self.delay_line.lock().clone();
        if let Some(line) = line {
            line.flush(net);
        }
        let links: Vec<_> = self
            .links
            .lock()
            .iter()
            .map(|(k, l)| (*k, l.clone()))
            .collect();
        for ((from, to), link) in links {
            let mut l = link.lock();
            for s in l.release_all() {
                deliver_step(net, &mut l, &self.counts, from, to, s);
            }
        }
    }

    pub(crate) fn stats(&self) -> FaultStats {
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultStats {
            matched: get(&c.matched),
            lost: get(&c.lost),
            duplicated: get(&c.duplicated),
            corrupted: get(&c.corrupted),
            reordered: get(&c.reordered),
            delayed: get(&c.delayed),
            late: c.late.lock().clone(),
        }
    }

    fn delay_line(&self, net: &MemoryNetwork) -> Arc<DelayLine> {
        self.delay_line
            .lock()
            .get_or_insert_with(|| DelayLine::start(net.downgrade()))
            .clone()
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        if let Some(line) = self.delay_line.lock().take() {
            line.stop();
        }
    }
}

fn deliver_step(
    net: &MemoryNetwork,
    link: &mut Link,
    counts: &Counters,
    from: SocketAddr,
    to: SocketAddr,
    s: Step,
) -> bool {
    // Recorded before the receiver can see it, so a test that saw it sees the record too.
    if s.late {
        counts.late.lock().push(Late {
            from,
            to,
            seq: s.seq,
            behind: link.behind(s.seq),
        });
    }
    let ok = net.deliver_now(from, to, s.data);
    if ok {
        link.delivered(s.seq);
    }
    ok
}

/// Datagrams waiting out a delay, and the thread that delivers them when it is over.
struct DelayLine {
    state: Mutex<DelayState>,
    wake: Condvar,
}

#[derive(Default)]
struct DelayState {
    queue: BinaryHeap<Delayed>,
    order: u64,
    stop: bool,
}

struct Delayed {
    due: Instant,
    order: u64,
    from: SocketAddr,
    to: SocketAddr,
    step: Step,
    link: LinkRef,
    counts: Arc<Counters>,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.order) == (other.due, other.order)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Delayed {
    /// Reversed: the heap's top is the earliest due.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due, other.order).cmp(&(self.due, self.order))
    }
}

impl Delayed {
    fn deliver(self, net: &MemoryNetwork) {
        let mut l = self.link.lock();
        deliver_step(net, &mut l, &self.counts, self.from, self.to, self.step);
    }
}

impl DelayLine {
    /// Starts the delivering thread; it ends when the line is stopped or the network is gone.
    fn start(net: Weak<NetInner>) -> Arc<Self> {
        let line = Arc::new(DelayLine {
            state: Mutex::new(DelayState::default()),
            wake: Condvar::new(),
        });
        let weak: Weak<DelayLine> = Arc::downgrade(&line);
        std::thread::Builder::new()
            .name("memnet-delay".into())
            .spawn(move || {
                while let Some(line) = weak.upgrade() {
                    let Some(d) = line.next_due() else { return };
                    drop(line);
                    let Some(inner) = net.upgrade() else { return };
                    d.deliver(&MemoryNetwork { inner });
                }
            })
            .expect("spawn the delay line");
        line
    }

    /// Waits for the earliest datagram to be due; None once stopped.
    fn next_due(&self) -> Option<Delayed> {
        let mut st = self.state.lock();
        loop {
            if st.stop {
                return None;
            }
            match st.queue.peek().map(|d| d.due) {
                Some(due) if due <= Instant::now() => return st.queue.pop(),
                Some(due) => {
                    self.wake.wait_until(&mut st, due);
                }
                None => self.wake.wait(&mut st),
            }
        }
    }

    fn push(&self, mut item: Delayed) {
        let mut st = self.state.lock();
        st.order += 1;
        item.order = st.order;
        st.queue.push(item);
        self.wake.notify_one();
    }

    /// Delivers everything waiting, in the order it was due.
    fn flush(&self, net: &MemoryNetwork) {
        let waiting = std::mem::take(&mut self.state.lock().queue).into_sorted_vec();
        // `into_sorted_vec` is ascending by `Ord`, which is reversed: the latest due first.
        for d in waiting.into_iter().rev() {
            d.deliver(net);
        }
    }

    fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bind, Endpoint};

    const N: u64 = 20_000;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Datagram `i`: its number in 8 bytes, then filler.
    fn datagram(i: u64) -> Vec<u8> {
        let mut d = i.to_be_bytes().to_vec();
        d.extend((0..24).map(|j| (i as u8).wrapping_add(j)));
        d
    }

    /// Offers datagrams 0..n to one link, delivers every step at once (delays included) and
    /// flushes what is held at the end; returns what arrived, in order, and the counts.
    fn run(config: &FaultConfig, n: u64) -> (Vec<Vec<u8>>, FaultStats) {
        let faults = Faults::new(config.clone());
        let mut link = Link::new(link_seed(
            config.seed,
            addr("10.0.0.1:1"),
            addr("10.0.0.2:2"),
        ));
        let mut got = Vec::new();
        let mut take = |link: &mut Link, steps: Vec<Step>| {
            for s in steps {
                if s.late {
                    let (from, to) = (addr("10.0.0.1:1"), addr("10.0.0.2:2"));
                    let behind = link.behind(s.seq);
                    let late = Late {
                        from,
                        to,
                        seq: s.seq,
                        behind,
                    };
                    faults.counts.late.lock().push(late);
                }
                link.delivered(s.seq);
                got.push(s.data);
            }
        };
        for i in 0..n {
            let steps = link.offer(config, datagram(i), &faults.counts);
            take(&mut link, steps);
        }
        let rest = link.release_all();
        take(&mut link, rest);
        (got, faults.stats())
    }

    fn number(d: &[u8]) -> u64 {
        u64::from_be_bytes(d[..8].try_into().unwrap())
    }

    fn share(part: u64, whole: u64) -> f64 {
        part as f64 / whole as f64
    }

    #[test]
    fn builder_refuses_rates_outside_zero_to_one_and_empty_ranges() {
        let b = || FaultConfig::builder(1);
        assert!(b().loss(1.0).duplication(0.0).build().is_ok());
        assert_eq!(
            b().loss(1.5).build().unwrap_err(),
            FaultConfigError::RateOutOfRange {
                fault: "loss",
                rate: 1.5
            }
        );
        assert!(b().corruption(f64::NAN).build().is_err());
        assert!(b().duplication(-0.1).build().is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 5..=4;
        assert_eq!(
            b().reordering(0.1, empty).build().unwrap_err(),
            FaultConfigError::EmptyRange("reordering")
        );
        assert_eq!(
            b().reordering(0.1, 0..=4).build().unwrap_err(),
            FaultConfigError::ZeroDepth
        );
        let ms = Duration::from_millis;
        assert_eq!(
            b().delay(0.1, ms(5)..=ms(1)).build().unwrap_err(),
            FaultConfigError::EmptyRange("delay")
        );
        let e = b().delay(2.0, ms(1)..=ms(5)).build().unwrap_err();
        assert_eq!(e.to_string(), "delay rate 2 is not a probability in 0..=1");
    }

    #[test]
    fn no_faults_deliver_everything_in_order_untouched() {
        let config = FaultConfig::builder(3).build().unwrap();
        let (got, st) = run(&config, 1000);
        assert_eq!(got, (0..1000).map(datagram).collect::<Vec<_>>());
        assert_eq!(st.matched, 1000);
        assert_eq!(st.lost + st.duplicated + st.corrupted + st.reordered, 0);
    }

    #[test]
    fn loss_drops_about_the_configured_share_and_the_survivors_keep_their_order() {
        for seed in 0..8 {
            let config = FaultConfig::builder(seed).loss(0.25).build().unwrap();
            let (got, st) = run(&config, N);
            let lost = share(st.lost, N);
            assert!((0.23..0.27).contains(&lost), "seed {seed}: lost {lost}");
            assert_eq!(got.len() as u64, N - st.lost);
            assert!(got.windows(2).all(|w| number(&w[0]) < number(&w[1])));
        }
    }

    #[test]
    fn the_same_seed_decides_the_same_fates_and_another_seed_differs() {
        let config = |seed| {
            FaultConfig::builder(seed)
                .loss(0.1)
                .duplication(0.1)
                .corruption(0.1)
                .reordering(0.1, 1..=50)
                .build()
                .unwrap()
        };
        let (a, sa) = run(&config(42), 5000);
        let (b, sb) = run(&config(42), 5000);
        assert_eq!((a.clone(), sa), (b, sb));
        let (c, _) = run(&config(43), 5000);
        assert_ne!(a, c);
    }

    #[test]
    fn each_link_draws_its_own_stream() {
        let (x, y) = (addr("10.0.0.1:1"), addr("10.0.0.2:2"));
        assert_ne!(link_seed(9, x, y), link_seed(9, y, x));
        assert_ne!(link_seed(9, x, y), link_seed(10, x, y));
        // Ports, which the network hands out in whatever order binds open, do not count.
        assert_eq!(link_seed(9, x, y), link_seed(9, addr("10.0.0.1:7"), y));
    }

    #[test]
    fn turning_one_fault_up_does_not_reshuffle_the_others() {
        let lossy = FaultConfig::builder(5).loss(0.2).build().unwrap();
        let both = FaultConfig::builder(5)
            .loss(0.2)
            .duplication(0.3)
            .build()
            .unwrap();
        let (a, _) = run(&lossy, 5000);
        let (mut b, st) = run(&both, 5000);
        assert!(st.duplicated > 0);
        b.dedup();
        assert_eq!(a, b, "the same datagrams were lost");
    }

    #[test]
    fn duplicates_arrive_twice_back_to_back() {
        let config = FaultConfig::builder(11).duplication(0.1).build().unwrap();
        let (got, st) = run(&config, N);
        let dup = share(st.duplicated, N);
        assert!((0.09..0.11).contains(&dup), "duplicated {dup}");
        assert_eq!(got.len() as u64, N + st.duplicated);
        let twice = got.windows(2).filter(|w| w[0] == w[1]).count() as u64;
        assert_eq!(twice, st.duplicated);
        let mut once = got.clone();
        once.dedup();
        assert_eq!(once, (0..N).map(datagram).collect::<Vec<_>>());
    }

    #[test]
    fn corruption_changes_exactly_one_byte_of_the_chosen_datagrams() {
        let config = FaultConfig::builder(12).corruption(0.05).build().unwrap();
        let (got, st) = run(&config, N);
        let rate = share(st.corrupted, N);
        assert!((0.04..0.06).contains(&rate), "corrupted {rate}");
        assert_eq!(got.len() as u64, N);
        let mut changed = 0;
        for (i, d) in got.iter().enumerate() {
            let diff = datagram(i as u64)
                .iter()
                .zip(d)
                .filter(|(a, b)| a != b)
                .count();
            assert!(diff <= 1, "datagram {i}: {diff} bytes changed");
            changed += diff as u64;
        }
        assert_eq!(changed, st.corrupted);
        // Every byte position is hit, not just the first ones.
        let config = FaultConfig::builder(13).corruption(1.0).build().unwrap();
        let (got, _) = run(&config, 2000);
        let mut hit = [false; 32];
        for (i, d) in got.iter().enumerate() {
            let at = datagram(i as u64).iter().zip(d).position(|(a, b)| a != b);
            hit[at.expect("every datagram corrupted")] = true;
        }
        assert!(hit.iter().all(|&h| h), "positions hit: {hit:?}");
    }

    #[test]
    fn reordering_stays_within_the_configured_depth_and_delivers_everything_once() {
        for seed in 0..4 {
            let config = FaultConfig::builder(seed)
                .reordering(0.05, 3..=40)
                .build()
                .unwrap();
            let (got, st) = run(&config, N);
            let rate = share(st.reordered, N);
            assert!(
                (0.04..0.06).contains(&rate),
                "seed {seed}: reordered {rate}"
            );
            let mut numbers: Vec<u64> = got.iter().map(|d| number(d)).collect();
            // Displacement measured on the output: how many later datagrams came first.
            let mut newest = 0;
            let mut moved = 0;
            for (i, &n) in numbers.iter().enumerate() {
                if i > 0 && n < newest {
                    assert!(
                        newest - n <= 40,
                        "seed {seed}: {n} came {} late",
                        newest - n
                    );
                    moved += 1;
                }
                newest = newest.max(n);
            }
            assert!(moved > 0 && moved <= st.reordered);
            assert_eq!(st.late.len() as u64, st.reordered);
            assert!(st.late.iter().all(|l| l.behind <= 40), "seed {seed}");
            numbers.sort_unstable();
            assert_eq!(numbers, (0..N).collect::<Vec<_>>(), "seed {seed}");
        }
    }

    #[test]
    fn a_lone_hold_of_depth_d_arrives_exactly_d_behind() {
        let config = FaultConfig::builder(21)
            .reordering(0.001, 100..=100)
            .build()
            .unwrap();
        let (got, st) = run(&config, N);
        assert!(st.reordered > 5);
        // With holds this rare, each is released by a datagram that was delivered normally.
        assert!(st.late.iter().all(|l| l.behind == 100), "{:?}", st.late);
        assert_eq!(st.late_beyond(99), st.reordered);
        assert_eq!(st.late_beyond(100), 0);
        assert_eq!(got.len() as u64, N);
    }

    #[test]
    fn delay_draws_pauses_from_its_range() {
        let ms = Duration::from_millis;
        let config = FaultConfig::builder(30)
            .delay(0.5, ms(2)..=ms(9))
            .build()
            .unwrap();
        let counts = Counters::default();
        let mut link = Link::new(1);
        let mut pauses = Vec::new();
        for i in 0..2000 {
            for s in link.offer(&config, datagram(i), &counts) {
                if let Some(p) = s.after {
                    assert!(s.late);
                    pauses.push(p);
                }
            }
        }
        let rate = share(pauses.len() as u64, 2000);
        assert!((0.45..0.55).contains(&rate), "delayed {rate}");
        assert!(pauses.iter().all(|p| (ms(2)..=ms(9)).contains(p)));
        assert!(pauses.iter().any(|p| *p < ms(3)) && pauses.iter().any(|p| *p > ms(8)));
    }

    /// Binds a and b on a network and a thread that forwards what b reads to a channel, so a
    /// test waits for datagrams with a bound.
    fn two_binds(
        net: &MemoryNetwork,
    ) -> (
        super::super::MemoryBind,
        super::super::MemoryBind,
        crossbeam_channel::Receiver<Vec<u8>>,
    ) {
        let a = net.bind("10.0.0.1".parse().unwrap(), 8);
        let b = net.bind("10.0.0.2".parse().unwrap(), 8);
        a.open(0).unwrap();
        let (mut fb, _) = b.open(0).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            let mut s = [0u8; 64];
            loop {
                let mut bufs: Vec<&mut [u8]> = vec![&mut s];
                let (mut sizes, mut eps) = ([0; 1], [Endpoint::default(); 1]);
                if fb[0](&mut bufs, &mut sizes, &mut eps).is_err() {
                    return;
                }
                if tx.send(bufs[0][..sizes[0]].to_vec()).is_err() {
                    return;
                }
            }
        });
        (a, b, rx)
    }

    fn send(a: &super::super::MemoryBind, b: &super::super::MemoryBind, d: &[u8]) {
        a.send(&[d], &Endpoint::from(b.local_addr().unwrap()))
            .unwrap();
    }

    /// Sends [1, 0xaa] then [2, 0xbb] from a to b with `faults` applied to datagrams that
    /// start with 1.
    fn send_two_through(
        net: &MemoryNetwork,
        faults: FaultConfigBuilder,
    ) -> (
        super::super::MemoryBind,
        super::super::MemoryBind,
        crossbeam_channel::Receiver<Vec<u8>>,
    ) {
        let (a, b, rx) = two_binds(net);
        let config = faults.matching(|_, _, d| d.first() == Some(&1)).build();
        net.set_faults(Some(config.unwrap()));
        send(&a, &b, &[1, 0xaa]);
        send(&a, &b, &[2, 0xbb]);
        (a, b, rx)
    }

    #[test]
    fn the_network_applies_faults_to_matched_datagrams_only_and_flush_releases_held_ones() {
        let net = MemoryNetwork::new();
        let faults = FaultConfig::builder(1).reordering(1.0, 1000..=1000);
        let (a, b, rx) = send_two_through(&net, faults);
        let wait = Duration::from_secs(10);
        assert_eq!(
            rx.recv_timeout(wait).unwrap(),
            [2, 0xbb],
            "unmatched passes"
        );
        assert_eq!(net.fault_stats().matched, 1);
        net.flush_faults();
        assert_eq!(
            rx.recv_timeout(wait).unwrap(),
            [1, 0xaa],
            "flush lets it go"
        );
        let late = net.fault_stats().late;
        assert_eq!((late.len(), late[0].seq, late[0].behind), (1, 0, 0));
        // Switching faults off delivers what they still held.
        send(&a, &b, &[1, 0xcc]);
        net.set_faults(None);
        assert_eq!(rx.recv_timeout(wait).unwrap(), [1, 0xcc]);
        assert_eq!(net.fault_stats(), FaultStats::default());
        b.close().unwrap();
    }

    #[test]
    fn delayed_datagrams_arrive_after_those_sent_later() {
        let net = MemoryNetwork::new();
        let ms = Duration::from_millis;
        let faults = FaultConfig::builder(2).delay(1.0, ms(50)..=ms(50));
        let (_a, b, rx) = send_two_through(&net, faults);
        let wait = Duration::from_secs(10);
        assert_eq!(rx.recv_timeout(wait).unwrap(), [2, 0xbb]);
        assert_eq!(
            rx.recv_timeout(wait).unwrap(),
            [1, 0xaa],
            "the delay line delivered"
        );
        assert_eq!(net.fault_stats().delayed, 1);
        // The datagram that overtook it was not matched: it does not count on the link.
        assert_eq!(net.fault_stats().late[0].behind, 0);
        b.close().unwrap();
    }
}
