"""The trainer check's inputs for one model family: a word-level tokenizer, a tiny random model built from the
family's row (data/families.toml, handed over in --profile) with transformers' own classes, the image processor of
an image family, and GSM8K-shaped training rows (with images for an image family). Nothing is downloaded.

Standard library at import: it runs in the env under test beside _common; torch, transformers, tokenizers, PIL and
pyarrow are imported where they are used.
"""

from __future__ import annotations

import io
import math
import os
import random
import sys

import _routed_experts

SPECIAL = ["<unk>", "<pad>", "<s>", "</s>"]
# Split out of any text before the word-level split (added tokens): the image processor expands <|image_pad|> into
# one copy per image token, written without spaces.
VISION_WORDS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# Also split out before the word-level split: verl's rollout tokenizes through its Continuous Token builder, whose
# Qwen builders (model_type qwen2, qwen3, qwen3_moe, qwen2_5_vl) require "\n" to encode as exactly one token and a
# "<|im_end|>" token (verl/utils/tokenizer/continuous_token.py QwenContinuousTokenBuilder); a whitespace split drops
# "\n", and every rollout of a Qwen family then failed ("Expected Qwen newline to tokenize to one token, got []").
TURN_END, NEWLINE = "<|im_end|>", "\n"
TURN_WORDS = [TURN_END, NEWLINE]
CHAT_WORDS = ["system", "user", "assistant", ":", "+", "=", "?"]
DIGITS = [str(d) for d in range(10)]
VOCAB = 512
# Text content as it is; an image item as the vision words the processor expands (Qwen2-VL's own template does the
# same with its own words).
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : "
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' or 'image' in c %}<|vision_start|><|image_pad|><|vision_end|> "
    "{% elif c['type'] == 'video' or 'video' in c %}<|vision_start|><|video_pad|><|vision_end|> "
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %} {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}")
# The images an image family's rows carry: small, 2 x 2 merged tokens (Qwen2.5-VL: 56 px of 14 px patches merged
# 2 x 2; Qwen3-VL and Qwen3.5: 64 px of 16 px patches).
IMAGE_TOKENS_PER_SIDE = 2
# How many filler words a question has (randrange bounds): 16 lengths, so a mini-batch of 4 prompts all of one length
# is rare (1 in 4096), and the longest prompt stays well inside the check's max_prompt_length.
QUESTION_WORDS = (2, 18)
# Prompts the logit scale is measured on.
CALIBRATION_BATCH, CALIBRATION_LEN = 8, 24


def words() -> list[str]:
    fixed = SPECIAL + VISION_WORDS + CHAT_WORDS + DIGITS + TURN_WORDS
    return fixed + [f"w{i}" for i in range(VOCAB - len(fixed))]


def ids() -> dict[str, int]:
    return {w: i for i, w in enumerate(words())}


def write_tokenizer(directory):
    """A word-level tokenizer with a chat template, saved like a hub tokenizer (no download)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(ids(), unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # decodes to words joined by spaces
    tokenizer.add_special_tokens([AddedToken(w, special=True, normalized=False) for w in VISION_WORDS + [TURN_END]])
    tokenizer.add_tokens([AddedToken(NEWLINE, special=False, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def _set(config, dotted: str, value) -> None:
    target = config
    *parents, last = dotted.split(".")
    for part in parents:
        target = getattr(target, part)
    setattr(target, last, value)


def build_config(family: dict):
    """The family's transformers config: its class (or a shrunk config.json's model_type) and arguments, the text
    config's vocabulary and special ids set to the tokenizer's."""
    import transformers

    args = {k: v for k, v in family["config"].items() if k not in ("model_type", "architectures")}
    if family.get("config_class"):
        config = getattr(transformers, family["config_class"])(**args)
    else:
        config = transformers.AutoConfig.for_model(family["model_type"], **args)
    word_ids = ids()
    text = config.get_text_config()
    text.vocab_size = VOCAB
    for key, word in (("bos_token_id", "<s>"), ("eos_token_id", "</s>"), ("pad_token_id", "<pad>")):
        setattr(text, key, word_ids[word])
        if text is not config and hasattr(config, key):
            setattr(config, key, word_ids[word])
    for key, word in family.get("token_ids", {}).items():
        _set(config, key, word_ids[word])
    return config


def final_norm(model):
    """The norm whose output the head reads: its weight scales every logit alike, tied head or not."""
    decoder = model.get_decoder()
    norm = getattr(decoder, "norm", None)
    if norm is None or getattr(norm, "weight", None) is None:
        raise ValueError(f"{type(model).__name__}: no final norm with a weight at get_decoder().norm; the check "
                         "scales the logits there")
    return norm


def calibration_ids(torch):
    gen = torch.Generator().manual_seed(1)
    first = len(SPECIAL) + len(VISION_WORDS)  # ordinary words only: the vision words need their images
    return torch.randint(first, VOCAB, (CALIBRATION_BATCH, CALIBRATION_LEN), generator=gen)


def logits(model, torch, input_ids=None):
    with torch.no_grad():
        return model(input_ids=calibration_ids(torch) if input_ids is None else input_ids).logits.float()


def build_model(family: dict, torch):
    """The family's model with random weights (seed 0), its token embeddings scaled down (a tied head must not see
    each token's own embedding tower over the rest), its routed experts' outputs scaled to the table's share of the
    logits (an MoE family: _routed_experts.py), and its final norm scaled so the next-token logits have the table's
    standard deviation on random prompts (float32, on CPU)."""
    import transformers

    config = build_config(family)
    torch.manual_seed(0)
    model = getattr(transformers, family["model_class"])(config).float().eval()
    on_torch_paths(model)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(family["embedding_scale"])
    _routed_experts.calibrate(model, family["routed_influence"], torch, logits)
    std = logits(model, torch).std().item()
    if not math.isfinite(std) or std <= 0:
        raise ValueError(f"{family['name']}: the random model's logits have std {std}; cannot scale them")
    scale_norm(final_norm(model), family["logit_std"] / std, torch)
    return model


# A gated-DeltaNet layer (Qwen3.5, Qwen3-Next) takes causal-conv1d's and flash-linear-attention's kernels whenever the
# packages import, on CPU tensors too, where they fail ("Expected x.is_cuda() to be true": GPU visit K, 2026-12-05;
# fla's gated RMSNorm, "Pointer argument (at 0) cannot be accessed from Triton (cpu tensor?)": visit M, 2026-12-06).
# The calibration runs on CPU, so each such layer instance gets the torch functions transformers itself falls back
# to (None: the layer's own nn.Conv1d), and its fla norm the modeling module's own torch one, same weight. The saved
# weights carry none of this (the state dict's keys are the same): the trainer loads the fast paths.
TORCH_PATHS = {"causal_conv1d_fn": None, "causal_conv1d_update": "torch_causal_conv1d_update",
               "chunk_gated_delta_rule": "torch_chunk_gated_delta_rule",
               "recurrent_gated_delta_rule": "torch_recurrent_gated_delta_rule"}


def on_torch_paths(model) -> int:
    """Point every layer that has the kernel attributes above at transformers' torch fallbacks; how many layers."""
    layers = [m for m in model.modules() if hasattr(m, "chunk_gated_delta_rule")]
    for layer in layers:
        modeling = sys.modules[type(layer).__module__]
        for attribute, fallback in TORCH_PATHS.items():
            if hasattr(layer, attribute):
                setattr(layer, attribute, getattr(modeling, fallback) if fallback else None)
        layer.norm = torch_gated_norm(layer.norm, modeling)
    return len(layers)


def torch_gated_norm(norm, modeling):
    """The modeling module's torch gated RMSNorm (Qwen3_5RMSNormGated, Qwen3NextRMSNormGated: the one transformers
    builds without fla) in place of fla's FusedRMSNormGated, on CPU, with its weight and epsilon."""
    names = [n for n in vars(modeling) if n.endswith("RMSNormGated") and not n.startswith("Fused")]
    if len(names) != 1:
        raise ValueError(f"{modeling.__name__}: expected one torch gated RMSNorm class, found {names or 'none'}")
    torch_class = getattr(modeling, names[0])
    if type(norm) is torch_class:
        return norm
    torch_norm = torch_class(norm.weight.shape[-1], eps=norm.eps)
    torch_norm.weight.data.copy_(norm.weight.detach().to("cpu", torch_norm.weight.dtype))
    return torch_norm


def scale_norm(norm, factor: float, torch) -> None:
    """Multiply the norm's gain by factor. Most norms multiply by their weight; zero-centred ones (Qwen3-Next,
    Qwen3.5: `x * (1 + weight)`, weights initialised to 0) by 1 + weight, where scaling the weight does nothing. Which
    one is measured: with the weight zeroed, a multiplying norm outputs zeros."""
    with torch.no_grad():
        weight = norm.weight
        kept = weight.detach().clone()
        weight.zero_()
        probe = torch.randn(2, weight.shape[-1], dtype=weight.dtype)
        offset = bool(norm(probe).abs().max() > 0)
        weight.copy_((1 + kept) * factor - 1 if offset else kept * factor)


def sampling_stats(model, torch) -> dict:
    """Entropy (nats) and top probability of the next token after each calibration prompt: a model whose sampling
    is near-deterministic teaches GRPO nothing (zero advantages, zero gradients)."""
    last = logits(model, torch)[:, -1, :]
    probs = last.softmax(-1)
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
    return {"entropy_mean": entropy.mean().item(), "entropy_min": entropy.min().item(),
            "top_prob_max": probs.max().item(), "logit_std": last.std().item()}


def write_model(directory, torch, family: dict) -> dict:
    """The family's model, bf16, laid out like a hub model (config, safetensors, generation config); returns its
    sampling stats as built."""
    model = build_model(family, torch)
    stats = sampling_stats(model, torch)
    routed = _routed_experts.share(model, torch, logits)
    if routed is not None:
        stats["routed_influence"] = routed
    # Laid out as the model type's published checkpoints are (the table's saved_as_loaded); the argument only where
    # needed, as transformers 4 has no such argument.
    as_loaded = model.config.model_type in family.get("saved_as_loaded", ())
    model.to(torch.bfloat16).save_pretrained(directory, **({"save_original_format": False} if as_loaded else {}))
    return stats


def tokenizer_for(processor_class, tokenizer):
    """The check's tokenizer in a class the processor takes. transformers 4.x processors accept only the tokenizer
    classes they name (Qwen2_5_VLProcessor.tokenizer_class: Qwen2Tokenizer or its fast twin), 5.x any: where the
    processor names classes and the tokenizer is none of them, the same tokenizer (its vocabulary, special tokens and
    chat template) is re-wrapped in the fast class named."""
    import transformers

    wanted = getattr(processor_class, "tokenizer_class", None)
    names = (wanted,) if isinstance(wanted, str) else tuple(name for name in wanted or () if name)
    if not names or type(tokenizer).__name__ in names:
        return tokenizer
    fast = next((name for name in names if name.endswith("Fast")), names[-1])
    wrapped = getattr(transformers, fast)(tokenizer_object=tokenizer.backend_tokenizer,
                                          **tokenizer.special_tokens_map)
    wrapped.chat_template = tokenizer.chat_template
    return wrapped


def _mapped_class(mapping: dict, model_type: str):
    """The class transformers' own auto mapping names for model_type: 5.x maps to {"torchvision": ..., "pil": ...},
    4.x to (slow, fast) or one name."""
    import transformers

    names = mapping.get(model_type)
    if isinstance(names, dict):
        names = names.get("torchvision") or next(iter(names.values()))
    elif isinstance(names, (tuple, list)):
        names = next(name for name in names if name)
    if not names:
        raise ValueError(f"transformers {transformers.__version__} names no processor for model_type {model_type!r}")
    return getattr(transformers, names)


def vision_factor(config) -> int:
    """Pixels per merged image token along one side: the vision tower's patch times its spatial merge."""
    vision = config.vision_config
    return vision.patch_size * vision.spatial_merge_size


def write_processor(directory, tokenizer, config):
    """An image family's processor, the classes transformers' auto mappings name for the model's type (so the next
    VL family needs no code), sized from its vision config (patch, merge) and given the check's tokenizer; saved
    beside the model as a hub model has it, so verl's dataset and the rollout engine both load it from there."""
    from transformers import AutoProcessor
    from transformers.models.auto import image_processing_auto, processing_auto, video_processing_auto

    model_type, vision = config.model_type, config.vision_config
    factor = vision_factor(config)
    # Images of factor^2 to (4 factor)^2 pixels: a few merged tokens each.
    size = {"shortest_edge": factor * factor, "longest_edge": (4 * factor) ** 2}
    geometry = {"patch_size": vision.patch_size, "merge_size": vision.spatial_merge_size,
                "temporal_patch_size": vision.temporal_patch_size}
    processor_class = _mapped_class(processing_auto.PROCESSOR_MAPPING_NAMES, model_type)
    image = _mapped_class(image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES, model_type)(size=size, **geometry)
    video = _mapped_class(video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES, model_type)(size=size, **geometry)
    processor = processor_class(image_processor=image, video_processor=video,
                                tokenizer=tokenizer_for(processor_class, tokenizer), chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(directory)
    return AutoProcessor.from_pretrained(directory)


def image_bytes(rng: random.Random, px: int) -> bytes:
    """A seeded PNG of coloured blocks, px wide: different images give different vision tokens."""
    from PIL import Image

    image = Image.new("RGB", (px, px))
    block = px // 4
    for x in range(0, px, block):
        for y in range(0, px, block):
            image.paste(tuple(rng.randrange(256) for _ in range(3)), (x, y, x + block, y + block))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def dataset_rows(count: int, seed: int = 0, inputs: str = "text", image_px: int = 0) -> list[dict]:
    """GSM8K-shaped rows, as verl's gsm8k preprocessing writes them (chat prompt, data_source, reward_model,
    extra_info); for an image family each prompt starts with verl's `<image>` placeholder and the row carries the
    image in verl's `images` column. Questions vary in length, as a user's do: a batch of one length takes other
    paths (no prompt padding), and verl 0.9.1 cannot split an equal-length batch of mRoPE position ids (verl#7899),
    a failure of verl's that real data rarely meets and that the doctor names (F52)."""
    if inputs == "images" and image_px <= 0:
        raise ValueError("image rows need the image's size in pixels (image_px)")
    rng = random.Random(seed)
    filler = [w for w in words() if w.startswith("w")]
    rows = []
    for index in range(count):
        a, b = rng.randrange(5), rng.randrange(5)
        question = " ".join(rng.sample(filler, rng.randrange(*QUESTION_WORDS)) + [str(a), "+", str(b), "=", "?"])
        row = {"data_source": "openai/gsm8k",
               "prompt": [{"role": "user", "content": ("<image> " if inputs == "images" else "") + question}],
               "ability": "math",
               "reward_model": {"style": "rule", "ground_truth": str(a + b)},
               "extra_info": {"split": "train", "index": index, "answer": str(a + b), "question": question}}
        if inputs == "images":
            row["images"] = [{"bytes": image_bytes(rng, image_px)}]
        rows.append(row)
    return rows


def write_dataset(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_family(directory, torch, family: dict, rows: int) -> dict:
    """Model (tokenizer and, for images, processor beside it) and training parquet of one family under directory;
    returns their paths and the model's sampling stats."""
    paths = {"model": os.path.join(directory, "model"), "data": os.path.join(directory, "train.parquet")}
    tokenizer = write_tokenizer(paths["model"])
    image_px = 0
    if family["inputs"] == "images":
        config = build_config(family)
        write_processor(paths["model"], tokenizer, config)
        image_px = IMAGE_TOKENS_PER_SIDE * vision_factor(config)
    paths["stats"] = write_model(paths["model"], torch, family)
    write_dataset(paths["data"], dataset_rows(rows, inputs=family["inputs"], image_px=image_px))
    return paths
