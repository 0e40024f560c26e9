# shellcheck shell=bash
#
# pgenv.sh: find a PostgreSQL server for the test suite, or start a throwaway one.
#
#   source scripts/pgenv.sh   from a bash script (scripts/test.sh, .ci/run)
#   bash scripts/pgenv.sh     to see what it would pick (a throwaway server it
#                             starts is removed again when it exits)
#
# Don't source it from an interactive shell: on failure it exits, and it
# cleans up only when the shell exits.
#
# Where the database comes from (first match wins; steps 1 and 2 are Go code,
# internal/testdb, that the benchmark and the demo share, run here through
# internal/pgping -find):
#   1. IDEMGEN_TEST_DATABASE_URL: used as given. If that server does not
#      answer, we stop: a configured database that is down is a
#      misconfiguration, not a reason to start another server.
#   2. The local server's Unix socket (/var/run/postgresql, then /tmp), as
#      PGUSER or the OS user (the same user libpq would pick), database
#      idemgen_test (created if missing, so the tests get a database of their own).
#   3. A throwaway cluster (initdb) in a temp dir. It listens only on a Unix
#      socket in that dir, so it never collides with a port. It is stopped and
#      deleted on exit.
# DATABASE_URL is never read: a developer's shell often points it at a real
# database, and the tests create and drop schemas.
#
# Afterwards these are exported:
#   IDEMGEN_TEST_DATABASE_URL  the database URL chosen
#   IDEMGEN_REQUIRE_DB=1       the Go test helpers fail instead of skipping
# and these are set, but not exported, for the sourcing script:
#   PGENV_PGPING   the built internal/pgping binary (ping, -create, -exec)
#   PGENV_TMPDIR   a private scratch dir, removed on exit
#
# It installs an EXIT trap that does the cleanup and then runs the EXIT trap
# the sourcing script had set before, if any. A sourcing script that needs
# its own temporary files should put them in $PGENV_TMPDIR, or set its own
# trap before sourcing this, rather than replace the trap afterwards.
#
# Settings that override the defaults, mainly for testing this script:
#   IDEMGEN_PGENV_SOCKET_DIRS  colon-separated socket directories to try
#                              instead of /var/run/postgresql:/tmp ("" = none)
#   IDEMGEN_PGENV_BIN_DIRS     colon-separated directories searched for
#                              initdb/pg_ctl after PATH, instead of the
#                              built-in list ("" = PATH only)
#
# The code does not rely on set -e (the sourcing script may or may not use
# it), but it is safe under set -euo pipefail. Internal names start with _pgenv_.

# Run standalone: be strict; sourced: leave the caller's options alone.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
fi

_pgenv_die() {
	{
		printf 'pgenv: %s\n' "$1"
		shift
		if [[ $# -gt 0 ]]; then printf '%s\n' "$@"; fi
	} >&2
	exit 1
}

# Runs a PostgreSQL server program. initdb and postgres refuse to run as
# root, so as root they run as the postgres OS user (from / so that it does
# not complain about a working directory it may not read).
_pgenv_as_pg() {
	if [[ $EUID -ne 0 ]]; then
		"$@"
	elif command -v runuser >/dev/null 2>&1; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && su postgres -s /bin/sh -c "$(printf '%q ' "$@")")
	fi
}

_pgenv_cleanup() {
	if [[ -n ${_pgenv_cluster:-} ]]; then
		_pgenv_as_pg "$_pgenv_bindir/pg_ctl" -D "$_pgenv_cluster/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$_pgenv_cluster"
	fi
	if [[ -n ${PGENV_TMPDIR:-} ]]; then
		rm -rf "$PGENV_TMPDIR"
	fi
	if [[ -n ${_pgenv_prev_trap:-} ]]; then
		eval "$_pgenv_prev_trap"
	fi
}

# Prints PREFIX<version>SUFFIX directories that exist, newest version first
# (sort -n, so 9.6 < 10; a plain glob would put 10 before 9.6).
_pgenv_newest_first() {
	local d v
	for d in "$1"*"$2"; do
		[[ -d $d ]] || continue
		v=${d#"$1"}
		v=${v%"$2"}
		printf '%s\t%s\n' "$v" "$d"
	done | sort -rn -k1,1 | cut -f2
}

# Prints directories that may hold initdb and pg_ctl, in search order.
_pgenv_bin_candidates() {
	local p
	if p=$(command -v initdb); then
		dirname "$p"
	fi
	if [[ -n ${IDEMGEN_PGENV_BIN_DIRS+set} ]]; then
		printf '%s\n' "$IDEMGEN_PGENV_BIN_DIRS" | tr ':' '\n'
		return
	fi
	_pgenv_newest_first /usr/lib/postgresql/ /bin # Debian, Ubuntu
	_pgenv_newest_first /usr/pgsql- /bin          # PGDG RPMs
	echo /usr/local/pgsql/bin                     # built from source
	_pgenv_newest_first /opt/homebrew/opt/postgresql@ /bin
	_pgenv_newest_first /usr/local/opt/postgresql@ /bin
	echo /Applications/Postgres.app/Contents/Versions/latest/bin
}

_pgenv_install_help() {
	local dirs
	dirs=$(_pgenv_bin_candidates | sed '/^$/d' | tr '\n' ' ')
	cat <<-EOF
		pgenv: and no initdb/pg_ctl was found to start a throwaway one (searched PATH, then: ${dirs:-nothing else})
		Install the PostgreSQL server programs:
		  Debian/Ubuntu:  sudo apt-get install postgresql
		                  (initdb and pg_ctl land in /usr/lib/postgresql/<version>/bin, found automatically)
		  Fedora/RHEL:    sudo dnf install postgresql-server
		  macOS:          brew install postgresql@16
		or point the tests at a server you have, e.g.
		  export IDEMGEN_TEST_DATABASE_URL='postgres://me:secret@localhost:5432/idemgen_test?sslmode=disable'
	EOF
}

# Starts a throwaway cluster and sets _pgenv_url to it.
_pgenv_start_cluster() {
	local dir out version
	_pgenv_bindir=
	while IFS= read -r dir; do
		if [[ -n $dir && -x $dir/initdb && -x $dir/pg_ctl ]]; then
			_pgenv_bindir=$dir
			break
		fi
	done < <(_pgenv_bin_candidates)
	if [[ -z $_pgenv_bindir ]]; then
		_pgenv_install_help >&2
		exit 1
	fi

	if [[ $EUID -eq 0 ]] && ! id -u postgres >/dev/null 2>&1; then
		_pgenv_die "running as root, and there is no 'postgres' OS user to run the throwaway server as (initdb refuses to run as root)." \
			"Create that user (e.g. 'useradd --system --create-home postgres'; the distribution's postgresql package does this)," \
			"run the tests as a non-root user, or set IDEMGEN_TEST_DATABASE_URL to a server you have."
	fi
	# As root the dir is handed to postgres, which must reach it: use /tmp, not
	# a TMPDIR that may live under root's home.
	if [[ $EUID -eq 0 ]]; then dir=/tmp; else dir=${TMPDIR:-/tmp}; fi
	_pgenv_cluster=$(mktemp -d "${dir%/}/idemgen-pg.XXXXXX") || _pgenv_die "mktemp failed"
	if [[ $EUID -eq 0 ]]; then
		chown postgres "$_pgenv_cluster" || _pgenv_die "chown postgres $_pgenv_cluster failed"
	fi

	# Trust auth, C locale (the same on every machine), no fsync: it is thrown away.
	if ! out=$(_pgenv_as_pg "$_pgenv_bindir/initdb" -A trust -U postgres --no-sync -E UTF8 --locale=C \
		-D "$_pgenv_cluster/data" 2>&1); then
		_pgenv_die "initdb ($_pgenv_bindir) failed:" "$out"
	fi
	# pg_ctl hands -o to /bin/sh, hence the quotes around the path.
	if ! _pgenv_as_pg "$_pgenv_bindir/pg_ctl" -D "$_pgenv_cluster/data" -l "$_pgenv_cluster/server.log" -w \
		-o "-k '$_pgenv_cluster' -c listen_addresses='' -c fsync=off -c max_connections=200" start >/dev/null; then
		_pgenv_die "pg_ctl start failed; server log:" "$(cat "$_pgenv_cluster/server.log" 2>&1)"
	fi
	# "pg_ctl (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)" -> 15.20
	version=$("$_pgenv_bindir/pg_ctl" --version) || version=unknown
	version=${version#*) }
	version=${version%% *}
	printf 'pgenv: started a throwaway PostgreSQL %s (%s) with its socket and data in %s; it is removed on exit\n' \
		"$version" "$_pgenv_bindir" "$_pgenv_cluster" >&2
	_pgenv_url="postgres://postgres@/postgres?host=$_pgenv_cluster"
}

_pgenv_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || _pgenv_die "cannot find the repository root"
# The trap goes first so that nothing created below can be left behind. The
# caller's EXIT trap, if any, still runs, after ours: `trap -p EXIT` prints
# `trap -- 'CMD' EXIT`, and the eval of it as words gives CMD back.
_pgenv_prev_trap=
if _pgenv_t=$(trap -p EXIT) && [[ -n $_pgenv_t ]]; then
	eval "_pgenv_words=($_pgenv_t)"
	_pgenv_prev_trap=${_pgenv_words[2]}
fi
trap _pgenv_cleanup EXIT
PGENV_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/idemgen-pgenv.XXXXXX") || _pgenv_die "mktemp failed"

# Build pgping once; every check below reuses the binary.
PGENV_PGPING=$PGENV_TMPDIR/pgping
(cd "$_pgenv_root" && go build -o "$PGENV_PGPING" ./internal/pgping) ||
	_pgenv_die "could not build internal/pgping (see the go output above)"

# Steps 1 and 2; status 3 means there is no server to use, so start one.
_pgenv_rc=0
_pgenv_url=$("$PGENV_PGPING" -find) || _pgenv_rc=$?
if [[ $_pgenv_rc -eq 3 ]]; then
	_pgenv_start_cluster
	_pgenv_err=$("$PGENV_PGPING" "$_pgenv_url" 2>&1) ||
		_pgenv_die "the throwaway server does not answer:" "$_pgenv_err"
elif [[ $_pgenv_rc -ne 0 ]]; then
	exit 1 # pgping said why
fi

export IDEMGEN_TEST_DATABASE_URL=$_pgenv_url
export IDEMGEN_REQUIRE_DB=1

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	echo "IDEMGEN_TEST_DATABASE_URL=$IDEMGEN_TEST_DATABASE_URL"
	echo "IDEMGEN_REQUIRE_DB=$IDEMGEN_REQUIRE_DB"
fi
