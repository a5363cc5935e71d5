package com.wireguard.android.backend;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.TreeSet;
import java.util.stream.Stream;

/**
 * The JVM side of the Android test: the six native methods exactly as wireguard-android's
 * GoBackend declares them, called the way GoBackend calls them, from a host driven by the
 * netns scenario (netns-tests/android.sh) through a command FIFO.
 *
 * <p>Commands, one per line, "ID VERB ARGS"; every reply line starts with "ID " and the last
 * one is "ID done" (or "ID FAIL why"):
 * turnon IFNAME TUNDEV SETTINGSFILE, sockets H, stats H, config H, off H, proc, bad TUNDEV
 * SETTINGSFILE, cycles N TUNDEV SETTINGSFILE, quit.
 */
public final class GoBackend {
    private static native int wgTurnOn(String ifName, int tunFd, String settings);

    private static native void wgTurnOff(int handle);

    private static native int wgGetSocketV4(int handle);

    private static native int wgGetSocketV6(int handle);

    private static native String wgGetConfig(int handle);

    private static native String wgVersion();

    private GoBackend() {}

    /** A failed check: the host replies "ID FAIL why" and goes on. */
    static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        Failure(String why) {
            super(why);
        }
    }

    static void check(boolean ok, String what) throws Failure {
        if (!ok) throw new Failure(what);
    }

    public static void main(String[] args) throws IOException {
        System.loadLibrary("wg-go");
        System.out.println("version " + wgVersion());
        System.out.flush();
        try (BufferedReader in =
                new BufferedReader(
                        new InputStreamReader(new FileInputStream(args[0]), StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split(" +");
                if (w.length < 2) continue;
                String id = w[0];
                List<String> out = new ArrayList<>();
                String end = "done";
                try {
                    if (w[1].equals("quit")) {
                        reply(id, out, end);
                        return;
                    }
                    run(w, out);
                } catch (Failure f) {
                    end = "FAIL " + f.getMessage();
                } catch (Exception | Error e) {
                    end = "FAIL " + e;
                }
                reply(id, out, end);
            }
        }
    }

    static void reply(String id, List<String> out, String end) {
        for (String l : out) System.out.println(id + " " + l);
        System.out.println(id + " " + end);
        System.out.flush();
    }

    static void run(String[] w, List<String> out) throws Exception {
        switch (w[1]) {
            case "turnon": {
                int fd = establish(w[3]);
                int h = wgTurnOn(w[2], fd, read(w[4]));
                check(h >= 0, "wgTurnOn returned " + h);
                out.add("handle " + h);
                out.add("sockets " + wgGetSocketV4(h) + " " + wgGetSocketV6(h));
                break;
            }
            case "sockets": {
                int h = Integer.parseInt(w[2]);
                out.add("sockets " + wgGetSocketV4(h) + " " + wgGetSocketV6(h));
                break;
            }
            case "stats":
                statistics(Integer.parseInt(w[2]), out);
                break;
            case "config": {
                String c = wgGetConfig(Integer.parseInt(w[2]));
                check(c != null, "wgGetConfig returned null");
                for (String l : c.split("\n")) out.add("| " + l);
                break;
            }
            case "off":
                wgTurnOff(Integer.parseInt(w[2]));
                break;
            case "proc":
                out.add(proc().toString());
                break;
            case "bad":
                bad(w[2], read(w[3]), out);
                break;
            case "cycles":
                cycles(Integer.parseInt(w[2]), w[3], read(w[4]), out);
                break;
            default:
                throw new Failure("unknown command " + w[1]);
        }
    }

    static String read(String path) throws IOException {
        return new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8);
    }

    static int establish(String dev) throws Failure {
        int fd = TestVpnService.establish(dev);
        check(fd >= 0, "establish(" + dev + "): errno " + -fd);
        return fd;
    }

    static boolean fdOpen(int fd) {
        return Files.exists(Paths.get("/proc/self/fd/" + fd), LinkOption.NOFOLLOW_LINKS);
    }

    /**
     * GoBackend.getStatistics: the same lines read the same way (a peer starts at public_key;
     * the handshake time is sec * 1000 + nsec / 1e6 milliseconds), the key shown in base64.
     */
    static void statistics(int handle, List<String> out) throws Failure {
        final String config = wgGetConfig(handle);
        check(config != null, "wgGetConfig returned null");
        String key = null;
        long rx = 0, tx = 0, latestHandshakeMSec = 0;
        for (final String line : config.split("\\n")) {
            if (line.startsWith("public_key=")) {
                if (key != null) out.add(peer(key, rx, tx, latestHandshakeMSec));
                rx = 0;
                tx = 0;
                latestHandshakeMSec = 0;
                key = base64(line.substring(11));
            } else if (line.startsWith("rx_bytes=")) {
                if (key == null) continue;
                rx = Long.parseLong(line.substring(9));
            } else if (line.startsWith("tx_bytes=")) {
                if (key == null) continue;
                tx = Long.parseLong(line.substring(9));
            } else if (line.startsWith("last_handshake_time_sec=")) {
                if (key == null) continue;
                latestHandshakeMSec += Long.parseLong(line.substring(24)) * 1000;
            } else if (line.startsWith("last_handshake_time_nsec=")) {
                if (key == null) continue;
                latestHandshakeMSec += Long.parseLong(line.substring(25)) / 1000000;
            }
        }
        if (key != null) out.add(peer(key, rx, tx, latestHandshakeMSec));
    }

    static String peer(String key, long rx, long tx, long handshakeMs) {
        return "peer " + key + " rx " + rx + " tx " + tx + " handshake_ms " + handshakeMs;
    }

    static String base64(String hex) throws Failure {
        check(hex.length() == 64, "public_key is not 32 bytes of hex: " + hex);
        byte[] b = new byte[32];
        for (int i = 0; i < 32; i++) b[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        return Base64.getEncoder().encodeToString(b);
    }

    /** Descriptors, threads (and their names) and resident memory of this process. */
    static final class Proc {
        long fds, threads, rssKib;
        TreeSet<String> threadNames = new TreeSet<>();

        @Override
        public String toString() {
            return "fds " + fds + " threads " + threads + " rss_kib " + rssKib;
        }
    }

    static Proc proc() throws IOException {
        Proc p = new Proc();
        try (Stream<Path> s = Files.list(Paths.get("/proc/self/fd"))) {
            p.fds = s.count();
        }
        try (Stream<Path> s = Files.list(Paths.get("/proc/self/task"))) {
            for (Path t : (Iterable<Path>) s::iterator) {
                p.threads++;
                try {
                    p.threadNames.add(read(t.resolve("comm").toString()).trim());
                } catch (IOException gone) {
                    // the thread ended while we looked
                }
            }
        }
        for (String l : read("/proc/self/status").split("\n")) {
            if (l.startsWith("VmRSS:")) p.rssKib = Long.parseLong(l.replaceAll("[^0-9]", ""));
        }
        return p;
    }

    /** Bad arguments: -1 or null every time, the fd closed, the JVM alive, a good start after. */
    static void bad(String dev, String good, List<String> out) throws Exception {
        String[][] settings = {
            {"private_key=zz\n", "a key that is not hex"},
            {"foo=bar\n", "an unknown key"},
            {good + "public_key=00\n", "a short peer key"},
            {good.replace("endpoint=", "endpoint=nowhere:"), "an endpoint that does not parse"},
            {"private_key=" + "0".repeat(1 << 20) + "\n", "a 1 MiB value"},
            {"\u0000\u00ff\ud800x=1\n", "a NUL and a lone surrogate"},
        };
        for (String[] s : settings) {
            int fd = establish(dev);
            int h = wgTurnOn("wgbad", fd, s[0]);
            check(h == -1, s[1] + ": wgTurnOn returned " + h);
            check(!fdOpen(fd), s[1] + ": the fd " + fd + " was left open");
            out.add("refused " + s[1] + ", fd closed");
        }
        int fd = establish(dev);
        check(wgTurnOn("wgbad", fd, null) == -1 && !fdOpen(fd), "null settings");
        fd = establish(dev);
        check(wgTurnOn(null, fd, good) == -1 && !fdOpen(fd), "null interface name");
        out.add("refused null settings and a null name, fd closed");
        fd = TestVpnService.openNotTun();
        check(fd >= 0, "openNotTun");
        check(wgTurnOn("wgbad", fd, good) == -1 && !fdOpen(fd), "an fd that is not a TUN");
        out.add("refused an fd that is not a TUN, fd closed");
        for (int bad : new int[] {-1, Integer.MIN_VALUE, 1 << 20}) {
            check(wgTurnOn("wgbad", bad, good) == -1, "fd " + bad);
        }
        out.add("refused fds -1, MIN_VALUE and 2^20");
        for (int h : new int[] {-1, 0, 7, 4096, Integer.MAX_VALUE, Integer.MIN_VALUE}) {
            wgTurnOff(h);
            check(wgGetSocketV4(h) == -1 && wgGetSocketV6(h) == -1, "sockets of handle " + h);
            check(wgGetConfig(h) == null, "config of handle " + h);
        }
        out.add("invalid handles: -1 and null, no crash");
        int h = wgTurnOn("wgbad", establish(dev), good);
        check(h == 0, "a good start after all that got handle " + h + ", want 0");
        check(wgGetConfig(h) != null, "config after a good start");
        wgTurnOff(h);
        out.add("then a good start got handle 0; the JVM is alive");
    }

    /** N turn-on/turn-off cycles: what the process holds before and after. */
    static void cycles(int n, String dev, String settings, List<String> out) throws Exception {
        for (int i = 0; i < 5; i++) cycle(dev, settings, null);
        System.gc();
        Proc before = proc();
        TreeSet<String> tunnelThreads = new TreeSet<>();
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) cycle(dev, settings, i == 0 ? tunnelThreads : null);
        long ms = (System.nanoTime() - t0) / 1000000;
        System.gc();
        Thread.sleep(200);
        Proc after = proc();
        tunnelThreads.removeAll(before.threadNames);
        out.add("before " + before);
        out.add("after " + after);
        out.add("cycles " + n + " in " + ms + " ms");
        out.add("tunnel threads " + tunnelThreads);
        check(!tunnelThreads.isEmpty(), "no thread of the tunnel was seen while it ran");
        for (String t : tunnelThreads) {
            check(!after.threadNames.contains(t), "thread " + t + " outlived wgTurnOff");
        }
        check(after.fds <= before.fds, "fds grew from " + before.fds + " to " + after.fds);
        check(after.threads <= before.threads + 2, "threads grew from " + before.threads + " to " + after.threads);
        check(after.rssKib - before.rssKib < 16 * 1024, "RSS grew by " + (after.rssKib - before.rssKib) + " KiB");
    }

    static void cycle(String dev, String settings, TreeSet<String> threads) throws Exception {
        int fd = establish(dev);
        int h = wgTurnOn("wgcycle", fd, settings);
        check(h == 0, "wgTurnOn in a cycle returned " + h);
        check(wgGetSocketV4(h) >= 0, "no v4 socket in a cycle");
        check(wgGetConfig(h) != null, "no config in a cycle");
        if (threads != null) threads.addAll(proc().threadNames);
        wgTurnOff(h);
        check(!fdOpen(fd), "wgTurnOff left the TUN fd " + fd + " open");
    }
}
