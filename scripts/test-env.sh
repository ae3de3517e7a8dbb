# Sourced by `make test`: find or start what the tests need and export where it is.
# System packages are installed only under CI=true or PHASEFIT_TEST_INSTALL=1 (Debian, as root); otherwise
# this says what is missing and how to install it, and the tests that need it skip with that reason.

_pf_note() { echo "test-env: $*" >&2; }

_pf_need_debs=()
command -v promtool >/dev/null || _pf_need_debs+=(prometheus)
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null || _pf_need_debs+=(prometheus-alertmanager)
command -v chromium >/dev/null || _pf_need_debs+=(chromium)
command -v victoria-metrics >/dev/null || _pf_need_debs+=(victoria-metrics)
if [ ${#_pf_need_debs[@]} -gt 0 ]; then
  if [ "${CI:-}" != "true" ] && [ "${PHASEFIT_TEST_INSTALL:-}" != "1" ]; then
    _pf_note "missing ${_pf_need_debs[*]}: the tests that need them will skip."
    _pf_note "  install: sudo apt-get install --no-install-recommends ${_pf_need_debs[*]}"
    _pf_note "  or let make do it: PHASEFIT_TEST_INSTALL=1 make test (as root, Debian)"
    export PHASEFIT_TEST_MISSING="${_pf_need_debs[*]}"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    _pf_note "installing ${_pf_need_debs[*]}"
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${_pf_need_debs[@]}") >/tmp/phasefit-apt.log 2>&1 \
      || _pf_note "apt-get failed (see /tmp/phasefit-apt.log); the tests that need ${_pf_need_debs[*]} will skip, or fail under CI"
  else
    _pf_note "missing ${_pf_need_debs[*]} and cannot install as non-root: those tests will skip (or fail under CI)"
  fi
fi

# kubectl (>= 1.21, for kustomize components) is not in Debian's archive at a usable version: say so only.
if ! command -v kubectl >/dev/null; then
  _pf_note "missing kubectl: the kustomize comparison will skip (fail under CI=true)."
  _pf_note "  install: https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/ (apt repository pkgs.k8s.io)"
fi

# PostgreSQL on 127.0.0.1:5432 (the test machines run one; start it if it is installed but down).
if [ -z "${PHASEFIT_TEST_POSTGRES_URL:-}" ]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null && command -v pg_ctlcluster >/dev/null; then
    _pf_note "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    export PHASEFIT_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:5432/test"
  elif [ "${CI:-}" = "true" ]; then
    # Under CI the PostgreSQL tests must fail, not skip: point them at the address so they fail loudly.
    export PHASEFIT_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:5432/test"
    _pf_note "PostgreSQL is not reachable on 127.0.0.1:5432: its tests will fail"
  else
    _pf_note "PostgreSQL not reachable: PostgreSQL tests will skip"
  fi
fi
_pf_note "PHASEFIT_TEST_POSTGRES_URL=${PHASEFIT_TEST_POSTGRES_URL:-<unset>}"
