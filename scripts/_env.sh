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
    # Reinstall only when pyproject.toml changed since the last install of these extras.
    local stamp="$VENV/.ratewarden-$extras.stamp"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        echo "==> installing ratewarden[$extras] into $VENV"
        "$PY" -m pip install -q --disable-pip-version-check -e ".[$extras]"
        touch "$stamp"
    fi
}

rw_need_redis() {
    command -v redis-server >/dev/null && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "==> installing redis-server (Debian package)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
        return 0
    fi
    cat >&2 <<'MSG'
error: the tests need a redis-server binary on PATH (they start their own servers on loopback ports).
  Debian/Ubuntu: sudo apt-get install redis-server
  macOS:         brew install redis
  or build one:  https://redis.io/docs/latest/operate/oss_and_stack/install/
MSG
    exit 1
}
