/*
 * chorus/run.h - the launcher as a call: chorus-run is a small main over chorus_run_main, as
 * torchrun is a small main over torch.distributed.run. Its code lives in the library
 * (src/launch/), above the runtime it starts, so the program includes only this header.
 */
#ifndef CHORUS_RUN_H
#define CHORUS_RUN_H

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs chorus-run's command line (argv[0] the program's name; docs/LAUNCHER.md, chorus-run
 * --help) in this process and returns its exit status: 0 when every rank succeeded, 2 for a
 * bad command line (the reason on stderr), else the failing rank's status with a line saying
 * which rank failed and how. It serves the rendezvous store, forks the ranks (or, with
 * --agent, is one rank's agent on another host), installs handlers for SIGINT, SIGTERM,
 * SIGHUP and SIGCHLD (SIGPIPE ignored) and waits for the job: call it from a program's main thread,
 * once, with no other children of the process running. */
int chorus_run_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
