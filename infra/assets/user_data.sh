#!/bin/bash
# spotrun instance bootstrap (cloud-init runs it once, as root, at first boot).
#   1. a wrapper /usr/local/bin/spotrun-agent, first, so a step that SSM delivers early waits for the install;
#   2. the resident agent's systemd unit, started at once (its wrapper waits for the install, then it serves);
#   3. the instance-store NVMe volumes as one filesystem at @NVME_ROOT@ (RAID 0 when there are several);
#   4. the agent from its S3 asset into a virtualenv;
#   5. the job's interpreter on the PATH the training command and setup get, then the ready marker.
# @...@ markers are filled in by infra/constructs/compute/instances.py (@CREDENTIALS_URL@: the API's route where the
# agent gets its job's S3 credentials; the instance role reaches nothing of the jobs bucket).
set -euo pipefail
# Everything made here is for root alone: the agent and the training command it starts run as root (SSM Run
# Command's runShellScript), and no other user on the instance needs a job's files or the agent's.
umask 077
exec > >(tee -a /var/log/spotrun-bootstrap.log) 2>&1

NVME_ROOT=@NVME_ROOT@
HOME_DIR=/opt/spotrun
READY="$HOME_DIR/ready"
mkdir -p "$HOME_DIR"

cat > /usr/local/bin/spotrun-agent <<'WRAPPER'
#!/bin/bash
# Waits (up to 15 minutes) for the bootstrap to finish installing the agent, then runs it.
for _ in $(seq 1 900); do [ -f /opt/spotrun/ready ] && break; sleep 1; done
[ -f /opt/spotrun/ready ] || { echo "spotrun agent not installed; see /var/log/spotrun-bootstrap.log" >&2; exit 1; }
set -a; . /opt/spotrun/agent.env; set +a
exec /opt/spotrun/venv/bin/spotrun-agent "$@"
WRAPPER
chmod 0755 /usr/local/bin/spotrun-agent

# --- the resident agent --------------------------------------------------------------------------------------
# `spotrun-agent serve` (spotrun/agent/resident_server.py) forks a child per step the SSM document hands it through
# /run/spotrun/inbox, so no step pays for starting Python; while it is not serving, the document starts
# `spotrun-agent run` instead. Started now, as early in boot as it can be: the wrapper waits for the install.
# KillMode=process, as the SSM Agent's own unit: a restart of the parent never kills a running step, which
# shutdown still reaches. HOME as SSM Run Command gives its commands (the training command inherits it).
cat > /etc/systemd/system/spotrun-agent.service <<'UNIT'
[Unit]
Description=spotrun resident agent: runs each step SSM hands it in a forked child
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=/usr/local/bin/spotrun-agent serve
Restart=always
RestartSec=1
KillMode=process
Environment=HOME=/root
StandardOutput=append:/var/log/spotrun-agent.log
StandardError=append:/var/log/spotrun-agent.log

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
# --no-block: cloud-init runs this script from a unit of its own, which must not wait on another start.
systemctl enable --now --no-block spotrun-agent.service

# --- instance-store NVMe --------------------------------------------------------------------------------------
mkdir -p "$NVME_ROOT"
if mountpoint -q /opt/dlami/nvme; then
  # The Deep Learning AMI has already assembled the instance stores there.
  mount --bind /opt/dlami/nvme "$NVME_ROOT"
else
  mapfile -t DEVICES < <(lsblk -dpno NAME,MODEL | awk '/Instance Storage/ {print $1}')
  if [ "${#DEVICES[@]}" -gt 1 ]; then
    command -v mdadm >/dev/null || (apt-get update -q && apt-get install -yq mdadm) || dnf install -yq mdadm
    mdadm --create /dev/md/spotrun --run --level=0 --raid-devices="${#DEVICES[@]}" "${DEVICES[@]}"
    TARGET=/dev/md/spotrun
  elif [ "${#DEVICES[@]}" -eq 1 ]; then
    TARGET="${DEVICES[0]}"
  else
    TARGET=""  # no instance store: the directory stays on the root volume
  fi
  if [ -n "$TARGET" ]; then
    # Lazy init: a multi-terabyte volume is usable in seconds instead of minutes.
    mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$TARGET"
    mount -o noatime "$TARGET" "$NVME_ROOT"
  fi
fi
# Set after the mount (a fresh filesystem's root is 0755): the agent makes each job's directories 0700 below.
chmod 0700 "$NVME_ROOT"

# --- the agent -----------------------------------------------------------------------------------------------
PYTHON=$(command -v python3.12 || command -v python3.13 || command -v python3.11 || true)
if [ -z "$PYTHON" ]; then
  (apt-get update -q && apt-get install -yq python3 python3-venv) || dnf install -yq python3.12
  PYTHON=$(command -v python3.12 || command -v python3)
fi
"$PYTHON" -m venv "$HOME_DIR/venv" 2>/dev/null \
  || { apt-get update -q && apt-get install -yq "$(basename "$PYTHON")-venv" && "$PYTHON" -m venv "$HOME_DIR/venv"; }
aws s3 cp --only-show-errors --region @REGION@ "@AGENT_URI@" "$HOME_DIR/agent.zip"
rm -rf "$HOME_DIR/src"
"$PYTHON" -m zipfile -e "$HOME_DIR/agent.zip" "$HOME_DIR/src"
"$HOME_DIR/venv/bin/pip" install --quiet --upgrade pip
# The agent extra: ISA-L's CRC-32 for staging and checkpoint upload (docs/development/transfers.md).
"$HOME_DIR/venv/bin/pip" install --quiet "$HOME_DIR/src[agent]"

# --- the job's interpreter -----------------------------------------------------------------------------------
# The agent runs from its own venv; the job's `python` and `pip` (training.command, training.setup) come first on
# the PATH below: the PyTorch Deep Learning AMI's venv when the image has it (torch with CUDA), else a venv of the
# image's Python made here, empty, which setup's `pip install` can fill (Ubuntu 24.04's own Python refuses pip
# installs into it: PEP 668). docs/guides/environment.md says the same for users.
PYTORCH_VENV=/opt/pytorch
if [ -x "$PYTORCH_VENV/bin/python" ]; then
  JOB_BIN="$PYTORCH_VENV/bin"
else
  "$PYTHON" -m venv "$HOME_DIR/job-venv"
  JOB_BIN="$HOME_DIR/job-venv/bin"
fi
printf 'SPOTRUN_NVME_ROOT=%s\nSPOTRUN_AGENT_CREDENTIALS_URL=%s\nPATH=%s:%s\n' \
  "$NVME_ROOT" "@CREDENTIALS_URL@" "$JOB_BIN" "$PATH" > "$HOME_DIR/agent.env"
touch "$READY"
echo "spotrun agent ready"
