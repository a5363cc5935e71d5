//! The session rules at fake time: every test drives a `Session` with events and instants and
//! reads back its actions and deadlines. No threads, no clock, no sleeps.

use super::*;

const SEED: u64 = 7;

fn at(secs: f64) -> Instant {
    Instant::from_nanos(1_000_000_000 + (secs * 1e9) as u64)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn started() -> Session {
    let mut s = Session::new(SEED);
    s.start();
    s
}

/// The jitters a fresh session with `SEED` draws, in order.
fn jitters() -> Jitter {
    Jitter::new(SEED)
}

fn initiator_key(created: Instant) -> KeyState {
    KeyState {
        created,
        is_initiator: true,
        next_counter: 0,
    }
}

fn responder_key(created: Instant) -> KeyState {
    KeyState {
        is_initiator: false,
        ..initiator_key(created)
    }
}

fn only_keepalive() -> Actions {
    Actions {
        send_keepalive: true,
        ..Actions::default()
    }
}

fn initiate(kind: Initiation) -> Actions {
    Actions {
        initiate: Some(kind),
        ..Actions::default()
    }
}

/// Runs the session's timers up to and including `until`, executing initiations the way the
/// device does; returns every action set fired, with its instant.
fn run_until(s: &mut Session, until: Instant) -> Vec<(Instant, Actions)> {
    let mut fired = Vec::new();
    while let Some(t) = s.next_deadline().filter(|&t| t <= until) {
        let a = s.on_timeout(t);
        if a.initiate.is_some() {
            s.initiation_sent(t);
        }
        fired.push((t, a));
    }
    fired
}

// ---- jitter -------------------------------------------------------------------------------------

#[test]
fn jitter_stays_below_its_maximum_and_varies() {
    let mut j = Jitter::new(SEED);
    let draws: Vec<Duration> = (0..2000).map(|_| j.next()).collect();
    assert!(draws.iter().all(|&d| d < REKEY_TIMEOUT_JITTER_MAX));
    let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
    assert!(distinct.len() > 250, "{} distinct jitters", distinct.len());
}

#[test]
fn same_seed_same_events_same_decisions() {
    let mut a = started();
    let mut b = started();
    for s in [&mut a, &mut b] {
        let _ = s.want_keys(at(0.0));
        s.initiation_sent(at(0.0));
        let _ = s.batch_sent(at(1.0), true, true, None);
    }
    assert_eq!(a.deadline, b.deadline);
    assert_eq!(run_until(&mut a, at(200.0)), run_until(&mut b, at(200.0)));
    let mut zero = Jitter::new(0);
    assert!(zero.next() < REKEY_TIMEOUT_JITTER_MAX, "seed 0 still draws");
}

// ---- handshake initiation, retransmission and giving up ------------------------------------------

#[test]
fn initiation_arms_retransmit_at_rekey_timeout_plus_jitter() {
    let mut s = started();
    assert_eq!(s.want_keys(at(0.0)), initiate(Initiation::New));
    s.initiation_sent(at(0.0));
    let want = at(0.0) + REKEY_TIMEOUT + jitters().next();
    assert_eq!(s.deadline(Timer::RetransmitHandshake), Some(want));
    assert_eq!(s.next_deadline(), Some(want));
    // Not before its deadline.
    assert!(s.on_timeout(want.checked_sub(ms(1)).unwrap()).is_empty());
    assert_eq!(
        s.on_timeout(want),
        Actions {
            clear_endpoint_src: true,
            initiate: Some(Initiation::Retry),
            ..Actions::default()
        }
    );
}

#[test]
fn initiations_wait_rekey_timeout_after_the_last_handshake_message() {
    let mut s = started();
    assert_eq!(s.want_keys(at(0.0)), initiate(Initiation::New));
    assert!(s.want_keys(at(4.999)).is_empty());
    assert_eq!(s.want_keys(at(5.0)), initiate(Initiation::New));
    // A response counts as a handshake message sent.
    s.response_sent(at(20.0));
    assert!(s.want_keys(at(24.9)).is_empty());
    assert_eq!(s.want_keys(at(25.0)), initiate(Initiation::New));
    // A new static key lifts the wait.
    s.allow_initiation_now();
    assert_eq!(s.want_keys(at(25.1)), initiate(Initiation::New));
}

#[test]
fn twenty_initiations_then_give_up_and_zero_keys_540s_later() {
    let mut s = started();
    assert_eq!(s.want_keys(at(0.0)), initiate(Initiation::New));
    s.initiation_sent(at(0.0));
    let mut j = jitters();
    let mut expect = at(0.0) + REKEY_TIMEOUT + j.next();
    let mut initiations = 1;
    let gave_up = loop {
        let t = s
            .next_deadline()
            .expect("a timer stays armed until the give-up");
        assert_eq!(t, expect, "retransmission {initiations}");
        let a = s.on_timeout(t);
        if a.drop_staged {
            break t;
        }
        assert_eq!(
            a,
            Actions {
                clear_endpoint_src: true,
                initiate: Some(Initiation::Retry),
                ..Actions::default()
            }
        );
        s.initiation_sent(t);
        initiations += 1;
        expect = t + REKEY_TIMEOUT + j.next();
    };
    assert_eq!(initiations, 20, "the first initiation and 19 retries");
    assert!(!s.is_pending(Timer::RetransmitHandshake));
    assert_eq!(s.next_deadline(), Some(gave_up + ZERO_KEYS_AFTER));
    assert_eq!(ZERO_KEYS_AFTER, secs(540));
    let fired = run_until(&mut s, gave_up + secs(10_000));
    assert_eq!(
        fired,
        vec![(
            gave_up + ZERO_KEYS_AFTER,
            Actions {
                zero_keys: true,
                ..Actions::default()
            }
        )]
    );
    assert_eq!(s.next_deadline(), None, "silent after the keys are gone");
}

#[test]
fn giving_up_cancels_the_keepalive_and_keeps_an_earlier_zeroing() {
    let mut s = started();
    // Keys derived at 0 (zeroing due at 540), then data in and a rekey that never completes.
    s.response_sent(at(0.0));
    let _ = s.batch_received(at(1.0), true, None);
    s.allow_initiation_now();
    assert_eq!(s.want_keys(at(1.0)), initiate(Initiation::New));
    s.initiation_sent(at(1.0));
    let t = loop {
        let t = s.deadline(Timer::RetransmitHandshake).unwrap();
        // The keepalive owed for the data would fire at 11 s: re-arm it so it is pending at
        // the give-up.
        let _ = s.batch_received(t, true, None);
        let a = s.on_timeout(t);
        if a.drop_staged {
            break t;
        }
        s.initiation_sent(t);
    };
    assert!(t > at(90.0), "19 retries take over 90 s");
    assert!(!s.is_pending(Timer::SendKeepalive));
    assert_eq!(s.deadline(Timer::ZeroKeyMaterial), Some(at(540.0)));
}

#[test]
fn a_new_attempt_restarts_the_retry_count() {
    let mut s = started();
    let _ = s.want_keys(at(0.0));
    s.initiation_sent(at(0.0));
    let mut t = at(0.0);
    for _ in 0..10 {
        t = s.next_deadline().unwrap();
        assert!(s.on_timeout(t).initiate.is_some());
        s.initiation_sent(t);
    }
    // A fresh reason to handshake (staged packets) starts the count again.
    t += REKEY_TIMEOUT;
    assert_eq!(s.want_keys(t), initiate(Initiation::New));
    s.initiation_sent(t);
    let mut retries = 0;
    while let Some(t) = s.next_deadline() {
        let a = s.on_timeout(t);
        if a.drop_staged {
            break;
        }
        s.initiation_sent(t);
        retries += 1;
    }
    assert_eq!(retries, 19);
}

#[test]
fn response_completes_the_handshake_and_confirms_with_a_keepalive() {
    let mut s = started();
    let _ = s.want_keys(at(0.0));
    s.initiation_sent(at(0.0));
    let _ = s.on_timeout(s.next_deadline().unwrap());
    s.initiation_sent(at(5.2));
    assert_eq!(s.response_received(at(6.0)), only_keepalive());
    assert!(!s.is_pending(Timer::RetransmitHandshake));
    assert_eq!(s.handshake_attempts, 0);
    assert_eq!(s.deadline(Timer::ZeroKeyMaterial), Some(at(546.0)));
}

#[test]
fn key_confirmation_completes_the_responders_handshake() {
    let mut s = started();
    s.response_sent(at(0.0));
    assert_eq!(s.deadline(Timer::ZeroKeyMaterial), Some(at(540.0)));
    s.sent_last_minute_handshake = true;
    s.handshake_attempts = 3;
    s.keys_confirmed();
    assert!(!s.sent_last_minute_handshake);
    assert_eq!(s.handshake_attempts, 0);
}

#[test]
fn every_new_keypair_pushes_the_zeroing_back() {
    let mut s = started();
    s.response_sent(at(0.0));
    s.response_sent(at(130.0));
    let _ = s.response_received(at(260.0));
    assert_eq!(s.next_deadline(), Some(at(800.0)));
    assert_eq!(
        s.on_timeout(at(800.0)),
        Actions {
            zero_keys: true,
            ..Actions::default()
        }
    );
}

// ---- rekey triggers -----------------------------------------------------------------------------

#[test]
fn rekey_after_messages_for_either_side() {
    for key in [initiator_key(at(0.0)), responder_key(at(0.0))] {
        let mut s = started();
        let at_limit = KeyState {
            next_counter: REKEY_AFTER_MESSAGES,
            ..key
        };
        assert!(s.batch_sent(at(1.0), true, true, Some(at_limit)).is_empty());
        let past = KeyState {
            next_counter: REKEY_AFTER_MESSAGES + 1,
            ..key
        };
        assert_eq!(
            s.batch_sent(at(1.0), true, true, Some(past)),
            initiate(Initiation::New)
        );
        // Rate-limited like every initiation.
        assert!(s.batch_sent(at(2.0), true, true, Some(past)).is_empty());
    }
}

#[test]
fn rekey_after_time_only_for_the_initiator() {
    let mut s = started();
    let key = initiator_key(at(0.0));
    assert!(s.batch_sent(at(120.0), true, true, Some(key)).is_empty());
    assert_eq!(
        s.batch_sent(at(120.001), true, true, Some(key)),
        initiate(Initiation::New)
    );
    let mut s = started();
    let key = responder_key(at(0.0));
    assert!(s.batch_sent(at(170.0), true, true, Some(key)).is_empty());
}

#[test]
fn a_failed_send_triggers_no_rekey_and_arms_nothing() {
    let mut s = started();
    let worn = KeyState {
        next_counter: REKEY_AFTER_MESSAGES + 1,
        ..initiator_key(at(0.0))
    };
    let _ = s.batch_received(at(0.5), true, None);
    assert!(s.batch_sent(at(1.0), true, false, Some(worn)).is_empty());
    assert!(!s.is_pending(Timer::NewHandshake));
    // But it was an authenticated packet on its way: the owed keepalive is cancelled.
    assert!(!s.is_pending(Timer::SendKeepalive));
}

#[test]
fn last_minute_rekey_once_per_keypair_for_the_initiator() {
    assert_eq!(LAST_MINUTE_REKEY_AGE, secs(165));
    let mut s = started();
    let key = initiator_key(at(0.0));
    assert!(s.batch_received(at(165.0), true, Some(key)).is_empty());
    let a = s.batch_received(at(165.001), true, Some(key));
    assert_eq!(a, initiate(Initiation::New));
    // Once: not again, even after the rate limit passed.
    assert!(s
        .batch_received(at(175.0), true, Some(key))
        .initiate
        .is_none());
    // A completed handshake allows it for the next keypair.
    let _ = s.response_received(at(176.0));
    let a = s.batch_received(at(176.0), true, Some(initiator_key(at(0.0))));
    assert_eq!(a.initiate, Some(Initiation::New));
    // Never for the responder.
    let mut s = started();
    let a = s.batch_received(at(179.0), true, Some(responder_key(at(0.0))));
    assert!(a.initiate.is_none());
}

#[test]
fn reject_after_time_and_messages() {
    let c = at(0.0);
    assert!(may_receive(c, at(179.999)));
    assert!(!may_receive(c, at(180.0)));
    assert!(may_send(c, REJECT_AFTER_MESSAGES - 1, at(179.0)));
    assert!(!may_send(c, REJECT_AFTER_MESSAGES, at(1.0)));
    assert!(!may_send(c, 0, at(180.0)));
}

// ---- new handshake when the peer went quiet -------------------------------------------------------

#[test]
fn data_sent_without_an_answer_starts_a_new_handshake_after_15s() {
    let mut s = started();
    let mut j = jitters();
    assert!(s.batch_sent(at(0.0), true, true, None).is_empty());
    let due = at(0.0) + KEEPALIVE_TIMEOUT + REKEY_TIMEOUT + j.next();
    assert_eq!(s.deadline(Timer::NewHandshake), Some(due));
    // More data does not push it back.
    let _ = s.batch_sent(at(3.0), true, true, None);
    assert_eq!(s.deadline(Timer::NewHandshake), Some(due));
    assert_eq!(
        s.on_timeout(due),
        Actions {
            clear_endpoint_src: true,
            initiate: Some(Initiation::New),
            ..Actions::default()
        }
    );
}

#[test]
fn any_authenticated_packet_received_cancels_the_new_handshake() {
    let mut s = started();
    let _ = s.batch_sent(at(0.0), true, true, None);
    let _ = s.batch_received(at(1.0), false, None);
    assert!(!s.is_pending(Timer::NewHandshake));
    let _ = s.batch_sent(at(2.0), true, true, None);
    s.initiation_received(at(3.0));
    assert!(!s.is_pending(Timer::NewHandshake));
    assert!(run_until(&mut s, at(100.0)).is_empty());
}

#[test]
fn keepalives_sent_do_not_arm_the_new_handshake() {
    let mut s = started();
    let _ = s.batch_sent(at(0.0), false, true, None);
    assert_eq!(s.next_deadline(), None);
}

// ---- keepalives ---------------------------------------------------------------------------------

#[test]
fn data_received_owes_a_keepalive_after_10s() {
    let mut s = started();
    let _ = s.batch_received(at(0.0), true, None);
    assert_eq!(s.deadline(Timer::SendKeepalive), Some(at(10.0)));
    assert!(s.on_timeout(at(9.999)).is_empty());
    assert_eq!(s.on_timeout(at(10.0)), only_keepalive());
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn anything_sent_pays_the_keepalive_owed() {
    let mut s = started();
    let _ = s.batch_received(at(0.0), true, None);
    let _ = s.batch_sent(at(2.0), false, true, None);
    assert!(!s.is_pending(Timer::SendKeepalive));
    let _ = s.batch_received(at(3.0), true, None);
    let _ = s.want_keys(at(4.0));
    s.initiation_sent(at(4.0));
    assert!(!s.is_pending(Timer::SendKeepalive));
}

#[test]
fn data_while_a_keepalive_is_owed_owes_another() {
    let mut s = started();
    let _ = s.batch_received(at(0.0), true, None);
    let _ = s.batch_received(at(4.0), true, None);
    assert_eq!(
        s.deadline(Timer::SendKeepalive),
        Some(at(10.0)),
        "not pushed back"
    );
    assert_eq!(s.on_timeout(at(10.0)), only_keepalive());
    assert_eq!(s.deadline(Timer::SendKeepalive), Some(at(20.0)));
    assert_eq!(s.on_timeout(at(20.0)), only_keepalive());
    assert_eq!(s.next_deadline(), None, "one more, not a stream");
}

#[test]
fn a_passive_keepalive_is_not_answered_by_another() {
    let mut s = started();
    let _ = s.batch_received(at(0.0), false, None);
    assert_eq!(s.next_deadline(), None);
}

/// Two sessions wired back to back, every packet delivered at once: one data packet from a
/// gets one keepalive from b, and then both stay quiet.
#[test]
fn two_idle_peers_exchange_one_keepalive_and_fall_silent() {
    let mut a = started();
    let mut b = Session::new(SEED + 1);
    b.start();
    let _ = a.batch_sent(at(0.0), true, true, None);
    let _ = b.batch_received(at(0.0), true, None);
    let mut sent = Vec::new();
    let mut now = at(0.0);
    while now < at(1000.0) {
        let next = [a.next_deadline(), b.next_deadline()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else { break };
        now = t;
        for name in ["a", "b"] {
            let (me, other) = if name == "a" {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            let act = me.on_timeout(now);
            if act.send_keepalive {
                sent.push((name, now));
                let _ = me.batch_sent(now, false, true, None);
                let _ = other.batch_received(now, false, None);
            }
            if act.initiate.is_some() {
                sent.push((name, now));
                me.initiation_sent(now);
            }
        }
    }
    assert_eq!(sent, vec![("b", at(10.0))], "b answers the data once");
    assert_eq!((a.next_deadline(), b.next_deadline()), (None, None));
}

#[test]
fn persistent_keepalive_counts_from_the_last_packet_either_way() {
    let mut s = started();
    // Off: traffic arms nothing.
    let _ = s.batch_received(at(0.0), false, None);
    assert_eq!(s.next_deadline(), None);
    s.set_persistent_keepalive(25);
    assert_eq!(s.persistent_keepalive(), 25);
    let _ = s.batch_received(at(1.0), false, None);
    assert_eq!(s.deadline(Timer::PersistentKeepalive), Some(at(26.0)));
    let _ = s.batch_sent(at(10.0), false, true, None);
    assert_eq!(s.deadline(Timer::PersistentKeepalive), Some(at(35.0)));
    s.initiation_received(at(12.0));
    assert_eq!(s.deadline(Timer::PersistentKeepalive), Some(at(37.0)));
    assert_eq!(s.on_timeout(at(37.0)), only_keepalive());
    // Each keepalive sent arms the next one.
    let _ = s.batch_sent(at(37.0), false, true, None);
    assert_eq!(s.deadline(Timer::PersistentKeepalive), Some(at(62.0)));
    // Turning it off cancels it.
    s.set_persistent_keepalive(0);
    assert_eq!(s.persistent_keepalive(), 0);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn persistent_keepalive_turned_off_while_armed_sends_nothing() {
    let mut s = started();
    s.set_persistent_keepalive(5);
    let _ = s.batch_received(at(0.0), false, None);
    s.persistent_keepalive = None; // as if the interval changed without the cancel
    assert!(s.on_timeout(at(5.0)).is_empty());
}

// ---- lifecycle ----------------------------------------------------------------------------------

#[test]
fn a_stopped_session_arms_nothing() {
    let mut s = Session::new(SEED);
    s.set_persistent_keepalive(5);
    let _ = s.batch_received(at(0.0), true, None);
    let _ = s.batch_sent(at(0.0), true, true, None);
    s.response_sent(at(0.0));
    assert_eq!(s.next_deadline(), None);
    assert!(!s.is_running());
}

#[test]
fn stop_cancels_every_timer_and_start_begins_afresh() {
    let mut s = started();
    s.set_persistent_keepalive(5);
    let _ = s.want_keys(at(0.0));
    s.initiation_sent(at(0.0));
    let _ = s.batch_received(at(0.0), true, Some(initiator_key(at(0.0))));
    let _ = s.batch_received(at(0.1), true, None);
    let _ = s.batch_sent(at(0.0), true, true, None);
    s.response_sent(at(0.0));
    s.stop();
    assert_eq!(s.next_deadline(), None);
    assert!(run_until(&mut s, at(1000.0)).is_empty());
    s.start();
    assert_eq!(s.next_deadline(), None);
    assert_eq!(s.persistent_keepalive(), 5, "configuration survives");
    assert_eq!(
        s.want_keys(at(0.5)),
        initiate(Initiation::New),
        "no rate limit"
    );
    assert!(!s.need_another_keepalive);
}

#[test]
fn timers_due_together_fire_together() {
    let mut s = started();
    s.set_persistent_keepalive(10);
    let _ = s.batch_sent(at(0.0), true, true, None); // new handshake at ~15 s, persistent at 10
    let _ = s.batch_received(at(0.0), true, None); // keepalive at 10, persistent at 10
                                                   // (the receive cancelled the new handshake)
    let _ = s.batch_sent(at(0.0), true, true, None);
    let a = s.on_timeout(at(20.0));
    assert_eq!(
        a,
        Actions {
            clear_endpoint_src: true,
            initiate: Some(Initiation::New),
            send_keepalive: true,
            ..Actions::default()
        }
    );
    assert!(!s.is_pending(Timer::SendKeepalive) && !s.is_pending(Timer::NewHandshake));
}

#[test]
fn merged_actions_prefer_a_new_initiation_over_a_retry() {
    let mut a = initiate(Initiation::Retry);
    a.merge(initiate(Initiation::New));
    assert_eq!(a.initiate, Some(Initiation::New));
    let mut b = Actions::default();
    b.merge(initiate(Initiation::Retry));
    assert_eq!(b.initiate, Some(Initiation::Retry));
}
