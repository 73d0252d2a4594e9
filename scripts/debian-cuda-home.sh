#!/usr/bin/env bash
# A CUDA_HOME made from Debian's non-free CUDA 12 packages, for compiling torch CUDA extensions (flash-attn) where
# no CUDA 12 nvcc is otherwise reachable: PyPI's cu12 nvcc wheels hold only ptxas, and conda channels may be
# blocked. `verlenv build` takes it through CUDA_HOME and accepts its minor version for a CUDA 12.x torch (README,
# "Native builds").
#
#   scripts/debian-cuda-home.sh [--release 12.5|12.4] [--prefix DIR]     (default: 12.5, /opt/cuda-<release>-debian)
#
# Nothing is installed into the system: apt runs with a private state folder (the machine's package lists, caches
# and installed set stay as they are). apt checks each suite's InRelease signature against debian-archive-keyring
# and each .deb against the sha256 of that signed index; the .debs are then unpacked with dpkg-deb. Debian's
# nvcc.profile hard-codes /usr, so the prefix gets its own, relative to nvcc, in the layout torch's cpp_extension
# reads (bin/nvcc, nvvm/, include/, lib64/). It links against cudart only (torch extensions need nothing else);
# the headers of every CUDA library are there. The prefix appears with one rename, complete or not at all.
set -euo pipefail

MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
release=12.5
prefix=

die() { echo "debian-cuda-home: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --release) release=${2:?--release needs a value}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

# Exact versions, so the same command makes the same toolkit; a version the archive has dropped fails the download
# (then update the pins here). nvidia-cuda-dev requires CCCL (libcu++/cub/thrust) of at least the toolkit's own.
case "$release" in
  12.5)
    # experimental's 12.5 is built on sid, and its CCCL (>= 2.4) comes from sid.
    suites="sid experimental"
    packages="nvidia-cuda-toolkit=12.5.40~12.5.0-2+b1 nvidia-cuda-dev=12.5.39~12.5.0-2+b1
      libcudart12=12.5.39~12.5.0-2+b1 libnvvm4=12.5.40~12.5.0-2+b1
      libcu++-dev=2.5.0-1 libcub-dev=2.5.0-1 libthrust-dev=2.5.0-1" ;;
  12.4)
    suites="trixie"
    packages="nvidia-cuda-toolkit=12.4.131~12.4.1-2 nvidia-cuda-dev=12.4.127~12.4.1-2
      libcudart12=12.4.127~12.4.1-2 libnvvm4=12.4.131~12.4.1-2
      libcu++-dev=2.3.2-2 libcub-dev=2.3.2-2 libthrust-dev=2.3.2-2" ;;
  *) die "no pinned Debian packages for CUDA $release; choose 12.5 (experimental) or 12.4 (trixie)" ;;
esac
prefix=${prefix:-/opt/cuda-$release-debian}
prefix=$(realpath -m "$prefix")

for tool in apt-get dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found; this script needs Debian's apt and dpkg"
done
[ -r "$KEYRING" ] || die "$KEYRING missing; install debian-archive-keyring"

if [ -e "$prefix" ]; then
  if [ -x "$prefix/bin/nvcc" ] && [ -f "$prefix/debian-packages.txt" ]; then
    echo "debian-cuda-home: $prefix is already made:" >&2
    "$prefix/bin/nvcc" --version | tail -2 >&2
    exit 0
  fi
  die "$prefix exists and is not a toolkit this script made; remove it or pass another --prefix"
fi
mkdir -p "$(dirname "$prefix")"

work=$(mktemp -d "${TMPDIR:-/tmp}/debian-cuda-apt.XXXXXX")
tmp=$(mktemp -d "$(dirname "$prefix")/.$(basename "$prefix").XXXXXX")
trap 'rm -rf "$work" "$tmp"' EXIT
# apt downloads as the unprivileged _apt user when run as root: it must reach and write the folders.
chmod 755 "$work"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/etc/sources.list.d" "$work/etc/preferences.d" \
  "$work/debs"
if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$work/debs"; fi
for suite in $suites; do
  echo "deb [signed-by=$KEYRING] $MIRROR $suite main contrib non-free"
done >"$work/etc/sources.list"
apt_opts=(-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::SourceList=$work/etc/sources.list" -o "Dir::Etc::SourceParts=$work/etc/sources.list.d"
  -o "Dir::Etc::Preferences=$work/etc/preferences" -o "Dir::Etc::PreferencesParts=$work/etc/preferences.d"
  -o "APT::Architectures::=amd64" -o "Acquire::Languages=none")

echo "debian-cuda-home: CUDA $release from $MIRROR ($suites) into $prefix" >&2
apt-get "${apt_opts[@]}" -q update >&2
# shellcheck disable=SC2086  # the package list is words
(cd "$work/debs" && apt-get "${apt_opts[@]}" -q download $packages >&2)

stage=$tmp/.debian
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$stage"
done
(cd "$work/debs" && for deb in *.deb; do
  printf '%s  %s  %s\n' "$(sha256sum "$deb" | cut -d' ' -f1)" "$(stat -c %s "$deb")" "$deb"
done) >"$tmp/debian-packages.txt"

# The CUDA_HOME layout, moved out of Debian's (/usr/bin, /usr/lib/nvidia-cuda-toolkit, /usr/include, multiarch lib).
u=$stage/usr
mkdir -p "$tmp/bin" "$tmp/nvvm/bin" "$tmp/nvvm/lib64" "$tmp/nvvm/include" "$tmp/lib64" "$tmp/targets/x86_64-linux"
# nvcc itself, not Debian's /usr/bin/nvcc wrapper script, nor its gcc/g++ wrappers (the builder picks the host gcc).
mv "$u/lib/nvidia-cuda-toolkit/bin/nvcc" "$u/lib/nvidia-cuda-toolkit/bin/crt" "$tmp/bin/"
for tool in "$u"/bin/*; do
  case "$(basename "$tool")" in nvcc|compute-sanitizer) ;; *) mv "$tool" "$tmp/bin/" ;; esac
done
mv "$u/lib/nvidia-cuda-toolkit/bin/cicc" "$tmp/nvvm/bin/"
mv "$u/lib/nvidia-cuda-toolkit/libdevice" "$tmp/nvvm/libdevice"
mv "$u"/lib/x86_64-linux-gnu/libnvvm.so* "$tmp/nvvm/lib64/"
cp "$u/include/nvvm.h" "$tmp/nvvm/include/"
mv "$u/include" "$tmp/include"
multiarch=$u/lib/x86_64-linux-gnu
mv "$multiarch"/libcudart.so* "$multiarch/libcudart_static.a" "$multiarch/libcudadevrt.a" "$multiarch/libculibos.a" \
  "$multiarch/stubs" "$tmp/lib64/"
ln -s lib64 "$tmp/lib"
ln -s ../../include "$tmp/targets/x86_64-linux/include"
ln -s ../../lib64 "$tmp/targets/x86_64-linux/lib"
# nvcc reads bin/nvcc.profile beside itself; every path in it is relative to nvcc ($(_HERE_)), so the prefix can move.
cat >"$tmp/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
EOF
rm -rf "$stage"  # the rest: other CUDA libraries' static archives, docs, compute-sanitizer

found=$("$tmp/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
[ "$found" = "$release" ] || die "the unpacked nvcc reports release '${found:-nothing}', not $release"
chmod 755 "$tmp"  # mktemp made it private
mv -T "$tmp" "$prefix"
trap 'rm -rf "$work"' EXIT
echo "debian-cuda-home: made $prefix ($(du -sh "$prefix" | cut -f1)); packages (sha256, bytes, file):" >&2
cat "$prefix/debian-packages.txt" >&2
"$prefix/bin/nvcc" --version | tail -2 >&2
echo "use it with: CUDA_HOME=$prefix verlenv build ..." >&2
