/*
 * hosts.c - where ranks run: host lists (-H, --hostfile, a discovery script's lines),
 * placement by slot, which hosts are this machine, and an elastic job's choice of host for a
 * new worker.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch/launch.h"
#include "wire/sock.h"

/* ---- host lists ------------------------------------------------------------------------- */

int run_hosts_add(run_hosts *hs, const char *spec, char *err, size_t len)
{
    char name[256];
    long slots = 1;
    const char *colon = strrchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= sizeof(name)) {
        snprintf(err, len, "'%s' is not a host name", spec);
        return -1;
    }
    memcpy(name, spec, n);
    name[n] = 0;
    for (const char *c = name; *c; c++)
        if (*c == ' ' || *c == '\t' || *c == '\'' || *c == '"' || *c == ';' || *c == '&' ||
            *c == '|' || *c == '$' || *c == '`' || *c == '\\') {
            snprintf(err, len, "'%s' is not a host name", name);
            return -1;
        }
    if (colon && chorus__parse_int(colon + 1, 0, 4096, &slots)) {
        snprintf(err, len, "'%s': the slots after ':' must be a number from 0 to 4096", spec);
        return -1;
    }
    for (int i = 0; i < hs->n; i++)
        if (!strcmp(hs->h[i].name, name)) {
            hs->h[i].slots += (int)slots;
            return 0;
        }
    run_host *nh = realloc(hs->h, (size_t)(hs->n + 1) * sizeof(*nh));
    if (!nh) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    hs->h = nh;
    memset(&hs->h[hs->n], 0, sizeof(run_host));
    snprintf(hs->h[hs->n].name, sizeof(hs->h[hs->n].name), "%s", name);
    hs->h[hs->n].slots = (int)slots;
    hs->n++;
    return 0;
}

int run_hosts_parse_list(run_hosts *hs, const char *list, char *err, size_t len)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    int rc = 0, any = 0;
    for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        rc = run_hosts_add(hs, t, err, len);
        any = 1;
    }
    free(copy);
    if (!rc && !any) {
        snprintf(err, len, "'%s' names no host", list);
        rc = -1;
    }
    return rc;
}

int run_hosts_parse_file(run_hosts *hs, const char *path, char *err, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, len, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], why[512];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *save = NULL, *host = strtok_r(line, " \t\r\n", &save);
        if (!host) continue;
        char spec[300];
        snprintf(spec, sizeof(spec), "%s", host);
        for (char *t = strtok_r(NULL, " \t\r\n", &save); t && !rc;
             t = strtok_r(NULL, " \t\r\n", &save)) {
            if (!strncmp(t, "slots=", 6) && !strchr(host, ':')) {
                snprintf(spec, sizeof(spec), "%s:%s", host, t + 6);
            } else if (!strncmp(t, "max_slots=", 10) || !strncmp(t, "max-slots=", 10)) {
                /* Open MPI's oversubscription limit: chorus-run never oversubscribes */
            } else {
                snprintf(err, len, "%s:%d: '%s' is not 'slots=N' (lines are 'host slots=N')", path,
                         lineno, t);
                rc = -1;
            }
        }
        if (!rc && run_hosts_add(hs, spec, why, sizeof(why))) {
            snprintf(err, len, "%s:%d: %s", path, lineno, why);
            rc = -1;
        }
    }
    fclose(f);
    if (!rc && hs->n == 0) {
        snprintf(err, len, "%s names no host", path);
        rc = -1;
    }
    return rc;
}

int run_hosts_slots(const run_hosts *hs)
{
    int n = 0;
    for (int i = 0; i < hs->n; i++) n += hs->h[i].slots;
    return n;
}

int run_hosts_place(run_hosts *hs, int np)
{
    if (np > run_hosts_slots(hs)) return -1;
    int r = 0;
    for (int i = 0; i < hs->n; i++) {
        int k = np - r < hs->h[i].slots ? np - r : hs->h[i].slots;
        hs->h[i].first_rank = r;
        hs->h[i].nranks = k;
        r += k;
    }
    return 0;
}

int run_hosts_of_rank(const run_hosts *hs, int r)
{
    for (int i = 0; i < hs->n; i++)
        if (r >= hs->h[i].first_rank && r < hs->h[i].first_rank + hs->h[i].nranks) return i;
    return -1;
}

void run_hosts_mark_local(run_hosts *hs)
{
    for (int i = 0; i < hs->n; i++) hs->h[i].local = run_host_is_local(hs->h[i].name);
}

void run_hosts_free(run_hosts *hs)
{
    free(hs->h);
    hs->h = NULL;
    hs->n = 0;
}

/* Is a (network order) an address of one of this machine's interfaces? */
static int is_own_address(struct in_addr a)
{
    if ((ntohl(a.s_addr) >> 24) == 127) return 1;
    struct ifaddrs *ifs, *i;
    int found = 0;
    if (getifaddrs(&ifs)) return 0;
    for (i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
            found = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a.s_addr;
    freeifaddrs(ifs);
    return found;
}

int run_host_is_local(const char *name)
{
    char me[256] = "", shortme[256];
    gethostname(me, sizeof(me) - 1);
    snprintf(shortme, sizeof(shortme), "%s", me);
    char *dot = strchr(shortme, '.');
    if (dot) *dot = 0;
    if (!strcmp(name, "localhost") || !strcmp(name, me) || !strcmp(name, shortme)) return 1;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL, *r;
    if (getaddrinfo(name, NULL, &hints, &res) || !res) return 0;
    int local = 0;
    for (r = res; r && !local; r = r->ai_next)
        local = is_own_address(((struct sockaddr_in *)r->ai_addr)->sin_addr);
    freeaddrinfo(res);
    return local;
}

/* ---- the store's address ---------------------------------------------------------------- */

/* See run.h: the store's address, checked for what the other hosts can reach. */
int run_store_address(const run_hosts *hs, const chorus_config *cfg, char *ip, size_t iplen,
                      char *adv, size_t advlen)
{
    char name[256] = "";
    for (int i = 0; i < hs->n && !name[0]; i++)
        if (hs->h[i].local && strcmp(hs->h[i].name, "localhost"))
            snprintf(name, sizeof(name), "%s", hs->h[i].name);
    if (!name[0]) gethostname(name, sizeof(name) - 1);
    char hostport[300];
    snprintf(hostport, sizeof(hostport), "%s:1", name);
    struct sockaddr_in sa;
    if (!cfg->iface && !cfg->bind_any && chorus__sock_resolve(hostport, &sa)) {
        fprintf(stderr,
                "chorus-run: '%s' (this machine, which runs the rendezvous store) does not "
                "resolve to an address here, so the other hosts could not be told where the "
                "store is; set CHORUS_IFACE (or --network-interface) to the interface this "
                "machine shares with them\n",
                name);
        return -1;
    }
    chorus_errbuf e;
    if (chorus__store_bind_ip(cfg, hostport, ip, iplen, &e) != CHORUS_OK) {
        fprintf(stderr, "chorus-run: where the rendezvous store listens: %s\n", e.msg);
        return -1;
    }
    if (!strncmp(ip, "127.", 4)) {
        fprintf(stderr,
                "chorus-run: the rendezvous store would listen on %s (what '%s' resolves to "
                "here), which the other hosts cannot reach; set CHORUS_IFACE (or "
                "--network-interface) to the interface this host shares with them\n",
                ip, name);
        return -1;
    }
    snprintf(adv, advlen, "%s", cfg->iface ? ip : name);
    if (!ip[0] && cfg->iface) snprintf(adv, advlen, "%s", name);
    return 0;
}

/* ---- an elastic job's hosts ------------------------------------------------------------- */

/* Runs the discovery script and merges the hosts it names ("host:slots" lines) into j->hosts:
 * a host keeps its index, a host no longer named keeps it with 0 slots (its workers are
 * retired). Returns the slots of the hosts the job can use (all, or with a store on loopback
 * this machine's), or -1 when the script failed. */
int discover(job *j)
{
    FILE *p = popen(j->discovery, "r");
    if (!p) {
        fprintf(stderr, "chorus-run: cannot run the host discovery script %s: %s\n", j->discovery,
                strerror(errno));
        return -1;
    }
    run_hosts found = {0};
    char line[512], err[512];
    while (fgets(line, sizeof(line), p)) {
        char *h = line + strspn(line, " \t");
        h[strcspn(h, "\r\n \t")] = 0;
        if (*h && *h != '#' && run_hosts_add(&found, h, err, sizeof(err)))
            fprintf(stderr, "chorus-run: host discovery: %s; ignoring that line\n", err);
    }
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "chorus-run: host discovery script %s failed; keeping %s\n", j->discovery,
                "the current workers");
        run_hosts_free(&found);
        return -1;
    }
    for (int i = 0; i < j->hosts.n; i++) j->hosts.h[i].slots = 0;
    for (int f = 0; f < found.n; f++) {
        int i = 0;
        while (i < j->hosts.n && strcmp(j->hosts.h[i].name, found.h[f].name)) i++;
        if (i == j->hosts.n) {
            char spec[300];
            snprintf(spec, sizeof(spec), "%s:0", found.h[f].name);
            if (run_hosts_add(&j->hosts, spec, err, sizeof(err))) continue;
            j->hosts.h[i].local = run_host_is_local(found.h[f].name);
        }
        j->hosts.h[i].slots = found.h[f].slots;
    }
    run_hosts_free(&found);
    int slots = 0;
    for (int i = 0; i < j->hosts.n; i++)
        if (j->remote || j->hosts.h[i].local) slots += j->hosts.h[i].slots;
    return slots;
}

/* The workers running on host h that are not leaving. */
int workers_on(const job *j, int h)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++) n += j->w[i].running && !j->w[i].leaving && j->w[i].host == h;
    return n;
}

/* Has some host more workers than its slots (it lost slots in discovery)? */
int over_slots(const job *j)
{
    for (int i = 0; i < j->hosts.n; i++)
        if (workers_on(j, i) > j->hosts.h[i].slots) return 1;
    return 0;
}

/* Where the next elastic worker starts: the first host with a free slot (-1: this machine,
 * without a discovery script). A job whose store listens on loopback (every host was this
 * machine when it started) cannot use other hosts, which is said once. */
int pick_host(job *j)
{
    static int warned;
    for (int i = 0; i < j->hosts.n; i++) {
        if (!j->remote && !j->hosts.h[i].local) {
            if (!warned++)
                fprintf(stderr,
                        "chorus-run: host discovery names '%s', which is not this machine, but "
                        "the job started on this machine's hosts only (its store listens on "
                        "loopback); ignoring it\n",
                        j->hosts.h[i].name);
            continue;
        }
        if (workers_on(j, i) < j->hosts.h[i].slots) return i;
    }
    for (int i = 0; i < j->hosts.n; i++)
        if (j->hosts.h[i].local) return i;
    return -1;
}
