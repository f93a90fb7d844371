"""``python tests/support/measure_child.py REPORT -- ARGV...``: run ARGV and write its exit
status, CPU seconds and peak memory to the JSON file REPORT.

The hostile-input corpus measures commands through this small launcher: a child forked
straight from a large test process inherits that process's resident memory in its
``ru_maxrss``; a child of this launcher starts small, so its peak is its own."""

import json
import os
import subprocess
import sys

report, argv = sys.argv[1], sys.argv[3:]
proc = subprocess.Popen(argv)
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
with open(report, "w") as handle:
    json.dump({"code": proc.returncode, "cpu": usage.ru_utime + usage.ru_stime,
               "peak_mb": usage.ru_maxrss / 1024}, handle)
