"""GPU check of megatron-core: a tiny GPTModel (2 layers, hidden 64, 4 heads, vocab 128, seq 32) in bf16 on one
GPU, built with the Transformer Engine layer spec when megatron can use TE and with the local spec otherwise;
forward + backward, loss finite and near ln(vocab) for an untrained model, every parameter gets a gradient.

Thresholds: none.
Run: python check_megatron_core.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import datetime
import math
import sys

import _common

PACKAGE = "megatron-core"
LAYERS, HIDDEN, HEADS, VOCAB, SEQLEN, BATCH = 2, 64, 4, 128, 32, 2


def check_import():
    import megatron.core

    return {}, f"megatron-core {megatron.core.__version__}"


def layer_spec():
    """The TE spec when megatron can import TE (as training would use), else the local one."""
    from megatron.core.extensions.transformer_engine import HAVE_TE
    from megatron.core.models.gpt import gpt_layer_specs

    if HAVE_TE:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(), "transformer-engine layer spec"
    return gpt_layer_specs.get_gpt_layer_local_spec(), "local layer spec (transformer-engine not importable)"


def check_gpt(torch):
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_common.free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=120))
    try:
        parallel_state.initialize_model_parallel(1, 1)
        model_parallel_cuda_manual_seed(123)
        spec, spec_name = layer_spec()
        config = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                                   use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16,
                                   hidden_dropout=0.0, attention_dropout=0.0)
        gpt = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=SEQLEN)
        model = Float16Module(config, gpt).cuda()
        gen = torch.Generator(device="cuda").manual_seed(0)
        tokens = torch.randint(0, VOCAB, (BATCH, SEQLEN), device="cuda", generator=gen)
        labels = torch.randint(0, VOCAB, (BATCH, SEQLEN), device="cuda", generator=gen)
        positions = torch.arange(SEQLEN, device="cuda").unsqueeze(0).expand(BATCH, -1)
        # attention_mask=None: the layers are causal and build their own mask
        loss = model(tokens, positions, None, labels=labels).float().mean()
        loss.backward()
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        no_grad = [n for n, p in named if p.grad is None or not bool(p.grad.detach().abs().sum() > 0)]
        loss_value = loss.item()
        numbers = {"loss": loss_value, "ln_vocab": math.log(VOCAB), "parameters": sum(p.numel() for _, p in named),
                   "tensors_without_grad": len(no_grad)}
        problems = []
        if not math.isfinite(loss_value):
            problems.append(f"loss is {loss_value}")
        elif abs(loss_value - math.log(VOCAB)) > 0.5:
            problems.append(f"loss {loss_value:.3f} of an untrained model is far from "
                            f"ln({VOCAB}) = {math.log(VOCAB):.3f}")
        if no_grad:
            problems.append(f"{len(no_grad)} parameter tensors got no gradient: {', '.join(no_grad[:5])}")
        return _common.verdict(numbers, problems, f"{spec_name}; {LAYERS} layers, hidden {HIDDEN}, heads {HEADS}")
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def checks(profile, torch):
    return [
        ("megatron-core/import", check_import),
        ("megatron-core/gpt/fwd+bwd/bf16", lambda: check_gpt(torch)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"megatron.core": "megatron-core", "torch": "torch"}, checks))
