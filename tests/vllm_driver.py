"""Run a kvplan scenario through real vLLM (0.32, CPU build); write its per-step trace.

Standalone script for the vLLM venv (not a pytest module; nothing in kvplan imports it):

    /work/vllm-venv/bin/python tests/vllm_driver.py SCENARIO.json TRACE.jsonl \
        [--engine stub|real] [--log STARTUP.log] [--timing]

Both engines run vLLM's own LLMEngine -> EngineCore -> Scheduler in this process;
``--engine stub`` replaces only the executor (no model, any block size), ``--engine real``
runs the model on the CPU backend (block size a multiple of 32): a tiny random Llama
written from the scenario's "model" sizes, or, when the scenario gives "model_config" (an HF
config.json as a dict) instead, that model with vLLM's dummy (random) weights, so no weight
file is written. Each engine step that scheduled something becomes one JSON line of TRACE;
with --timing the line also holds the step's wall-clock seconds around LLMEngine.step()
("step_s"), the process's CPU seconds in it ("cpu_s": all threads; cpu_s / step_s near 1
shows one thread ran) and the end of the step from the requests' arrival ("t_s"). stdout
gets a one-line summary. Any failure exits 1 with one line on stderr.

One thread: OMP_NUM_THREADS=1 before torch is imported and torch.set_num_threads(1) before
the engine is built. vLLM's CPU thread binding (VLLM_CPU_OMP_THREADS_BIND,
VLLM_CPU_NUM_OF_RESERVED_CPU) belongs to its multiprocess executor only; this driver runs
the in-process "uni" executor, which leaves the process's thread settings as they are.
"""

from __future__ import annotations

import os

# Set before vLLM is imported (it caches env vars). The engine core must run in this
# process, on this thread, so that its Scheduler instance can be wrapped.
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network: the model is written locally
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: summary only

import argparse
import gc
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

T_START = time.perf_counter()  # wall times include importing torch and vLLM

import torch
import vllm
import vllm.logger as vllm_logger
from transformers import LlamaConfig, LlamaForCausalLM
from vllm import SamplingParams
from vllm.config.logging import LoggingConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.logging_utils import NewLineFormatter
from vllm.v1.engine.llm_engine import LLMEngine
from vllm_scenario import (  # the scenario file's format, read without vLLM
    MEMORY_KEY,
    SPACE_KEY,
    DriverError,
    ext_id,
    load_scenario,
    model_dtype,
    model_seed,
    need,
)
from vllm_stub_executor import StubExecutor

DTYPE = "bfloat16"  # vLLM's CPU platform lists bf16 first, so dtype "auto" picks it
HF_NAMES = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "head_dim": "head_dim"}
HF_NAMES |= {"num_hidden_layers": "num_layers", "num_attention_heads": "num_heads"}
HF_NAMES |= {"num_key_value_heads": "num_kv_heads"}
# scenario keys passed to EngineArgs unchanged
ENGINE_KEYS = ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len")


def write_tiny_model(m: dict[str, int], max_model_len: int, folder: str) -> None:
    """Llama config.json plus random weights. The stub reads only the config, but gets the
    same folder so that vLLM derives the same VllmConfig for both engines."""
    sizes: dict[str, Any] = {hf: m[k] for hf, k in HF_NAMES.items()}
    cfg = LlamaConfig(**sizes, intermediate_size=2 * m["hidden_size"], tie_word_embeddings=False)
    cfg.max_position_embeddings = max(max_model_len, 2048)
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(m["seed"])
    net = LlamaForCausalLM(cfg).to(getattr(torch, DTYPE))  # stored as the CPU prefers
    net.config.dtype = DTYPE
    net.save_pretrained(folder)


def write_config_only(cfg: dict[str, Any], folder: str) -> None:
    """The given HF config as the folder's config.json and nothing else: --engine real loads
    it with load_format="dummy" (vLLM's random weights), the stub reads only the config."""
    Path(folder, "config.json").write_text(json.dumps(cfg))


class StepRecorder:
    """Wraps a Scheduler instance's methods; one trace line per schedule()..update()."""

    def __init__(self, scheduler: Any, out: Any) -> None:
        self.s, self.out, self.kvm = scheduler, out, scheduler.kv_cache_manager
        self.pool = self.kvm.block_pool
        self.step = self.empty_steps = 0
        self.seen: set[str] = set()  # scheduled at least once
        self.preempted_since: set[str] = set()  # preempted, not yet scheduled again
        self.totals: Counter[str] = Counter()
        self.line: dict[str, Any] | None = None  # the current step's, until write()
        self.begin_step(None)
        s, kvm, pool = self.s, self.kvm, self.pool
        self.orig = (s.schedule, s._preempt_request, s.update_from_output)
        self.orig_record = kvm.record_prefix_cache_stats
        self.orig_evict = pool._maybe_evict_cached_block
        s.schedule, s._preempt_request = self.schedule, self.preempt
        s.update_from_output = self.update_from_output
        kvm.record_prefix_cache_stats = self.record_prefix_cache_stats
        pool._maybe_evict_cached_block = self.maybe_evict_cached_block

    def begin_step(self, sched_out: Any) -> None:
        self.sched_out = sched_out
        self.preempted: list[int] = []
        self.prefix: list[list[int]] = []
        self.evicted = 0

    def schedule(self, *a: Any, **kw: Any) -> Any:
        self.begin_step(None)  # preemptions, lookups and evictions all happen in here
        self.sched_out = self.orig[0](*a, **kw)
        return self.sched_out

    def preempt(self, request: Any, *a: Any, **kw: Any) -> Any:
        self.preempted.append(ext_id(request.request_id))
        self.preempted_since.add(request.request_id)
        return self.orig[1](request, *a, **kw)

    def record_prefix_cache_stats(self, request: Any, num_hits: int) -> Any:
        # Count only what vLLM counts: no query when the lookup was skipped.
        if self.kvm.prefix_cache_lookup_enabled(request):
            self.prefix.append([ext_id(request.request_id), request.num_tokens, num_hits])
            kind = "readmit" if request.num_preemptions > 0 else "fresh"
            self.totals.update({f"n_{kind}": 1, f"q_{kind}": request.num_tokens})
            self.totals[f"hit_{kind}"] += num_hits
        return self.orig_record(request, num_hits)

    def maybe_evict_cached_block(self, block: Any) -> bool:
        evicted = self.orig_evict(block)
        self.evicted += bool(evicted)
        return evicted

    def update_from_output(self, scheduler_output: Any, model_output: Any) -> Any:
        before = set(self.s.finished_req_ids)
        result = self.orig[2](scheduler_output, model_output)
        self.emit(scheduler_output, set(self.s.finished_req_ids) - before)
        return result

    def emit(self, so: Any, finished: set[str]) -> None:
        need(so is self.sched_out, "update_from_output for a step that was not scheduled")
        self.totals.update(preemptions=len(self.preempted), evicted=self.evicted)
        if not so.num_scheduled_tokens:  # not written; counted in the summary
            self.empty_steps += 1
            return
        scheduled = []
        for rid, n in so.num_scheduled_tokens.items():  # insertion order = scheduling order
            kind = "new" if rid not in self.seen else "running"
            if rid in self.preempted_since:
                kind = "resumed"
            self.seen.add(rid)
            self.preempted_since.discard(rid)
            scheduled.append([ext_id(rid), n, kind])
        self.step += 1
        self.line = {
            "step": self.step,
            "scheduled": scheduled,
            "preempted": self.preempted,
            "finished": sorted(ext_id(r) for r in finished),
            "prefix": self.prefix,
            "cached_blocks_evicted": self.evicted,
            # ref count > 0: pool minus the null block minus free (incl. cached, ref 0)
            "blocks_in_use": self.pool.num_gpu_blocks - 1 - self.pool.get_num_free_blocks(),
            "running": len(self.s.running),
            "waiting": self.s.get_request_counts()[1],
        }

    def write(self, timing: dict[str, float] | None) -> None:
        """The line of the engine step that just ended, if it scheduled anything: written
        after LLMEngine.step() returns, so that its timing covers the whole step."""
        if self.line is None:
            return
        line, self.line = self.line, None
        if timing is not None:
            line |= {k: round(v, 6) for k, v in timing.items()}
        self.out.write(json.dumps(line) + "\n")


def build_engine(scen: dict[str, Any], engine: str, model_dir: str, log_cfg: Any) -> Any:
    # vLLM says "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"; say it sooner.
    bs = scen["block_size"]
    need(engine == "stub" or bs % 32 == 0, f"--engine real needs block_size % 32 == 0, got {bs}")
    space = scen.get(SPACE_KEY)
    need(
        space is None or engine == "real",
        f"{SPACE_KEY} needs --engine real (the stub has no memory)",
    )
    kw = {k: scen[k] for k in ENGINE_KEYS} | {"seed": model_seed(scen)}
    kw |= {"num_gpu_blocks_override": scen["num_gpu_blocks"], "dtype": model_dtype(scen)}
    if "model_config" in scen:  # random weights made in memory: the folder holds no weights
        kw["load_format"] = "dummy"
    if MEMORY_KEY in scen:
        kw[MEMORY_KEY] = scen[MEMORY_KEY]
    kw |= {"enable_prefix_caching": scen["enable_prefix_caching"], "enforce_eager": True}
    kw |= {"skip_tokenizer_init": True, "async_scheduling": False, "logging_config": log_cfg}
    kw["distributed_executor_backend"] = "uni" if engine == "real" else StubExecutor
    args = EngineArgs(model=model_dir, **kw)
    before = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if space is not None:  # read by vLLM's CPU platform as the engine's config is made
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(space)
    try:
        llm = LLMEngine.from_engine_args(args)
    finally:  # the next run of a batch gets the environment it was started with
        if space is not None and before is None:
            del os.environ["VLLM_CPU_KVCACHE_SPACE"]
        elif space is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = before
    # A silent override would make the trace describe another scheduler than asked for.
    cc, sc = llm.vllm_config.cache_config, llm.vllm_config.scheduler_config
    got = {"block_size": cc.block_size, "num_gpu_blocks": cc.num_gpu_blocks}
    got |= {"max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens}
    got |= {"enable_prefix_caching": bool(cc.enable_prefix_caching)}
    got |= {"max_model_len": llm.vllm_config.model_config.max_model_len}
    for k, v in got.items():
        if k == "num_gpu_blocks" and space is not None:
            continue  # sized by vLLM from the KV memory
        need(v == scen[k], f"vLLM changed {k}: scenario {scen[k]!r}, engine {v!r}")
    need(not sc.async_scheduling, "async scheduling is on; outputs would lag a step")
    return llm


def thread_cpu_ticks() -> dict[str, int]:
    """Each OS thread's CPU time so far (utime + stime, clock ticks), by thread id: which
    threads worked during the run, the one-thread check beside torch's own setting."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def start_log(log_path: str | None) -> tuple[Any, logging.Handler | None]:
    """Configure vLLM's logging with the engine's config (the engine re-runs dictConfig,
    dropping our handler, only if its config differs), then tee it to log_path."""
    log_cfg = LoggingConfig(log_level="INFO")
    vllm_logger.configure_logging_if_needed(log_cfg)
    if not log_path:
        return log_cfg, None
    handler = logging.FileHandler(log_path, mode="w")
    handler.setLevel(logging.INFO)
    handler.setFormatter(NewLineFormatter(vllm_logger._FORMAT, datefmt=vllm_logger._DATE_FORMAT))
    logging.getLogger("vllm").addHandler(handler)
    return log_cfg, handler


def run(
    scen: dict[str, Any], engine: str, trace_path: str, log_path: str | None, timing: bool
) -> str:
    torch.set_num_threads(1)  # before vLLM's CPU worker disables set_num_threads
    log_cfg, handler = start_log(log_path)
    with tempfile.TemporaryDirectory(prefix="kvplan-driver-model-") as model_dir:
        if "model_config" in scen:
            write_config_only(scen["model_config"], model_dir)
        else:
            write_tiny_model(scen["model"], scen["max_model_len"], model_dir)
        try:
            llm = build_engine(scen, engine, model_dir, log_cfg)
        finally:
            if handler is not None:  # the log file holds the start-up lines only
                logging.getLogger("vllm").removeHandler(handler)
                handler.close()
        t_ready = time.perf_counter()
        produced: dict[int, int] = {}
        with open(trace_path, "w") as out:
            rec = StepRecorder(llm.engine_core.engine_core.scheduler, out)
            for r in scen["requests"]:  # all arrive at t = 0, in list order
                params = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True, temperature=0)
                llm.add_request(str(r["id"]), {"prompt_token_ids": r["prompt_token_ids"]}, params)
            # t = 0 once every request is in, as kvplan's clock starts at their arrival
            t0, c0, ticks0 = time.perf_counter(), time.process_time(), thread_cpu_ticks()
            while llm.has_unfinished_requests():
                w, c = time.perf_counter(), time.process_time()
                outputs = llm.step()
                now, cpu = time.perf_counter(), time.process_time()
                step = {"step_s": now - w, "cpu_s": cpu - c, "t_s": now - t0}
                rec.write(step if timing else None)
                for o in outputs:
                    produced[ext_id(o.request_id)] = len(o.outputs[0].token_ids)
            run_s, run_cpu_s = time.perf_counter() - t0, time.process_time() - c0
            ticks = thread_cpu_ticks()
    # OS threads (idle ones included) and how many of them used CPU while the steps ran
    worked = sorted((t - ticks0.get(tid, 0) for tid, t in ticks.items()), reverse=True)
    busiest = worked[0] / sum(worked) if sum(worked) else float("nan")  # nan: under a tick
    for r in scen["requests"]:  # ignore_eos: each must stop at exactly max_tokens
        got = produced.get(r["id"])
        need(got == r["max_tokens"], f"request {r['id']}: {got} tokens, not {r['max_tokens']}")
    t = rec.totals
    return (
        f"engine={engine} steps={rec.step} empty_steps={rec.empty_steps} "
        f"preemptions={t['preemptions']} cached_blocks_evicted={t['evicted']} "
        f"prefix_fresh={t['n_fresh']}q/{t['q_fresh']}tok/{t['hit_fresh']}hit "
        f"prefix_readmit={t['n_readmit']}q/{t['q_readmit']}tok/{t['hit_readmit']}hit "
        f"startup_s={t_ready - T_START:.1f} wall_s={time.perf_counter() - T_START:.1f} "
        f"run_s={run_s:.3f} cpu_per_wall={run_cpu_s / max(run_s, 1e-9):.3f} "
        f"torch_threads={torch.get_num_threads()} os_threads={len(ticks)} "
        f"working_threads={sum(1 for w in worked if w > 0)} busiest_thread_share={busiest:.3f} "
        f"vllm={vllm.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("scenario", nargs="?")
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--engine", choices=("stub", "real"), default="stub")
    ap.add_argument("--log", help="write vLLM's start-up log lines to this file")
    ap.add_argument("--timing", action="store_true", help="add step_s, cpu_s, t_s to each line")
    # one process for many runs: vLLM's import is most of a small run's time
    ap.add_argument(
        "--batch", help='a JSON list of {"scenario", "trace", "engine", "log", "timing"}'
    )
    args = ap.parse_args(argv)
    runs = (
        json.loads(Path(args.batch).read_text())
        if args.batch
        else [{"scenario": args.scenario, "trace": args.trace, "engine": args.engine,
               "log": args.log, "timing": args.timing}]
    )  # fmt: skip
    try:
        for job in runs:
            need(bool(job.get("scenario") and job.get("trace")), "give SCENARIO and TRACE")
            scen = load_scenario(job["scenario"])
            engine, timing = job.get("engine", "stub"), bool(job.get("timing"))
            print(run(scen, engine, job["trace"], job.get("log"), timing), flush=True)
            gc.collect()  # the finished engine's pool before the next one is built
    except DriverError as e:
        print(f"vllm_driver: error: {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # vLLM refusing the scenario: its message, on one line
        msg = " ".join(str(e).split())
        print(f"vllm_driver: vLLM failed: {type(e).__name__}: {msg}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
