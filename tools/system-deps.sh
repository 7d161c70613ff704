#!/usr/bin/env bash
# Debian packages the test suite needs beside Python: installed only when missing, so
# `make test` works the same on a fresh machine and on one that already has them.
#   java      PySpark (local[2])
#   tcpdump   the live capture test of `kwire decode`; editcap (from tshark) converts to pcapng
set -euo pipefail

# usage: system-deps.sh [java] [capture]   (no argument: all of them)
wanted=" ${*:-java capture} "
need=()
if [[ $wanted == *" java "* ]]; then
  command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
fi
if [[ $wanted == *" capture "* ]]; then
  command -v tcpdump >/dev/null 2>&1 || need+=(tcpdump)
  command -v editcap >/dev/null 2>&1 || need+=(tshark)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: missing ${need[*]}; run as root or install them (Debian: apt-get install ${need[*]})" >&2
  exit 1
fi
echo "system-deps: installing ${need[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
