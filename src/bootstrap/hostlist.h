/*
 * hostlist.h - Slurm's compressed host lists ("node[1-3,05],gpu[07-10]-ib,login"), read one
 * host at a time: the first host of SLURM_STEP_NODELIST is where an srun job meets.
 */
#ifndef CHORUS_HOSTLIST_H
#define CHORUS_HOSTLIST_H

#include <stddef.h>

/* Writes host number index (0-based, in Slurm's order) of list into out (len bytes).
 * Entries are separated by commas outside brackets; each bracket holds comma-separated
 * numbers and ranges (lo-hi, zero padding kept from lo: "[07-10]" gives 07 08 09 10); an
 * entry may have several brackets, expanded with the last varying fastest. Returns the
 * number of hosts in the list (index < that number: out is written), or -1 when the list
 * is malformed or a host does not fit in out (out is then ""). */
int chorus__hostlist_host(const char *list, int index, char *out, size_t len);

#endif
