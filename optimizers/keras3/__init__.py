"""This library's optimizers as Keras 3 optimizers (``keras.optimizers.Optimizer`` subclasses).

Keras 3 models (``import keras``: TensorFlow 2.16+'s ``tf.keras``) take these::

    import keras
    from optimizers import keras3 as optimizers

    model.compile(optimizer=optimizers.AdamW(weight_decay=1e-4, learning_rate=1e-3), loss=...)

Each class has the name, signature and numbers of the Keras 2 class of the same name (the same
rule runs: :class:`~optimizers.UpdateRule`'s hooks, its kernels and compiled steps, through
``optimizers/execution.py``), plus Keras 3's own options: ``clipnorm``, ``clipvalue``,
``global_clipnorm``, ``use_ema``, ``ema_momentum``, ``ema_overwrite_frequency``,
``loss_scale_factor`` and ``gradient_accumulation_steps``; a variable may follow its own rule
(``updaters=``, ``optimizers.set_updater``). :func:`keras3_class` makes the Keras 3 class of any
:class:`~optimizers.CustomOptimizerV2` subclass that uses only the public hooks.

The wrappers ``MovingAverage``, ``SWA`` and ``Lookahead`` wrap any Keras 3 optimizer, with the
Keras 2 wrappers' arguments and numbers (:func:`keras3_wrapper_class` makes the Keras 3 class of
any :class:`~optimizers.OptimizerWrapper` subclass); ``MultiOptimizer`` pairs Keras 3 optimizers
with groups of layers; ``MovingAverageCallback`` and ``AverageModelCheckpoint`` evaluate and
save the averages. ``SAMModel`` trains a Keras 3 model with Sharpness-Aware Minimization steps in ``fit``
(``sam_gradients`` in custom loops).

Runs on Keras 3's TensorFlow backend (``KERAS_BACKEND=tensorflow``, the default).
The optimizer's learning rate is Keras 3's (a float, a ``keras.optimizers.schedules``
schedule, or a callable; ``ReduceLROnPlateau`` and ``LearningRateScheduler`` set it); every other
hyperparameter is the rule's, read and set as an attribute of the same name. Weight decay is
the rule's (TensorFlow Addons' by default, ``scale_weight_decay_by_lr=True`` for Keras 3's),
never Keras 3's own on top of it.
"""

from __future__ import annotations

try:
    import keras
except ImportError as error:  # pragma: no cover - a stack without Keras 3
    raise ImportError("optimizers.keras3 needs Keras 3 (`pip install keras`, brought by TensorFlow 2.16+)") from error
if not keras.__version__.startswith("3"):  # TensorFlow <= 2.15 brings Keras 2 as `keras`
    raise ImportError(f"optimizers.keras3 needs Keras 3; this environment has Keras {keras.__version__}: "
                      "use the Keras 2 classes of `optimizers` instead")

from optimizers import rules as _rules  # noqa: E402
from optimizers.keras3.callbacks import AverageModelCheckpoint, MovingAverageCallback  # noqa: E402
from optimizers.keras3.multi_optimizer import MultiOptimizer  # noqa: E402
from optimizers.keras3.rule_optimizer import keras3_class  # noqa: E402
from optimizers.keras3.sam_model import SAMModel  # noqa: E402
from optimizers.keras3.wrapper_optimizer import keras3_wrapper_class  # noqa: E402
from optimizers.sam import sam_gradients  # noqa: E402
from optimizers.wrappers.lookahead import Lookahead as _Lookahead  # noqa: E402
from optimizers.wrappers.moving_average import MovingAverage as _MovingAverage  # noqa: E402
from optimizers.wrappers.swa import SWA as _SWA  # noqa: E402

_WRAPPERS = (_Lookahead, _MovingAverage, _SWA)

__all__ = ["AverageModelCheckpoint", "MovingAverageCallback", "MultiOptimizer", "SAMModel", "keras3_class",
           "keras3_wrapper_class", "sam_gradients",
           *_rules.__all__, *(wrapper.__name__ for wrapper in _WRAPPERS)]

for _name in _rules.__all__:
    globals()[_name] = keras3_class(getattr(_rules, _name))
for _wrapper in _WRAPPERS:
    globals()[_wrapper.__name__] = keras3_wrapper_class(_wrapper)
del _name, _wrapper
