"""The instance bootstrap leaves the NVMe root and the agent's files to root alone."""

from __future__ import annotations

import re

from infra.constructs.compute.instances import USER_DATA_TEMPLATE


def test_the_bootstrap_makes_the_nvme_root_root_only_after_mounting_it():
    # Given the user data script
    script = USER_DATA_TEMPLATE.read_text()

    # When its mode changes are read
    modes = re.findall(r"^\s*chmod (\d+) (\S+)", script, flags=re.MULTILINE)
    mount = max(script.rfind("mount -o"), script.rfind("mount --bind"))

    # Then the NVMe root is 0700, set after the volume is mounted, and only the wrapper is wider (0755)
    assert ("0700", '"$NVME_ROOT"') in modes
    assert script.index('chmod 0700 "$NVME_ROOT"') > mount
    assert {mode for mode, target in modes if target != "/usr/local/bin/spotrun-agent"} == {"0700"}


def test_the_bootstrap_creates_everything_under_a_root_only_umask():
    # Given / When
    script = USER_DATA_TEMPLATE.read_text()
    first_directory = script.index("mkdir")

    # Then the umask is set before the first directory or file is made
    assert re.search(r"^umask 077$", script[:first_directory], flags=re.MULTILINE)
