"""Lookahead and SWA: their cost over the inner Adam alone, and against TFA's wrappers.

* Default stack: ``Lookahead(Adam)`` and ``SWA(Adam)`` (XLA, the default)
  against the fused built-in Adam alone, 8M float32 parameters. Between
  synchronizations and snapshots the wrappers read and write nothing, so the
  goal is <= 1.2x Adam alone.
* ``python benchmarks/bench_wrappers.py --tfa NAME PERIOD`` (run by ``make
  bench`` when .venv-tf215 exists) times ours against TFA's ``Lookahead`` /
  ``SWA`` in the same TF 2.15 process, both around the built-in Adam. Goal:
  ours faster (<= 1). SWA is timed at snapshot steps (``average_period=1``),
  where XLA fuses TFA's three passes into one, and with the default period
  (mostly steps without a snapshot, where each costs one cheap branch per
  variable: parity, goal <= 1.1).
"""

from __future__ import annotations

import os
import sys

from benchmarks.common import TFA_PYTHON, Case, compare, tfa_output

PAIRS = ("Lookahead", "SWA")


def _adam():
    from optimizers import keras

    return keras.optimizers.legacy.Adam(1e-3)


def _ours(name: str, inner, period: int = 10):
    from optimizers.wrappers.lookahead import Lookahead
    from optimizers.wrappers.swa import SWA

    return Lookahead(inner) if name == "Lookahead" else SWA(inner, average_period=period)


def _tfa(name: str, inner, period: int = 10):
    import tensorflow_addons as tfa

    return tfa.optimizers.Lookahead(inner) if name == "Lookahead" else tfa.optimizers.SWA(inner, average_period=period)


def cases() -> list[Case]:
    out = [Case(f"{name}(Adam), XLA / Adam alone, 8M f32", "tf_keras legacy Adam", 1.2,
                lambda name=name: compare(lambda: _ours(name, _adam()), _adam, repeats=30)) for name in PAIRS]
    if os.path.exists(TFA_PYTHON):
        for name, period, goal, what in [("Lookahead", 10, 1.0, ""), ("SWA", 1, 1.0, ", snapshot every step"),
                                         ("SWA", 10, 1.1, ", average_period=10")]:
            out.append(Case(f"{name}(Adam) / TFA {name}(Adam){what}, 8M f32 (TF 2.15)", f"TFA {name}", goal,
                            lambda name=name, period=period: tfa_peer(name, period)))
    return out


def tfa_peer(name: str, period: int) -> tuple[float, float]:
    """Ours vs TFA's wrapper, both around the built-in Adam, in the TF 2.15 + TFA environment."""
    ours, peer = tfa_output(__file__, name, str(period)).split()
    return float(ours), float(peer)


if __name__ == "__main__" and "--tfa" in sys.argv:
    wrapper, every = sys.argv[sys.argv.index("--tfa") + 1], int(sys.argv[sys.argv.index("--tfa") + 2])
    print(*compare(lambda: _ours(wrapper, _adam(), every), lambda: _tfa(wrapper, _adam(), every), repeats=30))
