"""Choosing the next token: greedy (on the GPU, see ops.LastToken) or sampled on the host.

Sampling needs the last position's logits on the host ([vocab] floats per step); greedy
decoding never reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.errors import InputError


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_k 0 and top_p 1.0 disable those filters."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise InputError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            raise InputError(f"top_k must be an integer >= 0, got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


class Sampler:
    """Draws tokens from last-position logits; seeded, so a run is reproducible."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def __call__(self, logits: np.ndarray) -> int:
        return sample(logits, self.params, self.rng)


def filtered_probabilities(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, probabilities) left after temperature, top-k and top-p, most likely first."""
    scaled = np.asarray(logits, dtype=np.float64).reshape(-1) / params.temperature
    order = np.argsort(-scaled, kind="stable")  # ties: lower token id first, like argmax
    if params.top_k:
        order = order[:params.top_k]
    kept = scaled[order]
    probs = np.exp(kept - kept[0])
    probs /= probs.sum()
    if params.top_p < 1.0:
        # Keep the smallest prefix whose mass reaches top_p (the token crossing it included).
        cutoff = int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1
        order, probs = order[:cutoff], probs[:cutoff] / probs[:cutoff].sum()
    return order, probs


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    if params.greedy:
        return int(np.argmax(logits))
    ids, probs = filtered_probabilities(logits, params)
    return int(ids[rng.choice(len(ids), p=probs)])
