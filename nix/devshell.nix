# The toolchain shell: Python 3.12, uv, nox, conda tooling and a host compiler nvcc accepts.
# CUDA itself is not taken from nixpkgs: nvcc comes from the stack's lock (PyPI wheels or conda-forge).
{ pkgs }:
let
  python = pkgs.python312;
  # nvcc 12.8 and 13.0 both accept gcc 13, which is also what the conda path uses (conda-forge gxx=13).
  gcc = pkgs.gcc13;
  stdenv = pkgs.overrideCC pkgs.stdenv gcc;

  # PyPI wheels (torch) expect libstdc++ and libgomp from the system; Nix's python has none on its path.
  # Only these two are exposed, so programs built for the host's glibc keep the host's libgcc_s. They
  # come from the default compiler, the newest in the set: its libstdc++ also serves gcc 13 objects,
  # whereas gcc 13's would break nixpkgs' own C++ tools built with the newer one (cmake, micromamba).
  runtimeLib = pkgs.stdenv.cc.cc.lib;
  cxxRuntime = pkgs.runCommand "verlenv-cxx-runtime" { } ''
    mkdir -p $out/lib
    ln -s ${runtimeLib}/lib/libstdc++.so.6 ${runtimeLib}/lib/libgomp.so.1 $out/lib/
  '';

  condaLock = pkgs.writeShellScriptBin "conda-lock" (builtins.readFile ./conda-lock.sh);
in
(pkgs.mkShell.override { inherit stdenv; }) {
  packages = [
    python
    pkgs.uv
    # pkgs.nox is an unrelated tool; the session runner is the Python package.
    pkgs.python312Packages.nox
    pkgs.micromamba
    condaLock
    pkgs.ninja
    pkgs.cmake
    pkgs.git
    gcc
  ];

  # uv venvs use the shell's interpreter, never a downloaded one, so everything shares one glibc.
  UV_PYTHON = "${python}/bin/python3.12";
  UV_PYTHON_DOWNLOADS = "never";
  # pyproject asks for conda-lock >=3,<4; 3.0.4 is the last 3.x. Its dependencies resolve as of this date.
  VERLENV_CONDA_LOCK_VERSION = "3.0.4";
  VERLENV_TOOLS_EXCLUDE_NEWER = "2026-10-15T00:00:00Z";

  passthru = { inherit cxxRuntime condaLock; };

  shellHook = ''
    ${builtins.readFile ./driver-libs.sh}
    ${builtins.readFile ./cuda-home.sh}
    verlenv_root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)

    # Python packages in the shell (nox's dependencies) would otherwise leak into every venv of 3.12.
    unset PYTHONPATH

    # The stdenv hook exports CC=gcc; absolute paths survive PATH changes and reach nvcc and CMake.
    export CC=${gcc}/bin/gcc CXX=${gcc}/bin/g++ CUDAHOSTCXX=${gcc}/bin/g++
    export LD_LIBRARY_PATH="${cxxRuntime}/lib''${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export VERLENV_TOOLS_DIR="$verlenv_root/.verlenv/tools"
    verlenv_use_driver "$verlenv_root"
    verlenv_use_cuda_home "$verlenv_root"

    cat >&2 <<VERLENV_BANNER
    verlenv shell: python ${python.version}, gcc ${gcc.version} (CC, CXX, CUDAHOSTCXX), uv, nox, micromamba, conda-lock $VERLENV_CONDA_LOCK_VERSION
      driver:    $VERLENV_DRIVER_NOTE
      CUDA_HOME: $VERLENV_CUDA_NOTE
    next:
      nox -s env                                     # uv venv of the default stack (runs on Nix's glibc)
      conda-lock install --micromamba -n verl conda-lock.yml   # or a conda env (--extras megatron); see docs/nix.md
      nox -s build     # compile flash-attn, apex, transformer-engine against the env's torch
      nox -s verify    # picks CPU / A100 / H100 by what it finds; or verify-a100, verify-h100
    VERLENV_BANNER
  '';
}
