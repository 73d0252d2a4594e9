# Part of the Nix shell hook (nix/devshell.nix inlines it).
# Chooses CUDA_HOME: `verlenv toolchain` decides when it can, since it checks nvcc against the env's
# torch; without it, the same order, unchecked: explicit CUDA_HOME, the active conda prefix, PyPI
# CUDA wheels in the env, the system toolkit.

# The interpreter of the env that extensions are built for: VERLENV_PYTHON, the active venv or conda
# env, or the only .venv-*/ in the project.
verlenv_env_python() {
  local root=$1 candidates
  if [ -n "${VERLENV_PYTHON:-}" ]; then printf '%s\n' "$VERLENV_PYTHON"; return 0; fi
  if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then printf '%s\n' "$VIRTUAL_ENV/bin/python"; return 0; fi
  if [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/python" ]; then printf '%s\n' "$CONDA_PREFIX/bin/python"; return 0; fi
  candidates=$(ls -d "$root"/.venv-*/bin/python 2>/dev/null)
  if [ -n "$candidates" ] && [ "$(printf '%s\n' "$candidates" | wc -l)" -eq 1 ]; then printf '%s\n' "$candidates"; return 0; fi
  return 1
}

# Sets CUDA_HOME (and PATH) for project root $1 and VERLENV_CUDA_NOTE, a line saying why.
verlenv_use_cuda_home() {
  local root=$1 py out err rc wheels
  py=$(verlenv_env_python "$root") || py=""
  if [ -n "$py" ] && command -v verlenv >/dev/null 2>&1; then
    err=$(mktemp)
    out=$(verlenv toolchain --python "$py" --cache-dir "$root/.verlenv" --shell 2>"$err")
    rc=$?
    if [ "$rc" -eq 0 ]; then
      eval "$out"
      VERLENV_CUDA_NOTE="$CUDA_HOME (verlenv toolchain, for $py)"
      rm -f "$err"
      return 0
    fi
    # Exit 2 is verlenv's considered refusal (e.g. nvcc does not match torch): no guessing past it.
    if [ "$rc" -eq 2 ]; then
      VERLENV_CUDA_NOTE="not set: $(tail -n 1 "$err")"
      rm -f "$err"
      return 1
    fi
    rm -f "$err"
  fi
  if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
    VERLENV_CUDA_NOTE="$CUDA_HOME (set explicitly; not checked against torch)"
  elif [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/nvcc" ]; then
    export CUDA_HOME="$CONDA_PREFIX"
    VERLENV_CUDA_NOTE="$CUDA_HOME (active conda prefix; not checked against torch)"
  else
    wheels=""
    if [ -n "$py" ]; then
      wheels=$(ls -d "${py%/bin/*}"/lib/python3*/site-packages/nvidia/cu1*/bin/nvcc 2>/dev/null | head -n 1)
    fi
    if [ -n "$wheels" ]; then
      # The wheels need a CUDA_HOME of symlinks around them, which `verlenv toolchain` assembles.
      VERLENV_CUDA_NOTE="not set: nvcc from PyPI wheels at ${wheels%/bin/nvcc}; run: eval \"\$(verlenv toolchain --python $py --shell)\""
      return 1
    elif [ -x /usr/local/cuda/bin/nvcc ]; then
      export CUDA_HOME=/usr/local/cuda
      VERLENV_CUDA_NOTE="$CUDA_HOME (system toolkit; not checked against torch)"
    else
      VERLENV_CUDA_NOTE="not set: no nvcc yet (the stack's lock installs it: PyPI wheels or conda-forge cuda-nvcc)"
      return 1
    fi
  fi
  case ":$PATH:" in *":$CUDA_HOME/bin:"*) ;; *) export PATH="$CUDA_HOME/bin:$PATH" ;; esac
}
