#!/usr/bin/env bash
# Runs the test suite against a PostgreSQL server: the configured one, the
# local one, or a throwaway one (see scripts/pgenv.sh).
#
#   ./scripts/test.sh [go test flags and packages]   e.g. -count=1 -run TestFoo
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/pgenv.sh
source scripts/pgenv.sh

# Not exec: the EXIT trap from pgenv.sh must still run to stop a throwaway
# server. Being the last command, go test's status is the script's status.
go test ./... "$@"
