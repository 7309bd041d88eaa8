# SPDX-License-Identifier: MIT
"""Every deliberate bug of dsv4ref.MUTATIONS moves the committed goldens beyond the
ensemble-derived bounds (tools/mutation_report.py; table in docs/numerics.md)."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
fx = [os.path.join(ROOT, "tests", "fixtures", n) for n in ("tiny", "tiny-confident")]
sys.exit(subprocess.call([sys.executable, os.path.join(ROOT, "tools", "mutation_report.py")]
                         + fx))
