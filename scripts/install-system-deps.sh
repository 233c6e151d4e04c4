#!/usr/bin/env bash
# System packages the test suite uses for real hosts: sshd, pdsh, Slurm with munge, Open MPI, MPICH, numactl;
# a headless browser (chromium, with a font) for the launch timeline page (tests/report); Prometheus itself, which
# scrapes a running job in tests/observe.
# Idempotent and quiet when everything is already there.
set -euo pipefail
PKGS=(openssh-server openssh-client pdsh munge slurmctld slurmd slurm-client openmpi-bin mpich numactl iproute2 procps
      chromium fonts-dejavu-core prometheus)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-system-deps: missing ${missing[*]} and not root; tests that need them will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
