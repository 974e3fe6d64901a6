/*
 * bind_addr.c - which address a rank that serves the rendezvous store listens on
 * (src/bootstrap/bind.c): MASTER_ADDR's address, CHORUS_IFACE's, or every address only with
 * CHORUS_BIND_ANY=1; a bad CHORUS_IFACE or an address of another host fails with a message
 * that says what to set. chorus_host_address, the address a host is reached at when the job
 * names none: CHORUS_IFACE's, else an IPv4 address of the host.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "harness.h"
#include "wire/sock.h"

/* The local address of the TCP socket listening on port, from /proc/net/tcp. */
static void listen_addr(int port, char *out, size_t len)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    ASSERT(f);
    char line[512];
    snprintf(out, len, "none");
    while (fgets(line, sizeof(line), f)) {
        unsigned a, p, st;
        if (sscanf(line, " %*d: %8x:%4x %*8x:%*4x %2x", &a, &p, &st) == 3 && (int)p == port &&
            st == 0x0a) {
            struct in_addr in = {.s_addr = a}; /* the kernel prints it in host order */
            inet_ntop(AF_INET, &in, out, (socklen_t)len);
        }
    }
    fclose(f);
}

/* Starts a store on ip and checks where the kernel says it listens. */
static void listening_on(const char *ip, const char *want)
{
    chorus_store_server *s;
    chorus_errbuf e;
    int port;
    ASSERT_OK(chorus__store_server_start(ip, 0, &s, &port, &e));
    char got[64];
    listen_addr(port, got, sizeof(got));
    chorus__store_server_stop(s);
    printf("store asked for '%s' listens on %s:%d\n", ip, got, port);
    ASSERT_STR_CONTAINS(got, want);
    ASSERT_EQ(strlen(got), strlen(want));
}

/* The config as the environment is now (the test changes it between calls). */
static const chorus_config *env_now(void)
{
    static chorus_config cfg;
    chorus_errbuf e;
    ASSERT_OK(chorus__config_parse(&cfg, &e));
    return &cfg;
}

int main(void)
{
    chorus_errbuf e;
    char ip[64];
    unsetenv("CHORUS_IFACE");
    unsetenv("CHORUS_BIND_ANY");
    ASSERT_OK(chorus__store_bind_ip(env_now(), "127.0.0.1:29400", ip, sizeof(ip), &e));
    listening_on(ip, "127.0.0.1");
    ASSERT_OK(chorus__store_bind_ip(env_now(), "localhost:29400", ip, sizeof(ip), &e));
    listening_on(ip, "127.0.0.1");
    setenv("CHORUS_IFACE", "lo", 1);
    ASSERT_OK(chorus__store_bind_ip(env_now(), "10.1.2.3:29400", ip, sizeof(ip), &e));
    listening_on(ip, "127.0.0.1");
    setenv("CHORUS_IFACE", "no-such-iface0", 1);
    ASSERT_EQ(chorus__store_bind_ip(env_now(), "127.0.0.1:29400", ip, sizeof(ip), &e),
              CHORUS_ERR_ENV);
    ASSERT_STR_CONTAINS(e.msg,
                        "CHORUS_IFACE=no-such-iface0 is neither an IPv4 address nor an interface");
    unsetenv("CHORUS_IFACE");
    setenv("CHORUS_BIND_ANY", "1", 1);
    ASSERT_OK(chorus__store_bind_ip(env_now(), "127.0.0.1:29400", ip, sizeof(ip), &e));
    ASSERT_EQ(ip[0], 0); /* every address, because asked */
    listening_on(ip, "0.0.0.0");
    unsetenv("CHORUS_BIND_ANY");
    /* an address that is not on this host (TEST-NET-1): listening fails with a hint */
    chorus_store_server *s;
    int port;
    ASSERT_OK(chorus__store_bind_ip(env_now(), "192.0.2.1:29400", ip, sizeof(ip), &e));
    ASSERT_EQ(chorus__store_server_start(ip, 0, &s, &port, &e), CHORUS_ERR_SYSTEM);
    ASSERT_STR_CONTAINS(e.msg, "not on this host: check MASTER_ADDR or CHORUS_IFACE");
    ASSERT_EQ(chorus__store_bind_ip(env_now(), "no-such-host.invalid:1", ip, sizeof(ip), &e),
              CHORUS_ERR_ENV);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_BIND_ANY=1");
    /* chorus_host_address: CHORUS_IFACE's address (a name or an address), else one of this
     * host's IPv4 addresses; a bad CHORUS_IFACE and a short buffer are said */
    setenv("CHORUS_IFACE", "lo", 1);
    ASSERT_OK(chorus_host_address(ip, sizeof(ip)));
    ASSERT(!strcmp(ip, "127.0.0.1"));
    setenv("CHORUS_IFACE", "10.1.2.3", 1);
    ASSERT_OK(chorus_host_address(ip, sizeof(ip)));
    ASSERT(!strcmp(ip, "10.1.2.3"));
    setenv("CHORUS_IFACE", "no-such-iface0", 1);
    ASSERT_EQ(chorus_host_address(ip, sizeof(ip)), CHORUS_ERR_ENV);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL),
                        "CHORUS_IFACE=no-such-iface0 is neither an IPv4 address nor an interface");
    unsetenv("CHORUS_IFACE");
    ASSERT_OK(chorus_host_address(ip, sizeof(ip)));
    struct in_addr a;
    ASSERT_EQ(inet_pton(AF_INET, ip, &a), 1);
    ASSERT_EQ(chorus_host_address(ip, 8), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "at least 16 bytes");
    printf("ok: %s\n", "the store listens where it is asked to, never everywhere by default");
    return 0;
}
