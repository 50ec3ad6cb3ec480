"""--engine stub's executor for tests/vllm_driver.py: vLLM's EngineCore driven without a
worker or a model, sampling as the runner would. Imported by the driver after it has set
vLLM's environment."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from vllm.v1.attention.backends.utils import record_kv_cache_layout
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm_scenario import ext_id, need

LAYER_NAME = "model.layers.{}.self_attn.attn"  # the names vLLM's Llama registers


def done(value: Any, non_block: bool) -> Any:
    if not non_block:
        return value
    fut: Future = Future()
    fut.set_result(value)
    return fut


class StubExecutor(Executor):
    """--engine stub: EngineCore's executor without a worker or model. Like the runner, it
    samples one token per scheduled request whose input is complete after the step
    (computed + scheduled >= its tokens) and none for a partial prefill chunk."""

    def _init_executor(self) -> None:
        # Token count per request (prompt + outputs), kept like the runner's cached
        # request state: it survives preemption and goes when the request finishes.
        self.num_tokens: dict[str, int] = {}
        self.pending: ModelRunnerOutput | None = None
        self.vocab = self.model_config.get_vocab_size()

    def get_kv_cache_specs(self) -> list[dict[str, Any]]:
        mc = self.model_config
        spec = FullAttentionSpec(
            block_size=self.cache_config.block_size,
            num_kv_heads=mc.get_total_num_kv_heads(),
            head_size=mc.get_head_size(),
            dtype=mc.dtype,
        )
        n = mc.get_num_layers(self.parallel_config)
        return [{LAYER_NAME.format(i): spec for i in range(n)}]

    def determine_available_memory(self) -> list[int]:
        return [64 << 30]  # ample; num_gpu_blocks_override sets the pool size

    def get_supported_kv_cache_layouts(self) -> list[list[str]]:
        return [["LBHNC"]]  # what the CPU_ATTN backend reports

    def set_kv_cache_layout(self, layout_name: str) -> None:
        record_kv_cache_layout(self.cache_config, layout_name)  # as the worker does

    def collective_rpc(self, method: str | Callable, *_: Any, **kw: Any) -> Any:
        # The other worker RPCs a text-generation LLMEngine makes; any RPC not
        # modelled here fails loudly rather than let the stub drift from vLLM.
        name = method if isinstance(method, str) else getattr(method, "__name__", "?")
        results = {"get_supported_tasks": ("generate",), "initialize_from_config": None}
        results |= {"reset_mm_cache": None, "reset_encoder_cache": None, "shutdown": None}
        need(name in results, f"stub executor: unsupported RPC {name!r}")
        return done([results[name]], kw.get("non_block", False))

    def compile_or_warm_up_model(self) -> None:
        return None  # nothing to compile; compilation_time stays 0

    def check_health(self) -> None:
        return None

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        """As the runner with async scheduling off: EMPTY_MODEL_RUNNER_OUTPUT for an
        empty step, else None; EngineCore.step() then calls sample_tokens()."""
        so = scheduler_output
        for rid in so.finished_req_ids:
            self.num_tokens.pop(rid, None)
        computed: dict[str, int] = {}
        for nr in so.scheduled_new_reqs:
            toks = nr.prefill_token_ids or nr.prompt_token_ids  # V2 runner: all tokens
            self.num_tokens[nr.req_id] = max(len(toks), self.num_tokens.get(nr.req_id, 0))
            computed[nr.req_id] = nr.num_computed_tokens
        cached = so.scheduled_cached_reqs  # running and resumed requests
        computed.update(zip(cached.req_ids, cached.num_computed_tokens))
        if so.total_num_scheduled_tokens == 0:
            return done(EMPTY_MODEL_RUNNER_OUTPUT, non_block)
        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            n = self.num_tokens[rid]
            if computed[rid] + so.num_scheduled_tokens[rid] >= n:
                sampled.append([1 + (ext_id(rid) * 7919 + n) % (self.vocab - 1)])
                self.num_tokens[rid] = n + 1
            else:  # a partial prefill chunk: the runner discards its sample
                sampled.append([])
        index = {rid: i for i, rid in enumerate(req_ids)}
        self.pending = ModelRunnerOutput(req_ids, index, sampled_token_ids=sampled)
        return done(None, non_block)

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
        out, self.pending = self.pending, None
        need(out is not None, "stub executor: sample_tokens without execute_model")
        return done(out, non_block)
