# Part of the Nix shell hook (nix/devshell.nix inlines it).
# Exposes the host's NVIDIA driver through one private directory: a whole distro lib dir on
# LD_LIBRARY_PATH would load the host's glibc pieces into Nix programs, and the CUDA stubs link but
# cannot run a kernel.

# NixOS, Debian/Ubuntu, Fedora/RHEL/SUSE, WSL2, NVIDIA container toolkit (in that order).
VERLENV_DRIVER_SEARCH_DEFAULT="/run/opengl-driver/lib:/usr/lib/x86_64-linux-gnu:/usr/lib/aarch64-linux-gnu:/usr/lib64:/usr/lib/wsl/lib:/usr/local/nvidia/lib64"

verlenv_is_stub() {
  case "$1" in */stubs/*) return 0 ;; esac
  case "$(readlink -f "$1" 2>/dev/null)" in */stubs/*) return 0 ;; esac
  return 1
}

# Prints the first directory (colon-separated list $1) whose libcuda.so.1 is a real driver.
verlenv_find_driver_dir() {
  local dir search=${1:-$VERLENV_DRIVER_SEARCH_DEFAULT}
  local IFS=:
  for dir in $search; do
    if [ -z "$dir" ] || [ ! -e "$dir/libcuda.so.1" ]; then continue; fi
    # Some container images symlink the stub in as libcuda.so.1 to make builds link.
    verlenv_is_stub "$dir/libcuda.so.1" && continue
    printf '%s\n' "$dir"
    return 0
  done
  return 1
}

# Fills directory $1 with symlinks to the driver libraries found via search list $2; prints the driver dir.
verlenv_link_driver_libs() {
  local dest=$1 dir lib tmp
  if ! dir=$(verlenv_find_driver_dir "${2:-}"); then
    rm -rf "$dest"
    return 1
  fi
  tmp="$dest.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp" || return 1
  # libcuda.so*, not libcuda*: distro dirs may also hold a toolkit's libcudart, which must not leak in.
  # libdxcore is what WSL's libcuda loads.
  for lib in "$dir"/libcuda.so* "$dir"/libcudadebugger.so* "$dir"/libnvidia-*.so* "$dir"/libdxcore.so; do
    [ -e "$lib" ] || continue
    verlenv_is_stub "$lib" && continue
    ln -s "$lib" "$tmp/${lib##*/}"
  done
  # Triton links with -lcuda; distros ship the unversioned name only in their -dev package.
  [ -e "$tmp/libcuda.so" ] || ln -s libcuda.so.1 "$tmp/libcuda.so"
  rm -rf "$dest" && mv "$tmp" "$dest" || return 1
  printf '%s\n' "$dir"
}

# Links the driver into $1/.verlenv/driver-libs and exports TRITON_LIBCUDA_PATH and LD_LIBRARY_PATH.
# VERLENV_DRIVER_SEARCH overrides where to look (e.g. /usr/local/cuda/compat for forward compatibility).
verlenv_use_driver() {
  local private="$1/.verlenv/driver-libs" found
  if found=$(verlenv_link_driver_libs "$private" "${VERLENV_DRIVER_SEARCH:-}"); then
    export TRITON_LIBCUDA_PATH="$private"
    export LD_LIBRARY_PATH="$private${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    VERLENV_DRIVER_NOTE="$found (linked into $private)"
  else
    unset TRITON_LIBCUDA_PATH
    VERLENV_DRIVER_NOTE="no NVIDIA driver (libcuda.so.1) in ${VERLENV_DRIVER_SEARCH:-$VERLENV_DRIVER_SEARCH_DEFAULT}; GPU steps will fail (set VERLENV_DRIVER_SEARCH)"
  fi
}
