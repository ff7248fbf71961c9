"""Configuration values of the reference engine: model shape, engine policy, faults, sampling.

All are frozen dataclasses validated on construction; a bad value raises ``EngineConfigError``
naming the field. Nothing here imports torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fleetwatch.engine_probe.engine.errors import EngineConfigError

__all__ = [
    "DTYPES",
    "EngineConfig",
    "FaultConfig",
    "ModelConfig",
    "SamplingParams",
]

DTYPES = ("float32", "bfloat16", "float64")
"""Supported weight/KV dtypes. float64 exists for numerical cross-checks, not for speed."""


def _positive(where: str, **values: float) -> None:
    for name, value in values.items():
        if value <= 0:
            raise EngineConfigError(f"{where}.{name} must be > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape of the decoder-only transformer (RMSNorm, RoPE, grouped-query attention, SwiGLU).

    The default is small enough that a batch-32 decode step takes a few milliseconds on two CPU
    cores: about 3.9 M parameters (15.5 MB in float32). Weights are random, drawn from ``seed``.
    """

    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 704
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        _positive(
            "ModelConfig",
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
        )
        if self.hidden_size % self.num_heads:
            raise EngineConfigError(
                f"ModelConfig.hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_heads ({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise EngineConfigError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise EngineConfigError(f"ModelConfig head_dim ({self.head_dim}) must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        """Width of one token's keys (and of its values) in one layer."""
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (attention, MLP, two norms)."""
        h = self.hidden_size
        attn = h * (h + 2 * self.kv_dim) + h * h
        mlp = 3 * h * self.intermediate_size
        return attn + mlp + 2 * h

    @property
    def num_params(self) -> int:
        """All parameters, embeddings included."""
        head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return (
            self.vocab_size * self.hidden_size
            + self.num_layers * self.layer_params
            + self.hidden_size
            + head
        )

    @classmethod
    def from_hf_config(
        cls, source: str | Path | Mapping[str, Any], **overrides: Any
    ) -> ModelConfig:
        """Read the shape from a Hugging Face ``config.json`` (a path, its folder, or the dict).

        Understands the Llama/Mistral/Qwen2 field names. Weights stay random: only the shape is
        taken. ``overrides`` replace fields after reading (e.g. ``seed=1``).
        """
        where = "config"
        if isinstance(source, Mapping):
            data: Mapping[str, Any] = source
        else:
            path = Path(source)
            if path.is_dir():
                path = path / "config.json"
            where = str(path)
            try:
                loaded = json.loads(path.read_text())
            except OSError as exc:
                raise EngineConfigError(f"{where}: cannot read: {exc.strerror}") from exc
            except json.JSONDecodeError as exc:
                raise EngineConfigError(
                    f"{where}: not JSON: {exc.msg} at line {exc.lineno}"
                ) from exc
            if not isinstance(loaded, dict):
                raise EngineConfigError(f"{where}: expected a JSON object")
            data = loaded
        fields: dict[str, Any] = {}
        names = {
            "vocab_size": ("vocab_size",),
            "hidden_size": ("hidden_size", "n_embd", "d_model"),
            "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
            "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
            "num_heads": ("num_attention_heads", "n_head", "num_heads"),
            "num_kv_heads": ("num_key_value_heads", "num_kv_heads"),
            "max_position_embeddings": ("max_position_embeddings", "n_positions"),
            "rope_theta": ("rope_theta",),
            "rms_norm_eps": ("rms_norm_eps", "layer_norm_eps"),
            "tie_word_embeddings": ("tie_word_embeddings",),
        }
        for field, keys in names.items():
            for key in keys:
                if key in data and data[key] is not None:
                    fields[field] = data[key]
                    break
        for required in ("vocab_size", "hidden_size", "num_layers", "num_heads"):
            if required not in fields:
                raise EngineConfigError(f"{where}: missing {names[required][0]!r}")
        for field, value in fields.items():
            if field == "tie_word_embeddings":
                ok = isinstance(value, bool)
                kind = "a boolean"
            elif field in ("rope_theta", "rms_norm_eps"):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                kind = "a number"
                value = float(value) if ok else value
            else:
                ok = isinstance(value, int) and not isinstance(value, bool)
                kind = "an integer"
            if not ok:
                raise EngineConfigError(
                    f"{where}: {names[field][0]!r} must be {kind}, got {value!r}"
                )
            fields[field] = value
        fields.setdefault("num_kv_heads", fields["num_heads"])
        fields.setdefault("intermediate_size", 4 * fields["hidden_size"])
        fields.update(overrides)
        try:
            return cls(**fields)
        except EngineConfigError as exc:
            raise EngineConfigError(f"{where}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler, cache and placement policy.

    ``num_blocks`` KV blocks of ``block_size`` tokens each form the cache; ``max_num_seqs`` caps the
    running set and ``max_num_batched_tokens`` the tokens computed per step (prefill chunks plus
    decode tokens). ``watermark`` is the fraction of blocks kept free when admitting new work, so
    running sequences have room to grow. ``preemption="recompute"`` keeps a preempted sequence's
    generated tokens and recomputes prompt + generated on resume; ``"restart"`` discards them
    (the naive baseline) and regenerates from the prompt, one decode step per token, but the
    positions it had already streamed are replayed (forced to the tokens handed out, not
    re-sampled), so a client never sees a token twice or one the final output contradicts. ``scheduling="static"`` admits a new batch only when the running set is
    empty. ``num_threads`` sets torch's (process-wide) CPU threads when the engine is built; None means
    the FLEETWATCH_ENGINE_THREADS environment variable, else 1 on CPU.
    ``max_waiting`` bounds the waiting queue; arrivals beyond it are rejected.
    """

    block_size: int = 16
    num_blocks: int = 2048
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    watermark: float = 0.01
    preemption: Literal["recompute", "restart"] = "recompute"
    scheduling: Literal["continuous", "static"] = "continuous"
    replica: str = "replica-0"
    model_name: str = "reference"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "bfloat16", "float64"] = "float32"
    seed: int = 0
    max_waiting: int | None = None
    num_threads: int | None = None

    def __post_init__(self) -> None:
        _positive(
            "EngineConfig",
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
        )
        if not 0.0 <= self.watermark < 1.0:
            raise EngineConfigError(
                f"EngineConfig.watermark must be in [0, 1), got {self.watermark!r}"
            )
        choices: dict[str, tuple[str, ...]] = {
            "preemption": ("recompute", "restart"),
            "scheduling": ("continuous", "static"),
            "device": ("auto", "cpu", "cuda"),
            "dtype": DTYPES,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise EngineConfigError(
                    f"EngineConfig.{name} must be one of {', '.join(allowed)}; got {value!r}"
                )
        if self.max_waiting is not None and self.max_waiting < 0:
            raise EngineConfigError(
                f"EngineConfig.max_waiting must be >= 0, got {self.max_waiting!r}"
            )
        if self.num_threads is not None and self.num_threads < 1:
            raise EngineConfigError(
                f"EngineConfig.num_threads must be >= 1, got {self.num_threads!r}"
            )
        if not self.replica or not self.model_name:
            raise EngineConfigError("EngineConfig.replica and model_name must be non-empty")

    @property
    def num_slots(self) -> int:
        """KV capacity in tokens."""
        return self.block_size * self.num_blocks


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Faults for fleet experiments; all off by default.

    ``slowdown=k`` stretches each step to k times its compute time (like a throttled GPU);
    ``error_rate`` fails that fraction of requests (seeded by ``seed``) with status "error" and
    error type "InjectedFault"; every ``stall_every_steps`` steps the loop stalls ``stall_s`` seconds.
    """

    slowdown: float = 1.0
    error_rate: float = 0.0
    stall_every_steps: int = 0
    stall_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.slowdown < 1.0:
            raise EngineConfigError(f"FaultConfig.slowdown must be >= 1, got {self.slowdown!r}")
        if not 0.0 <= self.error_rate <= 1.0:
            raise EngineConfigError(
                f"FaultConfig.error_rate must be in [0, 1], got {self.error_rate!r}"
            )
        if self.stall_every_steps < 0 or self.stall_s < 0:
            raise EngineConfigError("FaultConfig.stall_every_steps and stall_s must be >= 0")

    @property
    def active(self) -> dict[str, float]:
        """The faults that are on, by name, with their setting (empty when healthy)."""
        out: dict[str, float] = {}
        if self.slowdown != 1.0:
            out["slowdown"] = self.slowdown
        if self.error_rate > 0:
            out["error_rate"] = self.error_rate
        if self.stall_every_steps > 0 and self.stall_s > 0:
            out["stall_every_steps"] = float(self.stall_every_steps)
            out["stall_s"] = self.stall_s
        return out


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Greedy when ``temperature`` is 0; otherwise temperature + nucleus (top-p) sampling.

    With ``seed`` set, the token at each output position depends only on (seed, position, logits),
    so a preempted and resumed request samples the same tokens as an uninterrupted one.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise EngineConfigError(
                f"SamplingParams.temperature must be >= 0, got {self.temperature!r}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise EngineConfigError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
