/* hostlist.c - expanding Slurm's compressed host lists, one host at a time (hostlist.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/hostlist.h"

/* Hosts beyond this are refused: no Slurm job is that large, and counts stay in an int. */
#define MAX_HOSTS (1 << 24)

/* One range of a bracket, "lo" or "lo-hi"; *s is advanced past it. Returns its size or -1. */
static long parse_range(const char **s, long *lo, int *width)
{
    char *end;
    const char *p = *s;
    if (*p < '0' || *p > '9') return -1;
    *lo = strtol(p, &end, 10);
    *width = (int)(end - p);
    long hi = *lo;
    if (*end == '-') {
        p = end + 1;
        if (*p < '0' || *p > '9') return -1;
        hi = strtol(p, &end, 10);
    }
    *s = end;
    return hi >= *lo && hi - *lo < MAX_HOSTS ? hi - *lo + 1 : -1;
}

/* The bracket starting after '[' at s: its host count (-1 if malformed); with index >= 0 the
 * number at that position is written to *num and *width. *s ends after ']'. */
static long parse_bracket(const char **s, long index, long *num, int *width)
{
    long count = 0;
    for (;;) {
        long lo;
        int w;
        long n = parse_range(s, &lo, &w);
        if (n < 0) return -1;
        if (index >= count && index < count + n) {
            *num = lo + (index - count);
            *width = w;
        }
        count += n;
        if (count > MAX_HOSTS) return -1;
        if (**s == ']') break;
        if (**s != ',') return -1;
        (*s)++;
    }
    (*s)++;
    return count;
}

/* Hosts in the entry [s, end) (no top-level comma inside), -1 if malformed. */
static long entry_count(const char *s, const char *end)
{
    long count = 1, dummy;
    int w;
    while (s < end) {
        if (*s == ']') return -1;
        if (*s++ != '[') continue;
        long n = parse_bracket(&s, -1, &dummy, &w);
        if (n < 0 || s > end) return -1;
        count *= n;
        if (count > MAX_HOSTS) return -1;
    }
    return count;
}

/* Writes host index of the entry [s, end) into out; 0, or -1 when it does not fit. */
static int entry_host(const char *s, const char *end, long index, char *out, size_t len)
{
    size_t o = 0;
    while (s < end) {
        if (*s != '[') {
            if (o + 1 >= len) return -1;
            out[o++] = *s++;
            continue;
        }
        s++;
        const char *rest = s;
        long num = 0, dummy;
        int width = 0, w;
        long n = parse_bracket(&rest, -1, &dummy, &w);
        long inner = entry_count(rest, end); /* the brackets after this one vary faster */
        parse_bracket(&s, (index / inner) % n, &num, &width);
        int k = snprintf(out + o, len - o, "%0*ld", width, num);
        if (k < 0 || (size_t)k >= len - o) return -1;
        o += (size_t)k;
    }
    out[o] = 0;
    return 0;
}

/* chorus__hostlist_host, except that out may hold a partial host when it returns -1. */
static int hostlist_host(const char *list, int index, char *out, size_t len)
{
    long total = 0;
    int found = 0;
    if (!list || !*list) return -1;
    for (const char *s = list;;) {
        const char *end = s;
        int depth = 0;
        while (*end && (depth || *end != ',')) {
            if (*end == '[') depth++;
            if (*end == ']') depth--;
            if (depth < 0 || depth > 1) return -1;
            end++;
        }
        if (depth || end == s) return -1;
        long n = entry_count(s, end);
        if (n < 0 || total + n > MAX_HOSTS) return -1;
        if (!found && index >= total && index < total + n) {
            if (entry_host(s, end, index - total, out, len)) return -1;
            found = 1;
        }
        total += n;
        if (!*end) break;
        s = end + 1;
    }
    return (int)total;
}

int chorus__hostlist_host(const char *list, int index, char *out, size_t len)
{
    if (!len) return -1;
    out[0] = 0;
    int n = hostlist_host(list, index, out, len);
    if (n < 0) out[0] = 0;
    return n;
}
