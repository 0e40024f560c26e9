# shellcheck shell=bash
#
# provision.sh: the programs the test suite needs besides PostgreSQL
# (scripts/pgenv.sh finds or starts that one), found, built or installed.
#
#   source scripts/provision.sh   from a bash script (scripts/test.sh)
#   bash scripts/provision.sh     to see what it finds (and provision it)
#
# What the tests need, and where each comes from (first match wins):
#   PgBouncer   the tests start their own, in transaction pooling mode, from
#               the binary IDEMGEN_PGBOUNCER names, else pgbouncer on PATH or
#               in the usual directories (/usr/sbin on Debian). Else the
#               package is installed (below).
#   NATS        the tests use IDEMGEN_TEST_NATS_URL, else the server that runs
#               on 127.0.0.1:4222, and start throwaway servers from
#               nats-server on PATH or in the usual directories. Without one
#               on the machine, the real server is built from its Go module
#               (github.com/nats-io/nats-server/v2, the version go.mod's tool
#               directive pins: no download besides Go modules, no package)
#               into a temporary directory put first on PATH.
#   RabbitMQ    the tests use IDEMGEN_TEST_AMQP_URL, else the node that runs
#               on 127.0.0.1:5672, and start throwaway nodes from
#               rabbitmq-server on PATH or in the usual directories. Else the
#               package is installed (below).
# A missing package is installed with apt-get (after apt-get update) when
# the machine allows it: as root, or through sudo without a password, and
# IDEMGEN_TEST_NO_INSTALL is not 1; a program that is installed is never
# upgraded. PgBouncer's system service is not wanted (the tests start their
# own): when the install started it, it is stopped and disabled. Otherwise provision.sh stops at once with one message that
# lists every missing program and how to install it.
#
# Afterwards IDEMGEN_PGBOUNCER is exported (the pgbouncer found), and PATH
# when nats-server was built. It installs an EXIT trap that removes its
# temporary directory and then runs the EXIT trap set before, if any.
#
# Settings, mainly for testing this script:
#   IDEMGEN_PROVISION_DIRS    colon-separated directories searched after PATH
#                             instead of the built-in list ("" = PATH only)
#   IDEMGEN_TEST_NO_INSTALL=1 never install a package: report what is missing
#
# Like pgenv.sh it does not rely on set -e, and internal names start with
# _prov_.

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
fi

_prov_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || {
	echo "provision: cannot find the repository root" >&2
	exit 1
}

# Prints the directories searched after PATH for program $1: where packages
# and go install put it, the same the tests search.
_prov_dirs() {
	if [[ -n ${IDEMGEN_PROVISION_DIRS+set} ]]; then
		printf '%s\n' "$IDEMGEN_PROVISION_DIRS" | tr ':' '\n'
		return
	fi
	case $1 in
	pgbouncer) printf '%s\n' /usr/sbin /usr/local/sbin /usr/local/bin ;;
	nats-server) printf '%s\n' /usr/sbin /usr/local/sbin /usr/local/bin /opt/homebrew/bin "$(go env GOPATH 2>/dev/null)/bin" ;;
	rabbitmq-server) printf '%s\n' /usr/sbin /usr/local/sbin /opt/homebrew/sbin /usr/lib/rabbitmq/bin ;;
	esac
}

# Prints the path of program $1: on PATH, else in _prov_dirs.
_prov_find() {
	local d
	if command -v "$1" 2>/dev/null; then
		return 0
	fi
	while IFS= read -r d; do
		if [[ -n $d && -x $d/$1 && ! -d $d/$1 ]]; then
			echo "$d/$1"
			return 0
		fi
	done < <(_prov_dirs "$1")
	return 1
}

# Can this machine install packages: apt-get, as root or through sudo -n.
_prov_as_root=()
_prov_can_install() {
	[[ ${IDEMGEN_TEST_NO_INSTALL:-} != 1 ]] || return 1
	command -v apt-get >/dev/null 2>&1 || return 1
	if [[ $EUID -eq 0 ]]; then
		_prov_as_root=()
		return 0
	fi
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		_prov_as_root=(sudo -n)
		return 0
	fi
	return 1
}

_prov_why_no_install() {
	if [[ ${IDEMGEN_TEST_NO_INSTALL:-} == 1 ]]; then
		echo "IDEMGEN_TEST_NO_INSTALL=1"
	elif ! command -v apt-get >/dev/null 2>&1; then
		echo "there is no apt-get here"
	else
		echo "not root, and sudo asks for a password"
	fi
}

# The install hints of a missing program, one line each.
_prov_help() {
	case $1 in
	pgbouncer)
		cat <<-'EOF'
			  pgbouncer (the PgBouncer tests start their own):
			    Debian/Ubuntu: sudo apt-get install pgbouncer   Fedora: sudo dnf install pgbouncer   macOS: brew install pgbouncer
			    or point IDEMGEN_PGBOUNCER at a pgbouncer binary
		EOF
		;;
	rabbitmq-server)
		cat <<-'EOF'
			  rabbitmq-server (the broker tests use the node on 127.0.0.1:5672 and start throwaway nodes):
			    Debian/Ubuntu: sudo apt-get install rabbitmq-server   Fedora: sudo dnf install rabbitmq-server   macOS: brew install rabbitmq
		EOF
		;;
	esac
}

# Is the system service $1 running?
_prov_service_running() {
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$1" 2>/dev/null; then
		return 0
	fi
	[[ -x /etc/init.d/$1 ]] && "${_prov_as_root[@]}" "/etc/init.d/$1" status >/dev/null 2>&1
}

# Stops and disables the system service $1.
_prov_stop_service() {
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$1" 2>/dev/null; then
		"${_prov_as_root[@]}" systemctl stop "$1" >/dev/null 2>&1 || true
		"${_prov_as_root[@]}" systemctl disable --quiet "$1" >/dev/null 2>&1 || true
	elif [[ -x /etc/init.d/$1 ]]; then
		"${_prov_as_root[@]}" "/etc/init.d/$1" stop >/dev/null 2>&1 || true
	fi
}

_prov_cleanup() {
	if [[ -n ${_prov_tmp:-} ]]; then
		rm -rf "$_prov_tmp"
	fi
	if [[ -n ${_prov_prev_trap:-} ]]; then
		eval "$_prov_prev_trap"
	fi
}

_prov_main() {
	local missing=() packages=() p started
	started=$EPOCHREALTIME

	# PgBouncer.
	if [[ -n ${IDEMGEN_PGBOUNCER:-} ]]; then
		if [[ ! -x $IDEMGEN_PGBOUNCER ]]; then
			echo "provision: IDEMGEN_PGBOUNCER=$IDEMGEN_PGBOUNCER is not an executable file" >&2
			exit 1
		fi
	elif p=$(_prov_find pgbouncer); then
		export IDEMGEN_PGBOUNCER=$p
	else
		missing+=(pgbouncer)
		packages+=(pgbouncer)
	fi
	# RabbitMQ.
	if ! _prov_find rabbitmq-server >/dev/null; then
		missing+=(rabbitmq-server)
		packages+=(rabbitmq-server)
	fi

	if [[ ${#missing[@]} -gt 0 ]]; then
		if ! _prov_can_install; then
			{
				printf 'provision: the tests need programs this machine lacks, and it cannot install them (%s):\n' "$(_prov_why_no_install)"
				for p in "${missing[@]}"; do _prov_help "$p"; done
				echo "  (nats-server is not needed: the tests build the real server from its Go module when the machine has none)"
			} >&2
			exit 1
		fi
		printf 'provision: installing %s with apt-get (missing: %s)\n' "${packages[*]}" "${missing[*]}" >&2
		local bouncer_ran=0
		if _prov_service_running pgbouncer; then bouncer_ran=1; fi
		if ! "${_prov_as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 ||
			! "${_prov_as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >&2; then
			echo "provision: apt-get install ${packages[*]} failed (its output above)" >&2
			exit 1
		fi
		if [[ " ${packages[*]} " == *" pgbouncer "* ]]; then
			# Only a service the install started: one that ran before is
			# the machine's.
			if [[ $bouncer_ran -eq 0 ]] && _prov_service_running pgbouncer; then
				_prov_stop_service pgbouncer
			fi
			p=$(IDEMGEN_PROVISION_DIRS=/usr/sbin:/usr/bin _prov_find pgbouncer) || {
				echo "provision: pgbouncer is still missing after apt-get install pgbouncer" >&2
				exit 1
			}
			export IDEMGEN_PGBOUNCER=$p
		fi
		if [[ " ${packages[*]} " == *" rabbitmq-server "* ]] && ! IDEMGEN_PROVISION_DIRS=/usr/sbin:/usr/lib/rabbitmq/bin _prov_find rabbitmq-server >/dev/null; then
			echo "provision: rabbitmq-server is still missing after apt-get install rabbitmq-server" >&2
			exit 1
		fi
		printf 'provision: installed %s\n' "${packages[*]}" >&2
	fi

	# NATS: the real server from its Go module when the machine has none.
	if ! _prov_find nats-server >/dev/null; then
		_prov_tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgen-provision.XXXXXX") || exit 1
		if ! (cd "$_prov_root" && go build -o "$_prov_tmp/bin/nats-server" github.com/nats-io/nats-server/v2); then
			echo "provision: could not build nats-server from github.com/nats-io/nats-server/v2 (the go output above)" >&2
			exit 1
		fi
		export PATH=$_prov_tmp/bin:$PATH
		printf 'provision: no nats-server on the machine: built %s from its Go module (%s) for the tests\n' \
			"$("$_prov_tmp/bin/nats-server" --version 2>&1)" "$_prov_tmp/bin" >&2
	fi
	if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
		printf 'pgbouncer: %s\nrabbitmq-server: %s\nnats-server: %s\n(%s)\n' "$IDEMGEN_PGBOUNCER" \
			"$(_prov_find rabbitmq-server)" "$(_prov_find nats-server)" \
			"$(awk -v a="${started/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f s", b - a }')"
	fi
}

_prov_prev_trap=
if _prov_t=$(trap -p EXIT) && [[ -n $_prov_t ]]; then
	eval "_prov_words=($_prov_t)"
	_prov_prev_trap=${_prov_words[2]}
fi
trap _prov_cleanup EXIT
_prov_main
