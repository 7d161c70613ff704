#!/usr/bin/env bash
# Debian packages the test suite needs beside Python: installed only when missing, so
# `make test` works the same on a fresh machine and on one that already has them.
#   java      PySpark (local[2]) and Apache Kafka (tests/bench/demo: kwire.embedded.kafka)
#   maven     fetches Apache Kafka's jars from Maven Central (cached in ~/.cache/kwire/kafka)
#   tcpdump   the live capture test of `kwire decode`; editcap (from tshark) converts to pcapng
#   liblz4-1, libzstd1  the native lz4/zstd the compiled codec loads (tests check it found them;
#             Debian base systems have both already)
set -euo pipefail

# usage: system-deps.sh [java] [maven] [capture] [native]   (no argument: all of them)
wanted=" ${*:-java maven capture native} "
need=()
if [[ $wanted == *" java "* ]]; then
  command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
fi
if [[ $wanted == *" maven "* ]]; then
  command -v mvn >/dev/null 2>&1 || need+=(maven)
fi
if [[ $wanted == *" capture "* ]]; then
  command -v tcpdump >/dev/null 2>&1 || need+=(tcpdump)
  command -v editcap >/dev/null 2>&1 || need+=(tshark)
fi

if [[ $wanted == *" native "* ]]; then
  have() { ldconfig -p 2>/dev/null | grep -q "$1" || ls /usr/lib/*/"$1" /lib/*/"$1" >/dev/null 2>&1; }
  have liblz4.so.1 || need+=(liblz4-1)
  have libzstd.so.1 || need+=(libzstd1)
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
