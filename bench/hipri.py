"""hipri: the Python side of bench/hipri.sh, for the ranks of the bench scripts."""
import os
import sys


def raise_priority():
    """With HIPRI=1 (bench/hipri.sh), the scheduling group of this rank's session gets nice
    -19: torchrun and horovodrun start each rank in a session of its own, outside the one
    that hipri.sh raised. Linux shares the CPU between such groups first, so on a machine
    shared with other sessions this is what makes the run see a mostly idle machine."""
    if os.environ.get("HIPRI") == "1":
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write("-19")
        except OSError as e:
            print("hipri: /proc/self/autogroup: %s" % e, file=sys.stderr)
