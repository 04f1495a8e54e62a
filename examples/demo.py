"""``make demo``: train a real Keras 2 model with this library, against plain Adam.

Run from the repository root as ``python examples/demo.py [--epochs N] [--output-dir
DIR]``; it imports ``optimizers`` as an installed package (``pip install -e .``). It
trains a small convolutional network on scikit-learn's bundled digits (no download)
twice from the same initial weights:

* with ``MovingAverage(AdamW(...))`` and a variable updater: the model carries
  an activation statistic (the running max |activation|, as fp8 training keeps)
  that is *overwritten* with its "gradient" instead of being trained;
* with tf_keras's built-in legacy ``Adam``.

It shows Keras' progress bars, prints a table of test loss and accuracy (the
trained and the averaged weights of the first run, and plain Adam), and writes a
plot of the curves to ``demo_output/demo_curves.png``. A couple of minutes on two
CPU cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import optimizers  # noqa: E402
from optimizers import keras  # noqa: E402

LEARNING_RATE = 3e-3


class ActivationAbsMax(keras.layers.Layer):
    """Identity; records max |x| of the last training batch in ``amax``.

    The value reaches the optimizer as ``amax``'s gradient, and the variable is
    marked ``overwrite_with_gradient`` (the Keras 3 convention): every
    ``CustomOptimizerV2`` stores it as is, with no learning rate, decay or slot.
    """

    def build(self, input_shape):
        self.amax = self.add_weight(name="amax", shape=(), initializer="zeros", trainable=True)
        self.amax.overwrite_with_gradient = True

    def call(self, x):
        @tf.custom_gradient
        def record(x, amax):
            def grad(dy):
                return dy, tf.reduce_max(tf.abs(x))

            return tf.identity(x), grad

        return record(x, self.amax)


def load_data(seed: int = 0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]  # 1,797 images of 8x8x1
    return train_test_split(x, digits.target, test_size=0.25, random_state=seed, stratify=digits.target)


def make_model(with_statistic: bool, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)  # both runs start from the same weights
    layers = [
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv"),
        keras.layers.MaxPooling2D(name="pool"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(128, activation="relu", name="hidden"),
    ]
    if with_statistic:
        layers.append(ActivationAbsMax(name="hidden_amax"))
    layers += [keras.layers.Dropout(0.25, name="dropout"), keras.layers.Dense(10, name="logits")]
    return keras.Sequential(layers, name="digits_cnn")


def train(model, optimizer, data, epochs: int, callbacks=()) -> dict:
    x_train, x_test, y_train, y_test = data
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x_train, y_train, validation_data=(x_test, y_test), epochs=epochs, batch_size=32,
                        verbose=1, callbacks=list(callbacks))
    return history.history


def plot(curves: dict, path: str) -> None:
    # Imported here, not at module level: importing this module (as the tests do)
    # or rejecting bad arguments needs no matplotlib.
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label, (loss, accuracy, style) in curves.items():
        epochs = np.arange(1, len(loss) + 1)
        ax1.plot(epochs, loss, style, label=label)
        ax2.plot(epochs, accuracy, style, label=label)
    ax1.set(xlabel="epoch", ylabel="test loss", yscale="log", title="test loss")
    ax2.set(xlabel="epoch", ylabel="test accuracy", title="test accuracy")
    ax2.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.grid(alpha=0.3)
    fig.suptitle("digits, small CNN: AdamW + MovingAverage (+ an overwrite-with-gradient statistic) vs Adam")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs per run (default 20)")
    parser.add_argument("--output-dir", default="demo_output", help="where the plot goes (default demo_output)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1. Received: --epochs={args.epochs}")
    start = time.time()
    data = load_data()
    x_test, y_test = data[1], data[3]
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__} (Keras 2); digits: "
          f"{len(data[0])} training and {len(x_test)} test images\n")

    print("== 1/2: MovingAverage(AdamW) with an overwrite-with-gradient statistic ==")
    ours = make_model(with_statistic=True)
    optimizer = optimizers.MovingAverage(
        optimizers.AdamW(weight_decay=1e-4, learning_rate=LEARNING_RATE, exclude_from_weight_decay=["bias"]),
        average_decay=0.99, dynamic_decay=True)
    ours_history = train(ours, optimizer, data, args.epochs,
                         callbacks=[optimizers.MovingAverageCallback(validation_data=(x_test, y_test))])
    amax = ours.get_layer("hidden_amax").amax
    updater = optimizer.inner_optimizer.updater_for(amax)
    raw_loss, raw_accuracy = ours.evaluate(x_test, y_test, verbose=0)
    with optimizers.averaged_weights(ours):
        avg_loss, avg_accuracy = ours.evaluate(x_test, y_test, verbose=0)

    print("\n== 2/2: tf_keras's built-in Adam ==")
    plain = make_model(with_statistic=False)
    plain_history = train(plain, keras.optimizers.legacy.Adam(learning_rate=LEARNING_RATE), data, args.epochs)
    adam_loss, adam_accuracy = plain.evaluate(x_test, y_test, verbose=0)

    rows = [
        ("tf_keras legacy Adam (built-in)", adam_loss, adam_accuracy),
        ("MovingAverage(AdamW), trained weights", raw_loss, raw_accuracy),
        ("MovingAverage(AdamW), averaged weights", avg_loss, avg_accuracy),
    ]
    print(f"\nResults after {args.epochs} epochs, learning rate {LEARNING_RATE}, on the {len(x_test)} test images:\n")
    print(f"  {'optimizer':40} {'test loss':>10} {'test accuracy':>14}")
    print(f"  {'-' * 40} {'-' * 10} {'-' * 14}")
    for name, loss, accuracy in rows:
        print(f"  {name:40} {loss:10.4f} {accuracy:14.4f}")
    print(f"\n  {amax.name} follows {updater}: it holds the max |activation| of the last batch, "
          f"{float(amax.numpy()):.4f}; it has no optimizer slot and no average.")

    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.abspath(os.path.join(args.output_dir, "demo_curves.png"))
    plot({
        "tf_keras Adam": (plain_history["val_loss"], plain_history["val_accuracy"], "C0-"),
        "MovingAverage(AdamW), trained weights": (ours_history["val_loss"], ours_history["val_accuracy"], "C1-"),
        "MovingAverage(AdamW), averaged weights": (ours_history["average_loss"], ours_history["average_accuracy"],
                                                   "C2-"),
    }, path)
    print(f"\nWrote the curves to {path}  ({time.time() - start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
