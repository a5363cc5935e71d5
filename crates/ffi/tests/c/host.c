/*
 * A C host of the vpn-ffi library, the way an Android VpnService (or a network extension)
 * uses it: it opens the TUN itself (/dev/net/tun, IFF_TUN | IFF_NO_PI), hands the fd to
 * wgTurnOn, and closes its own copy. Driven by tests/c_host.rs; built with `cc` against the
 * static or the dynamic library.
 *
 *   host tunnel <ifname> <settings-file> [<memory-budget>]
 *       With a budget, first prints "BUDGET <bytes> <result>" for wgSetMemoryBudget(budget).
 *       Opens the TUN, turns the tunnel on, prints "TUN <name>" and "HANDLE <n>", then serves
 *       commands on stdin, one per line, answering on stdout:
 *         get            the wgGetConfig text, then a line "END"
 *         set <file>     "RESULT <n>": wgSetConfig with the file's text
 *         bump           "OK" once wgBumpSockets returned
 *         roam           "OK": wgDisableSomeRoamingForBrokenMobileSemantics
 *         sockets        "SOCKETS <v4 port> <v6 port>": the ports behind wgGetSocketV4/V6
 *                        (-1 for none)
 *         off            "OFF" once wgTurnOff returned; exits
 *   host cycles <ifname> <settings-file> <cycles> <warm-up>
 *       Turns a tunnel on and off <cycles> times (each on a freshly opened TUN, with a
 *       wgGetConfig and a wgBumpSockets in between) and prints the process's open fds,
 *       threads, RSS and malloc'ed bytes in use before the first cycle, after <warm-up> cycles
 *       and after the last: "MEASURE <when> fds=<n> threads=<n> rss_kib=<n> heap=<n>".
 *   host budget <bytes>...
 *       For each value in turn: "BUDGET <bytes> <result>" for wgSetMemoryBudget(bytes); a
 *       value "default" or "min" is the header's WG_DEFAULT_MEMORY_BUDGET or WG_MIN_MEMORY_BUDGET.
 *   host tcp-serve <addr> <port> <bytes>   accepts one connection, checks <bytes> pattern
 *                                          bytes, answers "OK <n>"
 *   host tcp-send <addr> <port> <bytes>    sends them, prints the answer "REPLY OK <n>"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <linux/if_tun.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wireguard.h"

static void die(const char *what) {
    fprintf(stderr, "host: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void log_line(void *context, int level, const char *msg) {
    (void)context;
    fprintf(stderr, "LOG %d %s\n", level, msg);
}

/* Only errors: 200 cycles of verbose lines would bury the figures. */
static void log_errors(void *context, int level, const char *msg) {
    if (level == 1)
        log_line(context, level, msg);
}

static int open_tun(const char *name) {
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die("open /dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0)
        die("TUNSETIFF");
    return fd;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0)
            buf = realloc(buf, cap *= 2);
    }
    if (!buf)
        die("malloc");
    buf[len] = 0;
    fclose(f);
    return buf;
}

/* The local port of a socket fd, -1 if it is not one. */
static int local_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* wgSetMemoryBudget with a decimal value, or the header's constants by name ("default",
 * "min"); prints "BUDGET <bytes> <result>". */
static void set_budget(const char *value) {
    long long bytes = !strcmp(value, "default") ? WG_DEFAULT_MEMORY_BUDGET
                      : !strcmp(value, "min")   ? WG_MIN_MEMORY_BUDGET
                                                : strtoll(value, NULL, 10);
    printf("BUDGET %lld %d\n", bytes, wgSetMemoryBudget((int64_t)bytes));
}

static int tunnel(const char *ifname, const char *settings_path, const char *budget) {
    wgSetLogger(NULL, log_line);
    if (budget)
        set_budget(budget);
    int fd = open_tun(ifname);
    char *settings = read_file(settings_path);
    int handle = wgTurnOn(settings, fd);
    free(settings);
    /* The library holds its own duplicate: the interface lives on without ours. */
    close(fd);
    if (handle < 0) {
        printf("FAILED\n");
        return 1;
    }
    printf("TUN %s\nHANDLE %d\n", ifname, handle);
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (strcmp(line, "get") == 0) {
            char *config = wgGetConfig(handle);
            printf("%sEND\n", config ? config : "NULL\n");
            free(config);
        } else if (strncmp(line, "set ", 4) == 0) {
            char *text = read_file(line + 4);
            printf("RESULT %lld\n", (long long)wgSetConfig(handle, text));
            free(text);
        } else if (strcmp(line, "bump") == 0) {
            wgBumpSockets(handle);
            printf("OK\n");
        } else if (strcmp(line, "roam") == 0) {
            wgDisableSomeRoamingForBrokenMobileSemantics(handle);
            printf("OK\n");
        } else if (strcmp(line, "sockets") == 0) {
            printf("SOCKETS %d %d\n", local_port(wgGetSocketV4(handle)),
                   local_port(wgGetSocketV6(handle)));
        } else if (strcmp(line, "off") == 0) {
            break;
        } else {
            printf("UNKNOWN %s\n", line);
        }
        fflush(stdout);
    }
    wgTurnOff(handle);
    printf("OFF\n");
    return 0;
}

struct measure {
    long fds, threads, rss_kib;
    size_t heap;
};

static long status_field(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        die("/proc/self/status");
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':')
            v = strtol(line + klen + 1, NULL, 10);
    fclose(f);
    return v;
}

static struct measure measure(void) {
    struct measure m;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        die("/proc/self/fd");
    m.fds = -1; /* the directory's own fd */
    while (readdir(d))
        m.fds++;
    closedir(d);
    m.fds -= 2; /* "." and ".." */
    m.threads = status_field("Threads");
    m.rss_kib = status_field("VmRSS");
    m.heap = mallinfo2().uordblks;
    return m;
}

static void print_measure(const char *when, struct measure m) {
    printf("MEASURE %s fds=%ld threads=%ld rss_kib=%ld heap=%zu\n", when, m.fds, m.threads,
           m.rss_kib, m.heap);
    fflush(stdout);
}

static int cycles(const char *ifname, const char *settings_path, int n, int warm_up) {
    wgSetLogger(NULL, log_errors);
    char *settings = read_file(settings_path);
    print_measure("before", measure());
    for (int i = 1; i <= n; i++) {
        int fd = open_tun(ifname);
        int handle = wgTurnOn(settings, fd);
        close(fd);
        /* The first free handle is reused: always 0 here. */
        if (handle != 0) {
            printf("FAILED cycle %d: handle %d\n", i, handle);
            return 1;
        }
        char *config = wgGetConfig(handle);
        if (!config || strstr(config, "private_key=") != config) {
            printf("FAILED cycle %d: config %s\n", i, config ? config : "NULL");
            return 1;
        }
        free(config);
        wgBumpSockets(handle);
        wgTurnOff(handle);
        if (i == warm_up)
            print_measure("warm", measure());
    }
    print_measure("after", measure());
    printf("INTERFACE %s\n", if_nametoindex(ifname) ? "present" : "gone");
    free(settings);
    return 0;
}

/* The deterministic byte at offset i of a transfer (not periodic at small strides). */
static unsigned char pattern(size_t i) {
    unsigned long long x = (unsigned long long)i * 0x9E3779B97F4A7C15ull;
    return (unsigned char)((x >> 56) ^ (i >> 12));
}

static int tcp_socket(const char *addr, const char *port, struct addrinfo **ai) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(addr, port, &hints, ai) != 0) {
        fprintf(stderr, "host: bad address %s port %s\n", addr, port);
        exit(2);
    }
    int s = socket((*ai)->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        die("socket");
    return s;
}

static int tcp_serve(const char *addr, const char *port, size_t bytes) {
    struct addrinfo *ai;
    int l = tcp_socket(addr, port, &ai);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l, 1) < 0)
        die("bind/listen");
    freeaddrinfo(ai);
    printf("LISTENING\n");
    fflush(stdout);
    int s = accept(l, NULL, NULL);
    if (s < 0)
        die("accept");
    static unsigned char buf[65536];
    size_t total = 0;
    ssize_t n;
    while ((n = read(s, buf, sizeof buf)) > 0) {
        for (ssize_t k = 0; k < n; k++)
            if (buf[k] != pattern(total + k)) {
                fprintf(stderr, "host: byte %zu differs\n", total + k);
                return 1;
            }
        total += n;
    }
    if (n < 0)
        die("read");
    char reply[64];
    int len = snprintf(reply, sizeof reply, "OK %zu\n", total);
    if (write(s, reply, len) != len)
        die("write reply");
    close(s);
    close(l);
    return total == bytes ? 0 : 1;
}

static int tcp_send(const char *addr, const char *port, size_t bytes) {
    struct addrinfo *ai;
    int s = -1;
    /* The first connect may race the handshake: retry for up to 15 s. */
    for (int attempt = 0; attempt < 150; attempt++) {
        s = tcp_socket(addr, port, &ai);
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(ai);
            break;
        }
        freeaddrinfo(ai);
        close(s);
        s = -1;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s < 0)
        die("connect");
    static unsigned char buf[65536];
    size_t sent = 0;
    while (sent < bytes) {
        size_t chunk = bytes - sent < sizeof buf ? bytes - sent : sizeof buf;
        for (size_t k = 0; k < chunk; k++)
            buf[k] = pattern(sent + k);
        size_t off = 0;
        while (off < chunk) {
            ssize_t n = write(s, buf + off, chunk - off);
            if (n < 0)
                die("write");
            off += n;
        }
        sent += chunk;
    }
    shutdown(s, SHUT_WR);
    char reply[64] = {0};
    ssize_t n = read(s, reply, sizeof reply - 1);
    if (n < 0)
        die("read reply");
    printf("REPLY %s", reply);
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "tunnel") == 0)
        return tunnel(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
    if (argc >= 3 && strcmp(argv[1], "budget") == 0) {
        wgSetLogger(NULL, log_line);
        for (int i = 2; i < argc; i++)
            set_budget(argv[i]);
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "cycles") == 0)
        return cycles(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc == 5 && strcmp(argv[1], "tcp-serve") == 0)
        return tcp_serve(argv[2], argv[3], strtoul(argv[4], NULL, 10));
    if (argc == 5 && strcmp(argv[1], "tcp-send") == 0)
        return tcp_send(argv[2], argv[3], strtoul(argv[4], NULL, 10));
    fprintf(stderr, "usage: see the comment at the top of host.c (version %s)\n", wgVersion());
    return 2;
}
