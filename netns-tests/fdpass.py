#!/usr/bin/env python3
"""A supervisor that starts a WireGuard daemon on descriptors it opened itself, the way
wireguard-go accepts them: WG_TUN_FD (an attached TUN) and WG_UAPI_FD (a listening Unix
socket), then exec()s the daemon so its PID is the daemon's.

Usage: fdpass.py [--tun SPEC] [--uapi SPEC] -- daemon args...

SPEC says what the variable names (the bad ones test the daemon's refusals):
  tun:NAME           /dev/net/tun attached to a new TUN NAME (IFF_TUN | IFF_NO_PI)
  tun-vnet:NAME      the same with IFF_VNET_HDR
  listen:PATH        a Unix stream socket bound to PATH and listening
  unattached         /dev/net/tun opened without TUNSETIFF
  file               /dev/null
  udp                a UDP socket
  unlistened:PATH    a Unix stream socket bound to PATH, never listen()ed
  dgram:PATH         a Unix datagram socket bound to PATH
  closed             the number of a descriptor that is not open
  text:VALUE         VALUE itself (not a number, a negative number, ...)
"""
import fcntl
import os
import socket
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000


def open_tun(name, vnet):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    flags = IFF_TUN | IFF_NO_PI | (IFF_VNET_HDR if vnet else 0)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), flags))
    return fd


def unix_socket(kind, path):
    s = socket.socket(socket.AF_UNIX, kind)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    s.bind(path)
    return s


def descriptor(spec, keep):
    """The env value for SPEC; sockets are kept alive in KEEP until the exec."""
    kind, _, arg = spec.partition(":")
    if kind == "text":
        return arg
    if kind == "closed":
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
        return str(fd + 40)  # well above anything this process has open
    if kind in ("tun", "tun-vnet"):
        fd = open_tun(arg, kind == "tun-vnet")
    elif kind == "unattached":
        fd = os.open("/dev/net/tun", os.O_RDWR)
    elif kind == "file":
        fd = os.open("/dev/null", os.O_RDWR)
    elif kind == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keep.append(s)
        fd = s.fileno()
    elif kind in ("listen", "unlistened", "dgram"):
        s = unix_socket(socket.SOCK_DGRAM if kind == "dgram" else socket.SOCK_STREAM, arg)
        if kind == "listen":
            s.listen(16)
        keep.append(s)
        fd = s.fileno()
    else:
        sys.exit("fdpass.py: unknown descriptor spec %r" % spec)
    os.set_inheritable(fd, True)
    return str(fd)


def main(argv):
    env = dict(os.environ)
    keep = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        opt, spec = argv[i], argv[i + 1]
        var = {"--tun": "WG_TUN_FD", "--uapi": "WG_UAPI_FD"}.get(opt)
        if var is None:
            sys.exit("fdpass.py: unknown option %r" % opt)
        env[var] = descriptor(spec, keep)
        i += 2
    cmd = argv[i + 1:]
    if not cmd:
        sys.exit(__doc__)
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main(sys.argv[1:])
