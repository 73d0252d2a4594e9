"""Run by tests/catalog/test_families.py inside the default env (torch, transformers, verl, hydra): for every family
row it is given, the trainer check writes its inputs (kernels/_models.py); they are loaded back the way verl and a user
would, the model runs a forward and backward pass on CPU, and verl's own Hydra config composes for the family in
each variant.

python families_in_env.py KERNELS OUT.json TABLES.json
TABLES.json: {"specs": {variant: trainer spec}, "families": [family rows]}
"""

import inspect
import json
import math
import os
import sys
import tempfile

KERNELS, OUT, TABLES = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
sys.path.insert(0, KERNELS)  # as when the check runs: its folder first, for _common, _models and _phases
import check_verl_trainer as t  # noqa: E402

import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import verl  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

torch.set_num_threads(2)


def chat_ids(tokenizer, row: dict) -> list[int]:
    """A row's prompt through the chat template, as token ids (apply_chat_template gives a BatchEncoding or the ids,
    as the transformers version has it)."""
    ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
    return ids["input_ids"] if hasattr(ids, "keys") else ids


def model_inputs(paths: dict, family: dict, row: dict):
    """The first row's prompt as the rollout sees it: chat template, and for an image family verl's own dataset item
    through the saved processor (image placeholder to vision tokens, pixel values)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(paths["model"])
    if family["inputs"] != "images":
        return {"input_ids": torch.tensor([chat_ids(tokenizer, row)])}, {}
    from qwen_vl_utils import process_vision_info
    from verl.utils.dataset.rl_dataset import RLHFDataset

    processor = transformers.AutoProcessor.from_pretrained(paths["model"])
    config = OmegaConf.create({"prompt_key": "prompt", "image_key": "images", "max_prompt_length": t.MAX_PROMPT,
                               "filter_overlong_prompts": False, "return_raw_chat": True})
    dataset = RLHFDataset(data_files=[paths["data"]], tokenizer=tokenizer, processor=processor, config=config)
    raw = dataset[0]["raw_prompt"]
    images, _ = process_vision_info(raw, image_patch_size=processor.image_processor.patch_size)
    text = processor.apply_chat_template(raw, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=images, return_tensors="pt")
    words = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    facts = {"dataset_items": len(dataset), "processor": type(processor).__name__,
             "image_tokens": words.count("<|image_pad|>"),
             "pixel_rows": int(inputs["pixel_values"].shape[0]), "raw_has_image": any(
                 c.get("type") == "image" for c in raw[0]["content"] if isinstance(c, dict))}
    return inputs, facts


def train_step(paths: dict, family: dict, row: dict) -> dict:
    model = getattr(transformers, family["model_class"]).from_pretrained(paths["model"], dtype=torch.float32)
    inputs, facts = model_inputs(paths, family, row)
    # Qwen3.5 computes its mRoPE positions from the processor's mm_token_type_ids; Qwen2.5-VL's forward takes none.
    if "mm_token_type_ids" not in inspect.signature(model.forward).parameters:
        inputs.pop("mm_token_type_ids", None)
    out = model(**inputs, labels=inputs["input_ids"])
    out.loss.backward()
    grads = {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}
    return {**facts, "loss": out.loss.item(), "params": sum(p.numel() for p in model.parameters()),
            "with_grad": len(grads), "params_total": len(list(model.parameters())),
            "grad_nonzero": sum(1 for g in grads.values() if g > 0 and math.isfinite(g)),
            "vision_grad": max((g for n, g in grads.items() if "visual" in n), default=None),
            "expert_grad": max((g for n, g in grads.items() if "experts" in n), default=None),
            "config": {k: getattr(model.config.get_text_config(), k, None)
                       for k in ("vocab_size", "tie_word_embeddings", "num_hidden_layers", "hidden_size")},
            # A VL config says it at the top level, a text config on itself.
            "tied": bool(getattr(model.config.get_text_config(), "tie_word_embeddings", False)
                         or getattr(model.config, "tie_word_embeddings", False))}


def rollout_tokenizer(paths: dict, family: dict) -> dict:
    """verl's rollout tokenizes through a Continuous Token builder chosen by the config's model_type, made as its
    agent loop makes it (verl/experimental/agent_loop/agent_loop.py): which builder, or why it cannot be made."""
    from verl.utils.tokenizer import continuous_token_wiring
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    tokenizer = transformers.AutoTokenizer.from_pretrained(paths["model"])
    processor = transformers.AutoProcessor.from_pretrained(paths["model"]) if family["inputs"] == "images" else None
    model_type = transformers.AutoConfig.from_pretrained(paths["model"]).model_type
    try:
        builder = create_continuous_token_builder(tokenizer, hf_model_type=model_type, chat_template_kwargs={},
                                                  mm_processor_kwargs={}, processor=processor)
        # verl gives a model-specific builder only to the model types it validated one for (others: the generic one).
        return {"model_type": model_type, "builder": type(builder).__name__, "error": None,
                "verl_maps_type": model_type in continuous_token_wiring._MODEL_TYPE_TO_FAMILY}
    except Exception as e:  # noqa: BLE001 - the failure is the result
        return {"model_type": model_type, "builder": None, "error": f"{type(e).__name__}: {e}", "verl_maps_type": None}


def composed(paths: dict, family: dict) -> dict:
    out = {}
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        for variant, spec in TABLES["specs"].items():
            cfg = compose(config_name=spec["actor"]["config_name"], overrides=t.overrides(paths, spec, family))
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            OmegaConf.resolve(cfg)
            out[variant] = {"model": cfg.actor_rollout_ref.model.path, "experiment": cfg.trainer.experiment_name,
                            "rollout": cfg.actor_rollout_ref.rollout.name}
    return out


def prompt_tokens(paths: dict, rows: list[dict]) -> list[int]:
    """Each row's prompt length in tokens, text only (an image adds the same number of image tokens to every row)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(paths["model"])
    return [len(chat_ids(tokenizer, row)) for row in rows]


def mrope_split(lengths: list[int]) -> dict:
    """verl's own path for a VL batch's mRoPE position ids, (4, L) per sample: packed as a jagged nested tensor (as
    TransferQueue hands them to the workers), relabelled by maybe_fix_3d_position_ids, split into micro-batches by
    chunk_tensordict; whether it succeeds and gives every sample back unchanged."""
    from tensordict import TensorDict
    from verl.utils.tensordict_utils import chunk_tensordict, maybe_fix_3d_position_ids

    samples = [(torch.arange(n) + 1000 * i).expand(4, n).clone() for i, n in enumerate(lengths)]
    try:
        data = TensorDict({"position_ids": torch.nested.as_nested_tensor(samples, layout=torch.jagged)},
                          batch_size=[len(samples)])
        maybe_fix_3d_position_ids(data)
        back = [s for part in chunk_tensordict(data, 2) for s in part["position_ids"].unbind(0)]
        return {"error": None, "intact": len(back) == len(samples) and all(map(torch.equal, back, samples))}
    except Exception as e:  # noqa: BLE001 - the failure is the result
        return {"error": f"{type(e).__name__}: {str(e)[:200]}", "intact": False}


result = {}
for family in TABLES["families"]:
    work = tempfile.mkdtemp(dir=os.path.dirname(OUT))
    paths = t.write_inputs(work, torch, family, rows=16)
    rows = pq.read_table(paths["data"]).to_pylist()
    result[family["name"]] = {"init": paths["init"], "rows": len(rows),
                              "images_in_rows": sum("images" in r for r in rows),
                              "files": sorted(os.listdir(paths["model"])), **train_step(paths, family, rows[0]),
                              "composed": composed(paths, family),
                              "rollout_tokenizer": rollout_tokenizer(paths, family),
                              "prompt_tokens": prompt_tokens(paths, rows)}
# One GPU's batch of the check (its prompts, each with its responses run to the response limit), and the same batch
# with every sequence of one length.
batch = [n + t.MAX_RESPONSE for n in result[TABLES["families"][0]["name"]]["prompt_tokens"][:t.PROMPTS_PER_GPU]
         for _ in range(t.RESPONSES_PER_PROMPT)]
result["mrope_split"] = {"rows": mrope_split(batch), "one_length": mrope_split([batch[0]] * len(batch))}
json.dump(result, open(OUT, "w"))
