# SPDX-License-Identifier: MIT
"""Every deliberate bug of dsv4ref.MUTATIONS moves the committed goldens of the random tiny
fixture beyond the ensemble-derived bounds (tools/mutation_report.py; the table for both
fixtures is in docs/numerics.md "Mutation report"). The confident fixture is left out to keep
the suite short: it detects a subset (no indexer selection by construction)."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.exit(subprocess.call([sys.executable, os.path.join(ROOT, "tools", "mutation_report.py"),
                          os.path.join(ROOT, "tests", "fixtures", "tiny")]))
