"""Answer lengths: how many output tokens an answer has, fixed or drawn from a heavy-tailed law whose mean is
the configured `output_tokens` (seeded, capped). Shared by the simulator and the benchmark's workload.

    fixed       always the mean
    lognormal   exp(N(mu, sigma)), mu = ln(mean) - sigma^2 / 2 (so the mean is kept)
    pareto      x_m / U^(1/alpha), x_m = mean (alpha - 1) / alpha (alpha > 1 keeps a finite mean)

A draw is rounded, at least 1 and at most `cap` (None: 20 times the mean). LLM answers are heavy-tailed:
most are short, a few are very long, and those few hold a slot for most of the time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

LENGTH_SHAPES: Final = ("fixed", "lognormal", "pareto")
DEFAULT_CAP_FACTOR: Final = 20


@dataclass(frozen=True, slots=True)
class Lengths:
    """The law of output lengths (`sigma` for lognormal, `alpha` for pareto)."""

    shape: str = "fixed"
    sigma: float = 1.0
    alpha: float = 1.5
    cap: int | None = None

    def validate(self, name: str = "output_lengths") -> None:
        """ValueError naming the first bad field (of `name`: the setting these lengths are)."""
        if self.shape not in LENGTH_SHAPES:
            raise ValueError(f"{name}.shape: one of {', '.join(LENGTH_SHAPES)}, got {self.shape!r}")
        if not 0 < self.sigma <= 5:
            raise ValueError(f"{name}.sigma: must be in (0, 5], got {self.sigma!r}")
        if not 1 < self.alpha <= 50:
            raise ValueError(f"{name}.alpha: must be in (1, 50] (a finite mean), got {self.alpha!r}")
        if self.cap is not None and (
            isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 1
        ):
            raise ValueError(f"{name}.cap: expected an integer >= 1, got {self.cap!r}")

    def draw(self, mean: float, rng: random.Random) -> int:
        """One answer's output tokens (0 when the mean is 0; `fixed` draws nothing from `rng`)."""
        if mean <= 0:
            return 0
        if self.shape == "fixed":
            return round(mean)
        if self.shape == "lognormal":
            value = rng.lognormvariate(math.log(mean) - self.sigma**2 / 2, self.sigma)
        else:
            value = mean * (self.alpha - 1) / self.alpha / (1.0 - rng.random()) ** (1 / self.alpha)
        cap = self.cap if self.cap is not None else max(1, round(DEFAULT_CAP_FACTOR * mean))
        return max(1, min(cap, round(value)))

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape, "sigma": self.sigma, "alpha": self.alpha, "cap": self.cap}

    @classmethod
    def from_json(cls, data: Any) -> Lengths:
        """From ``{"shape", "sigma", "alpha", "cap"}`` (all optional) or from :func:`parse_lengths`'s text."""
        if isinstance(data, Lengths):
            lengths = data
        elif isinstance(data, str):
            return parse_lengths(data)
        elif isinstance(data, Mapping):
            unknown = sorted(set(data) - {"shape", "sigma", "alpha", "cap"})
            if unknown:
                raise ValueError(f"output_lengths: unknown keys {', '.join(unknown)}")
            try:
                lengths = cls(
                    shape=str(data.get("shape", "fixed")),
                    sigma=_number(data.get("sigma", 1.0)),
                    alpha=_number(data.get("alpha", 1.5)),
                    cap=data.get("cap"),
                )
            except TypeError:
                raise ValueError(f"output_lengths: expected numbers, got {dict(data)!r}") from None
        else:
            raise ValueError(f"output_lengths: expected an object or SHAPE[:PARAM[:CAP]], got {data!r}")
        lengths.validate()
        return lengths


def parse_lengths(text: str) -> Lengths:
    """``SHAPE[:PARAM[:CAP]]``: ``fixed``, ``lognormal:1.0:300`` (sigma), ``pareto:1.5`` (alpha)."""
    shape, *rest = text.split(":")
    if len(rest) > 2:
        raise ValueError(f"output_lengths: expected SHAPE[:PARAM[:CAP]], got {text!r}")
    try:
        param = float(rest[0]) if rest and rest[0] else None
        cap = int(rest[1]) if len(rest) == 2 else None
    except ValueError:
        raise ValueError(f"output_lengths: expected numbers in {text!r}") from None
    fields: dict[str, Any] = {"shape": shape, "cap": cap}
    if param is not None:
        fields["alpha" if shape == "pareto" else "sigma"] = param
    lengths = Lengths(**fields)
    lengths.validate()
    return lengths


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError
    return float(value)
