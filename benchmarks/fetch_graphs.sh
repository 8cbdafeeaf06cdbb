#!/usr/bin/env bash
# Unpack the benchmark graphs shipped in Debian packages into the gnnc data folder.
#
#   benchmarks/fetch_graphs.sh            # into ${GNNC_DATA:-$HOME/.cache/gnnc/data}
#   GNNC_DATA=/data benchmarks/fetch_graphs.sh
#
# Graphs come from packages, never from the web at run time:
#   libmetis-doc        METIS test graphs: 4elt, copter2, mdual (METIS .graph)
#   python3-graph-tool  graph-tool's collection: email-Enron, cond-mat, astro-ph,
#                       as-22july06, pgp-strong-2009, polblogs, ... (.gt.gz)
#   wordnet-base        WordNet 3.0's database (usr/share/wordnet/data.{noun,verb,adj,adv}):
#                       a typed graph of synsets, read by gnnc.graph.wordnet.load_wordnet
# Each package is fetched with `apt-get download` and unpacked with `dpkg -x`
# (nothing is installed). Running it again does nothing for packages already
# unpacked; benchmarks/graphs.py finds the files where this script puts them.
set -euo pipefail

DATA="${GNNC_DATA:-$HOME/.cache/gnnc/data}"
PACKAGES=(libmetis-doc python3-graph-tool wordnet-base)

for tool in apt-get dpkg; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "fetch_graphs.sh: '$tool' not found; this script needs a Debian-based system" >&2
        exit 1
    fi
done

mkdir -p "$DATA/debs"
updated=0

download() {  # download PKG into $DATA/debs, running apt-get update once if the lists are stale
    local pkg="$1"
    if (cd "$DATA/debs" && apt-get download "$pkg"); then
        return 0
    fi
    if [ "$updated" = 0 ] && [ "$(id -u)" = 0 ]; then
        echo "fetch_graphs.sh: apt-get download $pkg failed; running apt-get update once" >&2
        apt-get update
        updated=1
        (cd "$DATA/debs" && apt-get download "$pkg") && return 0
    fi
    echo "fetch_graphs.sh: cannot download $pkg (as root, 'apt-get update' may help)" >&2
    return 1
}

for pkg in "${PACKAGES[@]}"; do
    dest="$DATA/$pkg"
    if [ -f "$dest/.unpacked" ]; then
        echo "$pkg: already unpacked in $dest"
        continue
    fi
    deb="$(ls -t "$DATA/debs/${pkg}_"*.deb 2>/dev/null | head -n 1 || true)"
    if [ -z "$deb" ]; then
        download "$pkg"
        deb="$(ls -t "$DATA/debs/${pkg}_"*.deb | head -n 1)"
    fi
    # unpack beside the destination, then rename: an interrupted run leaves no half tree
    rm -rf "$dest.partial"
    dpkg -x "$deb" "$dest.partial"
    rm -rf "$dest"
    mv "$dest.partial" "$dest"
    basename "$deb" > "$dest/.unpacked"
    echo "$pkg: unpacked $(basename "$deb") into $dest"
done

echo
echo "graph files in $DATA:"
find "$DATA" \( -name '*.graph' -o -name '*.gt.gz' -o -name '*.mtx' -o -name '*.mtx.gz' \) -type f \
    -printf '%10s  %p\n' | sort -k2
find "$DATA" -path '*/usr/share/wordnet/data.noun' -type f -printf '%10s  %p (WordNet 3.0)\n'
