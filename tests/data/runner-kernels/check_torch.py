"""Stand-in: a good script, one passing result with numbers."""
import _common

_common.write([_common.result("torch/matmul", "pass", numbers={"tflops": 600.0}, seconds=0.2)])
