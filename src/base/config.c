/* config.c - the table of CHORUS_* variables and typed access to them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static const chorus_cfg_entry table[] = {
#define CHORUS_CFG(name, def, help) {#name, def, help},
#include "base/config_table.h"
#undef CHORUS_CFG
    {NULL, NULL, NULL}};

const chorus_cfg_entry *chorus__cfg_table(void)
{
    return table;
}

static const chorus_cfg_entry *find(const char *name)
{
    for (const chorus_cfg_entry *e = table; e->name; e++)
        if (!strcmp(e->name, name)) return e;
    return NULL;
}

const char *chorus__cfg_str(const char *name)
{
    const char *v = getenv(name);
    if (v && *v) return v;
    const chorus_cfg_entry *e = find(name);
    return e ? e->def : NULL;
}

long chorus__cfg_long(const char *name)
{
    const char *v = getenv(name);
    const chorus_cfg_entry *e = find(name);
    long def = (e && e->def) ? strtol(e->def, NULL, 10) : 0;
    if (!v || !*v) return def;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end) {
        CHORUS_WARN(CHORUS_LOG_ALL, "%s=%s is not an integer; using %ld", name, v, def);
        return def;
    }
    return x;
}

double chorus__cfg_double(const char *name)
{
    const char *v = getenv(name);
    const chorus_cfg_entry *e = find(name);
    double def = (e && e->def) ? strtod(e->def, NULL) : 0;
    if (!v || !*v) return def;
    char *end;
    double x = strtod(v, &end);
    if (*end) {
        CHORUS_WARN(CHORUS_LOG_ALL, "%s=%s is not a number; using %g", name, v, def);
        return def;
    }
    return x;
}
