/*
 * chorus-run - starts the ranks of a Chorus job on this host or across hosts (docs/LAUNCHER.md,
 * chorus-run --help). The launcher itself is library code (src/launch/, include/chorus/run.h).
 */
#include "chorus/run.h"

int main(int argc, char **argv)
{
    return chorus_run_main(argc, argv);
}
