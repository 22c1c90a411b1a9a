#!/usr/bin/env bash
# Runs the whole test suite. Idempotent: makes sure PostgreSQL answers on
# 127.0.0.1:5432 and RabbitMQ on 127.0.0.1:5672 first (starts them, or installs them
# with apt-get when missing), because the PostgreSQL backend and the split deployment
# over AMQP are tested for real next to SQLite. Tests make a database and a RabbitMQ
# vhost of their own (with rabbitmqctl), so they run in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }

ensure_postgres() {
  if command -v pg_isready >/dev/null && pg_up; then return; fi
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    echo "== installing PostgreSQL"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  fi
  if ! pg_up; then
    echo "== starting PostgreSQL"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n1)" main start || true
  fi
  for _ in $(seq 1 60); do pg_up && return; sleep 0.5; done
  echo "PostgreSQL does not answer on 127.0.0.1:5432" >&2
  exit 1
}

ensure_postgres

# The OneView client's HTTPS test runs `openssl s_server` with a throwaway certificate.
if ! command -v openssl >/dev/null; then
  echo "== installing openssl"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssl >/dev/null
fi

amqp_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

ensure_rabbitmq() {
  if command -v rabbitmqctl >/dev/null && amqp_up && $SUDO rabbitmqctl -q status >/dev/null 2>&1; then return; fi
  if ! command -v rabbitmq-server >/dev/null; then
    echo "== installing RabbitMQ"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq rabbitmq-server >/dev/null
  fi
  if ! amqp_up; then
    echo "== starting RabbitMQ"
    $SUDO rabbitmq-server -detached >/dev/null 2>&1 || true
  fi
  for _ in $(seq 1 120); do amqp_up && $SUDO rabbitmqctl -q status >/dev/null 2>&1 && return; sleep 0.5; done
  echo "RabbitMQ does not answer on 127.0.0.1:5672" >&2
  exit 1
}

ensure_rabbitmq
export IRONIC_TEST_AMQP="${IRONIC_TEST_AMQP:-amqp://guest:guest@127.0.0.1:5672}"

# Tests connect as postgres over TCP. A fresh Debian install wants a password there:
# give the postgres role one (locally, through the socket) when trust is not set up.
if [ -z "${IRONIC_TEST_POSTGRES:-}" ]; then
  if psql "postgres://postgres@127.0.0.1:5432/postgres" -Atqc 'select 1' >/dev/null 2>&1; then
    export IRONIC_TEST_POSTGRES="postgres://postgres@127.0.0.1:5432/postgres"
  else
    $SUDO -u postgres psql -qc "ALTER ROLE postgres PASSWORD 'postgres'" >/dev/null 2>&1 \
      || su postgres -c "psql -qc \"ALTER ROLE postgres PASSWORD 'postgres'\"" >/dev/null
    export IRONIC_TEST_POSTGRES="postgres://postgres:postgres@127.0.0.1:5432/postgres"
  fi
fi

# The `ipmi` driver runs Debian's ipmitool; its tests drive a fake BMC with it.
if ! command -v ipmitool >/dev/null; then
  echo "== installing ipmitool"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ipmitool >/dev/null
fi

# Protocol peers nobody here wrote, from PyPI, in a virtualenv under the test data
# folder (kept between runs): sushy-tools' Redfish emulator for the `redfish` driver,
# pyghmi's fake BMC for the `ipmi` driver, HPE's OneView library against the simulator.
IRONIC_TEST_DATA="${IRONIC_TEST_DATA:-$HOME/.cache/ironic-test-data}"
venv="$IRONIC_TEST_DATA/venv"
if ! "$venv/bin/python" -c 'import sushy_tools, pyghmi, hpeOneView' 2>/dev/null; then
  if ! python3 -c 'import ensurepip' 2>/dev/null; then
    echo "== installing python3-venv"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
  fi
  echo "== installing sushy-tools, pyghmi and hpeOneView into $venv"
  mkdir -p "$IRONIC_TEST_DATA"
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q sushy-tools pyghmi hpeOneView
fi
export IRONIC_TEST_SUSHY="$venv/bin/sushy-emulator"
export IRONIC_TEST_PYTHON="$venv/bin/python"

# Boot ISOs: the conductor builds them with xorriso, isolinux and (UEFI) a stand-alone
# GRUB on a FAT image.
iso_tools=()
command -v xorriso >/dev/null || iso_tools+=(xorriso)
[ -e /usr/lib/ISOLINUX/isolinux.bin ] || iso_tools+=(isolinux)
[ -e /usr/lib/syslinux/modules/bios/ldlinux.c32 ] || iso_tools+=(syslinux-common)
command -v mcopy >/dev/null || iso_tools+=(mtools)
command -v mkfs.vfat >/dev/null || iso_tools+=(dosfstools)
[ -d /usr/lib/grub/x86_64-efi ] || iso_tools+=(grub-efi-amd64-bin)
# qemu-img checks and converts the instance images the conductor serves.
command -v qemu-img >/dev/null || iso_tools+=(qemu-utils)
if [ "${#iso_tools[@]}" -gt 0 ]; then
  echo "== installing ${iso_tools[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${iso_tools[@]}" >/dev/null
fi

# Real machines (crates/ironic/tests/machines.rs): as root, the agent's ramdisk and the
# test image built (cached after the first time), the bed's packages and the clients
# (openstack CLI, metalsmith) installed before the tests start,
# so that the test spends its time on the machine. IRONIC_TEST_BED=0 leaves them out.
if [ "$(id -u)" = 0 ] && [ "${IRONIC_TEST_BED:-1}" = 1 ]; then
  echo "== the agent's ramdisk and the test bed (tests/vm/)"
  bash tests/vm/build-ramdisk.sh >/dev/null
  bash tests/vm/build-image.sh >/dev/null
  bash tests/vm/bed.sh prepare
  # The clients the machine test deploys with, as users do.
  if ! "$venv/bin/python" -c 'import metalsmith, openstackclient, ironicclient' 2>/dev/null; then
    echo "== installing python-openstackclient, python-ironicclient and metalsmith into $venv"
    "$venv/bin/pip" install -q python-openstackclient python-ironicclient metalsmith
  fi
  export IRONIC_TEST_BED=1
fi

echo "== cargo test (PostgreSQL at ${IRONIC_TEST_POSTGRES%%@*}@127.0.0.1:5432, RabbitMQ at 127.0.0.1:5672)"
# The real-machine test is `#[ignore]`d (reported skipped) unless the bed is ready.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
  if [ "${IRONIC_TEST_BED:-0}" = 1 ]; then
    echo "== the real-machine test (crates/ironic/tests/machines.rs)"
    cargo nextest run -p ironic --test machines --run-ignored only
  fi
  cargo test --workspace --doc
else
  cargo test --workspace "$@"
  if [ "${IRONIC_TEST_BED:-0}" = 1 ]; then
    cargo test -p ironic --test machines -- --ignored
  fi
fi
