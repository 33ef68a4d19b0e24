#!/usr/bin/env bash
# Installs the servers the tests start that come from npm, into .tools/: Azurite (Azure Blob) and s3rver (an S3
# server without conditional writes, on which every job must be refused).
# Node.js and npm come from Debian when missing. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
  fi
  echo "installing from Debian: nodejs npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ ! -x .tools/node_modules/.bin/azurite-blob ]; then
  echo "installing from npm: azurite"
  npm install --prefix .tools --no-audit --no-fund --silent azurite@3 >/dev/null
fi
if [ ! -x .tools/node_modules/.bin/s3rver ]; then
  echo "installing from npm: s3rver"
  npm install --prefix .tools --no-audit --no-fund --silent s3rver@3.7.1 >/dev/null
fi
