"""Run a command in a loopback-only network namespace: ``python -m tests.e2e.isolated pytest -m e2e``.

Ray's servers bind every interface; the e2e stack includes Ray Serve, so its tests run where only
``lo`` exists. ``unshare -n`` needs root; without it a user namespace (``unshare -rn``) is tried.
"""

from __future__ import annotations

import os
import subprocess
import sys

LOOPBACK_ONLY = 'ip link set lo up && exec "$0" "$@"'


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.e2e.isolated COMMAND [ARGS…]", file=sys.stderr)
        return 2
    tried = []
    for flags in ("-n", "-rn"):
        probe = subprocess.run(
            ["unshare", flags, "sh", "-c", "ip link set lo up"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            os.execvp("unshare", ["unshare", flags, "sh", "-c", LOOPBACK_ONLY, *argv])
        tried.append(f"unshare {flags}: {probe.stderr.strip() or probe.returncode}")
    print(
        "cannot make a loopback-only network namespace (" + "; ".join(tried) + "); run as root or allow "
        "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
