"""The user data starts the resident agent as a systemd unit, before anything slow of the bootstrap."""

from __future__ import annotations

import re

from infra.constructs.compute.instances import USER_DATA_TEMPLATE


def _unit(script: str) -> dict[str, str]:
    body = re.search(
        r"cat > /etc/systemd/system/spotrun-agent\.service <<'UNIT'\n(.*?)\nUNIT\n", script, re.S
    )
    assert body is not None, "no spotrun-agent.service unit in the user data"
    return dict(line.split("=", 1) for line in body.group(1).splitlines() if "=" in line)


def test_the_unit_serves_through_the_wrapper_restarts_always_and_never_kills_running_steps() -> None:
    # Given the user data script
    script = USER_DATA_TEMPLATE.read_text()

    # When its unit is read
    unit = _unit(script)

    # Then it runs `spotrun-agent serve` through the wrapper (which waits for the install and sets the agent's
    # environment), comes back whenever it ends, and a restart of it leaves the running steps alone
    assert unit["ExecStart"] == "/usr/local/bin/spotrun-agent serve"
    assert unit["Restart"] == "always"
    assert unit["KillMode"] == "process"
    assert unit["StandardOutput"] == unit["StandardError"] == "append:/var/log/spotrun-agent.log"


def test_the_unit_is_started_right_after_the_wrapper_before_the_disks_and_the_install() -> None:
    # Given the user data script
    script = USER_DATA_TEMPLATE.read_text()

    # When the start of the unit is found
    start = script.index("systemctl enable --now --no-block spotrun-agent.service")

    # Then it comes after the wrapper is written and before the NVMe, the agent's install and the ready marker
    assert script.index("chmod 0755 /usr/local/bin/spotrun-agent") < start
    assert start < script.index("# --- instance-store NVMe")
    assert start < script.index('pip" install --quiet "$HOME_DIR/src[agent]"')
    assert start < script.index('touch "$READY"')
