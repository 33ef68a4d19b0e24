#!/usr/bin/env bash
# Installs what laketide needs from Debian: Java 17 (for Spark; its compiler for the tests' metastore), ZooKeeper (for the lease), a C compiler
# and Python's headers (the install builds laketide's key hashing, index/_keyhash*.c) and, for the
# dashboard's tests, Chromium (driven by Playwright through its executable_path).
# Safe to run again: it installs only what is missing.
set -euo pipefail

need=()
if ! command -v java >/dev/null 2>&1; then
  need+=(openjdk-17-jre-headless)
fi
# the catalog tests run Hive's metastore from the pyspark wheel through a one-file Java program
# (tests/support/LoopbackMetastore.java), which the JDK's launcher compiles
if ! command -v javac >/dev/null 2>&1; then
  need+=(openjdk-17-jdk-headless)
fi
if [ ! -f /usr/share/zookeeper/bin/zkServer.sh ] && ! dpkg -s zookeeper >/dev/null 2>&1; then
  need+=(zookeeper)
fi
if ! command -v cc >/dev/null 2>&1; then
  need+=(gcc libc6-dev)
fi
python="${PYTHON:-python3}"
if ! "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  need+=(python3-dev)
fi
if ! command -v chromium >/dev/null 2>&1; then
  need+=(chromium)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "installing from Debian: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
