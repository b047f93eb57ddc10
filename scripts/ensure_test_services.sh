#!/usr/bin/env bash
# Brings up what the test suite talks to for real: PostgreSQL on 127.0.0.1:5432 and Debian's
# headless Chromium with its driver. Idempotent; quick when everything is already there.
set -euo pipefail

if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium and chromium-driver for the browser tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "chromium is missing and cannot be installed here (need root and apt-get)" >&2
    exit 1
  fi
fi
