"""The pre-build of an unbuilt Keras model (``keras_build.build``) for a model whose own
``train_step`` unpacks its batches (a dict of features and labels, as in the Keras guide
"Customizing what happens in fit()"), in both flavours: Keras 3 and tf_keras."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.tf


def dict_model(keras: Any, tf: Any) -> Any:
    """A model that is only ever called on ``batch["features"]``."""

    class Classifier(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.out = keras.layers.Dense(3)
            self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        def call(self, inputs: Any) -> Any:
            return self.out(inputs)

        def train_step(self, data: Any) -> dict[str, Any]:
            with tf.GradientTape() as tape:
                loss = self.loss_fn(data["label"], self(data["features"], training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
            return {"loss": loss}

    model = Classifier()
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    return model


@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_a_model_with_its_own_train_step_is_built_without_a_step(flavour: str) -> None:
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip(flavour)
    from tiresias_launch import keras_build
    from tiresias_launch.keras_data import Source

    class DictSource(Source):
        def sample(self) -> Any:
            return {
                "features": tf.TensorSpec([None, 5], tf.float32),
                "label": tf.TensorSpec([None], tf.int64),
            }

    model = dict_model(keras, tf)
    keras_build.build(model, DictSource())
    assert [tuple(v.shape) for v in model.trainable_variables] == [(5, 3), (3,)]
    assert int(model.optimizer.iterations) == 0  # traced, not run
    assert len(model.optimizer.variables) > 1  # its slots exist: a checkpoint restores them
    weights = [w.copy() for w in model.get_weights()]
    features = tf.random.stateless_normal([8, 5], seed=[1, 2])
    data = {"features": features, "label": tf.cast(features[:, 0] > 0, tf.int64)}
    model.fit(data, batch_size=4, epochs=1, verbose=0)  # trains the variables built
    assert int(model.optimizer.iterations) == 2
    assert any((w != v).any() for w, v in zip(weights, model.get_weights(), strict=True))
