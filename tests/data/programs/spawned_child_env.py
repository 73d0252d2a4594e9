"""What a process spawned by an env's interpreter (as vLLM's engine core is) sees of vLLM's switches."""
import json
import multiprocessing as mp
import os


def child(q):
    q.put({n: os.environ.get(n) for n in ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_V2_MODEL_RUNNER")})


if __name__ == "__main__":
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=child, args=(q,))
    p.start()
    print(json.dumps(q.get(timeout=600)))
    p.join()
