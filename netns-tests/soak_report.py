#!/usr/bin/env python3
"""The soak's verdict and chart (netns-tests/soak.sh writes the inputs; standard library only).

soak_report.py OUT --seconds N [--svg FILE]

Checks, each PASS or FAIL, then "soak: N passed, N failed":
- every daemon alive at every sample;
- no upward trend: for each daemon and resource, the mean of the last third of the samples
  (after the warm-up: the first flood and 10 s after it, when the daemons have met their
  high-water mark; outside the flood windows) exceeds the mean of the first third by no more
  than the slack: RSS 10 % or 2 MiB, packet memory 25 % or 2 MiB (it follows the load),
  descriptors and threads 2 (the least-squares slope over the second half is printed too);
- outside the flood windows the TCP flow never stalls (an iperf3 interval under 1 % of its
  rate) for longer than 5 s, REKEY_TIMEOUT: a rekey that needed a retry (the longest stall
  inside a flood, which starves it on purpose, is printed); and it ran to the end;
- a stall that began in a flood (TCP loses every segment there and backs its retransmission
  timer off) ends within that backoff: it outlasts a flood window it spent d s in by at most
  3d + 5 s (the first two retransmissions after the flood lost to its tail draining);
- no ping lost outside the flood windows (each widened by 1 s before and 3 s after) and the
  1 s around each roam (a reply in flight to the port just closed);
- a pause of the whole machine (a gap of 3 s or more in ping's own output: no process ran) is
  printed, and the stall and ping checks skip it and the 10 s after it;
- every thread of every daemon still unprivileged and under seccomp, no seccomp report in any
  daemon log.
Prints the figures docs/performance.md quotes (rekeys seen, rates, loss, the trends).
"""
import csv
import json
import os
import re
import statistics
import sys

STALL_FRACTION = 0.01
STALL_MAX_SECS = 5
SLACK = {  # resource: (relative, absolute)
    "rss_kib": (0.10, 2048),
    "packet_bytes": (0.25, 2 << 20),
    "fds": (0.0, 2),
    "threads": (0.0, 2),
}
UNITS = {"rss_kib": "KiB", "packet_bytes": "bytes", "fds": "", "threads": ""}


def parse_args(argv):
    out, secs, svg = argv[1], None, None
    i = 2
    while i < len(argv):
        if argv[i] == "--seconds":
            secs = float(argv[i + 1]); i += 2
        elif argv[i] == "--svg":
            svg = argv[i + 1]; i += 2
        else:
            sys.exit(f"soak_report: unknown argument {argv[i]}")
    return out, secs, svg


def read_events(out):
    t0, events = None, []
    with open(os.path.join(out, "events")) as f:
        for line in f:
            parts = line.split()
            if parts[0] == "t0":
                t0 = float(parts[1])
            else:
                events.append((float(parts[0]), " ".join(parts[1:])))
    floods, start = [], None
    for t, e in events:
        if e == "flood-start":
            start = t
        elif e == "flood-end" and start is not None:
            floods.append((start, t)); start = None
    if start is not None:
        floods.append((start, start + 10))
    roams = [t for t, e in events if e.startswith("roam")]
    return t0, floods, roams, events


def backoff_trace(out, a, b):
    """tcp_backoff.log's samples from a to b s where the timer changed, as "t s: rto ms
    (backoff n)"."""
    trace = []
    try:
        for line in open(os.path.join(out, "tcp_backoff.log")):
            parts = line.split()
            if not parts or not a <= float(parts[0]) <= b:
                continue
            f = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
            state = f"{f.get('rto', '?')} ms" + (f" (backoff {f['backoff']})" if "backoff" in f else "")
            if not trace or trace[-1][1] != state:
                trace.append((float(parts[0]), state))
    except (OSError, ValueError):
        return "(no tcp_backoff.log)"
    return "; ".join(f"{t:.0f} s: {state}" for t, state in trace) or "(no samples)"


def in_windows(t, windows):
    return any(a <= t <= b for a, b in windows)


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def slope_per_hour(pts):
    if len(pts) < 3:
        return 0.0
    mx, my = mean([p[0] for p in pts]), mean([p[1] for p in pts])
    den = sum((x - mx) ** 2 for x, _ in pts)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in pts) / den * 3600


def main():
    out, secs, svg = parse_args(sys.argv)
    t0, floods, roams, events = read_events(out)
    secs = secs or max(t for t, _ in events)
    results = []

    def check(ok, what):
        ok = bool(ok)
        results.append(ok)
        print(("PASS " if ok else "FAIL ") + what)

    # Samples.
    rows = list(csv.DictReader(open(os.path.join(out, "samples.csv"))))
    daemons = sorted({r["daemon"] for r in rows}, key=lambda d: (d.startswith("idle"), d))
    dead = [r for r in rows if r["rss_kib"] == "dead"]
    check(not dead, f"every daemon alive at every sample ({len(rows)} samples of {len(daemons)} daemons)"
          + (f": {dead[0]['daemon']} gone at {dead[0]['t']} s" if dead else ""))
    series = {d: {k: [] for k in SLACK} for d in daemons}
    for r in rows:
        if r["rss_kib"] == "dead":
            continue
        t = float(r["t"])
        for k in SLACK:
            if r.get(k):
                series[r["daemon"]][k].append((t, float(r[k])))
    warm = floods[0][1] + 10 if floods else min(60.0, secs / 6)
    wide_floods = [(a - 1, b + 3) for a, b in floods]
    trend_ok, lines = True, []
    for d in daemons:
        for k, (rel, ab) in SLACK.items():
            pts = [(t, v) for t, v in series[d][k] if t >= warm and not in_windows(t, wide_floods)]
            if len(pts) < 3:
                continue
            n = len(pts) // 3
            first, last = mean([v for _, v in pts[:n]]), mean([v for _, v in pts[-n:]])
            slack = max(ab, rel * first)
            grew = last - first
            sl = slope_per_hour(pts[len(pts) // 2:])
            ok = grew <= slack
            trend_ok &= ok
            lines.append((d, k, first, last, grew, slack, sl, ok,
                          min(v for _, v in series[d][k]), max(v for _, v in series[d][k])))
    check(trend_ok, "no upward trend past the slack (last third vs first third, after "
          f"{warm:.0f} s of warm-up, outside the flood windows)")
    print("  daemon  resource       min        max   first third   last third    growth     slack   slope/h (2nd half)")
    for d, k, first, last, grew, slack, sl, ok, lo, hi in lines:
        print(f"  {d:6} {k:12} {lo:10.0f} {hi:10.0f} {first:13.0f} {last:12.0f} {grew:9.0f} {slack:9.0f} {sl:10.0f}"
              + ("" if ok else "   <-- past the slack"))

    # Pauses of the whole machine (a VM held by its host: no process runs, ping included). Ping
    # prints a line every 0.2 s, a reply or "no answer yet"; a gap of 3 s or more in its own
    # output means it did not run. TCP needs a few seconds of retransmission backoff after one.
    ping_path = os.path.join(out, "ping.log")
    stamps = []
    for line in open(ping_path) if os.path.exists(ping_path) else []:
        m = re.match(r"\[(\d+\.\d+)\]", line)
        if m:
            stamps.append(float(m.group(1)) - t0)
    pauses = [(a, b) for a, b in zip(stamps, stamps[1:]) if b - a >= 3]
    for a, b in pauses:
        print(f"  the machine was paused {b - a:.1f} s from {a:.0f} s (ping printed nothing): "
              "the stall and ping checks skip it and the 10 s after it")
    paused = [(a, b + 10) for a, b in pauses]

    # TCP.
    try:
        tcp = json.load(open(os.path.join(out, "tcp.json")))
        iv = [(i["sum"]["start"], i["sum"]["bits_per_second"]) for i in tcp.get("intervals", [])]
        err = tcp.get("error")
        # iperf3 times its intervals on its own clock, which a pause of the machine holds
        # back: on the run's clock an interval starts that much later, plus iperf3's start.
        offset = tcp["start"]["timestamp"]["timesecs"] - t0
        walled, lag, rest = [], 0.0, list(pauses)
        for start, bps in iv:
            while rest and rest[0][0] < start + offset + lag:
                lag += rest[0][1] - rest[0][0]
                rest.pop(0)
            walled.append((start + offset + lag, bps))
        iv = walled
    except (OSError, ValueError, KeyError) as e:
        iv, err = [], f"unreadable iperf3 output ({e})"
    rate = 100e6

    def stall_runs(intervals):
        """(start, seconds) of each run of stalled 1-s intervals (a gap over 2.5 s, a skipped
        pause, ends a run)."""
        runs, prev = [], None
        for start, bps in intervals:
            if bps >= STALL_FRACTION * rate:
                prev = None
                continue
            if prev is not None and start - prev < 2.5:
                runs[-1][1] += 1
            else:
                runs.append([start, 1])
            prev = start
        return runs

    def window_of(t):
        return next((w for w in wide_floods if w[0] <= t <= w[1]), None)

    # A stall that begins in a flood is the flood's: the sender's TUN queue is full of the
    # flood's datagrams, so TCP loses every segment and doubles its retransmission timeout on
    # each loss. After an outage of d seconds the timer stands at about d, so the first
    # retransmission after the flood comes up to d later; if the flood's tail, still draining
    # through the receiver, takes that one and the next, the stall outlasts the window by d + 2d.
    # Such a stall may outlast its window by 3d + STALL_MAX_SECS (tcp_backoff.log, A's
    # retransmission timer each second, shows the doublings). A stall that begins outside a
    # flood gets STALL_MAX_SECS.
    runs = stall_runs([(a, b) for a, b in iv if not in_windows(a, paused)])
    longest, worst_at, in_flood, tail, tail_at, tail_ok = 0, None, 0, 0, None, True
    for start, secs_stalled in runs:
        w = window_of(start)
        if w is None:
            if secs_stalled > longest:
                longest, worst_at = secs_stalled, start
            continue
        inside = max(1.0, min(secs_stalled, w[1] - start))
        after = max(0.0, start + secs_stalled - w[1])
        in_flood = max(in_flood, round(inside))
        if after > tail:
            tail, tail_at = after, w
        tail_ok = tail_ok and after <= 3 * inside + STALL_MAX_SECS
    ran = len(iv)
    check(not err and ran >= secs - 3,
          f"TCP ran to the end ({ran:.0f} of {secs:.0f} s{'; ' + err if err else ''})")
    check(longest <= STALL_MAX_SECS,
          f"TCP never stalled longer than {STALL_MAX_SECS} s outside the floods (longest: {longest} s"
          + (f" from {worst_at:.0f} s" if longest else "") + f"; inside a flood: {in_flood} s)")
    check(tail_ok,
          "TCP came back from every flood within its retransmission backoff (a stall begun in a "
          f"flood of d s outlasts it by at most 3d + {STALL_MAX_SECS} s; longest: {tail:.0f} s"
          + (f" after the flood of {tail_at[0]:.0f} s" if tail_at else "") + ")")
    if tail_at is not None and tail > STALL_MAX_SECS:
        print("  TCP's retransmission timer on A from that flood to the end of the stall: "
              + backoff_trace(out, tail_at[0], tail_at[1] + tail + 1))
    rates = sorted(b for _, b in iv) or [0]
    print(f"  TCP: {len(iv)} 1-s intervals, median {statistics.median(rates) / 1e6:.1f} Mbit/s, "
          f"lowest {rates[0] / 1e6:.1f} Mbit/s")

    # Ping.
    replies, unanswered, first_ts = {}, {}, None
    for line in open(ping_path) if os.path.exists(ping_path) else []:
        m = re.match(r"\[(\d+\.\d+)\] .*icmp_seq=(\d+)", line)
        if not m:
            continue
        ts, seq = float(m.group(1)) - t0, int(m.group(2))
        first_ts = ts if first_ts is None else first_ts
        if "no answer yet" in line:
            unanswered[seq] = ts
        else:
            replies[seq] = ts
    last_seq = max(list(replies) + list(unanswered) + [0])
    lost = [s for s in range(1, last_seq + 1) if s not in replies]
    # The send time of a lost ping: its "no answer yet" line (printed at the next send), else
    # interpolated from the replies around it.
    def sent_at(s):
        if s in unanswered:
            return unanswered[s] - 0.2
        return (first_ts or 0) + (s - 1) * 0.2
    windows = wide_floods + [(t - 0.5, t + 0.5) for t in roams] + paused
    outside = [(s, sent_at(s)) for s in lost if not in_windows(sent_at(s), windows) and sent_at(s) < secs - 2]
    check(not outside, f"no ping lost outside the flood windows ({len(replies)} answered of {last_seq}, "
          f"{len(lost)} lost, {len(lost) - len(outside)} of them in flood, roam or pause windows)"
          + (f"; outside: {', '.join(f'seq {s} at {t:.1f} s' for s, t in outside[:5])}" if outside else ""))

    # UDP (reported).
    try:
        udp = json.load(open(os.path.join(out, "udp.json")))
        s = udp["end"].get("sum_received") or udp["end"]["sum"]
        print(f"  UDP: {s['bits_per_second'] / 1e6:.1f} Mbit/s received, {s.get('lost_percent', 0):.2f} % lost "
              f"(floods of unlimited UDP share the tunnel {len(floods)} times)")
    except (OSError, ValueError, KeyError) as e:
        print(f"  UDP: no summary ({e})")

    # Rekeys: distinct handshake times of the traffic peer.
    hs = []
    hs_path = os.path.join(out, "handshakes")
    for line in open(hs_path) if os.path.exists(hs_path) else []:
        p = line.split()
        if len(p) == 2 and p[1] != "0" and (not hs or hs[-1] != p[1]):
            hs.append(p[1])
    rekeys = max(0, len(hs) - 1)
    print(f"  rekeys seen: {rekeys} ({len(hs)} handshakes of the traffic peer at 10-s samples; "
          f"REKEY_AFTER_TIME is 120 s)")
    print(f"  roams: {len(roams)}, floods: {len(floods)}, peer churn: "
          f"{sum(1 for _ in open(os.path.join(out, 'events')) if 'churn-failed' in _)} failed rounds")

    # Sandbox.
    try:
        text = open(os.path.join(out, "sandbox.txt")).read()
    except OSError:
        text = ""
    uids = re.findall(r"Uid:\s+(\d+)", text)
    modes = re.findall(r"Seccomp:\s+(\d+)", text)
    logs = [f for f in os.listdir(out) if f.endswith(".log") and f != "ping.log"]
    reports = [f for f in logs if "vpn: seccomp: system call" in open(os.path.join(out, f), errors="replace").read()]
    check(uids and all(u != "0" for u in uids) and modes and all(m == "2" for m in modes) and not reports,
          "every thread still unprivileged under seccomp at the end; no seccomp report in the daemon logs"
          + (f" ({', '.join(reports)})" if reports else ""))

    if svg:
        write_svg(svg, series, daemons, floods, secs, pauses)
        print(f"  chart: {svg}")
    passed = sum(results)
    print(f"soak: {passed} passed, {len(results) - passed} failed")
    sys.exit(0 if all(results) else 1)


def write_svg(path, series, daemons, floods, secs, pauses=()):
    """Four panels (RSS, packet memory, descriptors, threads) against time, a line per daemon,
    the flood windows shaded."""
    panels = [("rss_kib", "RSS (MiB)", 1 / 1024), ("packet_bytes", "packet memory in use (MiB)", 1 / (1 << 20)),
              ("fds", "descriptors", 1), ("threads", "threads", 1)]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    W, PH, L, R, T = 760, 150, 60, 150, 30
    H = T + len(panels) * (PH + 40) + 20
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{L}" y="18" font-size="14">Soak: {secs / 60:.0f} minutes, one daemon per line (grey: UDP floods; orange: the machine paused)</text>']
    pw = W - L - R
    for pi, (key, title, scale) in enumerate(panels):
        y0 = T + pi * (PH + 40) + 20
        vals = [v * scale for d in daemons for _, v in series[d][key]]
        hi = max(vals) if vals else 1
        hi = hi * 1.15 if hi > 0 else 1
        x = lambda t: L + pw * t / secs
        y = lambda v: y0 + PH - PH * v / hi
        o.append(f'<text x="{L}" y="{y0 - 6}">{title}</text>')
        for a, b in floods:
            o.append(f'<rect x="{x(a):.1f}" y="{y0}" width="{max(1, x(b) - x(a)):.1f}" height="{PH}" fill="#eeeeee"/>')
        for a, b in pauses:
            o.append(f'<rect x="{x(a):.1f}" y="{y0}" width="{max(1, x(b) - x(a)):.1f}" height="{PH}" fill="#fde2c8"/>')
        o.append(f'<rect x="{L}" y="{y0}" width="{pw}" height="{PH}" fill="none" stroke="#888"/>')
        for f in (0, 0.5, 1):
            o.append(f'<text x="{L - 6}" y="{y(hi * f / 1.15) + 4:.1f}" text-anchor="end">{hi * f / 1.15:.3g}</text>')
        for m in range(0, int(secs) + 1, max(60, int(secs / 10) // 60 * 60 or 60)):
            o.append(f'<text x="{x(m):.1f}" y="{y0 + PH + 14}" text-anchor="middle">{m // 60} min</text>')
        for di, d in enumerate(daemons):
            pts = " ".join(f"{x(t):.1f},{y(v * scale):.1f}" for t, v in series[d][key])
            if pts:
                o.append(f'<polyline fill="none" stroke="{colors[di % 4]}" stroke-width="1.5" points="{pts}"/>')
            if pi == 0:
                o.append(f'<text x="{W - R + 10}" y="{y0 + 16 * di + 12}" fill="{colors[di % 4]}">daemon {d}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
