/*
 * The part of android.net.VpnService the JVM test needs, as JNI: establish() hands out a TUN fd
 * the way VpnService.Builder.establish() + ParcelFileDescriptor.detachFd() do (a layer-3 TUN
 * without a packet-information header or a virtio header, in blocking mode, owned by the
 * caller), attached to an interface the test configured beforehand (`ip tuntap add ... mode
 * tun`), as Android's own establish() configures addresses and routes before it returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <jni.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* int establish(String ifname): the fd, or -errno. */
JNIEXPORT jint JNICALL Java_com_wireguard_android_backend_TestVpnService_establish(
    JNIEnv *env, jclass cls, jstring name) {
    (void)cls;
    const char *n = (*env)->GetStringUTFChars(env, name, NULL);
    if (n == NULL)
        return -ENOMEM;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    strncpy(ifr.ifr_name, n, IFNAMSIZ - 1);
    (*env)->ReleaseStringUTFChars(env, name, n);
    int fd = open("/dev/net/tun", O_RDWR);
    if (fd < 0)
        return -errno;
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* int openNotTun(): an fd that is open but no TUN (/dev/null), or -errno. */
JNIEXPORT jint JNICALL Java_com_wireguard_android_backend_TestVpnService_openNotTun(
    JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    int fd = open("/dev/null", O_RDWR);
    return fd < 0 ? -errno : fd;
}
