package com.wireguard.android.backend;

/** What the test needs of android.net.VpnService: a TUN fd as establish() + detachFd() give it. */
final class TestVpnService {
    static {
        System.loadLibrary("testvpnservice");
    }

    private TestVpnService() {}

    /** The fd of a TUN attached to the configured interface {@code ifname}, or -errno. */
    static native int establish(String ifname);

    /** An open fd that is not a TUN, or -errno. */
    static native int openNotTun();
}
