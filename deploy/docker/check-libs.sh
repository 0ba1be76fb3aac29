#!/usr/bin/env bash
# Checks that each image's runtime stage installs every shared library its
# binary links: runs ldd on the built binary, maps each library to its Debian
# package (dpkg -S), and fails when a package is neither in the Dockerfile's
# runtime `apt-get install` list, nor a dependency of one in it, nor part of
# bookworm-slim (the host's Essential and Priority: required packages and
# their dependencies). It also fails on a listed package that provides no
# linked library (the runtime stage carries only what is needed; ca-certificates
# is the one exception: TLS to providers, Vault and AWS needs the roots).
# The host must be Debian bookworm, as the images' build stage is.
#
#   deploy/docker/check-libs.sh BUILD_DIR      (tests/integration/helm_chart.test.mjs)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build=${1:?usage: check-libs.sh BUILD_DIR}
allowed_extra=" ca-certificates "

# The packages of the runtime stage: the apt-get install after the last FROM.
runtime_packages() { # dockerfile
  awk '/^FROM /{body=""} {body = body " " $0} END{print body}' "$1" |
    sed -e 's/\\ / /g' |
    grep -o 'apt-get install[^&]*' | tr ' ' '\n' |
    grep -v -e '^$' -e '^-' -e '^apt-get$' -e '^install$' | sort -u
}

# Every installed package as "name<TAB>base<TAB>deps": base is 1 for
# Essential or Priority: required, deps the names of installed alternatives.
pkgdb=$(mktemp)
trap 'rm -f "$pkgdb"' EXIT
dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Essential}\t${Priority}\t${Pre-Depends}, ${Depends}\n' |
  awk -F'\t' '$1 ~ /^ii/ {print}' |
  awk -F'\t' '
    { inst[$2] = 1; line[$2] = $0 }
    END {
      for (p in line) {
        split(line[p], f, "\t")
        out = ""
        n = split(f[5], deps, ",")
        for (i = 1; i <= n; i++) {
          m = split(deps[i], alts, "|")
          for (j = 1; j <= m; j++) {
            a = alts[j]; sub(/\(.*/, "", a); gsub(/[ \t]/, "", a); sub(/:.*/, "", a)
            if (a != "" && (a in inst)) { out = out " " a; break }
          }
        }
        print p "\t" ((f[3] == "yes" || f[4] == "required") ? 1 : 0) "\t" out
      }
    }' >"$pkgdb"

# The closure of the given packages over Pre-Depends and Depends.
closure() {
  awk -F'\t' -v roots="$*" '
    { deps[$1] = $3; if (roots == "@base" && $2 == 1) q[++n] = $1 }
    END {
      if (roots != "@base") { n = split(roots, q, " ") }
      for (i = 1; i <= n; i++) {
        p = q[i]; if (p in seen) continue; seen[p] = 1; print p
        k = split(deps[p], d, " "); for (j = 1; j <= k; j++) if (!(d[j] in seen)) q[++n] = d[j]
      }
    }' "$pkgdb"
}
base=" $(closure @base | tr '\n' ' ') "

# The package owning each library path, from one dpkg-query -S over every
# spelling: usrmerge means dpkg may know a file under /lib while ldd says
# /usr/lib, or the other way round, or only under its symlink's target.
declare -A real own
spellings() { # path...
  local p r
  for p in "$@"; do
    r=${real[$p]:-$p}
    printf '%s\n' "$p" "${p#/usr}" "/usr$p" "$r" "${r#/usr}" "/usr$r"
  done
}
libs_of() { # binary
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u
}
owners=$(mktemp)
trap 'rm -f "$pkgdb" "$owners"' EXIT
owner() { # path: sets $pkg
  local cand
  local r=${real[$1]:-$1}
  for cand in "$1" "${1#/usr}" "/usr$1" "$r" "${r#/usr}" "/usr$r"; do
    pkg=${own[$cand]:-}
    [ -n "$pkg" ] && return 0
  done
  return 1
}

failed=0
check() { # image, binary
  local image=$1 bin=$2 dockerfile="$here/$1.Dockerfile"
  [ -x "$bin" ] || { echo "$image: $bin is not built"; failed=1; return; }
  local listed closed libs lib pkg why used=" "
  listed=$(runtime_packages "$dockerfile" | tr '\n' ' ')
  [ -n "$listed" ] || { echo "$image: no apt-get install in the runtime stage of $dockerfile"; failed=1; return; }
  closed=" $(closure $listed | tr '\n' ' ') "
  if ldd "$bin" | grep -q 'not found'; then
    echo "$image: ldd $bin: a library is not found on this host"; failed=1; return
  fi
  libs=$(libs_of "$bin")
  local n=0 before=$failed
  failed=0
  for lib in $libs; do
    n=$((n + 1))
    if ! owner "$lib"; then
      echo "$image: $lib belongs to no Debian package"; failed=1; continue
    fi
    used="$used$pkg "
    if [[ " $listed " == *" $pkg "* ]]; then why="listed"
    elif [[ "$closed" == *" $pkg "* ]]; then why="a dependency of the list"
    elif [[ "$base" == *" $pkg "* ]]; then why="in bookworm-slim"
    else
      echo "$image: $(basename "$lib") comes from $pkg, which the runtime stage does not install (add it to the apt-get install list in $(basename "$dockerfile"))"
      failed=1; continue
    fi
    [ -z "${VERBOSE:-}" ] || echo "  $image: $(basename "$lib") <- $pkg ($why)"
  done
  for pkg in $listed; do
    if [[ "$used" != *" $pkg "* && "$allowed_extra" != *" $pkg "* ]]; then
      echo "$image: $pkg is installed by the runtime stage but provides no library $(basename "$bin") links"
      failed=1
    fi
  done
  [ $failed = 1 ] || echo "$image: ok, $n libraries, all installed by: $listed"
  [ "$before" = 0 ] || failed=1
}

bins=("$build/controlplane/llmgw-controlplane" "$build/dataplane/llmgw-dataplane"
  "$build/tests/mockprovider/llmgw-mockprovider")
all=$(for b in "${bins[@]}"; do [ -x "$b" ] && libs_of "$b"; done | sort -u)
# shellcheck disable=SC2086
paste -d' ' <(printf '%s\n' $all) <(readlink -f $all) >"$owners"
while read -r p r; do real[$p]=$r; done <"$owners"
# shellcheck disable=SC2046
dpkg-query -S $(spellings $all | sort -u) 2>/dev/null |
  sed -n 's/^\([^:,]*\)\(:[^:]*\)\?: \(\/.*\)$/\1 \3/p' >"$owners" || true
while read -r p f; do own[$f]=$p; done <"$owners"

check controlplane "$build/controlplane/llmgw-controlplane"
check dataplane "$build/dataplane/llmgw-dataplane"
check mockprovider "$build/tests/mockprovider/llmgw-mockprovider"
exit $failed
