# Sourced by the hack/build-*.sh scripts: a build done once into a cache directory keyed by its
# pins, whatever the number of callers. The caller sets `out` (the directory) and defines
# `complete` (true when `out` holds a whole build) and `log`.

cache_root="${GRPO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpo-operator}"

# cache_hit_or_lock NAME: print `out` and exit when the build is there; otherwise take the lock
# NAME (concurrent callers, such as parallel test sessions, wait for one build instead of racing
# it) and look again, since the build may have finished meanwhile.
cache_hit_or_lock() {
  if complete; then echo "$out"; exit 0; fi
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.$1.lock"
  flock 9
  if complete; then echo "$out"; exit 0; fi
}

# start_partial: an empty "$out.partial" (a build interrupted before left one) to fill.
start_partial() {
  if [[ -d "$out.partial" ]]; then chmod -R u+w "$out.partial"; rm -rf "$out.partial"; fi
  mkdir -p "$out.partial"
}

# publish: mark "$out.partial" whole and put it in place of `out` (Go's module cache leaves
# files read-only: make them writable so a later build can replace them).
publish() {
  chmod -R u+w "$out.partial"
  touch "$out.partial/.complete"
  if [[ -d "$out" ]]; then chmod -R u+w "$out"; rm -rf "$out"; fi
  mv "$out.partial" "$out"
  log "done: $out"
  echo "$out"
}

# tools_module NAME MODULE VERSION PACKAGE...: in the current directory, a module of our own
# (grpo.dev/NAME) requiring MODULE at VERSION, whose tools.go imports the PACKAGEs to build,
# resolved with `go mod tidy`.
tools_module() {
  local name="$1" module="$2" version="$3"
  shift 3
  printf 'module grpo.dev/%s\n\ngo %s\n\nrequire %s %s\n' "$name" \
    "$(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')" "$module" "$version" > go.mod
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'
  } > tools.go
  GOFLAGS=-tags=tools go mod tidy >&2
}
