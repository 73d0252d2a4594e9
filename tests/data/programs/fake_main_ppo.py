"""A stand-in for verl's main_ppo (test double): what verl prints at start-up and after each step, then it exits."""
print("ray init kwargs: {}", flush=True)
for step in (1, 2):
    print(f"(TaskRunnerV1 pid=1) step:{step} - actor/pg_loss:0.1 - actor/grad_norm:0.5 - timing_s/gen:0.05 "
          f"- training/rollout_actor_probs_pearson_corr:0.9999 - training/rollout_probs_diff_mean:0.001 "
          f"- timing_s/step:0.1", flush=True)
