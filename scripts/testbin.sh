#!/usr/bin/env bash
# The stack-backed packages' test binaries, linked once per make test (issue 49). Go caches
# compiled packages but links a package's test binary again at every go test, and make test
# runs the stack-backed packages (STACK_TEST_PKGS) four times, on PostgreSQL 15 (the stack) and
# 16-18 (the matrix): 60 links of about 0.5-1.5 CPU-s each on a CPU-bound machine. make it-build
# links them once into TESTBIN (a directory of make test's, removed at its end) and the phases
# run them from there; without TESTBIN those targets run go test as before.
#
#   scripts/testbin.sh pkgs DIR TIMEOUT PKG...  run the packages' binaries (go test -c -o DIR/)
#                                             as `go test -count=1 -timeout TIMEOUT PKG...` would: two at
#                                             a time, each in its package's directory, a line
#                                             "ok|FAIL <pkg> <secs>s" each (the output of a
#                                             failed one before it), exit 1 if one failed
#
# A binary's name is its package's last path element, as go test -c -o DIR/ names it (which
# refuses two packages of one name).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
JOBS=${TESTBIN_JOBS:-2} # go test's default -p on the 2-core machines

die() {
	echo "testbin: $*" >&2
	exit 2
}

# pkgs DIR TIMEOUT PKG...: see above.
cmd_pkgs() {
	local dir=$1 timeout=$2
	shift 2
	local -a paths=() dirs=() bins=()
	local path pdir
	while read -r path pdir; do
		paths+=("$path")
		dirs+=("$pdir")
		bins+=("$dir/${path##*/}.test")
	done < <(cd "$REPO" && $GO list -f '{{.ImportPath}} {{.Dir}}' "$@")
	local out i running=0 failed=0
	out=$(mktemp -d)
	# shellcheck disable=SC2064 # expand now
	trap "rm -rf '$out'" EXIT
	for i in "${!paths[@]}"; do
		[ -x "${bins[$i]}" ] || continue # no test files: go test -c wrote no binary
		if [ "$running" -ge "$JOBS" ]; then
			wait -n || true
			running=$((running - 1))
		fi
		(
			t0=$(date +%s.%N)
			rc=0
			(cd "${dirs[$i]}" && exec "${bins[$i]}" -test.paniconexit0 -test.count=1 -test.timeout="$timeout") >"$out/$i" 2>&1 || rc=$?
			echo "$rc $(echo "$(date +%s.%N) - $t0" | bc)" >"$out/$i.rc"
		) &
		running=$((running + 1))
	done
	wait
	for i in "${!paths[@]}"; do
		if [ ! -x "${bins[$i]}" ]; then
			printf '?   \t%s\t[no test files]\n' "${paths[$i]}"
			continue
		fi
		local rc secs
		read -r rc secs <"$out/$i.rc"
		secs=$(printf '%.3f' "$secs")
		if [ "$rc" = 0 ]; then
			printf 'ok  \t%s\t%ss\n' "${paths[$i]}" "$secs"
		else
			cat "$out/$i"
			printf 'FAIL\t%s\t%ss\n' "${paths[$i]}" "$secs"
			failed=1
		fi
	done
	return $failed
}

case ${1:-} in
pkgs)
	[ $# -ge 4 ] || die "usage: scripts/testbin.sh pkgs DIR TIMEOUT PKG..."
	shift
	cmd_pkgs "$@"
	;;
*) die "usage: scripts/testbin.sh pkgs DIR TIMEOUT PKG..." ;;
esac
