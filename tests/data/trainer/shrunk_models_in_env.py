"""Run by tests/catalog/test_shrink_published.py inside the default env (torch, transformers): every shrunk
--model-config row it is given built as the trainer check builds it (kernels/_models.py build_model: the config through
AutoConfig.for_model, the model class by name, float32 on CPU), one forward and backward pass (an image family's
with an image), and what the architecture's distinctive parts did: which module classes the model holds, which
parameters got a gradient, how diverse its sampling is after the check's logit scaling, and whether its sliding
window changes the output of a sequence as short as the check's
shortest prompt.

python shrunk_models_in_env.py KERNELS ROWS.json OUT.json
"""

import copy
import json
import sys
import tempfile

KERNELS, ROWS, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, KERNELS)  # as when the check runs: its folder first
import _models  # noqa: E402
import check_verl_trainer  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(2)
GRID = (1, 4, 4)  # one image of 4 x 4 patches: 4 image tokens after the 2 x 2 merge


def shortest_prompt() -> int:
    """Tokens of the shortest prompt among the rows the trainer check trains on (its own tokenizer and rows)."""
    with tempfile.TemporaryDirectory() as directory:
        tokenizer = _models.write_tokenizer(directory)
        lengths = []
        for row in _models.dataset_rows(check_verl_trainer.ROWS):
            ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
            lengths.append(len(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return min(lengths)


def words(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    first = len(_models.SPECIAL) + len(_models.VISION_WORDS)
    return torch.randint(first, _models.VOCAB, (n,), generator=gen)


def inputs(config, images: bool) -> dict:
    """Two sequences of 24 tokens; with images, each holds one image's tokens between the vision words."""
    ids = _models.ids()
    rows = []
    for seed in range(2):
        if images:
            merge = config.vision_config.spatial_merge_size
            tokens = GRID[0] * GRID[1] * GRID[2] // merge ** 2
            vision = [ids["<|vision_start|>"]] + [ids["<|image_pad|>"]] * tokens + [ids["<|vision_end|>"]]
            rows.append(torch.cat([words(4, seed), torch.tensor(vision), words(18 - tokens, seed + 10)]))
        else:
            rows.append(words(24, seed))
    batch = {"input_ids": torch.stack(rows)}
    if images:
        v = config.vision_config
        patch = v.in_channels * v.temporal_patch_size * v.patch_size ** 2
        gen = torch.Generator().manual_seed(3)
        batch["pixel_values"] = torch.randn(2 * GRID[0] * GRID[1] * GRID[2], patch, generator=gen)
        batch["image_grid_thw"] = torch.tensor([GRID, GRID])
        # transformers 5.9's M-RoPE reads where the images are from these (its processor returns them): 1 = image.
        batch["mm_token_type_ids"] = (batch["input_ids"] == ids["<|image_pad|>"]).long()
    return batch


def window_matters(row: dict, model, length: int) -> bool | None:
    """Whether the shrunk sliding window changes the logits of a sequence of `length` tokens (None: no window)."""
    text = model.config.get_text_config()
    if not getattr(text, "sliding_window", None):
        return None
    wide = copy.deepcopy(row)
    target = wide["config"].get("text_config", wide["config"])
    target["sliding_window"] = 4096  # wider than any sequence here: the same model without a window in effect
    other = getattr(transformers, row["model_class"])(_models.build_config(wide)).float().eval()
    other.load_state_dict(model.state_dict())
    ids = words(length, 7)[None]
    with torch.no_grad():
        return not torch.allclose(model(input_ids=ids).logits, other(input_ids=ids).logits, atol=1e-6)


def train_step(row: dict, length: int) -> dict:
    model = _models.build_model(row, torch)
    logit_std = _models.logits(model, torch).std().item()
    sampling = _models.sampling_stats(model, torch)
    window = window_matters(row, model, length)
    model.train()
    batch = inputs(model.config, row["inputs"] == "images")
    out = model(**batch, labels=batch["input_ids"])
    out.loss.backward()
    grads = {name: bool(p.grad is not None and p.grad.abs().sum().item() > 0) for name, p in model.named_parameters()}
    text = model.config.get_text_config()
    return {"loss": out.loss.item(), "params": sum(p.numel() for p in model.parameters()), "grads": grads,
            "modules": sorted({type(m).__name__ for m in model.modules()}), "logit_std": logit_std,
            "sampling": sampling,
            "window_matters": window, "text_config": json.loads(text.to_json_string()),
            "attn_implementation": text._attn_implementation}


def main() -> None:
    rows = json.load(open(ROWS))
    length = shortest_prompt()
    out = {"shortest_prompt": length, "transformers": transformers.__version__, "models": {}}
    for row in rows:
        try:
            out["models"][row["name"]] = train_step(row, length)
        except Exception as e:  # one model's failure is its test's, with its words
            out["models"][row["name"]] = {"error": f"{type(e).__name__}: {e}"}
    json.dump(out, open(OUT, "w"))


if __name__ == "__main__":
    main()
