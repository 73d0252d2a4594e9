"""Stand-in: a script that crashes on import with the undefined-symbol error of a stale flash-attn build."""
import sys

UNDEFINED = ("ImportError: /env/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: "
             "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
print("loading flash_attn")
sys.stderr.write(UNDEFINED + "\n")
sys.exit(1)
