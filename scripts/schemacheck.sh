#!/usr/bin/env bash
# The outside check of the schema registry record formats (issue 48): the jars of
# interop/schemas/SchemaDecode.java (Apache Avro, protobuf-java and its JsonFormat),
# fetched with Maven once and cached, and the program run on them.
#
#   scripts/schemacheck.sh classpath        # fetch (cached), print the class path
#   scripts/schemacheck.sh run ARGS...      # run SchemaDecode with ARGS (stdin: values in hex)
#
# Cache: ${OUTBOX_RELAY_CACHE:-$HOME/.cache/outbox-relay}/schemacheck-<avro>-<protobuf>/libs.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

AVRO_VERSION=1.12.2
PROTOBUF_VERSION=4.36.2
CACHE=${OUTBOX_RELAY_CACHE:-${HOME:-/root}/.cache/outbox-relay}
HOME_DIR=$CACHE/schemacheck-$AVRO_VERSION-$PROTOBUF_VERSION
LIBS=$HOME_DIR/libs
MARKER=$LIBS/.outbox-relay-complete

pom() {
	cat <<POM
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by outbox-relay scripts/schemacheck.sh: the decoders of interop/schemas/SchemaDecode.java. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.outbox-relay</groupId>
  <artifactId>schemacheck-libs</artifactId>
  <version>$AVRO_VERSION-$PROTOBUF_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.avro</groupId><artifactId>avro</artifactId><version>$AVRO_VERSION</version></dependency>
    <dependency><groupId>com.google.protobuf</groupId><artifactId>protobuf-java</artifactId><version>$PROTOBUF_VERSION</version></dependency>
    <dependency><groupId>com.google.protobuf</groupId><artifactId>protobuf-java-util</artifactId><version>$PROTOBUF_VERSION</version></dependency>
  </dependencies>
</project>
POM
}

jars() {
	command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
	local want
	want=$(pom | sha1sum | cut -c1-40)
	if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$want" ]; then
		return 0
	fi
	mkdir -p "$HOME_DIR"
	(
		exec 8>"$HOME_DIR/.lock"
		flock -w 600 8 || die "could not lock $HOME_DIR/.lock"
		if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$want" ]; then
			exit 0
		fi
		command -v mvn >/dev/null 2>&1 || apt_install maven
		log "fetching Apache Avro $AVRO_VERSION and protobuf-java $PROTOBUF_VERSION with Maven into $LIBS"
		pom >"$HOME_DIR/pom.xml"
		local tmp=$HOME_DIR/libs.tmp.$$
		rm -rf "$tmp"
		mvn -q -B -Dstyle.color=never -f "$HOME_DIR/pom.xml" dependency:copy-dependencies \
			-DoutputDirectory="$tmp" -DincludeScope=runtime 8>&- >&2 || die "mvn dependency:copy-dependencies failed"
		local j
		for j in "avro-$AVRO_VERSION.jar" "protobuf-java-$PROTOBUF_VERSION.jar" "protobuf-java-util-$PROTOBUF_VERSION.jar"; do
			[ -f "$tmp/$j" ] || die "Maven did not deliver $j"
		done
		rm -rf "$LIBS"
		mv "$tmp" "$LIBS"
		echo "$want" >"$MARKER"
	)
}

classpath() {
	jars
	find "$LIBS" -name '*.jar' | sort | paste -sd: -
}

case "${1:-}" in
classpath) classpath ;;
run)
	shift
	cp=$(classpath)
	exec java -cp "$cp" "$REPO/interop/schemas/SchemaDecode.java" "$@"
	;;
*)
	echo "usage: $0 classpath | run ARGS..." >&2
	exit 2
	;;
esac
