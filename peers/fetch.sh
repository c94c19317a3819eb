#!/usr/bin/env bash
# Fetch one peer's jars from Maven Central into .cache/maven-peers/<name>/jars and compile our
# Java programs of tests/java/<name>/ (if any) against them into .cache/maven-peers/<name>/classes.
# Called by `make peers` (one stamp per peer); retries the download, since a fresh clone's
# `make test` must not fail on one network hiccup. Nothing is downloaded at test time.
set -euo pipefail
name="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/.cache/maven-peers/$name"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
for attempt in 1 2 3 4; do
  if mvn -q -B -f "$root/peers/$name/pom.xml" dependency:copy-dependencies \
       -DoutputDirectory="$out.tmp/jars" -Dmaven.wagon.http.retryHandler.count=3 -Dstyle.color=never; then
    break
  fi
  [ "$attempt" = 4 ] && { echo "peers/fetch.sh: could not fetch $name from Maven Central" >&2; exit 1; }
  echo "peers/fetch.sh: fetching $name failed (attempt $attempt), retrying" >&2
  sleep $((attempt * 5))
done
src="$root/tests/java/$name"
if compgen -G "$src/*.java" >/dev/null; then
  mkdir -p "$out.tmp/classes"
  javac -nowarn -d "$out.tmp/classes" -cp "$out.tmp/jars/*" "$src"/*.java
fi
rm -rf "$out" && mv "$out.tmp" "$out"
