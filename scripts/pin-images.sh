#!/usr/bin/env bash
# pin-images.sh moves the Dockerfile's pinned base images (and its syntax
# frontend) to the current digest of their tags: the multi-platform index
# digest, so every architecture resolves from it. It needs a registry it can
# reach and one of `crane` or `docker buildx`; run it where both exist (a
# release pipeline), review the diff, commit.
#
#   scripts/pin-images.sh            # rewrite the Dockerfile
#   scripts/pin-images.sh --check    # exit 1 when a digest is not the tag's current one
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
[ "${1:-}" = "--check" ] && check=true

digest() { # image:tag -> sha256:...
	if command -v crane >/dev/null; then
		crane digest "$1"
	elif docker buildx version >/dev/null 2>&1; then
		docker buildx imagetools inspect "$1" --format '{{json .Manifest}}' | sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' | head -1
	else
		echo "pin-images: needs crane or docker buildx" >&2
		exit 2
	fi
}

status=0
# Every image reference written as name:tag@sha256:digest.
for ref in $(grep -oE '[a-z0-9./_-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}' Dockerfile | sort -u); do
	image=${ref%@*}
	old=${ref#*@}
	new=$(digest "$image")
	if [ "$old" = "$new" ]; then
		echo "$image: current ($new)"
		continue
	fi
	echo "$image: $old -> $new"
	status=1
	$check || sed -i "s|$image@$old|$image@$new|" Dockerfile
done
$check && exit $status
exit 0
