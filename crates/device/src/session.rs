//! A peer's session rules, without threads, locks or a clock.
//!
//! [`Session`] decides when a peer sends a handshake initiation or a keepalive, when it gives up
//! on a handshake and when it erases its keys. The device feeds it events (a batch sent or
//! received, an initiation sent, keys derived, a handshake completed) together with the current
//! time as a plain value, and executes the [`Actions`] it answers with. Its five timers are
//! deadlines it keeps itself: the device asks [`Session::next_deadline`] when to call
//! [`Session::on_timeout`] next. The random jitter of the handshake timers comes from a
//! generator seeded by the caller, so a session given the same seed and the same events makes
//! the same decisions. `docs/session.md` states the rules.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use vpn_proto::consts::{
    KEEPALIVE_TIMEOUT, MAX_TIMER_HANDSHAKES, REJECT_AFTER_MESSAGES, REJECT_AFTER_TIME,
    REKEY_AFTER_MESSAGES, REKEY_AFTER_TIME, REKEY_TIMEOUT, REKEY_TIMEOUT_JITTER_MAX,
};
use vpn_proto::time::Instant;

/// The five timers of a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// An initiation went unanswered: send it again, or give up.
    RetransmitHandshake = 0,
    /// We received data and sent nothing back since: send a keepalive.
    SendKeepalive = 1,
    /// We sent data and heard nothing back since: start a new handshake.
    NewHandshake = 2,
    /// The last keys were derived long ago: erase every key.
    ZeroKeyMaterial = 3,
    /// Nothing went either way for the persistent keepalive interval: send a keepalive.
    PersistentKeepalive = 4,
}

const TIMERS: [Timer; 5] = [
    Timer::RetransmitHandshake,
    Timer::SendKeepalive,
    Timer::NewHandshake,
    Timer::ZeroKeyMaterial,
    Timer::PersistentKeepalive,
];

/// Keys are erased this long after the last ones were derived (three times the reject time).
pub(crate) const ZERO_KEYS_AFTER: Duration = REJECT_AFTER_TIME.saturating_mul(3);

/// The initiator of a keypair makes one last attempt to rekey when data arrives under a keypair
/// this old: a keepalive and a handshake's time before it is rejected.
pub(crate) const LAST_MINUTE_REKEY_AGE: Duration = REJECT_AFTER_TIME
    .saturating_sub(KEEPALIVE_TIMEOUT)
    .saturating_sub(REKEY_TIMEOUT);

/// May a keypair created at `created` still open packets at `now`?
pub(crate) fn may_receive(created: Instant, now: Instant) -> bool {
    now.saturating_duration_since(created) < REJECT_AFTER_TIME
}

/// May a keypair created at `created`, whose next send counter is `next_counter`, still seal
/// packets at `now`?
pub(crate) fn may_send(created: Instant, next_counter: u64, now: Instant) -> bool {
    next_counter < REJECT_AFTER_MESSAGES && may_receive(created, now)
}

/// What the session knows of the current keypair when a batch goes out or comes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyState {
    /// When the keypair was derived.
    pub created: Instant,
    /// Whether we sent the initiation that made it.
    pub is_initiator: bool,
    /// The next send counter (how many messages it has sealed).
    pub next_counter: u64,
}

/// Whether an initiation is a first attempt or a retransmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Initiation {
    New,
    Retry,
}

/// What the device must do after an event. Several may be set at once; the device runs them
/// in the order of the fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub(crate) struct Actions {
    /// Forget the local address the endpoint was last reached from: a fresh attempt may need
    /// another route.
    pub clear_endpoint_src: bool,
    /// Drop the packets waiting for keys: the handshake was given up.
    pub drop_staged: bool,
    /// Erase every keypair and the handshake state.
    pub zero_keys: bool,
    /// Create and send a handshake initiation (then report it with
    /// [`Session::initiation_sent`]). The rate limit has been applied already.
    pub initiate: Option<Initiation>,
    /// Send a keepalive (an empty transport message, which also flushes staged packets).
    pub send_keepalive: bool,
}

impl Actions {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == Actions::default()
    }

    fn merge(&mut self, o: Actions) {
        self.clear_endpoint_src |= o.clear_endpoint_src;
        self.drop_staged |= o.drop_staged;
        self.zero_keys |= o.zero_keys;
        self.initiate = match (self.initiate, o.initiate) {
            (Some(Initiation::New), _) | (_, Some(Initiation::New)) => Some(Initiation::New),
            (a, b) => a.or(b),
        };
        self.send_keepalive |= o.send_keepalive;
    }
}

/// The handshake timers' jitter: `rand`'s small generator seeded by the caller, so that tests
/// replay the same jitter from the same seed.
#[derive(Clone, Debug)]
pub(crate) struct Jitter(SmallRng);

impl Jitter {
    pub fn new(seed: u64) -> Jitter {
        Jitter(SmallRng::seed_from_u64(seed))
    }

    /// A jitter in `0..REKEY_TIMEOUT_JITTER_MAX`, with millisecond steps.
    pub fn next(&mut self) -> Duration {
        let max = REKEY_TIMEOUT_JITTER_MAX.as_millis() as u64;
        Duration::from_millis(self.0.gen_range(0..max))
    }
}

/// One peer's session state: its timers and the facts they are decided on.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// Timers act only while the peer runs and the device is up.
    running: bool,
    deadline: [Option<Instant>; 5],
    /// Retransmissions of the current initiation so far.
    handshake_attempts: u32,
    /// Data arrived while a keepalive was already pending: send one more after it.
    need_another_keepalive: bool,
    /// The last-minute rekey for the current keypair was sent already.
    sent_last_minute_handshake: bool,
    /// When we last sent a handshake message (initiation or response): rate-limits initiations.
    last_handshake_sent: Option<Instant>,
    persistent_keepalive: Option<Duration>,
    jitter: Jitter,
}

impl Session {
    /// A stopped session whose jitter comes from `seed`.
    pub fn new(seed: u64) -> Session {
        Session {
            running: false,
            deadline: [None; 5],
            handshake_attempts: 0,
            need_another_keepalive: false,
            sent_last_minute_handshake: false,
            last_handshake_sent: None,
            persistent_keepalive: None,
            jitter: Jitter::new(seed),
        }
    }

    // ---- lifecycle and configuration --------------------------------------------------------

    /// The peer starts (device up): a clean slate; an initiation may go out at once.
    pub fn start(&mut self) {
        *self = Session {
            running: true,
            persistent_keepalive: self.persistent_keepalive,
            jitter: self.jitter.clone(),
            ..Session::new(0)
        };
    }

    /// The peer stops (device down or peer removed): every timer is cancelled and stays so
    /// until [`Session::start`].
    pub fn stop(&mut self) {
        self.running = false;
        self.deadline = [None; 5];
    }

    #[cfg(test)]
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Sets the persistent keepalive interval (`0` turns it off). It takes effect at the next
    /// packet sent or received; the device sends one keepalive when it turns on.
    pub fn set_persistent_keepalive(&mut self, secs: u16) {
        self.persistent_keepalive = (secs > 0).then(|| Duration::from_secs(secs.into()));
        if secs == 0 {
            self.cancel(Timer::PersistentKeepalive);
        }
    }

    /// The persistent keepalive interval in seconds, 0 when off.
    pub fn persistent_keepalive(&self) -> u16 {
        self.persistent_keepalive
            .map_or(0, |d| u16::try_from(d.as_secs()).unwrap_or(u16::MAX))
    }

    /// The local static key changed: the next initiation may go out at once.
    pub fn allow_initiation_now(&mut self) {
        self.last_handshake_sent = None;
    }

    // ---- timers -----------------------------------------------------------------------------

    /// The earliest pending deadline: the device calls [`Session::on_timeout`] at or after it.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadline.iter().flatten().min().copied()
    }

    /// Whether `t` is pending.
    pub fn is_pending(&self, t: Timer) -> bool {
        self.deadline[t as usize].is_some()
    }

    /// When `t` fires, if pending.
    #[cfg(test)]
    pub fn deadline(&self, t: Timer) -> Option<Instant> {
        self.deadline[t as usize]
    }

    fn arm(&mut self, t: Timer, at: Instant) {
        if self.running {
            self.deadline[t as usize] = Some(at);
        }
    }

    fn cancel(&mut self, t: Timer) {
        self.deadline[t as usize] = None;
    }

    /// Fires every timer due at `now`, in the order of [`Timer`], and returns what to do.
    pub fn on_timeout(&mut self, now: Instant) -> Actions {
        let mut out = Actions::default();
        for t in TIMERS {
            if self.deadline[t as usize].is_some_and(|at| at <= now) {
                self.cancel(t);
                out.merge(self.fire(t, now));
            }
        }
        out
    }

    fn fire(&mut self, t: Timer, now: Instant) -> Actions {
        match t {
            Timer::RetransmitHandshake => self.retransmit(now),
            Timer::SendKeepalive => {
                if std::mem::take(&mut self.need_another_keepalive) {
                    self.arm(Timer::SendKeepalive, now + KEEPALIVE_TIMEOUT);
                }
                Actions {
                    send_keepalive: true,
                    ..Actions::default()
                }
            }
            Timer::NewHandshake => Actions {
                clear_endpoint_src: true,
                initiate: self.initiate(now, Initiation::New),
                ..Actions::default()
            },
            Timer::ZeroKeyMaterial => Actions {
                zero_keys: true,
                ..Actions::default()
            },
            Timer::PersistentKeepalive => Actions {
                send_keepalive: self.persistent_keepalive.is_some(),
                ..Actions::default()
            },
        }
    }

    /// The initiation went unanswered: retry, or after the last retry give up.
    fn retransmit(&mut self, now: Instant) -> Actions {
        if self.handshake_attempts > MAX_TIMER_HANDSHAKES {
            self.cancel(Timer::SendKeepalive);
            if !self.is_pending(Timer::ZeroKeyMaterial) {
                self.arm(Timer::ZeroKeyMaterial, now + ZERO_KEYS_AFTER);
            }
            return Actions {
                drop_staged: true,
                ..Actions::default()
            };
        }
        self.handshake_attempts += 1;
        Actions {
            clear_endpoint_src: true,
            initiate: self.initiate(now, Initiation::Retry),
            ..Actions::default()
        }
    }

    // ---- handshakes -------------------------------------------------------------------------

    /// Decides whether an initiation goes out now: a new attempt restarts the retry count; any
    /// attempt waits until `REKEY_TIMEOUT` after the last handshake message we sent.
    fn initiate(&mut self, now: Instant, kind: Initiation) -> Option<Initiation> {
        if kind == Initiation::New {
            self.handshake_attempts = 0;
        }
        if self
            .last_handshake_sent
            .is_some_and(|t| now.saturating_duration_since(t) < REKEY_TIMEOUT)
        {
            return None;
        }
        self.last_handshake_sent = Some(now);
        Some(kind)
    }

    /// Packets wait and there is no keypair to send them with: start a handshake.
    pub fn want_keys(&mut self, now: Instant) -> Actions {
        Actions {
            initiate: self.initiate(now, Initiation::New),
            ..Actions::default()
        }
    }

    /// The initiation the last [`Actions::initiate`] asked for went out.
    pub fn initiation_sent(&mut self, now: Instant) {
        self.authenticated_sent(now);
        let retry = now + REKEY_TIMEOUT + self.jitter.next();
        self.arm(Timer::RetransmitHandshake, retry);
    }

    /// A valid initiation from the peer arrived (we answer it with a response).
    pub fn initiation_received(&mut self, now: Instant) {
        self.authenticated_received(now);
    }

    /// We sent a handshake response, and derived keys with it.
    pub fn response_sent(&mut self, now: Instant) {
        self.last_handshake_sent = Some(now);
        self.keys_derived(now);
        self.authenticated_sent(now);
    }

    /// A valid response to our initiation arrived and its keys are installed: the handshake is
    /// complete, and the responder waits for our first packet to confirm the keys.
    pub fn response_received(&mut self, now: Instant) -> Actions {
        self.authenticated_received(now);
        self.keys_derived(now);
        self.handshake_complete();
        Actions {
            send_keepalive: true,
            ..Actions::default()
        }
    }

    /// The initiator's first packet under the keys of our response arrived: the handshake is
    /// complete on our side too.
    pub fn keys_confirmed(&mut self) {
        self.handshake_complete();
    }

    fn keys_derived(&mut self, now: Instant) {
        self.arm(Timer::ZeroKeyMaterial, now + ZERO_KEYS_AFTER);
    }

    fn handshake_complete(&mut self) {
        self.cancel(Timer::RetransmitHandshake);
        self.handshake_attempts = 0;
        self.sent_last_minute_handshake = false;
    }

    // ---- transport batches ------------------------------------------------------------------

    /// A batch of transport messages was handed to the network (`ok`: it went out). `data`:
    /// it held a packet with a payload, not only keepalives. `key`: the current keypair.
    pub fn batch_sent(
        &mut self,
        now: Instant,
        data: bool,
        ok: bool,
        key: Option<KeyState>,
    ) -> Actions {
        self.authenticated_sent(now);
        if !ok {
            return Actions::default();
        }
        if data && !self.is_pending(Timer::NewHandshake) {
            let at = now + KEEPALIVE_TIMEOUT + REKEY_TIMEOUT + self.jitter.next();
            self.arm(Timer::NewHandshake, at);
        }
        let worn = key.is_some_and(|k| {
            k.next_counter > REKEY_AFTER_MESSAGES
                || (k.is_initiator && now.saturating_duration_since(k.created) > REKEY_AFTER_TIME)
        });
        Actions {
            initiate: if worn {
                self.initiate(now, Initiation::New)
            } else {
                None
            },
            ..Actions::default()
        }
    }

    /// Authenticated transport messages arrived (`data`: at least one carried a payload, not
    /// only keepalives). `key`: the current keypair.
    pub fn batch_received(&mut self, now: Instant, data: bool, key: Option<KeyState>) -> Actions {
        let mut out = Actions::default();
        if !self.sent_last_minute_handshake
            && key.is_some_and(|k| {
                k.is_initiator && now.saturating_duration_since(k.created) > LAST_MINUTE_REKEY_AGE
            })
        {
            self.sent_last_minute_handshake = true;
            out.initiate = self.initiate(now, Initiation::New);
        }
        self.authenticated_received(now);
        if data {
            if self.is_pending(Timer::SendKeepalive) {
                self.need_another_keepalive = true;
            } else {
                self.arm(Timer::SendKeepalive, now + KEEPALIVE_TIMEOUT);
            }
        }
        out
    }

    fn authenticated_sent(&mut self, now: Instant) {
        self.traversal(now);
        self.cancel(Timer::SendKeepalive);
    }

    fn authenticated_received(&mut self, now: Instant) {
        self.traversal(now);
        self.cancel(Timer::NewHandshake);
    }

    /// Any authenticated packet went either way: the persistent keepalive counts from now.
    fn traversal(&mut self, now: Instant) {
        if let Some(every) = self.persistent_keepalive {
            self.arm(Timer::PersistentKeepalive, now + every);
        }
    }
}

#[cfg(test)]
mod tests;
