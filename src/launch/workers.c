/*
 * workers.c - the workers of a job as a whole: how many are alive or left, and signals sent to
 * all of them (a remote rank's through its agent).
 */
#include <string.h>
#include <sys/wait.h>

#include "launch/launch.h"

void signal_all(job *j, int sig)
{
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].running && j->w[i].agent_in >= 0 && sig != SIGKILL) {
            /* A remote rank: its agent forwards the signal. Signalling the remote shell here
             * would only cut the connection (ssh does not pass signals on). */
            run_agent_signal(j->w[i].agent_in, sig);
        } else if (j->w[i].running) {
            /* Each rank leads its own process group: signal the whole group, so that a
             * rank started through a shell script does not leave its children running (and
             * holding the output pipes open). */
            if (kill(-j->w[i].pid, sig)) kill(j->w[i].pid, sig);
            if (sig == SIGTERM && j->w[i].stopped) kill(-j->w[i].pid, SIGCONT);
        }
}

/* A worker whose process has ended is not left, even before the event loop reaps it (workers
 * that end together are reaped one at a time): waitid with WNOWAIT looks without reaping. */
static int has_ended(const worker *w)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           si.si_pid == w->pid;
}

int count_alive(const job *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++) n += j->w[i].running && !j->w[i].leaving;
    return n;
}

/* The workers still running at this instant (count_alive counts those not yet reaped). */
int count_left(const job *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++)
        n += j->w[i].running && !j->w[i].leaving && !has_ended(&j->w[i]);
    return n;
}
