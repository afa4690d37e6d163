#!/usr/bin/env bash
# Install headless Chromium for tests/test_dashboard_browser.py on a Debian CI machine.
#
# Idempotent: does nothing when a working Chromium is already on PATH. Quiet: apt's output goes
# to a log that is printed only if the install fails. Without apt-get (not Debian) it says so and
# exits 0; the browser tests then skip. Run as root, or as a user with passwordless sudo.
# In CI, export SPECSAMPLE_REQUIRE_BROWSER=1 afterwards so the tests fail rather than skip if
# the browser is still missing.
set -euo pipefail

for name in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$name" >/dev/null 2>&1 && version=$("$name" --version 2>/dev/null); then
    echo "install-browser: already installed: $version ($(command -v "$name"))"
    exit 0
  fi
done

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-browser: apt-get not found (not Debian?); install Chromium yourself or set" \
       "SPECSAMPLE_CHROMIUM; tests/test_dashboard_browser.py skips without it"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo -n)
  else
    echo "install-browser: not root and no sudo; cannot apt-get install chromium" >&2
    exit 1
  fi
fi

log=$(mktemp -t install-browser.XXXXXX.log)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
echo "install-browser: apt-get update && apt-get install chromium fonts-liberation"
# fonts-liberation is only a Recommends of chromium; without a font, screenshots lose their text.
if ! { "${sudo[@]}" apt-get update -qq \
       && "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-liberation; } \
     >"$log" 2>&1; then
  echo "install-browser: installing Chromium failed:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
echo "install-browser: installed $(chromium --version 2>/dev/null || echo 'chromium (version unknown)')"
