/*
 * bind.c - which local address a rank that serves the rendezvous store listens on. Not every
 * address: a store on 0.0.0.0 is reachable from every network the host is on, including ones
 * the job never uses. The choice, in order: CHORUS_BIND_ANY=1 (every address, when asked),
 * CHORUS_IFACE (an interface name or an IPv4 address), else the address the store's host
 * name (MASTER_ADDR, the first Slurm node) resolves to, which is the one peers dial. With no
 * store host name (the address is shared through PMIx), the host's own address instead.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap/store.h"
#include "wire/sock.h"

chorus_result chorus__iface_ip(const char *iface, char *ip, size_t len, chorus_errbuf *e)
{
    struct in_addr a;
    if (inet_pton(AF_INET, iface, &a) == 1) {
        snprintf(ip, len, "%s", iface);
        return CHORUS_OK;
    }
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, iface)) {
                inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip,
                          (socklen_t)len);
                freeifaddrs(ifs);
                return CHORUS_OK;
            }
        freeifaddrs(ifs);
    }
    return chorus__fail(e, CHORUS_ERR_ENV,
                        "CHORUS_IFACE=%s is neither an IPv4 address nor an interface with one",
                        iface);
}

chorus_result chorus__store_bind_ip(const chorus_config *cfg, const char *store_addr, char *ip,
                                    size_t len, chorus_errbuf *e)
{
    ip[0] = 0;
    if (cfg->bind_any) {
        CHORUS_INFO(CHORUS_LOG_BOOT, "store: listening on every address (CHORUS_BIND_ANY=1)");
        return CHORUS_OK;
    }
    const char *iface = cfg->iface;
    if (iface) return chorus__iface_ip(iface, ip, len, e);
    struct sockaddr_in sa;
    if (chorus__sock_resolve(store_addr, &sa))
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "cannot resolve the store address '%s' to an IPv4 address to listen "
                            "on (set CHORUS_IFACE, or CHORUS_BIND_ANY=1 to listen on every "
                            "address)",
                            store_addr);
    inet_ntop(AF_INET, &sa.sin_addr, ip, (socklen_t)len);
    return CHORUS_OK;
}

chorus_result chorus__store_host_ip(const chorus_config *cfg, char *ip, size_t len,
                                    chorus_errbuf *e)
{
    if (cfg->iface) return chorus__iface_ip(cfg->iface, ip, len, e);
    snprintf(ip, len, "127.0.0.1");
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs)) return CHORUS_OK;
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)len);
            break;
        }
    freeifaddrs(ifs);
    return CHORUS_OK;
}

chorus_result chorus_host_address(char *ip, size_t len)
{
    chorus_errbuf *e = chorus__init_errbuf();
    e->msg[0] = 0;
    if (!ip || len < 16)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_host_address: ip must hold at least 16 bytes");
    chorus_config cfg;
    CHORUS_CHECK(chorus__config_load(&cfg, e));
    return chorus__store_host_ip(&cfg, ip, len, e);
}
