"""GPU visit M: the check's CPU calibration of the gated-DeltaNet families with flash-linear-attention active (CUDA
present, so transformers builds fla's FusedRMSNormGated), the env's transformers 5.9.0 and fla 0.5.2 on the node's
torch. Per family: the model built and scaled on CPU (the step that failed in this visit's first round), the norm
class it saved with, then the saved bf16 model loaded on the GPU, where transformers takes fla's kernels, and its
logits compared with the CPU float32 model's on the same prompts.
Usage: PYTHONPATH=src:<site>:src/verlenv/verify/kernels python3 THIS OUT.json"""
import importlib
import json
import sys
import tempfile
import time

import _models
import torch
import transformers
from verlenv.catalog import families

NAMES = ("qwen3.5", "qwen3.5-moe", "qwen3-next")
out = {"torch": torch.__version__, "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
table = families.table()
for row in table.rows([table.families[n] for n in NAMES]):
    t = time.time()
    result = {}
    try:
        model = _models.build_model(row, torch)
        layers = [m for m in model.modules() if hasattr(m, "chunk_gated_delta_rule")]
        modeling = importlib.import_module(type(layers[0]).__module__)
        result["fla_norm_in_modeling"] = getattr(modeling, "FusedRMSNormGated", None) is not None
        result["calibration_norms"] = sorted({type(m.norm).__name__ for m in layers})
        result["stats"] = _models.sampling_stats(model, torch)
        ids = _models.calibration_ids(torch)
        reference = _models.logits(model, torch, ids)
        with tempfile.TemporaryDirectory() as d:
            model.to(torch.bfloat16).save_pretrained(d)
            gpu = getattr(transformers, row["model_class"]).from_pretrained(d, dtype=torch.bfloat16).cuda().eval()
        gpu_layers = [m for m in gpu.modules() if hasattr(m, "chunk_gated_delta_rule")]
        result["gpu_norms"] = sorted({f"{type(m.norm).__module__}.{type(m.norm).__name__}" for m in gpu_layers})
        result["gpu_delta_rule"] = sorted({getattr(m.chunk_gated_delta_rule, "__module__", "?") for m in gpu_layers})
        with torch.no_grad():
            fast = gpu(input_ids=ids.cuda()).logits.float().cpu()
        result["logits_rel_err"] = ((fast - reference).norm() / reference.norm()).item()
        result["top1_agree"] = (fast[:, -1].argmax(-1) == reference[:, -1].argmax(-1)).float().mean().item()
        result["status"] = "pass"
    except Exception as e:  # noqa: BLE001 - each family's failure is its own result
        result["status"] = f"fail: {type(e).__name__}: {e}"[:500]
    result["seconds"] = round(time.time() - t, 1)
    out[row["name"]] = result
    print(row["name"], json.dumps(result), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
