"""GPU checks of verl: its trainer imports (core_algos, main_ppo), and its GAE and GRPO advantage estimators on
GPU tensors against the same math written out here in plain Python.

Thresholds: fp32_max_rel_err.
Run: python check_verl.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import math
import statistics
import sys
from collections import defaultdict

import _common

PACKAGE = "verl"


def gae_advantages(rewards, values, mask, gamma, lam):
    """GAE of each row, run backwards; a masked-out token neither updates the next value nor the running GAE."""
    advantages = []
    for r, v, m in zip(rewards, values, mask):
        next_value, last_gae, row = 0.0, 0.0, [0.0] * len(r)
        for t in reversed(range(len(r))):
            gae = r[t] + gamma * next_value - v[t] + gamma * lam * last_gae
            next_value = v[t] * m[t] + (1 - m[t]) * next_value
            last_gae = gae * m[t] + (1 - m[t]) * last_gae
            row[t] = last_gae
        advantages.append(row)
    return advantages


def masked_whiten(values, mask):
    """(x - mean) / sqrt(var + 1e-8) with mean and unbiased variance over the masked elements (as verl does)."""
    pairs = [(x, m) for xs, ms in zip(values, mask) for x, m in zip(xs, ms)]
    count = math.fsum(m for _, m in pairs)
    mean = math.fsum(x * m for x, m in pairs) / (count + 1e-8)
    var = math.fsum((x - mean) ** 2 * m for x, m in pairs) / (count + 1e-8) * count / (count - 1)
    scale = 1 / math.sqrt(var + 1e-8)
    return [[(x - mean) * scale for x in xs] for xs in values]


def gae_reference(rewards, values, mask, gamma, lam):
    """verl.trainer.ppo.core_algos.compute_gae_advantage_return: (whitened advantages, returns)."""
    advantages = gae_advantages(rewards, values, mask, gamma, lam)
    returns = [[a + v for a, v in zip(ar, vr)] for ar, vr in zip(advantages, values)]
    return masked_whiten(advantages, mask), returns


def grpo_reference(rewards, mask, index, epsilon=1e-6):
    """verl's compute_grpo_outcome_advantage: each response's summed reward, normalised by its group's mean and
    sample std (a group of one keeps its score), spread over the response's tokens."""
    scores = [math.fsum(row) for row in rewards]
    groups = defaultdict(list)
    for score, uid in zip(scores, index):
        groups[uid].append(score)
    advantages = []
    for score, uid, m in zip(scores, index, mask):
        group = groups[uid]
        mean, std = (statistics.fmean(group), statistics.stdev(group)) if len(group) > 1 else (0.0, 1.0)
        advantages.append([(score - mean) / (std + epsilon) * mi for mi in m])
    return advantages, advantages


def check_import():
    import verl
    import verl.trainer.main_ppo  # noqa: F401
    import verl.trainer.ppo.core_algos  # noqa: F401

    return {}, f"verl {verl.__version__}: verl.trainer.main_ppo and verl.trainer.ppo.core_algos import"


def response_batch(torch, device, seed, batch=8, length=64):
    """Rewards, values and a response mask whose rows end at random lengths (zeros after, as in a real batch)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    lengths = torch.randint(2, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    rewards = torch.randn(batch, length, generator=gen) * mask
    values = torch.randn(batch, length, generator=gen) * mask
    return rewards.to(device), values.to(device), mask.to(device)


def check_gae(torch, profile, device="cuda", gamma=0.99, lam=0.95):
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    rewards, values, mask = response_batch(torch, device, seed=1)
    advantages, returns = compute_gae_advantage_return(token_level_rewards=rewards, values=values,
                                                       response_mask=mask, gamma=gamma, lam=lam)
    want_adv, want_ret = gae_reference(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam)
    return judge(profile, {"advantages": (advantages, want_adv), "returns": (returns, want_ret)},
                 f"batch {tuple(rewards.shape)} on {advantages.device}, gamma {gamma}, lambda {lam}")


def check_grpo(torch, profile, device="cuda"):
    import numpy as np
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    _, _, mask = response_batch(torch, device, seed=2, batch=9)
    gen = torch.Generator(device="cpu").manual_seed(3)
    # Outcome reward: one score on each response's last token.
    last = mask.sum(-1).long().cpu() - 1
    rewards = torch.zeros(mask.shape)
    rewards[torch.arange(mask.shape[0]), last] = torch.randint(0, 2, (mask.shape[0],), generator=gen).float()
    rewards += 0.1 * torch.rand(mask.shape[0], 1, generator=gen) * torch.nn.functional.one_hot(last, mask.shape[1])
    rewards = rewards.to(device)
    index = np.array(["a"] * 4 + ["b"] * 4 + ["c"], dtype=object)  # two groups of 4 and a group of one
    advantages, returns = compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask,
                                                         index=index)
    want_adv, want_ret = grpo_reference(rewards.tolist(), mask.tolist(), list(index))
    return judge(profile, {"advantages": (advantages, want_adv), "returns": (returns, want_ret)},
                 f"batch {tuple(rewards.shape)} on {advantages.device}, groups of 4, 4 and 1")


def judge(profile, outputs, note):
    numbers, problems = {}, []
    limit = profile.max_rel_err("fp32")
    for name, (got, want) in outputs.items():
        rel = _common.relative_error_values(got.tolist(), want)
        numbers[f"{name}_rel_err"] = rel
        if not _common.within(rel, limit):
            problems.append(f"{name} relative error {rel:.3g} above {limit:.3g}")
    return _common.verdict(numbers, problems, note)


def checks(profile, torch):
    return [
        ("verl/import", check_import),
        ("verl/gae", lambda: check_gae(torch, profile)),
        ("verl/grpo", lambda: check_grpo(torch, profile)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"verl": "verl", "torch": "torch"}, checks))
