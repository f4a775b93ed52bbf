# Sourced by the scripts in this folder: makes .venv and installs the package with the given extras.
# Usage: . scripts/_env.sh EXTRAS   (e.g. "dev" or "server")
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${RATEWARDEN_VENV:-$ROOT/.venv}
PY=$VENV/bin/python

rw_setup() {
    local extras=$1
    if [ ! -x "$PY" ]; then
        local base=${PYTHON:-python3}
        command -v "$base" >/dev/null || { echo "error: $base not found; install Python >= 3.11" >&2; exit 1; }
        "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
            || { echo "error: ratewarden needs Python >= 3.11 ($base is $("$base" --version))" >&2; exit 1; }
        echo "==> creating $VENV"
        "$base" -m venv "$VENV"
    fi
    # Reinstall only when pyproject.toml, setup.py or a C kernel (src/ratewarden/storage/
    # _speedups.c and its _speedups_*.h parts, src/ratewarden/server/_wire.c; built in place
    # when a C compiler is there) changed since the last install of these extras.
    local stamp="$VENV/.ratewarden-$extras.stamp"
    local changed=0 part
    for part in pyproject.toml setup.py src/ratewarden/storage/_speedups*.[ch] src/ratewarden/server/_wire.c; do
        [ "$part" -nt "$stamp" ] && changed=1
    done
    if [ ! -f "$stamp" ] || [ "$changed" = 1 ]; then
        echo "==> installing ratewarden[$extras] into $VENV"
        "$PY" -m pip install -q --disable-pip-version-check -e ".[$extras]"
        rw_own_otel_protos
        touch "$stamp"
    fi
}

rw_own_otel_protos() {
    # xds-protos ships an older copy of opentelemetry-proto's files (opentelemetry/proto/), and
    # the package pip installs last wins; OpenTelemetry's exporters (the tracing extra) need
    # their own. Reinstall the same version of opentelemetry-proto when it is there.
    local version
    version=$("$PY" -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))' \
        2>/dev/null) || return 0
    "$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
        "opentelemetry-proto==$version"
}

_RW_APT_UPDATED=0
rw_apt_install() {
    # rw_apt_install PACKAGE...: install Debian packages when running as root with apt; 1 otherwise.
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
    echo "==> installing $* (Debian packages)"
    if [ "$_RW_APT_UPDATED" = 0 ]; then
        apt-get update -qq
        _RW_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

rw_need_redis() {
    command -v redis-server >/dev/null && return 0
    rw_apt_install redis-server && return 0
    cat >&2 <<'MSG'
error: the tests need a redis-server binary on PATH (they start their own servers on loopback ports).
  Debian/Ubuntu: sudo apt-get install redis-server
  macOS:         brew install redis
  or build one:  https://redis.io/docs/latest/operate/oss_and_stack/install/
MSG
    exit 1
}

rw_need_memcached() {
    command -v memcached >/dev/null && return 0
    rw_apt_install memcached && return 0
    cat >&2 <<'MSG'
error: the memcache store's tests need a memcached binary on PATH (they start their own on loopback ports).
  Debian/Ubuntu: sudo apt-get install memcached
  macOS:         brew install memcached
MSG
    exit 1
}

rw_want_dnsmasq() {
    # The memcache store's DNS SRV tests run a dnsmasq on a loopback port; without one they
    # skip, saying so.
    command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] && return 0
    rw_apt_install dnsmasq-base && return 0
    echo "note: no dnsmasq found; the memcache SRV tests will be skipped (apt-get install dnsmasq-base)" >&2
}

rw_want_chromium() {
    # The dashboard's browser test needs headless Chromium; without one it skips, saying so.
    [ -n "${RATEWARDEN_CHROMIUM:-}" ] && return 0
    command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
        || command -v google-chrome >/dev/null && return 0
    rw_apt_install chromium && return 0
    echo "note: no Chromium found; the dashboard browser test will be skipped (apt-get install chromium)" >&2
}
