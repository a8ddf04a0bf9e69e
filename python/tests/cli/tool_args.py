"""The command line of the `fai run` tests: the path of the fai executable, checked."""
import os
import sys


def fai_from_argv(test_name):
    """The fai executable given as the only argument; exits with 2 (usage) or 1 (not an
    executable) after saying why."""
    if len(sys.argv) != 2:
        print("usage: %s.py /path/to/fai" % test_name)
        sys.exit(2)
    fai = os.path.abspath(sys.argv[1])
    if not os.access(fai, os.X_OK):
        print("%s: %s is not an executable" % (test_name, fai))
        sys.exit(1)
    return fai
