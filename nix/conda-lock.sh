#!/usr/bin/env bash
# conda-lock is not in nixpkgs: the first call installs one pinned release (its dependencies resolved
# as of a fixed date) into the project, later calls run that copy.
set -euo pipefail
version=${VERLENV_CONDA_LOCK_VERSION:?VERLENV_CONDA_LOCK_VERSION is not set (enter the shell with nix develop)}
exclude_newer=${VERLENV_TOOLS_EXCLUDE_NEWER:?VERLENV_TOOLS_EXCLUDE_NEWER is not set (enter the shell with nix develop)}
tools=${VERLENV_TOOLS_DIR:-$(git rev-parse --show-toplevel 2>/dev/null || pwd)/.verlenv/tools}
prefix="$tools/conda-lock-$version"
if [ ! -x "$prefix/bin/conda-lock" ]; then
  echo "conda-lock: installing conda-lock==$version into $prefix (once)" >&2
  # A failed earlier attempt may have left a partial tool env behind.
  rm -rf "$prefix"
  UV_TOOL_DIR="$prefix/envs" UV_TOOL_BIN_DIR="$prefix/bin" \
    uv tool install --quiet --exclude-newer "$exclude_newer" "conda-lock==$version" >&2
fi
exec "$prefix/bin/conda-lock" "$@"
