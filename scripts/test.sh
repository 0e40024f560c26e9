#!/usr/bin/env bash
# Runs the test suite against a PostgreSQL server: the configured one, the
# local one, or a throwaway one (see scripts/pgenv.sh), with the PgBouncer,
# NATS and RabbitMQ programs the tests need found, built or installed first
# (see scripts/provision.sh).
#
#   ./scripts/test.sh [go test flags] [packages]   e.g. -count=1 -run TestFoo ./examples/billing
#
# Flags go to go test as given. Without a package argument it tests ./...
# and ./bench/... (the benchmarks and the soak are a module of their own,
# joined by go.work, which ./... does not reach).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Does "$@" name a package? A word is a package unless it is a flag, the value
# of a go test or build flag written as two words (-run TestFoo, -count 1), or
# follows -args (the test binary's own arguments).
_test_has_package() {
	local arg
	while [[ $# -gt 0 ]]; do
		arg=$1
		shift
		case $arg in
		-args | --args) return 1 ;;
		-*=*) ;;
		-run | -skip | -bench | -benchtime | -count | -cpu | -timeout | -parallel | -list | -shuffle | \
			-fuzz | -fuzztime | -fuzzminimizetime | -coverprofile | -coverpkg | -covermode | \
			-cpuprofile | -memprofile | -memprofilerate | -blockprofile | -blockprofilerate | \
			-mutexprofile | -mutexprofilefraction | -trace | -outputdir | -o | -exec | -vet | \
			-p | -tags | -ldflags | -gcflags | -asmflags | -gccgoflags | -mod | -modfile | -pkgdir | \
			-toolexec | -overlay | -pgo | -C | -buildmode | -compiler | -installsuffix)
			shift || true ;; # the next word is this flag's value
		-*) ;; # a flag without a value, or an unknown one (the test binary's, e.g. -update)
		*) return 0 ;;
		esac
	done
	return 1
}

packages=()
if ! _test_has_package "$@"; then
	packages=(./... ./bench/...)
fi

# go test's own default of 10 minutes per package binary is short for
# internal/cli on a loaded 2-core machine: its golden test builds and tests
# dozens of generated modules. A -timeout given on the command line wins.
timeout=(-timeout=30m)
for arg in "$@"; do
	case $arg in
	-timeout | -timeout=* | --timeout | --timeout=*) timeout=() ;;
	-args | --args) break ;;
	esac
done

# PgBouncer, NATS and RabbitMQ: found, built or installed, or one message
# that says what is missing (scripts/provision.sh); then PostgreSQL.
# shellcheck source=scripts/provision.sh
source scripts/provision.sh
# shellcheck source=scripts/pgenv.sh
source scripts/pgenv.sh

# Not exec: the EXIT trap from pgenv.sh must still run to stop a throwaway
# server. Being the last command, go test's status is the script's status.
go test ${timeout[@]+"${timeout[@]}"} ${packages[@]+"${packages[@]}"} "$@"
